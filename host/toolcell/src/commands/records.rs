//! What the host keeps, read and managed from the command line: the audit trail, the shared
//! store, locks, the content index, spawned sessions and the session report.

use super::*;

/// `toolcell store migrate|status`.
pub(super) fn store(args: &RuntimeArgs, command: &StoreCommand) -> anyhow::Result<ExitCode> {
    use toolcell_store_postgres::{PostgresStore, SCHEMA_VERSION};
    let url = store_url(args).context("no store: pass --store URL")?;
    let store = PostgresStore::open(&url)?;
    let mut stdout = std::io::stdout().lock();
    match command {
        StoreCommand::Migrate => {
            let applied = store.migrate()?;
            if applied.is_empty() {
                writeln!(stdout, "{}: already at schema version {SCHEMA_VERSION}", store.name())?;
            } else {
                let applied: Vec<String> = applied.iter().map(ToString::to_string).collect();
                writeln!(stdout, "{}: migrated to schema version {SCHEMA_VERSION} (applied {})", store.name(), applied.join(", "))?;
            }
            Ok(ExitCode::SUCCESS)
        }
        StoreCommand::Status => {
            let found = store.schema_version()?;
            let hint = match found.cmp(&SCHEMA_VERSION) {
                std::cmp::Ordering::Less => ": run `toolcell store migrate` with the same --store (once, as the database's owner)",
                std::cmp::Ordering::Greater => ": the database was migrated by a newer toolcell; run that one here",
                std::cmp::Ordering::Equal => "",
            };
            writeln!(stdout, "{}: schema version {found}; this toolcell needs {SCHEMA_VERSION}{hint}", store.name())?;
            Ok(if found == SCHEMA_VERSION { ExitCode::SUCCESS } else { ExitCode::from(EXIT_TOOL_ERROR) })
        }
    }
}

pub(super) fn audit(args: &RuntimeArgs, command: &AuditCommand) -> anyhow::Result<ExitCode> {
    let directory = state_dir(args).context("no state directory: pass --state-dir or set TOOLCELL_STATE_DIR")?;
    // `verify` checks what is there and creates nothing; `tail` may wait for a log to come.
    let opened = match (store_url(args), command) {
        (Some(url), _) => AuditLog::shared(toolcell_store_postgres::PostgresStore::connect(&url)?, &directory),
        (None, AuditCommand::Verify) => AuditLog::existing(&directory),
        (None, AuditCommand::Tail { .. }) => AuditLog::open(&directory),
    };
    let log = match opened {
        Ok(log) => log,
        Err(toolcell_runtime::StateError::Audit { path, source }) if source.kind() == std::io::ErrorKind::NotFound => {
            // A host on a shared store keeps its checkpoint of the chain here, not the chain.
            let shared = directory.join(toolcell_runtime::AUDIT_HEAD_FILE).exists();
            let hint = if shared {
                "this state directory's host keeps its audit trail in PostgreSQL: pass --store URL, the URL it runs with \
                 (`[store] url` in `toolcell serve`'s service.toml)"
            } else {
                "nothing was recorded there, or this is not the state directory (pass --state-dir), or the audit trail is in \
                 PostgreSQL (pass --store URL, as `[store] url` in `toolcell serve`'s service.toml says)"
            };
            writeln!(std::io::stderr(), "there is no audit trail at `{}`: {hint}", path.display())?;
            return Ok(ExitCode::from(EXIT_TOOL_ERROR));
        }
        Err(error) => return Err(error.into()),
    };
    let (text, end) = log.read_from(0).with_context(|| format!("cannot read `{}`", log.name()))?;
    match command {
        AuditCommand::Verify => match log.verify(&text) {
            Ok(verified) => {
                writeln!(std::io::stdout(), "{}: ok, {} records, last hash {}", log.name(), verified.records, verified.last_hash)?;
                Ok(ExitCode::SUCCESS)
            }
            Err(tamper) => {
                writeln!(std::io::stderr(), "{}: {tamper}", log.name())?;
                Ok(ExitCode::from(EXIT_TOOL_ERROR))
            }
        },
        AuditCommand::Tail { lines, session, follow } => {
            let shown: Vec<String> = readable(&text, session.as_deref());
            let mut stdout = std::io::stdout().lock();
            for line in &shown[shown.len().saturating_sub(*lines)..] {
                writeln!(stdout, "{line}")?;
            }
            stdout.flush()?;
            if !follow {
                return Ok(ExitCode::SUCCESS);
            }
            let mut offset = end;
            loop {
                std::thread::sleep(std::time::Duration::from_millis(200));
                let (more, end) = log.read_from(offset)?;
                offset = end;
                for line in readable(&more, session.as_deref()) {
                    writeln!(stdout, "{line}")?;
                }
                stdout.flush()?;
            }
        }
    }
}

