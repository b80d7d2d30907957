//! Per-call store state, the host side of `toolcell:tool/context`, and the linker that grants
//! a component exactly the `tool-component` world.

use std::sync::{Arc, Mutex};

use wasmtime::Engine;
use wasmtime::component::{HasData, Linker, ResourceTable};
use wasmtime_wasi::cli::WasiCli;
use wasmtime_wasi::clocks::WasiClocks;
use wasmtime_wasi::random::WasiRandom;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use crate::bindings;
pub(crate) use crate::capture::CapturePipe;
pub use crate::capture::Captured;
use crate::error::{Error, describe};
use crate::guard::{FsGuard, GuardedFilesystem};

/// Notes a call may attach to its audit record, in bytes; the rest is cut with a marker.
pub(crate) const MAX_NOTE_BYTES: usize = 4 * 1024;
/// Bytes of images one call may attach.
pub(crate) const MAX_IMAGE_BYTES: usize = 5 * 1024 * 1024;

/// What a component's store holds for one call. Dropped with the store when the call ends.
pub(crate) struct CallState {
    pub(crate) wasi: WasiCtx,
    pub(crate) table: ResourceTable,
    pub(crate) context: CallContext,
    pub(crate) guard: FsGuard,
    pub(crate) limiter: crate::limits::MemoryLimiter,
    /// When the call's deadline passes: no wait on a clock may last beyond it.
    pub(crate) deadline: std::time::Instant,
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

/// The caller's identity for this call, and the notes the tool attached.
#[derive(Debug, Clone, Default)]
pub(crate) struct CallContext {
    pub(crate) role: String,
    pub(crate) session_id: String,
    pub(crate) call_id: String,
    /// The task the session is bound to, `CHAIN-ID/NNN-slug`.
    pub(crate) task: Option<String>,
    /// The `workflow` import's view of this call; `None` where no workflow is offered
    /// (`describe`, validators): every capability is then refused.
    pub(crate) workflow: Option<Arc<toolcell_state::workflow::WorkflowCall>>,
    pub(crate) notes: Vec<String>,
    pub(crate) note_bytes: usize,
    pub(crate) notes_cut: bool,
    /// Images attached for the agent, and their bytes.
    pub(crate) images: Vec<toolcell_types::Image>,
    pub(crate) image_bytes: usize,
    /// Where this tool's values for this session are kept (`remember`, `recall`); `None`
    /// where there is no session (`describe`, validators).
    pub(crate) memo: Option<(Arc<toolcell_state::memo::MemoStore>, toolcell_state::memo::Scope)>,
    /// The workspace's content index, for `search-candidates`; `None` where there is no call.
    pub(crate) index: Option<crate::content_index::IndexScope>,
    /// How many parts the host would run this call in (`split`); 0 where it runs none (a
    /// part, an assembly, `describe`).
    pub(crate) parts: u32,
    /// How many parts the component asked for, and was promised.
    pub(crate) split: Option<u32>,
    /// In a part of a split call: which one, and of how many.
    pub(crate) shard: Option<(u32, u32)>,
    /// In the assembly of a split call: the parts' results.
    pub(crate) shard_results: Option<Vec<Result<WitOutput, WitError>>>,
    /// What `search-candidates` answered the call, shared with its parts (clones of this
    /// context): a part asking the same is given the same list, whatever the index learnt
    /// since, so that the parts deal out one list between them.
    pub(crate) candidates_given: Arc<Mutex<Option<GivenCandidates>>>,
    /// The linear memory granted to all the instances of a split call at once: its memory
    /// limit is the call's, not each part's.
    pub(crate) memory_pool: Option<Arc<std::sync::atomic::AtomicUsize>>,
}

type WitOutput = bindings::toolcell::tool::types::ToolOutput;

/// A `search-candidates` question (pattern, case-insensitive, under) and its answer.
#[derive(Debug)]
pub(crate) struct GivenCandidates {
    question: (String, bool, String),
    paths: Vec<String>,
}

/// The host side of `toolcell:tool/context`: the call's identity and notes, and the guard
/// that judges `inspect`.
pub(crate) struct ContextView<'a> {
    context: &'a mut CallContext,
    guard: &'a mut FsGuard,
}

