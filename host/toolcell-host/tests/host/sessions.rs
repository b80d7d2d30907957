//! Sessions of the embedding API: locks held by a session, the tokens its calls present,
//! warnings, and undo.

use std::time::Duration;

use toolcell_host::{Error, HostBuilder, LockMode, ToolErrorKind};

fn host() -> (tempfile::TempDir, toolcell_host::Host) {
    let base = tempfile::tempdir().expect("temporary directory");
    let repo = base.path().join("repo");
    std::fs::create_dir_all(repo.join("src")).expect("mkdir");
    std::fs::write(repo.join("src/a.rs"), "fn a() {}\n").expect("write");
    let host =
        HostBuilder::new(&repo).state_dir(base.path().join("state")).cache_dir(base.path().join("cache")).build().expect("host builds");
    (base, host)
}

#[test]
fn a_sessions_lock_keeps_other_sessions_out_until_released() {
    let (base, host) = host();
    let alice = host.session("impl", "s-alice").expect("session").with_owner("CHAIN-039");
    let bob = host.session("impl", "s-bob").expect("session");
    let lock = alice.lock("src/**", LockMode::Exclusive, Duration::from_secs(60)).expect("locked");
    assert_eq!(host.locks().expect("locks"), std::slice::from_ref(&lock));
    assert_eq!(alice.held_locks(), std::slice::from_ref(&lock));

    let refused = bob.call("write_file", r#"{"path": "src/a.rs", "content": "bob"}"#).expect("call");
    let error = refused.output.expect_err("locked");
    assert_eq!(error.kind, ToolErrorKind::Conflict);
    assert!(error.message.contains("`src/a.rs` is locked by `CHAIN-039` until") && !error.message.contains("s-alice"), "{}", error.message);
    // Bob cannot take the lock either.
    assert!(matches!(bob.lock("src/a.rs", LockMode::Shared, Duration::from_secs(5)), Err(Error::Lock(_))));

    // Alice has not read the file: her write goes through, with a warning.
    let written = alice.call("write_file", r#"{"path": "src/a.rs", "content": "alice\n"}"#).expect("call");
    assert!(written.output.is_ok(), "{:?}", written.output);
    assert_eq!(written.warnings, ["Warning: overwriting existing file `src/a.rs` that was not read first. Consider reading it first."]);

    alice.unlock(&lock).expect("released");
    assert!(alice.held_locks().is_empty());
    assert!(bob.call("read_file", r#"{"path": "src/a.rs"}"#).expect("call").output.is_ok());
    let written = bob.call("write_file", r#"{"path": "src/a.rs", "content": "bob\n"}"#).expect("call");
    assert!(written.output.is_ok() && written.warnings.is_empty(), "{:?} {:?}", written.output, written.warnings);
    // Bob undoes his change.
    assert!(bob.call("undo_edit", r#"{"path": "src/a.rs"}"#).expect("call").output.is_ok());
    assert_eq!(std::fs::read_to_string(base.path().join("repo/src/a.rs")).expect("read"), "alice\n");
}

#[test]
fn a_session_whose_lease_lapsed_cannot_write() {
    let (base, host) = host();
    let session = host.session("impl", "s-slow").expect("session");
    session.lock("src/a.rs", LockMode::Exclusive, Duration::from_millis(200)).expect("locked");
    std::thread::sleep(Duration::from_millis(300));
    let refused = session.call("write_file", r#"{"path": "src/a.rs", "content": "late"}"#).expect("call");
    let error = refused.output.expect_err("fenced");
    assert_eq!(error.kind, ToolErrorKind::Conflict);
    assert!(error.message.contains("which expired at"), "{}", error.message);
    assert_eq!(std::fs::read_to_string(base.path().join("repo/src/a.rs")).expect("read"), "fn a() {}\n");
    // Locking again restores its right to write.
    let lock = session.lock("src/a.rs", LockMode::Exclusive, Duration::from_secs(60)).expect("locked again");
    assert_eq!(session.held_locks(), std::slice::from_ref(&lock));
    assert!(session.call("write_file", r#"{"path": "src/a.rs", "content": "on time"}"#).expect("call").output.is_ok());
    session.unlock(&lock).expect("released");
}
