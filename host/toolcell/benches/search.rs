//! `search_files` as users reach it from outside, with the workspace's content index and
//! without, in one run, over a generated tree of 50,000 files (`toolcell_tests::measure::
//! generate_tree`):
//!
//! - one-shot `toolcell call search_files` processes, the index built (`toolcell index build`)
//!   against none, for a literal, a regex with a literal, a case-insensitive literal, a regex
//!   whose trigrams most files hold (the index cannot narrow it), and a regex without a literal, taken in alternation
//!   (medians of nine). Goal: with an index, never slower than without;
//! - warm `search_files` over MCP (`toolcell mcp` on the indexed tree) for a regex with a
//!   literal, against `rg -j1` over the same tree. Goal: ≥ 5× faster;
//! - warm in one host, with the index and without, a page of 10,000 files that fills long
//!   before the tree ends against `rg -j1 -l --sort path | head -n 10000`, and a regex scan the
//!   index cannot narrow against `rg -j2 -l` (toolcell's two parts), both goals ≤ 1.00×
//!   ([`limits`]). `TOOLCELL_SEARCH_BENCH_ONLY=limits` runs these rows alone.
//!
//! Every answer is checked equal: with the index, without, and ripgrep's. `.ci/bench` (or
//! `cargo bench -p toolcell --bench search`) prints the table; under `cargo test` it runs on
//! 1,000 files as a smoke test (its checks included), without ripgrep if it is missing.

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolcell_mcp::client::{StdioClient, text_of};
#[path = "search/limits.rs"]
mod limits;

use toolcell_tests::measure::{LITERAL, MIXED_CASE, generate_tree, median, rg_files, ripgrep, time};

/// The toolcell command with its own cache and state directories.
fn toolcell(cache: &Path, state: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolcell"));
    command.arg("--cache-dir").arg(cache).arg("--state-dir").arg(state);
    command
}

/// The matching files a `search_files` result lists, sorted.
fn files_of(text: &str) -> Vec<String> {
    let mut files: Vec<String> = text.lines().filter(|line| line.ends_with(".rs") && !line.contains(' ')).map(str::to_owned).collect();
    files.sort();
    files
}

/// One one-shot search: its time and the files it listed.
fn one_shot(cache: &Path, state: &Path, workspace: &Path, arguments: &Value) -> (Duration, Vec<String>) {
    let started = Instant::now();
    let output = toolcell(cache, state)
        .args(["call", "--role", "impl", "--workspace"])
        .arg(workspace)
        .arg("search_files")
        .arg(arguments.to_string())
        .stderr(Stdio::inherit())
        .output()
        .expect("run toolcell call");
    let took = started.elapsed();
    assert!(output.status.success(), "toolcell call search_files {arguments} failed");
    (took, files_of(&String::from_utf8_lossy(&output.stdout)))
}

