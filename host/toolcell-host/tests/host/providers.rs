//! The providers' built-in tools through the embedding API, with the payloads their documents
//! show: Anthropic's text editor tool and OpenAI's `apply_patch` tool, each carried out by the
//! governed tools (their gates, policy and audit).

use serde_json::{Value, json};
use toolcell_host::HostBuilder;
use toolcell_host::providers::ProviderError;

/// `impl` and `reviewer` may call the text editor; only `impl` may edit.
const POLICY: &str = r#"
version = 1

[roles.impl]
tools = ["str_replace_based_edit_tool", "read_file", "directory_tree", "write_file", "edit_file", "insert_text", "undo_edit", "apply_patch"]

[[roles.impl.rules]]
id = "impl-all"
access = ["read", "list", "write", "delete"]
paths = ["**"]
effect = "allow"

[[roles.impl.rules]]
id = "secrets"
access = ["read", "list", "write", "delete"]
paths = ["secrets/**"]
effect = "deny"

[roles.reviewer]
tools = ["str_replace_based_edit_tool", "read_file", "directory_tree"]

[[roles.reviewer.rules]]
id = "reviewer-read"
access = ["read", "list"]
paths = ["**"]
effect = "allow"
"#;

/// `primes.py` of the text editor tool's documented example, with its syntax error.
const PRIMES: &str = "def is_prime(n):\n    \"\"\"Check if a number is prime.\"\"\"\n    if n <= 1:\n        return False\n    return all(n % i for i in range(2, n))\n\ndef get_primes(limit):\n    \"\"\"Generate a list of prime numbers up to the given limit.\"\"\"\n    primes = []\n    for num in range(2, limit + 1)\n        if is_prime(num):\n            primes.append(num)\n    return primes\n";

fn host() -> (tempfile::TempDir, toolcell_host::Host) {
    let base = tempfile::tempdir().expect("temporary directory");
    let repo = base.path().join("repo");
    std::fs::create_dir_all(repo.join("secrets")).expect("mkdir");
    std::fs::write(repo.join("primes.py"), PRIMES).expect("write");
    std::fs::write(repo.join("secrets/key.txt"), "hunter2\n").expect("write");
    let host = HostBuilder::new(&repo)
        .policy_text("providers.toml", POLICY)
        .state_dir(base.path().join("state"))
        .cache_dir(base.path().join("cache"))
        .build()
        .expect("host builds");
    (base, host)
}

fn tool_use(id: &str, input: Value) -> Value {
    json!({"type": "tool_use", "id": id, "name": "str_replace_based_edit_tool", "input": input})
}

fn content(result: &Value) -> &str {
    result["content"].as_str().expect("content text")
}

