//! Every location a toolcell run reads and trusts, or executes, besides what a run is
//! configured with: the default state, cache and configuration directories of this user, the
//! ones the environment names, the running executable and those of its name on `$PATH`, and
//! what earlier runs recorded they used.
//!
//! A run that keeps its state, cache or plugins elsewhere (`--state-dir`, `--cache-dir`) still
//! protects these: the next run with the defaults trusts what it finds there (it executes
//! cached machine code, replays journals signed with the state key, loads plugins), so no tool
//! of any run may read or write them. The runtime adds them to its host-owned paths whatever it
//! was configured with (`RuntimeBuilder::build`).

use std::collections::VecDeque;
use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

/// The compiled-component cache a run uses unless told otherwise: `$TOOLCELL_CACHE_DIR`, else
/// `$XDG_CACHE_HOME/toolcell`, else `~/.cache/toolcell`.
pub fn default_cache_dir() -> Option<PathBuf> {
    from_env("TOOLCELL_CACHE_DIR")
        .or_else(|| from_env("XDG_CACHE_HOME").map(|cache| cache.join("toolcell")))
        .or_else(|| from_env("HOME").map(|home| home.join(".cache").join("toolcell")))
}

/// The state directory a run uses unless told otherwise: `$TOOLCELL_STATE_DIR`, else
/// `$XDG_STATE_HOME/toolcell`, else `~/.local/state/toolcell`.
pub fn default_state_dir() -> Option<PathBuf> {
    from_env("TOOLCELL_STATE_DIR")
        .or_else(|| from_env("XDG_STATE_HOME").map(|state| state.join("toolcell")))
        .or_else(|| from_env("HOME").map(|home| home.join(".local").join("state").join("toolcell")))
}

/// Every directory some run of this user may trust without being told: each candidate of
/// [`default_cache_dir`] and [`default_state_dir`] (not only the first that is set: another run
/// may have another environment), the configuration directory, and the same under the home
/// directory the password database names (a run whose `$HOME` differs).
pub fn trusted_directories() -> Vec<PathBuf> {
    let mut directories = Vec::new();
    directories.extend(from_env("TOOLCELL_CACHE_DIR"));
    directories.extend(from_env("TOOLCELL_STATE_DIR"));
    for (variable, name) in [("XDG_CACHE_HOME", "toolcell"), ("XDG_STATE_HOME", "toolcell"), ("XDG_CONFIG_HOME", "toolcell")] {
        directories.extend(from_env(variable).map(|directory| directory.join(name)));
    }
    let homes = from_env("HOME").into_iter().chain(password_home());
    for home in homes {
        for relative in [".cache/toolcell", ".local/state/toolcell", ".config/toolcell"] {
            directories.push(home.join(relative));
        }
    }
    directories.sort();
    directories.dedup();
    directories
}

/// The file in the default state directory where runs record the locations they were told to
/// use ([`remember_locations`]).
use crate::LOCATIONS_FILE;

/// The most locations [`remember_locations`] keeps (the newest).
const MAX_REMEMBERED: usize = 256;

/// Record `locations` (a run's own state directory, cache, plugin directory, policy file,
/// service configuration: whatever it was told to use instead of the defaults) in the default
/// state directory, which every run protects, so that every later run protects them too: a
/// plain run on `$HOME` must not hand its tools the key of a run that kept its state in
/// `~/work-state`. A location that does not exist (yet, or any more) is kept as well: a run
/// creates its plugin directory, or an operator restores a state directory, at a path a tool
/// of another run must not have filled first. Past [`MAX_REMEMBERED`] locations the oldest
/// that do not exist go first, then the oldest of the rest. The record is kept in this run's
/// default state directory and in the one under `$HOME`, and runs read every record a run of
/// this user may have written ([`remembered_locations`]).
///
/// # Errors
///
/// Whatever creating the default state directory or rewriting the record fails with.
pub fn remember_locations(locations: &[PathBuf]) -> std::io::Result<()> {
    // Each location as it resolves now, and as it was named (absolute, its symlinks kept): a
    // later run protects the symlinks on the way of the name too, which lead the next run of
    // this configuration to it.
    let mut new: Vec<PathBuf> = Vec::new();
    for location in locations {
        for spelling in [Some(canonical_lenient(location)), std::path::absolute(location).ok()].into_iter().flatten() {
            if !new.contains(&spelling) {
                new.push(spelling);
            }
        }
    }
    for state in record_directories(false) {
        remember_in(&state, &new)?;
    }
    Ok(())
}

