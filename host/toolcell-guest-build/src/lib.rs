//! Compile a cargo workspace of guest components for `wasm32-wasip2` from a build script.
//!
//! The guests live in workspaces of their own (`guest-tools/`, `tests/guest-programs/`), so
//! that the host workspace never builds them for the host target. A build script calls
//! [`build_guests`], which runs `cargo build --release --target wasm32-wasip2` on that workspace
//! into a target directory shared by every host profile (so switching between debug and release
//! host builds does not rebuild the guests), and writes a Rust file listing the components for
//! `include!`. `TOOLCELL_GUEST_TARGET_DIR` (an absolute path) names that directory for builds
//! with a target directory of their own, such as the fuzzers'.
//!
//! ```no_run
//! // build.rs
//! toolcell_guest_build::build_guests(&toolcell_guest_build::GuestWorkspace {
//!     manifest_dir: "../../guest-tools".as_ref(),
//!     packages: &[("tool-read-file", "read_file")],
//!     extra_inputs: &["../../wit".as_ref()],
//!     output_name: "builtins.rs",
//! });
//! ```

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The Rust target guests are built for.
pub const GUEST_TARGET: &str = "wasm32-wasip2";

/// What to build and what to call the results.
pub struct GuestWorkspace<'a> {
    /// The guest workspace's directory (holding its `Cargo.toml`), relative to the calling
    /// crate's manifest directory or absolute.
    pub manifest_dir: &'a Path,
    /// `(cargo package name, component name)` for each component to embed. The package must be
    /// a `cdylib`; its artifact is `<package with _ for ->.wasm`.
    pub packages: &'a [(&'a str, &'a str)],
    /// Other files or directories whose change must rebuild the guests (the WIT contract).
    pub extra_inputs: &'a [&'a Path],
    /// The file written into `OUT_DIR`: `pub static COMPONENTS: &[(&str, &[u8])]`, for `include!`.
    pub output_name: &'a str,
}

/// Build the guests and write the listing. Meant for build scripts: any failure panics with a
/// message that says how to fix it, which cargo shows as the build error.
///
/// # Panics
///
/// When `cargo` cannot run, the `wasm32-wasip2` target is not installed, or a guest fails to
/// compile.
pub fn build_guests(workspace: &GuestWorkspace<'_>) {
    let crate_dir = PathBuf::from(env("CARGO_MANIFEST_DIR"));
    let out_dir = PathBuf::from(env("OUT_DIR"));
    let guest_dir = crate_dir.join(workspace.manifest_dir);
    let target_dir = guest_target_dir(&out_dir);

    watch(&guest_dir.join("Cargo.toml"));
    watch(&guest_dir.join("Cargo.lock"));
    for entry in
        std::fs::read_dir(&guest_dir).unwrap_or_else(|error| panic!("cannot read the guest workspace `{}`: {error}", guest_dir.display()))
    {
        let path = entry.map(|entry| entry.path()).unwrap_or_default();
        if path.join("Cargo.toml").is_file() {
            watch(&path);
        }
    }
    for input in workspace.extra_inputs {
        watch(&crate_dir.join(input));
    }

    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .arg("build")
        .arg("--release")
        .arg("--target")
        .arg(GUEST_TARGET)
        .arg("--manifest-path")
        .arg(guest_dir.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir)
        // 128-bit SIMD, which wasmtime compiles to the host's vector instructions: `memchr`,
        // `regex` and `aho-corasick` use it to scan text (line counting, searches).
        .arg("--config")
        .arg("target.wasm32-wasip2.rustflags = [\"-Ctarget-feature=+simd128\"]");
    for (package, _) in workspace.packages {
        command.arg("--package").arg(package);
    }
    // The outer build's settings are for the host target; the guests have their own profile.
    for variable in [
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTFLAGS",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "CARGO_BUILD_RUSTFLAGS",
        "CARGO_PROFILE_RELEASE_DEBUG",
        "CARGO_PROFILE_RELEASE_OPT_LEVEL",
        "CARGO_PROFILE_RELEASE_LTO",
        "RUSTC_WORKSPACE_WRAPPER",
    ] {
        command.env_remove(variable);
    }
    let output = command.output().unwrap_or_else(|error| panic!("cannot run cargo to build the guest components: {error}"));
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        if stderr.contains("may not be installed")
            || stderr.contains("can't find crate for `core`")
            || stderr.contains("can't find crate for `std`")
        {
            panic!(
                "the Rust target `{GUEST_TARGET}` is not installed, and toolcell's tools are built for it.\n\
                 Install it with:\n\n    rustup target add {GUEST_TARGET}\n\nthen build again.\n\ncargo said:\n{stderr}"
            );
        }
        panic!("building the guest components in `{}` failed:\n{stderr}", guest_dir.display());
    }

    let artifacts = target_dir.join(GUEST_TARGET).join("release");
    let mut listing = String::from("/// Generated by toolcell-guest-build: `(component name, component bytes)`.\n");
    listing.push_str("pub static COMPONENTS: &[(&str, &[u8])] = &[\n");
    for (package, name) in workspace.packages {
        let artifact = artifacts.join(format!("{}.wasm", package.replace('-', "_")));
        // Copy into OUT_DIR so that the embedded bytes cannot change under a finished build.
        let copy = out_dir.join(format!("{name}.wasm"));
        std::fs::copy(&artifact, &copy)
            .unwrap_or_else(|error| panic!("the guest `{package}` built, but `{}` cannot be copied: {error}", artifact.display()));
        let _ = writeln!(listing, "    ({name:?}, include_bytes!({:?})),", copy.display().to_string());
    }
    listing.push_str("];\n");
    std::fs::write(out_dir.join(workspace.output_name), listing)
        .unwrap_or_else(|error| panic!("cannot write `{}`: {error}", workspace.output_name));
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("`{name}` is not set: build_guests runs only from a build script"))
}

