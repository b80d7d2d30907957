//! The wasmtime engine toolcell runs every component on, and the on-disk cache of compiled
//! components.

use std::path::Path;

use wasmtime::component::Component;
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use toolcell_state::artifacts::ArtifactStore;
use toolcell_state::storage::load_or_create_key;

use std::sync::Arc;

use crate::bindings;
use crate::capabilities::CallState;
use crate::error::{Error, describe};

/// Calls that can hold an instance at once in one process (each call instantiates one
/// component): a server running calls concurrently keeps below this, or a call fails to start.
pub const MAX_LIVE_INSTANCES: usize = 128;
/// Instances that may be alive at once: every concurrent call's, and those the runtime's idle
/// thread holds besides (made ahead of a tool's next call, or waiting to be torn down), which
/// therefore never take a call's place. A Rust tool component holds a handful of core
/// instances (its module plus the adapter's shims).
const POOL_COMPONENT_INSTANCES: u32 = (MAX_LIVE_INSTANCES + crate::call::ahead::MAX_HELD) as u32;
const POOL_CORE_INSTANCES: u32 = 1024;
const POOL_MEMORIES: u32 = 256 + 2 * crate::call::ahead::MAX_HELD as u32;
const POOL_TABLES: u32 = 512;
/// Bytes of each pooled linear memory and table kept resident between instances.
const KEEP_RESIDENT_BYTES: usize = 1 << 20;
const KEEP_RESIDENT_TABLE_BYTES: usize = 64 << 10;
/// Decommits queued before the pool flushes them in one go: none. A queued slot keeps its
/// memory resident and holds on to the code of the component last instantiated in it, even
/// once that component is dropped (a built-in described at load); batching made no difference
/// to the call benches once memory is kept resident.
const DECOMMIT_BATCH: usize = 1;
/// Slots, each with up to `KEEP_RESIDENT_BYTES` resident and the code of the component last
/// instantiated in it, that stay warm for components no longer running before the pool reuses
/// them for others (wasmtime's default, 100, kept one per component ever described: 20 MiB).
const WARM_SLOTS: u32 = 4;
/// The largest linear memory a tool may grow to.
pub(crate) const MAX_MEMORY_BYTES: usize = 1 << 30;

/// The engine: component model on, Cranelift, the pooling allocator so that a fresh instance
/// per call is cheap.
pub(crate) fn new_engine() -> Result<Engine, Error> {
    let mut pool = PoolingAllocationConfig::new();
    pool.total_component_instances(POOL_COMPONENT_INSTANCES)
        .total_core_instances(POOL_CORE_INSTANCES)
        .total_memories(POOL_MEMORIES)
        .total_tables(POOL_TABLES)
        .max_memory_size(MAX_MEMORY_BYTES)
        // Resetting a slot's memory with memset (only the pages touched, where the kernel has
        // PAGEMAP_SCAN) instead of madvise avoids most page faults of the next instance: a
        // fresh instance per call costs about half as much. See benches/call.rs.
        .linear_memory_keep_resident(KEEP_RESIDENT_BYTES)
        .table_keep_resident(KEEP_RESIDENT_TABLE_BYTES)
        .pagemap_scan(wasmtime::Enabled::Auto)
        .decommit_batch_size(DECOMMIT_BATCH)
        .max_unused_warm_slots(WARM_SLOTS);
    let mut config = Config::new();
    config
        .wasm_component_model(true)
        // Deadlines: every store gets an epoch deadline; a ticker thread advances the epoch.
        .epoch_interruption(true)
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    if std::env::var_os("TOOLCELL_PERFMAP").is_some() {
        config.profiler(wasmtime::ProfilingStrategy::PerfMap);
    }
    Engine::new(&config).map_err(|error| Error::Engine { reason: describe(&error) })
}

/// Where a component came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Compiled now (no cache, a cache miss, or an unusable cached artifact).
    Compiled,
    /// Loaded from the compiled-component cache.
    Cached,
    /// Loaded from the compiled form built into the program (the built-in tools).
    Embedded,
    /// Compiled now because the cached artifact failed authentication (it was discarded;
    /// see `Runtime::warnings`).
    Rejected,
}

