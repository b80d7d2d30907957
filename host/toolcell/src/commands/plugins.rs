//! `toolcell conformance` and `toolcell tools`: checking a component, adding it to the plugin
//! directory (with the pin to put in the policy), removing it, listing the tools.

use super::*;

pub(super) fn conformance(
    args: &RuntimeArgs,
    component: &std::path::Path,
    as_json: bool,
    stub_imports: &[String],
) -> anyhow::Result<ExitCode> {
    let wasm = std::fs::read(component).with_context(|| format!("cannot read `{}`", component.display()))?;
    let options = toolcell_conformance::Options {
        cache_dir: if args.no_cache { None } else { args.cache_dir.clone().or_else(toolcell_runtime::default_cache_dir) },
        stub_imports: stub_imports.to_vec(),
    };
    let report = toolcell_conformance::check(&component.display().to_string(), &wasm, &options);
    let mut stdout = std::io::stdout().lock();
    if as_json {
        writeln!(stdout, "{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        write!(stdout, "{}", report.render())?;
    }
    Ok(if report.passed() { ExitCode::SUCCESS } else { ExitCode::from(EXIT_TOOL_ERROR) })
}

pub(super) fn tools_add(args: &RuntimeArgs, component: &std::path::Path, force: bool) -> anyhow::Result<ExitCode> {
    let directory = plugin_dir(args).context("no plugin directory: pass --plugin-dir or --state-dir")?;
    let wasm = std::fs::read(component).with_context(|| format!("cannot read `{}`", component.display()))?;
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
    let origin = format!("plugin:{}", component.display());
    // Loaded beside everything else: its imports, description and schema are checked, and a
    // name collision or a pin mismatch is refused before anything is installed.
    let runtime = build_runtime_with(args, Some((origin.clone(), wasm.clone())), false, &[])?;
    let added = runtime.loaded().iter().find(|loaded| loaded.origin == origin).context("the component was loaded")?;
    // Then what it does: the conformance suite, with the stubs the policy grants the tool.
    let stub_imports = runtime.policy().map(|policy| policy.stub_imports(added.tool.as_str()).to_vec()).unwrap_or_default();
    let options = toolcell_conformance::Options {
        cache_dir: if args.no_cache { None } else { args.cache_dir.clone().or_else(toolcell_runtime::default_cache_dir) },
        stub_imports,
    };
    let report = toolcell_conformance::check(&component.display().to_string(), &wasm, &options);
    if !report.passed() {
        let mut stderr = std::io::stderr().lock();
        let failed: Vec<_> = report.checks.iter().filter(|check| !check.passed).collect();
        for check in &failed {
            writeln!(stderr, "{}: conformance check failed: {}: {}", if force { "warning" } else { "error" }, check.name, check.detail)?;
        }
        if !force {
            writeln!(
                stderr,
                "refused: {} conformance check(s) of `{}` failed (`toolcell conformance {}` shows them all); fix the tool, or add it anyway with --force",
                failed.len(),
                added.tool,
                component.display()
            )?;
            return Ok(ExitCode::from(EXIT_TOOL_ERROR));
        }
    }
    std::fs::create_dir_all(&directory).with_context(|| format!("cannot create `{}`", directory.display()))?;
    let target = directory.join(format!("{}.wasm", added.tool));
    let temporary = directory.join(format!(".{}.wasm.tmp", added.tool));
    std::fs::write(&temporary, &wasm)
        .and_then(|()| std::fs::rename(&temporary, &target))
        .with_context(|| format!("cannot install `{}`", target.display()))?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "added `{}` as {}", added.tool, target.display())?;
    writeln!(stdout, "sha256 {}", added.sha256)?;
    // A table the policy has already (its stubs, an older pin) takes the line; a new table
    // pasted beside it would be a duplicate the policy refuses.
    let has_table = runtime
        .policy()
        .is_some_and(|policy| policy.pin(added.tool.as_str()).is_some() || !policy.stub_imports(added.tool.as_str()).is_empty());
    if has_table {
        writeln!(
            stdout,
            "pin it in the policy's existing [plugins.{}] table (replacing any `sha256` there), and give it to the roles that may call it:

sha256 = \"{}\"",
            added.tool, added.sha256
        )?;
    } else {
        writeln!(
            stdout,
            "pin it in the policy, and give it to the roles that may call it:

[plugins.{}]
sha256 = \"{}\"",
            added.tool, added.sha256
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `toolcell tools remove NAME`: the plugin's file goes; its pin and role entries are the
/// operator's to remove from the policy.
pub(super) fn tools_remove(args: &RuntimeArgs, name: &str) -> anyhow::Result<ExitCode> {
    let directory = plugin_dir(args).context("no plugin directory: pass --plugin-dir or --state-dir")?;
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
    Ok(ExitCode::SUCCESS)
}
