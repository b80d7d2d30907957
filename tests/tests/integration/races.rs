//! A path swapped between a file and a symlink while tools run: the guard judges one thing and
//! the open must not reach another. A thread flips `flip.txt` between a regular file and a
//! symlink to a path the role may not read (or write) while calls run; no call may ever read
//! the secret or change the protected file.

use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::json;
use toolcell_tests::{Fixture, governed_runtime};
use toolcell_types::ToolErrorKind;

const ITERATIONS: usize = 10_000;
const SECRET: &str = "RACE-CANARY-secret";
const PUBLIC: &str = "public content\n";
const GUIDE: &str = "# Guide (read-only for impl)\n";

/// Flip `flip.txt` between a regular file and a symlink to `target` (by atomic renames of
/// prepared entries) until `stop`.
fn flipper(fixture: &Fixture, target: &str, stop: &AtomicBool) -> usize {
    let root = fixture.root();
    let mut flips = 0;
    while !stop.load(Ordering::Relaxed) {
        let _ = std::fs::write(root.join(".flip-file"), PUBLIC);
        let _ = std::fs::rename(root.join(".flip-file"), root.join("flip.txt"));
        let _ = std::os::unix::fs::symlink(target, root.join(".flip-link"));
        let _ = std::fs::rename(root.join(".flip-link"), root.join("flip.txt"));
        flips += 2;
    }
    flips
}

fn race(target: &str, mut call: impl FnMut(&Fixture) -> (bool, String)) -> (Fixture, usize, usize) {
    let fixture = Fixture::new();
    fixture.write("secrets/key.txt", SECRET);
    fixture.write("docs/guide.md", GUIDE);
    fixture.write("flip.txt", PUBLIC);
    let stop = AtomicBool::new(false);
    let mut succeeded = 0;
    /// Stops the flipper however the loop ends (a failed assertion included).
    struct StopOnDrop<'a>(&'a AtomicBool);
    impl Drop for StopOnDrop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    let flips = std::thread::scope(|scope| {
        let flipping = scope.spawn(|| flipper(&fixture, target, &stop));
        let _stop = StopOnDrop(&stop);
        for _ in 0..ITERATIONS {
            let (ok, text) = call(&fixture);
            assert!(!text.contains(SECRET), "the secret leaked: {text}");
            fixture.assert_no_host_path(&text);
            succeeded += usize::from(ok);
        }
        drop(_stop);
        flipping.join().expect("the flipper")
    });
    (fixture, succeeded, flips)
}

#[test]
fn reads_never_reach_a_denied_file_through_a_swapped_symlink() {
    let mut refused = 0;
    let (fixture, succeeded, flips) = race("secrets/key.txt", |fixture| {
        let outcome = fixture.call_on(governed_runtime(), "impl", "fs_probe", &json!({"ops": [{"op": "read", "path": "flip.txt"}]}), None);
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
    assert!(flips > 1000, "the path was hardly flipped ({flips})");
    eprintln!("{succeeded} reads succeeded and {refused} were refused while the path flipped {flips} times");
    assert!(succeeded > 0 && refused > 0, "{succeeded} reads, {refused} refusals: the race was not exercised");
    assert_eq!(fixture.read_text("secrets/key.txt"), SECRET);
}

#[test]
fn writes_never_reach_a_protected_file_through_a_swapped_symlink() {
    // Alternately a whole rewrite (O_TRUNC) and an append (no truncation).
    let mut iteration = 0;
    let (fixture, succeeded, flips) = race("docs/guide.md", |fixture| {
        iteration += 1;
        let op = if iteration % 2 == 0 { "write" } else { "append" };
        let outcome = fixture.call_on(governed_runtime(), "impl", "fs_probe", &json!({"ops": [
            {"op": op, "path": "flip.txt", "content": "written by the tool\n"},
        ]}), None);
        match outcome.result {
            Ok(output) => (output.structured.expect("structured").as_array().is_some_and(|ops| ops.iter().all(|op| op["ok"] == true)), output.text),
            Err(error) => (false, error.message),
        }
    });
    assert!(flips > 1000, "the path was hardly flipped ({flips})");
    eprintln!("{succeeded} of {ITERATIONS} writes succeeded while the path flipped {flips} times");
    assert!(succeeded > 0, "no write ever succeeded: the race was not exercised");
    assert_eq!(fixture.read_text("docs/guide.md"), GUIDE, "the read-only file was modified");
    assert_eq!(fixture.read_text("secrets/key.txt"), SECRET);
    fixture.assert_outside_untouched();
}