impl bindings::toolcell::tool::context::Host for ContextView<'_> {
    fn role(&mut self) -> String {
        self.context.role.clone()
    }

    fn session_id(&mut self) -> String {
        self.context.session_id.clone()
    }

    fn call_id(&mut self) -> String {
        self.context.call_id.clone()
    }

    fn inspect(
        &mut self,
        path: String,
    ) -> wasmtime::Result<Result<bindings::toolcell::tool::context::PathFacts, bindings::toolcell::tool::types::ToolError>> {
        use bindings::toolcell::tool::context::{Effect as WitEffect, PathFacts};
        let effect = |effect: toolcell_policy::Effect| match effect {
            toolcell_policy::Effect::Allow => WitEffect::Allow,
            toolcell_policy::Effect::Ask => WitEffect::Ask,
            toolcell_policy::Effect::Deny => WitEffect::Deny,
        };
        let inspected = self.guard.inspect(&path);
        if let Some(message) = self.guard.flooded() {
            return Err(wasmtime::format_err!("{message}"));
        }
        Ok(match inspected {
            Ok(found) => {
                Ok(PathFacts { mode: found.mode, read: effect(found.read), write: effect(found.write), delete: effect(found.delete) })
            }
            Err((kind, message)) => Err(crate::to_wit_error(kind, message)),
        })
    }

    fn note(&mut self, text: String) {
        self.context.note(text);
    }

    fn task(&mut self) -> Option<String> {
        self.context.task.clone()
    }

    fn attach_image(&mut self, mime_type: String, data: Vec<u8>) -> Result<(), WitError> {
        const TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];
        if !TYPES.contains(&mime_type.as_str()) {
            return Err(WitError::InvalidArgs(format!(
                "`{}` is not an image type the host attaches: use one of {}",
                mime_type.escape_default(),
                TYPES.join(", ")
            )));
        }
        let found = toolcell_types::image_mime_type(&data);
        if found != Some(mime_type.as_str()) {
            return Err(WitError::InvalidArgs(format!(
                "the attached bytes are not {mime_type} ({}): attach the whole image file with its own type",
                found.map_or_else(|| "they are no image the host knows".to_owned(), |found| format!("they are {found}"))
            )));
        }
        if self.context.image_bytes + data.len() > MAX_IMAGE_BYTES {
            return Err(WitError::TooLarge(format!(
                "this call's images would take {} bytes, over the {} MiB one call may attach",
                self.context.image_bytes + data.len(),
                MAX_IMAGE_BYTES >> 20
            )));
        }
        self.context.image_bytes += data.len();
        self.context.images.push(toolcell_types::Image { mime_type, data });
        Ok(())
    }

    fn search_candidates(&mut self, pattern: String, case_insensitive: bool, under: String) -> Option<Vec<String>> {
        // The assembly of a split search has the parts' results; a part is given the list
        // the call was (none if the call scanned without one).
        if self.context.shard_results.is_some() {
            return None;
        }
        if self.context.shard.is_some() {
            let given = self.context.candidates_given.lock().ok()?;
            let given = given.as_ref().filter(|given| given.question == (pattern, case_insensitive, under))?;
            self.guard.spend_capability("search-candidates").ok()?;
            return Some(given.paths.clone());
        }
        let scope = self.context.index.as_ref()?;
        // Counted against the call's budget of host calls, like a listing.
        self.guard.spend_capability("search-candidates").ok()?;
        // The host's own paths are never candidates: the guard has them for this call.
        let candidates = scope.candidates(self.guard.root()?, self.guard.state_paths(), &pattern, case_insensitive, &under)?;
        // Only files the caller may read, in directories it may list, as a walk would reach
        // them: the index says nothing of the others. What needs approval (`ask`) counts as
        // denied here: the answer would tell what an unapproved file holds, and asking the
        // approver about every file that only may match would ask twice for each it reads.
        use toolcell_policy::{Access, Effect};
        let mut listable: std::collections::HashMap<String, bool> = std::collections::HashMap::new();
        let guard = &*self.guard;
        let mut reachable = |path: &str| {
            let mut directory = path;
            while let Some((parent, _)) = directory.rsplit_once('/') {
                let allowed = *listable.entry(parent.to_owned()).or_insert_with(|| guard.effect(Access::List, parent) == Effect::Allow);
                if !allowed {
                    return false;
                }
                directory = parent;
            }
            guard.effect(Access::Read, path) == Effect::Allow
        };
        let paths: Vec<String> = candidates.into_iter().filter(|path| reachable(path)).collect();
        if let Ok(mut given) = self.context.candidates_given.lock() {
            *given = Some(GivenCandidates { question: (pattern, case_insensitive, under), paths: paths.clone() });
        }
        Some(paths)
    }

    fn split(&mut self, parts: u32) -> u32 {
        if self.context.split.is_some() || self.context.parts < 2 || parts < 2 {
            return 0;
        }
        if self.guard.spend_capability("split").is_err() {
            return 0;
        }
        let promised = parts.min(self.context.parts);
        self.context.split = Some(promised);
        promised
    }

    fn shard(&mut self) -> Option<bindings::toolcell::tool::context::ShardInfo> {
        self.context.shard.map(|(index, count)| bindings::toolcell::tool::context::ShardInfo { index, count })
    }

    fn shard_results(&mut self) -> Option<Vec<Result<WitOutput, WitError>>> {
        self.context.shard_results.clone()
    }

    fn recall(&mut self, key: String) -> Option<Vec<u8>> {
        let (store, scope) = self.context.memo.as_ref()?;
        store.recall(scope, &key)
    }

    fn remember(&mut self, key: String, value: Vec<u8>) {
        if let Some((store, scope)) = &self.context.memo {
            store.remember(scope, key, value);
        }
    }
}

