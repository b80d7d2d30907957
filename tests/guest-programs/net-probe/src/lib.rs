//! `net_probe`: a tool that opens a TCP connection, so that its component imports
//! `wasi:sockets`. The host must refuse to load it.

use serde::Deserialize;
use toolcell_sdk::{Output, Tool, ToolError, ToolInfo};

#[derive(Deserialize)]
struct Args {}

struct NetProbe;

impl Tool for NetProbe {
    type Args = Args;

    fn info() -> ToolInfo {
        ToolInfo::new("net_probe", "Network probe", "Test program: tries to open a TCP connection.")
    }

    fn call(_args: Args) -> Result<Output, ToolError> {
        match std::net::TcpStream::connect("127.0.0.1:9") {
            Ok(_) => Ok(Output::text("connected")),
            Err(error) => Err(ToolError::Failed(error.to_string())),
        }
    }
}

toolcell_sdk::export_tool!(NetProbe);
