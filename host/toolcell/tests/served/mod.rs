//! A `toolcell serve` process for the tests that drive the service over HTTP: started on
//! 127.0.0.1 with a free port, its stderr kept line by line, killed when dropped.

use std::ffi::OsStr;
use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// A `toolcell serve` process, killed when dropped, and the lines of its stderr so far.
pub struct Served {
    pub child: std::process::Child,
    /// `http://127.0.0.1:PORT/`.
    pub url: String,
    /// `127.0.0.1:PORT`.
    pub address: String,
    stderr: Arc<Mutex<Vec<String>>>,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Served {
    /// The lines of its stderr so far, the listening line first.
    pub fn lines(&self) -> Vec<String> {
        self.stderr.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Wait (up to a minute, for a loaded CI) until a line of stderr is `wanted`; the lines.
    pub fn wait_for(&self, wanted: impl Fn(&str) -> bool) -> Vec<String> {
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(60) {
            let lines = self.lines();
            if lines.iter().any(|line| wanted(line)) {
                return lines;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("no such line on stderr: {:#?}", self.lines());
    }
}

/// Start `toolcell serve` with `config`, its state in `state`, the tests' shared component
/// cache, and more global `options` (`--policy`, `--plugin-dir`, `--store`).
pub fn serve(config: &Path, state: &Path, options: &[impl AsRef<OsStr>]) -> Served {
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolcell"));
    command.args(options).arg("--cache-dir").arg(toolcell_tests::shared_cache_dir()).arg("--state-dir").arg(state);
    command.args(["serve", "--listen", "127.0.0.1:0", "--config"]).arg(config);
    spawn(command)
}

/// Start `command` (a `toolcell … serve --listen 127.0.0.1:0 …`) and wait until it listens.
pub fn spawn(mut command: Command) -> Served {
    let mut child = command.stderr(std::process::Stdio::piped()).spawn().expect("start toolcell serve");
    let mut stderr = std::io::BufReader::new(child.stderr.take().expect("stderr"));
    let mut line = String::new();
    stderr.read_line(&mut line).expect("read stderr");
    let address = line.split("http://").nth(1).and_then(|rest| rest.split('/').next()).unwrap_or_else(|| panic!("no address in {line:?}"));
    let (url, address) = (format!("http://{address}/"), address.to_owned());
    let lines = Arc::new(Mutex::new(vec![line.trim_end().to_owned()]));
    let kept = Arc::clone(&lines);
    // Read on, so that the server never blocks on a full pipe.
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            kept.lock().unwrap_or_else(PoisonError::into_inner).push(line);
        }
    });
    Served { child, url, address, stderr: lines }
}

/// A new token and the configuration line that admits it.
pub fn token() -> (String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_toolcell")).arg("token").output().expect("toolcell token");
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).expect("utf-8");
    let mut lines = text.lines();
    let token = lines.next().expect("token").to_owned();
    let line = lines.next().expect("hash line").to_owned();
    assert!(token.starts_with("tc_") && token.len() == 67, "{token}");
    (token, line)
}

/// A workspace (one file, `notes.txt`) and a service configuration of `settings` with one
/// `impl` principal (alice); her token.
pub fn alice_service(root: &Path, settings: &str) -> (PathBuf, String) {
    let workspace = root.join("workspace");
    std::fs::create_dir_all(&workspace).expect("workspace");
    std::fs::write(workspace.join("notes.txt"), "hello\n").expect("write");
    let (alice, alice_line) = token();
    let config = root.join("service.toml");
    std::fs::write(
        &config,
        format!("{settings}\n[workspaces]\napp = \"workspace\"\n\n[[principals]]\nname = \"alice\"\n{alice_line}\nworkspace = \"app\"\nrole = \"impl\"\n"),
    )
    .expect("config");
    (config, alice)
}

/// An HTTP agent that returns every status as an answer, for a loaded CI's two minutes.
pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder().http_status_as_error(false).timeout_global(Some(Duration::from_secs(120))).build().new_agent()
}

/// POST the JSON-RPC `body` to `url` as MCP over Streamable HTTP does, with `token` and
/// `headers`; the answer, whatever its status.
pub fn post_mcp(url: &str, token: &str, headers: &[(&str, &str)], body: &serde_json::Value) -> ureq::http::Response<ureq::Body> {
    let mut request = agent()
        .post(url)
        .header("Accept", "application/json, text/event-stream")
        .header("Content-Type", "application/json")
        .header("Authorization", &format!("Bearer {token}"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send(body.to_string()).expect("POST")
}
