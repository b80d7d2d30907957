//! Two shapes of search against ripgrep with the same number of threads, warm in one host
//! (the content index built, and without one), over the bench's tree:
//!
//! - a page that fills long before the tree ends: `gamma.*delta` (in two files of every five)
//!   with `max_results` 10,000, against `rg -j1 -l --sort path … | head -n 10000`, which stops
//!   once `head` has its lines. Goal: ≤ 1.0×;
//! - a regex scan the index cannot narrow (its literal, four spaces, is on nearly every line of
//!   every file; the rest is rare), against `rg -j2 -l` with toolcell's two parts. Goal: ≤ 1.0×.
//!
//! Both answers are checked equal to ripgrep's: the page is rg's first 10,000 files, in order.

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{Value, json};
use toolcell_host::{HostBuilder, Session};
use toolcell_tests::measure::{GAMMA_DELTA, interleaved, rg_files};

/// The regex of the scan row: a line of exactly `x = y(value, let);`.
pub const SCAN: &str = r"^    [a-z]+ = [a-z]+\(value, let\);$";
const PAGE: usize = 10_000;

/// The files of a `search_files` answer in its order, whether it was cut, and how many files
/// it read.
fn search(session: &Session, args: &Value) -> (Vec<String>, bool, u64, usize) {
    let outcome = session.call("search_files", &args.to_string()).expect("search call");
    let output = outcome.output.as_ref().unwrap_or_else(|error| panic!("{args}: {error:?}"));
    let structured = output.structured.as_ref().expect("structured");
    let files = structured["files"].as_array().expect("files").iter().map(|file| file.as_str().expect("a path").to_owned()).collect();
    (files, structured["truncated"] == json!(true), structured["files_searched"].as_u64().expect("a count"), output.text.lines().count())
}

/// `rg -j1 -l --sort path PATTERN | head -n LIMIT`: the first `limit` files, and rg stopped
/// once they are read (as `head` stops it: the pipe closes).
fn rg_head(rg: &Path, pattern: &str, workspace: &Path, limit: usize) -> Vec<String> {
    let mut child = Command::new(rg)
        .args(["-j1", "-l", "--sort", "path", "--no-messages", "--no-ignore", "--hidden", "-e", pattern, "."])
        .current_dir(workspace)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run rg");
    let stdout = child.stdout.take().expect("rg's output");
    let files: Vec<String> =
        BufReader::new(stdout).lines().take(limit).map(|line| line.expect("a line").trim_start_matches("./").to_owned()).collect();
    // The pipe is closed here: rg ends at its next write, as under `head`.
    let _ = child.wait();
    files
}

/// The rows, `| search | toolcell | rg | ratio |`, for the tree at `workspace` (indexed
/// in `indexed`, not in `plain`).
pub fn rows(workspace: &Path, cache: &Path, plain: &Path, indexed: &Path, rg: Option<&Path>, runs: usize) -> Vec<String> {
    let files_in_tree = walkdir_count(workspace);
    let mut rows = Vec::new();
    for (state, label) in [(plain, "without the index"), (indexed, "with the index")] {
        let host = HostBuilder::new(workspace).cache_dir(cache).state_dir(state).build().expect("host builds");
        let session = host.session("impl", "bench").expect("session");
        let limited = json!({"query": GAMMA_DELTA, "max_results": PAGE});
        let (page, truncated, searched, lines) = search(&session, &limited);
        let page_size = PAGE.min(files_in_tree * 2 / 5);
        assert_eq!(page.len(), page_size, "{label}: a full page");
        assert_eq!(truncated, files_in_tree * 2 / 5 > PAGE, "{label}: the page says whether more follow");
        // The files, then the line saying where the next page starts.
        assert_eq!(lines, page_size + usize::from(truncated), "{label}: the lines printed");
        let scan = json!({"query": SCAN, "max_results": PAGE});
        let (found, scan_truncated, scanned, _) = search(&session, &scan);
        assert!(!scan_truncated && !found.is_empty(), "{label}: the scan finds every match, and some");
        let Some(rg) = rg else {
            rows.push(format!("| {label}: page of {page_size} (read {searched} files); scan ({scanned} files) | | | |"));
            continue;
        };
        assert_eq!(rg_head(rg, GAMMA_DELTA, workspace, PAGE), page, "{label}: the page is rg's first files, in order");
        let mut sorted = found.clone();
        sorted.sort();
        assert_eq!(rg_files(rg, "2", SCAN, workspace), sorted, "{label}: toolcell and rg -j2 disagree");
        let [ours, theirs] =
            interleaved(runs, &mut [&mut || drop(search(&session, &limited)), &mut || drop(rg_head(rg, GAMMA_DELTA, workspace, PAGE))]);
        rows.push(format!(
            "| warm, {label}, `{GAMMA_DELTA}` limited to {PAGE} files ({searched} read) vs `rg -j1 -l --sort path | head -n {PAGE}` (goal ≤ 1.00×) | {:.0} ms | {:.0} ms | {:.2}× |",
            ours.as_secs_f64() * 1e3,
            theirs.as_secs_f64() * 1e3,
            ours.as_secs_f64() / theirs.as_secs_f64()
        ));
        let [ours, theirs] =
            interleaved(runs, &mut [&mut || drop(search(&session, &scan)), &mut || drop(rg_files(rg, "2", SCAN, workspace))]);
        rows.push(format!(
            "| warm, {label}, a regex scan the index cannot narrow ({} files match, {scanned} read) vs `rg -j2 -l` (goal ≤ 1.00×) | {:.0} ms | {:.0} ms | {:.2}× |",
            found.len(),
            ours.as_secs_f64() * 1e3,
            theirs.as_secs_f64() * 1e3,
            ours.as_secs_f64() / theirs.as_secs_f64()
        ));
    }
    rows
}

/// The regular files under `root`.
fn walkdir_count(root: &Path) -> usize {
    let mut count = 0;
    let mut pending = vec![root.to_owned()];
    while let Some(directory) = pending.pop() {
        for entry in std::fs::read_dir(&directory).expect("list the tree").flatten() {
            let kind = entry.file_type().expect("an entry's kind");
            if kind.is_dir() {
                pending.push(entry.path());
            } else if kind.is_file() {
                count += 1;
            }
        }
    }
    count
}
