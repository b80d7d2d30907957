//! Per-call latency of a built-in tool against native code, in one run.
//!
//! `cargo bench -p toolcell-runtime --bench call` measures, on a 4 KiB file, in one run:
//! - native `std::fs::read_to_string` of the file;
//! - `read_file` through the host with wasmtime-wasi's filesystem linked directly (the baseline,
//!   feature `bench-baseline`);
//! - the same call through the guard without a policy (the workspace boundary only);
//! - the same call with every filesystem call guarded by the default policy;
//! - the same, also writing the audit trail;
//!
//! and `list_files` of a directory of 100 files (native `read_dir`, unguarded, guarded, audited:
//! what the guard adds per entry), and `write_file` of the same 4 KiB, to show what making each call a transaction costs
//! against a plain write: native `std::fs::write`; through the host unguarded (the component's
//! write, no journal); and governed, where the prior content is journaled (copied and synced)
//! and the new content lands through a synced temporary file renamed into place; and the same
//! with `durability = "atomic"` (nothing synced).
//!
//! Each host call includes argument validation, a fresh store and instance (pooling allocator),
//! the component's own work and output conversion. It prints p50/p99 and the ratios. Under `cargo test` (no `--bench` flag) it runs a few
//! iterations only, to keep the benchmark compiling and working.

use std::io::Write as _;
use std::time::{Duration, Instant};

use toolcell_runtime::{CallRequest, RuntimeBuilder, Workspace};

/// The entries of the directory `list_files` lists.
const LISTED: usize = 100;

struct Stats {
    p50: Duration,
    p99: Duration,
    mean: Duration,
}

impl Stats {
    /// What a variant left out by `--only` shows.
    const ZERO: Stats = Stats { p50: Duration::ZERO, p99: Duration::ZERO, mean: Duration::ZERO };
}

fn measure(iterations: usize, mut run: impl FnMut()) -> Stats {
    for _ in 0..iterations / 10 + 1 {
        run();
    }
    let idle = idle_before_each_call();
    let mut samples: Vec<Duration> = (0..iterations)
        .map(|_| {
            if let Some(idle) = idle {
                std::thread::sleep(idle);
            }
            let started = Instant::now();
            run();
            started.elapsed()
        })
        .collect();
    samples.sort_unstable();
    let total: Duration = samples.iter().sum();
    Stats {
        p50: samples[samples.len() / 2],
        p99: samples[(samples.len() * 99 / 100).min(samples.len() - 1)],
        mean: total / u32::try_from(samples.len()).unwrap_or(u32::MAX),
    }
}

/// `--idle-us N`: sleep N µs before each measured call (not counted), so that each call starts
/// on a CPU that has been idle, as calls spaced out by an agent's thinking do.
fn idle_before_each_call() -> Option<Duration> {
    let value = std::env::args().skip_while(|arg| arg != "--idle-us").nth(1)?;
    Some(Duration::from_micros(value.parse().expect("--idle-us takes a number of microseconds")))
}

