//! `toolcell tools push|pull|add|update` with OCI registries: the artifact wkg writes, digests
//! checked as blobs arrive, tags resolved once and pinned, pulled components kept in the cache.

use super::*;
use toolcell_oci::{Annotations, Cache, Pulled, Reference, Registry};

/// The registry cache: `oci` in the cache directory, unless `--no-cache`.
fn cache(args: &RuntimeArgs) -> Option<Cache> {
    if args.no_cache {
        return None;
    }
    args.cache_dir.clone().or_else(toolcell_runtime::default_cache_dir).map(|directory| Cache::new(directory.join("oci")))
}

/// Run one registry operation to completion on a small runtime of its own.
fn block_on<T>(future: impl Future<Output = T>) -> anyhow::Result<T> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().context("cannot start the I/O runtime")?;
    Ok(runtime.block_on(future))
}

fn parse(reference: &str) -> anyhow::Result<Reference> {
    Ok(reference.parse::<Reference>()?)
}

/// Pull `reference` (from the cache when it pins a digest already pulled).
fn fetch(args: &RuntimeArgs, reference: &Reference, insecure: bool) -> anyhow::Result<Pulled> {
    let registry = Registry::new(reference, insecure, cache(args))?;
    Ok(block_on(registry.pull(reference))??)
}

/// `toolcell tools push FILE REF`.
pub(super) fn push(
    args: &RuntimeArgs,
    component: &std::path::Path,
    reference: &str,
    annotations: &Annotations,
    insecure: bool,
) -> anyhow::Result<ExitCode> {
    let reference = parse(reference)?;
    if reference.digest().is_some() {
        anyhow::bail!("`{reference}` names a digest: push to a tag (`oci://HOST/NAME:TAG`); the digest is printed after the push");
    }
    let wasm = std::fs::read(component).with_context(|| format!("cannot read `{}`", component.display()))?;
    let sha256 = toolcell_oci::sha256_digest(&wasm);
    let registry = Registry::new(&reference, insecure, cache(args))?;
    let pinned = block_on(registry.push(&reference, wasm, annotations))??;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "pushed {pinned}")?;
    writeln!(stdout, "manifest {}", pinned.digest().unwrap_or_default())?;
    writeln!(stdout, "sha256 {}", sha256.trim_start_matches("sha256:"))?;
    Ok(ExitCode::SUCCESS)
}

/// `toolcell tools pull REF [--output FILE]`.
pub(super) fn pull(args: &RuntimeArgs, reference: &str, output: Option<&std::path::Path>, insecure: bool) -> anyhow::Result<ExitCode> {
    let reference = parse(reference)?;
    let pulled = fetch(args, &reference, insecure)?;
    if let Some(output) = output {
        std::fs::write(output, &pulled.wasm).with_context(|| format!("cannot write `{}`", output.display()))?;
    }
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "pulled {}{}", pulled.reference, if pulled.from_cache { " (from the cache)" } else { "" })?;
    writeln!(stdout, "manifest {}", pulled.manifest_digest)?;
    writeln!(stdout, "sha256 {}", pulled.sha256)?;
    for (key, value) in &pulled.annotations {
        writeln!(stdout, "{key} = {}", toolcell_types::escape_control(value))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The policy's text and its name as shown, if it is a file.
fn policy_text(args: &RuntimeArgs) -> anyhow::Result<Option<(String, String)>> {
    let Some(path) = args.policy.clone().filter(|path| builtin_policy_name(path).is_none()) else { return Ok(None) };
    let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read the policy `{}`", path.display()))?;
    let shown = path.file_name().map_or_else(|| "policy.toml".to_owned(), |name| name.to_string_lossy().into_owned());
    Ok(Some((shown, text)))
}

/// The `source` the policy pins for `tool` (`[plugins.NAME] source`).
fn pinned_source(args: &RuntimeArgs, tool: &str) -> anyhow::Result<Option<String>> {
    let Some((shown, text)) = policy_text(args)? else { return Ok(None) };
    Ok(toolcell_policy::source_span(&shown, &text, tool)?.map(|(_, source)| source))
}

/// `toolcell tools add oci://…`: resolve the tag once, check the component as a file is
/// checked, install it, and print the pin with its manifest digest.
pub(super) fn add(args: &RuntimeArgs, reference: &str, force: bool, insecure: bool) -> anyhow::Result<ExitCode> {
    let reference = parse(reference)?;
    let pulled = fetch(args, &reference, insecure)?;
    let pinned = pulled.reference.to_string();
    // A tag the policy pinned to another digest has moved: the pin stands until `update`.
    let sources = match policy_text(args)? {
        Some((shown, text)) => toolcell_policy::plugin_sources(&shown, &text)?,
        None => Default::default(),
    };
    for (tool, source) in sources {
        if let Ok(source) = source.parse::<Reference>()
            && source.digest().is_some()
            && source.unpinned().is_some()
            && source.unpinned() == pulled.reference.unpinned()
            && source.digest() != Some(pulled.manifest_digest.as_str())
        {
            anyhow::bail!(
                "refused: the tag `{}` moved: the policy pins `{tool}` to `{}`, the registry now serves `{}`; nothing changed. `toolcell tools update {tool}` shows what changed and pins the new one",
                source.unpinned().map(|reference| reference.to_string()).unwrap_or_default(),
                source.digest().unwrap_or_default(),
                pulled.manifest_digest,
            );
        }
    }
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "resolved {pinned}{}", if pulled.from_cache { " (from the cache)" } else { "" })?;
    drop(stdout);
    add_component(args, &pinned, pulled.wasm, force, Some(&pinned))
}

/// `toolcell tools update NAME` for a plugin added from a registry: resolve the tag of its
/// `source` again, show what changed, then replace the plugin, its `sha256` and its `source`.
pub(super) fn update(args: &RuntimeArgs, name: &str, force: bool, insecure: bool) -> anyhow::Result<ExitCode> {
    let source = pinned_source(args, name)?.with_context(|| {
        format!("the policy has no `source` for `{name}` in [plugins.{name}]: give the new build, `toolcell tools update {name} FILE`")
    })?;
    let source = parse(&source)?;
    let tag = source.unpinned().with_context(|| format!("`{source}` names no tag to resolve again; it is pinned for good"))?;
    let pulled = fetch(args, &tag, insecure)?;
    if source.digest() == Some(pulled.manifest_digest.as_str()) {
        writeln!(std::io::stdout(), "`{tag}` still resolves to {}; nothing changed", pulled.manifest_digest)?;
        return Ok(ExitCode::SUCCESS);
    }
    let pinned = pulled.reference.to_string();
    writeln!(std::io::stdout(), "`{tag}` moved: {} -> {}", source.digest().unwrap_or("(no digest)"), pulled.manifest_digest)?;
    let status = tools_update(args, name, &pinned, pulled.wasm, force, Some(&pinned))?;
    if status == ExitCode::SUCCESS {
        writeln!(std::io::stdout(), "and its source: {pinned}")?;
    }
    Ok(status)
}
