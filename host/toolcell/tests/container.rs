//! The container image (`Containerfile`, its context made by `.ci/container-rootfs`), built with
//! Debian's `podman`: what it holds (the binary, the libraries it links, no shell), that it
//! runs as a user that is not root with its state in a volume, and that `serve` from it answers
//! its health probe. Where the machine does not let podman run a container (no permission to
//! set a container's limits, as in some sandboxes), the image's own filesystem is exported and
//! its binary run with the image's loader and libraries. `.ci/run` installs podman and sets
//! `TOOLCELL_REQUIRE_PODMAN`; elsewhere a machine without it says so and passes.

use crate::served;

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Output};

fn podman(args: &[&str]) -> Output {
    Command::new("podman").args(args).output().expect("run podman")
}

fn text(output: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

/// An image built for this test, removed when dropped.
struct Image(String);

impl Drop for Image {
    fn drop(&mut self) {
        let _ = podman(&["rmi", "-f", &self.0]);
    }
}

#[test]
fn the_image_holds_the_binary_runs_it_as_a_user_that_is_not_root_and_serves_its_probe() {
    if Command::new("podman").arg("--version").output().is_err() {
        assert!(
            std::env::var_os("TOOLCELL_REQUIRE_PODMAN").is_none(),
            "podman is required (TOOLCELL_REQUIRE_PODMAN) but missing: install Debian's `podman`"
        );
        let _ = writeln!(std::io::stderr(), "skipped: podman is not installed; `.ci/run` installs it");
        return;
    }
    let temp = tempfile::tempdir().expect("temporary directory");
    let context = temp.path().join("context");
    let binary = env!("CARGO_BIN_EXE_toolcell");
    let rootfs_script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.ci/container-rootfs");
    let made = Command::new(&rootfs_script).arg(&context).arg(binary).output().expect("run .ci/container-rootfs");
    assert!(made.status.success(), "{}", text(&made));
    let image = Image(format!("localhost/toolcell-test-{}", std::process::id()));
    let built =
        podman(&["build", "-q", "-f", &context.join("Containerfile").to_string_lossy(), "-t", &image.0, &context.to_string_lossy()]);
    assert!(built.status.success(), "{}", text(&built));

    // Not root, state in a volume, the binary as the entry point.
    let inspected = podman(&[
        "image",
        "inspect",
        &image.0,
        "--format",
        "{{.Config.User}}|{{json .Config.Volumes}}|{{json .Config.Entrypoint}}|{{json .Config.ExposedPorts}}",
    ]);
    assert!(inspected.status.success(), "{}", text(&inspected));
    let config = String::from_utf8_lossy(&inspected.stdout).trim().to_owned();
    let fields: Vec<&str> = config.split('|').collect();
    assert_eq!(fields[0], "10001:10001", "{config}");
    assert!(fields[1].contains("/var/lib/toolcell"), "{config}");
    assert_eq!(fields[2], r#"["/usr/local/bin/toolcell"]"#, "{config}");
    assert!(fields[3].contains("8750"), "{config}");

    // Its files: the binary as built, the libraries it links, and no shell.
    let container = podman(&["create", &image.0]);
    assert!(container.status.success(), "{}", text(&container));
    let id = String::from_utf8_lossy(&container.stdout).trim().to_owned();
    let exported = temp.path().join("exported.tar");
    let export = podman(&["export", "-o", &exported.to_string_lossy(), &id]);
    let _ = podman(&["rm", "-f", &id]);
    assert!(export.status.success(), "{}", text(&export));
    let root = temp.path().join("root");
    std::fs::create_dir_all(&root).expect("root");
    let untar = Command::new("tar").arg("-xf").arg(&exported).arg("-C").arg(&root).output().expect("tar");
    assert!(untar.status.success(), "{}", text(&untar));
    let inside = root.join("usr/local/bin/toolcell");
    assert_eq!(
        toolcell_tests::sha256_hex(&std::fs::read(&inside).expect("the binary")),
        toolcell_tests::sha256_hex(&std::fs::read(binary).expect("built"))
    );
    assert!(!root.join("bin/sh").exists() && !root.join("usr/bin/sh").exists(), "the image holds a shell");
    let passwd = std::fs::read_to_string(root.join("etc/passwd")).expect("passwd");
    assert!(passwd.contains("toolcell:x:10001:10001:"), "{passwd}");

    // `serve` from the image answers its probe: in a container where the machine allows one,
    // else the image's binary on the image's own loader and libraries.
    let workspace = temp.path().join("workspace");
    std::fs::create_dir_all(&workspace).expect("workspace");
    let (_, token_line) = served::token();
    let service = temp.path().join("service.toml");
    std::fs::write(
        &service,
        format!(
            "[workspaces]\napp = \"{}\"\n\n[[principals]]\nname = \"ci\"\n{token_line}\nworkspace = \"app\"\nrole = \"impl\"\n",
            workspace.display()
        ),
    )
    .expect("service.toml");
    let probe = podman(&["run", "--rm", &image.0, "--version"]);
    let direct = !probe.status.success();
    if direct {
        let reason = text(&probe);
        assert!(
            reason.contains("Operation not permitted") || reason.contains("permission denied"),
            "podman run failed otherwise: {reason}"
        );
        let _ = writeln!(
            std::io::stderr(),
            "podman cannot run containers here ({}); running the image's binary on its own libraries",
            reason.trim()
        );
    } else {
        assert!(String::from_utf8_lossy(&probe.stdout).starts_with("toolcell "), "{}", text(&probe));
    }
    let loader = root.join("lib64/ld-linux-x86-64.so.2");
    let mut command = Command::new(&loader);
    command
        .arg("--library-path")
        .arg(root.join("lib/x86_64-linux-gnu"))
        .arg(&inside)
        .arg("--state-dir")
        .arg(temp.path().join("state"))
        .arg("--cache-dir")
        .arg(temp.path().join("cache"))
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&service);
    let serving = served::spawn(command);
    let answer = ureq::get(&format!("{}healthz", serving.url)).call().expect("GET /healthz");
    assert_eq!(answer.status().as_u16(), 200);
}
