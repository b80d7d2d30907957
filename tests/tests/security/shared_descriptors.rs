//! The workspace's descriptors, shared by its calls, and paths resolved in one step, attacked
//! from outside: a hostile component (`fs_probe`), another role, a concurrent call, a later
//! call.

use serde_json::json;

use super::attack_fourth::probe_as;
use super::boundary::{results, shown};
use super::fourth_pass::TWO_ROLES as POLICY;
use super::hardening::{Governed, governed};

/// One call does everything it can to the shared preopen (asks for it hundreds of times and
/// holds it, opens streams on it, reads it, touches it, drops it) while another role's call
/// uses the same workspace; neither that call nor a later one may see any of it: the preopen
/// still lists the workspace, reads and writes through it still work.
#[test]
fn one_call_cannot_spoil_the_shared_preopen_for_another() {
    let Governed { runtime, workspace, root, .. } = &governed(POLICY, &[("src/a.txt", "a\n"), ("docs/d.txt", "d\n")]);
    let hostile = json!([
        {"op": "raw_preopens", "content": "500"},
        {"op": "stream_script", "content": "ws_root:0;w:x;as;rs_root:0;r:5;br:5;cw;fl;dropout;dropin;dropfd"},
        {"op": "raw_touch", "path": "."},
        {"op": "raw_list_preopen", "path": "."},
        {"op": "list_held", "content": "."},
        {"op": "sleep", "content": "400"},
    ]);
    let other = json!([
        {"op": "sleep", "content": "100"},
        {"op": "raw_list_preopen", "path": "."},
        {"op": "raw_read", "path": "src/a.txt"},
        {"op": "raw_list_preopen", "path": "."},
        {"op": "raw_write", "path": "src/b.txt", "content": "b"},
    ]);
    let (first, second) = std::thread::scope(|scope| {
        let first = scope.spawn(|| probe_as(runtime, workspace, "impl", &hostile));
        let second = scope.spawn(|| probe_as(runtime, workspace, "admin", &other));
        (first.join().expect("hostile call"), second.join().expect("other call"))
    });
    let second = results(&second);
    // `sleep` reports nothing.
    assert_eq!(second.len(), 4, "{}", json!(second));
    assert_eq!(second[0]["value"], json!(["docs", "src"]), "listing during the hostile call: {}", json!(second));
    assert_eq!(second[1]["value"], json!("a\n"), "{}", json!(second));
    assert_eq!(second[2]["value"], json!(["docs", "src"]), "{}", json!(second));
    assert_eq!(second[3]["ok"], true, "{}", json!(second));
    eprintln!("hostile call: {}", shown(&first));
    // A later call: the preopen, and the guard's directory, still work.
    let later = results(&probe_as(
        runtime,
        workspace,
        "impl",
        &json!([
            {"op": "raw_list_preopen", "path": "."},
            {"op": "raw_read", "path": "src/b.txt"},
            {"op": "raw_write", "path": "src/c.txt", "content": "c"},
            {"op": "list", "path": "src"},
        ]),
    ));
    assert_eq!(later[0]["value"], json!(["docs", "src"]), "{}", json!(later));
    assert_eq!(later[1]["value"], json!("b"), "{}", json!(later));
    assert_eq!(later[2]["ok"], true, "{}", json!(later));
    assert_eq!(std::fs::read_to_string(root.join("src/c.txt")).expect("written"), "c");
}

/// A directory on the way swapped for a symlink (to a directory `impl` may only read after
/// asking, which no one answers) again and again while `impl` reads through it: the one-step
/// resolution judges the plain path, the open must not then follow the swapped-in symlink.
#[test]
fn a_directory_swapped_for_a_symlink_never_leaks_what_it_points_to() {
    let Governed { runtime, workspace, root, .. } =
        &governed(POLICY, &[("pub/b/c/d/f.txt", "public\n"), ("secrets/b/c/d/f.txt", "SECRET-shared\n")]);
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    // The swaps the reads must overlap: the calls go on until there were this many (on a loaded
    // machine, more calls), within a minute.
    const SWAPS: usize = 100;
    let (stop, swaps) = (AtomicBool::new(false), AtomicUsize::new(0));
    let outcomes = std::thread::scope(|scope| {
        scope.spawn(|| {
            let (real, aside, link) = (root.join("pub/b"), root.join("pub/b.real"), root.join("pub/b"));
            while !stop.load(Ordering::Relaxed) {
                if std::fs::rename(&real, &aside).is_ok() {
                    let _ = std::os::unix::fs::symlink("../secrets/b", &link);
                    std::thread::yield_now();
                    let _ = std::fs::remove_file(&link);
                    let _ = std::fs::rename(&aside, &real);
                    swaps.fetch_add(1, Ordering::Relaxed);
                }
                std::thread::yield_now();
            }
        });
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let mut outcomes = Vec::new();
        while outcomes.len() < 6 || swaps.load(Ordering::Relaxed) < SWAPS {
            assert!(std::time::Instant::now() < deadline, "only {} swaps in a minute", swaps.load(Ordering::Relaxed));
            outcomes.push(probe_as(
                runtime,
                workspace,
                "impl",
                &json!([
                    {"op": "raw_read", "path": "pub/b/c/d/f.txt", "times": 300},
                    {"op": "read", "path": "pub/b/c/d/f.txt", "times": 300},
                    {"op": "raw_read", "path": "pub/b/c/../c/d/f.txt", "times": 300},
                ]),
            ));
        }
        stop.store(true, Ordering::Relaxed);
        outcomes
    });
    for outcome in &outcomes {
        let text = shown(outcome);
        assert!(!text.contains("SECRET-shared"), "the secret leaked: {text}");
    }
}
