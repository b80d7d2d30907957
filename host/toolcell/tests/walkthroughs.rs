//! The walkthroughs of `guest-tools/README.md`, run as a new user runs them: from an empty
//! directory, every command and file the page marks (`<!-- walkthrough LANGUAGE -->` before a
//! shell block, `<!-- walkthrough LANGUAGE: FILE -->` before a file's block), in order, with
//! `toolcell` on the `PATH` and a home directory of its own. Only the toolchain's install line
//! is swapped for the pinned toolchain the tests already have (same versions, checked).

use std::path::{Path, PathBuf};
use std::process::Command;

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A marked block of the page: the file it is (`None` for commands) and its text.
struct Block {
    file: Option<String>,
    text: String,
}

/// The blocks the page marks for `language`, in order.
fn blocks(page: &str, language: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut lines = page.lines();
    while let Some(line) = lines.next() {
        let Some(marker) = line.trim().strip_prefix("<!-- walkthrough ").and_then(|rest| rest.strip_suffix(" -->")) else {
            continue;
        };
        let (marked, file) = match marker.split_once(": ") {
            Some((marked, file)) => (marked, Some(file.to_owned())),
            None => (marker, None),
        };
        if marked != language {
            continue;
        }
        let fence = lines.next().expect("a code block follows a walkthrough marker");
        assert!(fence.starts_with("```"), "a code block follows `{line}`, not `{fence}`");
        let text: Vec<&str> = lines.by_ref().take_while(|line| !line.starts_with("```")).collect();
        blocks.push(Block { file, text: text.join("\n") + "\n" });
    }
    blocks
}

/// The version `.ci/language-toolchains` pins as `name` (`PY_VERSION`).
fn pinned(name: &str) -> String {
    let script = std::fs::read_to_string(repository().join(".ci/language-toolchains")).expect("read .ci/language-toolchains");
    script
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("{name} in .ci/language-toolchains"))
        .to_owned()
}

/// Run the walkthrough for `language` in a fresh directory; its output.
fn walk(language: &str, install_line: &str, installed: &str) -> String {
    let page = std::fs::read_to_string(repository().join("guest-tools/README.md")).expect("read guest-tools/README.md");
    let blocks = blocks(&page, language);
    assert!(blocks.len() >= 4, "the {language} walkthrough has its marked blocks: {}", blocks.len());
    let mut script = String::new();
    let mut swapped = false;
    for block in &blocks {
        match &block.file {
            Some(file) => script.push_str(&format!("cat > '{file}' <<'WALKTHROUGH_END'\n{}WALKTHROUGH_END\n", block.text)),
            None => {
                for line in block.text.lines() {
                    if line.trim() == install_line {
                        script.push_str(installed);
                        swapped = true;
                    } else {
                        script.push_str(line);
                    }
                    script.push('\n');
                }
            }
        }
    }
    assert!(swapped, "the {language} walkthrough installs its toolchain with `{install_line}` (the pinned version)");

    let temp = tempfile::tempdir().expect("temporary directory");
    let directory = temp.path().join("walkthrough");
    let home = temp.path().join("home");
    std::fs::create_dir_all(&directory).expect("create the directory");
    std::fs::create_dir_all(&home).expect("create the home directory");
    let binary = PathBuf::from(env!("CARGO_BIN_EXE_toolcell"));
    let node = toolcell_tests::languages::node();
    let mut path = vec![binary.parent().expect("the binary's directory").to_path_buf()];
    if let Some(directory) = node.parent().filter(|directory| !directory.as_os_str().is_empty()) {
        path.push(directory.to_path_buf());
    }
    path.extend(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()));
    let mut command = Command::new("bash");
    command.args(["-euo", "pipefail", "-c", &script]).current_dir(&directory);
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if name.starts_with("TOOLCELL_") || name.starts_with("XDG_") {
            command.env_remove(name.as_ref());
        }
    }
    let output = command
        .env("HOME", &home)
        .env("PATH", std::env::join_paths(path).expect("PATH"))
        // Compiled components are kept between test runs, by their hash.
        .env("TOOLCELL_CACHE_DIR", toolcell_tests::shared_cache_dir())
        .output()
        .expect("run bash");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "the {language} walkthrough failed:\n--- script\n{script}\n--- stdout\n{stdout}\n--- stderr\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

#[test]
fn the_python_walkthrough_runs_from_an_empty_directory() {
    let (componentize_py, _) = toolcell_tests::languages::toolchains();
    let install = format!("python3 -m venv .venv && .venv/bin/pip install componentize-py=={}", pinned("PY_VERSION"));
    let installed = format!("mkdir -p .venv/bin && ln -s '{}' .venv/bin/componentize-py", componentize_py.display());
    let output = walk("python", &install, &installed);
    assert!(output.trim_end().ends_with("notes.txt: 3 lines"), "{output}");
}

