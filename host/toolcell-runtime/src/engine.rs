//! The wasmtime engine toolcell runs every component on, and the on-disk cache of compiled
//! components.

use std::hash::Hasher;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use crate::error::{Error, describe};

/// Instances that may be alive at once, across all concurrent calls. A Rust tool component
/// holds a handful of core instances (its module plus the adapter's shims).
const POOL_COMPONENT_INSTANCES: u32 = 128;
const POOL_CORE_INSTANCES: u32 = 1024;
const POOL_MEMORIES: u32 = 256;
const POOL_TABLES: u32 = 512;
/// Bytes of each pooled linear memory and table kept resident between instances.
const KEEP_RESIDENT_BYTES: usize = 1 << 20;
const KEEP_RESIDENT_TABLE_BYTES: usize = 64 << 10;
/// Decommits queued before the pool flushes them in one go.
const DECOMMIT_BATCH: usize = 32;
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
        .decommit_batch_size(DECOMMIT_BATCH);
    let mut config = Config::new();
    config
        .wasm_component_model(true)
        // Deadlines: every store gets an epoch deadline; a ticker thread advances the epoch.
        .epoch_interruption(true)
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    Engine::new(&config).map_err(|error| Error::Engine {
        reason: describe(&error),
    })
}

/// Where a component came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Compiled now (no cache, a cache miss, or an unusable cached artifact).
    Compiled,
    /// Loaded from the compiled-component cache.
    Cached,
}

/// A directory of compiled components, keyed by a hash of the component's bytes and of every
/// engine setting that changes the compiled code.
///
/// Loading a cached artifact skips validation (`Component::deserialize_file` is `unsafe`), so
/// the directory must be writable only by the user running toolcell.
#[derive(Debug, Clone)]
pub(crate) struct ComponentCache {
    directory: PathBuf,
}

impl ComponentCache {
    pub(crate) fn open(directory: &Path) -> Result<Self, Error> {
        std::fs::create_dir_all(directory).map_err(|source| Error::Cache {
            path: directory.to_path_buf(),
            source,
        })?;
        Ok(ComponentCache {
            directory: directory.to_path_buf(),
        })
    }

    /// The compiled component for `wasm`, from the cache if it holds one, else compiled and
    /// stored.
    pub(crate) fn load(&self, engine: &Engine, origin: &str, wasm: &[u8]) -> Result<(Component, CacheOutcome), Error> {
        let path = self.directory.join(format!("{}.cwasm", cache_key(engine, wasm)));
        if path.is_file() {
            // SAFETY: the cache directory is toolcell's own (see the type's docs), and the file
            // name commits to the engine's compatibility hash, so wasmtime's own header check
            // is not the only guard against loading an artifact built for other settings.
            #[expect(unsafe_code, reason = "loading our own precompiled artifact is the point of the cache")]
            let cached = unsafe { Component::deserialize_file(engine, &path) };
            if let Ok(component) = cached {
                return Ok((component, CacheOutcome::Cached));
            }
            // An unreadable or stale artifact is replaced below.
        }
        let component = compile(engine, origin, wasm)?;
        let bytes = component.serialize().map_err(|error| Error::Load {
            origin: origin.to_owned(),
            reason: format!("cannot serialise the compiled component: {}", describe(&error)),
        })?;
        // Write beside, then rename: another process never sees a half-written artifact.
        let temporary = self.directory.join(format!(".{}.{}.tmp", std::process::id(), unique_suffix()));
        let written = std::fs::write(&temporary, &bytes).and_then(|()| std::fs::rename(&temporary, &path));
        if let Err(source) = written {
            let _ = std::fs::remove_file(&temporary);
            return Err(Error::Cache { path, source });
        }
        Ok((component, CacheOutcome::Compiled))
    }
}

pub(crate) fn compile(engine: &Engine, origin: &str, wasm: &[u8]) -> Result<Component, Error> {
    Component::new(engine, wasm).map_err(|error| Error::Load {
        origin: origin.to_owned(),
        reason: describe(&error),
    })
}

/// Hex SHA-256 of the component bytes, the engine's compatibility hash and this crate's version.
fn cache_key(engine: &Engine, wasm: &[u8]) -> String {
    let mut hasher = DigestHasher(Sha256::new());
    std::hash::Hash::hash(&engine.precompile_compatibility_hash(), &mut hasher);
    hasher.0.update(env!("CARGO_PKG_VERSION").as_bytes());
    hasher.0.update((wasm.len() as u64).to_le_bytes());
    hasher.0.update(wasm);
    crate::hex(&hasher.0.finalize())
}

fn unique_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    COUNTER.fetch_add(1, Ordering::Relaxed)
}

/// Feeds a `Hash` value into SHA-256, so that the engine's compatibility hash, which is only
/// available as `impl Hash`, becomes part of a stable digest.
struct DigestHasher(Sha256);

impl Hasher for DigestHasher {
    fn finish(&self) -> u64 {
        0
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}
