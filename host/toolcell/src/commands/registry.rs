//! `toolcell tools push|pull|add|update|sign` with OCI registries: the artifact wkg writes,
//! digests checked as blobs arrive, tags resolved once and pinned, pulled components kept in the
//! cache, and cosign-style signatures checked against the policy's `[registry]` keys.

use super::*;
use toolcell_oci::{Annotations, Cache, PublicKeys, Pulled, Reference, Registry, Signed, SigningKey};

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

/// The policy's `[registry]` table, with its keys read (relative to the policy file).
struct RegistryPolicy {
    settings: toolcell_policy::RegistrySettings,
    keys: PublicKeys,
}

impl RegistryPolicy {
    fn read(args: &RuntimeArgs) -> anyhow::Result<Self> {
        match policy_text(args)? {
            Some((shown, text)) => Self::from_text(args, &shown, &text),
            None => Ok(Self { settings: toolcell_policy::RegistrySettings::default(), keys: PublicKeys::default() }),
        }
    }

    /// From the policy's `text` (shown as `shown`), its keys read beside the policy file.
    fn from_text(args: &RuntimeArgs, shown: &str, text: &str) -> anyhow::Result<Self> {
        let settings = toolcell_policy::registry_settings(shown, text)?;
        let base = args.policy.as_deref().and_then(std::path::Path::parent).unwrap_or(std::path::Path::new("."));
        let mut keys = PublicKeys::default();
        for key in &settings.signature_keys {
            let path = base.join(key);
            let pem = std::fs::read_to_string(&path).with_context(|| {
                format!(
                    "cannot read the signature key `{key}` named in `{shown}` `[registry] signature_keys` (looked for `{}`)",
                    path.display()
                )
            })?;
            keys.add_pem(key, &pem)?;
        }
        Ok(Self { settings, keys })
    }

    /// Plain HTTP when asked for on the command line or by the policy, for this registry.
    fn insecure(&self, reference: &Reference, flag: bool) -> bool {
        flag || self.settings.is_insecure(reference.registry())
    }

    /// Check the signatures of what was pulled: a signature that does not hold is always
    /// refused; an unsigned component is refused when the policy requires signatures.
    fn check(&self, registry: &Registry, pulled: &Pulled) -> anyhow::Result<()> {
        if self.keys.is_empty() {
            return Ok(());
        }
        let signed = block_on(registry.verify(&pulled.reference, &self.keys))??;
        let mut stdout = std::io::stdout().lock();
        match signed {
            Signed::By(key) => writeln!(stdout, "signed by `{key}`")?,
            Signed::Unsigned if self.settings.require_signatures => anyhow::bail!(
                "refused: `{}` carries no signature, and the policy requires one (`[registry] require_signatures = true`); ask its publisher to sign it (`cosign sign --key` or `toolcell tools sign`), or take it from a file you checked yourself after turning the requirement off",
                pulled.reference
            ),
            Signed::Unsigned => writeln!(stdout, "unsigned (the policy does not require signatures)")?,
        }
        Ok(())
    }
}

