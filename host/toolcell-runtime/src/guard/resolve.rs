//! Path resolution: a path a component names, relative to one of its descriptors, to the
//! canonical workspace-relative path it leads to (symlinks followed inside the workspace).

use wasmtime::component::Resource;
use wasmtime_wasi::p2::bindings::filesystem::types::ErrorCode;
use wasmtime_wasi::p2::bindings::sync::filesystem::types::Descriptor;
use wasmtime_wasi::p2::{FsError, FsResult};

use super::*;

/// Symlinks followed while resolving one path before it counts as a loop.
pub(super) const MAX_SYMLINK_HOPS: usize = 40;

/// Where a path leads.
pub(super) enum Resolved {
    /// The canonical workspace-relative path (`.` for the root).
    Inside(String),
    /// Outside the workspace (through `..`, an absolute path, or a symlink).
    Outside,
    /// Too many symlinks.
    Loop,
}

/// Resolve `path` relative to the workspace directory `base`, following symlinks in every
/// component (and in the last one if `follow_final`), without ever leaving the workspace.
pub(super) fn resolve(root: Option<&cap_std::fs::Dir>, base: &str, path: &str, follow_final: bool) -> Resolved {
    let Some(root) = root else {
        return Resolved::Outside;
    };
    if path.starts_with('/') {
        return Resolved::Outside;
    }
    let mut resolved: Vec<String> = if base == "." { Vec::new() } else { base.split('/').map(str::to_owned).collect() };
    let mut pending: std::collections::VecDeque<String> = path.split('/').map(str::to_owned).collect();
    let mut hops = 0;
    while let Some(component) = pending.pop_front() {
        match component.as_str() {
            "" | "." => continue,
            ".." => {
                if resolved.pop().is_none() {
                    return Resolved::Outside;
                }
                continue;
            }
            _ => {}
        }
        resolved.push(component);
        let is_last = pending.iter().all(|rest| rest.is_empty() || rest == ".");
        if is_last && !follow_final {
            continue;
        }
        let joined = resolved.join("/");
        let Ok(metadata) = root.symlink_metadata(&joined) else {
            // Missing (about to be created) or unreadable: nothing to follow.
            continue;
        };
        if !metadata.file_type().is_symlink() {
            continue;
        }
        hops += 1;
        if hops > MAX_SYMLINK_HOPS {
            return Resolved::Loop;
        }
        let Ok(target) = root.read_link(&joined) else {
            // cap-std refuses to read a link that points outside (an absolute target).
            return Resolved::Outside;
        };
        let Some(target) = target.to_str() else {
            return Resolved::Outside;
        };
        if target.starts_with('/') {
            return Resolved::Outside;
        }
        resolved.pop();
        for (index, part) in target.split('/').enumerate() {
            pending.insert(index, part.to_owned());
        }
    }
    if resolved.is_empty() { Resolved::Inside(".".to_owned()) } else { Resolved::Inside(resolved.join("/")) }
}

/// The canonical workspace path `path` (relative to the root) leads to, following symlinks;
/// `None` if it leads outside or loops.
pub(crate) fn canonical(root: &cap_std::fs::Dir, path: &str) -> Option<String> {
    match resolve(Some(root), ".", path, true) {
        Resolved::Inside(canonical) => Some(canonical),
        Resolved::Outside | Resolved::Loop => None,
    }
}

impl FsGuard {
    /// `path` joined to `descriptor`'s directory when that needs no resolution: relative, and
    /// without `..`. When none of its components is a symlink it is then the canonical path,
    /// which an open through [`beneath`] proves (it fails on any symlink on the way).
    pub(super) fn plain_path(&self, descriptor: &Resource<Descriptor>, path: &str) -> FsResult<Option<String>> {
        let base = self.descriptors.get(&descriptor.rep()).ok_or_else(|| FsError::from(ErrorCode::BadDescriptor))?;
        if path.is_empty() || path.starts_with('/') || path.contains('\0') {
            return Ok(None);
        }
        let mut joined = String::with_capacity(base.len() + 1 + path.len());
        if base != "." {
            joined.push_str(base);
        }
        for component in path.split('/') {
            match component {
                "" | "." => {}
                ".." => return Ok(None),
                name => {
                    if !joined.is_empty() {
                        joined.push('/');
                    }
                    joined.push_str(name);
                }
            }
        }
        if joined.is_empty() {
            joined.push('.');
        }
        Ok(Some(joined))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolution_follows_symlinks_inside_the_workspace() {
        let temp = tempfile::tempdir().expect("temporary directory");
        let root_path = temp.path().join("ws");
        std::fs::create_dir_all(root_path.join("src")).expect("mkdir");
        std::fs::create_dir_all(root_path.join("docs")).expect("mkdir");
        std::os::unix::fs::symlink("../docs", root_path.join("src/link")).expect("symlink");
        std::os::unix::fs::symlink(temp.path(), root_path.join("out")).expect("symlink");
        std::os::unix::fs::symlink("loop2", root_path.join("loop1")).expect("symlink");
        std::os::unix::fs::symlink("loop1", root_path.join("loop2")).expect("symlink");
        let root = cap_std::fs::Dir::open_ambient_dir(&root_path, cap_std::ambient_authority()).expect("open");
        let inside = |base: &str, path: &str, follow: bool| match resolve(Some(&root), base, path, follow) {
            Resolved::Inside(path) => path,
            Resolved::Outside => "OUTSIDE".to_owned(),
            Resolved::Loop => "LOOP".to_owned(),
        };
        assert_eq!(inside(".", "src/../docs/x", true), "docs/x");
        assert_eq!(inside(".", "./docs//x", true), "docs/x");
        assert_eq!(inside(".", "src/link/x", true), "docs/x");
        assert_eq!(inside("src", "link/x", true), "docs/x");
        assert_eq!(inside(".", "src/link", true), "docs");
        assert_eq!(inside(".", "src/link", false), "src/link");
        assert_eq!(inside(".", "out/secret", true), "OUTSIDE");
        assert_eq!(inside(".", "out", false), "out");
        assert_eq!(inside(".", "../x", true), "OUTSIDE");
        assert_eq!(inside(".", "/etc/passwd", true), "OUTSIDE");
        assert_eq!(inside(".", "loop1/x", true), "LOOP");
        assert_eq!(inside(".", "new/file.txt", true), "new/file.txt");
    }
}