fn watch(path: &Path) {
    let _ = writeln!(std::io::stdout(), "cargo:rerun-if-changed={}", path.display());
}

/// Where the guests are built: `TOOLCELL_GUEST_TARGET_DIR` if set (so that a build with
/// another target directory, such as the fuzzers', reuses one guest build: the guests' flags
/// never depend on the outer build's), else `guests` in the cargo target directory holding
/// `out_dir` (it carries `CACHEDIR.TAG`), shared by every host profile; in `out_dir` itself if
/// none is found.
fn guest_target_dir(out_dir: &Path) -> PathBuf {
    let _ = writeln!(std::io::stdout(), "cargo:rerun-if-env-changed={GUEST_TARGET_DIR_VARIABLE}");
    choose_guest_target_dir(out_dir, std::env::var_os(GUEST_TARGET_DIR_VARIABLE).map(PathBuf::from))
}

/// [`guest_target_dir`], given the variable's value.
fn choose_guest_target_dir(out_dir: &Path, chosen: Option<PathBuf>) -> PathBuf {
    if let Some(directory) = chosen.filter(|directory| !directory.as_os_str().is_empty()) {
        assert!(
            directory.is_absolute(),
            "{GUEST_TARGET_DIR_VARIABLE} is `{}`, a relative path, which each build script would read from its own directory: give an absolute path",
            directory.display()
        );
        return directory;
    }
    out_dir.ancestors().find(|dir| dir.join("CACHEDIR.TAG").is_file()).unwrap_or(out_dir).join("guests")
}

/// The variable naming a guest target directory of its own (see [`guest_target_dir`]).
const GUEST_TARGET_DIR_VARIABLE: &str = "TOOLCELL_GUEST_TARGET_DIR";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_guests_go_beside_the_target_directory_or_where_the_variable_says() {
        let target = tempfile::tempdir().expect("temporary directory");
        let out_dir = target.path().join("debug/build/toolcell-builtins-0123/out");
        std::fs::create_dir_all(&out_dir).expect("create out dir");
        // No target directory found: beside OUT_DIR.
        assert_eq!(choose_guest_target_dir(&out_dir, None), out_dir.join("guests"));
        std::fs::write(target.path().join("CACHEDIR.TAG"), "Signature: 8a477f597d28d172789f06886806bc55").expect("tag");
        assert_eq!(choose_guest_target_dir(&out_dir, None), target.path().join("guests"));
        assert_eq!(choose_guest_target_dir(&out_dir, Some(PathBuf::new())), target.path().join("guests"));
        let elsewhere = target.path().join("shared-guests");
        assert_eq!(choose_guest_target_dir(&out_dir, Some(elsewhere.clone())), elsewhere);
    }

    #[test]
    #[should_panic(expected = "a relative path")]
    fn a_relative_guest_target_directory_is_refused() {
        choose_guest_target_dir(Path::new("/tmp/out"), Some(PathBuf::from("target/guests")));
    }
}
