// The official TypeScript MCP SDK's client against toolcell, over stdio (`toolcell mcp`) or
// Streamable HTTP (`toolcell serve`): list the tools, then call every one with valid arguments
// and with invalid ones. The SDK validates each result's `structuredContent` against the tool's
// `outputSchema` when the tool declares one, and fails the call if it does not match.
//
// Usage: node ts_client.mjs SDK_DIR stdio TOOLCELL WORKSPACE STATE_DIR CACHE_DIR
//        node ts_client.mjs SDK_DIR http URL TOKEN
// Prints one JSON document: the tools listed and, per call, whether it failed and its text.

import path from "node:path";

const [sdkDir, mode, ...rest] = process.argv.slice(2);
const load = (module) => import(path.join(sdkDir, "dist/esm", module));
const { Client } = await load("client/index.js");

let transport;
if (mode === "stdio") {
  const { StdioClientTransport } = await load("client/stdio.js");
  const [toolcell, workspace, state, cache] = rest;
  transport = new StdioClientTransport({
    command: toolcell,
    args: ["--cache-dir", cache, "--state-dir", state, "mcp", "--workspace", workspace, "--role", "impl", "--session", "ts-stdio"],
    stderr: "ignore",
  });
} else if (mode === "http") {
  const { StreamableHTTPClientTransport } = await load("client/streamableHttp.js");
  const [url, token] = rest;
  transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
} else {
  throw new Error(`unknown mode ${mode}`);
}

const client = new Client({ name: "toolcell-ts-test", version: "1.0.0" });
await client.connect(transport);
const listed = await client.listTools();

// Valid arguments for every tool of the `impl` role, in an order that works on the fixture
// (notes.txt holds "hello"); each call relies on the ones before it.
const valid = [
  ["read_file", { path: "notes.txt" }],
  ["read_many", { paths: ["notes.txt"] }],
  ["file_info", { path: "notes.txt" }],
  ["list_files", {}],
  ["directory_tree", {}],
  ["search_files", { query: "hello" }],
  ["edit_file", { path: "notes.txt", old_string: "hello", new_string: "hello from TypeScript" }],
  ["insert_text", { path: "notes.txt", line: 1, text: "first line" }],
  ["write_file", { path: "new.txt", content: "new\n" }],
  ["apply_patch", { patch: "*** Begin Patch\n*** Add File: added.txt\n+added\n*** End Patch" }],
  ["create_directory", { path: "dir" }],
  ["move_file", { source: "new.txt", destination: "dir/new.txt" }],
  ["delete_file", { path: "dir/new.txt" }],
  ["undo_edit", { path: "notes.txt" }],
  ["lock_files", { paths: ["notes.txt"] }],
  ["unlock_files", {}],
];

const shape = (result) => ({
  isError: Boolean(result.isError),
  text: (result.content ?? []).filter((block) => block.type === "text").map((block) => block.text).join(""),
  structured: result.structuredContent ?? null,
});

const calls = {};
for (const [name, args] of valid) {
  const entry = {};
  try {
    entry.valid = shape(await client.callTool({ name, arguments: args }));
  } catch (error) {
    entry.valid = { thrown: String(error) };
  }
  try {
    entry.invalid = shape(await client.callTool({ name, arguments: { no_such_argument: 1 } }));
  } catch (error) {
    entry.invalid = { thrown: String(error) };
  }
  calls[name] = entry;
}
await client.close();

process.stdout.write(JSON.stringify({
  tools: listed.tools.map((tool) => ({ name: tool.name, hasOutputSchema: Boolean(tool.outputSchema) })),
  calls,
}));
