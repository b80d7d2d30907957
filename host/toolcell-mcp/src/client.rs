//! A minimal synchronous MCP client over a child process's stdio: newline-delimited JSON-RPC,
//! as the MCP stdio transport specifies. Enough to drive `toolcell mcp` from the demo and the
//! round-trip benchmark; platforms use a full MCP client.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use serde_json::{Value, json};

/// The protocol version the client asks for.
pub const PROTOCOL_VERSION: &str = "2025-06-18";

/// A connected MCP server process.
pub struct StdioClient {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
}

impl StdioClient {
    /// Start `command` with piped stdin and stdout (stderr is inherited) and initialize the
    /// session.
    ///
    /// # Errors
    ///
    /// The I/O error, or `InvalidData` if the server answers with something that is not a
    /// JSON-RPC response.
    pub fn spawn(command: &mut Command) -> std::io::Result<(StdioClient, Value)> {
        let mut child = command.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn()?;
        let stdin = child.stdin.take().ok_or_else(|| invalid("no stdin pipe"))?;
        let stdout = BufReader::new(child.stdout.take().ok_or_else(|| invalid("no stdout pipe"))?);
        let mut client = StdioClient { child, stdin: Some(stdin), stdout, next_id: 1 };
        let initialized = client.request(
            "initialize",
            json!({
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": { "name": "toolcell-stdio-client", "version": env!("CARGO_PKG_VERSION") }
            }),
        )?;
        client.send(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }))?;
        Ok((client, initialized))
    }

    /// The `tools/list` result.
    ///
    /// # Errors
    ///
    /// As [`request`](Self::request).
    pub fn list_tools(&mut self) -> std::io::Result<Value> {
        self.request("tools/list", json!({}))
    }

    /// The `tools/call` result (`content`, `structuredContent`, `isError`).
    ///
    /// # Errors
    ///
    /// As [`request`](Self::request).
    pub fn call_tool(&mut self, name: &str, arguments: &Value) -> std::io::Result<Value> {
        self.request("tools/call", json!({ "name": name, "arguments": arguments }))
    }

    /// Send a request and wait for its response's `result`.
    ///
    /// # Errors
    ///
    /// The I/O error; `InvalidData` for a JSON-RPC error response or a closed connection.
    pub fn request(&mut self, method: &str, params: Value) -> std::io::Result<Value> {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }))?;
        let mut line = String::new();
        loop {
            line.clear();
            if self.stdout.read_line(&mut line)? == 0 {
                return Err(invalid(&format!("the server closed the connection before answering `{method}`")));
            }
            let message: Value = serde_json::from_str(&line).map_err(|error| invalid(&format!("not JSON-RPC: {error}")))?;
            if message["id"] != json!(id) {
                // A notification or a request from the server: not ours.
                continue;
            }
            if let Some(error) = message.get("error") {
                return Err(invalid(&format!("`{method}` failed: {error}")));
            }
            return Ok(message["result"].clone());
        }
    }

    fn send(&mut self, message: &Value) -> std::io::Result<()> {
        let stdin = self.stdin.as_mut().ok_or_else(|| invalid("the connection is closed"))?;
        // One write per message, as a whole line (`writeln!` on the unbuffered pipe would send
        // each piece of the JSON text as a write of its own, waking the server for each).
        let mut line = message.to_string();
        line.push('\n');
        stdin.write_all(line.as_bytes())?;
        stdin.flush()
    }

    /// The server process's id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Close stdin (the server's cue to shut down) and wait for it to exit.
    ///
    /// # Errors
    ///
    /// The I/O error of waiting.
    pub fn close(mut self) -> std::io::Result<std::process::ExitStatus> {
        self.stdin.take();
        self.child.wait()
    }
}

impl Drop for StdioClient {
    fn drop(&mut self) {
        self.stdin.take();
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn invalid(message: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, message.to_owned())
}

/// The text content of a `tools/call` result, joined.
pub fn text_of(result: &Value) -> String {
    result["content"]
        .as_array()
        .map(|blocks| blocks.iter().filter_map(|block| block["text"].as_str()).collect::<Vec<_>>().join("\n"))
        .unwrap_or_default()
}
