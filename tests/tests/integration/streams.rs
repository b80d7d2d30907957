//! The host's own file streams (read, write and append through `wasi:io/streams`, on the
//! calling thread) and the preopen, a duplicate of the guard's workspace descriptor: what a
//! component sees of them, what they cost the host, and that transactions, budgets and the
//! policy hold through them. `fs_probe`'s `stream_script` drives raw stream calls.

use serde_json::{Value, json};
use toolcell_tests::*;

/// Run one `stream_script` through `fs_probe` on `runtime` as `impl`; the script's results,
/// and the call's result.
fn script_on(
    fixture: &Fixture,
    runtime: &toolcell_runtime::Runtime,
    script: &str,
    then_fail: bool,
) -> (Value, toolcell_runtime::CallOutcome) {
    let mut ops = vec![json!({"op": "stream_script", "content": script})];
    if then_fail {
        ops.push(json!({"op": "fail"}));
    }
    let outcome = fixture.call_on(runtime, "impl", "fs_probe", &json!({ "ops": ops }), None);
    let steps = match &outcome.result {
        Ok(output) => output.structured.clone().expect("structured")[0]["value"].clone(),
        Err(_) => Value::Null,
    };
    (steps, outcome)
}

fn script(fixture: &Fixture, script: &str) -> Value {
    let (steps, outcome) = script_on(fixture, runtime(), script, false);
    assert!(outcome.result.is_ok(), "{:?}", outcome.result);
    steps
}

/// The answer of each step, in order.
fn answers(steps: &Value) -> Vec<Value> {
    steps.as_array().expect("steps").iter().map(|step| step[1].clone()).collect()
}

#[test]
fn stream_probe_smoke() {
    let fixture = Fixture::new();
    fixture.write("a.txt", "0123456789");
    let steps = script(&fixture, "open:a.txt,r;rs:3;r:4;r:0;r:100;r:1;r:1");
    assert_eq!(
        answers(&steps),
        [json!("ok"), json!("ok"), json!("3456"), json!(""), json!("789"), json!("closed"), json!("closed")],
        "{steps}"
    );
}

/// The number of descriptors this process has open.
fn open_descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd").map(Iterator::count).unwrap_or(0)
}

/// A component asks for the preopened directories again and again, holding every descriptor:
/// each answer must not cost the host a descriptor of its own (3,000 held took 3,034 before).
/// The count is the whole test process's, which other tests share (one holds up to 1,024
/// files open through streams), hence the wide margin.
#[test]
fn asking_for_the_preopens_again_and_again_takes_no_host_descriptor_each() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let fixture = Fixture::new();
    let before = open_descriptors();
    let stop = Arc::new(AtomicBool::new(false));
    let most = Arc::new(AtomicUsize::new(before));
    let watcher = {
        let (stop, most) = (Arc::clone(&stop), Arc::clone(&most));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                most.fetch_max(open_descriptors(), Ordering::Relaxed);
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        })
    };
    let outcome = fixture.call(
        "fs_probe",
        &json!({"ops": [
            {"op": "raw_preopens", "content": "3000"},
            {"op": "sleep", "content": "300"},
        ]}),
    );
    stop.store(true, Ordering::Relaxed);
    watcher.join().expect("watcher");
    let results = outcome.result.expect("the probe runs").structured.expect("structured");
    let held = results[0]["value"].as_u64().unwrap_or(0);
    let grown = most.load(Ordering::Relaxed).saturating_sub(before);
    assert!(grown < 2_000, "{held} preopens held cost the host {grown} descriptors");
}

// ---------------------------------------------------------------------------------------
// The host's own file streams.

/// Writes through a stream, in place and through a whole-file rewrite (landed or not), are
/// rolled back with the call that fails.
#[test]
fn stream_writes_of_a_failed_call_are_rolled_back() {
    let fixture = Fixture::new();
    fixture.write("a.txt", "0123456789");
    fixture.write("c.txt", "kept");
    let before = fixture.snapshot();
    for script in [
        // In place (no truncation): journaled.
        "open:a.txt,w;ws:2;w:XY;as;w:++",
        // A new file, through its stream only, the write never flushed.
        "open:b.txt,cw;ws:0;w:new content",
        // A whole rewrite, landed by a readlink of its path, then written again through the same stream.
        "open:a.txt,tw;ws:0;w:one;rl:a.txt;w:two",
        // The same, its stat answered by the new content (not landed).
        "open:a.txt,tw;ws:0;w:one;stat:a.txt;w:two",
        // A whole rewrite whose descriptor is dropped before the stream writes.
        "open:c.txt,tw;ws:0;dropfd;w:late",
        // The stream outlives its file's removal.
        "open:c.txt,w;ws:0;unlink:c.txt;w:ghost",
    ] {
        let (_, outcome) = script_on(&fixture, runtime(), script, true);
        assert!(outcome.result.is_err(), "{script}");
        assert_eq!(fixture.snapshot(), before, "{script}: not rolled back");
    }
}

