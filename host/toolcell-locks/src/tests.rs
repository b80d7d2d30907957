use super::*;

const MINUTE: Duration = Duration::from_secs(60);

fn request(pattern: &str, owner: &str, mode: Mode) -> LockRequest {
    LockRequest { pattern: pattern.to_owned(), owner: owner.to_owned(), session: format!("s-{owner}"), mode, ttl: MINUTE }
}

#[test]
fn exclusive_locks_conflict_with_every_overlapping_lock() {
    let mut table = LockTable::default();
    let first = table.acquire(&request("src/**", "A", Mode::Exclusive), 0).expect("first");
    assert_eq!(first.fence, 1);
    for pattern in ["src/a.rs", "src/**", "src/x/*.rs", "**/*.rs", "."] {
        let error = table.acquire(&request(pattern, "B", Mode::Shared), 10).expect_err(pattern);
        assert_eq!(error, LockError::Conflict(first.clone()), "{pattern}");
    }
    // Disjoint paths are free.
    let docs = table.acquire(&request("docs/a.md", "B", Mode::Exclusive), 10).expect("disjoint");
    assert_eq!(docs.fence, 2);
    // The owner itself may take more locks inside its own.
    table.acquire(&request("src/a.rs", "A", Mode::Exclusive), 10).expect("same owner");
}

#[test]
fn shared_locks_coexist_but_block_writes_by_others() {
    let mut table = LockTable::default();
    let a = table.acquire(&request("src/a.rs", "A", Mode::Shared), 0).expect("A");
    let b = table.acquire(&request("src/a.rs", "B", Mode::Shared), 0).expect("B");
    assert_ne!(a.fence, b.fence);
    assert!(table.acquire(&request("src/a.rs", "C", Mode::Exclusive), 0).is_err());
    assert!(matches!(table.check_write("src/a.rs", "A", &[a.fence], 0), Err(Refusal::Locked(lock)) if lock.owner == "B"));
    assert!(table.check_write("src/b.rs", "C", &[], 0).is_ok());
}

#[test]
fn writes_are_refused_under_another_owners_lock_naming_it() {
    let mut table = LockTable::default();
    let lock = table
        .acquire(
            &LockRequest {
                pattern: "src/a.rs".to_owned(),
                owner: "CHAIN-039".to_owned(),
                session: "s-12".to_owned(),
                mode: Mode::Exclusive,
                ttl: Duration::from_secs(3),
            },
            1_795_000_000_000,
        )
        .expect("acquire");
    let refusal = table.check_write("src/a.rs", "CHAIN-040", &[], 1_795_000_001_000).expect_err("locked");
    assert_eq!(
        refusal.message("src/a.rs"),
        "`src/a.rs` is locked by `CHAIN-039` until 2026-11-18T11:06:43Z: wait for the lock to be released or to expire, or work on another file"
    );
    // A lock taken without an owner is owned by its session, whose id is never told.
    let mut unowned = lock.clone();
    unowned.owner = unowned.session.clone();
    let refusal = Refusal::Locked(unowned.clone());
    assert!(refusal.message("src/a.rs").starts_with("`src/a.rs` is locked by another session until "), "{}", refusal.message("src/a.rs"));
    let conflict = LockError::Conflict(unowned).to_string();
    assert!(conflict.starts_with("`src/a.rs` is locked by another session (exclusive) until ") && !conflict.contains("s-12"), "{conflict}");
    assert_eq!(refusal.rule(), format!("lock:{}", lock.fence));
    assert!(table.check_write("src/a.rs", "CHAIN-039", &[lock.fence], 1_795_000_001_000).is_ok());
    assert!(table.check_write("src/b.rs", "CHAIN-040", &[], 1_795_000_001_000).is_ok());
}

