"""A real MCP client (the official Python SDK) driving `toolcell mcp`.

Usage: mcp_client.py TOOLCELL WORKSPACE STATE_DIR
Prints one JSON document with what each role saw and what each call returned.
"""

import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def result(call):
    return {
        "is_error": bool(call.is_error),
        "text": "".join(block.text for block in call.content if getattr(block, "type", "") == "text"),
        "structured": call.structured_content,
        "meta": call.meta,
    }


async def session_for(toolcell, workspace, state_dir, role, actions):
    params = StdioServerParameters(
        command=toolcell,
        args=["--state-dir", state_dir, "mcp", "--workspace", workspace, "--role", role, "--session", f"py-{role}"],
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            initialized = await session.initialize()
            listed = await session.list_tools()
            tools = [
                {
                    "name": tool.name,
                    "title": tool.title,
                    "has_schema": tool.input_schema.get("type") == "object",
                    "read_only": tool.annotations.read_only_hint,
                    "destructive": tool.annotations.destructive_hint,
                    "idempotent": tool.annotations.idempotent_hint,
                }
                for tool in listed.tools
            ]
            calls = {}
            for label, name, arguments in actions:
                calls[label] = result(await session.call_tool(name, arguments))
            return {"server": initialized.server_info.name, "tools": tools, "calls": calls}


async def main():
    toolcell, workspace, state_dir = sys.argv[1:4]
    report = {
        "control": await session_for(toolcell, workspace, state_dir, "control", [
            ("write", "write_file", {"path": "src/new.rs", "content": "x"}),
        ]),
        "impl": await session_for(toolcell, workspace, state_dir, "impl", [
            ("read", "read_file", {"path": "src/main.rs"}),
            ("edit", "edit_file", {"path": "src/main.rs", "old_string": "world", "new_string": "mcp"}),
            ("read_again", "read_file", {"path": "src/main.rs"}),
            ("denied_write", "write_file", {"path": "docs/guide.md", "content": "overwritten"}),
            ("bad_args", "read_file", {"path": 42}),
            ("unknown_tool", "rm_rf", {}),
        ]),
    }
    print(json.dumps(report))


if __name__ == "__main__":
    asyncio.run(main())
