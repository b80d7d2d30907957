//! toolcell against its baselines, each as a ratio measured in one run:
//!
//! - `search_files` over a generated tree of 50,000 files against `rg -j1 -l` (ripgrep;
//!   `.ci/bench` installs it), both listing the same matching files;
//! - the read path of `read_file` (one call that scans a 10 MiB file to its last line) against
//!   `std::fs::read`, as throughput;
//! - start: a host built with an empty compiled-component cache against one with a warm cache
//!   (the built-in components ship precompiled, so both load them from the binary);
//! - peak RSS of a `toolcell call search_files` process over the tree against `rg -j1`'s
//!   (GNU time's `%M`);
//! - per call: `read_file` of a 4 KiB file in-process against a native read.
//!
//! `.ci/bench` (or `cargo bench -p toolcell --bench baselines`) prints the table. Under
//! `cargo test` it runs on 2,000 files and a 1 MiB file as a smoke test, without ripgrep if
//! it is missing.

use std::io::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;
use toolcell_tests::measure::{ripgrep, time};

/// A word that appears in one file of every 1,000.
const NEEDLE: &str = "zebra_quartz_needle";

struct Sizes {
    files: usize,
    big_file_bytes: usize,
    runs: usize,
    calls: usize,
}

/// `files` source-like files in directories of 100, a few of them holding [`NEEDLE`].
fn generate_tree(root: &Path, files: usize) {
    let body: String = (0..24).map(|line| format!("    let value_{line} = compute({line}, \"some text\");\n")).collect();
    for index in 0..files {
        let directory = root.join(format!("pkg{:03}/mod{:02}", index / 1000, index / 100 % 10));
        if index % 100 == 0 {
            std::fs::create_dir_all(&directory).expect("create directory");
        }
        let needle = if index % 1000 == 7 { format!("    // {NEEDLE}\n") } else { String::new() };
        std::fs::write(directory.join(format!("file{index:05}.rs")), format!("fn f{index}() {{\n{body}{needle}}}\n")).expect("write file");
    }
}

/// Peak RSS in KiB of `command`, from GNU time.
fn peak_rss_kib(command: &mut Command) -> Option<u64> {
    let program = command.get_program().to_owned();
    let args: Vec<_> = command.get_args().map(ToOwned::to_owned).collect();
    let output = Command::new("/usr/bin/time").arg("-f").arg("PEAK_RSS_KIB=%M").arg(program).args(args).output().ok()?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    stderr.lines().find_map(|line| line.strip_prefix("PEAK_RSS_KIB=")).and_then(|value| value.trim().parse().ok())
}