type WitError = bindings::toolcell::tool::types::ToolError;

impl bindings::toolcell::tool::workflow::Host for ContextView<'_> {
    fn locks(&mut self) -> Vec<bindings::toolcell::tool::workflow::LockInfo> {
        let Some(workflow) = self.context.workflow.clone() else {
            return Vec::new();
        };
        if self.guard.spend_capability("locks").is_err() {
            return Vec::new();
        }
        workflow.locks().iter().map(lock_info).collect()
    }

    fn lock_for_task(
        &mut self,
        task: String,
        patterns: Vec<String>,
        ttl_seconds: u32,
    ) -> wasmtime::Result<Result<Vec<bindings::toolcell::tool::workflow::LockInfo>, WitError>> {
        let workflow = match self.workflow("lock-for-task", &task)? {
            Ok(workflow) => workflow,
            Err(error) => return Ok(Err(error)),
        };
        // The files this call is writing and has not put in place yet: `task_start` moves the
        // task to `in-progress` and locks its paths in one call.
        let pending: Vec<String> = self
            .guard
            .transaction
            .as_ref()
            .map(|transaction| transaction.shadows.iter().map(|shadow| shadow.path.clone()).collect())
            .unwrap_or_default();
        let granted =
            self.settle("lock-for-task", &task, workflow.lock_for_task(&self.caller(), &task, &patterns, ttl_seconds, &pending))?;
        Ok(granted.map(|locks| locks.iter().map(lock_info).collect()))
    }

    fn release_task(&mut self, task: String) -> wasmtime::Result<Result<u32, WitError>> {
        let workflow = match self.workflow("release-task", &task)? {
            Ok(workflow) => workflow,
            Err(error) => return Ok(Err(error)),
        };
        self.settle("release-task", &task, workflow.release_task(&self.caller(), &task))
    }

    fn spawn_session(
        &mut self,
        role: String,
        task: String,
    ) -> wasmtime::Result<Result<bindings::toolcell::tool::workflow::Handoff, WitError>> {
        let workflow = match self.workflow("spawn-session", &task)? {
            Ok(workflow) => workflow,
            Err(error) => return Ok(Err(error)),
        };
        let spawned = self.settle("spawn-session", &task, workflow.spawn_session(&self.caller(), &role, &task))?;
        Ok(spawned.map(|(session_id, connect)| bindings::toolcell::tool::workflow::Handoff { session_id, connect }))
    }
}