/// The directories whose records of locations runs keep: this run's default state directory
/// and the one under `$HOME` (which every run of this `$HOME` protects, whatever its
/// `TOOLCELL_STATE_DIR` or `XDG_STATE_HOME`: a run told to keep its state elsewhere through
/// the environment is remembered where a run without that environment looks). With
/// `every_candidate`, also each one another environment of this user would have (the records
/// read: a location is protected if any of them holds it).
fn record_directories(every_candidate: bool) -> Vec<PathBuf> {
    let mut directories: Vec<PathBuf> = default_state_dir().into_iter().collect();
    let home_state = |home: PathBuf| home.join(".local").join("state").join("toolcell");
    directories.extend(from_env("HOME").map(home_state));
    if every_candidate {
        directories.extend(from_env("TOOLCELL_STATE_DIR"));
        directories.extend(from_env("XDG_STATE_HOME").map(|state| state.join("toolcell")));
        directories.extend(password_home().map(home_state));
    }
    let mut unique: Vec<PathBuf> = Vec::new();
    for directory in directories {
        if !unique.contains(&directory) {
            unique.push(directory);
        }
    }
    unique
}

/// Add `new` to the record in the state directory `state`.
fn remember_in(state: &Path, new: &[PathBuf]) -> std::io::Result<()> {
    let record = state.join(LOCATIONS_FILE);
    let remembered = read_record(&record);
    if new.iter().all(|location| remembered.contains(location)) {
        return Ok(());
    }
    crate::storage::create_private_dirs(state)?;
    // Under a lock of its own: two runs starting at once keep both their locations.
    let lock =
        crate::storage::private_file().read(true).write(true).create(true).truncate(false).open(state.join(crate::LOCATIONS_LOCK_FILE))?;
    while let Err(errno) = rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive) {
        if errno != rustix::io::Errno::INTR {
            return Err(errno.into());
        }
    }
    let mut kept: Vec<PathBuf> = read_record(&record).into_iter().filter(|location| !new.contains(location)).collect();
    kept.extend(new.iter().cloned());
    let kept = newest(kept, MAX_REMEMBERED, |location| new.iter().any(|own| own == location) || location.symlink_metadata().is_ok());
    let mut text = String::new();
    for location in &kept {
        if let Some(line) = location.to_str().filter(|line| !line.contains('\n')) {
            text.push_str(line);
            text.push('\n');
        }
    }
    crate::storage::replace_bytes(&record, text.as_bytes(), false)
}

/// At most `limit` of `locations` (oldest first), in their order: past the limit, the oldest
/// for which `exists` is false are left out first, then the oldest of the others.
fn newest(locations: Vec<PathBuf>, limit: usize, exists: impl Fn(&Path) -> bool) -> Vec<PathBuf> {
    let mut excess = locations.len().saturating_sub(limit);
    let missing: Vec<bool> = locations.iter().map(|location| !exists(location)).collect();
    let mut drop = vec![false; locations.len()];
    for pass_missing in [true, false] {
        for (index, is_missing) in missing.iter().enumerate() {
            if excess == 0 {
                break;
            }
            if *is_missing == pass_missing && !drop[index] {
                drop[index] = true;
                excess -= 1;
            }
        }
    }
    locations.into_iter().zip(drop).filter(|(_, dropped)| !dropped).map(|(location, _)| location).collect()
}

/// The locations runs recorded with [`remember_locations`] (absolute paths only), in every
/// record a run of this user may have written.
pub fn remembered_locations() -> Vec<PathBuf> {
    let mut locations: Vec<PathBuf> = Vec::new();
    for state in record_directories(true) {
        for location in read_record(&state.join(LOCATIONS_FILE)) {
            if !locations.contains(&location) {
                locations.push(location);
            }
        }
    }
    locations
}

