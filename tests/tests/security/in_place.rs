//! A write into an existing file (opened without truncating it, written at an offset or
//! appended to) is as invisible to every other call as a whole rewrite: it goes to a copy of
//! the file with no name, put in place when the call commits. Another call reads the committed
//! content meanwhile; a call that fails leaves the file as it was, whatever another program
//! wrote there meanwhile; the call itself sees what it wrote.

use std::os::unix::fs::MetadataExt as _;
use std::path::Path;

use serde_json::{Value, json};

use toolcell_runtime::CallOutcome;

use super::boundary::{results, shown};
use super::fourth_pass::{TWO_ROLES, call_as};
use super::hardening::{Governed, governed, records};

const ORIGINAL: &str = "ORIGINAL content\n";

/// `admin`'s `fs_probe` writes `AAAA` at the start of `src/x.txt` in place, reads the file
/// again, stats it and lists its directory (none of which puts it in place), holds its call
/// open for `hold_ms`,
/// then fails it or lets it commit.
fn write_in_place_and_hold(hold_ms: u64, fail: bool) -> Value {
    let mut ops = vec![
        json!({"op": "stream_script", "content": "open:src/x.txt,w;ws:0;w:AAAA"}),
        json!({"op": "read", "path": "src/x.txt"}),
        json!({"op": "stat", "path": "src/x.txt"}),
        json!({"op": "list", "path": "src"}),
        json!({"op": "sleep", "content": hold_ms.to_string()}),
    ];
    if fail {
        ops.push(json!({"op": "fail"}));
    }
    json!({ "ops": ops })
}

fn text(root: &Path, relative: &str) -> String {
    std::fs::read_to_string(root.join(relative)).expect("read")
}