impl ContextView<'_> {
    /// The call's workflow view; the refusal (audited) where the call has none or its budget
    /// of host calls is spent; a trap once the call was stopped for flooding the audit trail.
    fn workflow(
        &mut self,
        operation: &'static str,
        subject: &str,
    ) -> wasmtime::Result<Result<Arc<toolcell_state::workflow::WorkflowCall>, WitError>> {
        if let Err(reason) = self.guard.spend_capability(operation) {
            if self.guard.flooded().is_some() {
                return Err(wasmtime::format_err!("{reason}"));
            }
            return Ok(Err(WitError::TooLarge(reason)));
        }
        match &self.context.workflow {
            Some(workflow) => Ok(Ok(Arc::clone(workflow))),
            None => {
                let message = "the task-chain workflow is not available in this call".to_owned();
                self.guard.refuse_capability(operation, subject, "no-workflow", message.clone());
                self.stop_if_flooded()?;
                Ok(Err(WitError::Denied(message)))
            }
        }
    }

    /// Record what a capability decided: a refusal is audited and fails the call (a flood of
    /// them stops the component); a grant is recorded; the capability's own error goes back to
    /// the component.
    fn settle<T>(
        &mut self,
        operation: &'static str,
        subject: &str,
        decided: Result<Result<T, toolcell_types::ToolError>, toolcell_state::workflow::Refusal>,
    ) -> wasmtime::Result<Result<T, WitError>> {
        match decided {
            Err(refusal) => {
                self.guard.refuse_capability(refusal.operation, &refusal.subject, &refusal.rule, refusal.message.clone());
                self.stop_if_flooded()?;
                Ok(Err(WitError::Denied(refusal.message)))
            }
            Ok(Err(error)) => Ok(Err(crate::to_wit_error(error.kind, error.message))),
            Ok(Ok(value)) => {
                self.guard.record_capability(operation, subject, toolcell_state::workflow::grant_of(operation));
                Ok(Ok(value))
            }
        }
    }

    fn caller(&self) -> toolcell_state::workflow::Caller<'_> {
        toolcell_state::workflow::Caller { role: &self.context.role, session_id: &self.context.session_id, call_id: &self.context.call_id }
    }

    fn stop_if_flooded(&self) -> wasmtime::Result<()> {
        match self.guard.flooded() {
            Some(message) => Err(wasmtime::format_err!("{message}")),
            None => Ok(()),
        }
    }
}

fn lock_info(lock: &toolcell_locks::Lock) -> bindings::toolcell::tool::workflow::LockInfo {
    let toolcell_state::workflow::LockInfo { pattern, owner, session, mode, expires } = lock.into();
    bindings::toolcell::tool::workflow::LockInfo { pattern, owner, session, mode, expires }
}

impl CallContext {
    fn note(&mut self, text: String) {
        if self.notes_cut {
            return;
        }
        let room = MAX_NOTE_BYTES - self.note_bytes;
        if text.len() <= room {
            self.note_bytes += text.len();
            self.notes.push(text);
            return;
        }
        let mut cut = room;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        self.notes.push(format!("{}… [notes cut at {MAX_NOTE_BYTES} bytes]", &text[..cut]));
        self.note_bytes = MAX_NOTE_BYTES;
        self.notes_cut = true;
    }
}