#[test]
fn expired_leases_are_reclaimed_and_their_holders_fenced() {
    let mut table = LockTable::default();
    let stale = table.acquire(&request("src/a.rs", "A", Mode::Exclusive), 0).expect("A");
    let after = u64::try_from(MINUTE.as_millis()).expect("ms") + 1;
    // Expired, not yet reclaimed: others may write; the holder may not.
    assert!(table.check_write("src/a.rs", "B", &[], after).is_ok());
    let refusal = table.check_write("src/a.rs", "A", &[stale.fence], after).expect_err("fenced");
    assert!(refusal.message("src/a.rs").contains("expired"), "{}", refusal.message("src/a.rs"));
    // Even without presenting the token.
    assert!(matches!(table.check_write("src/a.rs", "A", &[], after), Err(Refusal::Fenced { .. })));
    // B reclaims it; A's token stays fenced, with the reason.
    let fresh = table.acquire(&request("src/a.rs", "B", Mode::Exclusive), after).expect("reclaimed");
    assert!(fresh.fence > stale.fence);
    let refusal = table.check_write("src/a.rs", "A", &[stale.fence], after).expect_err("fenced");
    assert!(matches!(&refusal, Refusal::Locked(lock) if lock.owner == "B"));
    table.release(fresh.fence, "B").expect("release");
    let refusal = table.check_write("src/a.rs", "A", &[stale.fence], after).expect_err("fenced");
    assert!(refusal.message("src/a.rs").contains("reclaimed by another holder"), "{}", refusal.message("src/a.rs"));
    // A token covering other paths does not matter for this one; an unknown token does.
    assert!(table.check_write("docs/x.md", "A", &[stale.fence], after).is_ok());
    assert!(matches!(table.check_write("docs/x.md", "A", &[99], after), Err(Refusal::Fenced { lapsed: None, .. })));
}

#[test]
fn renewal_keeps_the_token_and_release_needs_the_owner() {
    let mut table = LockTable::default();
    let first = table.acquire(&request("src/a.rs", "A", Mode::Exclusive), 0).expect("first");
    let renewed = table.acquire(&request("src/a.rs", "A", Mode::Exclusive), 30_000).expect("renew");
    assert_eq!(renewed.fence, first.fence);
    assert_eq!(renewed.expires_at_ms, 90_000);
    assert_eq!(table.live(0).count(), 1);
    assert!(matches!(table.release(first.fence, "B"), Err(LockError::NotHeld { .. })));
    table.release(first.fence, "A").expect("release");
    assert_eq!(table.live(0).count(), 0);
    // Tokens never repeat, even after everything is released.
    let again = table.acquire(&request("src/a.rs", "A", Mode::Exclusive), 0).expect("again");
    assert!(again.fence > first.fence);
}

#[test]
fn bad_requests_are_refused_with_what_to_do() {
    let mut table = LockTable::default();
    let mut bad = request("../x", "A", Mode::Exclusive);
    assert!(matches!(table.acquire(&bad, 0), Err(LockError::Pattern { .. })));
    bad.pattern = "/etc/passwd".to_owned();
    assert!(matches!(table.acquire(&bad, 0), Err(LockError::Pattern { .. })));
    let mut bad = request("src/a.rs", "", Mode::Exclusive);
    assert!(table.acquire(&bad, 0).expect_err("owner").to_string().contains("non-empty"));
    bad.owner = "A".to_owned();
    bad.ttl = Duration::ZERO;
    assert!(matches!(table.acquire(&bad, 0), Err(LockError::Ttl(_))));
}

#[test]
fn overlap_is_exact_for_literals_and_conservative_for_globs() {
    assert!(may_overlap("src/a.rs", "src/a.rs"));
    assert!(!may_overlap("src/a.rs", "src/b.rs"));
    assert!(may_overlap("src/**", "src/a/b.rs"));
    assert!(may_overlap("src/**", "src"));
    assert!(!may_overlap("src/**", "srcx/a.rs"));
    assert!(may_overlap("**/*.rs", "docs/x.rs"));
    assert!(!may_overlap("src/*.rs", "docs/x.rs"));
    assert!(may_overlap("src/*.rs", "src/**/*.md"));
    assert!(!may_overlap("src/*.rs", "docs/*.md"));
}

#[test]
fn the_table_round_trips_through_json() {
    let mut table = LockTable::default();
    let lock = table.acquire(&request("src/**", "A", Mode::Exclusive), 5).expect("acquire");
    table.release(lock.fence, "A").expect("release");
    table.acquire(&request("src/a.rs", "B", Mode::Shared), 5).expect("acquire");
    let json = serde_json::to_string(&table).expect("serialize");
    let back: LockTable = serde_json::from_str(&json).expect("parse");
    assert_eq!(back, table);
    assert!(matches!(back.check_write("src/x.rs", "A", &[lock.fence], 5), Err(Refusal::Fenced { .. })));
}