/// The absolute paths of one record (none if it cannot be read).
fn read_record(record: &Path) -> Vec<PathBuf> {
    let Ok(bytes) = crate::storage::read_host_file(record) else {
        return Vec::new();
    };
    String::from_utf8_lossy(&bytes).lines().map(PathBuf::from).filter(|location| location.is_absolute()).collect()
}

/// The running executable: a tool that could rewrite it would run as the host next time.
pub fn executable() -> Option<PathBuf> {
    std::env::current_exe().ok()
}

/// Every file named `toolcell`, or as the running executable is, in a directory of `$PATH`:
/// a shell's next `toolcell` runs one of them (an install in `~/.cargo/bin` of a `$HOME`
/// workspace, say), whichever executable this run was started from.
pub fn executables_on_path() -> Vec<PathBuf> {
    let mut names = vec![OsString::from("toolcell")];
    if let Some(name) = executable().as_deref().and_then(Path::file_name)
        && !names.iter().any(|known| known == name)
    {
        names.push(name.to_owned());
    }
    let mut found = Vec::new();
    for directory in std::env::var_os("PATH").iter().flat_map(std::env::split_paths).filter(|directory| directory.is_absolute()) {
        for name in &names {
            let candidate = directory.join(name);
            if std::fs::symlink_metadata(&candidate).is_ok() && !found.contains(&candidate) {
                found.push(candidate);
            }
        }
    }
    found
}

/// The name the running executable was started by: `argv[0]`, or the first match on `$PATH`
/// when it names no directory (as a shell finds it). The next start runs whatever stands under
/// that name, so replacing a symlink there (or on its way, [`symlinks_on_the_way`]) is as good
/// as rewriting the executable.
pub fn started_by() -> Option<PathBuf> {
    let invoked = std::env::args_os().next().map(PathBuf::from)?;
    if invoked.parent().is_some_and(|parent| !parent.as_os_str().is_empty()) {
        return Some(invoked);
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|directory| directory.join(&invoked))
        .find(|candidate| std::fs::symlink_metadata(candidate).is_ok())
}

/// Every symlink met on the way from `path`, as named, to what it leads to (its parent
/// directories resolved, the link itself not followed), in the order met. A run finds its
/// directories through these names: a tool that could remove or replace one would send the
/// next run to a directory it filled, so each is protected as the location itself is.
pub fn symlinks_on_the_way(path: &Path) -> Vec<PathBuf> {
    const MAX_HOPS: usize = 40;
    let mut found = Vec::new();
    let Ok(absolute) = std::path::absolute(path) else {
        return found;
    };
    let mut pending: VecDeque<OsString> = VecDeque::new();
    push_components(&mut pending, &absolute);
    let mut resolved = PathBuf::from("/");
    while let Some(component) = pending.pop_front() {
        if component == ".." {
            resolved.pop();
            continue;
        }
        let candidate = resolved.join(&component);
        match std::fs::symlink_metadata(&candidate) {
            Ok(metadata) if metadata.is_symlink() && found.len() < MAX_HOPS => {
                let Ok(target) = std::fs::read_link(&candidate) else {
                    break;
                };
                found.push(candidate);
                if target.is_absolute() {
                    resolved = PathBuf::from("/");
                }
                let mut rest: VecDeque<OsString> = VecDeque::new();
                push_components(&mut rest, &target);
                rest.extend(pending);
                pending = rest;
            }
            _ => resolved = candidate,
        }
    }
    found
}

/// The names and `..` of `path`, in order (the root and `.` left out).
fn push_components(into: &mut VecDeque<OsString>, path: &Path) {
    for component in path.components() {
        match component {
            Component::Normal(name) => into.push_back(name.to_owned()),
            Component::ParentDir => into.push_back(OsString::from("..")),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
}

fn from_env(name: &str) -> Option<PathBuf> {
    std::env::var_os(name).filter(|value| !value.is_empty()).map(PathBuf::from)
}

/// This user's home directory as `/etc/passwd` has it.
fn password_home() -> Option<PathBuf> {
    let uid = rustix::process::geteuid().as_raw().to_string();
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.len() >= 7 && fields[2] == uid && fields[5].starts_with('/')).then(|| PathBuf::from(fields[5]))
    })
}

