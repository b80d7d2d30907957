//! The process's limit of open files. Every call holds descriptors for what it has in flight
//! (the new content of each file it rewrites, each file it put in place), and `serve` one per
//! connection: the soft limit many systems start processes with (1,024) is soon met, and a
//! rollback that meets it cannot put files back.

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// The soft limit asked for, if the hard limit allows it.
const WANTED: u64 = 1 << 16;

/// Raise the process's soft limit of open files toward its hard limit (up to 65,536), as
/// servers do at start; the soft limit in force after.
#[must_use]
pub fn raise_open_file_limit() -> u64 {
    let limit = getrlimit(Resource::Nofile);
    let current = limit.current.unwrap_or(u64::MAX);
    let wanted = limit.maximum.unwrap_or(u64::MAX).min(WANTED);
    if current < wanted && setrlimit(Resource::Nofile, Rlimit { current: Some(wanted), maximum: limit.maximum }).is_ok() {
        return wanted;
    }
    current
}
