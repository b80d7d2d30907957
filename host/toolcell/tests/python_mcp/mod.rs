//! The official MCP Python SDK (PyPI, pinned) in a virtual environment under the target
//! directory, made once and shared by the tests that drive a Python client.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The SDK's pinned version.
pub const MCP_SDK: &str = "mcp==2.3.0";

/// The Python of the environment (`TOOLCELL_TEST_PYTHON` if set), made on first use (by one
/// test at a time: the tests that run beside it wait for it).
pub fn python_with_mcp() -> PathBuf {
    static MAKING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    if let Some(python) = std::env::var_os("TOOLCELL_TEST_PYTHON") {
        return PathBuf::from(python);
    }
    let _making = MAKING.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mcp-venv");
    let python = venv.join("bin/python");
    let ready = venv.join(".installed");
    if !ready.exists() {
        let status = Command::new("python3").arg("-m").arg("venv").arg(&venv).status().expect("run python3 -m venv");
        assert!(status.success(), "cannot create a virtual environment with python3");
        let status = Command::new(&python)
            .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", MCP_SDK])
            .status()
            .expect("run pip");
        assert!(status.success(), "cannot install {MCP_SDK} from PyPI");
        std::fs::write(&ready, MCP_SDK).expect("mark the environment ready");
    }
    python
}