#[test]
fn a_write_in_place_is_invisible_to_other_calls_until_its_call_commits() {
    for fail in [true, false] {
        let Governed { runtime, workspace, root, state, .. } = &governed(TWO_ROLES, &[("src/x.txt", ORIGINAL)]);
        std::thread::scope(|scope| {
            let writer = scope.spawn(|| call_as(runtime, workspace, "admin", "fs_probe", &write_in_place_and_hold(1500, fail)));
            let mut looked = 0;
            while !writer.is_finished() {
                // Another session's read, and the file on the disk, show the committed content.
                let read = call_as(runtime, workspace, "impl", "read_file", &json!({"path": "src/x.txt"}));
                let seen = shown(&read);
                // A read that ended after the call committed (its file on the disk changed:
                // the call is no longer in flight, though its thread may not have returned)
                // may show the committed content.
                if writer.is_finished() || (!fail && text(root, "src/x.txt") != ORIGINAL) {
                    break;
                }
                assert!(!seen.contains("AAAA"), "another call read an uncommitted write in place (fail={fail}): {seen}");
                assert!(seen.contains("ORIGINAL"), "{seen}");
                assert_eq!(text(root, "src/x.txt"), ORIGINAL, "the write in place reached the file before its call ended");
                looked += 1;
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            assert!(looked > 0, "the writing call ended before anything looked");
            let outcome = writer.join().expect("the writing call");
            assert_eq!(outcome.result.is_err(), fail, "{:?}", outcome.result);
            if !fail {
                assert_eq!(results(&outcome)[1]["value"], "AAAAINAL content\n", "the call reads what it wrote");
            }
        });
        let expected = if fail { ORIGINAL.to_owned() } else { ORIGINAL.replacen("ORIG", "AAAA", 1) };
        assert_eq!(text(root, "src/x.txt"), expected, "fail={fail}");
        records(state);
    }
}

#[test]
fn a_failed_call_leaves_what_another_program_wrote_meanwhile_to_a_file_it_wrote_in_place() {
    // Another program (or a toolcell process with another state directory) writes the file
    // while the call is in flight: in place, and by renaming a new file over it.
    for by_rename in [false, true] {
        let Governed { runtime, workspace, root, state, .. } = &governed(TWO_ROLES, &[("src/x.txt", ORIGINAL)]);
        call_as(runtime, workspace, "admin", "read_file", &json!({"path": "src/x.txt"})).result.expect("read");
        std::thread::scope(|scope| {
            let writer = scope.spawn(|| call_as(runtime, workspace, "admin", "fs_probe", &write_in_place_and_hold(800, true)));
            std::thread::sleep(std::time::Duration::from_millis(300));
            assert!(!writer.is_finished(), "the call ended before the other program wrote");
            if by_rename {
                std::fs::write(root.join("src/.other"), "the other program's\n").expect("write");
                std::fs::rename(root.join("src/.other"), root.join("src/x.txt")).expect("rename");
            } else {
                std::fs::write(root.join("src/x.txt"), "the other program's\n").expect("write");
            }
            let outcome = writer.join().expect("the writing call");
            assert!(outcome.result.is_err(), "{:?}", outcome.result);
        });
        assert_eq!(text(root, "src/x.txt"), "the other program's\n", "the failed call's rollback wrote over it (by_rename={by_rename})");
        records(state);
    }
}

#[test]
fn a_call_sees_its_own_write_in_place_and_its_session_can_undo_it() {
    let Governed { runtime, workspace, root, state, .. } = &governed(TWO_ROLES, &[("src/x.txt", ORIGINAL)]);
    call_as(runtime, workspace, "admin", "read_file", &json!({"path": "src/x.txt"})).result.expect("read");
    let ops = json!({"ops": [
        // Through `std::fs`: a byte written at offset 2, then the file read whole and stat'd.
        {"op": "write_at", "path": "src/x.txt", "to": "2"},
        {"op": "read", "path": "src/x.txt"},
        {"op": "stat", "path": "src/x.txt"},
        // Raw: opened again for reading and writing, written past its end, stat'd by path.
        {"op": "stream_script", "content": "open:src/x.txt,rw;ws:17;w:++;rs:0;r:100;stat:src/x.txt"},
    ]});
    let outcome = call_as(runtime, workspace, "admin", "fs_probe", &ops);
    let results = results(&outcome);
    assert_eq!(results.len(), 4, "{}", shown(&outcome));
    assert_eq!(results[1]["value"], "ORxGINAL content\n", "{}", shown(&outcome));
    assert_eq!(results[2]["value"]["len"], 17, "{}", shown(&outcome));
    let script = results[3]["value"].to_string();
    assert!(script.contains("ORxGINAL content\\n++") && script.contains("19"), "{script}");
    assert_eq!(text(root, "src/x.txt"), "ORxGINAL content\n++");
    call_as(runtime, workspace, "admin", "undo_edit", &json!({"path": "src/x.txt"})).result.expect("undo");
    assert_eq!(text(root, "src/x.txt"), ORIGINAL);
    records(state);
}

#[test]
fn an_open_for_writing_that_writes_nothing_leaves_the_file_as_it_is() {
    let Governed { runtime, workspace, root, state, .. } = &governed(TWO_ROLES, &[("src/x.txt", ORIGINAL)]);
    let before = std::fs::metadata(root.join("src/x.txt")).expect("stat");
    let ops = json!({"ops": [{"op": "stream_script", "content": "open:src/x.txt,rw;rs:0;r:100"}]});
    let outcome = call_as(runtime, workspace, "admin", "fs_probe", &ops);
    assert!(shown(&outcome).contains("ORIGINAL content"), "{}", shown(&outcome));
    let after = std::fs::metadata(root.join("src/x.txt")).expect("stat");
    assert_eq!((after.ino(), after.mtime(), after.mtime_nsec()), (before.ino(), before.mtime(), before.mtime_nsec()));
    assert_eq!(text(root, "src/x.txt"), ORIGINAL);
    records(state);
}

#[test]
fn a_sparse_file_written_in_place_keeps_its_holes() {
    let Governed { runtime, workspace, root, state, .. } = &governed(TWO_ROLES, &[]);
    let file = std::fs::File::create(root.join("sparse.bin")).expect("create");
    file.set_len(48 << 20).expect("a 48 MiB hole");
    drop(file);
    let ops = json!({"ops": [{"op": "write_at", "path": "sparse.bin", "to": "1000"}]});
    call_as(runtime, workspace, "admin", "fs_probe", &ops).result.expect("written in place");
    let metadata = std::fs::metadata(root.join("sparse.bin")).expect("stat");
    assert_eq!(metadata.len(), 48 << 20);
    assert!(metadata.blocks() * 512 < 1 << 20, "the copy filled the holes: {} blocks", metadata.blocks());
    records(state);
}

/// `admin` holds a write of `src/x.txt` open for `hold_ms` (in place, or rewritten whole) and
/// commits; `meanwhile` runs while it is in flight. Returns the writing call's outcome.
fn while_writing(governed: &Governed, whole: bool, hold_ms: u64, meanwhile: impl FnOnce()) -> CallOutcome {
    let script = if whole { "open:src/x.txt,tw;ws:0;w:AAAA" } else { "open:src/x.txt,w;ws:0;w:AAAA" };
    let ops = json!({"ops": [{"op": "stream_script", "content": script}, {"op": "sleep", "content": hold_ms.to_string()}]});
    std::thread::scope(|scope| {
        let writer = scope.spawn(|| call_as(&governed.runtime, &governed.workspace, "admin", "fs_probe", &ops));
        std::thread::sleep(std::time::Duration::from_millis(hold_ms / 3));
        assert!(!writer.is_finished(), "the call ended before anything else happened");
        meanwhile();
        writer.join().expect("the writing call")
    })
}

#[test]
fn a_write_lands_only_over_the_version_it_began_with() {
    // Another program appends, removes the file, or puts a directory in its place while a call
    // writes it: the call's commit is refused as a conflict, and what the other program did
    // stays. Nothing of the call is left under a reserved name.
    type Change = fn(&Path);
    let changes: [(&str, Change); 3] = [
        ("appended", |root| {
            use std::io::Write as _;
            let mut file = std::fs::OpenOptions::new().append(true).open(root.join("src/x.txt")).expect("open");
            file.write_all(b"theirs\n").expect("append");
        }),
        ("removed", |root| std::fs::remove_file(root.join("src/x.txt")).expect("remove")),
        ("a directory", |root| {
            std::fs::remove_file(root.join("src/x.txt")).expect("remove");
            std::fs::create_dir(root.join("src/x.txt")).expect("mkdir");
            std::fs::write(root.join("src/x.txt/inside"), "in").expect("fill");
        }),
    ];
    for whole in [false, true] {
        for (what, change) in changes {
            let governed = governed(TWO_ROLES, &[("src/x.txt", ORIGINAL)]);
            let root = governed.root.clone();
            let outcome = while_writing(&governed, whole, 900, || change(&root));
            let error = outcome.result.expect_err("the commit over another version is refused");
            assert_eq!(error.kind, toolcell_types::ToolErrorKind::Conflict, "{what}, whole={whole}: {}", error.message);
            assert!(error.message.contains("changed by another program"), "{what}: {}", error.message);
            match what {
                "appended" => assert_eq!(text(&governed.root, "src/x.txt"), format!("{ORIGINAL}theirs\n")),
                "removed" => assert!(!governed.root.join("src/x.txt").exists()),
                _ => assert_eq!(text(&governed.root, "src/x.txt/inside"), "in"),
            }
            let left = reserved_names(&root);
            assert!(left.is_empty(), "{what}: a reserved name was left: {left:?}");
            let records = records(&governed.state);
            assert!(records.iter().any(|record| record.rule.as_deref() == Some("changed-meanwhile")), "{what}: not audited");
        }
    }
}

#[test]
fn a_lock_taken_while_a_call_writes_stops_its_commit() {
    let governed = governed(TWO_ROLES, &[("src/x.txt", ORIGINAL)]);
    let outcome = while_writing(&governed, false, 900, || {
        let locked = call_as(&governed.runtime, &governed.workspace, "impl", "lock_files", &json!({"paths": ["src/x.txt"]}));
        assert!(locked.result.is_ok(), "{}", shown(&locked));
    });
    let error = outcome.result.expect_err("the commit under another's lock is refused");
    assert_eq!(error.kind, toolcell_types::ToolErrorKind::Conflict, "{}", error.message);
    assert!(error.message.contains("locked"), "{}", error.message);
    assert_eq!(text(&governed.root, "src/x.txt"), ORIGINAL);
}

#[test]
fn a_write_keeps_the_files_owner_and_never_its_setuid_bits() {
    use std::os::unix::fs::PermissionsExt as _;
    let governed = governed(TWO_ROLES, &[("run.sh", "#!/bin/sh\necho hi\n"), ("whole.sh", "#!/bin/sh\n")]);
    for name in ["run.sh", "whole.sh"] {
        let path = governed.root.join(name);
        // Another user's file where the host may give it away (as root), the host's own
        // otherwise: either way, the owner it has before.
        let _ = std::os::unix::fs::chown(&path, Some(65534), Some(65534));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o6755)).expect("chmod");
    }
    let owners = |name: &str| {
        let metadata = std::fs::metadata(governed.root.join(name)).expect("stat");
        (metadata.uid(), metadata.gid())
    };
    let before = (owners("run.sh"), owners("whole.sh"));
    let ops = json!({"ops": [
        {"op": "append", "path": "run.sh", "content": "id\n"},
        {"op": "write", "path": "whole.sh", "content": "#!/bin/sh\nid\n"},
    ]});
    let outcome = call_as(&governed.runtime, &governed.workspace, "admin", "fs_probe", &ops);
    assert!(outcome.result.is_ok(), "{}", shown(&outcome));
    assert_eq!(text(&governed.root, "run.sh"), "#!/bin/sh\necho hi\nid\n");
    assert_eq!((owners("run.sh"), owners("whole.sh")), before, "the owner changed");
    for name in ["run.sh", "whole.sh"] {
        let mode = std::fs::metadata(governed.root.join(name)).expect("stat").permissions().mode() & 0o7777;
        assert_eq!(mode, 0o755, "{name}: a tool's write left a setuid or setgid file");
    }
}

