// The official TypeScript MCP SDK's client giving `toolcell mcp` (started without `--workspace`)
// its workspace through roots: the `follow` mode of roots.py (serve the first root, then the
// next after roots/list_changed), with the same report.
//
// Usage: node roots.mjs SDK_DIR ROOT_URI NEXT_ROOT_URI -- TOOLCELL ARGS...

import path from "node:path";

const [sdkDir, first, next, separator, ...command] = process.argv.slice(2);
if (separator !== "--") throw new Error("usage: roots.mjs SDK_DIR ROOT_URI NEXT_ROOT_URI -- TOOLCELL ARGS...");
const load = (module) => import(path.join(sdkDir, "dist/esm", module));
const { Client } = await load("client/index.js");
const { StdioClientTransport } = await load("client/stdio.js");
const { ListRootsRequestSchema, ResourceListChangedNotificationSchema } = await load("types.js");

let current = [first];
const seen = [];
const client = new Client({ name: "toolcell-ts-roots", version: "1.0.0" }, { capabilities: { roots: { listChanged: true } } });
client.setRequestHandler(ListRootsRequestSchema, async () => ({ roots: current.map((uri) => ({ uri })) }));
client.setNotificationHandler(ResourceListChangedNotificationSchema, () => seen.push("list_changed"));
await client.connect(new StdioClientTransport({ command: command[0], args: command.slice(1), stderr: "ignore" }));

const uris = async () => (await client.listResources()).resources.map((resource) => resource.uri);
const report = { tools: (await client.listTools()).tools.length };
report.first = await uris();
const read = await client.callTool({ name: "read_file", arguments: { path: "notes.txt" } });
report.read = read.content.filter((block) => block.type === "text").map((block) => block.text).join("");
current = [next];
await client.sendRootsListChanged();
await new Promise((resolve) => setTimeout(resolve, 1500));
report.next = await uris();
report.seen = seen;
await client.close();
process.stdout.write(JSON.stringify(report));
