//! What a tool that claims a standard name (`read_file`, `write_file`, `edit_file`, `list_files`,
//! `search_files`) must do, checked in a scratch workspace of its own.

use super::*;

pub(super) type Behaviour = fn(&Scratch, &Runtime) -> Result<(), String>;

/// The behaviour checks for a standard tool name.
pub(super) fn behaviours(tool: &str) -> Vec<(&'static str, Behaviour)> {
    match tool {
        "read_file" => vec![
            ("read_file returns the file's lines", |scratch, runtime| {
                let text = scratch.ok(runtime, "read_file", json!({"path": "notes.txt"}))?.text;
                expect(
                    text.contains("alpha") && text.contains("beta"),
                    format!("reading `notes.txt` (alpha, beta) returned: {}", shorten(&text)),
                )
            }),
            ("read_file reports a missing file as not-found", |scratch, runtime| {
                scratch.err(runtime, "read_file", json!({"path": "missing.txt"}), ToolErrorKind::NotFound)
            }),
        ],
        "write_file" => vec![("write_file creates a file with its parents", |scratch, runtime| {
            scratch.ok(runtime, "write_file", json!({"path": "new/dir/out.txt", "content": "hello\n"}))?;
            let written = scratch.read("new/dir/out.txt");
            expect(written.as_deref() == Some("hello\n"), format!("`new/dir/out.txt` holds {written:?} instead of \"hello\\n\""))
        })],
        "edit_file" => vec![
            ("edit_file replaces an exact string", |scratch, runtime| {
                scratch.ok(runtime, "edit_file", json!({"path": "notes.txt", "old_string": "beta", "new_string": "gamma"}))?;
                let edited = scratch.read("notes.txt");
                expect(edited.as_deref() == Some("alpha\ngamma\n"), format!("`notes.txt` holds {edited:?} instead of \"alpha\\ngamma\\n\""))
            }),
            ("edit_file refuses a missing string as conflict and changes nothing", |scratch, runtime| {
                scratch.err(
                    runtime,
                    "edit_file",
                    json!({"path": "notes.txt", "old_string": "not there", "new_string": "x"}),
                    ToolErrorKind::Conflict,
                )?;
                let kept = scratch.read("notes.txt");
                expect(kept.as_deref() == Some("alpha\nbeta\n"), format!("`notes.txt` changed to {kept:?}"))
            }),
        ],
        "list_files" => vec![("list_files lists the workspace's files", |scratch, runtime| {
            let text = scratch.ok(runtime, "list_files", json!({}))?.text;
            expect(
                text.contains("notes.txt") && text.contains("src"),
                format!("the listing lacks `notes.txt` or `src`: {}", shorten(&text)),
            )
        })],
        "search_files" => vec![("search_files finds a string and names its file", |scratch, runtime| {
            let text = scratch.ok(runtime, "search_files", json!({"query": "alpha"}))?.text;
            expect(text.contains("notes.txt"), format!("searching `alpha` did not name `notes.txt`: {}", shorten(&text)))
        })],
        "read_many" => vec![("read_many returns every readable file and the error of each other", |scratch, runtime| {
            let output = scratch.ok(runtime, "read_many", json!({"paths": ["notes.txt", "missing.txt", "src/lib.rs"]}))?;
            let text = output.text;
            expect(
                text.contains("alpha") && text.contains("42") && text.contains("missing.txt"),
                format!("reading `notes.txt`, `missing.txt` and `src/lib.rs` returned: {}", shorten(&text)),
            )
        })],
        "file_info" => vec![("file_info gives the type, size and line count", |scratch, runtime| {
            let output = scratch.ok(runtime, "file_info", json!({"path": "notes.txt"}))?;
            let info = output.structured.unwrap_or_default();
            expect(
                info["type"] == "file" && info["size"] == 11 && info["lines"] == 2,
                format!("`notes.txt` (11 bytes, 2 lines) was described as {}", shorten(&info.to_string())),
            )
        })],
        "directory_tree" => vec![("directory_tree shows directories with their children", |scratch, runtime| {
            let output = scratch.ok(runtime, "directory_tree", json!({}))?;
            let text = output.structured.map(|tree| tree.value().to_string()).unwrap_or(output.text);
            expect(
                text.contains("\"src\"") && text.contains("lib.rs") && text.contains("notes.txt"),
                format!("the tree lacks `src/lib.rs` or `notes.txt`: {}", shorten(&text)),
            )
        })],
        "create_directory" => vec![("create_directory creates missing parents and accepts an existing directory", |scratch, runtime| {
            scratch.ok(runtime, "create_directory", json!({"path": "a/b/c"}))?;
            scratch.ok(runtime, "create_directory", json!({"path": "a/b/c"}))?;
            expect(scratch.root().join("a/b/c").is_dir(), "`a/b/c` is not a directory after create_directory".to_owned())
        })],
        "insert_text" => vec![("insert_text inserts after the given line", |scratch, runtime| {
            scratch.ok(runtime, "insert_text", json!({"path": "notes.txt", "line": 1, "text": "between"}))?;
            let edited = scratch.read("notes.txt");
            expect(
                edited.as_deref() == Some("alpha\nbetween\nbeta\n"),
                format!("`notes.txt` holds {edited:?} instead of \"alpha\\nbetween\\nbeta\\n\""),
            )
        })],
        "move_file" => vec![
            ("move_file moves a file", |scratch, runtime| {
                scratch.ok(runtime, "move_file", json!({"source": "notes.txt", "destination": "moved/notes.txt"}))?;
                let moved = scratch.read("moved/notes.txt");
                expect(
                    moved.as_deref() == Some("alpha\nbeta\n") && scratch.read("notes.txt").is_none(),
                    format!(
                        "after the move, `moved/notes.txt` holds {moved:?} and `notes.txt` still exists: {}",
                        scratch.read("notes.txt").is_some()
                    ),
                )
            }),
            ("move_file refuses an existing destination as conflict", |scratch, runtime| {
                scratch.err(runtime, "move_file", json!({"source": "notes.txt", "destination": "src/lib.rs"}), ToolErrorKind::Conflict)?;
                expect(scratch.read("notes.txt").is_some(), "`notes.txt` is gone after a refused move".to_owned())
            }),
        ],
        "delete_file" => vec![
            ("delete_file deletes a file", |scratch, runtime| {
                scratch.ok(runtime, "delete_file", json!({"path": "notes.txt"}))?;
                expect(scratch.read("notes.txt").is_none(), "`notes.txt` still exists".to_owned())
            }),
            ("delete_file refuses a directory without recursive", |scratch, runtime| {
                scratch.err(runtime, "delete_file", json!({"path": "src"}), ToolErrorKind::InvalidArgs)?;
                expect(scratch.read("src/lib.rs").is_some(), "`src/lib.rs` is gone after a refused delete".to_owned())
            }),
        ],
        "apply_patch" => vec![
            ("apply_patch changes several files", |scratch, runtime| {
                let patch = "*** Begin Patch\n*** Update File: notes.txt\n@@\n-beta\n+gamma\n*** Add File: new.txt\n+hello\n*** End Patch";
                scratch.ok(runtime, "apply_patch", json!({"patch": patch}))?;
                let (notes, new) = (scratch.read("notes.txt"), scratch.read("new.txt"));
                expect(
                    notes.as_deref() == Some("alpha\ngamma\n") && new.as_deref() == Some("hello\n"),
                    format!("after the patch `notes.txt` holds {notes:?} and `new.txt` {new:?}"),
                )
            }),
            ("apply_patch changes nothing when a later hunk fails", |scratch, runtime| {
                let patch = "*** Begin Patch\n*** Update File: notes.txt\n@@\n-beta\n+gamma\n*** Update File: src/lib.rs\n@@\n-not in the file\n+x\n*** End Patch";
                scratch.err(runtime, "apply_patch", json!({"patch": patch}), ToolErrorKind::Conflict)?;
                let notes = scratch.read("notes.txt");
                expect(notes.as_deref() == Some("alpha\nbeta\n"), format!("`notes.txt` changed to {notes:?} although the patch failed"))
            }),
        ],
        other => chains::behaviours(other),
    }
}

