//! Calls per second of one runtime shared by threads, with the audit trail on: two threads
//! against one, in one run (`cargo bench -p toolcell-runtime --bench threads`). Each call is a
//! governed `read_file` of a 4 KiB file, whose record goes to the trail. On two cores the goal
//! is two threads ≥ 1.8× one. Under `cargo test` it runs a few calls only.
//!
//! It runs on the allocator the `toolcell` binary ships with, mimalloc: on glibc's malloc the
//! two threads contend on its arenas, and the ratio falls to 1.6–1.9× from run to run.

use std::io::Write as _;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use std::time::{Duration, Instant};

use toolcell_runtime::{CallRequest, RuntimeBuilder, Workspace};

fn main() {
    let benchmarking = std::env::args().any(|arg| arg == "--bench");
    let window = if benchmarking { Duration::from_secs(3) } else { Duration::from_millis(200) };
    let temp = tempfile::tempdir().expect("temporary directory");
    let root = temp.path().join("workspace");
    std::fs::create_dir(&root).expect("create workspace");
    std::fs::write(root.join("file.txt"), "x".repeat(4096)).expect("write file");
    let mut builder = RuntimeBuilder::new()
        .cache_dir(temp.path().join("cache"))
        .policy("policies/default.toml", include_str!("../../../policies/default.toml"))
        .audit_dir(temp.path().join("state"));
    for (name, wasm) in toolcell_builtins::components() {
        builder = builder.component(format!("builtin:{name}"), wasm);
    }
    let runtime = builder.build().expect("runtime builds");
    let workspace = Workspace::open(&root).expect("workspace");
    // Calls per second from `threads` threads for `window`, after a warm-up.
    let rate = |threads: usize| -> f64 {
        let calls = std::sync::atomic::AtomicU64::new(0);
        let run = |until: Instant, count: bool| {
            let session = format!("bench-{}", std::thread::current().name().unwrap_or("main"));
            while Instant::now() < until {
                let outcome = runtime
                    .call(&CallRequest::new(&workspace, "impl", &session, "read_file", r#"{"path": "file.txt"}"#))
                    .expect("call runs");
                assert!(outcome.result.is_ok(), "{:?}", outcome.result);
                if count {
                    calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
        };
        let warm = Instant::now() + window / 4;
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| run(warm, false));
            }
        });
        let started = Instant::now();
        let until = started + window;
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| run(until, true));
            }
        });
        calls.into_inner() as f64 / started.elapsed().as_secs_f64()
    };
    // In turn, three times, so that neither gets the machine's quiet moments alone.
    let (mut one, mut two) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        one.push(rate(1));
        two.push(rate(2));
    }
    let best = |rates: &[f64]| rates.iter().copied().fold(0.0, f64::max);
    let (one, two) = (best(&one), best(&two));
    let text = runtime.audit().expect("an audit trail").read().expect("read the trail");
    toolcell_audit::verify(text.lines()).expect("the trail the threads wrote is one intact chain");
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "| threads | calls/s | vs one thread |\n|---|---|---|");
    let _ = writeln!(stdout, "| 1 | {one:.0} | 1.00× |");
    let _ = writeln!(stdout, "| 2 | {two:.0} | {:.2}× (goal ≥ 1.80×) |", two / one);
}
