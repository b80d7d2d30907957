//! `toolcell:tool/context`: the call's identity, its notes and images, `inspect`, the content
//! index's candidates, splitting a call into parts, and what a tool remembers. Its per-call
//! state ([`CallContext`]), the view the host traits are implemented on ([`ContextView`]),
//! and its linker registration ([`add_to_linker`]) are here.

use std::sync::{Arc, Mutex};

use wasmtime::component::{HasData, Linker};

use super::CallState;
use super::filesystem::FsGuard;
use crate::bindings;
use crate::bindings::to_wit_error;
use crate::error::{Error, describe};

/// Notes a call may attach to its audit record, in bytes; the rest is cut with a marker.
pub(crate) const MAX_NOTE_BYTES: usize = 4 * 1024;
/// Bytes of images one call may attach.
pub(crate) const MAX_IMAGE_BYTES: usize = 5 * 1024 * 1024;
/// The most bytes of progress one part of a split call posts (`shard-progress`).
const MAX_SHARD_PROGRESS_BYTES: usize = 4 * 1024;

pub(super) type WitError = bindings::toolcell::tool::types::ToolError;

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
    pub(crate) index: Option<toolcell_state::content_index::IndexScope>,
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
    /// In a part of a split call: every part's latest progress (`shard-progress`), shared
    /// by the parts so that they can stop one another.
    pub(crate) shard_progress: Option<Arc<Mutex<Vec<Vec<u8>>>>>,
    /// The linear memory granted to all the instances of a split call at once: its memory
    /// limit is the call's, not each part's.
    pub(crate) memory_pool: Option<Arc<std::sync::atomic::AtomicUsize>>,
}

type WitOutput = bindings::toolcell::tool::types::ToolOutput;

/// A `search-candidates` question.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct SearchQuestion {
    pattern: String,
    case_insensitive: bool,
    under: String,
}

/// A `search-candidates` question and its answer.
#[derive(Debug)]
pub(crate) struct GivenCandidates {
    question: SearchQuestion,
    paths: Vec<String>,
}

/// The host side of `toolcell:tool/context`: the call's identity and notes, and the guard
/// that judges `inspect`.
pub(crate) struct ContextView<'a> {
    pub(super) context: &'a mut CallContext,
    pub(super) guard: &'a mut FsGuard,
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
            Err((kind, message)) => Err(to_wit_error(kind, message)),
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
            let given = given.as_ref().filter(|given| given.question == SearchQuestion { pattern, case_insensitive, under })?;
            self.guard.spend_capability("search-candidates").ok()?;
            return Some(given.paths.clone());
        }
        let scope = self.context.index.as_ref()?;
        // Counted against the call's budget of host calls, like a listing.
        self.guard.spend_capability("search-candidates").ok()?;
        // The host's own paths are never candidates: the guard has them for this call.
        let deadline = self.guard.deadline();
        let candidates = scope.candidates(self.guard.root()?, self.guard.state_paths(), (&pattern, case_insensitive, &under), deadline)?;
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
            *given = Some(GivenCandidates { question: SearchQuestion { pattern, case_insensitive, under }, paths: paths.clone() });
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

    fn shard_progress(&mut self, progress: Vec<u8>) -> Vec<Vec<u8>> {
        let (Some(board), Some((index, _))) = (self.context.shard_progress.as_ref(), self.context.shard) else {
            return Vec::new();
        };
        let Ok(mut board) = board.lock() else {
            return Vec::new();
        };
        if progress.len() <= MAX_SHARD_PROGRESS_BYTES
            && let Some(slot) = board.get_mut(index as usize)
        {
            *slot = progress;
        }
        board.clone()
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

pub(super) struct HasContext;

impl HasData for HasContext {
    type Data<'a> = ContextView<'a>;
}

/// Link `toolcell:tool/context` (and the types it shares with `workflow`).
pub(super) fn add_to_linker(linker: &mut Linker<CallState>) -> Result<(), Error> {
    bindings::toolcell::tool::types::add_to_linker::<CallState, HasContext>(linker, context_view).map_err(link_error)?;
    bindings::toolcell::tool::context::add_to_linker::<CallState, HasContext>(linker, context_view).map_err(link_error)
}

/// The context's view of a call's store.
pub(super) fn context_view(state: &mut CallState) -> ContextView<'_> {
    ContextView { context: &mut state.context, guard: &mut state.guard }
}

/// Why an interface could not be linked.
pub(super) fn link_error(error: wasmtime::Error) -> Error {
    Error::Engine { reason: format!("cannot link the host interfaces: {}", describe(&error)) }
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
