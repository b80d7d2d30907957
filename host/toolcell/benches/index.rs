//! `search_files` with and without the content index, against ripgrep, as the tree grows.
//!
//! For trees of 10,000, 50,000 and 200,000 files (from `toolcell_tests::measure::generate_tree`), in one run:
//!
//! - the first search of a fresh workspace (no index: the scan a host does while it builds one);
//! - the index: build time and size against the text it indexes;
//! - repeated searches with the index warm in a long-running host, for a literal, a regex with a
//!   literal and a case-insensitive literal, against `rg -j1` and `rg -j2` over the same tree,
//!   all three answers checked equal (toolcell indexed, toolcell scanning, ripgrep);
//! - a warm literal search kept fresh by comparing every file's stamp (`Walk`), against one
//!   kept fresh by notifications (`Watch`, the default);
//! - a regex with no literal (the index cannot help: a scan) against `rg -j1` and `rg -j2`;
//! - the first search after 100 random edits (half through toolcell, half outside it),
//!   against a warm search (the medians of five rounds);
//! - at the smallest size, a search when 200 files the role may not read hold the word,
//!   against one when they do not (what the role could learn from timing).
//!
//! `.ci/bench` (or `cargo bench -p toolcell --bench index`) prints the table. Under
//! `cargo test` it runs on 1,000 files as a smoke test (its checks included), without ripgrep
//! if it is missing.

use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;
use toolcell_host::{Host, HostBuilder, Session, Workspace};
use toolcell_runtime::IndexFreshness;
use toolcell_tests::measure::{LITERAL, MIXED_CASE, Random, generate_tree, interleaved, median, rg_files, ripgrep, time};

/// The files `search_files` lists for `args`, sorted, and how many it read.
fn search(session: &Session, args: &serde_json::Value) -> (Vec<String>, u64) {
    let outcome = session.call("search_files", &args.to_string()).expect("search call");
    let output = outcome.output.as_ref().unwrap_or_else(|error| panic!("{args}: {error:?}"));
    let structured = output.structured.as_ref().expect("structured");
    let mut files: Vec<String> =
        structured["files"].as_array().expect("files").iter().map(|file| file.as_str().expect("path").to_owned()).collect();
    files.sort();
    assert_eq!(structured["truncated"], json!(false), "{args}: raise max_results");
    (files, structured["files_searched"].as_u64().expect("a count"))
}

struct Row<'a> {
    out: std::io::StderrLock<'a>,
}

impl Row<'_> {
    fn print(&mut self, what: &str, ours: Duration, baseline: Duration, baseline_name: &str) {
        let _ = writeln!(
            self.out,
            "| {what} | {:.1} ms | {:.1} ms ({baseline_name}) | {:.2}x |",
            ours.as_secs_f64() * 1e3,
            baseline.as_secs_f64() * 1e3,
            ours.as_secs_f64() / baseline.as_secs_f64()
        );
    }
}