/// Audit lines as readable text, optionally for one session; unparsable lines are shown as such.
pub(super) fn readable(text: &str, session: Option<&str>) -> Vec<String> {
    text.lines()
        .filter_map(|line| match serde_json::from_str::<toolcell_audit::Record>(line) {
            Ok(record) if session.is_none_or(|session| record.session == session) => Some(toolcell_audit::display(&record)),
            Ok(_) => None,
            Err(_) => Some(format!("(unreadable record: {})", line.escape_default())),
        })
        .collect()
}

pub(super) fn lock(runtime: &Runtime, command: LockCommand) -> anyhow::Result<ExitCode> {
    let mut stdout = std::io::stdout().lock();
    match command {
        LockCommand::Acquire { pattern, workspace, owner, session, mode, ttl, json } => {
            let workspace = Workspace::open(&workspace)?;
            let request = LockRequest {
                pattern: workspace.lock_pattern(&pattern)?,
                session: session.unwrap_or_else(|| owner.clone()),
                owner,
                mode: LockMode::from_name(&mode).context("mode is `exclusive` or `shared`")?,
                ttl,
            };
            match runtime.acquire_lock(&workspace, &request) {
                Ok(lock) if json => writeln!(stdout, "{}", serde_json::to_string_pretty(&lock_json(&lock))?)?,
                Ok(lock) => writeln!(
                    stdout,
                    "locked `{}` ({}) for `{}` (session {}) until {}: token {}",
                    toolcell_types::escape_control(&lock.pattern),
                    lock.mode.as_str(),
                    toolcell_types::escape_control(&lock.owner),
                    toolcell_types::escape_control(&lock.session),
                    lock.expires_at(),
                    lock.fence
                )?,
                Err(Error::Lock(LockStoreError::Lock(conflict @ LockError::Conflict(_)))) => {
                    writeln!(std::io::stderr(), "{conflict}")?;
                    return Ok(ExitCode::from(EXIT_TOOL_ERROR));
                }
                Err(error) => return Err(error.into()),
            }
        }
        LockCommand::Release { token, workspace, owner } => {
            let workspace = Workspace::open(&workspace)?;
            match runtime.release_lock(&workspace, token, &owner) {
                Ok(lock) => writeln!(stdout, "released `{}` (token {})", toolcell_types::escape_control(&lock.pattern), lock.fence)?,
                Err(Error::Lock(LockStoreError::Lock(error))) => {
                    writeln!(std::io::stderr(), "{error}")?;
                    return Ok(ExitCode::from(EXIT_TOOL_ERROR));
                }
                Err(error) => return Err(error.into()),
            }
        }
        LockCommand::List { workspace, json } => {
            let locks = runtime.live_locks(&Workspace::open(&workspace)?)?;
            if json {
                let locks: Vec<_> = locks.iter().map(lock_json).collect();
                writeln!(stdout, "{}", serde_json::to_string_pretty(&locks)?)?;
            } else if locks.is_empty() {
                writeln!(stdout, "no live locks")?;
            } else {
                for lock in &locks {
                    writeln!(stdout, "{} (token {})", lock, lock.fence)?;
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub(super) fn sessions_list(runtime: &Runtime, workspace: Option<&std::path::Path>, as_json: bool) -> anyhow::Result<ExitCode> {
    let root = workspace.map(|workspace| Workspace::open(workspace).map(|opened| opened.root().to_path_buf())).transpose()?;
    let sessions: Vec<_> =
        runtime.sessions().list().into_iter().filter(|record| root.as_ref().is_none_or(|root| &record.workspace == root)).collect();
    let mut stdout = std::io::stdout().lock();
    if as_json {
        writeln!(stdout, "{}", serde_json::to_string_pretty(&sessions)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    if sessions.is_empty() {
        writeln!(stdout, "no sessions")?;
    }
    for record in &sessions {
        writeln!(
            stdout,
            "{}  role={}  task={}  owner={}  parent={}  {}  created {}",
            record.id,
            record.role,
            record.task.as_deref().unwrap_or("-"),
            record.owner.as_deref().unwrap_or("-"),
            record.parent.as_deref().unwrap_or("-"),
            record.state.as_str(),
            record.created
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

pub(super) fn report(runtime: &Runtime, args: &ReportArgs) -> anyhow::Result<ExitCode> {
    let workspace = Workspace::open(&args.workspace)?;
    let subject = match (&args.session, &args.chain) {
        (Some(session), _) => crate::report::Subject::Session(session),
        (None, Some(chain)) => crate::report::Subject::Chain(chain),
        (None, None) => anyhow::bail!("give --session ID or --chain CHAIN-ID"),
    };
    let gathered = match crate::report::gather(runtime, &workspace, &subject, args.role.as_deref()) {
        Ok(gathered) => gathered,
        Err(reason) => {
            writeln!(std::io::stderr(), "{reason}")?;
            return Ok(ExitCode::from(EXIT_TOOL_ERROR));
        }
    };
    std::fs::write(&args.output, crate::report::render(&gathered)).with_context(|| format!("cannot write {}", args.output.display()))?;
    writeln!(std::io::stdout(), "wrote {} ({} session(s))", args.output.display(), gathered.sessions.len())?;
    Ok(ExitCode::SUCCESS)
}

/// `toolcell index build|status|drop`.
pub(super) fn index(runtime: &Runtime, command: &IndexCommand) -> anyhow::Result<ExitCode> {
    let (IndexCommand::Build(args) | IndexCommand::Status(args) | IndexCommand::Drop(args)) = command;
    let workspace = Workspace::open(&args.workspace)?;
    let described = |report: &toolcell_runtime::IndexReport| {
        json!({
            "files": report.files,
            "trigrams": report.trigrams,
            "text_bytes": report.text_bytes,
            "index_bytes": report.index_bytes,
        })
    };
    let size = |bytes: u64| match bytes {
        0..1_048_576 => format!("{:.1} KiB", bytes as f64 / 1024.0),
        _ => format!("{:.1} MiB", bytes as f64 / 1_048_576.0),
    };
    let mut stdout = std::io::stdout().lock();
    match command {
        IndexCommand::Build(_) => {
            let report = runtime.build_index(&workspace)?;
            if args.json {
                let mut value = described(&report);
                value["took_ms"] = json!(report.took.as_millis());
                writeln!(stdout, "{value}")?;
            } else {
                writeln!(
                    stdout,
                    "indexed {} files ({} of text) in {:.2} s: {} trigrams, {} of index ({:.0}% of the text)",
                    report.files,
                    size(report.text_bytes),
                    report.took.as_secs_f64(),
                    report.trigrams,
                    size(report.index_bytes),
                    100.0 * report.index_bytes as f64 / report.text_bytes.max(1) as f64
                )?;
            }
            Ok(ExitCode::SUCCESS)
        }
        IndexCommand::Status(_) => {
            let status = runtime.index_status(&workspace)?;
            let (value, text, healthy) = match &status {
                toolcell_runtime::IndexStatus::Absent => {
                    (json!({"state": "absent"}), "no index: `toolcell index build` makes one".to_owned(), false)
                }
                toolcell_runtime::IndexStatus::Damaged(reason) => (
                    json!({"state": "damaged", "reason": reason}),
                    format!("the index cannot be used: {reason}. `toolcell index build` replaces it"),
                    false,
                ),
                toolcell_runtime::IndexStatus::Present { report, changed } => {
                    let mut value = described(report);
                    value["state"] = json!("present");
                    value["changed"] = json!(changed);
                    let text = format!(
                        "{} files indexed ({} of text, {} trigrams, {} of index); {changed} changed since",
                        report.files,
                        size(report.text_bytes),
                        report.trigrams,
                        size(report.index_bytes)
                    );
                    (value, text, true)
                }
            };
            writeln!(stdout, "{}", if args.json { value.to_string() } else { text })?;
            Ok(if healthy { ExitCode::SUCCESS } else { ExitCode::from(EXIT_TOOL_ERROR) })
        }
        IndexCommand::Drop(_) => {
            let dropped = runtime.drop_index(&workspace)?;
            writeln!(stdout, "{}", if dropped { "the index was removed" } else { "there was no index" })?;
            Ok(ExitCode::SUCCESS)
        }
    }
}