pub(super) fn expect(condition: bool, failure: String) -> Result<(), String> {
    if condition { Ok(()) } else { Err(failure) }
}

/// A scratch workspace beside an `outside` directory holding a canary.
pub(super) struct Scratch {
    pub(super) temp: tempfile::TempDir,
    pub(super) workspace: Workspace,
    /// Every successful result so far: the tool, its arguments, its structured value.
    pub(super) results: std::cell::RefCell<Vec<(String, String, Option<Value>)>>,
}

impl Scratch {
    pub(super) fn new() -> std::io::Result<Scratch> {
        let temp = tempfile::tempdir()?;
        std::fs::create_dir(temp.path().join("workspace"))?;
        std::fs::create_dir(temp.path().join("outside"))?;
        std::fs::write(temp.path().join("outside/secret.txt"), CANARY)?;
        let workspace = Workspace::open(&temp.path().join("workspace")).map_err(std::io::Error::other)?;
        let scratch = Scratch { temp, workspace, results: std::cell::RefCell::new(Vec::new()) };
        scratch.reset();
        Ok(scratch)
    }

    pub(super) fn root(&self) -> &Path {
        self.workspace.root()
    }

    /// Put the workspace back to its initial files.
    pub(super) fn reset(&self) {
        let root = self.root();
        if let Ok(entries) = std::fs::read_dir(root) {
            for entry in entries.flatten() {
                let path = entry.path();
                let _ = if path.is_dir() && !path.is_symlink() { std::fs::remove_dir_all(&path) } else { std::fs::remove_file(&path) };
            }
        }
        let _ = std::fs::create_dir_all(root.join("src"));
        let _ = std::fs::create_dir_all(root.join("docs"));
        let _ = std::fs::write(root.join("notes.txt"), "alpha\nbeta\n");
        let _ = std::fs::write(root.join("src/lib.rs"), "pub fn answer() -> u32 {\n    42\n}\n");
        let _ = std::fs::write(root.join("docs/guide.md"), "# Guide\n");
        let _ = std::os::unix::fs::symlink("../outside/secret.txt", root.join("escape.txt"));
    }

