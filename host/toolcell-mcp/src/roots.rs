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
            let _ = crate::writeln_stderr(&format!("toolcell mcp: {reason}"));
        }
        let mut changed = false;
        self.current.send_modify(|current| {
            let before = current.as_ref().and_then(|current| current.as_ref().ok()).map(|(directory, _)| directory.clone());
            let after = next.as_ref().ok().map(|(directory, _)| directory.clone());
            changed = before.is_some() && before != after;
            if let Ok((directory, _)) = &next
                && before.as_ref() != Some(directory)
            {
                let _ = crate::writeln_stderr(&format!("toolcell mcp: serving the client's root {}", directory.display()));
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
        Ok(metadata) if metadata.is_dir() => Ok(path),
        Ok(_) => Err(refused("it is not a directory")),
        Err(_) => Err(refused("no such directory")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_local_directories_are_roots() {
        let directory = std::env::temp_dir();
        let uri = format!("file://{}", directory.display());
        assert_eq!(directory_of(&uri).as_deref(), Ok(directory.as_path()));
        for (uri, why) in [
            ("https://example.com/repo", "not a `file://` URI"),
            ("file://server/share", "another host"),
            ("file:///no/such/directory/anywhere", "no such directory"),
            ("file:///etc/hostname", "not a directory"),
            ("file:///tmp/%zz", "percent-encoding"),
        ] {
            let refused = directory_of(uri).expect_err(uri);
            assert!(refused.contains(why) && refused.contains(uri), "{uri}: {refused}");
        }
    }
}
