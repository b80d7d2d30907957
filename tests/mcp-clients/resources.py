"""The official Python MCP SDK's client on toolcell's resources, over stdio (`toolcell mcp`) or
Streamable HTTP (`toolcell serve`): list every page, read text and an image, read denied,
hidden and missing files, subscribe and watch an outside edit, complete paths.

Usage: resources.py stdio WORKSPACE TOOLCELL ARGS...   (the server's command line)
       resources.py http WORKSPACE URL TOKEN
WORKSPACE is the workspace's directory: the edits are made there by other processes, as an
editor would. Prints one JSON document, which host/toolcell/tests/resources.rs checks.
"""

import asyncio
import json
import sys

import httpx2  # noqa: F401  (the SDK's HTTP client)
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
import mcp.types as types


async def edit(path, content):
    """Write `content` to `path` from another process (not the server, not this one)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "import sys; open(sys.argv[1], 'w').write(sys.argv[2])", path, content
    )
    assert await process.wait() == 0


async def scenario(session, workspace, seen):
    initialized = await session.initialize()
    capabilities = initialized.capabilities.model_dump(exclude_none=True, by_alias=True)
    report = {"capabilities": capabilities, "pages": [], "resources": []}
    cursor = None
    while True:
        listed = await session.list_resources(params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
        report["pages"].append(len(listed.resources))
        for resource in listed.resources:
            report["resources"].append(
                {"uri": resource.uri, "name": resource.name, "mimeType": resource.mime_type, "size": resource.size}
            )
        cursor = listed.next_cursor
        if not cursor:
            break
    templates = await session.list_resource_templates()
    report["templates"] = [template.uri_template for template in templates.resource_templates]

    text = await session.read_resource("toolcell://workspace/notes.txt")
    report["text"] = [content.model_dump(exclude_none=True, by_alias=True) for content in text.contents]
    image = await session.read_resource("toolcell://workspace/img.png")
    report["image"] = [content.model_dump(exclude_none=True, by_alias=True) for content in image.contents]
    binary = await session.read_resource("toolcell://workspace/data.bin")
    report["binary"] = [content.model_dump(exclude_none=True, by_alias=True) for content in binary.contents]

    async def error_of(coroutine):
        try:
            await coroutine
            return None
        except MCPError as error:
            return {"code": error.error.code, "message": error.error.message, "data": error.error.data}

    report["errors"] = {}
    for label, path in [("missing", "nope.txt"), ("denied", ".env"), ("hidden", ".toolcell-state/audit.jsonl"), ("foreign", None)]:
        uri = f"toolcell://workspace/{path}" if path else "file:///etc/passwd"
        report["errors"][label] = {
            "uri": uri,
            "read": await error_of(session.read_resource(uri)),
            "subscribe": await error_of(session.subscribe_resource(uri)),
        }

    await session.subscribe_resource("toolcell://workspace/notes.txt")
    # A denied file and a new denied file change: nothing is told.
    seen.clear()
    await edit(f"{workspace}/.env", "TOKEN=changed\n")
    await edit(f"{workspace}/secret.pem", "-----BEGIN-----\n")
    await asyncio.sleep(2.0)
    report["after_denied_edits"] = list(seen)
    # The subscribed file changes (two writes of one edit): one update.
    seen.clear()
    await edit(f"{workspace}/notes.txt", "edited outside\n")
    await asyncio.sleep(2.0)
    report["after_edit"] = list(seen)
    reread = await session.read_resource("toolcell://workspace/notes.txt")
    report["reread"] = reread.contents[0].text
    # A new readable file: the list changed.
    seen.clear()
    await edit(f"{workspace}/fresh.txt", "new\n")
    await asyncio.sleep(2.0)
    report["after_create"] = list(seen)
    # Unsubscribed, an edit is not told.
    await session.unsubscribe_resource("toolcell://workspace/notes.txt")
    seen.clear()
    await edit(f"{workspace}/notes.txt", "edited again\n")
    await asyncio.sleep(2.0)
    report["after_unsubscribe"] = list(seen)

    ref = types.ResourceTemplateReference(uri="toolcell://workspace/{+path}")
    report["completions"] = {}
    for typed in ["", ".", "src/", "many/f0"]:
        completed = await session.complete(ref, {"name": "path", "value": typed})
        report["completions"][typed] = {
            "values": completed.completion.values,
            "total": completed.completion.total,
            "hasMore": completed.completion.has_more,
        }
    return report


async def main():
    mode, workspace, *rest = sys.argv[1:]
    seen = []

    async def on_message(message):
        if isinstance(message, types.ResourceUpdatedNotification):
            seen.append({"updated": message.params.uri})
        elif isinstance(message, types.ResourceListChangedNotification):
            seen.append({"list_changed": True})

    if mode == "stdio":
        params = StdioServerParameters(command=rest[0], args=rest[1:])
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write, message_handler=on_message) as session:
                report = await scenario(session, workspace, seen)
    else:
        url, token = rest
        async with create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as client:
            async with streamable_http_client(url, http_client=client) as (read, write):
                async with ClientSession(read, write, message_handler=on_message) as session:
                    report = await scenario(session, workspace, seen)
    print(json.dumps(report))


if __name__ == "__main__":
    asyncio.run(main())
