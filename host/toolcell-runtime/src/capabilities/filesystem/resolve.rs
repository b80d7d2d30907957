//! Path resolution: a path a component names, relative to one of its descriptors, to the
//! canonical workspace-relative path it leads to (symlinks followed inside the workspace).

use wasmtime::component::Resource;
use wasmtime_wasi::p2::bindings::filesystem::types::ErrorCode;
use wasmtime_wasi::p2::bindings::sync::filesystem::types::Descriptor;
use wasmtime_wasi::p2::{FsError, FsResult};

use super::*;

pub(super) use toolcell_state::beneath::{MAX_SYMLINK_HOPS, Resolved, resolve};

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