/// `path` with its longest existing ancestor canonicalized and the missing rest appended: a
/// location that does not exist yet (a plugin directory) must be protected where it would be
/// created. In the missing rest, `..` undoes the name before it and `.` goes (`~/none/../plugins`
/// is `~/plugins` once `none` is made a directory, as a later run would find it).
pub fn canonical_lenient(path: &Path) -> PathBuf {
    let found = canonical_lenient_as_given(path);
    let mut normal = PathBuf::new();
    for component in found.components() {
        match component {
            Component::ParentDir => {
                normal.pop();
            }
            Component::CurDir => {}
            other => normal.push(other),
        }
    }
    normal
}

fn canonical_lenient_as_given(path: &Path) -> PathBuf {
    let Ok(absolute) = std::path::absolute(path) else {
        return path.to_path_buf();
    };
    let mut missing = Vec::new();
    let mut current = absolute.as_path();
    loop {
        if let Ok(mut canonical) = std::fs::canonicalize(current) {
            canonical.extend(missing.iter().rev());
            return canonical;
        }
        let last = match current.components().next_back() {
            Some(Component::Normal(name)) => name,
            Some(Component::ParentDir) => std::ffi::OsStr::new(".."),
            _ => return absolute,
        };
        let Some(parent) = current.parent() else {
            return absolute;
        };
        missing.push(last);
        current = parent;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_symlink_on_the_way_is_found_not_followed() {
        let temp = tempfile::tempdir().expect("temp dir");
        let base = std::fs::canonicalize(temp.path()).expect("canonical");
        std::fs::create_dir_all(base.join("real/inner")).expect("mkdir");
        std::os::unix::fs::symlink("real", base.join("first")).expect("symlink");
        std::os::unix::fs::symlink("../first/inner", base.join("real/hop")).expect("symlink");
        let found = symlinks_on_the_way(&base.join("real/hop/missing/toolcell"));
        assert_eq!(found, vec![base.join("real/hop"), base.join("first")]);
        assert_eq!(symlinks_on_the_way(&base.join("real/inner")), Vec::<PathBuf>::new());
    }

    #[test]
    fn a_missing_location_spelled_with_dots_is_recorded_where_it_would_be_made() {
        let temp = tempfile::tempdir().expect("temp dir");
        let base = std::fs::canonicalize(temp.path()).expect("canonical");
        assert_eq!(canonical_lenient(&base.join("none/../plugins")), base.join("plugins"));
        assert_eq!(canonical_lenient(&base.join("none/./deeper/../../x/./y")), base.join("x/y"));
        std::fs::create_dir(base.join("real")).expect("mkdir");
        assert_eq!(canonical_lenient(&base.join("real/../real/missing")), base.join("real/missing"));
    }

    #[test]
    fn past_the_limit_missing_locations_go_first_and_the_rest_stay_in_order() {
        let paths: Vec<PathBuf> = ["/a", "/b-missing", "/c", "/d-missing", "/e"].iter().map(PathBuf::from).collect();
        let exists = |path: &Path| !path.to_string_lossy().ends_with("missing");
        assert_eq!(newest(paths.clone(), 5, exists), paths, "within the limit, a missing location is kept");
        let names = |kept: Vec<PathBuf>| kept.iter().map(|path| path.to_string_lossy().into_owned()).collect::<Vec<_>>();
        assert_eq!(names(newest(paths.clone(), 4, exists)), ["/a", "/c", "/d-missing", "/e"]);
        assert_eq!(names(newest(paths.clone(), 3, exists)), ["/a", "/c", "/e"]);
        assert_eq!(names(newest(paths, 2, exists)), ["/c", "/e"]);
    }

    #[test]
    fn every_default_candidate_is_trusted() {
        let trusted = trusted_directories();
        for default in [default_cache_dir(), default_state_dir()].into_iter().flatten() {
            assert!(trusted.contains(&default), "{default:?} in {trusted:?}");
        }
        if let Some(home) = password_home() {
            assert!(trusted.contains(&home.join(".local/state/toolcell")));
            assert!(trusted.contains(&home.join(".cache/toolcell")));
        }
    }
}
