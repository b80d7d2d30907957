//! `toolcell serve` as a platform runs it, through the real binary over HTTP on 127.0.0.1:
//! health and readiness probes.
//!
//! Waits are generous (a loaded 2-core CI): a test waits for an outcome, never for a time.

use std::path::{Path, PathBuf};
use std::time::Duration;

#[path = "served/mod.rs"]
#[expect(dead_code, reason = "these tests need no server address")]
mod served;
use served::{serve, token};

/// A workspace and a service configuration with one `impl` principal (alice); her token.
fn fixture(root: &Path) -> (PathBuf, String) {
    let workspace = root.join("workspace");
    std::fs::create_dir_all(&workspace).expect("workspace");
    std::fs::write(workspace.join("notes.txt"), "hello\n").expect("write");
    let (alice, alice_line) = token();
    let config = root.join("service.toml");
    std::fs::write(
        &config,
        format!(
            "[workspaces]\napp = \"workspace\"\n\n[[principals]]\nname = \"alice\"\n{alice_line}\nworkspace = \"app\"\nrole = \"impl\"\n"
        ),
    )
    .expect("config");
    (config, alice)
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder().http_status_as_error(false).timeout_global(Some(Duration::from_secs(120))).build().new_agent()
}

/// GET `url` without a token: status and body.
fn get(url: &str) -> (u16, String) {
    let mut response = agent().get(url).call().expect("GET");
    (response.status().as_u16(), response.body_mut().read_to_string().unwrap_or_default())
}

#[test]
fn health_and_readiness_answer_without_a_token_and_readiness_follows_the_store() {
    let temp = tempfile::tempdir().expect("temporary directory");
    let (config, _) = fixture(temp.path());
    let state = temp.path().join("state");
    let served = serve(&config, &state, &[] as &[&str]);
    assert_eq!(get(&format!("{}healthz", served.url)), (200, "ok\n".to_owned()));
    assert_eq!(get(&format!("{}readyz", served.url)), (200, "ready\n".to_owned()));
    // Other paths still need a token.
    assert_eq!(get(&format!("{}somewhere", served.url)).0, 401);
    // The store (here the state directory) goes away: not ready, alive all the same, and the
    // answer names no path.
    let moved = temp.path().join("state-moved");
    std::fs::rename(&state, &moved).expect("move the state directory away");
    let (status, text) = get(&format!("{}readyz", served.url));
    assert_eq!((status, text.as_str()), (503, "not ready: the state directory is gone\n"));
    assert!(!text.contains(&temp.path().display().to_string()));
    assert_eq!(get(&format!("{}healthz", served.url)).0, 200);
    std::fs::rename(&moved, &state).expect("move it back");
    assert_eq!(get(&format!("{}readyz", served.url)), (200, "ready\n".to_owned()));
}