#[test]
fn the_text_editor_tool_answers_each_documented_command() {
    let (base, host) = host();
    let session = host.session("impl", "s-claude").expect("session");
    let answer = |id: &str, input: Value| session.answer_anthropic_tool_use(&tool_use(id, input)).expect("answered");

    let viewed = answer("toolu_01AbCdEfGhIjKlMnOpQrStU", json!({"command": "view", "path": "primes.py"}));
    assert_eq!(viewed["type"], "tool_result");
    assert_eq!(viewed["tool_use_id"], "toolu_01AbCdEfGhIjKlMnOpQrStU");
    assert!(viewed.get("is_error").is_none(), "{viewed}");
    assert!(content(&viewed).starts_with("Here's the result of running `cat -n` on primes.py:\n     1\tdef is_prime(n):\n"), "{viewed}");
    assert!(content(&viewed).contains("    10\t    for num in range(2, limit + 1)\n"), "{viewed}");

    let ranged = answer("toolu_02", json!({"command": "view", "path": "primes.py", "view_range": [10, 11]}));
    assert!(content(&ranged).contains("    10\t    for num in range(2, limit + 1)\n    11\t        if is_prime(num):"), "{ranged}");
    assert!(!content(&ranged).contains("     9\t"), "{ranged}");
    let to_end = answer("toolu_03", json!({"command": "view", "path": "primes.py", "view_range": [12, -1]}));
    assert!(content(&to_end).contains("    13\t    return primes"), "{to_end}");

    let replaced = answer(
        "toolu_01PqRsTuVwXyZAbCdEfGh",
        json!({"command": "str_replace", "path": "primes.py", "old_str": "    for num in range(2, limit + 1)", "new_str": "    for num in range(2, limit + 1):"}),
    );
    assert!(replaced.get("is_error").is_none(), "{replaced}");
    assert!(
        content(&replaced)
            .starts_with("The file primes.py has been edited. Here's the result of running `cat -n` on a snippet of primes.py:\n"),
        "{replaced}"
    );
    assert!(content(&replaced).contains("for num in range(2, limit + 1):"), "{replaced}");
    assert!(
        content(&replaced).ends_with("Review the changes and make sure they are as expected. Edit the file again if necessary."),
        "{replaced}"
    );
    let file = base.path().join("repo/primes.py");
    assert!(std::fs::read_to_string(&file).expect("read").contains("    for num in range(2, limit + 1):\n"));

    let inserted = answer(
        "toolu_04",
        json!({"command": "insert", "path": "primes.py", "insert_line": 0, "insert_text": "\"\"\"Module for working with prime numbers.\"\"\""}),
    );
    assert!(content(&inserted).starts_with("The file primes.py has been edited."), "{inserted}");
    assert!(std::fs::read_to_string(&file).expect("read").starts_with("\"\"\"Module for working with prime numbers.\"\"\"\ndef is_prime"));
    // Older versions of the tool send the inserted text as `new_str`.
    let older =
        answer("toolu_05", json!({"command": "insert", "path": "primes.py", "insert_line": 1, "new_str": "# Primes below a limit."}));
    assert!(older.get("is_error").is_none(), "{older}");
    assert!(
        std::fs::read_to_string(&file)
            .expect("read")
            .starts_with("\"\"\"Module for working with prime numbers.\"\"\"\n# Primes below a limit.\n")
    );

    let created = answer(
        "toolu_06",
        json!({"command": "create", "path": "test_primes.py", "file_text": "import unittest\nfrom primes import is_prime\n"}),
    );
    assert_eq!(content(&created), "File created successfully at: test_primes.py");
    let again = answer("toolu_07", json!({"command": "create", "path": "test_primes.py", "file_text": "x"}));
    assert_eq!(again["is_error"], true);
    assert!(
        content(&again).starts_with("File already exists at: test_primes.py. Cannot overwrite files using command `create`"),
        "{again}"
    );

    let undone = answer("toolu_08", json!({"command": "undo_edit", "path": "primes.py"}));
    assert!(content(&undone).starts_with("Last edit to primes.py undone successfully."), "{undone}");
    assert!(std::fs::read_to_string(&file).expect("read").starts_with("\"\"\"Module for working with prime numbers.\"\"\"\ndef is_prime"));

    // An image comes back as an image block beside the text.
    std::fs::write(base.path().join("repo/dot.gif"), b"GIF89a\x01\x00\x01\x00\x80\x00\x00\xff\xff\xff\x00\x00\x00!\xf9\x04\x01\x00\x00\x00\x00,\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02D\x01\x00;").expect("write");
    let image = answer("toolu_img", json!({"command": "view", "path": "dot.gif"}));
    let blocks = image["content"].as_array().unwrap_or_else(|| panic!("content blocks: {image}"));
    assert_eq!(blocks[0]["type"], "text");
    assert!(blocks[0]["text"].as_str().expect("text").starts_with("Image `dot.gif`: GIF, 1×1 pixels"), "{image}");
    assert_eq!(blocks[1]["type"], "image");
    assert_eq!(blocks[1]["source"]["type"], "base64");
    assert_eq!(blocks[1]["source"]["media_type"], "image/gif");
    assert_eq!(blocks[1]["source"]["data"], "R0lGODlhAQABAIAAAP///wAAACH5BAEAAAAALAAAAAABAAEAAAICRAEAOw==");

    // A directory is listed as the reference lists one: the directory, then each path up to two
    // levels below it, hidden ones left out.
    std::fs::create_dir_all(base.path().join("repo/pkg/sub/deep")).expect("mkdir");
    std::fs::write(base.path().join("repo/pkg/sub/deep/far.py"), "").expect("write");
    std::fs::write(base.path().join("repo/pkg/.cache"), "").expect("write");
    let listed = answer("toolu_09", json!({"command": "view", "path": "pkg"}));
    assert_eq!(
        content(&listed),
        "Here's the files and directories up to 2 levels deep in pkg, excluding hidden items:\npkg\npkg/sub\npkg/sub/deep\n"
    );
    let bad_range = answer("toolu_10", json!({"command": "view", "path": ".", "view_range": [1, 2]}));
    assert_eq!(bad_range["is_error"], true);
    assert!(content(&bad_range).contains("not allowed when `path` points to a directory"), "{bad_range}");
}