#[test]
fn ending_a_session_releases_its_locks_and_only_its_locks() {
    let mut table = LockTable::default();
    let ended = table.acquire(&request("src/a.rs", "A", Mode::Exclusive), 0).expect("A");
    let other = table.acquire(&request("docs/**", "B", Mode::Exclusive), 0).expect("B");
    // A lock taken in the same session for a chain goes with the session too.
    let for_chain = LockRequest { owner: "CHAIN-1".to_owned(), ..request("lib/**", "A", Mode::Shared) };
    let chain = table.acquire(&for_chain, 0).expect("chain");
    let released = table.release_session("s-A");
    assert_eq!(released.iter().map(|lock| lock.fence).collect::<Vec<_>>(), [ended.fence, chain.fence]);
    assert!(table.check_write("src/a.rs", "B", &[], 1).is_ok(), "the session's lock no longer blocks others");
    let refusal = table.check_write("src/a.rs", "A", &[ended.fence], 1);
    assert!(matches!(&refusal, Err(Refusal::Fenced { lapsed: Some(lapsed), .. }) if lapsed.lapse == Lapse::Released));
    // A release is not dated by the lease's end, which had not come.
    let message = refusal.expect_err("fenced").message("src/a.rs");
    assert!(message.contains("which was released: acquire"), "{message}");
    assert!(!message.contains(&ended.expires_at()), "{message}");
    assert!(matches!(table.check_write("docs/x.md", "A", &[], 1), Err(Refusal::Locked(lock)) if lock.fence == other.fence));
    assert!(table.release_session("s-A").is_empty());
}

#[test]
fn names_with_control_characters_are_refused_and_locks_are_shown_escaped() {
    let mut table = LockTable::default();
    for (pattern, session) in [("src/\u{1b}[31mred", "s"), ("src/a.rs\nforged: lock", "s"), ("src/a.rs", "s-\u{7}bell")] {
        let forged = LockRequest { session: session.to_owned(), ..request(pattern, "A", Mode::Exclusive) };
        let error = table.acquire(&forged, 0).expect_err("refused");
        assert!(error.to_string().contains("control character"), "{error}");
        assert!(!error.to_string().chars().any(|character| character.is_control()), "the refusal itself is escaped: {error:?}");
    }
    assert!(table.locks().is_empty());
    // A lock kept from before (a table written by an older version) still prints on one line.
    let lock = Lock {
        pattern: "café/\u{1b}]0;x\u{7}".to_owned(),
        owner: "A\nB".to_owned(),
        session: "s".to_owned(),
        mode: Mode::Exclusive,
        acquired_at_ms: 0,
        expires_at_ms: 1_000,
        fence: 1,
        held_for: None,
    };
    let shown = lock.to_string();
    assert!(!shown.chars().any(char::is_control), "{shown:?}");
    assert!(shown.contains("café/\\u{1b}]0;x\\u{7}") && shown.contains("A\\nB"), "{shown}");
}

/// The attack's policy: `impl` may write everything but `docs/**` (and not the protected
/// `.env`); `docs` may write `docs/**` and `.env`; `asker` must ask to write `src/**`.
const ROLES: &str = r#"
version = 1
protected = ["**/.env"]

[roles.impl]
tools = ["write_file", "task_complete"]

[[roles.impl.rules]]
id = "impl-write"
access = ["write", "delete"]
paths = ["**"]
effect = "allow"

[[roles.impl.rules]]
id = "docs-read-only"
access = ["write", "delete"]
paths = ["docs/**"]
effect = "deny"

[[roles.impl.rules]]
id = "task-complete-own-task"
tools = ["task_complete"]
access = ["write"]
paths = ["docs/tasks/{chain}/{task}.md"]
effect = "allow"

[roles.docs]
tools = ["write_file"]

[[roles.docs.rules]]
id = "docs-rw"
access = ["write", "delete"]
paths = ["docs/**", "**/.env"]
effect = "allow"

[roles.asker]
tools = ["write_file"]

[[roles.asker.rules]]
id = "asker-writes"
access = ["write"]
paths = ["**"]
effect = "allow"

