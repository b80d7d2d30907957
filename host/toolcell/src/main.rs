//! The `toolcell` command. Parsing lives in `cli`, the commands in `commands`.

mod cli;
mod commands;
mod demo;
mod report;

fn main() -> std::process::ExitCode {
    let cli = <cli::Cli as clap::Parser>::parse();
    match commands::run(cli) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            std::process::ExitCode::from(commands::EXIT_HOST_ERROR)
        }
    }
}
