//! A durable whole-file rewrite written by many small stream writes costs the device about
//! the file's size, as the same rewrite under `durability = "atomic"` plus one sync: not a
//! page written for every write. Measured by the calling thread's `write_bytes`
//! (`/proc/thread-self/io`): the call runs on it, component writes included, and the tests
//! running beside it on other threads do not count.

use serde_json::json;
use toolcell_runtime::Runtime;
use toolcell_tests::{Fixture, TEST_POLICY, runtime_with_policy};

/// Bytes this thread has had written to storage so far (dirtied in the page cache; a page
/// dirtied again after its writeback started counts again).
fn written_to_storage() -> u64 {
    let io = std::fs::read_to_string("/proc/thread-self/io").expect("/proc/thread-self/io");
    io.lines().find_map(|line| line.strip_prefix("write_bytes: ")).and_then(|value| value.trim().parse().ok()).expect("write_bytes")
}

const WRITES: usize = 20_000;
const CHUNK: &str = "0123456789abcdef";

/// Rewrite `big.txt` whole through one output stream, `WRITES` writes of 16 bytes; what the
/// device was given meanwhile, and how long it took.
fn rewrite_in_small_writes(runtime: &Runtime, fixture: &Fixture) -> (u64, std::time::Duration) {
    let mut script = String::from("open:big.txt,ctw;ws:0;");
    for _ in 0..WRITES {
        script.push_str("w:");
        script.push_str(CHUNK);
        script.push(';');
    }
    let ops = json!({"ops": [{"op": "stream_script", "path": "", "content": script}]});
    let before = written_to_storage();
    let started = std::time::Instant::now();
    let outcome = fixture.call_as(runtime, "s-1", None, &[], "fs_probe", &ops);
    let took = started.elapsed();
    assert!(outcome.result.is_ok(), "{:?}", outcome.result.map(|output| output.text.len()));
    assert_eq!(std::fs::metadata(fixture.root().join("big.txt")).expect("stat").len(), (WRITES * CHUNK.len()) as u64);
    (written_to_storage() - before, took)
}

#[test]
fn many_small_stream_writes_to_a_durable_rewrite_write_the_file_about_once() {
    let size = (WRITES * CHUNK.len()) as u64;
    let atomic = runtime_with_policy(&TEST_POLICY.replace("version = 1", "version = 1\n[writes]\ndurability = \"atomic\""), None);
    let full = runtime_with_policy(TEST_POLICY, None);
    let fixture = Fixture::new();
    fixture.write("big.txt", "old\n");
    // Warm both (compiled components, state files).
    rewrite_in_small_writes(&atomic, &fixture);
    rewrite_in_small_writes(&full, &fixture);
    let (atomic_bytes, atomic_took) = rewrite_in_small_writes(&atomic, &fixture);
    let (full_bytes, full_took) = rewrite_in_small_writes(&full, &fixture);
    eprintln!("file {size} B; atomic: {atomic_bytes} B to storage in {atomic_took:?}; full: {full_bytes} B in {full_took:?}");
    assert!(
        full_bytes <= atomic_bytes + 4 * size + (1 << 20),
        "a durable rewrite of {size} bytes in {WRITES} writes had {full_bytes} bytes written to storage (atomic: {atomic_bytes})"
    );
}