fn host(workspace: &Path, state: &Path, cache: &Path, policy: Option<&str>) -> Host {
    let mut builder = HostBuilder::new(workspace).state_dir(state).cache_dir(cache);
    if let Some(policy) = policy {
        builder = builder.policy_text("bench-policy.toml", policy);
    }
    builder.build().expect("host builds")
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|arg| arg == "--generate") {
        let (directory, files) = (args.get(at + 1).expect("--generate DIR FILES"), args.get(at + 2).expect("--generate DIR FILES"));
        generate_tree(Path::new(directory), files.parse().expect("FILES is a number"));
        return;
    }
    let benchmarking = std::env::args().any(|arg| arg == "--bench");
    // `TOOLCELL_INDEX_BENCH_SIZES=50000` (comma-separated) runs only those sizes.
    let chosen: Option<Vec<usize>> = std::env::var("TOOLCELL_INDEX_BENCH_SIZES")
        .ok()
        .map(|sizes| sizes.split(',').map(|size| size.trim().parse().expect("TOOLCELL_INDEX_BENCH_SIZES: file counts")).collect());
    let (sizes, runs): (&[usize], usize) = match &chosen {
        Some(chosen) => (chosen, if benchmarking { 5 } else { 1 }),
        None if benchmarking => (&[10_000, 50_000, 200_000], 5),
        None => (&[1_000], 1),
    };
    let rg = ripgrep();
    assert!(rg.is_some() || !benchmarking, "ripgrep (`rg`) is not installed: run `.ci/bench`, which installs it");
    let temp = tempfile::tempdir().expect("temporary directory");
    let cache = temp.path().join("cache");
    let mut table = Row { out: std::io::stderr().lock() };
    let _ = writeln!(table.out, "| measure | toolcell | baseline | ratio |\n|---|---|---|---|");
    let indexed_queries: [(&str, serde_json::Value, String); 3] = [
        ("a literal", json!({"query": LITERAL}), LITERAL.to_owned()),
        ("a regex with a literal", json!({"query": r"fn needle_handler_\d+"}), r"fn needle_handler_\d+".to_owned()),
        ("a case-insensitive literal", json!({"query": MIXED_CASE, "case_insensitive": true}), format!("(?i){MIXED_CASE}")),
    ];
    let no_literal = r"\b[a-z]{3}_[0-9]{6}\b";
    for &files in sizes {
        let case = temp.path().join(format!("tree{files}"));
        let workspace = case.join("workspace");
        generate_tree(&workspace, files);
        let state = case.join("state");
        let host = host(&workspace, &state, &cache, None);
        let session = host.session("impl", "bench").expect("session");
        let with_max = |args: &serde_json::Value| {
            let mut args = args.clone();
            args["max_results"] = json!(10_000);
            args
        };
        // First search of a fresh workspace: no index, a scan.
        let first = time(runs, || search(&session, &with_max(&indexed_queries[0].1)));
        let scanned: Vec<(Vec<String>, Duration)> = indexed_queries
            .iter()
            .map(|(_, args, _)| {
                let (found, read) = search(&session, &with_max(args));
                assert_eq!(read as usize, files, "a scan reads every file");
                (found, time(runs, || search(&session, &with_max(args))))
            })
            .collect();
        let rg_j1: Vec<Option<Duration>> = indexed_queries
            .iter()
            .zip(&scanned)
            .map(|((_, _, pattern), (found, _))| {
                let rg = rg.as_deref()?;
                assert_eq!(&rg_files(rg, "1", pattern, &workspace), found, "{pattern}: toolcell's scan and rg disagree");
                Some(time(runs, || rg_files(rg, "1", pattern, &workspace)))
            })
            .collect();
        if let Some(Some(rg_first)) = rg_j1.first() {
            table.print(&format!("{files} files: first search, no index (scan)"), first, *rg_first, "rg -j1");
        }
        // The index: build time and size.
        let started = Instant::now();
        let report = host.runtime().build_index(host.workspace()).expect("the index builds");
        let build = started.elapsed();
        table.print(&format!("{files} files: index build vs one scan"), build, scanned[0].1, "toolcell scan");
        let _ = writeln!(
            table.out,
            "| {files} files: index size vs text indexed | {:.1} MiB | {:.1} MiB | {:.2}x |",
            report.index_bytes as f64 / 1_048_576.0,
            report.text_bytes as f64 / 1_048_576.0,
            report.index_bytes as f64 / report.text_bytes as f64
        );
        // Warm: the same host, the index loaded, the notifications drained before each search.
        for (((what, args, pattern), (scan_found, scan_time)), rg_time) in indexed_queries.iter().zip(&scanned).zip(&rg_j1) {
            let (found, read) = search(&session, &with_max(args));
            assert_eq!(&found, scan_found, "{what}: indexed and scanned answers differ");
            assert!((read as usize) < files / 20, "{what}: the indexed search read {read} files");
            let indexed = time(runs, || search(&session, &with_max(args)));
            table.print(&format!("{files} files, indexed warm, {what}"), indexed, *scan_time, "toolcell scan");
            if let (Some(rg), Some(rg_time)) = (rg.as_deref(), rg_time) {
                table.print(&format!("{files} files, indexed warm, {what}"), indexed, *rg_time, "rg -j1");
                let rg_j2 = time(runs, || rg_files(rg, "2", pattern, &workspace));
                table.print(&format!("{files} files, indexed warm, {what}"), indexed, rg_j2, "rg -j2");
            }
        }
        // Freshness by comparing every file's stamp before each search (`Walk`), instead of
        // draining the notifications: another host on the same index.
        {
            let walk_state = case.join("state-walk");
            let index = host.runtime().index_path(host.workspace());
            let copied = walk_state.join(index.strip_prefix(&state).expect("the index is in the state directory"));
            std::fs::create_dir_all(copied.parent().expect("a directory")).expect("index directory");
            std::fs::copy(&index, &copied).expect("copy the index");
            let runtime = toolcell_host::builtin_runtime()
                .cache_dir(&cache)
                .audit_dir(&walk_state)
                .policy("default.toml", toolcell_host::DEFAULT_POLICY)
                .index_freshness(IndexFreshness::Walk)
                .build()
                .expect("the runtime builds");
            let walking = Host::new(runtime, Workspace::open(&workspace).expect("workspace"), None);
            let walking = walking.session("impl", "bench").expect("session");
            let args = with_max(&indexed_queries[0].1);
            assert_eq!(search(&walking, &args).0, scanned[0].0, "Walk: indexed and scanned answers differ");
            let [watching, comparing] =
                interleaved(runs, &mut [&mut || drop(search(&session, &args)), &mut || drop(search(&walking, &args))]);
            table.print(
                &format!("{files} files, indexed warm, a literal, every file compared (Walk)"),
                comparing,
                watching,
                "notified (Watch)",
            );
        }
        // No literal: a scan, index or not; the three timed in turn, so that drift in the
        // machine falls on all of them.
        let args = with_max(&json!({"query": no_literal}));
        let (found, read) = search(&session, &args);
        assert_eq!(read as usize, files, "a pattern without a literal is a scan");
        if let Some(rg) = rg.as_deref() {
            assert_eq!(rg_files(rg, "1", no_literal, &workspace), found, "no literal: toolcell and rg disagree");
            let [scan, rg_j1, rg_j2] = interleaved(
                runs,
                &mut [&mut || drop(search(&session, &args)), &mut || drop(rg_files(rg, "1", no_literal, &workspace)), &mut || {
                    drop(rg_files(rg, "2", no_literal, &workspace))
                }],
            );
            table.print(&format!("{files} files, no literal (scan)"), scan, rg_j1, "rg -j1");
            table.print(&format!("{files} files, no literal (scan)"), scan, rg_j2, "rg -j2");
        } else {
            time(runs, || search(&session, &args));
        }
        // Rounds of 100 random edits, half through toolcell and half outside it, each followed
        // by one search (checked against rg) and then by warm ones.
        let mut random = Random(files as u64 | 1);
        let args = with_max(&indexed_queries[0].1);
        let (mut after_edits, mut warm_again) = (Vec::new(), Vec::new());
        for round in 0..runs {
            for edit in 0..100 {
                let index = random.below(files);
                let relative = format!("pkg{:03}/mod{:02}/file{index:06}.rs", index / 1000, index / 100 % 10);
                let content =
                    format!("// edited {round} {edit}\nfn edited_{edit}() {{ {} }}\n", if edit % 10 == 0 { LITERAL } else { "plain" });
                if edit % 2 == 0 {
                    std::fs::write(workspace.join(&relative), &content).expect("edit outside");
                } else {
                    session.call("read_file", &json!({"path": relative}).to_string()).expect("read");
                    let outcome = session.call("write_file", &json!({"path": relative, "content": content}).to_string()).expect("write");
                    assert!(outcome.output.is_ok(), "{:?}", outcome.output);
                }
            }
            let started = Instant::now();
            let (found, _) = search(&session, &args);
            after_edits.push(started.elapsed());
            if let Some(rg) = rg.as_deref() {
                assert_eq!(rg_files(rg, "1", LITERAL, &workspace), found, "after the edits: toolcell and rg disagree");
            }
            warm_again.push(time(runs, || search(&session, &args)));
        }
        table.print(&format!("{files} files: first search after 100 edits vs warm"), median(after_edits), median(warm_again), "warm");
        drop(session);
        drop(host);
        std::fs::remove_dir_all(&case).expect("remove the tree");
    }
    denied_files_timing(temp.path(), &cache, if benchmarking { 10_000 } else { 500 }, if benchmarking { 41 } else { 3 }, &mut table);
}

