//! The workspace from the client's roots: `toolcell mcp` without `--workspace` serves the
//! first root the client declares (`roots/list`, asked once the client is initialized, and
//! again at each `notifications/roots/list_changed`). A root that is not a local directory
//! (`file://` URI of an existing directory) is refused, and requests then fail with the
//! reason. A client without roots is told to start toolcell with `--workspace`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::Tool;
use rmcp::{ErrorData as McpError, Peer, RoleServer};
use tokio::sync::watch;
use toolcell_host::Session;

/// Builds the session on a workspace directory (the CLI's host, role and session id).
pub type SessionFactory = Box<dyn Fn(&Path) -> Result<Session, String> + Send + Sync>;

/// How long a request waits for the client to say its roots.
const ROOTS_WAIT: Duration = Duration::from_secs(30);

/// The session of a server whose workspace is the client's first root.
pub(crate) struct FromRoots {
    factory: SessionFactory,
    pub(crate) tools: Arc<Vec<Tool>>,
    pub(crate) resources_served: bool,
    /// The session, once the roots said (or why there is none).
    current: watch::Sender<Option<Result<(PathBuf, Session), String>>>,
}

impl FromRoots {
    pub(crate) fn new(tools: Vec<Tool>, resources_served: bool, factory: SessionFactory) -> Self {
        FromRoots { factory, tools: Arc::new(tools), resources_served, current: watch::channel(None).0 }
    }

    /// The session, if the client's roots have said which workspace it is (without waiting).
    pub(crate) fn known(&self) -> Option<Session> {
        match &*self.current.borrow() {
            Some(Ok((_, session))) => Some(session.clone()),
            _ => None,
        }
    }

    /// The session, once the client's roots have said which workspace it is.
    pub(crate) async fn session(&self) -> Result<Session, McpError> {
        let mut receiver = self.current.subscribe();
        let waited = tokio::time::timeout(ROOTS_WAIT, receiver.wait_for(Option::is_some)).await;
        let current = match waited {
            Ok(Ok(current)) => current.clone(),
            _ => None,
        };
        match current {
            Some(Ok((_, session))) => Ok(session),
            Some(Err(reason)) => Err(McpError::invalid_request(reason, None)),
            None => Err(McpError::invalid_request(
                "the client has not answered `roots/list`, so there is no workspace: start toolcell mcp with `--workspace DIR`",
                None,
            )),
        }
    }

    /// Ask the client for its roots and serve the first; `true` if the workspace changed.
    #[expect(deprecated, reason = "roots are deprecated by SEP-2577, but clients still declare them")]
    pub(crate) async fn follow(&self, peer: &Peer<RoleServer>) -> bool {
        let declares_roots = peer.peer_info().is_some_and(|info| info.capabilities.roots.is_some());
        let chosen = if declares_roots {
            match peer.list_roots().await {
                Ok(listed) => match listed.roots.first() {
                    Some(root) => directory_of(&root.uri),
                    None => {
                        Err("the client declares no roots: open a folder in it, or start toolcell mcp with `--workspace DIR`".to_owned())
                    }
                },
                Err(error) => Err(format!("the client did not answer `roots/list` ({error}): start toolcell mcp with `--workspace DIR`")),
            }
        } else {
            Err("no workspace: this client declares no `roots`; start toolcell mcp with `--workspace DIR`".to_owned())
        };
        let next = chosen.and_then(|directory| {
            let session = (self.factory)(&directory)?;
            Ok((directory, session))
        });
        if let Err(reason) = &next {
            let _ = crate::writeln_stderr(&format!("toolcell mcp: {}", toolcell_types::escape_control(reason)));
        }
        let mut changed = false;
        self.current.send_modify(|current| {
            let before = current.as_ref().and_then(|current| current.as_ref().ok()).map(|(directory, _)| directory.clone());
            let after = next.as_ref().ok().map(|(directory, _)| directory.clone());
            changed = before.is_some() && before != after;
            if let Ok((directory, _)) = &next
                && before.as_ref() != Some(directory)
            {
                let shown = directory.display().to_string();
                let _ =
                    crate::writeln_stderr(&format!("toolcell mcp: serving the client's root {}", toolcell_types::escape_control(&shown)));
            }
            *current = Some(next);
        });
        changed
    }
}

