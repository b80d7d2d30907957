//! What tools `remember` between their calls in a session (`toolcell:tool/context`'s
//! `remember` and `recall`): small values in memory, each visible only to the tool and session
//! that wrote it, bounded in size and count, the least recently used dropped first.
//!
//! A value is a hint the tool checks before using (read_file keeps where a large file's lines
//! start, with the size and time of the file it indexed); the host never reads it.

use std::collections::HashMap;
use std::sync::Mutex;

/// A value larger than this is not kept.
pub const MAX_VALUE_BYTES: usize = 64 * 1024;
/// Keys one tool keeps in one session.
pub const MAX_KEYS_PER_SCOPE: usize = 64;
/// Keys kept in all.
const MAX_ENTRIES: usize = 4096;
/// Bytes kept in all (values and keys).
const MAX_TOTAL_BYTES: usize = 32 * 1024 * 1024;

/// Whose a value is: the workspace, the session and the tool.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Scope {
    /// The workspace's path.
    pub workspace: String,
    /// The session id.
    pub session: String,
    /// The tool's name.
    pub tool: String,
}

/// Every scope's values, shared by a runtime's calls.
#[derive(Debug, Default)]
pub struct MemoStore {
    inner: Mutex<Entries>,
}

#[derive(Debug, Default)]
struct Entries {
    values: HashMap<(Scope, String), Entry>,
    bytes: usize,
    clock: u64,
}

#[derive(Debug)]
struct Entry {
    value: Vec<u8>,
    used: u64,
}

impl MemoStore {
    /// The value `scope` keeps under `key`, if it is still kept.
    pub fn recall(&self, scope: &Scope, key: &str) -> Option<Vec<u8>> {
        let mut entries = self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        entries.clock += 1;
        let now = entries.clock;
        let entry = entries.values.get_mut(&(scope.clone(), key.to_owned()))?;
        entry.used = now;
        Some(entry.value.clone())
    }

    /// Keep `value` under `key` for `scope` (not if it is too large), dropping the least
    /// recently used values beyond the bounds.
    pub fn remember(&self, scope: &Scope, key: String, value: Vec<u8>) {
        if value.len() > MAX_VALUE_BYTES || key.len() > MAX_VALUE_BYTES {
            return;
        }
        let mut entries = self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        entries.clock += 1;
        let used = entries.clock;
        let size = key.len() + value.len();
        if let Some(old) = entries.values.remove(&(scope.clone(), key.clone())) {
            entries.bytes -= key.len() + old.value.len();
        }
        // Room in the scope, then in the store: the least recently used go first.
        while entries.values.keys().filter(|(owner, _)| owner == scope).count() >= MAX_KEYS_PER_SCOPE {
            entries.drop_oldest(|owner| owner == scope);
        }
        while !entries.values.is_empty() && (entries.values.len() >= MAX_ENTRIES || entries.bytes + size > MAX_TOTAL_BYTES) {
            entries.drop_oldest(|_| true);
        }
        entries.bytes += size;
        entries.values.insert((scope.clone(), key), Entry { value, used });
    }
}

impl Entries {
    fn drop_oldest(&mut self, within: impl Fn(&Scope) -> bool) {
        let oldest =
            self.values.iter().filter(|((owner, _), _)| within(owner)).min_by_key(|(_, entry)| entry.used).map(|(key, _)| key.clone());
        if let Some(key) = oldest
            && let Some(entry) = self.values.remove(&key)
        {
            self.bytes -= key.1.len() + entry.value.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(session: &str, tool: &str) -> Scope {
        Scope { workspace: "/ws".to_owned(), session: session.to_owned(), tool: tool.to_owned() }
    }

    #[test]
    fn values_are_the_writers_alone_and_bounded() {
        let store = MemoStore::default();
        let mine = scope("s1", "read_file");
        store.remember(&mine, "k".to_owned(), b"v".to_vec());
        assert_eq!(store.recall(&mine, "k"), Some(b"v".to_vec()));
        // Another session, another tool: nothing.
        assert_eq!(store.recall(&scope("s2", "read_file"), "k"), None);
        assert_eq!(store.recall(&scope("s1", "search_files"), "k"), None);
        // Too large: not kept.
        store.remember(&mine, "big".to_owned(), vec![0; MAX_VALUE_BYTES + 1]);
        assert_eq!(store.recall(&mine, "big"), None);
        // A scope keeps its most recently used keys.
        for index in 0..MAX_KEYS_PER_SCOPE + 5 {
            store.remember(&mine, format!("key-{index}"), vec![1]);
            // `k` stays in use.
            assert!(store.recall(&mine, "k").is_some());
        }
        assert_eq!(store.recall(&mine, "key-0"), None);
        assert!(store.recall(&mine, &format!("key-{}", MAX_KEYS_PER_SCOPE + 4)).is_some());
        assert!(store.recall(&mine, "k").is_some());
        let entries = store.inner.lock().expect("lock");
        assert_eq!(entries.values.len(), MAX_KEYS_PER_SCOPE);
        assert_eq!(entries.bytes, entries.values.iter().map(|((_, key), entry)| key.len() + entry.value.len()).sum::<usize>());
    }
}