#[test]
fn the_text_editor_is_governed_like_the_tools_it_uses() {
    let (base, host) = host();
    let file = base.path().join("repo/primes.py");
    // The reviewer may view but not edit: the refusal is edit_file's gate, and nothing changes.
    let reviewer = host.session("reviewer", "s-review").expect("session");
    let viewed =
        reviewer.answer_anthropic_tool_use(&tool_use("toolu_r1", json!({"command": "view", "path": "primes.py"}))).expect("answered");
    assert!(viewed.get("is_error").is_none(), "{viewed}");
    let refused = reviewer
        .answer_anthropic_tool_use(&tool_use(
            "toolu_r2",
            json!({"command": "str_replace", "path": "primes.py", "old_str": "primes", "new_str": "p"}),
        ))
        .expect("answered");
    assert_eq!(refused["is_error"], true);
    assert!(content(&refused).contains("may not call `edit_file`"), "{refused}");
    assert_eq!(std::fs::read_to_string(&file).expect("read"), PRIMES);

    // The policy's path rules apply: a denied file is refused at the boundary, and audited.
    let session = host.session("impl", "s-claude").expect("session");
    let denied =
        session.answer_anthropic_tool_use(&tool_use("toolu_i1", json!({"command": "view", "path": "secrets/key.txt"}))).expect("answered");
    assert_eq!(denied["is_error"], true);
    assert!(content(&denied).contains("secrets"), "{denied}");
    assert!(!content(&denied).contains("hunter2"), "{denied}");
    let trail = std::fs::read_to_string(base.path().join("state/audit.jsonl")).expect("the audit trail");
    assert!(trail.lines().any(|line| line.contains("\"secrets\"") && line.contains("secrets/key.txt")), "no audited refusal in:\n{trail}");
    let outside =
        session.answer_anthropic_tool_use(&tool_use("toolu_i2", json!({"command": "view", "path": "/etc/passwd"}))).expect("answered");
    assert_eq!(outside["is_error"], true);
    assert!(!content(&outside).contains("root:"), "{outside}");

    // Not a tool_use block: a typed error saying what is wrong.
    let error = session.answer_anthropic_tool_use(&json!({"type": "tool_use", "name": "str_replace_based_edit_tool", "input": {}}));
    assert!(matches!(&error, Err(ProviderError::Malformed { reason, .. }) if reason.contains("`id`")), "{error:?}");
}

#[test]
fn openai_apply_patch_calls_get_their_output_items() {
    let (base, host) = host();
    let session = host.session("impl", "s-codex").expect("session");
    let created = session
        .answer_openai_apply_patch_call(&json!({
            "type": "apply_patch_call",
            "call_id": "call_mapping",
            "operation": {"type": "create_file", "path": "notes.md", "diff": "+hello\n"}
        }))
        .expect("answered");
    assert_eq!(created["type"], "apply_patch_call_output");
    assert_eq!(created["call_id"], "call_mapping");
    assert_eq!(created["status"], "completed", "{created}");
    assert_eq!(std::fs::read_to_string(base.path().join("repo/notes.md")).expect("read"), "hello\n");
    let updated = session
        .answer_openai_apply_patch_call(&json!({
            "type": "apply_patch_call",
            "call_id": "call_apply",
            "operation": {"type": "update_file", "path": "notes.md", "diff": "-hello\n+b\n"}
        }))
        .expect("answered");
    assert_eq!(updated["status"], "completed", "{updated}");
    assert_eq!(std::fs::read_to_string(base.path().join("repo/notes.md")).expect("read"), "b\n");
    // A hunk that does not match fails, and says why.
    let failed = session
        .answer_openai_apply_patch_call(&json!({
            "type": "apply_patch_call",
            "call_id": "call_apply_fail",
            "operation": {"type": "update_file", "path": "notes.md", "diff": "-a\n+b\n"}
        }))
        .expect("answered");
    assert_eq!(failed["status"], "failed");
    assert!(failed["output"].as_str().expect("output").contains("does not apply"), "{failed}");
    // The policy holds: a denied path fails the call.
    let denied = session
        .answer_openai_apply_patch_call(&json!({
            "type": "apply_patch_call",
            "call_id": "call_secret",
            "operation": {"type": "delete_file", "path": "secrets/key.txt"}
        }))
        .expect("answered");
    assert_eq!(denied["status"], "failed");
    assert!(base.path().join("repo/secrets/key.txt").exists());
    let error = session.answer_openai_apply_patch_call(&json!({"type": "apply_patch_call", "call_id": "x"}));
    assert!(matches!(&error, Err(ProviderError::Malformed { reason, .. }) if reason.contains("`operation`")), "{error:?}");
}

