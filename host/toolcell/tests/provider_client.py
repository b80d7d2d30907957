"""The providers' built-in tools over MCP, as the official Python SDK calls them, and an
image read as MCP image content.

Usage: provider_client.py TOOLCELL WORKSPACE STATE_DIR POLICY
Prints one JSON document with the tools listed and what each call returned.
"""

import asyncio
import base64
import json
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


async def main():
    toolcell, workspace, state_dir, policy = sys.argv[1:5]
    params = StdioServerParameters(
        command=toolcell,
        args=["--state-dir", state_dir, "--policy", policy, "mcp", "--workspace", workspace, "--role", "impl"],
    )
    calls = [
        ("view", "str_replace_based_edit_tool", {"command": "view", "path": "primes.py"}),
        ("replace", "str_replace_based_edit_tool", {
            "command": "str_replace", "path": "primes.py",
            "old_str": "    for num in range(2, limit + 1)", "new_str": "    for num in range(2, limit + 1):",
        }),
        ("denied", "str_replace_based_edit_tool", {"command": "view", "path": "secrets/key.txt"}),
        ("patch", "apply_patch", {"operation": {"type": "create_file", "path": "notes.md", "diff": "+hello\n"}}),
        ("image", "read_file", {"path": "logo.png"}),
    ]
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            listed = await session.list_tools()
            report = {"tools": {tool.name: tool.input_schema for tool in listed.tools}, "calls": {}}
            for label, name, arguments in calls:
                call = await session.call_tool(name, arguments)
                report["calls"][label] = {
                    "is_error": bool(call.is_error),
                    "text": "".join(block.text for block in call.content if getattr(block, "type", "") == "text"),
                    "images": [
                        {"mime_type": block.mime_type, "bytes": len(base64.b64decode(block.data))}
                        for block in call.content
                        if getattr(block, "type", "") == "image"
                    ],
                }
    print(json.dumps(report))


asyncio.run(main())
