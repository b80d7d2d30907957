//! A path swapped between a file and a symlink while tools run: the guard judges one thing and
//! the open must not reach another. A thread flips `flip.txt` between a regular file and a
//! symlink to a path the role may not read (or write) while calls run — or flips the directory
//! `box` on the way to a file with a symlink to a directory the role may not read or write —;
//! no call may ever read the secret or change the protected file.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use serde_json::json;
use toolcell_tests::{Fixture, governed_runtime};
use toolcell_types::ToolErrorKind;

/// Calls made at least; more are made until the path has flipped [`FLIPS`] times, since on a
/// loaded machine the flipping thread may get little time while the calls run.
const ITERATIONS: usize = 10_000;
/// Flips to see during the calls before a race counts as exercised.
const FLIPS: usize = 1_000;
/// Calls made at most while waiting for [`FLIPS`].
const MOST_ITERATIONS: usize = 20 * ITERATIONS;
const SECRET: &str = "RACE-CANARY-secret";
const PUBLIC: &str = "public content\n";
const GUIDE: &str = "# Guide (read-only for impl)\n";

/// Flip `flip.txt` between a regular file and a symlink to `target` (by atomic renames of
/// prepared entries) until `stop`.
fn flipper(fixture: &Fixture, target: &str, stop: &AtomicBool, flips: &AtomicUsize) {
    let root = fixture.root();
    while !stop.load(Ordering::Relaxed) {
        let _ = std::fs::write(root.join(".flip-file"), PUBLIC);
        let _ = std::fs::rename(root.join(".flip-file"), root.join("flip.txt"));
        let _ = std::os::unix::fs::symlink(target, root.join(".flip-link"));
        let _ = std::fs::rename(root.join(".flip-link"), root.join("flip.txt"));
        flips.fetch_add(2, Ordering::Relaxed);
    }
}

