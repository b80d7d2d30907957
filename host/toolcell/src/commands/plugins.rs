//! `toolcell conformance` and `toolcell tools`: checking a component, adding it to the plugin
//! directory (with the pin to put in the policy), removing it, listing the tools.

use super::*;

pub(super) fn conformance(
    args: &RuntimeArgs,
    component: &std::path::Path,
    format: &str,
    stub_imports: &[String],
) -> anyhow::Result<ExitCode> {
    let wasm = std::fs::read(component).with_context(|| format!("cannot read `{}`", component.display()))?;
    let options = toolcell_conformance::Options {
        cache_dir: if args.no_cache { None } else { args.cache_dir.clone().or_else(toolcell_runtime::default_cache_dir) },
        stub_imports: stub_imports.to_vec(),
    };
    let report = toolcell_conformance::check(&component.display().to_string(), &wasm, &options);
    let mut stdout = std::io::stdout().lock();
    match format {
        "json" => writeln!(stdout, "{}", serde_json::to_string_pretty(&report)?)?,
        "junit" => write!(stdout, "{}", report.junit())?,
        _ => write!(stdout, "{}", report.render())?,
    }
    Ok(if report.passed() { ExitCode::SUCCESS } else { ExitCode::from(EXIT_TOOL_ERROR) })
}

/// `toolcell tools add FILE` or `toolcell tools add oci://…`.
pub(super) fn tools_add(args: &RuntimeArgs, component: &str, force: bool, insecure: bool) -> anyhow::Result<ExitCode> {
    if component.starts_with("oci://") {
        return registry::add(args, component, force, insecure);
    }
    let path = std::path::Path::new(component);
    registry::refuse_unsigned_file(args, component)?;
    let wasm = std::fs::read(path).with_context(|| format!("cannot read `{}`", path.display()))?;
    add_component(args, &path.display().to_string(), wasm, force, None)
}

/// Check and install `wasm` (from `origin`: a file or a registry reference), then print the
/// pin to put in the policy, with `source` (the pinned registry reference) if given.
pub(super) fn add_component(
    args: &RuntimeArgs,
    origin: &str,
    wasm: Vec<u8>,
    force: bool,
    source: Option<&str>,
) -> anyhow::Result<ExitCode> {
    let directory = plugin_dir(args).context("no plugin directory: pass --plugin-dir or --state-dir")?;
    let _lock = lock_plugins(&directory)?;
    // The same bytes installed already: nothing to do.
    let installed = std::fs::read_dir(&directory)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "wasm"))
        .find(|path| std::fs::read(path).is_ok_and(|bytes| bytes == wasm));
    if let Some(installed) = installed {
        writeln!(std::io::stdout(), "`{}` is installed already, with the same bytes; nothing changed", installed.display())?;
        return Ok(ExitCode::SUCCESS);
    }
    // Named by the file or reference given, so that a collision with the installed
    // `plugin:NAME.wasm` names two different things.
    let origin = origin.to_owned();
    // Loaded beside everything else: its imports, description and schema are checked, and a
    // name collision or a pin mismatch is refused before anything is installed.
    let runtime = build_runtime_with(args, Some(Candidate::Added { origin: origin.clone(), wasm: wasm.clone() }), false, &[])?;
    let added = runtime.loaded().iter().find(|loaded| loaded.origin == origin).context("the component was loaded")?;
    let target = directory.join(format!("{}.wasm", added.tool));
    if target.exists() {
        anyhow::bail!(
            "two tool components are named `{tool}`: the installed plugin `{}` and `{origin}`; to replace the installed one with this build, use `toolcell tools update {tool} {origin}` (it shows what changes and updates the pin); to drop it, `toolcell tools remove {tool}`",
            target.display(),
            tool = added.tool
        );
    }
    if !passes_conformance(args, &runtime, added.tool.as_str(), &origin, &wasm, force)? {
        return Ok(ExitCode::from(EXIT_TOOL_ERROR));
    }
    stage(&directory, &wasm, None)
        .and_then(|staged| staged.persist(&target).map(drop).map_err(|error| error.error))
        .with_context(|| format!("cannot install `{}`", target.display()))?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "added `{}` as {}", added.tool, target.display())?;
    writeln!(stdout, "sha256 {}", added.sha256)?;
    // A table the policy has already (its stubs, an older pin) takes the line; a new table
    // pasted beside it would be a duplicate the policy refuses.
    let has_table = runtime
        .policy()
        .is_some_and(|policy| policy.pin(added.tool.as_str()).is_some() || !policy.stub_imports(added.tool.as_str()).is_empty());
    let source_line = source.map(|source| format!("\nsource = \"{source}\"")).unwrap_or_default();
    if has_table {
        writeln!(
            stdout,
            "pin it in the policy's existing [plugins.{}] table (replacing any `sha256`{} there), and give it to the roles that may call it:

sha256 = \"{}\"{source_line}",
            added.tool,
            if source.is_some() { " and `source`" } else { "" },
            added.sha256
        )?;
    } else {
        writeln!(
            stdout,
            "pin it in the policy, and give it to the roles that may call it:

[plugins.{}]
sha256 = \"{}\"{source_line}",
            added.tool, added.sha256
        )?;
    }
    network::show_network(&mut stdout, &runtime, &added.imports, added.tool.as_str(), &wasm)?;
    Ok(ExitCode::SUCCESS)
}