fn main() {
    let benchmarking = std::env::args().any(|arg| arg == "--bench");
    let iterations = if benchmarking { 5_000 } else { 20 };

    let temp = tempfile::tempdir().expect("temporary directory");
    let root = temp.path().join("workspace");
    let line = "The quick brown fox jumps over the lazy dog, again and again.\n";
    let content: String = line.repeat(4096 / line.len() + 1)[..4096].to_owned();
    std::fs::create_dir(&root).expect("create workspace");
    std::fs::write(root.join("file.txt"), &content).expect("write file");
    let policy = include_str!("../../../policies/default.toml");
    let builder = || {
        // `TOOLCELL_BENCH_CACHE` keeps compiled components between runs, so that a profile of
        // one `--only` variant shows the calls rather than the compiler.
        let cache = std::env::var_os("TOOLCELL_BENCH_CACHE").map_or_else(|| temp.path().join("cache"), std::path::PathBuf::from);
        let mut builder = RuntimeBuilder::new().cache_dir(cache);
        for (name, wasm) in toolcell_builtins::components() {
            builder = builder.component(format!("builtin:{name}"), wasm);
        }
        builder
    };
    let workspace = Workspace::open(&root).expect("workspace");
    let request = CallRequest::new(&workspace, "impl", "bench", "read_file", r#"{"path": "file.txt"}"#);
    let write_args = serde_json::json!({"path": "written.txt", "content": content}).to_string();
    let write_request = CallRequest { tool: "write_file", args: &write_args, ..request };
    // One runtime at a time, as in production: each has its own engine, pool and epoch ticker,
    // and several alive at once would slow each other down.
    // `--only WORD` measures only the runtimes whose label contains WORD (for profiling one).
    let only: Option<String> = std::env::args().skip_while(|arg| arg != "--only").nth(1);
    let measure_call = |label: &str, builder: RuntimeBuilder, request: &CallRequest<'_>| {
        if only.as_ref().is_some_and(|only| !format!("{} {label}", request.tool).contains(only.as_str())) {
            return Stats::ZERO;
        }
        let runtime = builder.build().expect("runtime builds");
        measure(iterations, || {
            let outcome = runtime.call(request).expect("call runs");
            assert!(outcome.result.is_ok(), "{:?}", outcome.result);
        })
    };
    let measure_runtime = |label: &str, builder: RuntimeBuilder| measure_call(label, builder, &request);

    // Native baselines are skipped with `--only`, so that a profile shows only that runtime.
    let native_only = |run: &mut dyn FnMut()| if only.is_some() { Stats::ZERO } else { measure(iterations, run) };
    let native = native_only(&mut || {
        let text = std::fs::read_to_string(root.join("file.txt")).expect("read");
        assert_eq!(text.len(), 4096);
    });
    let baseline = measure_runtime("unguarded", builder().without_filesystem_guard());
    let boundary_only = measure_runtime("boundary", builder());
    let governed = measure_runtime("governed", builder().policy("policies/default.toml", policy));
    let with_audit = measure_runtime("audited", builder().policy("policies/default.toml", policy).audit_dir(temp.path().join("state")));

    let native_write = native_only(&mut || {
        std::fs::write(root.join("native.txt"), &content).expect("write");
    });
    let write_baseline = measure_call("unguarded", builder().without_filesystem_guard(), &write_request);
    let write_governed = measure_call("governed", builder().policy("policies/default.toml", policy), &write_request);
    let write_audited = measure_call(
        "audited",
        builder().policy("policies/default.toml", policy).audit_dir(temp.path().join("write-state")),
        &write_request,
    );
    let atomic_policy = policy.replace("durability = \"full\"", "durability = \"atomic\"");
    let write_atomic = measure_call(
        "atomic",
        builder().policy("policies/default.toml", atomic_policy).audit_dir(temp.path().join("atomic-state")),
        &write_request,
    );

    // list_files of a directory of LISTED entries: what the guard adds per entry (its listing,
    // each entry judged), against wasmtime-wasi's own listing and a native read_dir.
    std::fs::create_dir(root.join("list")).expect("create the listed directory");
    for number in 0..LISTED {
        std::fs::write(root.join(format!("list/file-{number:03}.txt")), "x\n").expect("write file");
    }
    let list_request = CallRequest { tool: "list_files", args: r#"{"path": "list"}"#, ..request };
    let native_list = native_only(&mut || {
        let mut names: Vec<_> =
            std::fs::read_dir(root.join("list")).expect("read_dir").map(|entry| entry.expect("entry").file_name()).collect();
        names.sort_unstable();
        assert_eq!(names.len(), LISTED);
    });
    let list_baseline = measure_call("unguarded", builder().without_filesystem_guard(), &list_request);
    let list_governed = measure_call("governed", builder().policy("policies/default.toml", policy), &list_request);
    let list_audited =
        measure_call("audited", builder().policy("policies/default.toml", policy).audit_dir(temp.path().join("list-state")), &list_request);

    let mut out = std::io::stderr().lock();
    let _ = writeln!(out, "read_file on a 4 KiB file, fresh instance per call, {iterations} iterations each");
    let _ = writeln!(out, "{:<48} {:>10} {:>10} {:>10}", "", "p50", "p99", "mean");
    for (name, stats) in [
        ("native std::fs::read_to_string", &native),
        ("toolcell, filesystem unguarded (baseline)", &baseline),
        ("toolcell, guard without a policy (boundary only)", &boundary_only),
        ("toolcell, guarded by the default policy", &governed),
        ("toolcell, guarded, with the audit trail", &with_audit),
    ] {
        let _ = writeln!(out, "{name:<48} {:>8.1}µs {:>8.1}µs {:>8.1}µs", micros(stats.p50), micros(stats.p99), micros(stats.mean));
    }
    // Ratios are printed only when `--only` left both sides measured.
    if baseline.p50 > Duration::ZERO && governed.p50 > Duration::ZERO {
        let guard_ratio = micros(governed.p50) / micros(baseline.p50);
        let _ = writeln!(
            out,
            "guard / unguarded at p50: {guard_ratio:.2}x (target <= 1.15x: {})",
            if guard_ratio <= 1.15 { "met" } else { "NOT met" }
        );
    }
    let _ = writeln!(
        out,
        "guarded p50 {:.1}µs (target <= 50µs: {}); audit adds {:.1}µs per call at p50",
        micros(governed.p50),
        if governed.p50 <= Duration::from_micros(50) { "met" } else { "NOT met" },
        micros(with_audit.p50) - micros(governed.p50)
    );
    if native.p50 > Duration::ZERO && governed.p50 > Duration::ZERO {
        let _ = writeln!(out, "toolcell / native at p50: {:.1}x", micros(governed.p50) / micros(native.p50));
    }

    let _ = writeln!(out);
    let _ = writeln!(out, "write_file of 4 KiB over an existing file, {iterations} iterations each");
    let _ = writeln!(out, "{:<48} {:>10} {:>10} {:>10}", "", "p50", "p99", "mean");
    for (name, stats) in [
        ("native std::fs::write", &native_write),
        ("toolcell, unguarded (plain write, no journal)", &write_baseline),
        ("toolcell, governed transaction", &write_governed),
        ("toolcell, governed transaction with audit", &write_audited),
        ("the same, durability = \"atomic\" (no sync)", &write_atomic),
    ] {
        let _ = writeln!(out, "{name:<48} {:>8.1}µs {:>8.1}µs {:>8.1}µs", micros(stats.p50), micros(stats.p99), micros(stats.mean));
    }
    if write_baseline.p50 > Duration::ZERO && write_governed.p50 > Duration::ZERO {
        let _ = writeln!(
            out,
            "transaction / plain write at p50: {:.2}x (journal, synced temporary file, rename)",
            micros(write_governed.p50) / micros(write_baseline.p50)
        );
    }

    let _ = writeln!(out);
    let _ = writeln!(out, "list_files of {LISTED} entries, {iterations} iterations each");
    let _ = writeln!(out, "{:<48} {:>10} {:>10} {:>10}", "", "p50", "p99", "mean");
    for (name, stats) in [
        ("native std::fs::read_dir, sorted", &native_list),
        ("toolcell, filesystem unguarded (baseline)", &list_baseline),
        ("toolcell, guarded by the default policy", &list_governed),
        ("toolcell, guarded, with the audit trail", &list_audited),
    ] {
        let _ = writeln!(out, "{name:<48} {:>8.1}µs {:>8.1}µs {:>8.1}µs", micros(stats.p50), micros(stats.p99), micros(stats.mean));
    }
    if list_baseline.p50 > Duration::ZERO && list_governed.p50 > Duration::ZERO && baseline.p50 > Duration::ZERO {
        let _ = writeln!(
            out,
            "guard / unguarded at p50: {:.2}x; per entry over read_file: {:.2}µs unguarded, {:.2}µs guarded",
            micros(list_governed.p50) / micros(list_baseline.p50),
            (micros(list_baseline.p50) - micros(baseline.p50)) / LISTED as f64,
            (micros(list_governed.p50) - micros(governed.p50)) / LISTED as f64,
        );
    }
}

fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}