/// The local directory a root's URI names, or why it is refused.
pub fn directory_of(uri: &str) -> Result<PathBuf, String> {
    let refused = |why: &str| format!("root `{uri}` is refused: {why}; toolcell serves a directory on this machine, as a `file:///…` URI");
    let Some(rest) = uri.strip_prefix("file://") else { return Err(refused("it is not a `file://` URI")) };
    // `file:///path` or `file://localhost/path`; another host is not local.
    let encoded = match rest.strip_prefix("localhost") {
        Some(path) => path,
        None if rest.starts_with('/') => rest,
        None => return Err(refused("it names another host")),
    };
    let mut bytes = Vec::with_capacity(encoded.len());
    let mut input = encoded.as_bytes();
    while let Some((&byte, tail)) = input.split_first() {
        if byte == b'%' {
            let value = tail.get(..2).and_then(|hex| std::str::from_utf8(hex).ok()).and_then(|hex| u8::from_str_radix(hex, 16).ok());
            let Some(value) = value else { return Err(refused("its percent-encoding is invalid")) };
            bytes.push(value);
            input = &tail[2..];
        } else {
            bytes.push(byte);
            input = tail;
        }
    }
    let path = PathBuf::from(String::from_utf8(bytes).map_err(|_| refused("its path is not UTF-8"))?);
    if !path.is_absolute() {
        return Err(refused("its path is not absolute"));
    }
    match std::fs::metadata(&path) {
        Ok(metadata) if metadata.is_dir() => {}
        Ok(_) => return Err(refused("it is not a directory")),
        Err(_) => return Err(refused("no such directory")),
    }
    let canonical = std::fs::canonicalize(&path).map_err(|_| refused("it cannot be resolved"))?;
    vet(&canonical, std::env::var_os("HOME").map(PathBuf::from).as_deref()).map_err(|why| refused(&why))?;
    Ok(canonical)
}

/// Directories that are never a project: the machine's own.
const SYSTEM: [&str; 12] = ["/proc", "/sys", "/dev", "/etc", "/boot", "/usr", "/bin", "/sbin", "/lib", "/lib64", "/run", "/var/lib"];
/// Directories that hold projects but are none themselves.
const CONTAINERS: [&str; 6] = ["/", "/tmp", "/var", "/home", "/root", "/srv"];

/// Whether `root` (canonical) may be a workspace: the policy's paths start at the workspace, so
/// a root inside a project would move them (root `REPO/docs` escapes a `docs/**` rule, root
/// `REPO/.git` the `.git/**` protection). Refused: the machine's own directories, a directory
/// that holds projects (`/`, `/home`, the home directory itself), anything in a `.git`
/// directory, and a directory inside a git work tree that is not its top.
fn vet(root: &Path, home: Option<&Path>) -> Result<(), String> {
    if let Some(system) = SYSTEM.iter().find(|system| root.starts_with(system)) {
        return Err(format!("it is in `{system}`, a directory of the machine, not a project"));
    }
    if CONTAINERS.iter().any(|container| root == Path::new(container)) || home.is_some_and(|home| root == home) {
        return Err("it holds projects rather than being one: open the project's own folder".to_owned());
    }
    if root.components().any(|component| component.as_os_str() == ".git") {
        return Err("it is in a `.git` directory: open the repository's top folder".to_owned());
    }
    if let Some(top) = root.ancestors().skip(1).find(|ancestor| ancestor.join(".git").exists()) {
        return Err(format!(
            "it is inside the git repository `{}` but not its top folder, and the policy's paths start at the workspace: open the repository's top folder, or start toolcell mcp with `--workspace`",
            top.display()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_local_directories_are_roots() {
        let base = tempfile::tempdir().expect("a directory");
        let directory = std::fs::canonicalize(base.path()).expect("canonical");
        let uri = format!("file://{}", directory.display());
        assert_eq!(directory_of(&uri).as_deref(), Ok(directory.as_path()));
        for (uri, why) in [
            ("https://example.com/repo", "not a `file://` URI"),
            ("file://server/share", "another host"),
            ("file:///no/such/directory/anywhere", "no such directory"),
            ("file:///etc/hostname", "not a directory"),
            ("file:///tmp/%zz", "percent-encoding"),
            ("file:///", "holds projects"),
            ("file:///proc/self", "a directory of the machine"),
            ("file:///etc", "a directory of the machine"),
        ] {
            let refused = directory_of(uri).expect_err(uri);
            assert!(refused.contains(why) && refused.contains(uri), "{uri}: {refused}");
        }
    }

    #[test]
    fn a_root_inside_a_project_or_its_git_directory_is_refused() {
        let base = tempfile::tempdir().expect("a directory");
        let repository = std::fs::canonicalize(base.path()).expect("canonical").join("repo");
        std::fs::create_dir_all(repository.join(".git/hooks")).expect("a repository");
        std::fs::create_dir_all(repository.join("docs")).expect("docs");
        assert_eq!(vet(&repository, None), Ok(()));
        assert!(vet(&repository.join("docs"), None).expect_err("inside").contains("inside the git repository"));
        assert!(vet(&repository.join(".git/hooks"), None).expect_err("in .git").contains("`.git` directory"));
        assert!(vet(&repository, Some(&repository)).expect_err("home").contains("holds projects"));
    }
}
