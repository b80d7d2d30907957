"""The task-chain scenario over MCP with the official Python SDK: one `toolcell mcp` per role.

Usage: chain_client.py TOOLCELL WORKSPACE STATE_DIR
The control server plans the chain and spawns an implementation session; a second server,
started as that spawned session (its role and task come from the host's record), does the work;
control reviews. Prints one JSON document with every call's result, in order.
"""

import asyncio
import contextlib
import json
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from mcp_client import result

CHAIN = "CHAIN-039-file-ops"
TASK = CHAIN + "/001-parse-headers"


async def server(stack, toolcell, workspace, state_dir, args):
    params = StdioServerParameters(
        command=toolcell,
        args=["--state-dir", state_dir, "--policy", "builtin:workflow", "mcp", "--workspace", workspace] + args,
    )
    read, write = await stack.enter_async_context(stdio_client(params))
    session = await stack.enter_async_context(ClientSession(read, write))
    await session.initialize()
    return session


async def main():
    toolcell, workspace, state_dir = sys.argv[1:4]
    calls = []

    async def call(role, session, name, arguments):
        answered = result(await session.call_tool(name, arguments))
        calls.append({"role": role, "tool": name, **answered})
        return answered

    async with contextlib.AsyncExitStack() as stack:
        control = await server(stack, toolcell, workspace, state_dir, ["--role", "control", "--session", "py-control"])
        control_tools = sorted(tool.name for tool in (await control.list_tools()).tools)
        await call("control", control, "chain_new", {"cr": "CR-039", "slug": "file-ops", "title": "File operations"})
        await call("control", control, "task_add", {"chain": CHAIN, "title": "Parse headers", "objective": "In src/.", "criteria": ["parses", "rejects garbage"]})
        await call("control", control, "task_add", {"chain": CHAIN, "title": "Print headers", "objective": "In src/.", "criteria": ["prints"]})
        await call("control", control, "task_start", {"task": TASK, "locks": ["src/**"]})
        spawned = await call("control", control, "spawn_impl_session", {"task": TASK})
        child = spawned["structured"]["session_id"]

        async with contextlib.AsyncExitStack() as impl_stack:
            worker = await server(impl_stack, toolcell, workspace, state_dir, ["--role", "impl", "--session", child])
            impl_tools = sorted(tool.name for tool in (await worker.list_tools()).tools)
            await call("impl", worker, "task_status", {})
            await call("impl", worker, "read_file", {"path": "src/main.rs"})
            await call("impl", worker, "write_file", {"path": "src/main.rs", "content": "fn main() { parse(); }\n"})
            await call("impl", worker, "move_file", {"source": "docs/tasks/in-progress/" + CHAIN + "/001-parse-headers.md", "destination": "docs/tasks/done/" + CHAIN + "/001-parse-headers.md"})
            await call("impl", worker, "task_complete", {"note": "Parses.", "criteria": [1]})
            await call("control", control, "task_rework", {"task": TASK, "reason": "Garbage is accepted."})
            await call("impl", worker, "task_status", {})
            await call("impl", worker, "edit_file", {"path": "src/main.rs", "old_string": "parse();", "new_string": "parse().unwrap();"})
            await call("impl", worker, "task_complete", {"note": "Rejects garbage.", "criteria": [2]})
        await call("control", control, "task_approve", {"task": TASK})
        await call("control", control, "chain_status", {"chain": CHAIN})

    print(json.dumps({"control_tools": control_tools, "impl_tools": impl_tools, "child": child, "calls": calls}))


asyncio.run(main())
