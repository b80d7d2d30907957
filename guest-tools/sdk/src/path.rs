//! Workspace-relative paths as agents write them.
//!
//! [`WorkspacePath::parse`] turns the string an agent sent into a normalised relative path
//! (`src/../docs//a.md` becomes `docs/a.md`), or explains why it cannot name anything in the
//! workspace. This is for clear messages only: the host resolves and checks every path again,
//! symlinks included, whatever a component does.

use crate::ToolError;

/// A normalised path relative to the workspace root: no leading `/`, no `.` or `..`
/// components, no empty components. The root itself is `.`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WorkspacePath {
    normalised: String,
}

impl WorkspacePath {
    /// The workspace root, `.`.
    pub fn root() -> Self {
        WorkspacePath { normalised: ".".to_owned() }
    }

    /// Normalise `raw` lexically.
    ///
    /// # Errors
    ///
    /// `invalid-args` for an empty path or one with a NUL byte; `denied` for an absolute or
    /// foreign path (`/x`, `C:\x`, `\\server\x`, `~/x`) or one whose `..` components climb above
    /// the workspace root.
    pub fn parse(raw: &str) -> Result<Self, ToolError> {
        if raw.is_empty() {
            return Err(ToolError::InvalidArgs(
                "the path is empty: give a path relative to the workspace root, or `.` for the root itself".to_owned(),
            ));
        }
        if raw.contains('\0') {
            return Err(ToolError::InvalidArgs(format!("the path {} contains a NUL character, which no file name can hold", quote(raw))));
        }
        if let Some(kind) = foreign_kind(raw) {
            // Not repeated: it may name something on the host.
            return Err(ToolError::Denied(format!(
                "the path is {kind}: tools only see the workspace, so give a path relative to its root, such as `src/main.rs`"
            )));
        }
        let mut components: Vec<&str> = Vec::new();
        for component in raw.split('/') {
            match component {
                "" | "." => {}
                ".." => {
                    if components.pop().is_none() {
                        return Err(ToolError::Denied(format!(
                            "{} leaves the workspace: its `..` components climb above the workspace root; give a path inside the workspace",
                            quote(raw)
                        )));
                    }
                }
                name => components.push(name),
            }
        }
        if components.is_empty() {
            return Ok(Self::root());
        }
        Ok(WorkspacePath { normalised: components.join("/") })
    }

    /// Refuse this path as the name of something a tool creates if it holds a control
    /// character (a newline, an escape sequence): such names forge lines in listings and logs
    /// and drive terminals that print them. Existing files with such names can still be read.
    ///
    /// # Errors
    ///
    /// `invalid-args` naming the path (control characters escaped).
    pub fn check_new_name(&self) -> Result<(), ToolError> {
        match self.normalised.chars().find(|character| character.is_control()) {
            None => Ok(()),
            Some(character) => Err(ToolError::InvalidArgs(format!(
                "the path {} contains the control character {}, which toolcell does not put in new file names: choose a name without control characters",
                quote(&self.normalised),
                character.escape_default()
            ))),
        }
    }

    /// The normalised path, as `std::fs` functions take it.
    pub fn as_str(&self) -> &str {
        &self.normalised
    }

    /// Whether this is the workspace root.
    pub fn is_root(&self) -> bool {
        self.normalised == "."
    }

    /// The path of a child entry.
    pub fn join(&self, name: &str) -> WorkspacePath {
        if self.is_root() {
            WorkspacePath { normalised: name.to_owned() }
        } else {
            let mut normalised = String::with_capacity(self.normalised.len() + 1 + name.len());
            normalised.push_str(&self.normalised);
            normalised.push('/');
            normalised.push_str(name);
            WorkspacePath { normalised }
        }
    }

    /// The parent directory, or `None` for the root.
    pub fn parent(&self) -> Option<WorkspacePath> {
        if self.is_root() {
            return None;
        }
        Some(match self.normalised.rsplit_once('/') {
            Some((parent, _)) => WorkspacePath { normalised: parent.to_owned() },
            None => Self::root(),
        })
    }

    /// The path relative to `base`, if it lies under it (`None` otherwise; `.` for `base` itself).
    pub fn strip_prefix(&self, base: &WorkspacePath) -> Option<&str> {
        if base.is_root() {
            return Some(&self.normalised);
        }
        if self.normalised == base.normalised {
            return Some(".");
        }
        self.normalised.strip_prefix(base.normalised.as_str()).and_then(|rest| rest.strip_prefix('/'))
    }

    /// Map an I/O error on this path to a [`ToolError`] whose message names the path and
    /// says what to do.
    pub fn io_error(&self, error: std::io::Error) -> ToolError {
        use std::io::ErrorKind;
        let path = quote(&self.normalised);
        match error.kind() {
            ErrorKind::NotFound => ToolError::NotFound(format!("{path} does not exist: check the path with `list_files`")),
            ErrorKind::PermissionDenied => ToolError::Denied(format!(
                "access to {path} was refused by the host: it resolves outside the workspace (for example through a symlink) or the policy does not allow it"
            )),
            ErrorKind::IsADirectory => ToolError::Unsupported(format!("{path} is a directory: use `list_files` to see what it holds")),
            ErrorKind::NotADirectory => {
                ToolError::NotFound(format!("{path} does not exist: one of its parents is a file, not a directory"))
            }
            ErrorKind::AlreadyExists => ToolError::Conflict(format!("{path} already exists")),
            ErrorKind::DirectoryNotEmpty => ToolError::Conflict(format!("{path} is a directory that is not empty")),
            ErrorKind::InvalidFilename => ToolError::InvalidArgs(format!("{path} is not a valid file name on this filesystem")),
            _ => ToolError::Failed(format!("{path}: {error}")),
        }
    }
}

