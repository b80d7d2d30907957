//! What the benchmarks share: timing, percentiles, and a small deterministic random source
//! for generated trees and random edits (the tests use it too).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The `percent`-th percentile of `samples` (sorted in place).
///
/// # Panics
///
/// If `samples` is empty.
pub fn percentile(samples: &mut [Duration], percent: usize) -> Duration {
    samples.sort_unstable();
    samples[(samples.len() * percent / 100).min(samples.len() - 1)]
}

/// The median of `samples`.
///
/// # Panics
///
/// If `samples` is empty.
pub fn median(mut samples: Vec<Duration>) -> Duration {
    percentile(&mut samples, 50)
}

/// The median times of `runs` runs of each of `runs_of`, run in turn (after one run each to
/// warm up).
pub fn interleaved<const N: usize>(runs: usize, runs_of: &mut [&mut dyn FnMut(); N]) -> [Duration; N] {
    let mut samples: [Vec<Duration>; N] = std::array::from_fn(|_| Vec::with_capacity(runs));
    for run in 0..=runs {
        // Each run starts with the next one, so that none always follows the same.
        for step in 0..N {
            let which = (run + step) % N;
            let started = Instant::now();
            runs_of[which]();
            if run > 0 {
                samples[which].push(started.elapsed());
            }
        }
    }
    samples.map(median)
}

/// The median time of `runs` runs of `run`, after one run to warm up.
pub fn time<T>(runs: usize, mut run: impl FnMut() -> T) -> Duration {
    run();
    median(
        (0..runs)
            .map(|_| {
                let started = Instant::now();
                std::hint::black_box(run());
                started.elapsed()
            })
            .collect(),
    )
}

/// `rg` (ripgrep), if it is installed (`.ci/bench` installs it).
pub fn ripgrep() -> Option<PathBuf> {
    let output = Command::new("rg").arg("--version").output().ok()?;
    output.status.success().then(|| PathBuf::from("rg"))
}

/// The files `rg -l` (with `rg`, on `threads` threads) lists for `pattern` under `workspace`,
/// workspace-relative and sorted.
///
/// # Panics
///
/// If `rg` cannot be run.
pub fn rg_files(rg: &Path, threads: &str, pattern: &str, workspace: &Path) -> Vec<String> {
    let output = Command::new(rg)
        .args(["-j", threads, "-l", "--no-messages", "--no-ignore", "--hidden", "-e", pattern])
        .current_dir(workspace)
        .arg(".")
        .output()
        .expect("run rg");
    let mut files: Vec<String> =
        String::from_utf8_lossy(&output.stdout).lines().map(|line| line.trim_start_matches("./").to_owned()).collect();
    files.sort();
    files
}

/// A small deterministic random source (xorshift): the same sequence for the same seed.
pub struct Random(pub u64);

impl Random {
    /// A number below `bound`.
    pub fn below(&mut self, bound: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % bound as u64) as usize
    }

    /// One of `choices`.
    pub fn pick<'a>(&mut self, choices: &[&'a str]) -> &'a str {
        choices[self.below(choices.len())]
    }
}

/// Planted in two files of every five, as `// gamma N delta`: a regex over it (`gamma.*delta`)
/// fills a page of 10,000 files long before a tree of 50,000 ends.
pub const GAMMA_DELTA: &str = "gamma.*delta";
/// A word in one file of every 1,000.
pub const LITERAL: &str = "zebra_quartz_needle";
/// Spelled `QuartzHeron` in one file of every 2,000 and `quartzheron` in another.
pub const MIXED_CASE: &str = "quartzheron";

const WORDS: [&str; 24] = [
    "let", "value", "compute", "result", "match", "return", "self", "config", "buffer", "index", "parse", "token", "error", "string",
    "vector", "option", "handle", "stream", "reader", "writer", "thread", "signal", "layout", "render",
];

/// The tree the benchmark searches: `files` source-like files of 10 to 80 lines, 100 to a
/// directory two levels deep, from a fixed seed (the same tree every run). Planted: [`LITERAL`]
/// in one file of every 1,000, `fn needle_handler_N` in one of every 500, [`MIXED_CASE`] in two
/// spellings, and identifiers of the shape `abc_123456` (no literal) in one of every 700, and `// gamma N delta` in two of every five
/// ([`GAMMA_DELTA`]). Run
/// `cargo bench -p toolcell --bench index -- --generate DIR FILES` to write one and stop.
///
/// # Panics
///
/// If the tree cannot be written.
pub fn generate_tree(root: &Path, files: usize) {
    let mut random = Random(0x5DEE_CE66_D1CE_F00D);
    for index in 0..files {
        let directory = root.join(format!("pkg{:03}/mod{:02}", index / 1000, index / 100 % 10));
        if index % 100 == 0 {
            std::fs::create_dir_all(&directory).expect("create directory");
        }
        let mut text = format!("// file {index}\nfn f{index}() {{\n");
        for _ in 0..10 + random.below(70) {
            let words: Vec<&str> = (0..3 + random.below(8)).map(|_| WORDS[random.below(WORDS.len())]).collect();
            text.push_str(&format!("    {} = {}({});\n", words[0], words[1], words[2..].join(", ")));
        }
        if index % 5 < 2 {
            text.push_str(&format!("    // gamma {index} delta\n"));
        }
        if index % 1000 == 7 {
            text.push_str(&format!("    // {LITERAL}\n"));
        }
        if index % 500 == 3 {
            text.push_str(&format!("fn needle_handler_{index}() {{}}\n"));
        }
        if index % 2000 == 11 {
            text.push_str("    // QuartzHeron\n");
        }
        if index % 2000 == 1011 {
            text.push_str(&format!("    // {MIXED_CASE}\n"));
        }
        if index % 700 == 5 {
            text.push_str(&format!("    let kqz_{:06} = 1;\n", 100_000 + index));
        }
        text.push_str("}\n");
        let mut file = std::fs::File::create(directory.join(format!("file{index:06}.rs"))).expect("create file");
        file.write_all(text.as_bytes()).expect("write file");
    }
    // Older than a second, as a checked-out tree is: the index does not trust a stamp from the
    // last second.
    std::thread::sleep(Duration::from_millis(1_100));
}