/// A search in two workspaces alike but for what 200 files the role may not read hold (in one,
/// the word searched for): the times should differ by noise only.
fn denied_files_timing(temp: &Path, cache: &Path, files: usize, runs: usize, table: &mut Row<'_>) {
    let policy = format!(
        "{}\n[[roles.impl.rules]]\nid = \"no-secrets\"\naccess = [\"read\", \"list\"]\npaths = [\"secrets/**\"]\neffect = \"deny\"\n",
        toolcell_host::DEFAULT_POLICY
    );
    let sessions: Vec<(Host, Session)> = ["with", "without"]
        .into_iter()
        .map(|case| {
            let workspace = temp.join(format!("denied-{case}/workspace"));
            generate_tree(&workspace, files);
            std::fs::create_dir_all(workspace.join("secrets")).expect("secrets");
            for number in 0..200 {
                let secret = if case == "with" { LITERAL } else { "nothing to see" };
                let mut file = std::fs::File::create(workspace.join(format!("secrets/s{number}.txt"))).expect("secret");
                file.write_all(format!("{secret} {number}\n").as_bytes()).expect("secret");
            }
            std::thread::sleep(Duration::from_millis(1_100));
            let host = host(&workspace, &temp.join(format!("denied-{case}/state")), cache, Some(&policy));
            host.runtime().build_index(host.workspace()).expect("the index builds");
            let session = host.session("impl", "bench").expect("session");
            (host, session)
        })
        .collect();
    let args = json!({"query": LITERAL});
    assert_eq!(search(&sessions[0].1, &args), search(&sessions[1].1, &args), "the answers differ");
    // Interleaved, so that drift in the machine falls on both.
    let [with, without] =
        interleaved(runs, &mut [&mut || drop(search(&sessions[0].1, &args)), &mut || drop(search(&sessions[1].1, &args))]);
    table.print(&format!("{files} files: 200 denied files hold the word vs not"), with, without, "not");
}