/// A directory of compiled components, keyed by a hash of the component's bytes and of every
/// engine setting that changes the compiled code.
///
/// Loading a compiled artifact runs its machine code natively, so nothing in the directory is
/// trusted as it is: every artifact carries an HMAC-SHA-256 tag over its name and its bytes,
/// made with a key of this installation (`cache.key`, 32 random bytes, mode 0600, created on
/// first use). An artifact whose tag does not verify (garbage, truncated, or valid machine
/// code that this host did not write) is discarded and the component recompiled, with a
/// warning; it is never loaded. The directory itself must belong to the user running toolcell
/// and be writable by nobody else (as ssh requires of its keys); the runtime also refuses any
/// tool call that would write it (see `Runtime::call`).
#[derive(Debug, Clone)]
pub(crate) struct ComponentCache {
    artifacts: ArtifactStore,
}

/// The cache key's file name in the cache directory.
pub(crate) const CACHE_KEY_FILE: &str = "cache.key";
impl ComponentCache {
    /// Use `directory` (created `rwx------` if missing) and its key (created if missing).
    ///
    /// # Errors
    ///
    /// [`Error::Cache`] if it cannot be created or read; [`Error::Insecure`] if it, or its
    /// key, belongs to another user or can be written (the key: read) by others.
    pub(crate) fn open(directory: &Path) -> Result<Self, Error> {
        let cache_error = |source| Error::Cache { path: directory.to_path_buf(), source };
        toolcell_state::storage::create_private_dirs(directory).map_err(cache_error)?;
        toolcell_state::storage::check_private(directory, 0o022, "the compiled-component cache")?;
        let key_path = directory.join(CACHE_KEY_FILE);
        let key = load_or_create_key(&key_path, "the cache key", |source| Error::Cache { path: key_path.clone(), source })?;
        Ok(ComponentCache { artifacts: ArtifactStore::new(directory, key) })
    }

    /// The compiled component for `wasm`, from the cache if it holds an authentic artifact,
    /// else compiled and stored. A rejected artifact's reason is returned as a warning.
    pub(crate) fn load(
        &self,
        engine: &Engine,
        origin: &str,
        wasm: &[u8],
        progress: &Progress,
    ) -> Result<(Component, CacheOutcome, Option<String>), Error> {
        let name = format!("{}.cwasm", cache_key(engine, wasm));
        let path = self.artifacts.path(&name);
        let mut warning = None;
        match self.artifacts.read(&name) {
            Ok(Some(artifact)) => {
                // SAFETY: the bytes are exactly what this host serialized for this component
                // and engine (the tag covers the name, which commits to both, and every byte);
                // they were read into memory before the check, so nothing can change them
                // between the check and the load.
                #[expect(unsafe_code, reason = "loading our own authenticated precompiled artifact is the point of the cache")]
                let cached = unsafe { Component::deserialize(engine, &artifact) };
                // An artifact of an older wasmtime fails here and is replaced below.
                if let Ok(component) = cached {
                    return Ok((component, CacheOutcome::Cached, None));
                }
            }
            // None there, or unreadable: compiled (again) and stored below.
            Ok(None) => {}
            Err(reason) => {
                warning = Some(format!(
                    "the cached compiled component for `{origin}` ({}) failed authentication ({reason}); it was discarded and the component compiled again",
                    path.display()
                ));
            }
        }
        let component = compile(engine, origin, wasm, progress)?;
        let artifact = component.serialize().map_err(|error| Error::Load {
            origin: origin.to_owned(),
            reason: format!("cannot serialise the compiled component: {}", describe(&error)),
        })?;
        self.artifacts.store(&name, &artifact).map_err(|source| Error::Cache { path, source })?;
        let outcome = if warning.is_some() { CacheOutcome::Rejected } else { CacheOutcome::Compiled };
        Ok((component, outcome, warning))
    }
}

/// What `RuntimeBuilder::on_progress` is told while
/// components load: compiling one for this machine takes seconds where loading one takes
/// milliseconds, so a person waiting should hear of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LoadProgress<'a> {
    /// The component `origin` is being compiled (it is neither built in nor in the cache).
    Compiling {
        /// The component's origin (`plugin:NAME.wasm`, ...).
        origin: &'a str,
    },
    /// It has been compiled.
    Compiled {
        /// The component's origin.
        origin: &'a str,
        /// How long compiling took.
        elapsed: std::time::Duration,
    },
}