/// Swap the directory `box` with a symlink to the directory `target`, atomically
/// (`RENAME_EXCHANGE`), until `stop`: a directory on the way to `box/...` becomes a symlink and
/// back.
fn directory_flipper(fixture: &Fixture, target: &str, stop: &AtomicBool, flips: &AtomicUsize) {
    use rustix::fs::{CWD, RenameFlags, renameat_with};
    let root = fixture.root();
    std::os::unix::fs::symlink(target, root.join(".box-link")).expect("plant the symlink");
    while !stop.load(Ordering::Relaxed) {
        if renameat_with(CWD, root.join("box"), CWD, root.join(".box-link"), RenameFlags::EXCHANGE).is_ok() {
            flips.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// What flips during a race.
#[derive(Clone, Copy)]
enum Flip {
    /// `flip.txt`, between a file and a symlink to this file.
    File(&'static str),
    /// The directory `box`, with a symlink to this directory.
    Directory(&'static str),
}

fn race(flip: Flip, mut call: impl FnMut(&Fixture) -> (bool, String)) -> (Fixture, usize, usize) {
    let fixture = Fixture::new();
    fixture.write("secrets/key.txt", SECRET);
    fixture.write("docs/guide.md", GUIDE);
    fixture.write("flip.txt", PUBLIC);
    fixture.write("box/key.txt", PUBLIC);
    fixture.write("box/guide.md", PUBLIC);
    let stop = AtomicBool::new(false);
    let flips = AtomicUsize::new(0);
    let mut succeeded = 0;
    /// Stops the flipper however the loop ends (a failed assertion included).
    struct StopOnDrop<'a>(&'a AtomicBool);
    impl Drop for StopOnDrop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    std::thread::scope(|scope| {
        let flipping = scope.spawn(|| match flip {
            Flip::File(target) => flipper(&fixture, target, &stop, &flips),
            Flip::Directory(target) => directory_flipper(&fixture, target, &stop, &flips),
        });
        let _stop = StopOnDrop(&stop);
        let mut calls = 0;
        while calls < ITERATIONS || (flips.load(Ordering::Relaxed) <= FLIPS && calls < MOST_ITERATIONS) {
            let (ok, text) = call(&fixture);
            assert!(!text.contains(SECRET), "the secret leaked: {text}");
            fixture.assert_no_host_path(&text);
            succeeded += usize::from(ok);
            calls += 1;
        }
        drop(_stop);
        flipping.join().expect("the flipper");
    });
    (fixture, succeeded, flips.into_inner())
}

/// Read `path` while `flip` flips; it holds [`PUBLIC`] unless flipped.
fn reads_race(flip: Flip, path: &str) {
    let mut refused = 0;
    let (fixture, succeeded, flips) = race(flip, |fixture| {
        let outcome = fixture.call_on(governed_runtime(), "impl", "fs_probe", &json!({"ops": [{"op": "read", "path": path}]}), None);
        match outcome.result {
            Ok(output) => {
                let read = output.structured.expect("structured")[0].clone();
                if read["ok"] == true {
                    assert_eq!(read["value"], PUBLIC, "read something other than the public file");
                    (true, output.text)
                } else {
                    (false, output.text)
                }
            }
            Err(error) => {
                assert!(matches!(error.kind, ToolErrorKind::Denied | ToolErrorKind::Conflict), "{error}");
                refused += 1;
                (false, error.message)
            }
        }
    });
    assert!(flips > FLIPS, "the path was hardly flipped ({flips})");
    eprintln!("{succeeded} reads succeeded and {refused} were refused while the path flipped {flips} times");
    assert!(succeeded > 0 && refused > 0, "{succeeded} reads, {refused} refusals: the race was not exercised");
    assert_eq!(fixture.read_text("secrets/key.txt"), SECRET);
}

#[test]
fn reads_never_reach_a_denied_file_through_a_swapped_symlink() {
    reads_race(Flip::File("secrets/key.txt"), "flip.txt");
}

#[test]
fn reads_never_reach_a_denied_file_through_a_directory_swapped_for_a_symlink() {
    reads_race(Flip::Directory("secrets"), "box/key.txt");
}

/// Write `path` while `flip` flips: alternately a whole rewrite (O_TRUNC) and an append (no
/// truncation).
fn writes_race(flip: Flip, path: &str) {
    let mut iteration = 0;
    // Writes stop once a call's rollback lost every try against the flipper (the workspace is
    // left to recovery): that too is the race, exercised.
    let mut stopped = 0;
    let (fixture, succeeded, flips) = race(flip, |fixture| {
        iteration += 1;
        let op = if iteration % 2 == 0 { "write" } else { "append" };
        let outcome = fixture.call_on(
            governed_runtime(),
            "impl",
            "fs_probe",
            &json!({"ops": [
                {"op": op, "path": path, "content": "written by the tool\n"},
            ]}),
            None,
        );
        match outcome.result {
            Ok(output) => {
                (output.structured.expect("structured").as_array().is_some_and(|ops| ops.iter().all(|op| op["ok"] == true)), output.text)
            }
            Err(error) => {
                stopped += usize::from(error.message.contains("writes to this workspace are stopped"));
                (false, error.message)
            }
        }
    });
    assert!(flips > FLIPS, "the path was hardly flipped ({flips})");
    eprintln!("{succeeded} writes succeeded and {stopped} were refused as stopped while the path flipped {flips} times");
    assert!(succeeded > 0 || stopped > 0, "no write ever succeeded, and none was stopped: the race was not exercised");
    assert_eq!(fixture.read_text("docs/guide.md"), GUIDE, "the read-only file was modified");
    assert_eq!(fixture.read_text("secrets/key.txt"), SECRET);
    fixture.assert_outside_untouched();
}

#[test]
fn writes_never_reach_a_protected_file_through_a_swapped_symlink() {
    writes_race(Flip::File("docs/guide.md"), "flip.txt");
}

#[test]
fn writes_never_reach_a_protected_file_through_a_directory_swapped_for_a_symlink() {
    writes_race(Flip::Directory("docs"), "box/guide.md");
}

/// A call that rewrites `a/b/x.txt` and then fails, while another call renames `a/b` back and
/// forth: the failing call's rollback must find its file where it left it. Either the rename
/// waits for the call to end (refused as a conflict), or the write is refused; the rollback
/// always completes in the call, and nothing is left half done.
#[test]
fn a_rename_racing_a_failing_call_never_leaves_its_rollback_half_done() {
    let runtime = toolcell_tests::runtime_with_policy(toolcell_tests::TEST_POLICY, None);
    let fixture = Fixture::new();
    fixture.write("a/b/x.txt", "original\n");
    let stop = AtomicBool::new(false);
    let (renamed, refused_renames) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let mut failed = 0;
    std::thread::scope(|scope| {
        let renaming = scope.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                for (from, to) in [("a/b", "b"), ("b", "a/b")] {
                    let outcome =
                        fixture.call_on(&runtime, "impl", "fs_probe", &json!({"ops": [{"op": "rename", "path": from, "to": to}]}), None);
                    match outcome.result {
                        Ok(output) if output.structured.as_ref().is_some_and(|ops| ops[0]["ok"] == true) => {
                            renamed.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(error) if error.kind == ToolErrorKind::Conflict => {
                            refused_renames.fetch_add(1, Ordering::Relaxed);
                        }
                        _ => {}
                    }
                }
            }
        });
        /// Stops the renaming thread however the loop ends (a failed assertion included).
        struct StopOnDrop<'a>(&'a AtomicBool);
        impl Drop for StopOnDrop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let _stop = StopOnDrop(&stop);
        let started = std::time::Instant::now();
        for round in 0..300 {
            // Wherever the directory is now.
            let path = if fixture.root().join("a/b").exists() { "a/b/x.txt" } else { "b/x.txt" };
            let outcome = fixture.call_on(
                &runtime,
                "impl",
                "fs_probe",
                &json!({"ops": [{"op": "write", "path": path, "content": "half done\n"}, {"op": "sleep", "content": "3"}, {"op": "fail"}]}),
                None,
            );
            let error = outcome.result.expect_err("the call fails");
            assert!(!error.message.contains("could not all be rolled back"), "round {round}: {error}");
            failed += 1;
            if round >= 50 && renamed.load(Ordering::Relaxed) >= 20 && started.elapsed() > std::time::Duration::from_secs(2) {
                break;
            }
        }
        drop(_stop);
        renaming.join().expect("the renaming thread");
    });
    let (renamed, refused) = (renamed.into_inner(), refused_renames.into_inner());
    eprintln!("{failed} failing calls rolled back while the directory was renamed {renamed} times ({refused} renames refused)");
    assert!(renamed > 0, "the race was not exercised");
    // Nothing half done: the file is whole wherever the directory is, and no temporary file or
    // stopped workspace is left.
    let x = if fixture.root().join("a/b").exists() { "a/b/x.txt" } else { "b/x.txt" };
    assert_eq!(fixture.read_text(x), "original\n");
    let names: Vec<String> = fixture.snapshot().into_iter().map(|(name, _)| name).collect();
    assert!(!names.iter().any(|name| name.contains(".toolcell-")), "{names:?}");
    assert_eq!(runtime.writes_stopped(&fixture.workspace), None);
}
