"""The official Python MCP SDK's client giving `toolcell mcp` (started without `--workspace`) its
workspace through roots.

Usage: roots.py MODE ROOT_URI [NEXT_ROOT_URI] -- TOOLCELL ARGS...
MODE `follow`: serve ROOT_URI, then change the roots to NEXT_ROOT_URI (roots/list_changed).
MODE `refused`: ROOT_URI is not a local directory; every request says why.
MODE `none`: the client declares no roots.
MODE `advisory`: the server was started with `--workspace`; ROOT_URI names another directory.
Prints one JSON document, which host/toolcell/tests/resources.rs checks.
"""

import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError
import mcp.types as types


async def main():
    separator = sys.argv.index("--")
    mode, *roots = sys.argv[1:separator]
    command = sys.argv[separator + 1 :]
    current = [roots[0]] if roots else []
    seen = []

    async def list_roots(context):
        return types.ListRootsResult(roots=[types.Root(uri=uri) for uri in current])

    async def on_message(message):
        if isinstance(message, types.ResourceListChangedNotification):
            seen.append("list_changed")

    async def error_of(coroutine):
        try:
            await coroutine
            return None
        except MCPError as error:
            return {"code": error.error.code, "message": error.error.message}

    async def uris(session):
        return [resource.uri for resource in (await session.list_resources()).resources]

    report = {}
    params = StdioServerParameters(command=command[0], args=command[1:])
    callback = list_roots if mode != "none" else None
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, list_roots_callback=callback, message_handler=on_message) as session:
            initialized = await session.initialize()
            report["capabilities"] = initialized.capabilities.model_dump(exclude_none=True, by_alias=True)
            report["tools"] = len((await session.list_tools()).tools)
            if mode in ("follow", "advisory"):
                report["first"] = await uris(session)
                called = await session.call_tool("read_file", {"path": "notes.txt"})
                report["read"] = "".join(block.text for block in called.content if block.type == "text")
            if mode == "follow":
                current[:] = [roots[1]]
                await session.send_roots_list_changed()
                await asyncio.sleep(1.5)
                report["next"] = await uris(session)
                report["seen"] = seen
            if mode in ("refused", "none"):
                report["list"] = await error_of(session.list_resources())
                report["call"] = await error_of(session.call_tool("read_file", {"path": "notes.txt"}))
    print(json.dumps(report))


if __name__ == "__main__":
    asyncio.run(main())