#[test]
fn the_javascript_walkthrough_runs_from_an_empty_directory() {
    let (_, componentize_js) = toolcell_tests::languages::toolchains();
    let install = format!("npm install @bytecodealliance/componentize-js@{}", pinned("JS_VERSION"));
    let installed = format!("ln -s '{}' node_modules", componentize_js.join("node_modules").display());
    let output = walk("javascript", &install, &installed);
    assert!(output.trim_end().ends_with("notes.txt: 3 lines"), "{output}");
}

/// The help `toolcell ARGS --help` prints.
fn help(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_toolcell")).args(args).arg("--help").output().expect("run toolcell --help");
    assert!(output.status.success(), "`toolcell {} --help` fails", args.join(" "));
    String::from_utf8(output.stdout).expect("UTF-8 help")
}

/// The subcommands a help text lists under `Commands:`.
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|line| line.trim() != "Commands:")
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        .filter_map(|line| line.split_whitespace().next().map(str::to_owned))
        .collect()
}

/// Every shell line of the book and the READMEs that runs `toolcell`, with its page.
fn documented_commands() -> Vec<(String, String)> {
    let root = repository();
    let mut pages = vec![root.join("README.md"), root.join("guest-tools/README.md")];
    for entry in std::fs::read_dir(root.join("docs/src")).expect("docs/src").flatten() {
        if entry.path().extension().is_some_and(|extension| extension == "md") {
            pages.push(entry.path());
        }
    }
    let mut commands = Vec::new();
    for page in pages {
        let text = std::fs::read_to_string(&page).expect("read a page");
        let name = page.file_name().expect("a name").to_string_lossy().into_owned();
        let mut in_shell = false;
        for line in text.lines() {
            let trimmed = line.trim();
            if let Some(fence) = trimmed.strip_prefix("```") {
                in_shell = !in_shell && matches!(fence, "sh" | "bash" | "console" | "shell");
                continue;
            }
            if !in_shell {
                continue;
            }
            let code = trimmed.strip_prefix("$ ").unwrap_or(trimmed);
            for segment in code.split(['|', ';', '&']) {
                let segment = segment.trim();
                if segment.starts_with("toolcell ") {
                    commands.push((name.clone(), segment.to_owned()));
                }
            }
        }
    }
    commands
}

#[test]
fn every_toolcell_command_the_docs_show_exists_with_its_options() {
    let global = help(&[]);
    let commands = subcommands(&global);
    let takes_value = |option: &str| global.lines().any(|line| line.contains(&format!("{option} <")));
    let mut wrong = Vec::new();
    let documented = documented_commands();
    assert!(documented.len() > 30, "the docs show toolcell commands: {}", documented.len());
    for (page, line) in documented {
        // `[--json]` is an optional `--json`.
        let words: Vec<&str> = line
            .split_whitespace()
            .take_while(|word| !word.starts_with('#'))
            .skip(1)
            .map(|word| if word.starts_with("[-") { word.trim_matches(['[', ']']) } else { word })
            .collect();
        let mut index = 0;
        while index < words.len() && words[index].starts_with('-') {
            index += if takes_value(words[index]) && !words[index].contains('=') { 2 } else { 1 };
        }
        let Some(command) = words.get(index) else {
            continue;
        };
        if !commands.iter().any(|known| known == command) {
            wrong.push(format!("{page}: `{line}`: no command `{command}`"));
            continue;
        }
        let mut path = vec![*command];
        let mut text = help(&path);
        let nested = subcommands(&text);
        if !nested.is_empty() {
            match words.get(index + 1) {
                Some(sub) if nested.iter().any(|known| known == sub) => {
                    path.push(sub);
                    text = help(&path);
                }
                Some(sub) if !sub.starts_with('-') => {
                    wrong.push(format!("{page}: `{line}`: `{command}` has no subcommand `{sub}`"));
                    continue;
                }
                _ => {}
            }
        }
        for option in words[index..].iter().filter(|word| word.starts_with("--")) {
            let option = option.split('=').next().unwrap_or(option);
            if !text.contains(option) && !global.contains(option) {
                wrong.push(format!("{page}: `{line}`: `toolcell {}` has no option `{option}`", path.join(" ")));
            }
        }
    }
    assert!(wrong.is_empty(), "commands in the docs that toolcell does not have:\n{}", wrong.join("\n"));
}

#[test]
fn the_install_command_the_docs_give_builds_the_toolcell_binary() {
    let install = "cargo install --locked --path host/toolcell";
    for page in ["README.md", "docs/src/getting-started.md"] {
        let text = std::fs::read_to_string(repository().join(page)).expect("read the page");
        assert!(text.contains(install), "{page} says how to install `toolcell`: `{install}`");
    }
    let manifest = std::fs::read_to_string(repository().join("host/toolcell/Cargo.toml")).expect("read the manifest");
    assert!(manifest.contains("name = \"toolcell\""), "host/toolcell is the package of the `toolcell` binary");
    assert_eq!(Path::new(env!("CARGO_BIN_EXE_toolcell")).file_name().and_then(|name| name.to_str()), Some("toolcell"));
}