/// Run the conformance suite on `wasm`, the component of `tool` in `runtime` (with the stubs
/// the policy grants it): `false` if a check failed and `force` does not override it; the
/// failures are on stderr.
fn passes_conformance(
    args: &RuntimeArgs,
    runtime: &Runtime,
    tool: &str,
    component: &str,
    wasm: &[u8],
    force: bool,
) -> anyhow::Result<bool> {
    let options = toolcell_conformance::Options {
        cache_dir: if args.no_cache { None } else { args.cache_dir.clone().or_else(toolcell_runtime::default_cache_dir) },
        stub_imports: runtime.policy().map(|policy| policy.stub_imports(tool).to_vec()).unwrap_or_default(),
    };
    let report = toolcell_conformance::check(component, wasm, &options);
    let mut stderr = std::io::stderr().lock();
    for warning in &report.warnings {
        writeln!(stderr, "warning: {warning}")?;
    }
    if report.passed() {
        return Ok(true);
    }
    let failed: Vec<_> = report.checks.iter().filter(|check| !check.passed).collect();
    for check in &failed {
        writeln!(stderr, "{}: conformance check failed: {}: {}", if force { "warning" } else { "error" }, check.name, check.detail)?;
    }
    if !force {
        writeln!(
            stderr,
            "refused: {} conformance check(s) of `{tool}` failed (`toolcell conformance {}` shows them all); fix the tool, or add it anyway with --force",
            failed.len(),
            component
        )?;
    }
    Ok(force)
}

/// `toolcell tools remove NAME`: the plugin's file goes; its pin and role entries are the
/// operator's to remove from the policy.
pub(super) fn tools_remove(args: &RuntimeArgs, name: &str) -> anyhow::Result<ExitCode> {
    let directory = plugin_dir(args).context("no plugin directory: pass --plugin-dir or --state-dir")?;
    let _lock = lock_plugins(&directory)?;
    let target = directory.join(format!("{name}.wasm"));
    let valid = !name.is_empty() && name.bytes().all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'_');
    if !valid || !target.is_file() {
        let mut installed: Vec<String> = std::fs::read_dir(&directory)
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .filter_map(|entry| entry.file_name().to_str().and_then(|file| file.strip_suffix(".wasm")).map(str::to_owned))
            .collect();
        installed.sort();
        let listed = if installed.is_empty() { "none".to_owned() } else { installed.join(", ") };
        anyhow::bail!("no plugin `{}` is installed in `{}`; the installed ones are: {listed}", name.escape_default(), directory.display());
    }
    std::fs::remove_file(&target).with_context(|| format!("cannot remove `{}`", target.display()))?;
    writeln!(
        std::io::stdout(),
        "removed `{name}` ({}); remove its [plugins.{name}] pin and its entries in roles' `tools` from the policy",
        target.display()
    )?;
    Ok(ExitCode::SUCCESS)
}