/// A [`LoadProgress`] listener.
pub(crate) type Progress = dyn Fn(LoadProgress<'_>) + Send + Sync;

pub(crate) fn compile(engine: &Engine, origin: &str, wasm: &[u8], progress: &Progress) -> Result<Component, Error> {
    if let Some(reason) = toolcell_outcome::plugins::not_a_component(wasm) {
        return Err(Error::Load { origin: origin.to_owned(), reason });
    }
    progress(LoadProgress::Compiling { origin });
    let started = std::time::Instant::now();
    let component = Component::new(engine, wasm).map_err(|error| Error::Load { origin: origin.to_owned(), reason: describe(&error) })?;
    progress(LoadProgress::Compiled { origin, elapsed: started.elapsed() });
    Ok(component)
}

/// The artifact's name: a digest of the component bytes, the engine's compatibility hash and
/// this crate's version.
fn cache_key(engine: &Engine, wasm: &[u8]) -> String {
    toolcell_state::artifacts::artifact_name(&engine.precompile_compatibility_hash(), env!("CARGO_PKG_VERSION"), wasm)
}

/// A component's code, linked: ready from load, or (a built-in tool) deserialized again from
/// the binary on the tool's first call. A built-in's code is some hundreds of KiB to MiBs once
/// deserialized, and a session calls a few of the 27; they are described at load and dropped.
pub(crate) struct ComponentCode {
    ready: std::sync::OnceLock<bindings::PluginPre<CallState>>,
    /// The built-in's compiled form and the linker it links with, for `ready`'s first use.
    embedded: Option<(&'static [u8], Arc<wasmtime::component::Linker<CallState>>)>,
}

impl ComponentCode {
    /// A built-in's code, deserialized from `artifact` on its first call.
    pub(crate) fn embedded(artifact: &'static [u8], linker: Arc<wasmtime::component::Linker<CallState>>) -> Self {
        Self { ready: std::sync::OnceLock::new(), embedded: Some((artifact, linker)) }
    }

    pub(crate) fn ready(pre: bindings::PluginPre<CallState>) -> Self {
        Self { ready: std::sync::OnceLock::from(pre), embedded: None }
    }

    /// The linked component of the tool loaded from `origin`, deserialized now if this is its
    /// first use.
    pub(crate) fn get(&self, engine: &Engine, origin: &str) -> Result<&bindings::PluginPre<CallState>, Error> {
        if let Some(pre) = self.ready.get() {
            return Ok(pre);
        }
        let load_error = |error: wasmtime::Error| Error::Load { origin: origin.to_owned(), reason: describe(&error) };
        let Some((artifact, linker)) = &self.embedded else {
            return Err(load_error(wasmtime::format_err!("its code was not kept")));
        };
        let component = deserialize_embedded(engine, artifact).map_err(load_error)?;
        let pre = bindings::PluginPre::new(linker.instantiate_pre(&component).map_err(load_error)?).map_err(load_error)?;
        // Two first calls at once both deserialize; one's result is kept.
        Ok(self.ready.get_or_init(|| pre))
    }
}

/// Deserialize a built-in tool's compiled form, then give its pages in the binary back.
pub(crate) fn deserialize_embedded(engine: &Engine, artifact: &'static [u8]) -> Result<Component, wasmtime::Error> {
    // SAFETY: `precompiled_component`'s caller vouched that the artifact comes from this
    // program's own build; wasmtime checks that it was made for this engine and CPU.
    #[expect(unsafe_code, reason = "the built-in tools' artifacts are part of the trusted binary")]
    let component = unsafe { Component::deserialize(engine, artifact) };
    // wasmtime copied it: its pages in the binary are not needed again.
    crate::pages::release_pages(artifact);
    component
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn processes_starting_together_agree_on_one_whole_key() {
        for _ in 0..20 {
            let cache = tempfile::tempdir().expect("cache");
            let path = cache.path().join(CACHE_KEY_FILE);
            let keys: Vec<[u8; toolcell_state::storage::KEY_BYTES]> = std::thread::scope(|scope| {
                let handles: Vec<_> = (0..8)
                    .map(|_| {
                        scope.spawn(|| {
                            load_or_create_key(&path, "the cache key", |source| Error::Cache { path: path.clone(), source })
                                .expect("a whole key")
                        })
                    })
                    .collect();
                handles.into_iter().map(|handle| handle.join().expect("thread")).collect()
            });
            assert!(keys.windows(2).all(|pair| pair[0] == pair[1]), "every starter reads the key that won");
            assert_eq!(std::fs::read(&path).expect("key"), keys[0]);
            let left: Vec<_> = std::fs::read_dir(cache.path()).expect("list").map(|entry| entry.expect("entry").file_name()).collect();
            assert_eq!(left, [CACHE_KEY_FILE], "no partial key files are left behind");
        }
    }
}
