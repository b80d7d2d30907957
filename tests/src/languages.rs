//! Tool components written in Python and JavaScript, built from source by their own pinned
//! toolchains (componentize-py from PyPI, componentize-js from npm, installed by
//! `.ci/language-toolchains` under the target directory), with the SDKs in `guest-tools/`.
//! A built component is kept under `target/language-toolchains/built/`, named by a hash of
//! everything it is built from, so each is built once.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

/// The repository's root.
fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ is in the repository").to_path_buf()
}

/// `(componentize-py, the directory whose node_modules holds componentize-js)`: from
/// `TOOLCELL_COMPONENTIZE_PY` and `TOOLCELL_COMPONENTIZE_JS`, else installed by
/// `.ci/language-toolchains`.
pub fn toolchains() -> &'static (PathBuf, PathBuf) {
    static TOOLCHAINS: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    TOOLCHAINS.get_or_init(|| {
        if let (Some(python), Some(javascript)) =
            (std::env::var_os("TOOLCELL_COMPONENTIZE_PY"), std::env::var_os("TOOLCELL_COMPONENTIZE_JS"))
        {
            return (PathBuf::from(python), PathBuf::from(javascript));
        }
        let output = Command::new(repository().join(".ci/language-toolchains")).output().expect("run .ci/language-toolchains");
        assert!(
            output.status.success(),
            "cannot install componentize-py (PyPI) and componentize-js (npm); they need python3 with venv, npm and the registries:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let printed = String::from_utf8(output.stdout).expect("UTF-8 paths");
        let mut lines = printed.lines();
        let python = PathBuf::from(lines.next().expect("the componentize-py line"));
        let javascript = PathBuf::from(lines.next().expect("the componentize-js line"));
        (python, javascript)
    })
}

/// The Node.js that runs componentize-js: `TOOLCELL_CONFORMANCE_NODE` (a pinned Node 24, in
/// CI), else `node` on the path.
pub fn node() -> PathBuf {
    std::env::var_os("TOOLCELL_CONFORMANCE_NODE").map_or_else(|| PathBuf::from("node"), PathBuf::from)
}

/// Every file of `wit/`, for the cache key.
fn wit_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![repository().join("wit")];
    while let Some(directory) = pending.pop() {
        for entry in std::fs::read_dir(&directory).expect("read wit/").flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The component built from `sources` (copied, with the SDK, into one directory) by `build`,
/// cached by a hash of every input.
fn built(kind: &str, sources: &[PathBuf], sdk: &[PathBuf], build: impl FnOnce(&Path, &Path)) -> Vec<u8> {
    static LOCK: Mutex<()> = Mutex::new(());
    let _one_at_a_time = LOCK.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut key = std::collections::hash_map::DefaultHasher::new();
    for path in sources.iter().chain(sdk).chain(&wit_files()) {
        std::hash::Hash::hash(&path.file_name(), &mut key);
        std::hash::Hash::hash(&std::fs::read(path).unwrap_or_else(|error| panic!("read {}: {error}", path.display())), &mut key);
    }
    std::hash::Hash::hash(kind, &mut key);
    let directory = toolchains().1.parent().expect("target/language-toolchains").join("built");
    let cached = directory.join(format!("{kind}-{:016x}.wasm", std::hash::Hasher::finish(&key)));
    if let Ok(bytes) = std::fs::read(&cached) {
        return bytes;
    }
    let work = tempfile::tempdir().expect("a build directory");
    for path in sources.iter().chain(sdk) {
        std::fs::copy(path, work.path().join(path.file_name().expect("a file name"))).expect("copy a source");
    }
    let out = work.path().join("tool.wasm");
    build(work.path(), &out);
    let bytes = std::fs::read(&out).expect("the built component");
    std::fs::create_dir_all(&directory).expect("create the build cache");
    let temporary = directory.join(format!(".{}.tmp", std::process::id()));
    std::fs::write(&temporary, &bytes).expect("cache the component");
    std::fs::rename(&temporary, &cached).expect("cache the component");
    bytes
}

/// A Python tool: `app.py` in `directory` (with any other `.py` files there) and the Python
/// SDK, built with componentize-py against world `plugin`.
pub fn python_tool(directory: &Path) -> Vec<u8> {
    let mut sources: Vec<PathBuf> = std::fs::read_dir(directory)
        .expect("read the tool's directory")
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "py"))
        .collect();
    sources.sort();
    let sdk = [repository().join("guest-tools/sdk-python/toolcell.py")];
    built("python", &sources, &sdk, |work, out| {
        crate::run_ok(
            Command::new(&toolchains().0)
                .current_dir(work)
                .args(["-q", "-d"])
                .arg(repository().join("wit"))
                .args(["-w", "plugin", "componentize", "app", "-o"])
                .arg(out),
        );
    })
}

/// A JavaScript tool: `tool.js` in `directory` and the JavaScript SDK, built with
/// componentize-js against world `tool-component`.
pub fn javascript_tool(directory: &Path) -> Vec<u8> {
    let sources = [directory.join("tool.js")];
    let sdk = [repository().join("guest-tools/sdk-js/toolcell.js"), repository().join("guest-tools/sdk-js/build.mjs")];
    built("javascript", &sources, &sdk, |work, out| {
        // Run from where componentize-js is installed, so that `build.mjs` finds it.
        let builder = toolchains().1.join("build.mjs");
        std::fs::copy(work.join("build.mjs"), &builder).expect("place build.mjs");
        crate::run_ok(Command::new(node()).arg(&builder).arg(work.join("tool.js")).arg(out).arg("--wit").arg(repository().join("wit")));
    })
}

/// The Python example (`examples/todo-finder-py`).
pub fn python_example() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| python_tool(&repository().join("examples/todo-finder-py")))
}

/// The JavaScript example (`examples/word-freq-js`).
pub fn javascript_example() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| javascript_tool(&repository().join("examples/word-freq-js")))
}

/// The hostile Python tool (`tests/guest-programs-py/hostile`).
pub fn hostile_python() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| python_tool(&repository().join("tests/guest-programs-py/hostile")))
}

/// The hostile JavaScript tool (`tests/guest-programs-js/hostile`).
pub fn hostile_javascript() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| javascript_tool(&repository().join("tests/guest-programs-js/hostile")))
}

/// A Python tool written against the raw bindings whose `describe()` raises
/// (`tests/guest-programs-py/bad-describe`).
pub fn bad_describe_python() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| python_tool(&repository().join("tests/guest-programs-py/bad-describe")))
}

/// A Python tool written against the raw bindings, whose exception traps
/// (`tests/guest-programs-py/raw`).
pub fn raw_python() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| python_tool(&repository().join("tests/guest-programs-py/raw")))
}