pub(super) fn tools(runtime: &Runtime, as_json: bool) -> anyhow::Result<ExitCode> {
    let mut stdout = std::io::stdout().lock();
    if as_json {
        let tools: Vec<_> = runtime.tools().collect();
        writeln!(stdout, "{}", serde_json::to_string_pretty(&tools)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    for tool in runtime.tools() {
        let hints = [
            (tool.annotations.read_only, "read-only"),
            (tool.annotations.destructive, "destructive"),
            (tool.annotations.idempotent, "idempotent"),
        ]
        .iter()
        .filter(|(set, _)| *set)
        .map(|(_, name)| *name)
        .collect::<Vec<_>>()
        .join(", ");
        writeln!(stdout, "{} — {} [{hints}]", tool.name, tool.title)?;
        writeln!(stdout, "  {}", tool.description)?;
        writeln!(stdout, "  arguments: {}", serde_json::to_string(&tool.input_schema)?)?;
        writeln!(stdout)?;
    }
    let skipped = runtime.skipped_plugins();
    if !skipped.is_empty() {
        writeln!(stdout, "left out (cannot be loaded, and no role of the policy uses them; not callable):")?;
        for plugin in skipped {
            let shown = |text: &str| toolcell_types::escape_control(text);
            writeln!(stdout, "  {} ({}): {}", shown(&plugin.tool), shown(&plugin.origin), shown(&plugin.reason))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// What a loaded plugin is, for `tools update` to compare.
struct PluginFacts {
    sha256: String,
    imports: Vec<String>,
    info: toolcell_types::ToolInfo,
}

/// The facts of the component loaded from `origin`, or why it did not load.
fn facts_of(runtime: &Runtime, origin: &str) -> Result<PluginFacts, String> {
    if let Some(skipped) = runtime.skipped_plugins().iter().find(|skipped| skipped.origin == origin) {
        return Err(skipped.reason.clone());
    }
    let loaded = runtime.loaded().iter().find(|loaded| loaded.origin == origin).ok_or_else(|| "it is not loaded".to_owned())?;
    let info = runtime.tool(loaded.tool.as_str()).ok_or_else(|| "it is not loaded".to_owned())?;
    Ok(PluginFacts { sha256: loaded.sha256.clone(), imports: loaded.imports.clone(), info: info.clone() })
}

/// `toolcell tools update NAME FILE`: check the new build in the old one's place (under the
/// policy with its new pin), show what changes, then replace the file and the pin; on any
/// failure both stay as they were.
///
/// `component` names the new build (a file or a registry reference) in messages; `new_source`,
/// if given, replaces the pin's `source` too.
pub(super) fn tools_update(
    args: &RuntimeArgs,
    name: &str,
    component: &str,
    wasm: Vec<u8>,
    force: bool,
    new_source: Option<&str>,
) -> anyhow::Result<ExitCode> {
    let directory = plugin_dir(args).context("no plugin directory: pass --plugin-dir or --state-dir")?;
    // Held until the plugin and its pin are both replaced: another update reads the policy
    // only after this one has written it.
    let _lock = lock_plugins(&directory)?;
    let file_name = format!("{name}.wasm");
    let target = directory.join(&file_name);
    let valid = !name.is_empty() && name.bytes().all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'_');
    if !valid || !target.is_file() {
        anyhow::bail!(
            "no plugin `{}` is installed in `{}`: add it with `toolcell tools add {}`",
            name.escape_default(),
            directory.display(),
            component
        );
    }
    let old_wasm = std::fs::read(&target).with_context(|| format!("cannot read `{}`", target.display()))?;
    if old_wasm == wasm {
        writeln!(std::io::stdout(), "`{}` is installed already, with the same bytes; nothing changed", target.display())?;
        return Ok(ExitCode::SUCCESS);
    }
    let sha256 = toolcell_audit::hex(&<sha2::Sha256 as sha2::Digest>::digest(&wasm));
    // The pin, rewritten in place in the policy's own text.
    let policy_file = args.policy.clone().filter(|path| builtin_policy_name(path).is_none());
    let mut new_policy = None;
    if let Some(path) = &policy_file {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read the policy `{}`", path.display()))?;
        let shown = path.file_name().map_or_else(|| "policy.toml".to_owned(), |name| name.to_string_lossy().into_owned());
        if let Some(span) = toolcell_policy::pin_span(&shown, &text, name)? {
            let line = text[..span.start].matches('\n').count() + 1;
            // Both values rewritten in place, the later one first so the earlier span holds.
            let mut edits = vec![(span, format!("\"{sha256}\""))];
            if let (Some(source), Some((source_span, _))) = (new_source, toolcell_policy::source_span(&shown, &text, name)?) {
                edits.push((source_span, format!("\"{source}\"")));
            }
            edits.sort_by_key(|(span, _)| std::cmp::Reverse(span.start));
            let mut new_text = text.clone();
            for (span, value) in edits {
                new_text.replace_range(span, &value);
            }
            new_policy = Some((path.clone(), new_text, line));
        }
    }
    // What loads today, and what would load with the new build and pin.
    let origin = format!("plugin:{file_name}");
    let before = build_runtime(args).map_err(|error| format!("{error:#}")).and_then(|runtime| facts_of(&runtime, &origin));
    let candidate = Candidate::Replacing {
        file_name,
        wasm: wasm.clone(),
        policy: new_policy.as_ref().map(|(path, text, _)| (path.clone(), text.clone())),
    };
    let runtime = build_runtime_with(args, Some(candidate), false, &[])
        .with_context(|| format!("refused: the new build of `{name}` does not load; nothing changed"))?;
    let after = facts_of(&runtime, &origin)
        .map_err(|reason| anyhow::anyhow!("refused: the new build of `{name}` does not load: {reason}; nothing changed"))?;
    if after.info.name.as_str() != name {
        anyhow::bail!(
            "refused: `{}` provides the tool `{}`, not `{name}`; nothing changed (`toolcell tools add` installs another tool)",
            component,
            after.info.name
        );
    }
    show_changes(name, before.as_ref(), &after)?;
    network::show_declared_changes(&mut std::io::stdout().lock(), &old_wasm, &wasm)?;
    if !passes_conformance(args, &runtime, name, component, &wasm, force)? {
        return Ok(ExitCode::from(EXIT_TOOL_ERROR));
    }
    replace_atomically(&directory, name, &wasm, &old_wasm, new_policy.as_ref().map(|(path, text, _)| (path.as_path(), text.as_str())))?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "updated `{name}` ({})", target.display())?;
    match (&new_policy, &policy_file) {
        (Some((path, _, line)), _) => writeln!(stdout, "and its pin: {} line {line} now reads sha256 = \"{sha256}\"", path.display())?,
        (None, Some(path)) => {
            writeln!(stdout, "{} pins no sha256 for it; pin it in its [plugins.{name}] table:\n\nsha256 = \"{sha256}\"", path.display())?
        }
        (None, None) => writeln!(stdout, "pin it in the policy ([plugins.{name}] table):\n\nsha256 = \"{sha256}\"")?,
    }
    Ok(ExitCode::SUCCESS)
}

/// Print what differs between the installed build (`before`: its facts, or why it does not
/// load today) and the new one.
fn show_changes(name: &str, before: Result<&PluginFacts, &String>, after: &PluginFacts) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "changes to `{name}`:")?;
    let before = match before {
        Ok(before) => before,
        Err(reason) => {
            writeln!(stdout, "  the installed build does not load today: {reason}")?;
            writeln!(stdout, "  sha256: {}", after.sha256)?;
            writeln!(stdout, "  annotations: {}", annotations(&after.info))?;
            writeln!(stdout, "  imports: {}", after.imports.join(", "))?;
            writeln!(stdout, "  input schema: {}", serde_json::to_string(&after.info.input_schema)?)?;
            return Ok(());
        }
    };
    writeln!(stdout, "  sha256: {} -> {}", before.sha256, after.sha256)?;
    let (old, new) = (annotations(&before.info), annotations(&after.info));
    if old == new {
        writeln!(stdout, "  annotations: unchanged ({new})")?;
    } else {
        writeln!(stdout, "  annotations: {old} -> {new}")?;
    }
    let added: Vec<&String> = after.imports.iter().filter(|import| !before.imports.contains(import)).collect();
    let removed: Vec<&String> = before.imports.iter().filter(|import| !after.imports.contains(import)).collect();
    if added.is_empty() && removed.is_empty() {
        writeln!(stdout, "  imports: unchanged")?;
    }
    for import in added {
        writeln!(stdout, "  imports: + {import}")?;
    }
    for import in removed {
        writeln!(stdout, "  imports: - {import}")?;
    }
    for (what, old, new) in [
        ("title", serde_json::json!(before.info.title), serde_json::json!(after.info.title)),
        ("description", serde_json::json!(before.info.description), serde_json::json!(after.info.description)),
        ("input schema", before.info.input_schema.clone(), after.info.input_schema.clone()),
        ("output schema", serde_json::json!(before.info.output_schema), serde_json::json!(after.info.output_schema)),
    ] {
        if old == new {
            writeln!(stdout, "  {what}: unchanged")?;
        } else {
            writeln!(stdout, "  {what}: {old} -> {new}")?;
        }
    }
    Ok(())
}

/// A tool's annotations as `tools` lists them (`read-only, idempotent`; `none`).
fn annotations(info: &toolcell_types::ToolInfo) -> String {
    let set: Vec<&str> = [
        (info.annotations.read_only, "read-only"),
        (info.annotations.destructive, "destructive"),
        (info.annotations.idempotent, "idempotent"),
    ]
    .iter()
    .filter(|(set, _)| *set)
    .map(|(_, name)| *name)
    .collect();
    if set.is_empty() { "none".to_owned() } else { set.join(", ") }
}

/// Hold the lock of the plugin directory (created if missing) until the handle is dropped:
/// `tools add`, `update` and `remove` run one at a time. The directory itself is locked, so
/// no lock file lies among the plugins.
fn lock_plugins(directory: &std::path::Path) -> anyhow::Result<std::fs::File> {
    std::fs::create_dir_all(directory).with_context(|| format!("cannot create `{}`", directory.display()))?;
    let handle = std::fs::File::open(directory).with_context(|| format!("cannot open `{}` to lock it", directory.display()))?;
    handle.lock().with_context(|| format!("cannot lock `{}`", directory.display()))?;
    Ok(handle)
}

/// `bytes` in a new file of its own in `directory`, under a reserved `.toolcell-` name that
/// no tool call may touch (a policy may lie in a workspace), with `permissions` if given;
/// removed when dropped unless persisted. It is created, never opened through a symlink.
fn stage(directory: &std::path::Path, bytes: &[u8], permissions: Option<std::fs::Permissions>) -> std::io::Result<tempfile::NamedTempFile> {
    let mut staged = tempfile::Builder::new().prefix(".toolcell-update-").tempfile_in(directory)?;
    staged.write_all(bytes)?;
    if let Some(permissions) = permissions {
        staged.as_file().set_permissions(permissions)?;
    }
    staged.as_file().sync_all()?;
    Ok(staged)
}

/// Replace the plugin `name` in `directory` with `wasm`, and then the policy with its new
/// text, if given; if the policy cannot be replaced, `old_wasm` is put back.
fn replace_atomically(
    directory: &std::path::Path,
    name: &str,
    wasm: &[u8],
    old_wasm: &[u8],
    policy: Option<(&std::path::Path, &str)>,
) -> anyhow::Result<()> {
    let target = directory.join(format!("{name}.wasm"));
    let plugin = stage(directory, wasm, None)
        .with_context(|| format!("cannot write the new build into `{}`; nothing changed", directory.display()))?;
    let policy = match policy {
        Some((path, text)) => {
            // The file itself, not a symlink to it, is replaced, keeping its permissions.
            let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
            let parent = path.parent().unwrap_or(std::path::Path::new("."));
            let staged = std::fs::metadata(&path).and_then(|metadata| stage(parent, text.as_bytes(), Some(metadata.permissions())));
            let staged =
                staged.with_context(|| format!("cannot write the policy's new text beside `{}`; nothing changed", path.display()))?;
            Some((path, staged))
        }
        None => None,
    };
    plugin.persist(&target).map_err(|error| anyhow::anyhow!("cannot replace `{}`: {}; nothing changed", target.display(), error.error))?;
    if let Some((path, staged)) = policy
        && let Err(error) = staged.persist(&path)
    {
        let restored = stage(directory, old_wasm, None).and_then(|old| old.persist(&target).map(drop).map_err(|error| error.error));
        anyhow::bail!(
            "cannot replace the policy `{}`: {}; {}",
            path.display(),
            error.error,
            match restored {
                Ok(()) => "the old plugin is back in place; nothing changed".to_owned(),
                Err(restore) => format!("and the old plugin could not be put back ({restore}): reinstall it"),
            }
        );
    }
    Ok(())
}
