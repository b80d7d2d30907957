//! Tools from an OCI registry through the real `toolcell` binary and a real registry (Debian's
//! `docker-registry`, started here on a free port in a temporary directory): push, pull, add by
//! tag and by digest, the manifest read back over HTTP, a tampered blob and a moved tag refused,
//! a private registry with basic-auth credentials, and the cache answering once the registry is
//! stopped. `.ci/run` installs the package; elsewhere a test without it says so and passes,
//! unless `TOOLCELL_REQUIRE_REGISTRY` is set (as CI sets it), when it fails.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use toolcell_tests::{rebuilt_component, sha256_hex};

const REGISTRY_BINARY: &str = "/usr/bin/docker-registry";

struct Run {
    status: i32,
    stdout: String,
    stderr: String,
}

/// A registry serving from a temporary directory, stopped when dropped.
struct Registry {
    directory: tempfile::TempDir,
    child: Option<Child>,
    /// `127.0.0.1:PORT`.
    address: String,
}

impl Registry {
    /// Start a registry (with basic-auth for `user`/`password` if given), or `None` (after
    /// saying why) when the package is missing and not required.
    fn start(basic_auth: Option<(&str, &str)>) -> Option<Registry> {
        if !Path::new(REGISTRY_BINARY).is_file() {
            assert!(
                std::env::var_os("TOOLCELL_REQUIRE_REGISTRY").is_none(),
                "an OCI registry is required (TOOLCELL_REQUIRE_REGISTRY) but {REGISTRY_BINARY} is missing: install the `docker-registry` package"
            );
            let _ = writeln!(
                std::io::stderr(),
                "skipped: {REGISTRY_BINARY} is not installed; `.ci/run` installs the `docker-registry` package"
            );
            return None;
        }
        let directory = tempfile::Builder::new().prefix("tc-oci").tempdir().expect("a directory for the registry");
        let port = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port").local_addr().expect("its address").port();
        let address = format!("127.0.0.1:{port}");
        let mut config = format!(
            "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {address}\n",
            directory.path().join("data").display()
        );
        if let Some((user, password)) = basic_auth {
            let htpasswd = Command::new("htpasswd").args(["-Bbn", user, password]).output().expect("run htpasswd (apache2-utils)");
            assert!(htpasswd.status.success(), "htpasswd failed");
            std::fs::write(directory.path().join("htpasswd"), &htpasswd.stdout).expect("write htpasswd");
            config.push_str(&format!(
                "auth:\n  htpasswd:\n    realm: toolcell-tests\n    path: {}\n",
                directory.path().join("htpasswd").display()
            ));
        }
        let config_path = directory.path().join("config.yml");
        std::fs::write(&config_path, config).expect("write the registry's configuration");
        let child = Command::new(REGISTRY_BINARY)
            .arg("serve")
            .arg(&config_path)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(directory.path().join("registry.log")).expect("log file"))
            .spawn()
            .expect("start docker-registry");
        let registry = Registry { directory, child: Some(child), address };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while std::net::TcpStream::connect(&registry.address).is_err() {
            assert!(std::time::Instant::now() < deadline, "the registry did not start: {}", registry.log());
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        Some(registry)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.directory.path().join("registry.log")).unwrap_or_default()
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The file the registry keeps the blob of `digest` (`sha256:HEX`) in.
    fn blob(&self, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").expect("a sha256 digest");
        self.directory.path().join("data/docker/registry/v2/blobs/sha256").join(&hex[..2]).join(hex).join("data")
    }

    /// GET `path` on the registry, as an OCI client asks for an image manifest.
    fn get(&self, path: &str, credentials: Option<(&str, &str)>) -> (u16, Vec<u8>, String) {
        let mut request = ureq::get(&format!("http://{}{path}", self.address))
            .header("Accept", "application/vnd.oci.image.manifest.v1+json")
            .config()
            .http_status_as_error(false)
            .build();
        if let Some((user, password)) = credentials {
            let token = base64_encode(format!("{user}:{password}").as_bytes());
            request = request.header("Authorization", &format!("Basic {token}"));
        }
        let mut response = request.call().expect("GET the registry");
        let status = response.status().as_u16();
        let content_type = response.headers().get("content-type").and_then(|value| value.to_str().ok()).unwrap_or_default().to_owned();
        (status, response.body_mut().read_to_vec().expect("read the body"), content_type)
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
    }
}

fn base64_encode(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut text = String::new();
    for chunk in bytes.chunks(3) {
        let word = u32::from(chunk[0]) << 16 | u32::from(*chunk.get(1).unwrap_or(&0)) << 8 | u32::from(*chunk.get(2).unwrap_or(&0));
        for (index, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if index <= chunk.len() {
                text.push(char::from(ALPHABET[(word >> shift & 63) as usize]));
            } else {
                text.push('=');
            }
        }
    }
    text
}

/// A user's machine: a state directory, a cache, a Docker configuration directory, policies.
struct Site {
    base: tempfile::TempDir,
}

impl Site {
    fn new() -> Site {
        let site = Site { base: tempfile::tempdir().expect("temporary directory") };
        std::fs::create_dir_all(site.path("docker")).expect("docker config directory");
        std::fs::create_dir_all(site.path("workspace")).expect("workspace");
        site
    }

    fn path(&self, name: &str) -> PathBuf {
        self.base.path().join(name)
    }

    fn text(&self, name: &str) -> String {
        self.path(name).to_str().expect("UTF-8").to_owned()
    }

    fn run_with(&self, args: &[&str], environment: &[(&str, &str)]) -> Run {
        let mut command = Command::new(env!("CARGO_BIN_EXE_toolcell"));
        command
            .arg("--cache-dir")
            .arg(self.path("cache"))
            .arg("--state-dir")
            .arg(self.path("state"))
            .args(args)
            .env("DOCKER_CONFIG", self.path("docker"))
            .env_remove("WKG_OCI_USERNAME")
            .env_remove("WKG_OCI_PASSWORD")
            .env_remove("TOOLCELL_CACHE_DIR")
            .env_remove("TOOLCELL_STATE_DIR")
            .env_remove("TOOLCELL_PLUGIN_DIR")
            .env_remove("TOOLCELL_POLICY");
        for (key, value) in environment {
            command.env(key, value);
        }
        let output = command.output().expect("run toolcell");
        Run {
            status: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8(output.stdout).expect("UTF-8 stdout"),
            stderr: String::from_utf8(output.stderr).expect("UTF-8 stderr"),
        }
    }

