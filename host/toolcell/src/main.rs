//! The `toolcell` command. Parsing lives in `cli`, the commands in `commands`.

mod cli;
mod commands;
mod demo;
mod report;
mod sdk;

fn main() -> std::process::ExitCode {
    let cli = <cli::Cli as clap::Parser>::parse();
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