/// The same writes, committed: what each stream wrote is in the file.
#[test]
fn stream_writes_land_as_written() {
    let fixture = Fixture::new();
    fixture.write("a.txt", "0123456789");
    script(&fixture, "open:a.txt,w;ws:2;w:XY;as;w:++");
    assert_eq!(fixture.read_text("a.txt"), "01XY456789++");
    script(&fixture, "open:a.txt,tw;ws:0;w:one;rl:a.txt;w:two");
    assert_eq!(fixture.read_text("a.txt"), "onetwo");
    script(&fixture, "open:a.txt,tw;ws:0;w:one;stat:a.txt;w:two");
    assert_eq!(fixture.read_text("a.txt"), "onetwo");
    script(&fixture, "open:c.txt,ctw;ws:0;dropfd;w:late");
    assert_eq!(fixture.read_text("c.txt"), "late");
    // Past the end: the gap is zeros, as `pwrite` leaves it.
    script(&fixture, "open:c.txt,w;ws:6;w:Z");
    assert_eq!(fixture.read("c.txt"), b"late\0\0Z");
    // Appends go to the end the file has at the time, a rewrite's new content included.
    script(&fixture, "open:d.txt,ctw;ws:0;w:12345;as;w:E;ws:0;w:9");
    assert_eq!(fixture.read_text("d.txt"), "92345E");
    // write-zeroes, then bytes after them.
    script(&fixture, "open:z.txt,cw;ws:0;wz:3;w:a");
    assert_eq!(fixture.read("z.txt"), b"\0\0\0a");
}

/// A write the component never flushed is whole on the file when the call has answered
/// (wasmtime-wasi's stream finished it on a pool thread, possibly after the call put the file
/// in place).
#[test]
fn an_unflushed_stream_write_is_whole_when_the_call_answers() {
    let fixture = Fixture::new();
    for round in 0..3 {
        let name = format!("big{round}.bin");
        script(&fixture, &format!("open:{name},ctw;ws:0;wn:16000000"));
        let size = std::fs::metadata(fixture.root().join(&name)).expect("landed").len();
        assert_eq!(size, 16_000_000, "{name}: half written when the call answered");
    }
}

/// What a component sees of the streams, as wasmtime-wasi answers.
#[test]
fn streams_answer_as_wasmtime_wasi() {
    let fixture = Fixture::new();
    fixture.write("a.txt", "0123456789");
    std::fs::create_dir(fixture.root().join("d")).expect("mkdir");
    let cases: &[(&str, Vec<Value>)] = &[
        // Reads: from the offset, empty for a zero-length read, closed at the end and after.
        ("open:a.txt,r;rs:3;r:4;r:0;r:100;r:1", vec![json!("ok"), json!("ok"), json!("3456"), json!(""), json!("789"), json!("closed")]),
        ("open:a.txt,r;rs:100;r:5;r:0", vec![json!("ok"), json!("ok"), json!("closed"), json!("closed")]),
        ("open:a.txt,r;rs:0;sk:3;r:2;br:100;br:1", vec![json!("ok"), json!("ok"), json!(3), json!("34"), json!("56789"), json!("closed")]),
        // Streams on a directory.
        ("ws_root;rs_root", vec![json!("bad-descriptor"), json!("is-directory")]),
        ("open:d,dr;ws:0;as;rs:0", vec![json!("ok"), json!("bad-descriptor"), json!("bad-descriptor"), json!("is-directory")]),
        // A descriptor open for reading only: the write is taken, its failure reported once by
        // the next check, then the stream is closed.
        (
            "open:a.txt,r;ws:0;w:zz;cw;cw;w:q;fl",
            vec![json!("ok"), json!("ok"), json!("ok"), json!("failed:bad-descriptor"), json!("closed"), json!("closed"), json!("closed")],
        ),
        ("open:a.txt,r;ws:0;bwf:zz;cw", vec![json!("ok"), json!("ok"), json!("failed:bad-descriptor"), json!("closed")]),
        ("open:a.txt,r;as;w:zz;fl;fl", vec![json!("ok"), json!("ok"), json!("ok"), json!("failed:bad-descriptor"), json!("closed")]),
        // Zero-length writes; a write larger than check-write allows is taken whole.
        (
            "open:e.txt,cw;ws:0;w:;cw;fl;bfl;size",
            vec![json!("ok"), json!("ok"), json!("ok"), json!(65536), json!("ok"), json!("ok"), json!(0)],
        ),
        (
            "open:f.txt,cw;ws:0;cw;wn:200000;cw;size",
            vec![json!("ok"), json!("ok"), json!(65536), json!("ok"), json!(65536), json!(200_000)],
        ),
        // Offsets no file can have: an error on the stream, not a host panic.
        ("open:g.txt,cw;ws:18446744073709551615;w:x;cw", vec![json!("ok"), json!("ok"), json!("ok"), json!("failed:invalid")]),
        ("open:a.txt,r;rs:18446744073709551615;r:1;r:1", vec![json!("ok"), json!("ok"), json!("failed:invalid"), json!("closed")]),
    ];
    for (script_text, expected) in cases {
        let steps = script(&fixture, script_text);
        assert_eq!(&answers(&steps), expected, "{script_text}: {steps}");
    }
    assert_eq!(fixture.read_text("a.txt"), "0123456789");
}