fn main() {
    let benchmarking = std::env::args().any(|arg| arg == "--bench");
    let (files, runs, warm_calls) = if benchmarking { (50_000, 9, 20) } else { (1_000, 1, 3) };
    let temp = tempfile::tempdir().expect("temporary directory");
    let workspace = temp.path().join("tree");
    std::fs::create_dir(&workspace).expect("create the tree");
    generate_tree(&workspace, files);
    let cache = temp.path().join("cache");
    let (plain, indexed) = (temp.path().join("state-plain"), temp.path().join("state-indexed"));
    let built = toolcell(&cache, &indexed).args(["index", "build", "--workspace"]).arg(&workspace).output().expect("index build");
    assert!(built.status.success(), "toolcell index build: {}", String::from_utf8_lossy(&built.stderr));
    let rg = ripgrep();
    assert!(rg.is_some() || !benchmarking, "ripgrep (`rg`) is not installed: run `.ci/bench`, which installs it");

    let mut rows = Vec::new();
    let only_limits = std::env::var("TOOLCELL_SEARCH_BENCH_ONLY").is_ok_and(|only| only == "limits");
    rows.extend(limits::rows(&workspace, &cache, &plain, &indexed, rg.as_deref(), runs));
    let queries: [(&str, &str, bool); 5] = [
        ("a literal", LITERAL, false),
        ("a regex with a literal", r"fn needle_handler_\d+", false),
        ("a case-insensitive literal", MIXED_CASE, true),
        ("a regex the index cannot narrow", r"compute\(let, value, ", false),
        ("a regex without a literal", r"[a-z]{3}_\d{6}", false),
    ];
    let mut slowest: f64 = 0.0;
    for (name, regex, case_insensitive) in queries.into_iter().filter(|_| !only_limits) {
        let arguments = json!({"query": regex, "case_insensitive": case_insensitive, "max_results": 10_000});
        // Once each to warm the page cache and the compiled-component cache, then in turn.
        let (_, expected) = one_shot(&cache, &plain, &workspace, &arguments);
        let (_, with_index) = one_shot(&cache, &indexed, &workspace, &arguments);
        assert_eq!(with_index, expected, "{name}: the indexed and the scanning search disagree");
        if let Some(rg) = &rg {
            let pattern = if case_insensitive { format!("(?i){regex}") } else { regex.to_owned() };
            assert_eq!(rg_files(rg, "1", &pattern, &workspace), expected, "{name}: toolcell and rg disagree");
        }
        assert!(!expected.is_empty(), "{name}: the tree holds matches");
        let (mut without, mut with) = (Vec::new(), Vec::new());
        for _ in 0..runs {
            without.push(one_shot(&cache, &plain, &workspace, &arguments).0);
            with.push(one_shot(&cache, &indexed, &workspace, &arguments).0);
        }
        let (without, with) = (median(without), median(with));
        let ratio = with.as_secs_f64() / without.as_secs_f64();
        slowest = slowest.max(ratio);
        rows.push(format!(
            "| one-shot `toolcell call`, {name} ({} files match) | {:.0} ms | {:.0} ms | {ratio:.2}× |",
            expected.len(),
            with.as_secs_f64() * 1e3,
            without.as_secs_f64() * 1e3
        ));
    }
    if only_limits {
        return print(files, rows);
    }
    rows.push(format!("| slowest one-shot with the index vs without (goal ≤ 1.00×) | | | {slowest:.2}× |"));

    // Warm over MCP: one server on the indexed tree, the same search again and again.
    let regex = r"fn needle_handler_\d+";
    let mut server = toolcell(&cache, &indexed);
    server.args(["mcp", "--role", "impl", "--workspace"]).arg(&workspace).stderr(Stdio::null());
    let (mut client, _) = StdioClient::spawn(&mut server).expect("start toolcell mcp");
    let arguments = json!({"query": regex, "max_results": 10_000});
    let mut search = || {
        let started = Instant::now();
        let result = client.call_tool("search_files", &arguments).expect("search over MCP");
        assert_ne!(result["isError"], true, "{result}");
        (started.elapsed(), files_of(&text_of(&result)))
    };
    let (_, first) = search();
    let warm = median((0..warm_calls).map(|_| search().0).collect());
    drop(client);
    if let Some(rg) = &rg {
        assert_eq!(rg_files(rg, "1", regex, &workspace), first, "over MCP: toolcell and rg disagree");
        let rg = time(runs.max(3), || rg_files(rg, "1", regex, &workspace));
        rows.push(format!(
            "| warm over MCP, a regex with a literal, vs `rg -j1` (goal ≥ 5×) | {:.1} ms | {:.0} ms | {:.1}× faster |",
            warm.as_secs_f64() * 1e3,
            rg.as_secs_f64() * 1e3,
            rg.as_secs_f64() / warm.as_secs_f64()
        ));
    } else {
        eprintln!("rg is not installed (.ci/bench installs it): the ripgrep row is left out");
        rows.push(format!("| warm over MCP, a regex with a literal | {:.1} ms | | |", warm.as_secs_f64() * 1e3));
    }

    print(files, rows);
}

fn print(files: usize, rows: Vec<String>) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "search_files from outside, {files} files\n");
    let _ = writeln!(stdout, "| search | with the index | without (or rg -j1) | ratio |\n|---|---|---|---|");
    for row in rows {
        let _ = writeln!(stdout, "{row}");
    }
}