/// The path for text an agent reads: control characters escaped (`\n`, `\u{1b}`), so that a
/// file name cannot forge lines in a listing, a log or a transcript. Use [`WorkspacePath::as_str`]
/// for filesystem calls and structured (JSON) output.
impl std::fmt::Display for WorkspacePath {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(&escape(&self.normalised))
    }
}

/// `raw` with control characters escaped.
pub fn escape(raw: &str) -> std::borrow::Cow<'_, str> {
    if !raw.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(raw);
    }
    let mut escaped = String::with_capacity(raw.len() + 8);
    for character in raw.chars() {
        if character.is_control() {
            escaped.extend(character.escape_default());
        } else {
            escaped.push(character);
        }
    }
    std::borrow::Cow::Owned(escaped)
}

/// How a path an agent gave is shown back: escaped, except that an absolute or foreign path
/// (which may name something on the host) is not repeated.
pub fn shown(raw: &str) -> String {
    match foreign_kind(raw) {
        Some(kind) => format!("(the path, {kind})"),
        None => escape(raw).into_owned(),
    }
}

/// Quote a path for a message: in backticks, with control characters escaped so that a
/// file name cannot forge lines in a log or a transcript.
pub fn quote(raw: &str) -> String {
    format!("`{}`", escape(raw))
}

/// Why `raw` names something outside any workspace, if it does.
fn foreign_kind(raw: &str) -> Option<&'static str> {
    let bytes = raw.as_bytes();
    if raw.starts_with("\\\\") || raw.starts_with("//") {
        return Some("a network (UNC) path");
    }
    if raw.starts_with('/') || raw.starts_with('\\') {
        return Some("an absolute path");
    }
    if bytes.len() >= 2 && bytes[0].is_ascii_alphabetic() && bytes[1] == b':' {
        return Some("a Windows drive path");
    }
    if raw.starts_with('~') {
        return Some("a home-directory path (`~` is not expanded)");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(raw: &str) -> Result<String, String> {
        WorkspacePath::parse(raw).map(|path| path.as_str().to_owned()).map_err(|error| match error {
            ToolError::InvalidArgs(_) => "invalid".to_owned(),
            ToolError::Denied(_) => "denied".to_owned(),
            _ => "other".to_owned(),
        })
    }

    #[test]
    fn normalisation_table() {
        let table: &[(&str, Result<&str, &str>)] = &[
            ("a.txt", Ok("a.txt")),
            ("./a.txt", Ok("a.txt")),
            ("src//main.rs", Ok("src/main.rs")),
            ("src/./main.rs", Ok("src/main.rs")),
            ("src/../docs/x", Ok("docs/x")),
            ("src/", Ok("src")),
            (".", Ok(".")),
            ("./", Ok(".")),
            ("a/..", Ok(".")),
            ("%2e%2e/x", Ok("%2e%2e/x")),
            ("a\\..\\b", Ok("a\\..\\b")),
            ("...", Ok("...")),
            ("~x/y", Err("denied")),
            ("x/~y", Ok("x/~y")),
            ("..", Err("denied")),
            ("../x", Err("denied")),
            ("a/../../x", Err("denied")),
            ("a/b/../../../x", Err("denied")),
            ("/etc/passwd", Err("denied")),
            ("//server/share", Err("denied")),
            ("\\\\server\\share", Err("denied")),
            ("\\windows", Err("denied")),
            ("C:\\Windows", Err("denied")),
            ("c:x", Err("denied")),
            ("~", Err("denied")),
            ("~/x", Err("denied")),
            ("~root", Err("denied")),
            ("", Err("invalid")),
            ("a\0b", Err("invalid")),
        ];
        for (raw, expected) in table {
            let expected = expected.map(str::to_owned).map_err(str::to_owned);
            assert_eq!(parsed(raw), expected, "parsing {raw:?}");
        }
    }

    #[test]
    fn parent_join_and_prefix() {
        let path = WorkspacePath::parse("a/b/c").expect("valid path");
        assert_eq!(path.parent().map(|p| p.to_string()), Some("a/b".to_owned()));
        assert_eq!(WorkspacePath::parse("a").ok().and_then(|p| p.parent()), Some(WorkspacePath::root()));
        assert_eq!(WorkspacePath::root().parent(), None);
        assert_eq!(WorkspacePath::root().join("x").as_str(), "x");
        let base = WorkspacePath::parse("a").expect("valid path");
        assert_eq!(path.strip_prefix(&base), Some("b/c"));
        assert_eq!(base.strip_prefix(&base), Some("."));
        let other = WorkspacePath::parse("ab/c").expect("valid path");
        assert_eq!(other.strip_prefix(&base), None);
    }

    #[test]
    fn quote_escapes_control_characters() {
        assert_eq!(quote("a\nb"), "`a\\nb`");
        assert_eq!(quote("plain"), "`plain`");
        let forged = WorkspacePath::parse("x\n{\"kind\":\"call\"}").expect("a name");
        assert_eq!(forged.to_string(), "x\\n{\"kind\":\"call\"}");
        assert_eq!(shown("/home/user/x"), "(the path, an absolute path)");
        assert_eq!(shown("src/x\n"), "src/x\\n");
    }
}
