//! Loading one component: read from the plugin directory or given, compiled or taken from the
//! cache, linked (with the policy's stubs), and asked to describe itself, on every core at
//! once.

use super::*;
use crate::engine::{CacheOutcome, ComponentCode, deserialize_embedded};
use crate::error::Error;
use crate::{bindings, engine, imports, limits, stubs};

/// How long a component's `describe()` may take at load.
pub(super) const DESCRIBE_DEADLINE: Duration = Duration::from_secs(10);
/// What `describe()` may write on stderr that a load error repeats (the rest is cut).
pub(super) const DESCRIBE_STDERR_BYTES: usize = 8 * 1024;

/// One component, ready to run: linked, described, and how it was loaded.
pub(super) struct Prepared {
    pub(super) code: ComponentCode,
    pub(super) info: ToolInfo,
    pub(super) schema: ArgsSchema,
    pub(super) cache: CacheOutcome,
    pub(super) warning: Option<String>,
    /// What the component imports, in its order.
    pub(super) imports: Vec<String>,
}

/// How components are linked: the shared linker, and the policy's `stub_imports` by tool.
pub(super) struct Linking<'a> {
    pub(super) linker: &'a Arc<wasmtime::component::Linker<CallState>>,
    pub(super) guarded: bool,
    pub(super) stub_rules: &'a BTreeMap<String, Vec<String>>,
}

pub(super) fn prepare(
    engine: &Engine,
    linking: &Linking<'_>,
    cache: Option<&engine::ComponentCache>,
    source: &ComponentSource,
    progress: &engine::Progress,
) -> Result<Prepared, Error> {
    let (origin, wasm) = (source.origin.as_str(), source.wasm.as_ref());
    let embedded = source.artifact.and_then(|artifact| deserialize_embedded(engine, artifact).ok());
    let (component, cache_outcome, warning) = match (embedded, cache) {
        (Some(component), _) => (component, CacheOutcome::Embedded, None),
        (None, Some(cache)) => cache.load(engine, origin, wasm, progress)?,
        (None, None) => (engine::compile(engine, origin, wasm, progress)?, CacheOutcome::Compiled, None),
    };
    let imports: Vec<String> = component.component_type().imports(engine).map(|(name, _)| name.to_owned()).collect();
    let stubbed = imports::check(engine, origin, &component, linking.stub_rules)?;
    let load_error = |error: wasmtime::Error| Error::Load { origin: origin.to_owned(), reason: describe(&error) };
    let instance_pre = if stubbed.is_empty() {
        linking.linker.instantiate_pre(&component).map_err(load_error)?
    } else {
        // A linker of its own: no other component sees the stubs.
        let mut linker = crate::capabilities::linker(engine, linking.guarded)?;
        stubs::define(&mut linker, engine, &component, &stubbed)?;
        linker.instantiate_pre(&component).map_err(load_error)?
    };
    let pre = bindings::PluginPre::new(instance_pre).map_err(load_error)?;
    let (info, schema) = describe_tool(engine, &pre, origin)?;
    // Stubbed only if the tool the component turned out to be asked for it.
    let own_rules: Vec<&String> = [info.name.as_str(), "*"].iter().filter_map(|tool| linking.stub_rules.get(*tool)).flatten().collect();
    if let Some(import) = stubbed.iter().find(|import| !own_rules.iter().any(|pattern| toolcell_policy::covers(pattern, import))) {
        return Err(Error::ForbiddenImport { origin: origin.to_owned(), import: import.escape_default().to_string() });
    }
    let code = match source.artifact {
        // A built-in that links with the shared linker: its code waits for its first call.
        Some(artifact) if cache_outcome == CacheOutcome::Embedded && stubbed.is_empty() => {
            ComponentCode::embedded(artifact, Arc::clone(linking.linker))
        }
        _ => ComponentCode::ready(pre),
    };
    Ok(Prepared { code, info, schema, cache: cache_outcome, warning, imports })
}