impl bindings::toolcell::tool::types::Host for ContextView<'_> {}

struct HasContext;

impl HasData for HasContext {
    type Data<'a> = ContextView<'a>;
}

struct HasGuardedFilesystem;

impl HasData for HasGuardedFilesystem {
    type Data<'a> = GuardedFilesystem<'a>;
}

/// The host side of `wasi:filesystem` for a call: wasmtime-wasi's implementation behind the
/// policy guard.
fn guarded_filesystem(state: &mut CallState) -> GuardedFilesystem<'_> {
    GuardedFilesystem {
        inner: wasmtime_wasi::filesystem::WasiFilesystemCtxView { ctx: state.wasi.filesystem(), table: &mut state.table },
        guard: &mut state.guard,
    }
}

fn unguarded_filesystem(state: &mut CallState) -> wasmtime_wasi::filesystem::WasiFilesystemCtxView<'_> {
    wasmtime_wasi::filesystem::WasiFilesystemCtxView { ctx: state.wasi.filesystem(), table: &mut state.table }
}

struct HasDeadlineClock;

impl HasData for HasDeadlineClock {
    type Data<'a> = DeadlineClock<'a>;
}

/// wasmtime-wasi's monotonic clock, except that a subscription never waits past the call's
/// deadline. Epoch interruption cannot stop a component while the host is blocked in a wait
/// on its behalf (`std::thread::sleep`, a poll with a long timeout); clamping the wait hands
/// control back at the deadline, and the epoch check then stops the component.
struct DeadlineClock<'a> {
    inner: wasmtime_wasi::clocks::WasiClocksCtxView<'a>,
    deadline: std::time::Instant,
}

impl DeadlineClock<'_> {
    /// Nanoseconds until the deadline (at least one tick, so that a wait ends after it).
    fn remaining(&self) -> u64 {
        let left = self.deadline.saturating_duration_since(std::time::Instant::now()) + crate::limits::EPOCH_TICK;
        u64::try_from(left.as_nanos()).unwrap_or(u64::MAX)
    }
}

impl wasmtime_wasi::p2::bindings::clocks::monotonic_clock::Host for DeadlineClock<'_> {
    fn now(&mut self) -> wasmtime::Result<u64> {
        wasmtime_wasi::p2::bindings::clocks::monotonic_clock::Host::now(&mut self.inner)
    }

    fn resolution(&mut self) -> wasmtime::Result<u64> {
        wasmtime_wasi::p2::bindings::clocks::monotonic_clock::Host::resolution(&mut self.inner)
    }

    fn subscribe_instant(&mut self, when: u64) -> wasmtime::Result<wasmtime::component::Resource<wasmtime_wasi::p2::DynPollable>> {
        let now = wasmtime_wasi::p2::bindings::clocks::monotonic_clock::Host::now(&mut self.inner)?;
        let latest = now.saturating_add(self.remaining());
        wasmtime_wasi::p2::bindings::clocks::monotonic_clock::Host::subscribe_instant(&mut self.inner, when.min(latest))
    }

    fn subscribe_duration(&mut self, duration: u64) -> wasmtime::Result<wasmtime::component::Resource<wasmtime_wasi::p2::DynPollable>> {
        let clamped = duration.min(self.remaining());
        wasmtime_wasi::p2::bindings::clocks::monotonic_clock::Host::subscribe_duration(&mut self.inner, clamped)
    }
}

struct HasTable;

impl HasData for HasTable {
    type Data<'a> = &'a mut ResourceTable;
}

