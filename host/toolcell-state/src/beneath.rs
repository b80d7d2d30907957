//! Opening a canonical workspace path without following any symlink.
//!
//! The guard judges a path, then opens it. A symlink swapped in anywhere on the way between the
//! two — the final component or any directory above it — must not redirect the open to a file
//! that was not judged. So these opens refuse every symlink: `openat2` with
//! `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS` where the kernel has it (Linux 5.6 and later), and a
//! walk of `openat(O_NOFOLLOW)`, one component at a time, where it does not. A canonical path
//! contains no symlink, so `ELOOP` from here means "a symlink is on this path now": either the
//! path was never canonical (the caller resolves it and tries again) or it changed since it was
//! judged.
//!
//! Opens are also non-blocking (`O_NONBLOCK`, `O_NOCTTY`): opening a FIFO for reading would
//! otherwise wait for a writer, beyond any deadline. The caller refuses what is not a regular
//! file or directory once it has the descriptor.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};

/// Set once `openat2` turned out to be unavailable (an old kernel, or a seccomp filter).
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

/// How often `openat2` is retried when the kernel reports a concurrent rename (`EAGAIN`).
const RETRIES: usize = 8;

/// Open the canonical workspace-relative `path` (`.` for the root) under `root` with `flags`,
/// following no symlink and never leaving `root`. `O_CLOEXEC`, `O_NOFOLLOW`, `O_NONBLOCK` and
/// `O_NOCTTY` are added. `mode` applies to a file `O_CREAT` creates.
///
/// # Errors
///
/// `ELOOP` if a component of `path` is a symlink, `EXDEV` if `path` would leave `root`, and
/// whatever the open itself fails with.
pub fn open(root: impl AsFd, path: &str, flags: OFlags, mode: Mode) -> io::Result<OwnedFd> {
    // `O_PATH` takes no other flags but these (`openat2` refuses the rest).
    let flags = if flags.contains(OFlags::PATH) {
        flags | OFlags::CLOEXEC | OFlags::NOFOLLOW
    } else {
        flags | OFlags::CLOEXEC | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY
    };
    // `openat2` refuses a mode without `O_CREAT`.
    let mode = if flags.contains(OFlags::CREATE) { mode } else { Mode::empty() };
    if path.contains('\0') {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    let opened = open_refusing_symlinks(root.as_fd(), path, flags, mode);
    match opened {
        // `O_DIRECTORY` on a final symlink fails as "not a directory" before it fails as a
        // symlink; say what it is.
        Err(error) if flags.contains(OFlags::DIRECTORY) && error.raw_os_error() == Some(rustix::io::Errno::NOTDIR.raw_os_error()) => {
            let is_symlink = rustix::fs::statat(root.as_fd(), path, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
                .is_ok_and(|stat| FileType::from_raw_mode(stat.st_mode) == FileType::Symlink);
            Err(if is_symlink { io::Error::from_raw_os_error(rustix::io::Errno::LOOP.raw_os_error()) } else { error })
        }
        opened => opened,
    }
}

fn open_refusing_symlinks(root: std::os::fd::BorrowedFd<'_>, path: &str, flags: OFlags, mode: Mode) -> io::Result<OwnedFd> {
    if !NO_OPENAT2.load(Ordering::Relaxed) {
        let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
        for _ in 0..RETRIES {
            match rustix::fs::openat2(root, path, flags, mode, resolve) {
                // A rename somewhere on the host: try again.
                Err(rustix::io::Errno::AGAIN | rustix::io::Errno::INTR) => continue,
                // Some seccomp sandboxes answer `EPERM` for `openat2`; so can a file seal.
                // The walk below gives the real answer either way (as cap-std does).
                Err(rustix::io::Errno::PERM) => break,
                Err(rustix::io::Errno::NOSYS) => {
                    NO_OPENAT2.store(true, Ordering::Relaxed);
                    break;
                }
                result => return result.map_err(io::Error::from),
            }
        }
    }
    open_by_walking(root, path, flags, mode)
}

/// The same open without `openat2`: each directory on the way is opened with `O_NOFOLLOW` and
/// checked to be a directory, then the last component is opened relative to it.
fn open_by_walking(root: impl AsFd, path: &str, flags: OFlags, mode: Mode) -> io::Result<OwnedFd> {
    let components: Vec<&str> = path.split('/').filter(|component| !component.is_empty() && *component != ".").collect();
    let Some((last, directories)) = components.split_last() else {
        return rustix::fs::openat(root.as_fd(), ".", flags, mode).map_err(io::Error::from);
    };
    let mut directory: Option<OwnedFd> = None;
    for component in directories.iter().chain(std::iter::once(last)) {
        if *component == ".." {
            return Err(io::Error::from_raw_os_error(rustix::io::Errno::XDEV.raw_os_error()));
        }
    }
    for component in directories {
        let parent = directory.as_ref().map_or_else(|| root.as_fd(), AsFd::as_fd);
        let opened = rustix::fs::openat(parent, *component, OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())?;
        match FileType::from_raw_mode(rustix::fs::fstat(&opened)?.st_mode) {
            FileType::Directory => directory = Some(opened),
            FileType::Symlink => return Err(io::Error::from_raw_os_error(rustix::io::Errno::LOOP.raw_os_error())),
            _ => return Err(io::Error::from_raw_os_error(rustix::io::Errno::NOTDIR.raw_os_error())),
        }
    }
    let parent = directory.as_ref().map_or_else(|| root.as_fd(), AsFd::as_fd);
    rustix::fs::openat(parent, *last, flags, mode).map_err(io::Error::from)
}

/// The directory holding the canonical workspace path `path`, opened following no symlink,
/// and `path`'s last component: operations on that name in that directory cannot be sent
/// elsewhere by a directory on the way swapped for a symlink.
///
/// # Errors
///
/// As [`open`] for the parent directory.
pub fn parent(root: impl AsFd, path: &str) -> io::Result<(cap_std::fs::Dir, &str)> {
    let (parent, name) = path.rsplit_once('/').unwrap_or((".", path));
    let directory = open(root, parent, OFlags::DIRECTORY | OFlags::RDONLY, Mode::empty())?;
    Ok((cap_std::fs::Dir::from_std_file(std::fs::File::from(directory)), name))
}

/// Open `name` in `directory` without following it if it is a symlink (`ELOOP` then).
///
/// # Errors
///
/// `ELOOP` if `name` is a symlink, and whatever the open itself fails with.
pub fn open_in(directory: impl AsFd, name: &str, flags: OFlags) -> io::Result<std::fs::File> {
    // `O_PATH` takes no other flags but these (`openat2` refuses the rest).
    let flags = if flags.contains(OFlags::PATH) {
        flags | OFlags::CLOEXEC | OFlags::NOFOLLOW
    } else {
        flags | OFlags::CLOEXEC | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY
    };
    Ok(std::fs::File::from(rustix::fs::openat(directory, name, flags, Mode::empty())?))
}

/// Whether `error` says a symlink is on the path.
pub fn is_symlink_on_path(error: &io::Error) -> bool {
    error.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error())
}

// Path resolution: a path a component names, relative to one of its descriptors, to the
// canonical workspace-relative path it leads to (symlinks followed inside the workspace).

/// The longest path the kernel looks up, its terminating NUL included (`PATH_MAX` on Linux).
const PATH_MAX: usize = 4096;

/// Symlinks followed while resolving one path before it counts as a loop.
pub const MAX_SYMLINK_HOPS: usize = 40;

/// Where a path leads.
pub enum Resolved {
    /// The canonical workspace-relative path (`.` for the root).
    Inside(String),
    /// Outside the workspace (through `..`, an absolute path, or a symlink).
    Outside,
    /// Too many symlinks.
    Loop,
}

/// Resolve `path` relative to the workspace directory `base`, following symlinks in every
/// component (and in the last one if `follow_final`), without ever leaving the workspace.
pub fn resolve(root: Option<&cap_std::fs::Dir>, base: &str, path: &str, follow_final: bool) -> Resolved {
    let Some(root) = root else {
        return Resolved::Outside;
    };
    if path.starts_with('/') {
        return Resolved::Outside;
    }
    if let Some(canonical) = resolve_plain(root, base, path, follow_final) {
        return Resolved::Inside(canonical);
    }
    resolve_walking(root, base, path, follow_final)
}

/// The common case in one step: a path none of whose names (those [`resolve_walking`] looks
/// at) is a symlink leads where it says, `..` going back one name. One `openat2` that refuses
/// every symlink checks them all, where looking at each name costs a lookup of its own (and
/// cap-std opens the parent of each: three system calls a name). `None` where that cannot
/// tell (a symlink on the way, a name missing, `..` above the workspace, no `openat2`): the
/// walk answers then.
fn resolve_plain(root: &cap_std::fs::Dir, base: &str, path: &str, follow_final: bool) -> Option<String> {
    // `NO_OPENAT2` is not asked: where the kernel has no `openat2` the call fails at once and
    // the walk answers (and the tests that switch the flag do not change this path).
    if path.contains('\0') {
        return None;
    }
    let base = if base == "." { None } else { Some(base) };
    let joined: Vec<&str> = base.into_iter().flat_map(|base| base.split('/')).chain(path.split('/')).collect();
    let is_name = |component: &&str| !component.is_empty() && *component != ".";
    let last = joined.iter().rposition(is_name)?;
    // The walk does not look at a last name it does not follow.
    let checked = if follow_final || joined[last] == ".." { &joined[..] } else { &joined[..last] };
    // One name costs the walk a single `statx`: not worth an `openat2` and a `close`.
    if checked.iter().filter(|component| is_name(component) && **component != "..").count() < 2 {
        return None;
    }
    // Not `O_NOFOLLOW`: with `O_PATH` it would open a last name that is a symlink, as itself.
    let flags = OFlags::PATH | OFlags::CLOEXEC;
    let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    drop(rustix::fs::openat2(root, checked.join("/"), flags, Mode::empty(), resolve).ok()?);
    let mut canonical: Vec<&str> = Vec::new();
    for component in joined {
        match component {
            "" | "." => {}
            ".." => {
                canonical.pop()?;
            }
            name => canonical.push(name),
        }
    }
    Some(if canonical.is_empty() { ".".to_owned() } else { canonical.join("/") })
}

/// [`resolve`] one name at a time: each name looked at (`lstat`), a symlink's target put in
/// its place.
fn resolve_walking(root: &cap_std::fs::Dir, base: &str, path: &str, follow_final: bool) -> Resolved {
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
            // A path this long cannot be looked up: whether a symlink is on it cannot be told,
            // so it is not taken as inside (nothing could act on it anyway).
            if joined.len() >= PATH_MAX {
                return Resolved::Outside;
            }
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
pub fn canonical(root: &cap_std::fs::Dir, path: &str) -> Option<String> {
    match resolve(Some(root), ".", path, true) {
        Resolved::Inside(canonical) => Some(canonical),
        Resolved::Outside | Resolved::Loop => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workspace() -> (tempfile::TempDir, std::fs::File) {
        let temp = tempfile::tempdir().expect("temporary directory");
        std::fs::create_dir_all(temp.path().join("ws/d/e")).expect("directories");
        std::fs::write(temp.path().join("ws/d/e/f.txt"), "inside").expect("file");
        std::fs::create_dir_all(temp.path().join("ws/hidden")).expect("directory");
        std::fs::write(temp.path().join("ws/hidden/f.txt"), "hidden").expect("file");
        std::fs::write(temp.path().join("outside.txt"), "outside").expect("file");
        std::os::unix::fs::symlink("hidden", temp.path().join("ws/link")).expect("symlink");
        std::os::unix::fs::symlink("../outside.txt", temp.path().join("ws/out")).expect("symlink");
        let root = std::fs::File::open(temp.path().join("ws")).expect("open root");
        (temp, root)
    }

    fn read(fd: OwnedFd) -> String {
        io::read_to_string(std::fs::File::from(fd)).expect("read")
    }

    #[test]
    fn opens_plain_paths_and_refuses_every_symlink_on_the_way() {
        let (_temp, root) = workspace();
        for walking in [false, true] {
            let open_directory = |path: &str| {
                if walking {
                    NO_OPENAT2.store(true, Ordering::Relaxed);
                }
                let opened = open(&root, path, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty());
                NO_OPENAT2.store(false, Ordering::Relaxed);
                opened
            };
            let open = |path: &str| {
                if walking {
                    // `open` adds `O_NOFOLLOW` before it walks.
                    open_by_walking(&root, path, OFlags::RDONLY | OFlags::NOFOLLOW, Mode::empty())
                } else {
                    open(&root, path, OFlags::RDONLY, Mode::empty())
                }
            };
            assert_eq!(read(open("d/e/f.txt").expect("plain path")), "inside");
            assert!(open(".").is_ok(), "the root itself");
            for through_symlink in ["link/f.txt", "link", "out"] {
                let error = open_directory(through_symlink).expect_err(through_symlink);
                assert!(is_symlink_on_path(&error), "{through_symlink} as a directory: {error}");
                let error = open(through_symlink).expect_err(through_symlink);
                assert!(is_symlink_on_path(&error), "{through_symlink}: {error}");
            }
            assert!(open("../outside.txt").is_err(), "leaving the root");
            assert_eq!(open("d/missing").expect_err("missing").kind(), io::ErrorKind::NotFound);
        }
    }

    #[test]
    fn a_fifo_opens_without_blocking() {
        let (temp, root) = workspace();
        rustix::fs::mknodat(rustix::fs::CWD, temp.path().join("ws/fifo"), FileType::Fifo, Mode::from_raw_mode(0o600), 0).expect("mkfifo");
        let fd = open(&root, "fifo", OFlags::RDONLY, Mode::empty()).expect("opens at once");
        assert_eq!(FileType::from_raw_mode(rustix::fs::fstat(&fd).expect("fstat").st_mode), FileType::Fifo);
    }

    /// Where a resolution leads, as the tests compare it.
    fn shown(resolved: Resolved) -> String {
        match resolved {
            Resolved::Inside(path) => path,
            Resolved::Outside => "OUTSIDE".to_owned(),
            Resolved::Loop => "LOOP".to_owned(),
        }
    }

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
        let inside = |base: &str, path: &str, follow: bool| shown(resolve(Some(&root), base, path, follow));
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

    #[test]
    fn the_one_step_resolution_agrees_with_the_walk_and_takes_plain_paths() {
        let temp = tempfile::tempdir().expect("temporary directory");
        let ws = temp.path().join("ws");
        for directory in ["src/a/b", "docs/x", "hidden"] {
            std::fs::create_dir_all(ws.join(directory)).expect("mkdir");
        }
        std::fs::write(ws.join("src/a/b/f.rs"), "f").expect("file");
        std::fs::write(ws.join("src/file"), "f").expect("file");
        std::fs::write(temp.path().join("outside.txt"), "o").expect("file");
        for (target, link) in [
            ("../docs", "src/docs"),
            ("../../..", "src/a/b/up"),
            ("../outside.txt", "out"),
            ("..", "src/a/parent"),
            ("b/f.rs", "src/a/f-link"),
            ("loop2", "src/loop1"),
            ("loop1", "src/loop2"),
            ("/etc", "src/a/abs"),
            ("../hidden", "docs/x/h"),
        ] {
            std::os::unix::fs::symlink(target, ws.join(link)).expect("symlink");
        }
        let root = cap_std::fs::Dir::open_ambient_dir(&ws, cap_std::ambient_authority()).expect("open");
        let paths = [
            "src/a/b/f.rs",
            "src/a/b/f.rs/",
            "./src//a/./b/f.rs",
            "src/a/b/../b/f.rs",
            "src/a/b/new.rs",
            "src/a/new/deeper.rs",
            "src/file/x",
            "src/file/..",
            "src/a/..",
            "src/a/../..",
            "src/../../x",
            "src/a/b/up/docs/x",
            "src/docs/x/h",
            "src/docs/x/h/y",
            "src/a/parent/a/b/f.rs",
            "src/a/f-link",
            "src/loop1/x",
            "src/loop1",
            "src/a/abs/passwd",
            "src/a/abs",
            "out",
            "docs/x/h",
            "src/a/b/..",
            "src/a/b/../../..",
            "src/a/b/../../../..",
            "src",
            ".",
            "",
            "docs/x/../x/h",
            "src/a/parent",
            "src/a/parent/..",
        ];
        let mut plain = 0;
        for base in [".", "src", "src/a", "src/a/b", "docs/x"] {
            for path in paths {
                for follow in [true, false] {
                    let walked = shown(resolve_walking(&root, base, path, follow));
                    assert_eq!(shown(resolve(Some(&root), base, path, follow)), walked, "{base} + {path}, following: {follow}");
                    if let Some(one_step) = resolve_plain(&root, base, path, follow) {
                        assert_eq!(one_step, walked, "{base} + {path}, following: {follow}");
                        plain += 1;
                    }
                }
            }
        }
        // The one step answered most of the plain paths (a test that never takes it tests nothing).
        assert!(plain >= 30, "the one step answered {plain}");
        assert_eq!(resolve_plain(&root, ".", "src/a/b/f.rs", true).as_deref(), Some("src/a/b/f.rs"));
        assert_eq!(resolve_plain(&root, "src", "a/b/../b/f.rs", true).as_deref(), Some("src/a/b/f.rs"));
        assert_eq!(resolve_plain(&root, ".", "src/docs/x", true), None, "a symlink on the way");
        assert_eq!(resolve_plain(&root, ".", "src/a/b/new.rs", false).as_deref(), Some("src/a/b/new.rs"), "a name to create");
    }

    /// Hostile bases and paths, one step against the walk: `..` after names, files and symlinks,
    /// empty names, a NUL, names and paths past the kernel's limits, a hard link, a magic link, a
    /// base that is now a symlink, a file, missing, or deeper than `PATH_MAX`.
    #[test]
    fn the_one_step_agrees_with_the_walk_on_hostile_input() {
        let temp = tempfile::tempdir().expect("temporary directory");
        let ws = temp.path().join("ws");
        std::fs::create_dir_all(ws.join("a/b/c")).expect("mkdir");
        std::fs::create_dir_all(ws.join("hidden")).expect("mkdir");
        std::fs::write(ws.join("a/f"), "f").expect("file");
        std::fs::write(ws.join("hidden/secret"), "s").expect("file");
        std::fs::hard_link(ws.join("hidden/secret"), ws.join("a/hl")).expect("hard link");
        for (target, link) in [("b", "a/sl"), ("a/b", "top"), ("../hidden", "a/h"), ("/proc/self/root", "a/magic"), ("..", "a/b/c/up")] {
            std::os::unix::fs::symlink(target, ws.join(link)).expect("symlink");
        }
        // A deep real directory whose path is longer than PATH_MAX, with a symlink at its end.
        let long_name = "n".repeat(200);
        let mut deep = cap_std::fs::Dir::open_ambient_dir(&ws, cap_std::ambient_authority()).expect("open");
        let mut deep_path = String::new();
        for _ in 0..25 {
            deep.create_dir(&long_name).expect("mkdir deep");
            deep = deep.open_dir(&long_name).expect("open deep");
            deep_path.push_str(&long_name);
            deep_path.push('/');
        }
        deep.symlink("../../../../../../../../../../../../../../../../../../../../../../../../../hidden", "esc").expect("deep symlink");
        let root = cap_std::fs::Dir::open_ambient_dir(&ws, cap_std::ambient_authority()).expect("open");
        let long_dotdot = format!("{}sl/c", "c/../".repeat(900));
        let long_name_path = format!("b/{}", "x".repeat(300));
        let deep_esc = format!("{deep_path}esc/secret");
        let deep_esc_dir = format!("{deep_path}esc");
        let paths: Vec<&str> = vec![
            "..",
            "../..",
            "../../..",
            "c/..",
            "c/../..",
            "c/../../b/c",
            "c//",
            "c/./",
            "c/.",
            "./",
            "//x",
            "b//c//",
            "b/c/up/c",
            "c/../sl/c",
            "...",
            "b\\c",
            "b/c/\u{0}/..",
            "hl",
            "a/hl",
            "sl/c/..",
            "magic/etc",
            "magic",
            "h/secret",
            "h",
            "h/..",
            "b/c/up",
            "b/c/up/",
            "b/c/up/.",
            "b/c/up/..",
            "f/",
            "f/.",
            "f/..",
            "f/../b",
            &long_dotdot,
            &long_name_path,
            &deep_esc,
            &deep_esc_dir,
            "a/b/c",
            "sl",
            "sl/",
            "sl/.",
            "sl/..",
            "top/c",
            "",
            ".",
        ];
        let mut disagreements = Vec::new();
        let mut one_step = 0usize;
        // Bases: canonical ones, a base since swapped for a symlink, a file, a missing one, the deep one.
        let deep_base = deep_path.trim_end_matches('/').to_owned();
        for base in [".", "a", "a/b", "a/b/c", "top", "a/sl", "a/f", "gone/x", deep_base.as_str()] {
            for path in &paths {
                for follow in [true, false] {
                    // `resolve` refuses an absolute path before either way is tried.
                    let walked =
                        if path.starts_with('/') { "OUTSIDE".to_owned() } else { shown(resolve_walking(&root, base, path, follow)) };
                    let resolved = shown(resolve(Some(&root), base, path, follow));
                    one_step += usize::from(!path.starts_with('/') && resolve_plain(&root, base, path, follow).is_some());
                    if resolved != walked {
                        let cut = |text: &str| text.chars().take(120).collect::<String>();
                        disagreements.push(format!(
                            "{} + {:?} (follow {follow}): one step {}, walk {}",
                            cut(base),
                            cut(path),
                            cut(&resolved),
                            cut(&walked)
                        ));
                    }
                }
            }
        }
        assert!(disagreements.is_empty(), "{disagreements:#?}");
        // Past `PATH_MAX` a symlink cannot be looked up: the path is not taken as inside.
        for path in [&deep_esc, &deep_esc_dir] {
            assert!(matches!(resolve(Some(&root), ".", path, true), Resolved::Outside), "a path of {} bytes", path.len());
        }
        // The one step answered a good share of them (else this tests only the walk).
        assert!(one_step >= 60, "the one step answered {one_step}");
    }
}
