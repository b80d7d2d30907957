//! `toolcell policy` and `toolcell schema`: the policy as TOML, its check, one decision explained,
//! and the tools' schemas for a role.

use super::*;

pub(super) fn schema(runtime: &Runtime, role: &str, format: &str, strict: bool) -> anyhow::Result<ExitCode> {
    if let Some(policy) = runtime.policy()
        && policy.role(role).is_none()
    {
        let roles: Vec<&str> = policy.roles().map(|role| role.name()).collect();
        anyhow::bail!("the policy `{}` has no role `{role}`; its roles are: {}", policy.file(), roles.join(", "));
    }
    let format = match (toolcell_host::schemas::Format::from_name(format), strict) {
        (Some(toolcell_host::schemas::Format::OpenAi), true) => toolcell_host::schemas::Format::OpenAiStrict,
        (Some(_), true) => anyhow::bail!("`--strict` is OpenAI's strict mode: use it with `--format openai`"),
        (Some(format), false) => format,
        (None, _) => anyhow::bail!("unknown format `{format}`"),
    };
    let rendered = toolcell_host::schemas::render(format, toolcell_host::tools_for_role(runtime, role));
    writeln!(std::io::stdout(), "{}", serde_json::to_string_pretty(&rendered)?)?;
    Ok(ExitCode::SUCCESS)
}

/// `toolcell policy show`: the effective policy's text, once it has loaded as `policy check`
/// would load it.
pub(super) fn policy_show(args: &RuntimeArgs) -> anyhow::Result<ExitCode> {
    let (name, text) = match &args.policy {
        None => (DEFAULT_POLICY_NAME.to_owned(), DEFAULT_POLICY.to_owned()),
        Some(path) => match builtin_policy_name(path) {
            Some(name) => {
                let (shown, text) = toolcell_host::builtin_policy(name).with_context(|| {
                    format!("there is no shipped policy `{name}`; the shipped ones are `builtin:default` and `builtin:workflow`")
                })?;
                (shown.to_owned(), text.to_owned())
            }
            None => (
                path.display().to_string(),
                std::fs::read_to_string(path).with_context(|| format!("cannot read the policy `{}`", path.display()))?,
            ),
        },
    };
    build_runtime(args)?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "# The effective policy, from {name}. To change it, copy it to a file and pass --policy FILE.")?;
    write!(stdout, "{text}")?;
    Ok(ExitCode::SUCCESS)
}

pub(super) fn policy_check(args: &RuntimeArgs, file: &std::path::Path) -> anyhow::Result<ExitCode> {
    let checked = RuntimeArgs {
        policy: Some(file.to_path_buf()),
        state_dir: None,
        plugin_dir: plugin_dir(args),
        cache_dir: args.cache_dir.clone(),
        no_cache: args.no_cache,
        verbose: args.verbose,
        store: None,
        resolve: args.resolve.clone(),
    };
    let runtime = match build_runtime(&checked) {
        Ok(runtime) => runtime,
        Err(error) => match error.downcast_ref::<Error>() {
            Some(Error::Policy(policy_error)) => {
                // The operator is told the file as they gave it (agents only ever see its name).
                let shown = toolcell_runtime::PolicyError { file: file.display().to_string(), ..policy_error.clone() };
                writeln!(std::io::stderr(), "{shown}")?;
                return Ok(ExitCode::from(EXIT_TOOL_ERROR));
            }
            _ => return Err(error),
        },
    };
    let policy = runtime.policy().context("the runtime was built with a policy")?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{}: ok", policy.file())?;
    for role in policy.roles() {
        let tools = role.tools().map_or_else(|| "every tool".to_owned(), |tools| tools.join(", "));
        writeln!(stdout, "  role `{}`: {tools}", role.name())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// What `policy explain` is asked.
pub(super) struct Explain<'a> {
    pub(super) role: &'a str,
    pub(super) access: &'a str,
    pub(super) path: &'a str,
    pub(super) tool: Option<&'a str>,
    pub(super) task: Option<&'a str>,
    pub(super) json: bool,
}

pub(super) fn policy_explain(runtime: &Runtime, asked: &Explain<'_>) -> anyhow::Result<ExitCode> {
    let role_name = asked.role;
    let policy = runtime.policy().context("the runtime was built with a policy")?;
    let Some(policy_role) = policy.role(role_name) else {
        let roles: Vec<&str> = policy.roles().map(|role| role.name()).collect();
        anyhow::bail!("the policy `{}` has no role `{role_name}`; its roles are: {}", policy.file(), roles.join(", "));
    };
    let task = asked.task.map(TaskBinding::parse).transpose().map_err(anyhow::Error::msg)?;
    let tool = match asked.tool {
        Some(tool) => {
            Some(runtime.canonical_tool(tool).with_context(|| format!("there is no tool `{tool}`; `toolcell tools` lists them"))?)
        }
        None => None,
    };
    let may_call = tool.map(|tool| policy_role.may_call(tool));
    // The role as a call of `tool` by a session bound to `task` sees it (rules naming the tool,
    // the task's paths); without them, the rules that name no tool.
    let role = policy.bind(role_name, tool.unwrap_or(""), task.as_ref()).context("the role's rules cannot be bound")?;
    let access = Access::from_name(asked.access).with_context(|| format!("unknown access `{}`", asked.access))?;
    // Lexical only: symlinks are resolved when a real call touches the workspace.
    let canonical = toolcell_policy::join_lexically(".", asked.path);
    let outside = canonical.is_none();
    let (effect, shown_path, rule, line) = match canonical {
        Some(canonical) => {
            let decision = policy.decide(&role, access, &canonical);
            (decision.effect.to_string(), canonical, decision.rule.to_string(), decision.line)
        }
        None => ("deny".to_owned(), asked.path.to_owned(), "workspace-boundary".to_owned(), None),
    };
    let denied = effect == "deny" || may_call == Some(false);
    let mut stdout = std::io::stdout().lock();
    if asked.json {
        let mut document = json!({
            "effect": effect,
            "access": access.as_str(),
            "path": shown_path,
            "role": role.name(),
            "rule": rule,
            "policy": policy.file(),
            "line": line,
        });
        if let (Some(tool), Some(may_call)) = (tool, may_call) {
            document["tool"] = json!({ "name": tool, "may_call": may_call });
        }
        writeln!(stdout, "{}", serde_json::to_string_pretty(&document)?)?;
    } else {
        if outside {
            writeln!(stdout, "deny: `{shown_path}` is outside the workspace (rule `workspace-boundary`)")?;
        } else {
            let location = line.map(|line| format!(", {} line {line}", policy.file())).unwrap_or_default();
            writeln!(stdout, "{effect}: {access} of `{shown_path}` by role `{}` (rule `{rule}`{location})", role.name())?;
        }
        if let (Some(tool), Some(may_call)) = (tool, may_call) {
            let verdict = if may_call { "may call it" } else { "may not call it (its `tools` list does not name it)" };
            writeln!(stdout, "tool `{tool}`: role `{role_name}` {verdict}")?;
        }
    }
    Ok(if denied { ExitCode::from(EXIT_TOOL_ERROR) } else { ExitCode::SUCCESS })
}