    fn run(&self, args: &[&str]) -> Run {
        self.run_with(args, &[])
    }
}

/// The value after `prefix ` on a line of `text`.
fn field<'a>(text: &'a str, prefix: &str) -> &'a str {
    text.lines()
        .find_map(|line| line.strip_prefix(prefix).and_then(|rest| rest.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no `{prefix}` line in:\n{text}"))
}

#[test]
fn a_tool_pushed_to_a_registry_is_added_by_tag_and_by_digest_and_pinned() {
    let Some(mut registry) = Registry::start(None) else { return };
    let site = Site::new();
    // `misbehave` fails the conformance suite on purpose: `--force` where it is added.
    let wasm = toolcell_tests::guest_program("misbehave");
    std::fs::write(site.path("misbehave.wasm"), wasm).expect("write");
    let tagged = format!("oci://{}/tools/misbehave:1.0", registry.address);

    // Plain HTTP only when asked for.
    let refused = site.run(&["tools", "push", &site.text("misbehave.wasm"), &tagged]);
    assert_eq!(refused.status, 2, "{}", refused.stderr);
    let pushed = site.run(&[
        "tools",
        "push",
        "--insecure",
        "--version",
        "1.0.0",
        "--description",
        "misbehaves on request",
        "--source",
        "https://example.com/misbehave",
        &site.text("misbehave.wasm"),
        &tagged,
    ]);
    assert_eq!(pushed.status, 0, "{}\n{}", pushed.stderr, registry.log());
    let manifest_digest = field(&pushed.stdout, "manifest").to_owned();
    assert_eq!(field(&pushed.stdout, "sha256"), sha256_hex(wasm));
    assert_eq!(field(&pushed.stdout, "pushed"), format!("{tagged}@{manifest_digest}"));

    // The manifest as any OCI client reads it: wkg's artifact.
    let (status, manifest_bytes, content_type) = registry.get("/v2/tools/misbehave/manifests/1.0", None);
    assert_eq!(status, 200);
    assert_eq!(content_type, "application/vnd.oci.image.manifest.v1+json");
    assert_eq!(format!("sha256:{}", sha256_hex(&manifest_bytes)), manifest_digest);
    let manifest: serde_json::Value = serde_json::from_slice(&manifest_bytes).expect("JSON manifest");
    assert_eq!(manifest["mediaType"], "application/vnd.oci.image.manifest.v1+json");
    assert_eq!(manifest["config"]["mediaType"], "application/vnd.wasm.config.v0+json");
    let layers = manifest["layers"].as_array().expect("layers");
    assert_eq!(layers.len(), 1, "{manifest}");
    assert_eq!(layers[0]["mediaType"], "application/wasm");
    assert_eq!(layers[0]["digest"], format!("sha256:{}", sha256_hex(wasm)));
    assert_eq!(layers[0]["annotations"]["org.opencontainers.image.title"], "misbehave.wasm");
    assert_eq!(manifest["annotations"]["org.opencontainers.image.version"], "1.0.0");
    assert_eq!(manifest["annotations"]["org.opencontainers.image.description"], "misbehaves on request");
    assert_eq!(manifest["annotations"]["org.opencontainers.image.source"], "https://example.com/misbehave");
    let config_digest = manifest["config"]["digest"].as_str().expect("config digest");
    let (status, config, _) = registry.get(&format!("/v2/tools/misbehave/blobs/{config_digest}"), None);
    assert_eq!(status, 200);
    let config: serde_json::Value = serde_json::from_slice(&config).expect("JSON config");
    assert_eq!((config["architecture"].as_str(), config["os"].as_str()), (Some("wasm"), Some("wasip2")), "{config}");
    assert!(config["component"]["exports"].to_string().contains("toolcell:tool/"), "{config}");
    assert!(config["component"]["imports"].is_array(), "{config}");
    assert_eq!(config["layerDigests"][0], format!("sha256:{}", sha256_hex(wasm)));

    // Pulled: every digest checked; the bytes are the component.
    let pulled = site.run(&["tools", "pull", "--insecure", "--output", &site.text("pulled.wasm"), &tagged]);
    assert_eq!(pulled.status, 0, "{}", pulled.stderr);
    assert_eq!(field(&pulled.stdout, "manifest"), manifest_digest);
    assert_eq!(std::fs::read(site.path("pulled.wasm")).expect("read"), wasm);

    // Added by tag: the tag resolved once, the pin holds the digest and the sha256.
    let added = site.run(&["tools", "add", "--insecure", "--force", &tagged]);
    assert_eq!(added.status, 0, "{}", added.stderr);
    let pinned = format!("{tagged}@{manifest_digest}");
    assert!(
        added.stdout.contains(&format!("[plugins.misbehave]\nsha256 = \"{}\"\nsource = \"{pinned}\"", sha256_hex(wasm))),
        "{}",
        added.stdout
    );
    assert_eq!(std::fs::read(site.path("state/plugins/misbehave.wasm")).expect("installed"), wasm);
    let policy_text = format!(
        "version = 1\n[plugins.misbehave]\nsha256 = \"{}\"\nsource = \"{pinned}\"\n[roles.impl]\ntools = [\"read_file\", \"misbehave\"]\n",
        sha256_hex(wasm)
    );
    std::fs::write(site.path("policy.toml"), &policy_text).expect("write the policy");
    let policy = site.text("policy.toml");
    let workspace = site.text("workspace");
    let called = site.run(&["--policy", &policy, "call", "misbehave", r#"{"action": "ok"}"#, "--workspace", &workspace]);
    assert_eq!(called.stdout.trim(), "ok", "{}", called.stderr);

    // Added by digest elsewhere: the same bytes.
    let elsewhere = Site::new();
    let by_digest = format!("oci://{}/tools/misbehave@{manifest_digest}", registry.address);
    let added = elsewhere.run(&["tools", "add", "--insecure", "--force", &by_digest]);
    assert_eq!(added.status, 0, "{}", added.stderr);
    assert_eq!(std::fs::read(elsewhere.path("state/plugins/misbehave.wasm")).expect("installed"), wasm);

    // The tag moves to another build: adding by the tag is refused while the policy pins the
    // old digest; `tools update` shows the change and pins the new build and digest.
    let second = rebuilt_component(wasm, b"two!");
    std::fs::write(site.path("second.wasm"), &second).expect("write");
    let moved = site.run(&["tools", "push", "--insecure", &site.text("second.wasm"), &tagged]);
    assert_eq!(moved.status, 0, "{}", moved.stderr);
    let new_digest = field(&moved.stdout, "manifest").to_owned();
    let refused = site.run(&["--policy", &policy, "tools", "add", "--insecure", "--force", &tagged]);
    assert_eq!(refused.status, 2, "{}", refused.stdout);
    assert!(
        refused.stderr.contains(&format!(
            "the tag `{tagged}` moved: the policy pins `misbehave` to `{manifest_digest}`, the registry now serves `{new_digest}`"
        )),
        "{}",
        refused.stderr
    );
    assert_eq!(std::fs::read(site.path("state/plugins/misbehave.wasm")).expect("installed"), wasm);
    let updated = site.run(&["--policy", &policy, "tools", "update", "--insecure", "--force", "misbehave"]);
    assert_eq!(updated.status, 0, "{}\n{}", updated.stdout, updated.stderr);
    assert!(updated.stdout.contains(&format!("moved: {manifest_digest} -> {new_digest}")), "{}", updated.stdout);
    assert!(updated.stdout.contains(&format!("sha256: {} -> {}", sha256_hex(wasm), sha256_hex(&second))), "{}", updated.stdout);
    let new_policy = std::fs::read_to_string(site.path("policy.toml")).expect("read");
    assert_eq!(
        new_policy,
        policy_text.replace(&sha256_hex(wasm), &sha256_hex(&second)).replace(&manifest_digest, &new_digest),
        "{}",
        updated.stdout
    );
    assert_eq!(std::fs::read(site.path("state/plugins/misbehave.wasm")).expect("installed"), second);
    let again = site.run(&["--policy", &policy, "tools", "update", "--insecure", "misbehave"]);
    assert!(again.stdout.contains("nothing changed"), "{}", again.stdout);

    // Stopped: a pinned digest already pulled comes from the cache; a tag needs the registry.
    registry.stop();
    let offline = Site::new();
    std::fs::create_dir_all(offline.path("cache")).expect("cache");
    let cached = site.run(&["tools", "pull", "--insecure", &pinned]);
    assert_eq!(cached.status, 0, "{}", cached.stderr);
    assert!(cached.stdout.contains("(from the cache)"), "{}", cached.stdout);
    let third = Site::new();
    let copied = Command::new("cp").arg("-r").arg(site.path("cache")).arg(third.path("cache")).status().expect("cp");
    assert!(copied.success());
    let added = third.run(&["tools", "add", "--insecure", "--force", &pinned]);
    assert_eq!(added.status, 0, "{}", added.stderr);
    assert_eq!(std::fs::read(third.path("state/plugins/misbehave.wasm")).expect("installed"), wasm);
    let unreachable = site.run(&["tools", "pull", "--insecure", &tagged]);
    assert_eq!(unreachable.status, 2, "{}", unreachable.stdout);
    assert!(unreachable.stderr.contains(&format!("registry `{}`", registry.address)), "{}", unreachable.stderr);
}

#[test]
fn a_registry_serving_other_bytes_under_a_digest_is_refused() {
    let Some(registry) = Registry::start(None) else { return };
    let site = Site::new();
    let wasm = toolcell_tests::guest_program("misbehave");
    std::fs::write(site.path("misbehave.wasm"), wasm).expect("write");
    let tagged = format!("oci://{}/tools/misbehave:1.0", registry.address);
    let pushed = site.run(&["tools", "push", "--insecure", &site.text("misbehave.wasm"), &tagged]);
    assert_eq!(pushed.status, 0, "{}", pushed.stderr);
    let manifest_digest = field(&pushed.stdout, "manifest").to_owned();
    let layer = format!("sha256:{}", sha256_hex(wasm));
    // The component's blob altered in the registry's storage: one byte flipped.
    let blob = registry.blob(&layer);
    let mut bytes = std::fs::read(&blob).expect("the layer's blob");
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&blob, &bytes).expect("tamper");
    for reference in [tagged.clone(), format!("oci://{}/tools/misbehave@{manifest_digest}", registry.address)] {
        let pulled = site.run(&["tools", "pull", "--insecure", &reference]);
        assert_eq!(pulled.status, 2, "{reference}: {}", pulled.stdout);
        assert!(pulled.stderr.contains("the registry served a component whose digest is `sha256:"), "{}", pulled.stderr);
        assert!(pulled.stderr.contains(&format!("not `{layer}`; refused")), "{}", pulled.stderr);
        let added = site.run(&["tools", "add", "--insecure", "--force", &reference]);
        assert_eq!(added.status, 2, "{}", added.stdout);
        assert!(!site.path("state/plugins/misbehave.wasm").exists());
    }
    // Other bytes under the manifest's own digest.
    let manifest_blob = registry.blob(&manifest_digest);
    let mut manifest = std::fs::read(&manifest_blob).expect("the manifest's blob");
    manifest.push(b'\n');
    std::fs::write(&manifest_blob, &manifest).expect("tamper");
    let by_digest = format!("oci://{}/tools/misbehave@{manifest_digest}", registry.address);
    let pulled = site.run(&["tools", "pull", "--insecure", &by_digest]);
    assert_eq!(pulled.status, 2, "{}", pulled.stdout);
    assert!(pulled.stderr.contains(&format!("`{by_digest}`: the registry served a manifest whose digest is")), "{}", pulled.stderr);
}

#[test]
fn a_private_registry_takes_the_credentials_wkg_would_use_and_never_shows_them() {
    let password = "s3cret-Pa55word";
    let Some(registry) = Registry::start(Some(("builder", password))) else { return };
    let site = Site::new();
    let wasm = toolcell_tests::guest_program("misbehave");
    std::fs::write(site.path("misbehave.wasm"), wasm).expect("write");
    let tagged = format!("oci://{}/private/misbehave:1", registry.address);
    let push = |site: &Site, environment: &[(&str, &str)]| {
        site.run_with(&["tools", "push", "--insecure", &site.text("misbehave.wasm"), &tagged], environment)
    };
    let no_secret = |run: &Run| assert!(!run.stdout.contains(password) && !run.stderr.contains(password), "{}{}", run.stdout, run.stderr);

    // Without credentials: refused.
    let anonymous = push(&site, &[]);
    assert_eq!(anonymous.status, 2, "{}", anonymous.stdout);
    assert!(anonymous.stderr.contains(&format!("registry `{}`", registry.address)), "{}", anonymous.stderr);
    // A wrong password: refused, and not shown.
    let wrong = push(&site, &[("WKG_OCI_USERNAME", "builder"), ("WKG_OCI_PASSWORD", "not-it-at-all")]);
    assert_eq!(wrong.status, 2, "{}", wrong.stdout);
    assert!(!wrong.stderr.contains("not-it-at-all"), "{}", wrong.stderr);
    // wkg's environment variables.
    let from_environment = push(&site, &[("WKG_OCI_USERNAME", "builder"), ("WKG_OCI_PASSWORD", password)]);
    assert_eq!(from_environment.status, 0, "{}", from_environment.stderr);
    no_secret(&from_environment);
    // Docker's `config.json` `auths`.
    let auth = base64_encode(format!("builder:{password}").as_bytes());
    std::fs::write(site.path("docker/config.json"), format!(r#"{{"auths": {{"{}": {{"auth": "{auth}"}}}}}}"#, registry.address))
        .expect("write config.json");
    let pulled = site.run(&["tools", "pull", "--insecure", &tagged]);
    assert_eq!(pulled.status, 0, "{}", pulled.stderr);
    assert_eq!(field(&pulled.stdout, "sha256"), sha256_hex(wasm));
    no_secret(&pulled);
    // A credential helper (`credsStore`), run as `docker-credential-NAME get`.
    let helper = site.path("bin/docker-credential-toolcelltest");
    std::fs::create_dir_all(site.path("bin")).expect("bin");
    std::fs::write(
        &helper,
        format!("#!/bin/sh\nread server\nprintf '{{\"ServerURL\": \"%s\", \"Username\": \"builder\", \"Secret\": \"{password}\"}}' \"$server\"\n"),
    )
    .expect("write the helper");
    Command::new("chmod").arg("755").arg(&helper).status().expect("chmod");
    std::fs::write(site.path("docker/config.json"), r#"{"credsStore": "toolcelltest"}"#).expect("write config.json");
    let path = format!("{}:{}", site.text("bin"), std::env::var("PATH").unwrap_or_default());
    let added = site.run_with(&["tools", "add", "--insecure", "--force", &tagged], &[("PATH", &path)]);
    assert_eq!(added.status, 0, "{}", added.stderr);
    no_secret(&added);
    assert_eq!(std::fs::read(site.path("state/plugins/misbehave.wasm")).expect("installed"), wasm);
    // A helper that fails is named, its output is not shown.
    std::fs::write(&helper, format!("#!/bin/sh\ncat >/dev/null\necho 'leaked {password}'\nexit 1\n")).expect("write the helper");
    let failed = site.run_with(&["tools", "pull", "--insecure", &tagged], &[("PATH", &path)]);
    assert_eq!(failed.status, 2, "{}", failed.stdout);
    assert!(failed.stderr.contains("`docker-credential-toolcelltest` failed"), "{}", failed.stderr);
    no_secret(&failed);
}

#[test]
fn plain_http_is_refused_for_a_registry_on_another_machine() {
    let site = Site::new();
    std::fs::write(site.path("x.wasm"), toolcell_tests::guest_program("misbehave")).expect("write");
    let run = site.run(&["tools", "push", "--insecure", &site.text("x.wasm"), "oci://registry.example.com/tools/x:1"]);
    assert_eq!(run.status, 2);
    assert!(run.stderr.contains("plain HTTP to `registry.example.com` refused"), "{}", run.stderr);
    let bad = site.run(&["tools", "pull", "registry.example.com/tools/x:1"]);
    assert_eq!(bad.status, 2);
    assert!(
        bad.stderr.contains("`registry.example.com/tools/x:1` is not a registry reference: it does not start with `oci://`"),
        "{}",
        bad.stderr
    );
}

/// wkg as `.ci/run` installs it (`TOOLCELL_WKG`), or `None` (after saying why) when it is
/// missing and `TOOLCELL_REQUIRE_WKG` is not set.
fn wkg() -> Option<PathBuf> {
    let found = std::env::var_os("TOOLCELL_WKG").map(PathBuf::from).filter(|path| path.is_file());
    if found.is_none() {
        assert!(
            std::env::var_os("TOOLCELL_REQUIRE_WKG").is_none(),
            "wkg is required (TOOLCELL_REQUIRE_WKG) but `TOOLCELL_WKG` names no file: `.ci/run` installs it under target/wkg"
        );
        let _ = writeln!(std::io::stderr(), "skipped: wkg is not installed (`TOOLCELL_WKG`); `.ci/run` installs it");
    }
    found
}

#[test]
fn wkg_and_toolcell_read_each_others_artifacts() {
    let Some(wkg) = wkg() else { return };
    let Some(registry) = Registry::start(None) else { return };
    let site = Site::new();
    let wasm = toolcell_tests::guest_program("misbehave");
    std::fs::write(site.path("misbehave.wasm"), wasm).expect("write");
    let run_wkg = |args: &[&str]| {
        let output = Command::new(&wkg)
            .args(args)
            .env("HOME", site.path("home"))
            .env("XDG_CONFIG_HOME", site.path("home/.config"))
            .env("XDG_CACHE_HOME", site.path("home/.cache"))
            .env("DOCKER_CONFIG", site.path("docker"))
            .env_remove("WKG_OCI_USERNAME")
            .env_remove("WKG_OCI_PASSWORD")
            .output()
            .expect("run wkg");
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(output.status.success(), "wkg {args:?}: {stdout}{}", String::from_utf8_lossy(&output.stderr));
        stdout
    };

    // wkg pushes, toolcell adds.
    let by_wkg = format!("{}/wkg/misbehave:1", registry.address);
    let pushed = run_wkg(&["oci", "push", "--insecure", &registry.address, &by_wkg, &site.text("misbehave.wasm")]);
    let wkg_digest = field(&pushed, "digest:").to_owned();
    let added = site.run(&["tools", "add", "--insecure", "--force", &format!("oci://{by_wkg}")]);
    assert_eq!(added.status, 0, "{}", added.stderr);
    assert!(added.stdout.contains(&format!("source = \"oci://{by_wkg}@{wkg_digest}\"")), "{}", added.stdout);
    assert_eq!(std::fs::read(site.path("state/plugins/misbehave.wasm")).expect("installed"), wasm);

    // toolcell pushes, wkg pulls.
    let by_toolcell = format!("{}/toolcell/misbehave:1", registry.address);
    let pushed = site.run(&["tools", "push", "--insecure", &site.text("misbehave.wasm"), &format!("oci://{by_toolcell}")]);
    assert_eq!(pushed.status, 0, "{}", pushed.stderr);
    run_wkg(&["oci", "pull", "--insecure", &registry.address, &by_toolcell, "--output", &site.text("from-wkg.wasm")]);
    assert_eq!(std::fs::read(site.path("from-wkg.wasm")).expect("pulled by wkg"), wasm);

    // The two artifacts have the same shape: media types, the layer's digest and title, and
    // the config's fields (its `created` time aside).
    let shape = |repository: &str| {
        let (status, manifest, _) = registry.get(&format!("/v2/{repository}/manifests/1"), None);
        assert_eq!(status, 200);
        let manifest: serde_json::Value = serde_json::from_slice(&manifest).expect("JSON manifest");
        let config_digest = manifest["config"]["digest"].as_str().expect("config digest").to_owned();
        let (_, config, _) = registry.get(&format!("/v2/{repository}/blobs/{config_digest}"), None);
        let mut config: serde_json::Value = serde_json::from_slice(&config).expect("JSON config");
        config.as_object_mut().expect("an object").remove("created");
        (manifest["mediaType"].clone(), manifest["config"]["mediaType"].clone(), manifest["layers"].clone(), config)
    };
    assert_eq!(shape("toolcell/misbehave"), shape("wkg/misbehave"));
}

/// Run `openssl` with `args`, which must succeed; its stdout.
fn openssl(args: &[&str]) -> Vec<u8> {
    let output = Command::new("openssl").args(args).output().expect("run openssl");
    assert!(output.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    output.stdout
}

/// An ECDSA P-256 key pair made by OpenSSL: `NAME.pem` (private) and `NAME.pub`.
fn key_pair(site: &Site, name: &str) {
    let private = site.text(&format!("{name}.pem"));
    openssl(&["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", &private]);
    openssl(&["pkey", "-in", &private, "-pubout", "-out", &site.text(&format!("{name}.pub"))]);
}

impl Registry {
    /// Upload `bytes` as a blob of `repository`, as any OCI client does; returns its digest.
    fn upload(&self, repository: &str, bytes: &[u8]) -> String {
        let digest = format!("sha256:{}", sha256_hex(bytes));
        let started = ureq::post(&format!("http://{}/v2/{repository}/blobs/uploads/", self.address))
            .config()
            .http_status_as_error(false)
            .build()
            .send_empty()
            .expect("start an upload");
        assert_eq!(started.status().as_u16(), 202);
        let location = started.headers().get("location").and_then(|value| value.to_str().ok()).expect("an upload location").to_owned();
        let location = if location.starts_with("http") { location } else { format!("http://{}{location}", self.address) };
        let separator = if location.contains('?') { '&' } else { '?' };
        let put = ureq::put(&format!("{location}{separator}digest={digest}"))
            .header("Content-Type", "application/octet-stream")
            .config()
            .http_status_as_error(false)
            .build()
            .send(bytes)
            .expect("upload the blob");
        assert_eq!(put.status().as_u16(), 201);
        digest
    }

    /// Put `manifest` under `tag` in `repository`.
    fn put_manifest(&self, repository: &str, tag: &str, manifest: &serde_json::Value) {
        let put = ureq::put(&format!("http://{}/v2/{repository}/manifests/{tag}", self.address))
            .header("Content-Type", "application/vnd.oci.image.manifest.v1+json")
            .config()
            .http_status_as_error(false)
            .build()
            .send(manifest.to_string().as_bytes())
            .expect("put the manifest");
        assert_eq!(put.status().as_u16(), 201);
    }

    /// Sign the manifest `digest` of `repository` as cosign does, with OpenSSL and the private
    /// key `key` (a PEM file), written here by hand from cosign's format: a simple-signing
    /// payload as one layer of a manifest tagged `sha256-HEX.sig`, its signature in the layer's
    /// annotation.
    fn cosign_by_hand(&self, site: &Site, repository: &str, digest: &str, key: &str) {
        let payload = serde_json::json!({
            "critical": {
                "identity": { "docker-reference": format!("{}/{repository}", self.address) },
                "image": { "docker-manifest-digest": digest },
                "type": "cosign container image signature",
            },
            "optional": null,
        })
        .to_string();
        std::fs::write(site.path("payload.json"), &payload).expect("write the payload");
        let signature = openssl(&["dgst", "-sha256", "-sign", key, &site.text("payload.json")]);
        let payload_digest = self.upload(repository, payload.as_bytes());
        let config_digest = self.upload(repository, b"{}");
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": { "mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": 2 },
            "layers": [{
                "mediaType": "application/vnd.dev.cosign.simplesigning.v1+json",
                "digest": payload_digest,
                "size": payload.len(),
                "annotations": { "dev.cosignproject.cosign/signature": base64_encode(&signature) },
            }],
        });
        self.put_manifest(repository, &format!("{}.sig", digest.replacen(':', "-", 1)), &manifest);
    }
}

#[test]
fn where_the_policy_requires_signatures_only_a_component_signed_by_a_trusted_key_is_added() {
    let Some(mut registry) = Registry::start(None) else { return };
    let site = Site::new();
    key_pair(&site, "trusted");
    key_pair(&site, "stranger");
    let wasm = toolcell_tests::guest_program("misbehave");
    std::fs::write(site.path("misbehave.wasm"), wasm).expect("write");
    std::fs::create_dir_all(site.path("keys")).expect("keys directory");
    std::fs::copy(site.path("trusted.pub"), site.path("keys/trusted.pub")).expect("copy the key");
    // Plain HTTP by the policy's word, not a flag; the key beside the policy.
    let policy = site.text("policy.toml");
    std::fs::write(
        &policy,
        format!(
            "version = 1\n[registry]\ninsecure = [\"{}\"]\nsignature_keys = [\"keys/trusted.pub\"]\nrequire_signatures = true\n[roles.agent]\ntools = [\"read_file\"]\n[[roles.agent.rules]]\naccess = [\"read\"]\npaths = [\"**\"]\neffect = \"allow\"\n",
            registry.address
        ),
    )
    .expect("write the policy");
    let tagged = format!("oci://{}/tools/misbehave:1.0", registry.address);
    let pushed = site.run(&["--policy", &policy, "tools", "push", &site.text("misbehave.wasm"), &tagged]);
    assert_eq!(pushed.status, 0, "{}", pushed.stderr);
    let digest = field(&pushed.stdout, "manifest").to_owned();
    let add = |reference: &str| site.run(&["--policy", &policy, "tools", "add", "--force", reference]);

    // Unsigned: refused, nothing installed.
    let unsigned = add(&tagged);
    assert_eq!(unsigned.status, 2, "{}", unsigned.stdout);
    assert!(unsigned.stderr.contains("carries no signature, and the policy requires one"), "{}", unsigned.stderr);
    assert!(!site.path("state/plugins/misbehave.wasm").exists());
    // A file cannot be added at all while signatures are required.
    let file = site.run(&["--policy", &policy, "tools", "add", "--force", &site.text("misbehave.wasm")]);
    assert_eq!(file.status, 2, "{}", file.stdout);
    assert!(file.stderr.contains("is a file, which carries no signature"), "{}", file.stderr);

    // Signed by a key the policy does not trust (toolcell's own signer): refused.
    let stranger = site.run(&["--policy", &policy, "tools", "sign", "--key", &site.text("stranger.pem"), &tagged]);
    assert_eq!(stranger.status, 0, "{}", stranger.stderr);
    assert_eq!(field(&stranger.stdout, "signed"), format!("{tagged}@{digest}"));
    let wrong = add(&tagged);
    assert_eq!(wrong.status, 2, "{}", wrong.stdout);
    assert!(
        wrong.stderr.contains("its signatures do not hold") && wrong.stderr.contains("does not verify under any trusted key"),
        "{}",
        wrong.stderr
    );
    assert!(!site.path("state/plugins/misbehave.wasm").exists());

    // Signed by the trusted key, the signature written by hand with OpenSSL from cosign's
    // format: added, by tag and by digest.
    registry.cosign_by_hand(&site, "tools/misbehave", &digest, &site.text("trusted.pem"));
    let signed = add(&tagged);
    assert_eq!(signed.status, 0, "{}", signed.stderr);
    assert!(signed.stdout.contains("signed by `keys/trusted.pub`"), "{}", signed.stdout);
    assert!(site.path("state/plugins/misbehave.wasm").exists());

    // toolcell's signature is cosign's format too: OpenSSL verifies what `tools sign` wrote.
    let other = format!("oci://{}/tools/other:1.0", registry.address);
    let pushed = site.run(&["--policy", &policy, "tools", "push", &site.text("misbehave.wasm"), &other]);
    let other_digest = field(&pushed.stdout, "manifest").to_owned();
    let ours = site.run(&["--policy", &policy, "tools", "sign", "--key", &site.text("trusted.pem"), &other]);
    assert_eq!(ours.status, 0, "{}", ours.stderr);
    let (status, manifest, _) = registry.get(&format!("/v2/tools/other/manifests/{}.sig", other_digest.replacen(':', "-", 1)), None);
    assert_eq!(status, 200);
    let manifest: serde_json::Value = serde_json::from_slice(&manifest).expect("JSON");
    let layer = &manifest["layers"][0];
    assert_eq!(layer["mediaType"], "application/vnd.dev.cosign.simplesigning.v1+json");
    let (_, payload, _) = registry.get(&format!("/v2/tools/other/blobs/{}", layer["digest"].as_str().expect("digest")), None);
    let claims: serde_json::Value = serde_json::from_slice(&payload).expect("JSON payload");
    assert_eq!(claims["critical"]["image"]["docker-manifest-digest"], other_digest.as_str());
    std::fs::write(site.path("their-payload.json"), &payload).expect("write");
    let signature = layer["annotations"]["dev.cosignproject.cosign/signature"].as_str().expect("a signature");
    std::fs::write(site.path("signature.b64"), signature).expect("write");
    openssl(&["base64", "-d", "-A", "-in", &site.text("signature.b64"), "-out", &site.text("signature.der")]);
    let verified = openssl(&[
        "dgst",
        "-sha256",
        "-verify",
        &site.text("trusted.pub"),
        "-signature",
        &site.text("signature.der"),
        &site.text("their-payload.json"),
    ]);
    assert_eq!(String::from_utf8_lossy(&verified).trim(), "Verified OK");

    // The signature is kept with the component: a pinned add verifies with the registry gone.
    registry.stop();
    std::fs::remove_file(site.path("state/plugins/misbehave.wasm")).expect("remove the plugin");
    let offline = add(&format!("{tagged}@{digest}"));
    assert_eq!(offline.status, 0, "{}", offline.stderr);
    assert!(offline.stdout.contains("(from the cache)") && offline.stdout.contains("signed by `keys/trusted.pub`"), "{}", offline.stdout);

    // Each start checks every installed plugin, offline: first it is not pinned in the policy.
    let workspace = site.text("workspace");
    let call =
        || site.run(&["--policy", &policy, "call", "read_file", r#"{"path": "a.txt"}"#, "--role", "agent", "--workspace", &workspace]);
    std::fs::write(site.path("workspace/a.txt"), "hello\n").expect("write");
    let unpinned = call();
    assert_eq!(unpinned.status, 2, "{}", unpinned.stdout);
    assert!(
        unpinned.stderr.contains("is not shown signed by a trusted key") && unpinned.stderr.contains("pins its sha256"),
        "{}",
        unpinned.stderr
    );
    // Pinned with its source: it starts, the registry still gone.
    let pin = &offline.stdout[offline.stdout.find("[plugins.misbehave]").expect("the pin")..];
    let pin: String = pin.lines().take(3).map(|line| format!("{line}\n")).collect();
    let text = std::fs::read_to_string(&policy).expect("read the policy");
    std::fs::write(&policy, format!("{text}{pin}")).expect("pin");
    let started = call();
    assert_eq!(started.status, 0, "{}", started.stderr);
    assert!(started.stdout.contains("hello"), "{}", started.stdout);
    // The signature kept in the cache gone: the start is refused, not taken on trust.
    std::fs::remove_dir_all(site.path("cache/oci/signatures")).expect("drop the kept signatures");
    let unproven = call();
    assert_eq!(unproven.status, 2, "{}", unproven.stdout);
    assert!(unproven.stderr.contains("no signature of"), "{}", unproven.stderr);
}

#[test]
fn a_signature_altered_in_the_registry_is_refused_even_where_signatures_are_not_required() {
    let Some(registry) = Registry::start(None) else { return };
    let site = Site::new();
    key_pair(&site, "trusted");
    let wasm = toolcell_tests::guest_program("misbehave");
    std::fs::write(site.path("misbehave.wasm"), wasm).expect("write");
    let policy = site.text("policy.toml");
    std::fs::write(&policy, "version = 1\n[registry]\nsignature_keys = [\"trusted.pub\"]\n[roles.agent]\ntools = [\"read_file\"]\n")
        .expect("write the policy");
    let tagged = format!("oci://{}/tools/misbehave:1.0", registry.address);
    let pushed = site.run(&["tools", "push", "--insecure", &site.text("misbehave.wasm"), &tagged]);
    let digest = field(&pushed.stdout, "manifest").to_owned();
    // Unsigned and not required: added, and said so.
    let unsigned = site.run(&["--policy", &policy, "tools", "pull", "--insecure", &tagged]);
    assert_eq!(unsigned.status, 0, "{}", unsigned.stderr);
    assert!(unsigned.stdout.contains("unsigned (the policy does not require signatures)"), "{}", unsigned.stdout);
    // A valid signature of another manifest, moved under this one's signature tag: refused.
    let other = format!("oci://{}/tools/misbehave:2.0", registry.address);
    std::fs::write(site.path("other.wasm"), toolcell_tests::guest_program("fs_probe")).expect("write");
    let pushed = site.run(&["tools", "push", "--insecure", &site.text("other.wasm"), &other]);
    let other_digest = field(&pushed.stdout, "manifest").to_owned();
    let signed = site.run(&["tools", "sign", "--insecure", "--key", &site.text("trusted.pem"), &other]);
    assert_eq!(signed.status, 0, "{}", signed.stderr);
    let (_, manifest, _) = registry.get(&format!("/v2/tools/misbehave/manifests/{}.sig", other_digest.replacen(':', "-", 1)), None);
    let manifest: serde_json::Value = serde_json::from_slice(&manifest).expect("JSON");
    registry.put_manifest("tools/misbehave", &format!("{}.sig", digest.replacen(':', "-", 1)), &manifest);
    let moved = site.run(&["--policy", &policy, "tools", "add", "--insecure", "--force", &tagged]);
    assert_eq!(moved.status, 2, "{}", moved.stdout);
    assert!(moved.stderr.contains("a signature is of another manifest"), "{}", moved.stderr);
    // This manifest and its valid signature copied to another repository: the signature names
    // the repository it was made for, so it does not vouch for the copy.
    let (_, this_manifest, _) = registry.get(&format!("/v2/tools/misbehave/manifests/{digest}"), None);
    let this_manifest: serde_json::Value = serde_json::from_slice(&this_manifest).expect("JSON");
    let signed = site.run(&[
        "tools",
        "sign",
        "--insecure",
        "--key",
        &site.text("trusted.pem"),
        &format!("oci://{}/tools/misbehave@{digest}", registry.address),
    ]);
    assert_eq!(signed.status, 0, "{}", signed.stderr);
    let (_, signature, _) = registry.get(&format!("/v2/tools/misbehave/manifests/{}.sig", digest.replacen(':', "-", 1)), None);
    let signature: serde_json::Value = serde_json::from_slice(&signature).expect("JSON");
    for blob in
        [&this_manifest["config"], &this_manifest["layers"][0], &signature["config"], &signature["layers"][0], &signature["layers"][1]]
    {
        let digest = blob["digest"].as_str().expect("a digest");
        let (_, bytes, _) = registry.get(&format!("/v2/tools/misbehave/blobs/{digest}"), None);
        registry.upload("tools/impostor", &bytes);
    }
    registry.put_manifest("tools/impostor", "1.0", &this_manifest);
    registry.put_manifest("tools/impostor", &format!("{}.sig", digest.replacen(':', "-", 1)), &signature);
    let impostor =
        site.run(&["--policy", &policy, "tools", "pull", "--insecure", &format!("oci://{}/tools/impostor:1.0", registry.address)]);
    assert_eq!(impostor.status, 2, "{}", impostor.stdout);
    assert!(impostor.stderr.contains("another repository"), "{}", impostor.stderr);
    // A signature layer that declares a few bytes and holds more is cut off, not read whole.
    let big = vec![b'x'; 200 * 1024];
    let big_digest = registry.upload("tools/misbehave", &big);
    let mut lying = signature.clone();
    lying["layers"] = serde_json::json!([{
        "mediaType": "application/vnd.dev.cosign.simplesigning.v1+json",
        "digest": big_digest,
        "size": 10,
        "annotations": { "dev.cosignproject.cosign/signature": "AAAA" },
    }]);
    registry.put_manifest("tools/misbehave", &format!("{}.sig", digest.replacen(':', "-", 1)), &lying);
    let _ = std::fs::remove_dir_all(site.path("cache/oci/signatures"));
    let cut = site.run(&["--policy", &policy, "tools", "pull", "--insecure", &tagged]);
    assert_eq!(cut.status, 2, "{}", cut.stdout);
    assert!(cut.stderr.contains("could not be read within the declared size"), "{}", cut.stderr);

    // A policy naming a registry elsewhere for plain HTTP fails with its line.
    std::fs::write(&policy, "version = 1\n[registry]\ninsecure = [\"registry.example.com\"]\n[roles.agent]\ntools = [\"read_file\"]\n")
        .expect("write the policy");
    let remote = site.run(&["--policy", &policy, "tools", "pull", &tagged]);
    assert_eq!(remote.status, 2);
    assert!(
        remote.stderr.contains("policy.toml line 3") && remote.stderr.contains("`registry.example.com`, which is not on this machine"),
        "{}",
        remote.stderr
    );
    let started = site.run(&["--policy", &policy, "call", "read_file", r#"{"path": "x"}"#, "--workspace", &site.text("workspace")]);
    assert_eq!(started.status, 2, "{}", started.stdout);
    assert!(started.stderr.contains("which is not on this machine"), "{}", started.stderr);
}

#[test]
fn a_bearer_token_in_wkgs_variable_for_the_registry_is_sent_and_never_shown() {
    use std::io::{BufRead as _, BufReader};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let address = listener.local_addr().expect("its address");
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = std::sync::Arc::clone(&seen);
    // A registry that knows nothing: it records each request's Authorization and answers 404.
    std::thread::spawn(move || {
        for stream in listener.incoming().take(8).map_while(Result::ok) {
            let mut reader = BufReader::new(stream.try_clone().expect("clone"));
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|read| read > 0) && line != "\r\n" {
                if line.to_ascii_lowercase().starts_with("authorization:") {
                    kept.lock().expect("lock").push(line.trim().to_owned());
                }
                line.clear();
            }
            let _ = (&stream).write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        }
    });
    let site = Site::new();
    let token = "tok-Very-s3cret";
    let variable = format!("WKG_REGISTRY_127_0_0_1_{}_AUTH_BEARER", address.port());
    let run = site.run_with(&["tools", "pull", "--insecure", &format!("oci://{address}/tools/x:1")], &[(&variable, token)]);
    assert_eq!(run.status, 2, "{}", run.stdout);
    assert!(!run.stdout.contains(token) && !run.stderr.contains(token), "{}{}", run.stdout, run.stderr);
    let seen = seen.lock().expect("lock").clone();
    assert!(
        seen.iter()
            .any(|header| header == &format!("authorization: Bearer {token}") || header == &format!("Authorization: Bearer {token}")),
        "{seen:?}"
    );
}

#[test]
fn credentials_are_not_sent_to_a_token_service_over_plain_http_elsewhere_nor_after_a_redirect() {
    use std::io::{BufRead as _, BufReader};
    for (answer, refused) in [
        (
            "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer realm=\"http://198.51.100.7/token\",service=\"x\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            "names a token service over plain HTTP (`http://198.51.100.7/token`)",
        ),
        (
            "HTTP/1.1 307 Temporary Redirect\r\nLocation: http://198.51.100.7/v2/\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            "with a redirect",
        ),
    ] {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
        let address = listener.local_addr().expect("its address");
        let requests = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = std::sync::Arc::clone(&requests);
        std::thread::spawn(move || {
            for stream in listener.incoming().take(4).map_while(Result::ok) {
                let mut reader = BufReader::new(stream.try_clone().expect("clone"));
                let mut line = String::new();
                let _ = reader.read_line(&mut line);
                kept.lock().expect("lock").push(line.trim().to_owned());
                while reader.read_line(&mut line).is_ok_and(|read| read > 2) {
                    line.clear();
                }
                let _ = (&stream).write_all(answer.as_bytes());
            }
        });
        let site = Site::new();
        let run = site.run_with(
            &["tools", "pull", "--insecure", &format!("oci://{address}/tools/x:1")],
            &[("WKG_OCI_USERNAME", "builder"), ("WKG_OCI_PASSWORD", "pa55-Word-x")],
        );
        assert_eq!(run.status, 2, "{}", run.stdout);
        assert!(run.stderr.contains(refused), "{}", run.stderr);
        assert!(!run.stderr.contains("pa55-Word-x"), "{}", run.stderr);
        // Only the challenge was asked for: nothing else reached the registry.
        assert_eq!(requests.lock().expect("lock").as_slice(), ["GET /v2/ HTTP/1.1"], "{}", run.stderr);
    }
}