/// `load` applied to every component, on as many threads as there are cores (at most one per
/// component), results in the components' order.
pub(super) fn load_all<T: Send>(components: &[ComponentSource], load: impl Fn(&ComponentSource) -> T + Sync) -> Vec<T> {
    let threads = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get).min(components.len()).max(1);
    if threads == 1 {
        return components.iter().map(&load).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut results: Vec<(usize, T)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let index = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(source) = components.get(index) else {
                            return done;
                        };
                        done.push((index, load(source)));
                    }
                })
            })
            .collect();
        // A worker that panicked (a host bug) loses its components; they are loaded again below.
        workers.into_iter().flat_map(|worker| worker.join().unwrap_or_default()).collect()
    });
    results.sort_by_key(|(index, _)| *index);
    let mut ordered = Vec::with_capacity(components.len());
    let mut results = results.into_iter().peekable();
    for (index, source) in components.iter().enumerate() {
        match results.next_if(|(done, _)| *done == index) {
            Some((_, result)) => ordered.push(result),
            None => ordered.push(load(source)),
        }
    }
    ordered
}

/// The `*.wasm` files of a plugin directory, in name order, as `(origin, bytes)`.
pub(super) fn read_plugins(directory: &Path) -> Result<Vec<(String, Vec<u8>)>, Error> {
    let error = |path: &Path| {
        let path = path.to_path_buf();
        move |source| Error::Plugins { path, source }
    };
    let entries = match std::fs::read_dir(directory) {
        Ok(entries) => entries,
        Err(source) if source.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(Error::Plugins { path: directory.to_path_buf(), source }),
    };
    // Whoever can write the directory chooses the code toolcell runs.
    toolcell_state::storage::check_private(directory, 0o022, "the plugin directory")?;
    let mut paths: Vec<PathBuf> =
        entries.map(|entry| entry.map(|entry| entry.path())).collect::<Result<_, _>>().map_err(error(directory))?;
    paths.retain(|path| path.extension().is_some_and(|extension| extension == "wasm"));
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let name = path.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
            std::fs::read(&path).map(|wasm| (format!("plugin:{name}"), wasm)).map_err(error(&path))
        })
        .collect()
}

/// Ask a freshly loaded component to describe itself, and check what it says. The instance
/// gets no preopened directory: `describe` must not touch the filesystem.
pub(super) fn describe_tool(engine: &Engine, pre: &bindings::PluginPre<CallState>, origin: &str) -> Result<(ToolInfo, ArgsSchema), Error> {
    // What the component writes on stderr while it describes itself (a Python traceback, a
    // Rust panic message) is the reason for a failure, in its own language's terms.
    let stderr = crate::capabilities::CapturePipe::new(DESCRIBE_STDERR_BYTES);
    let state = CallState::without_call(WasiCtxBuilder::new().stderr(stderr.clone()).build(), Instant::now() + DESCRIBE_DEADLINE);
    let mut store = Store::new(engine, state);
    store.limiter(|state| &mut state.limiter);
    // `describe` gets a fixed deadline: it must answer at once.
    store.set_epoch_deadline(limits::ticks_in(DESCRIBE_DEADLINE));
    store.epoch_deadline_trap();
    let load_error = |error: wasmtime::Error| {
        let written = stderr.take();
        let written = String::from_utf8_lossy(&written.bytes);
        let written = written.trim();
        let reason = if written.is_empty() {
            format!("`describe()` failed: {}", describe(&error))
        } else {
            // The component's own account first; the trap after it.
            // The trap and its wasm backtrace say less than what was written.
            format!("`describe()` failed (the component trapped); it wrote:\n{}", toolcell_types::escape_terminal(written))
        };
        Error::Load { origin: origin.to_owned(), reason }
    };
    let plugin = pre.instantiate(&mut store).map_err(load_error)?;
    let info = plugin.toolcell_tool_tool().call_describe(&mut store).map_err(load_error)?;
    let invalid = |reason: String| Error::InvalidDescription { origin: origin.to_owned(), reason };
    let name = ToolName::new(&info.name).map_err(|error| invalid(error.to_string()))?;
    if info.description.trim().is_empty() {
        return Err(invalid(format!("`{name}` has an empty description; agents need one to know when to use it")));
    }
    let (schema, input_schema) = ArgsSchema::compile(&info.input_schema).map_err(invalid)?;
    let output_schema = info.output_schema.as_deref().map(ArgsSchema::output).transpose().map_err(invalid)?;
    let info = ToolInfo {
        name,
        title: info.title,
        description: info.description,
        input_schema,
        output_schema,
        annotations: Annotations {
            read_only: info.annotations.read_only,
            destructive: info.annotations.destructive,
            idempotent: info.annotations.idempotent,
        },
    };
    Ok((info, schema))
}