fn main() {
    let benchmarking = std::env::args().any(|arg| arg == "--bench");
    let sizes = if benchmarking {
        Sizes { files: 50_000, big_file_bytes: 10 << 20, runs: 5, calls: 2_000 }
    } else {
        Sizes { files: 2_000, big_file_bytes: 1 << 20, runs: 1, calls: 20 }
    };
    let rg = ripgrep();
    assert!(rg.is_some() || !benchmarking, "ripgrep (`rg`) is not installed: run `.ci/bench`, which installs it");
    let temp = tempfile::tempdir().expect("temporary directory");
    let workspace = temp.path().join("workspace");
    let tree = workspace.join("tree");
    std::fs::create_dir_all(&tree).expect("create tree");
    generate_tree(&tree, sizes.files);
    let cache = temp.path().join("cache");
    let state = temp.path().join("state");
    let mut out = std::io::stderr().lock();
    let mut row = |what: &str, ours: String, baseline: String, ratio: String| {
        let _ = writeln!(out, "| {what} | {ours} | {baseline} | {ratio} |");
    };
    let _ = writeln!(std::io::stderr(), "| measure | toolcell | baseline | ratio |\n|---|---|---|---|");

    // Start with an empty cache and with a warm one: the built-in components ship precompiled,
    // so the two should match.
    let build = || toolcell_host::HostBuilder::new(&workspace).cache_dir(&cache).state_dir(&state).build().expect("host builds");
    let started = Instant::now();
    let host = build();
    let cold = started.elapsed();
    drop(host);
    let warm = time(sizes.runs, build);
    row(
        "start, 27 built-in components (empty cache vs warm cache)",
        format!("{:.0} ms", cold.as_secs_f64() * 1e3),
        format!("{:.1} ms", warm.as_secs_f64() * 1e3),
        format!("{:.1}x", cold.as_secs_f64() / warm.as_secs_f64()),
    );

    let host = build();
    let session = host.session("impl", "bench").expect("session");

    // search_files vs rg -j1: the same matches.
    let query = json!({"query": NEEDLE, "path": "tree", "max_results": 1000}).to_string();
    let ours = session.call("search_files", &query).expect("search call");
    // The default output mode lists the matching files, like `rg -l`.
    let found = ours.output.as_ref().map(|output| output.text.lines().filter(|line| line.ends_with(".rs")).count()).unwrap_or(0);
    assert_eq!(found, sizes.files.div_ceil(1000), "search_files found {found} files: {:?}", ours.output);
    let search = time(sizes.runs, || session.call("search_files", &query).expect("search call"));
    if let Some(rg) = &rg {
        let rg_search = time(sizes.runs, || {
            let output = Command::new(rg).args(["-j1", "-l", "--no-messages", NEEDLE]).arg(&tree).output().expect("run rg");
            assert_eq!(String::from_utf8_lossy(&output.stdout).lines().count(), found);
        });
        row(
            &format!("search_files over {} files vs `rg -j1`", sizes.files),
            format!("{:.0} ms", search.as_secs_f64() * 1e3),
            format!("{:.0} ms", rg_search.as_secs_f64() * 1e3),
            format!("{:.2}x", search.as_secs_f64() / rg_search.as_secs_f64()),
        );
    }
    // The content index of the same tree (not yet used by searches): build time against one
    // scan, and its size against the text it indexes.
    let mut report = None;
    let build_index = time(1, || report = Some(host.runtime().build_index(host.workspace()).expect("the index builds")));
    let report = report.expect("built");
    row(
        &format!("content index of {} files: build vs one search scan", report.files),
        format!("{:.0} ms", build_index.as_secs_f64() * 1e3),
        format!("{:.0} ms", search.as_secs_f64() * 1e3),
        format!("{:.2}x", build_index.as_secs_f64() / search.as_secs_f64()),
    );
    // The same search with the index: the candidates, after a stat walk that catches what
    // changed since it was built.
    let indexed_search = time(sizes.runs, || session.call("search_files", &query).expect("search call"));
    row(
        &format!("search_files over {} files, indexed vs scanned", sizes.files),
        format!("{:.0} ms", indexed_search.as_secs_f64() * 1e3),
        format!("{:.0} ms", search.as_secs_f64() * 1e3),
        format!("{:.2}x", indexed_search.as_secs_f64() / search.as_secs_f64()),
    );
    row(
        "content index size vs the text indexed",
        format!("{:.1} MiB", report.index_bytes as f64 / 1_048_576.0),
        format!("{:.1} MiB", report.text_bytes as f64 / 1_048_576.0),
        format!("{:.0}%", 100.0 * report.index_bytes as f64 / report.text_bytes.max(1) as f64),
    );

    // The read path: one read_file call that scans the whole file (a session that has not
    // read it yet, so without its line index), vs a native read.
    let line = "the quick brown fox jumps over the lazy dog, again and again\n";
    let lines = sizes.big_file_bytes / line.len();
    std::fs::write(workspace.join("big.txt"), line.repeat(lines)).expect("write big file");
    let bytes = (lines * line.len()) as f64;
    let last = json!({"path": "big.txt", "offset": lines, "limit": 1}).to_string();
    let mut scans = 0;
    let scan = time(sizes.runs, || {
        scans += 1;
        let reader = host.session("impl", &format!("bench-scan-{scans}")).expect("session");
        let result = reader.call("read_file", &last).expect("read call");
        assert!(result.output.is_ok(), "{:?}", result.output);
    });
    let native = time(sizes.runs, || std::fs::read(workspace.join("big.txt")).expect("native read").len());
    let mib_per_s = |duration: Duration| bytes / (1 << 20) as f64 / duration.as_secs_f64();
    row(
        &format!("read_file read path, {} MiB file", sizes.big_file_bytes >> 20),
        format!("{:.0} MiB/s", mib_per_s(scan)),
        format!("{:.0} MiB/s", mib_per_s(native)),
        format!("{:.2} of native", mib_per_s(scan) / mib_per_s(native)),
    );
    // All of it, window by window, as an agent would read it: the first window counts the
    // lines and keeps the line index, the others start at a recorded line start.
    let windows = time(1, || {
        let mut offset = 1;
        let mut calls = 0;
        while offset <= lines {
            let args = json!({"path": "big.txt", "offset": offset, "limit": 2000}).to_string();
            let result = session.call("read_file", &args).expect("read call");
            offset = result
                .output
                .ok()
                .and_then(|output| output.structured)
                .and_then(|value| value["end_line"].as_u64())
                .map_or(lines + 1, |end| end as usize + 1);
            calls += 1;
        }
        calls
    });
    row(
        &format!("read_file, whole {} MiB file in 2,000-line windows", sizes.big_file_bytes >> 20),
        format!("{:.0} MiB/s", mib_per_s(windows)),
        format!("{:.0} MiB/s", mib_per_s(native)),
        format!("{:.3} of native", mib_per_s(windows) / mib_per_s(native)),
    );
    // One window near the end once the session has the index, against the full scan above:
    // what an agent paging through a large file pays per page.
    let indexed = time(sizes.runs, || {
        let result = session.call("read_file", &last).expect("read call");
        assert!(result.output.is_ok(), "{:?}", result.output);
    });
    row(
        &format!("read_file last line of {} MiB file, indexed vs scanned", sizes.big_file_bytes >> 20),
        format!("{:.2} ms", indexed.as_secs_f64() * 1e3),
        format!("{:.2} ms", scan.as_secs_f64() * 1e3),
        format!("{:.3}x", indexed.as_secs_f64() / scan.as_secs_f64()),
    );

    // Per call, in-process, 4 KiB.
    // 64 lines of 64 bytes.
    std::fs::write(workspace.join("small.txt"), format!("{}\n", "x".repeat(63)).repeat(64)).expect("write small file");
    let small = json!({"path": "small.txt"}).to_string();
    let native_small = time(sizes.calls, || std::fs::read(workspace.join("small.txt")).expect("read").len());
    let fresh = host.session("impl", "bench-calls").expect("session");
    let after_search = time(sizes.calls, || session.call("read_file", &small).expect("read call"));
    let call = time(sizes.calls, || fresh.call("read_file", &small).expect("read call"));
    row(
        "read_file 4 KiB, in-process call vs native read (p50)",
        format!("{:.1} µs", call.as_secs_f64() * 1e6),
        format!("{:.1} µs", native_small.as_secs_f64() * 1e6),
        format!("{:.0}x", call.as_secs_f64() / native_small.as_secs_f64()),
    );
    // The same call in the session that searched the whole tree (measured first).
    row(
        &format!("the same, in the session that searched {} files", sizes.files),
        format!("{:.1} µs", after_search.as_secs_f64() * 1e6),
        format!("{:.1} µs", call.as_secs_f64() * 1e6),
        format!("{:.2}x", after_search.as_secs_f64() / call.as_secs_f64()),
    );

    // Peak RSS of one process doing the search.
    let mut ours = Command::new(env!("CARGO_BIN_EXE_toolcell"));
    ours.arg("--cache-dir")
        .arg(&cache)
        .arg("--state-dir")
        .arg(&state)
        .args(["call", "search_files", &query, "--workspace"])
        .arg(&workspace);
    if let (Some(ours), Some(rg)) = (peak_rss_kib(&mut ours), rg.as_ref()) {
        let mut baseline = Command::new(rg);
        baseline.args(["-j1", "-l", "--no-messages", NEEDLE]).arg(&tree);
        if let Some(theirs) = peak_rss_kib(&mut baseline) {
            row(
                &format!("peak RSS, one search over {} files", sizes.files),
                format!("{:.1} MiB", ours as f64 / 1024.0),
                format!("{:.1} MiB", theirs as f64 / 1024.0),
                format!("{:.1}x", ours as f64 / theirs as f64),
            );
        }
    }
}