[[roles.asker.rules]]
id = "src-needs-approval"
access = ["write"]
paths = ["src/**"]
effect = "ask"
"#;

fn roles() -> Policy {
    Policy::parse("roles.toml", ROLES, &["write_file", "task_complete"]).expect("policy")
}

fn take(table: &mut LockTable, policy: &Policy, pattern: &str, role: &str, task: Option<&str>) -> Result<Lock, LockError> {
    let task = task.map(|task| toolcell_policy::TaskBinding::parse(task).expect("task"));
    let holder = Holder::role(role, task.as_ref());
    let mut held_request = request(pattern, role, Mode::Exclusive);
    held_request.ttl = MAX_TTL;
    table.acquire_held(&held_request, Held { holder: Some(&holder), policy: Some(policy) }, 0)
}

#[test]
fn a_lock_keeps_others_only_from_what_its_holder_may_change() {
    let policy = roles();
    // (pattern, role holding it, task, path another owner changes, access, refused?)
    type Row<'a> = (&'a str, &'a str, Option<&'a str>, &'a str, Access, bool);
    let table: &[Row<'_>] = &[
        // Every glob form over what `impl` may not write covers nothing there.
        ("**", "impl", None, "docs/guide.md", Access::Write, false),
        ("**", "impl", None, "docs/guide.md", Access::Delete, false),
        ("d?cs/**", "impl", None, "docs/guide.md", Access::Write, false),
        ("[d]ocs/*", "impl", None, "docs/guide.md", Access::Write, false),
        ("{docs,src}/**", "impl", None, "docs/guide.md", Access::Write, false),
        ("*.env", "impl", None, ".env", Access::Write, false),
        ("**/.env", "impl", None, "config/.env", Access::Write, false),
        ("d\\ocs/guide.md", "impl", None, "docs/guide.md", Access::Write, false),
        // ... and still covers what it may write.
        ("**", "impl", None, "src/a.rs", Access::Write, true),
        ("**", "impl", None, "src/a.rs", Access::Delete, true),
        ("d?cs/**", "impl", None, "dacs/x", Access::Write, true),
        // A rule naming a tool the role may call, bound to the lock's task, counts.
        ("**", "impl", Some("CHAIN-1/001-a"), "docs/tasks/CHAIN-1/001-a.md", Access::Write, true),
        ("**", "impl", Some("CHAIN-1/001-a"), "docs/tasks/CHAIN-1/002-b.md", Access::Write, false),
        ("**", "impl", None, "docs/tasks/CHAIN-1/001-a.md", Access::Write, false),
        // ... for that access only.
        ("**", "impl", Some("CHAIN-1/001-a"), "docs/tasks/CHAIN-1/001-a.md", Access::Delete, false),
        // An `ask` rule takes the write away: the holder could not write without approval.
        ("**", "asker", None, "src/a.rs", Access::Write, false),
        ("**", "asker", None, "lib/a.rs", Access::Write, true),
        // A protected path the role's rule names explicitly is the role's to lock.
        ("**", "docs", None, ".env", Access::Write, true),
        ("**", "docs", None, "src/a.rs", Access::Write, false),
        // What a role the policy does not know may change cannot be judged: its lock covers
        // its whole pattern (a host sharing the table with another policy, a renamed role).
        ("**", "ghost", None, "src/a.rs", Access::Write, true),
        ("**", "ghost", None, "docs/guide.md", Access::Write, true),
    ];
    for (pattern, role, task, path, access, refused) in table {
        let mut locks = LockTable::default();
        take(&mut locks, &policy, pattern, role, *task).expect("taken");
        let verdict = locks.check_modify(path, *access, "someone-else", &[], 1, Some(&policy));
        assert_eq!(matches!(verdict, Err(Refusal::Locked(_))), *refused, "{role} holding `{pattern}` ({task:?}), {access} of {path}");
        // Without a policy (a host that has none) every lock covers its whole pattern.
        assert!(locks.check_modify(path, *access, "someone-else", &[], 1, None).is_err(), "{pattern} {path}");
    }
}

