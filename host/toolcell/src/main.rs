//! The `toolcell` command. Parsing lives in `cli`, the commands in `commands`.

mod cli;
mod commands;
mod demo;
mod report;
mod sdk;

/// Threads that share one runtime allocate at every call; glibc's malloc serializes them on
/// its arenas (two threads on one audited runtime measured 1.6–1.9× one; with mimalloc
/// 1.9–2.0×, `cargo bench -p toolcell-runtime --bench threads`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    let cli = <cli::Cli as clap::Parser>::parse();
    // Calls hold descriptors for what they have in flight, and `serve` one per connection.
    let _ = toolcell_runtime::raise_open_file_limit();
    match commands::run(cli) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {}", describe(&error));
            std::process::ExitCode::from(commands::EXIT_HOST_ERROR)
        }
    }
}

/// The error and its causes, each once: a cause whose text the message already holds (an
/// error type that prints its source, and also reports it as its source) is not repeated.
fn describe(error: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in error.chain() {
        let cause = cause.to_string();
        if text.contains(&cause) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&cause);
    }
    text
}
