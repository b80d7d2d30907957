// The official TypeScript MCP SDK's client on toolcell's resources, over stdio (`toolcell mcp`)
// or Streamable HTTP (`toolcell serve`): the same scenario as resources.py, and the same report
// (which host/toolcell/tests/resources.rs checks).
//
// Usage: node resources.mjs SDK_DIR stdio WORKSPACE TOOLCELL ARGS...
//        node resources.mjs SDK_DIR http WORKSPACE URL TOKEN
// WORKSPACE is the workspace's directory: the edits are made there by other processes.

import path from "node:path";
import { execFileSync } from "node:child_process";

const [sdkDir, mode, workspace, ...rest] = process.argv.slice(2);
const load = (module) => import(path.join(sdkDir, "dist/esm", module));
const { Client } = await load("client/index.js");
const { ResourceUpdatedNotificationSchema, ResourceListChangedNotificationSchema, McpError } = await load("types.js");

let transport;
if (mode === "stdio") {
  const { StdioClientTransport } = await load("client/stdio.js");
  transport = new StdioClientTransport({ command: rest[0], args: rest.slice(1), stderr: "ignore" });
} else if (mode === "http") {
  const { StreamableHTTPClientTransport } = await load("client/streamableHttp.js");
  const [url, token] = rest;
  transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
} else {
  throw new Error(`unknown mode ${mode}`);
}

const seen = [];
const client = new Client({ name: "toolcell-ts-resources", version: "1.0.0" });
client.setNotificationHandler(ResourceUpdatedNotificationSchema, (notification) => {
  seen.push({ updated: notification.params.uri });
});
client.setNotificationHandler(ResourceListChangedNotificationSchema, () => {
  seen.push({ list_changed: true });
});
await client.connect(transport);

// Another process writes, as an editor would.
const edit = (file, content) =>
  execFileSync(process.execPath, ["-e", "require('fs').writeFileSync(process.argv[1], process.argv[2])", path.join(workspace, file), content]);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const errorOf = async (promise) => {
  try {
    await promise;
    return null;
  } catch (error) {
    if (error instanceof McpError) return { code: error.code, message: error.message.replace(/^MCP error -?\d+: /, ""), data: error.data ?? null };
    throw error;
  }
};

const report = { capabilities: client.getServerCapabilities(), pages: [], resources: [] };
let cursor;
do {
  const listed = await client.listResources(cursor ? { cursor } : undefined);
  report.pages.push(listed.resources.length);
  for (const resource of listed.resources) {
    report.resources.push({ uri: resource.uri, name: resource.name, mimeType: resource.mimeType, size: resource.size });
  }
  cursor = listed.nextCursor;
} while (cursor);
report.templates = (await client.listResourceTemplates()).resourceTemplates.map((template) => template.uriTemplate);
report.text = (await client.readResource({ uri: "toolcell://workspace/notes.txt" })).contents;
report.image = (await client.readResource({ uri: "toolcell://workspace/img.png" })).contents;
report.binary = (await client.readResource({ uri: "toolcell://workspace/data.bin" })).contents;

report.errors = {};
for (const [label, file] of [["missing", "nope.txt"], ["denied", ".env"], ["hidden", ".toolcell-state/audit.jsonl"], ["foreign", null]]) {
  const uri = file ? `toolcell://workspace/${file}` : "file:///etc/passwd";
  report.errors[label] = {
    uri,
    read: await errorOf(client.readResource({ uri })),
    subscribe: await errorOf(client.subscribeResource({ uri })),
  };
}

await client.subscribeResource({ uri: "toolcell://workspace/notes.txt" });
seen.length = 0;
edit(".env", "TOKEN=changed\n");
edit("secret.pem", "-----BEGIN-----\n");
await sleep(2000);
report.after_denied_edits = [...seen];
seen.length = 0;
edit("notes.txt", "edited outside\n");
await sleep(2000);
report.after_edit = [...seen];
report.reread = (await client.readResource({ uri: "toolcell://workspace/notes.txt" })).contents[0].text;
seen.length = 0;
edit("fresh.txt", "new\n");
await sleep(2000);
report.after_create = [...seen];
await client.unsubscribeResource({ uri: "toolcell://workspace/notes.txt" });
seen.length = 0;
edit("notes.txt", "edited again\n");
await sleep(2000);
report.after_unsubscribe = [...seen];

report.completions = {};
for (const typed of ["", ".", "src/", "many/f0"]) {
  const { completion } = await client.complete({
    ref: { type: "ref/resource", uri: "toolcell://workspace/{+path}" },
    argument: { name: "path", value: typed },
  });
  report.completions[typed] = { values: completion.values, total: completion.total, hasMore: completion.hasMore };
}

await client.close();
process.stdout.write(JSON.stringify(report));