/// `blocking-write-and-flush` of more than 4,096 bytes, and a write after a failed one without
/// a check first, trap as wasmtime-wasi traps; the call is rolled back.
#[test]
fn stream_misuse_traps_and_rolls_back() {
    let fixture = Fixture::new();
    fixture.write("a.txt", "0123456789");
    let before = fixture.snapshot();
    let long = "y".repeat(5000);
    for script_text in [format!("open:h.txt,cw;ws:0;w:first;bwf:{long}"), "open:a.txt,w;ws:0;w:AB;open:a.txt,r;ws:0;w:zz;w:yy".to_owned()] {
        let (_, outcome) = script_on(&fixture, runtime(), &script_text, false);
        let error = outcome.result.expect_err("traps");
        assert!(error.message.contains("crashed"), "{error}");
        assert_eq!(fixture.snapshot(), before);
    }
}

/// Under a policy: a stream for writing is judged as the write it is, whatever the descriptor
/// was opened for; a file moved where the role may not write is refused.
#[test]
fn streams_are_judged_under_the_policy() {
    let fixture = Fixture::new();
    fixture.write("docs/r.txt", "read only");
    fixture.write("a.txt", "0123456789");
    let before = fixture.snapshot();
    for script_text in ["open:docs/r.txt,r;rs:0;r:4;ws:0", "open:docs/r.txt,r;as", "open:docs/r.txt,rw"] {
        let (_, outcome) = script_on(&fixture, governed_runtime(), script_text, false);
        let error = outcome.result.expect_err("refused");
        assert_eq!(error.kind, toolcell_types::ToolErrorKind::Denied, "{script_text}: {error}");
        assert!(outcome.denials.iter().all(|denial| denial.event.path == "docs/r.txt"), "{:?}", outcome.denials);
        assert!(!outcome.denials.is_empty());
    }
    let (_, outcome) = script_on(&fixture, governed_runtime(), "open:a.txt,w;ws:0;rename:a.txt>docs/a.txt;w:X", true);
    assert!(outcome.denials.iter().any(|denial| denial.event.path == "docs/a.txt"), "{:?}", outcome.denials);
    assert_eq!(fixture.snapshot(), before);
}

/// A whole rewrite put in place early (a readlink of its path lands it), then written again
/// through the stream made before it landed: the file is still the call's own, undoable by its
/// session and read by it (a descriptor's `write` says so to the transaction on every write; a
/// stream says so once, when it is made).
#[test]
fn a_rewrite_written_again_through_its_stream_after_landing_stays_the_calls_own() {
    let runtime = runtime_with_policy(&TEST_POLICY.replace("version = 1", "version = 1\n[writes]\nread_before_write = \"refuse\""), None);
    let fixture = Fixture::new();
    fixture.write("a.txt", "original\n");
    let session = |tool: &str, args: Value| fixture.call_as(&runtime, "s-1", None, &[], tool, &args).result;
    session("read_file", json!({"path": "a.txt"})).expect("read");
    let ops = json!({"ops": [{"op": "stream_script", "content": "open:a.txt,tw;ws:0;w:one;rl:a.txt;w:two\n"}]});
    session("fs_probe", ops).expect("written");
    assert_eq!(fixture.read_text("a.txt"), "onetwo\n");
    let edit = json!({"path": "a.txt", "edits": [{"old_string": "two", "new_string": "three"}]});
    let edited = session("edit_file", edit);
    let undone = session("undo_edit", json!({"path": "a.txt"}));
    edited.expect("the session wrote what is there");
    undone.expect("undo the edit");
    session("undo_edit", json!({"path": "a.txt"})).expect("undo the stream's write");
    assert_eq!(fixture.read_text("a.txt"), "original\n");
}

/// A component keeps a stream of each file it opens and drops the descriptor: the files the
/// streams hold open must count against the call's budget of open files (1,024 by default) as
/// the descriptors did.
#[test]
fn streams_outliving_their_descriptors_count_as_open_files() {
    let fixture = Fixture::new();
    fixture.write("a.txt", "a");
    let outcome = fixture.call("fs_probe", &json!({"ops": [{"op": "raw_stream_hold", "path": "a.txt", "content": "3000"}]}));
    match &outcome.result {
        Ok(output) => panic!("3000 files held open through streams, past the budget of open files: {}", output.text),
        Err(error) => {
            assert_eq!(error.kind, toolcell_types::ToolErrorKind::TooLarge, "{error}");
            assert!(outcome.denials.iter().any(|denial| denial.event.rule == "open-files"), "{:?}", outcome.denials);
        }
    }
}
