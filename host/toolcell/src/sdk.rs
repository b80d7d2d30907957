//! `toolcell sdk python|javascript --out DIR`: what a tool author needs besides the language's
//! own toolchain, written into a directory: the SDK module and the contract (`wit/`, world
//! `plugin` for Python, `tool-component` for JavaScript). The files are those of this
//! toolcell's own source, built into the binary.

use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context as _;

/// The contract, as `wit/` holds it.
pub const WIT: &[(&str, &str)] = &[
    ("wit/tool.wit", include_str!("../../../wit/tool.wit")),
    ("wit/deps/README.md", include_str!("../../../wit/deps/README.md")),
    ("wit/deps/cli/package.wit", include_str!("../../../wit/deps/cli/package.wit")),
    ("wit/deps/clocks/package.wit", include_str!("../../../wit/deps/clocks/package.wit")),
    ("wit/deps/filesystem/package.wit", include_str!("../../../wit/deps/filesystem/package.wit")),
    ("wit/deps/io/package.wit", include_str!("../../../wit/deps/io/package.wit")),
    ("wit/deps/random/package.wit", include_str!("../../../wit/deps/random/package.wit")),
    ("wit/deps/sockets/package.wit", include_str!("../../../wit/deps/sockets/package.wit")),
];

/// The Python SDK.
const PYTHON: &[(&str, &str)] = &[("toolcell.py", include_str!("../../../guest-tools/sdk-python/toolcell.py"))];

/// The JavaScript SDK and its build script.
const JAVASCRIPT: &[(&str, &str)] = &[
    ("toolcell.js", include_str!("../../../guest-tools/sdk-js/toolcell.js")),
    ("build.mjs", include_str!("../../../guest-tools/sdk-js/build.mjs")),
];

/// Write the SDK of `language` and the contract into `out` (created if missing). Existing
/// files of the same names are replaced; nothing else is touched.
pub fn write(language: &str, out: &Path) -> anyhow::Result<ExitCode> {
    let (sdk, next) = match language {
        "python" => (
            PYTHON,
            "next: write app.py (guest-tools/README.md shows one), then\n  componentize-py -d wit -w plugin componentize app -o TOOL.wasm",
        ),
        "javascript" => (
            JAVASCRIPT,
            "next: npm install @bytecodealliance/componentize-js@0.23.0, write tool.js (guest-tools/README.md shows one), then\n  node build.mjs tool.js TOOL.wasm",
        ),
        other => anyhow::bail!("there is no SDK for `{other}`: choose `python` or `javascript` (Rust tools use the `toolcell-sdk` crate)"),
    };
    for (name, content) in sdk.iter().chain(WIT) {
        let path = out.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("cannot create `{}`", parent.display()))?;
        }
        std::fs::write(&path, content).with_context(|| format!("cannot write `{}`", path.display()))?;
    }
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "wrote the {language} SDK and the contract (wit/, toolcell:tool@0.2.2) into {}", out.display())?;
    writeln!(stdout, "{next}")?;
    Ok(ExitCode::SUCCESS)
}