/// Where the policy requires signatures, every installed plugin must be a component pinned in
/// `[plugins]` with a registry `source`, whose signature by a trusted key is in the cache (it
/// was checked when the component was added): checked at each start, without the network.
pub(super) fn check_installed_signatures(args: &RuntimeArgs, plugin_dir: &std::path::Path, replaced: Option<&str>) -> anyhow::Result<()> {
    // Each start comes here: without the requirement, nothing more is read.
    let Some((shown, text)) = policy_text(args)? else { return Ok(()) };
    if !toolcell_policy::registry_settings(&shown, &text)?.require_signatures {
        return Ok(());
    }
    let policy = RegistryPolicy::from_text(args, &shown, &text)?;
    let pins = toolcell_policy::plugin_pins(&shown, &text)?;
    let Ok(entries) = std::fs::read_dir(plugin_dir) else { return Ok(()) };
    for path in entries.filter_map(Result::ok).map(|entry| entry.path()) {
        if path.extension().is_none_or(|extension| extension != "wasm") {
            continue;
        }
        let file = path.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
        if replaced == Some(file.as_str()) {
            continue;
        }
        let wasm = std::fs::read(&path).with_context(|| format!("cannot read the plugin `{file}`"))?;
        let sha256 = toolcell_oci::sha256_digest(&wasm).trim_start_matches("sha256:").to_owned();
        let source = pins.values().find_map(|pin| (pin.sha256.as_deref() == Some(sha256.as_str())).then(|| pin.source.clone()));
        let why = match source {
            None => format!("no `[plugins.NAME]` table in `{shown}` pins its sha256 `{sha256}`"),
            Some(None) => format!("its pin in `{shown}` has no registry `source`, so no signature can vouch for it"),
            Some(Some(source)) => match source.parse::<Reference>() {
                Err(error) => error.to_string(),
                Ok(reference) => match cache(args) {
                    None => "the cache is off (`--no-cache`), and the signature checked when it was added is kept there".to_owned(),
                    Some(cache) => match toolcell_oci::verify_cached(&cache, &reference, &sha256, &policy.keys) {
                        Ok(_) => continue,
                        Err(why) => why,
                    },
                },
            },
        };
        anyhow::bail!(
            "refused to start: the plugin `{file}` is not shown signed by a trusted key, and the policy requires signatures (`[registry] require_signatures = true`): {why}. Add it again from its registry (`toolcell tools add oci://…`, then put the printed pin in the policy), or remove it (`toolcell tools remove NAME`)"
        );
    }
    Ok(())
}

/// A component from a file cannot be added where the policy requires signatures.
pub(super) fn refuse_unsigned_file(args: &RuntimeArgs, origin: &str) -> anyhow::Result<()> {
    let policy = RegistryPolicy::read(args)?;
    anyhow::ensure!(
        !policy.settings.require_signatures,
        "refused: `{origin}` is a file, which carries no signature, and the policy requires signed components (`[registry] require_signatures = true`); push it to a registry, sign it there (`toolcell tools sign`), and add it by its reference"
    );
    Ok(())
}

/// Pull `reference` (from the cache when it pins a digest already pulled), then check its
/// signatures as the policy says.
fn fetch(args: &RuntimeArgs, reference: &Reference, insecure: bool) -> anyhow::Result<Pulled> {
    let policy = RegistryPolicy::read(args)?;
    let registry = Registry::new(reference, policy.insecure(reference, insecure), cache(args))?;
    let pulled = block_on(registry.pull(reference))??;
    policy.check(&registry, &pulled)?;
    Ok(pulled)
}

/// `toolcell tools sign REF --key KEY`: sign the manifest REF names (a tag is resolved to its
/// digest first) as `cosign sign --key` does.
pub(super) fn sign(args: &RuntimeArgs, reference: &str, key: &std::path::Path, insecure: bool) -> anyhow::Result<ExitCode> {
    let reference = parse(reference)?;
    let pem = std::fs::read_to_string(key).with_context(|| format!("cannot read the key `{}`", key.display()))?;
    let key = SigningKey::from_pem(&key.display().to_string(), &pem)?;
    let policy = RegistryPolicy::read(args)?;
    let registry = Registry::new(&reference, policy.insecure(&reference, insecure), cache(args))?;
    let pulled = block_on(registry.pull(&reference))??;
    let signature = block_on(registry.sign(&pulled.reference, &key))??;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "signed {}", pulled.reference)?;
    writeln!(stdout, "signature {signature}")?;
    Ok(ExitCode::SUCCESS)
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
    let insecure = RegistryPolicy::read(args)?.insecure(&reference, insecure);
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

/// The signature key files the policy's `[registry]` names (relative to the policy file), read
/// or not; none when the policy cannot be read (building the runtime says why).
pub(super) fn signature_key_files(args: &RuntimeArgs) -> Vec<PathBuf> {
    let Ok(Some((shown, text))) = policy_text(args) else { return Vec::new() };
    let Ok(settings) = toolcell_policy::registry_settings(&shown, &text) else { return Vec::new() };
    let base = args.policy.as_deref().and_then(std::path::Path::parent).unwrap_or(std::path::Path::new("."));
    settings.signature_keys.iter().map(|key| base.join(key)).collect()
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