    pub(super) fn read(&self, path: &str) -> Option<String> {
        std::fs::read_to_string(self.root().join(path)).ok()
    }

    pub(super) fn call(&self, runtime: &Runtime, role: &str, tool: &str, args: &str) -> CallOutcome {
        self.call_with(runtime, role, tool, args, None)
    }

    /// A call by a session bound to `task` (`CHAIN/TASK`), writing for its chain.
    pub(super) fn call_bound(&self, runtime: &Runtime, tool: &str, args: &str, task: &str) -> CallOutcome {
        match toolcell_runtime::TaskBinding::parse(task) {
            Ok(binding) => self.call_with(runtime, "agent", tool, args, Some(&binding)),
            Err(reason) => CallOutcome {
                result: Err(toolcell_types::ToolError::new(ToolErrorKind::InvalidArgs, reason)),
                ..CallOutcome::new(String::new())
            },
        }
    }

    pub(super) fn call_with(
        &self,
        runtime: &Runtime,
        role: &str,
        tool: &str,
        args: &str,
        task: Option<&toolcell_runtime::TaskBinding>,
    ) -> CallOutcome {
        let request = CallRequest {
            owner: task.map(toolcell_runtime::TaskBinding::chain),
            task,
            ..CallRequest::new(&self.workspace, role, "conformance", tool, args)
        };
        let outcome = runtime.call(&request).unwrap_or_else(|error| CallOutcome {
            result: Err(toolcell_types::ToolError::new(ToolErrorKind::Failed, format!("the host could not run the call: {error}"))),
            trapped: true,
            ..CallOutcome::new(String::new())
        });
        if let Ok(output) = &outcome.result {
            self.results.borrow_mut().push((
                tool.to_owned(),
                args.to_owned(),
                output.structured.clone().map(toolcell_types::Structured::into_value),
            ));
        }
        outcome
    }

    pub(super) fn ok_bound(&self, runtime: &Runtime, tool: &str, args: Value, task: &str) -> Result<ToolOutput, String> {
        match self.call_bound(runtime, tool, &args.to_string(), task).result {
            Ok(output) => Ok(output),
            Err(error) => Err(format!("{tool} {args} as the session of `{task}` failed: {error}")),
        }
    }

    pub(super) fn ok(&self, runtime: &Runtime, tool: &str, args: Value) -> Result<ToolOutput, String> {
        match self.call(runtime, "agent", tool, &args.to_string()).result {
            Ok(output) => Ok(output),
            Err(error) => Err(format!("{tool} {args} failed: {error}")),
        }
    }

    pub(super) fn err(&self, runtime: &Runtime, tool: &str, args: Value, kind: ToolErrorKind) -> Result<(), String> {
        match self.call(runtime, "agent", tool, &args.to_string()).result {
            Err(error) if error.kind == kind => Ok(()),
            other => Err(format!("{tool} {args} should fail with `{kind}`; it returned {}", summary(&other))),
        }
    }

    /// What in a result should not be there: the canary, or a host path.
    pub(super) fn leak(&self, outcome: &CallOutcome) -> Option<String> {
        let base = self.temp.path().to_string_lossy().into_owned();
        let texts: Vec<String> = match &outcome.result {
            // The structured result as written and as read (a path may be written with escapes).
            Ok(output) => {
                let structured = output.structured.as_ref();
                vec![
                    output.text.clone(),
                    structured.map(|structured| structured.json().to_owned()).unwrap_or_default(),
                    structured.map(|structured| structured.value().to_string()).unwrap_or_default(),
                ]
            }
            Err(error) => vec![error.message.clone()],
        };
        texts.iter().find_map(|text| {
            if text.contains(CANARY) {
                Some("the result contains the content of a file outside the workspace".to_owned())
            } else if text.contains(&base) {
                Some("the result contains a host path".to_owned())
            } else {
                None
            }
        })
    }

    /// `Some(problem)` if the outside directory changed.
    pub(super) fn outside_intact(&self) -> Option<String> {
        let outside = self.temp.path().join("outside");
        let names: Vec<String> = std::fs::read_dir(&outside)
            .map(|entries| entries.flatten().map(|entry| entry.file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        if names != ["secret.txt"] {
            return Some(format!("the directory beside the workspace now holds {names:?}"));
        }
        match std::fs::read_to_string(outside.join("secret.txt")) {
            Ok(content) if content == CANARY => None,
            _ => Some("the canary file beside the workspace was modified".to_owned()),
        }
    }
}