#[test]
fn the_operators_lock_and_a_lock_from_before_roles_were_recorded_cover_their_whole_pattern() {
    let policy = roles();
    let mut table = LockTable::default();
    table.acquire(&request("docs/**", "OPS", Mode::Exclusive), 0).expect("operator");
    assert!(matches!(table.check_modify("docs/guide.md", Access::Write, "docs-1", &[], 1, Some(&policy)), Err(Refusal::Locked(_))));
    // A table written before locks recorded their holder reads as the operator's.
    let old = r#"{"next_fence": 2, "locks": [{"pattern": "**", "owner": "A", "session": "s", "mode": "exclusive",
        "acquired_at_ms": 0, "expires_at_ms": 100000, "fence": 1}]}"#;
    let old: LockTable = serde_json::from_str(old).expect("an old table reads");
    assert!(old.locks()[0].held_for.is_none());
    // A holder survives the table's round trip.
    let mut held = LockTable::default();
    take(&mut held, &policy, "**", "impl", Some("CHAIN-1/001-a")).expect("taken");
    let back: LockTable = serde_json::from_str(&serde_json::to_string(&held).expect("json")).expect("reads");
    assert_eq!(back, held);
    assert!(back.check_modify("docs/guide.md", Access::Write, "docs-1", &[], 1, Some(&policy)).is_ok());
}

#[test]
fn a_broad_lock_does_not_keep_another_role_from_locking_a_path_it_cannot_write() {
    let policy = roles();
    let mut table = LockTable::default();
    take(&mut table, &policy, "**", "impl", None).expect("impl");
    // The docs role may lock (and write) what `impl` may not write...
    take(&mut table, &policy, "docs/guide.md", "docs", None).expect("docs may lock its own file");
    take(&mut table, &policy, ".env", "docs", None).expect("and the protected file its rule names");
    // ... but not what both may write, nor a glob (two globs conflict whenever they may meet).
    let both = LockRequest { pattern: "lib/a.rs".to_owned(), ..request("lib/a.rs", "other", Mode::Exclusive) };
    let impl_holder = Holder::role("impl", None);
    let conflict = table.acquire_held(&both, Held { holder: Some(&impl_holder), policy: Some(&policy) }, 0);
    assert!(matches!(conflict, Err(LockError::Conflict(_))));
    assert!(matches!(take(&mut table, &policy, "docs/**", "docs", None), Err(LockError::Conflict(_))));
    // A renewal keeps its token only for the same holder.
    let first = take(&mut table, &policy, "docs/guide.md", "docs", None).expect("renewed");
    assert_eq!(first.fence, table.locks()[1].fence);
}

#[test]
fn a_holder_that_cannot_be_judged_covers_its_whole_pattern() {
    let policy = roles();
    let judged = |roles: &[&str]| Holder { roles: roles.iter().map(|role| (*role).to_owned()).collect(), task: None };
    // No roles, or one role of several unknown: fail closed.
    assert!(judged(&[]).may(Some(&policy), Access::Write, "docs/guide.md"));
    assert!(judged(&["impl", "renamed"]).may(Some(&policy), Access::Write, "docs/guide.md"));
    // Known roles are judged; no policy covers all.
    assert!(!judged(&["impl"]).may(Some(&policy), Access::Write, "docs/guide.md"));
    assert!(judged(&["impl"]).may(None, Access::Write, "docs/guide.md"));
}

#[test]
fn an_owner_may_hold_only_so_many_live_locks() {
    let mut table = LockTable::default();
    for index in 0..MAX_LOCKS_PER_OWNER {
        table.acquire(&request(&format!("src/{index}.rs"), "A", Mode::Exclusive), 0).expect("under the cap");
    }
    let over = table.acquire(&request("src/over.rs", "A", Mode::Exclusive), 0);
    let Err(error @ LockError::TooMany { cap: MAX_LOCKS_PER_OWNER, .. }) = over else { panic!("{over:?}") };
    assert!(error.to_string().contains("release some"), "{error}");
    // A renewal is not a new lock; another owner has its own count; expired locks do not count.
    table.acquire(&request("src/0.rs", "A", Mode::Exclusive), 1).expect("renewed");
    table.acquire(&request("lib/a.rs", "B", Mode::Exclusive), 1).expect("another owner");
    table
        .acquire(&request("src/over.rs", "A", Mode::Exclusive), u64::try_from(MINUTE.as_millis()).expect("ms") + 1)
        .expect("the others expired");
}