/// A linker with exactly the interfaces of the `tool-component` world. `wasi:sockets` is
/// deliberately absent: a component that imports it fails the import check at load, and could
/// not be instantiated anyway.
pub(crate) fn linker(engine: &Engine, guarded: bool) -> Result<Linker<CallState>, Error> {
    use wasmtime_wasi::p2::bindings::{cli, clocks, filesystem, random, sync};

    fn link(result: wasmtime::Result<()>) -> Result<(), Error> {
        result.map_err(|error| Error::Engine { reason: format!("cannot link the host interfaces: {}", describe(&error)) })
    }

    let mut linker = Linker::new(engine);
    let l = &mut linker;
    link(sync::io::error::add_to_linker::<CallState, HasTable>(l, |state| &mut state.table))?;
    link(sync::io::poll::add_to_linker::<CallState, HasTable>(l, |state| &mut state.table))?;
    link(sync::io::streams::add_to_linker::<CallState, HasTable>(l, |state| &mut state.table))?;
    link(clocks::wall_clock::add_to_linker::<CallState, WasiClocks>(l, wasmtime_wasi::clocks::WasiClocksView::clocks))?;
    link(clocks::monotonic_clock::add_to_linker::<CallState, HasDeadlineClock>(l, |state| {
        let deadline = state.deadline;
        DeadlineClock { inner: wasmtime_wasi::clocks::WasiClocksView::clocks(state), deadline }
    }))?;
    link(random::random::add_to_linker::<CallState, WasiRandom>(l, |state| state.wasi.random()))?;
    link(random::insecure::add_to_linker::<CallState, WasiRandom>(l, |state| state.wasi.random()))?;
    link(random::insecure_seed::add_to_linker::<CallState, WasiRandom>(l, |state| state.wasi.random()))?;
    if guarded {
        // Every filesystem call goes through the guard.
        link(filesystem::preopens::add_to_linker::<CallState, HasGuardedFilesystem>(l, guarded_filesystem))?;
        link(sync::filesystem::types::add_to_linker::<CallState, HasGuardedFilesystem>(l, guarded_filesystem))?;
    } else {
        // The benchmark's baseline only (feature `bench-baseline`): wasmtime-wasi unguarded.
        link(filesystem::preopens::add_to_linker::<CallState, wasmtime_wasi::filesystem::WasiFilesystem>(l, unguarded_filesystem))?;
        link(sync::filesystem::types::add_to_linker::<CallState, wasmtime_wasi::filesystem::WasiFilesystem>(l, unguarded_filesystem))?;
    }
    link(cli::exit::add_to_linker::<CallState, WasiCli>(l, cli_view))?;
    link(cli::environment::add_to_linker::<CallState, WasiCli>(l, cli_view))?;
    link(cli::stdin::add_to_linker::<CallState, WasiCli>(l, cli_view))?;
    link(cli::stdout::add_to_linker::<CallState, WasiCli>(l, cli_view))?;
    link(cli::stderr::add_to_linker::<CallState, WasiCli>(l, cli_view))?;
    link(cli::terminal_input::add_to_linker::<CallState, WasiCli>(l, cli_view))?;
    link(cli::terminal_output::add_to_linker::<CallState, WasiCli>(l, cli_view))?;
    link(cli::terminal_stdin::add_to_linker::<CallState, WasiCli>(l, cli_view))?;
    link(cli::terminal_stdout::add_to_linker::<CallState, WasiCli>(l, cli_view))?;
    link(cli::terminal_stderr::add_to_linker::<CallState, WasiCli>(l, cli_view))?;
    link(bindings::Plugin::add_to_linker::<CallState, HasContext>(l, |state| ContextView {
        context: &mut state.context,
        guard: &mut state.guard,
    }))?;
    Ok(linker)
}

fn cli_view(state: &mut CallState) -> wasmtime_wasi::cli::WasiCliCtxView<'_> {
    wasmtime_wasi::cli::WasiCliView::cli(state)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_are_capped() {
        let mut context = CallContext::default();
        context.note("first".to_owned());
        context.note("x".repeat(MAX_NOTE_BYTES));
        context.note("dropped".to_owned());
        assert_eq!(context.notes.len(), 2);
        assert!(context.notes[1].ends_with("[notes cut at 4096 bytes]"));
        assert!(context.note_bytes <= MAX_NOTE_BYTES);
    }
}