/// Every name under `directory` the host reserves for calls in flight.
fn reserved_names(directory: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(directory).expect("list").filter_map(Result::ok) {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(".toolcell-") {
            found.push(name);
        } else if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
            found.extend(reserved_names(&entry.path()));
        }
    }
    found
}

#[test]
fn a_failed_call_leaves_a_file_it_put_in_place_that_another_program_changed_since() {
    // The call's write lands mid-call (a readlink of its path puts it in place), another
    // program then appends to it or renames its own file over it, and the call fails: the
    // rollback leaves what the other program made (it saw the call's content), and says so.
    for by_rename in [false, true] {
        let governed = governed(TWO_ROLES, &[("src/x.txt", ORIGINAL)]);
        let ops = json!({"ops": [
            {"op": "append", "path": "src/x.txt", "content": "mine\n"},
            {"op": "read_link", "path": "src/x.txt"},
            {"op": "sleep", "content": "900"},
            {"op": "fail"},
        ]});
        let root = governed.root.clone();
        let outcome = std::thread::scope(|scope| {
            let writer = scope.spawn(|| call_as(&governed.runtime, &governed.workspace, "admin", "fs_probe", &ops));
            let started = std::time::Instant::now();
            while text(&root, "src/x.txt") == ORIGINAL {
                assert!(started.elapsed() < std::time::Duration::from_secs(20), "the call never put its write in place");
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            if by_rename {
                std::fs::write(root.join("src/theirs"), "theirs\n").expect("write");
                std::fs::rename(root.join("src/theirs"), root.join("src/x.txt")).expect("rename over");
            } else {
                use std::io::Write as _;
                let mut file = std::fs::OpenOptions::new().append(true).open(root.join("src/x.txt")).expect("open");
                file.write_all(b"theirs\n").expect("append");
            }
            writer.join().expect("the writing call")
        });
        let error = outcome.result.expect_err("the call failed");
        assert!(error.message.contains("left as that session made them"), "by_rename={by_rename}: {}", error.message);
        let expected = if by_rename { "theirs\n".to_owned() } else { format!("{ORIGINAL}mine\ntheirs\n") };
        assert_eq!(text(&root, "src/x.txt"), expected, "by_rename={by_rename}: the rollback wrote over another program's change");
    }
}

#[test]
fn a_write_keeps_the_files_extended_attributes_and_acl_but_not_its_capabilities() {
    use rustix::fs::XattrFlags;
    let governed = governed(TWO_ROLES, &[("in_place.txt", "secret\n"), ("whole.txt", "secret\n")]);
    // An ACL that keeps user 65534 out: user::rw-, user:65534:---, group::r--, mask::r--,
    // other::r-- (the kernel's binary form, version 2).
    let entry =
        |tag: u16, permissions: u16, id: u32| [tag.to_le_bytes().as_slice(), &permissions.to_le_bytes(), &id.to_le_bytes()].concat();
    let acl = [
        2u32.to_le_bytes().to_vec(),
        entry(0x01, 6, u32::MAX),
        entry(0x02, 0, 65534),
        entry(0x04, 4, u32::MAX),
        entry(0x10, 4, u32::MAX),
        entry(0x20, 4, u32::MAX),
    ]
    .concat();
    // File capabilities, version 2: CAP_NET_BIND_SERVICE permitted.
    let capability = [0x0200_0000u32.to_le_bytes(), 0x400u32.to_le_bytes(), [0; 4], [0; 4], [0; 4]].concat();
    for name in ["in_place.txt", "whole.txt"] {
        let path = governed.root.join(name);
        rustix::fs::setxattr(&path, "system.posix_acl_access", &acl, XattrFlags::empty()).expect("set the ACL");
        rustix::fs::setxattr(&path, "user.tag", b"kept", XattrFlags::empty()).expect("set a user attribute");
        rustix::fs::setxattr(&path, "security.capability", &capability, XattrFlags::empty()).expect("set file capabilities (as root)");
    }
    let ops = json!({"ops": [
        {"op": "append", "path": "in_place.txt", "content": "more\n"},
        {"op": "write", "path": "whole.txt", "content": "new secret\n"},
    ]});
    let outcome = call_as(&governed.runtime, &governed.workspace, "admin", "fs_probe", &ops);
    assert!(outcome.result.is_ok(), "{}", shown(&outcome));
    assert_eq!(text(&governed.root, "in_place.txt"), "secret\nmore\n");
    for name in ["in_place.txt", "whole.txt"] {
        let path = governed.root.join(name);
        let mut value = vec![0u8; 4096];
        let length = rustix::fs::getxattr(&path, "system.posix_acl_access", &mut value[..]).expect("the ACL is kept");
        assert_eq!(&value[..length], &acl[..], "{name}: the ACL changed");
        let length = rustix::fs::getxattr(&path, "user.tag", &mut value[..]).expect("the user attribute is kept");
        assert_eq!(&value[..length], b"kept");
        let capabilities = rustix::fs::getxattr(&path, "security.capability", &mut value[..]);
        assert_eq!(capabilities, Err(rustix::io::Errno::NODATA), "{name}: a tool's write kept file capabilities");
    }
}

#[test]
fn a_call_cannot_pass_its_own_write_off_as_another_programs_by_linking_its_file() {
    // The call's write lands mid-call (a readlink), the call gives the landed file a second name
    // over another file (a hard link, then a rename), then writes through its old descriptor:
    // the write is refused (the file has two names), the call fails, and everything is put
    // back, the file it renamed over included.
    for fail in [true, false] {
        let governed = governed(TWO_ROLES, &[("a.txt", "orig-a\n"), ("b.txt", "orig-b\n")]);
        let script = "open:a.txt,w;pw:0,HELLO;rl:a.txt;link:a.txt>n.txt;rename:n.txt>b.txt;pw:0,EVIL";
        let mut ops = vec![json!({"op": "stream_script", "content": script})];
        if fail {
            ops.push(json!({"op": "fail"}));
        }
        let outcome = call_as(&governed.runtime, &governed.workspace, "admin", "fs_probe", &json!({ "ops": ops }));
        let error = outcome.result.expect_err("the write through two names is refused");
        assert!(outcome.denials.iter().any(|denial| denial.event.rule == "hard-link"), "fail={fail}: {}", error.message);
        assert_eq!(text(&governed.root, "a.txt"), "orig-a\n", "fail={fail}");
        assert_eq!(text(&governed.root, "b.txt"), "orig-b\n", "fail={fail}: the call's own write stayed");
        assert!(!governed.root.join("n.txt").exists());
    }
}

#[test]
fn a_listing_shows_the_call_the_files_it_is_creating_and_puts_nothing_in_place() {
    let governed = governed(TWO_ROLES, &[("src/x.txt", ORIGINAL)]);
    let ops = json!({"ops": [
        {"op": "write", "path": "src/new.txt", "content": "in flight\n"},
        {"op": "append", "path": "src/x.txt", "content": "in flight\n"},
        {"op": "list", "path": "src"},
        {"op": "sleep", "content": "900"},
        {"op": "fail"},
    ]});
    let root = governed.root.clone();
    std::thread::scope(|scope| {
        let writer = scope.spawn(|| call_as(&governed.runtime, &governed.workspace, "admin", "fs_probe", &ops));
        std::thread::sleep(std::time::Duration::from_millis(400));
        assert!(!writer.is_finished(), "the call ended before anything looked");
        // Another session lists and reads the committed state only.
        let listed = call_as(&governed.runtime, &governed.workspace, "impl", "list_files", &json!({"path": "src"}));
        assert!(!shown(&listed).contains("new.txt"), "another session listed a file in flight: {}", shown(&listed));
        let read = call_as(&governed.runtime, &governed.workspace, "impl", "read_file", &json!({"path": "src/x.txt"}));
        assert!(!shown(&read).contains("in flight"), "{}", shown(&read));
        assert!(!root.join("src/new.txt").exists());
        assert_eq!(text(&root, "src/x.txt"), ORIGINAL);
        let outcome = writer.join().expect("the writing call");
        assert!(outcome.result.is_err());
    });
    assert!(!root.join("src/new.txt").exists());
    assert_eq!(text(&root, "src/x.txt"), ORIGINAL);
    // Committed, the call's own listing named its new file.
    let ops = json!({"ops": [
        {"op": "write", "path": "src/new.txt", "content": "new\n"},
        {"op": "list", "path": "src"},
    ]});
    let outcome = call_as(&governed.runtime, &governed.workspace, "admin", "fs_probe", &ops);
    assert_eq!(results(&outcome)[1]["value"], json!(["new.txt", "x.txt"]), "{}", shown(&outcome));
}
