//! What each call has in flight: every path it journaled, from its first change until it
//! commits or is rolled back, in this process.
//!
//! A call's rollback restores its paths by name. If another call renamed a directory one of
//! them lies in, removed it, or filled a directory the first call created, that rollback
//! would find another tree and stop half done. So a path that another call still in flight
//! has journaled, or that lies in or contains such a path, is not another call's to change
//! until that call ends: the change is refused as a conflict, before anything is done.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{LazyLock, Mutex};

/// Per workspace, each path journaled by a call in flight, with the calls that journaled it.
type Table = HashMap<PathBuf, BTreeMap<String, Vec<String>>>;

static TABLE: LazyLock<Mutex<Table>> = LazyLock::new(Mutex::default);

/// The paths one call has in flight; they are released when it is dropped (the call ended).
#[derive(Debug)]
pub struct InFlight {
    workspace: PathBuf,
    call_id: String,
    paths: Vec<String>,
}

impl InFlight {
    /// Nothing in flight yet for `call_id` in `workspace`.
    pub fn new(workspace: PathBuf, call_id: String) -> InFlight {
        InFlight { workspace, call_id, paths: Vec::new() }
    }

    /// Claim the canonical `path` for this call before it journals it: `false` if another call
    /// in flight has journaled it, a path inside it, or a directory it lies in.
    pub fn claim(&mut self, path: &str) -> bool {
        let mut table = TABLE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let paths = table.entry(self.workspace.clone()).or_default();
        let others = |owners: &Vec<String>| owners.iter().any(|owner| *owner != self.call_id);
        // The path itself and every directory it lies in.
        let ancestors = path.match_indices('/').map(|(end, _)| &path[..end]).chain(std::iter::once(path));
        for ancestor in ancestors {
            if paths.get(ancestor).is_some_and(others) {
                return false;
            }
        }
        // Every path inside it.
        let inside = format!("{path}/");
        if paths.range(inside.clone()..).take_while(|(key, _)| key.starts_with(&inside)).any(|(_, owners)| others(owners)) {
            return false;
        }
        let owners = paths.entry(path.to_owned()).or_default();
        if !owners.contains(&self.call_id) {
            owners.push(self.call_id.clone());
            self.paths.push(path.to_owned());
        }
        true
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.paths.is_empty() {
            return;
        }
        let mut table = TABLE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(paths) = table.get_mut(&self.workspace) else {
            return;
        };
        for path in &self.paths {
            if let Some(owners) = paths.get_mut(path) {
                owners.retain(|owner| *owner != self.call_id);
                if owners.is_empty() {
                    paths.remove(path);
                }
            }
        }
        if paths.is_empty() {
            table.remove(&self.workspace);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_in_flight_is_one_calls_with_what_it_lies_in_and_holds() {
        let workspace = PathBuf::from("/in-flight-test");
        let mut first = InFlight::new(workspace.clone(), "c-1".to_owned());
        let mut second = InFlight::new(workspace.clone(), "c-2".to_owned());
        assert!(first.claim("a/b/x.txt"));
        assert!(first.claim("a/b/x.txt"), "a call's own path again");
        assert!(first.claim("a/b"), "a call's own directory");
        for (path, free) in [("a/b/x.txt", false), ("a/b", false), ("a", false), ("a/b/x.txt/y", false), ("a/c", true), ("a/bb", true)] {
            assert_eq!(second.claim(path), free, "{path}");
        }
        // Another workspace is another table.
        assert!(InFlight::new(PathBuf::from("/other"), "c-3".to_owned()).claim("a/b"));
        drop(first);
        assert!(second.claim("a/b"), "released when the call ended");
    }
}
