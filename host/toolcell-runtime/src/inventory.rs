//! Every location a toolcell run reads and trusts, or executes, besides what a run is
//! configured with: the default state, cache and configuration directories of this user, the
//! ones the environment names, and the running executable.
//!
//! A run that keeps its state, cache or plugins elsewhere (`--state-dir`, `--cache-dir`) still
//! protects these: the next run with the defaults trusts what it finds there (it executes
//! cached machine code, replays journals signed with the state key, loads plugins), so no tool
//! of any run may read or write them. The runtime adds them to its host-owned paths whatever it
//! was configured with ([`RuntimeBuilder::build`](crate::RuntimeBuilder::build)).

use std::path::PathBuf;

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
pub(crate) fn trusted_directories() -> Vec<PathBuf> {
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

/// The running executable: a tool that could rewrite it would run as the host next time.
pub(crate) fn executable() -> Option<PathBuf> {
    std::env::current_exe().ok()
}

/// The names the running executable was started by, the final symlink of each not followed:
/// `argv[0]` (the first match on `$PATH` when it names no directory, as a shell finds it) and
/// every symlink on the way from it to the executable. The next start runs whatever stands
/// under the first of them, so replacing a symlink there is as good as rewriting the
/// executable.
pub(crate) fn started_by() -> Vec<PathBuf> {
    const MAX_HOPS: usize = 40;
    let Some(invoked) = std::env::args_os().next().map(PathBuf::from) else {
        return Vec::new();
    };
    let names_directory = invoked.parent().is_some_and(|parent| !parent.as_os_str().is_empty());
    let first = if names_directory {
        Some(invoked)
    } else {
        std::env::var_os("PATH")
            .iter()
            .flat_map(std::env::split_paths)
            .map(|directory| directory.join(&invoked))
            .find(|candidate| std::fs::symlink_metadata(candidate).is_ok())
    };
    let mut names = Vec::new();
    let mut current = first;
    while let Some(path) = current.take() {
        let Ok(metadata) = std::fs::symlink_metadata(&path) else {
            break;
        };
        if metadata.is_symlink()
            && names.len() < MAX_HOPS
            && let Ok(target) = std::fs::read_link(&path)
        {
            current = Some(path.parent().map_or_else(|| target.clone(), |parent| parent.join(&target)));
        }
        names.push(path);
    }
    names
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

#[cfg(test)]
mod tests {
    use super::*;

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