#[test]
fn the_text_editor_speaks_in_its_own_parameters_and_takes_the_paths_the_model_was_given() {
    let base = tempfile::tempdir().expect("temporary directory");
    let repo = base.path().join("checkout");
    std::fs::create_dir_all(repo.join("src")).expect("mkdir");
    std::fs::write(repo.join("primes.py"), PRIMES).expect("write");
    std::fs::write(repo.join("src/twice.py"), "x = 1\nx = 1\n").expect("write");
    let long: String = (1..=2_500).map(|number| format!("line {number}\n")).collect();
    std::fs::write(repo.join("long.txt"), long).expect("write");
    // The model is told the files live under `/repo`, as the reference implementation has it.
    let host = HostBuilder::new(&repo)
        .policy_text("providers.toml", POLICY)
        .state_dir(base.path().join("state"))
        .cache_dir(base.path().join("cache"))
        .text_editor_root("/repo")
        .build()
        .expect("host builds");
    let session = host.session("impl", "s-words").expect("session");
    let answer = |input: Value| session.answer_anthropic_tool_use(&tool_use("toolu_w", input)).expect("answered");
    let viewed = answer(json!({"command": "view", "path": "/repo/primes.py"}));
    assert!(content(&viewed).starts_with("Here's the result of running `cat -n` on /repo/primes.py:\n     1\tdef is_prime"), "{viewed}");
    let listed = answer(json!({"command": "view", "path": "/repo"}));
    assert!(content(&listed).contains("\n/repo\n/repo/long.txt\n/repo/primes.py\n/repo/src\n/repo/src/twice.py\n"), "{listed}");
    // Every message in the text editor's words: `old_str`, `view_range`, `insert_line`, and
    // never the governed tools' parameters (`old_string`, `replace_all`, `offset`).
    let cases = [
        (
            json!({"command": "str_replace", "path": "/repo/primes.py", "old_str": "no such text", "new_str": "x"}),
            "No replacement was performed, old_str `no such text` did not appear verbatim in /repo/primes.py.",
        ),
        (
            json!({"command": "str_replace", "path": "/repo/src/twice.py", "old_str": "x = 1", "new_str": "x = 2"}),
            "No replacement was performed. Multiple occurrences of old_str `x = 1` in lines [1, 2]. Please ensure it is unique",
        ),
        (
            json!({"command": "view", "path": "/repo/primes.py", "view_range": [40, 50]}),
            "Invalid `view_range`: [40, 50]. Its first element `40` should be within the range of lines of the file: [1, 13]",
        ),
        (
            json!({"command": "insert", "path": "/repo/primes.py", "insert_line": 99, "insert_text": "x"}),
            "Invalid `insert_line` parameter: 99. It should be within the range of lines of the file: [0, 13]",
        ),
        (json!({"command": "view", "path": "/repo/nope.py"}), "The path /repo/nope.py does not exist. Please provide a valid path."),
        (
            json!({"command": "str_replace", "path": "/repo/src", "old_str": "a", "new_str": "b"}),
            "The path /repo/src is a directory and only the `view` command can be used on directories",
        ),
        (
            json!({"command": "view", "path": "/etc/passwd"}),
            "The path /etc/passwd is not under /repo, the root of the files you can edit. Please provide a valid path.",
        ),
    ];
    for (input, expected) in cases {
        let answered = answer(input.clone());
        assert_eq!(answered["is_error"], true, "{input}: {answered}");
        assert!(content(&answered).ends_with(expected), "{input}: {answered}");
        for word in ["old_string", "replace_all", "offset", "edit_file", "read_file", "insert_text"] {
            assert!(!content(&answered).contains(word), "{input}: `{word}` in {answered}");
        }
    }
    let long = answer(json!({"command": "view", "path": "/repo/long.txt"}));
    assert!(content(&long).contains("view with `view_range` [2001, -1]"), "{long}");
    assert!(!content(&long).contains("offset"), "{long}");
}
