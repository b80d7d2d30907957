//! The book in `docs/`: its tool reference is generated from the tools' own descriptions and
//! schemas (so it cannot drift from what agents see), and every relative link in it and in the
//! READMEs leads to a file that exists. `TOOLCELL_BLESS_DOCS=1` rewrites the reference.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::Value;
use toolcell_tests::builtin_runtime_builder;

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the repository").to_path_buf()
}

/// A schema's type, readably: `string`, `integer`, `array of string`, `"a" | "b"`.
fn type_of(schema: &Value) -> String {
    if let Some(choices) = schema.get("enum").and_then(Value::as_array) {
        return choices.iter().map(Value::to_string).collect::<Vec<_>>().join(" \\| ");
    }
    match schema.get("type") {
        Some(Value::String(kind)) if kind == "array" => match schema.get("items") {
            Some(items) => format!("array of {}", type_of(items)),
            None => "array".to_owned(),
        },
        Some(Value::String(kind)) => kind.clone(),
        Some(Value::Array(kinds)) => kinds.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(" or "),
        _ if schema.get("oneOf").is_some() || schema.get("anyOf").is_some() => "one of several shapes".to_owned(),
        _ => "any".to_owned(),
    }
}

/// One table cell: no line breaks, no pipes.
fn cell(text: &str) -> String {
    text.replace('\n', " ").replace('|', "\\|")
}

/// The reference page, from the tools the host loads.
fn reference() -> String {
    let runtime = builtin_runtime_builder().build().expect("the runtime builds");
    let mut page = String::from(
        "# Tool reference\n\n<!-- Generated from the tools' own descriptions and schemas by `tests/tests/integration/docs.rs`; \
         do not edit: run `TOOLCELL_BLESS_DOCS=1 cargo test -p toolcell-tests --test integration docs` instead. -->\n\n\
         Every tool an agent can be given, as the host describes it to agents: its description, its parameters (from its \
         input schema) and its hints. Which of them a role may call is the policy's choice (see \
         [Governance and policies](governance.md)).\n",
    );
    for tool in runtime.tools() {
        let hints: Vec<&str> = [
            (tool.annotations.read_only, "read-only"),
            (tool.annotations.destructive, "destructive"),
            (tool.annotations.idempotent, "idempotent"),
        ]
        .into_iter()
        .filter_map(|(set, hint)| set.then_some(hint))
        .collect();
        let _ = write!(page, "\n## `{}`: {}\n\n{}\n", tool.name, tool.title, tool.description.trim());
        if !hints.is_empty() {
            let _ = write!(page, "\nHints: {}.\n", hints.join(", "));
        }
        let required: Vec<&str> =
            tool.input_schema.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
        let properties = tool.input_schema.get("properties").and_then(Value::as_object);
        match properties {
            Some(properties) if !properties.is_empty() => {
                page.push_str("\n| parameter | type | required | description |\n|---|---|---|---|\n");
                for (name, schema) in properties {
                    let description = schema.get("description").and_then(Value::as_str).unwrap_or("");
                    let _ = writeln!(
                        page,
                        "| `{name}` | {} | {} | {} |",
                        cell(&type_of(schema)),
                        if required.contains(&name.as_str()) { "yes" } else { "no" },
                        cell(description)
                    );
                }
            }
            _ => page.push_str("\nNo parameters.\n"),
        }
    }
    page
}

#[test]
fn the_tool_reference_is_generated_from_the_tools_themselves() {
    let path = repository().join("docs/src/tools.md");
    let generated = reference();
    if std::env::var_os("TOOLCELL_BLESS_DOCS").is_some_and(|value| value == "1") {
        std::fs::write(&path, &generated).expect("write the reference");
        return;
    }
    let written = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        written == generated,
        "docs/src/tools.md differs from what the tools say of themselves: run `TOOLCELL_BLESS_DOCS=1 cargo test -p toolcell-tests --test integration docs` and commit the result"
    );
}

/// The relative link targets of a Markdown text (`[text](target)`), without their anchors;
/// links to the web and to anchors on the same page are left out.
fn relative_links(text: &str) -> Vec<String> {
    let mut links = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("](") {
        rest = &rest[start + 2..];
        let Some(end) = rest.find(')') else { break };
        let target = rest[..end].split_whitespace().next().unwrap_or("");
        let target = target.split('#').next().unwrap_or("");
        if !target.is_empty() && !target.contains("://") && !target.starts_with("mailto:") {
            links.push(target.to_owned());
        }
        rest = &rest[end..];
    }
    links
}

#[test]
fn every_relative_link_of_the_book_and_the_readmes_leads_somewhere() {
    let root = repository();
    let mut pages: Vec<PathBuf> = vec![root.join("README.md"), root.join("guest-tools/README.md")];
    for entry in std::fs::read_dir(root.join("docs/src")).expect("docs/src") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|extension| extension == "md") {
            pages.push(path);
        }
    }
    let mut broken = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).expect("read a page");
        let directory = page.parent().expect("a directory");
        for target in relative_links(&text) {
            if !directory.join(&target).exists() {
                broken.push(format!("{}: {target}", page.strip_prefix(&root).unwrap_or(page).display()));
            }
        }
        // An `{{#include}}` names a file too.
        for line in text.lines().filter_map(|line| line.trim().strip_prefix("{{#include ")) {
            let target = line.trim_end_matches("}}").trim();
            if !directory.join(target).exists() {
                broken.push(format!("{}: include {target}", page.display()));
            }
        }
    }
    // The book's table of contents names every page, and every page is in it.
    let summary = std::fs::read_to_string(root.join("docs/src/SUMMARY.md")).expect("SUMMARY.md");
    for page in pages.iter().filter(|page| page.starts_with(root.join("docs/src"))) {
        let name = page.file_name().expect("name").to_string_lossy().into_owned();
        if name != "SUMMARY.md" && !summary.contains(&format!("({name})")) {
            broken.push(format!("docs/src/SUMMARY.md does not list {name}"));
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}
