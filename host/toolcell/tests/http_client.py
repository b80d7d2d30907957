"""Real MCP clients against `toolcell serve`: the official Python SDK over Streamable HTTP, and
raw HTTP requests (httpx2, the SDK's own HTTP client) for what an SDK never sends.

Usage: http_client.py SCENARIO URL TOKEN_IMPL TOKEN_REVIEW [SESSION_ID]
Prints one JSON document with what the scenario saw.
"""

import asyncio
import json
import sys

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from mcp_client import result

ACCEPT = "application/json, text/event-stream"


async def sdk(url, token, actions):
    """Run `actions(session, seen)` in one SDK session authenticated by `token`."""
    seen = {"logs": [], "progress": []}

    async def on_log(params):
        seen["logs"].append({"level": params.level, "data": params.data})

    async with create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as client:
        async with streamable_http_client(url, http_client=client) as (read, write):
            async with ClientSession(read, write, logging_callback=on_log) as session:
                initialized = await session.initialize()
                seen["protocol"] = initialized.protocol_version
                seen["capabilities"] = initialized.capabilities.model_dump(exclude_none=True)
                listed = await session.list_tools()
                seen["tools"] = sorted(tool.name for tool in listed.tools)
                await actions(session, seen)
    return seen


async def main_scenario(url, impl_token, review_token):
    async def as_impl(session, seen):
        await session.set_logging_level("debug")
        seen["read"] = result(await session.call_tool("read_file", {"path": "notes.txt"}))
        seen["edit"] = result(await session.call_tool(
            "edit_file", {"path": "notes.txt", "old_string": "hello", "new_string": "hello over http"}))
        seen["secret"] = result(await session.call_tool("read_file", {"path": ".env"}))

        async def on_progress(progress, total, message):
            seen["progress"].append({"progress": progress, "message": message})

        seen["search"] = result(await session.call_tool(
            "search_files", {"query": "over http"}, progress_callback=on_progress))
        # Give the log notifications sent during the calls time to arrive.
        await asyncio.sleep(0.2)

    async def as_review(session, seen):
        seen["write"] = result(await session.call_tool("write_file", {"path": "x.txt", "content": "x"}))
        seen["read"] = result(await session.call_tool("read_file", {"path": "notes.txt"}))
        seen["unknown"] = result(await session.call_tool("rm_rf", {}))

    impl = await sdk(url, impl_token, as_impl)
    review = await sdk(url, review_token, as_review)
    return {"impl": impl, "review": review, "raw": await raw_checks(url, impl_token)}


async def raw_checks(url, token):
    """What the front door answers to requests an SDK would not send."""
    initialize = {
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
    }
    base = {"Accept": ACCEPT, "Content-Type": "application/json"}
    bearer = {**base, "Authorization": f"Bearer {token}"}
    checks = {
        "no_token": base,
        "unknown_token": {**base, "Authorization": "Bearer tc_not-a-token"},
        "basic_auth": {**base, "Authorization": "Basic YWxpY2U6cHc="},
        "foreign_host": {**bearer, "Host": "attacker.example"},
        "foreign_origin": {**bearer, "Origin": "http://attacker.example"},
        "good": bearer,
    }
    seen = {}
    async with httpx2.AsyncClient(timeout=30) as client:
        for name, headers in checks.items():
            response = await client.post(url, headers=headers, json=initialize)
            seen[name] = {"status": response.status_code, "www_authenticate": response.headers.get("www-authenticate")}
        big = {**initialize, "params": {**initialize["params"], "padding": "x" * (5 * 1024 * 1024)}}
        response = await client.post(url, headers=bearer, json=big)
        seen["too_large"] = {"status": response.status_code}
    # A call with a progress token: whatever progress it reports comes on its own stream, before
    # the result. (Whether a scan lasts long enough to report any depends on the machine; the
    # cancel scenario's call, which runs for seconds, must.)
    client, headers, _ = await raw_session(url, token)
    response = await client.post(url, headers=headers, json={
        "jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "search_files", "arguments": {"query": "\\w+_\\d+", "path": "tree"}, "_meta": {"progressToken": "p-7"}}})
    messages = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: ") and line[6:].strip()]
    seen["progress_stream"] = [message.get("method", "result" if "result" in message else "other") for message in messages]
    seen["progress_tokens"] = [message["params"]["progressToken"] for message in messages if message.get("method") == "notifications/progress"]
    await client.aclose()
    return seen


async def raw_session(url, token, session_id=None):
    """An httpx2 client speaking JSON-RPC in one MCP session (a new one unless `session_id`)."""
    client = httpx2.AsyncClient(timeout=30)
    headers = {"Accept": ACCEPT, "Content-Type": "application/json", "Authorization": f"Bearer {token}",
               "MCP-Protocol-Version": "2025-06-18"}
    if session_id is None:
        response = await client.post(url, headers=headers, json={
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
        })
        response.raise_for_status()
        session_id = response.headers["mcp-session-id"]
        headers["Mcp-Session-Id"] = session_id
        await client.post(url, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
    headers["Mcp-Session-Id"] = session_id
    return client, headers, session_id


def rpc_result(response):
    """The JSON-RPC message of a JSON or SSE response."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        for line in response.text.splitlines():
            if line.startswith("data: ") and line[6:].strip():
                message = json.loads(line[6:])
                if "id" in message:
                    return message
        return None
    return response.json()


async def call(client, headers, url, name, arguments, id=1):
    response = await client.post(url, headers=headers, json={
        "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": arguments}})
    return {"status": response.status_code, "message": rpc_result(response) if response.status_code == 200 else None}


async def before_restart(url, impl_token, review_token):
    """Open a session, lock a file, edit it; leave without ending the session."""
    client, headers, session_id = await raw_session(url, impl_token)
    locked = await call(client, headers, url, "lock_files", {"paths": ["notes.txt"], "ttl_seconds": 600})
    edited = await call(client, headers, url, "edit_file",
                        {"path": "notes.txt", "old_string": "hello", "new_string": "hello before the restart"}, id=2)
    # Another principal presenting this session id finds nothing.
    other_headers = {**headers, "Authorization": f"Bearer {review_token}"}
    hijack = await client.post(url, headers=other_headers, json={"jsonrpc": "2.0", "id": 3, "method": "tools/list"})
    # Nor does a session id the service never issued.
    made_up = await client.post(url, headers={**headers, "Mcp-Session-Id": "made-up-session"},
                                json={"jsonrpc": "2.0", "id": 4, "method": "tools/list"})
    await client.aclose()
    return {"session": session_id, "locked": locked, "edited": edited, "hijack": hijack.status_code, "made_up": made_up.status_code}


async def after_restart(url, impl_token, review_token, session_id):
    """Come back to the session after the service restarted: its undo history is there; end it."""
    client, headers, _ = await raw_session(url, impl_token, session_id)
    undone = await call(client, headers, url, "undo_edit", {"path": "notes.txt"})
    # A new session of the same principal is another lock owner: the lock holds against it
    # until the session that took it ends.
    other, other_headers, _ = await raw_session(url, impl_token)
    await call(other, other_headers, url, "read_file", {"path": "notes.txt"}, id=2)
    blocked = await call(other, other_headers, url, "write_file", {"path": "notes.txt", "content": "other session"}, id=3)
    ended = await client.delete(url, headers=headers)
    after_end = await call(other, other_headers, url, "write_file", {"path": "notes.txt", "content": "other session"}, id=4)
    gone = await client.post(url, headers=headers, json={"jsonrpc": "2.0", "id": 4, "method": "tools/list"})
    await client.aclose()
    await other.aclose()
    return {"undone": undone, "blocked": blocked, "ended": ended.status_code, "after_end": after_end, "gone": gone.status_code}


async def cancel(url, impl_token, review_token, mode="progress"):
    """Start a call that writes and never ends, stop it, and see the session go on.

    `progress`: the call asks for progress (so rmcp's session runs it) and is cancelled. The
    others are plain calls, which the service answers itself: `plain` is cancelled after a
    cancellation rmcp refuses (a foreign `Origin`) has changed nothing; `end` ends its session
    (`DELETE`); `gone` drops the call's connection, then cancels it from another one; `dupid`
    ends its session after another call under the same request id has come and gone.
    """
    import time
    client, headers, session_id = await raw_session(url, impl_token)
    started = time.monotonic()

    # What the call's own stream carries (it asked for progress), kept line by line so that
    # what came before the stream ended is there however it ends.
    streamed = []
    lines = []
    path = {"progress": "spun.txt", "plain": "spun-plain.txt", "end": "spun-end.txt", "gone": "spun-gone.txt",
            "dupid": "spun-dupid.txt"}[mode]
    params = {"name": "misbehave", "arguments": {"action": "write_then_spin", "path": path, "text": "half done"}}
    if mode == "progress":
        params["_meta"] = {"progressToken": "p-spin"}

    async def long_call():
        async with client.stream("POST", url, headers=headers, json={
                "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}) as response:
            async for line in response.aiter_lines():
                lines.append(line)
                if line.startswith("data: ") and line[6:].strip():
                    streamed.append(json.loads(line[6:]))

    async def call_then_go():
        # The call on a connection of its own, which the client then closes (the request's
        # answer still to come).
        from urllib.parse import urlsplit
        target = urlsplit(url)
        reader, writer = await asyncio.open_connection(target.hostname, target.port)
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}).encode()
        head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        writer.write(f"POST {target.path or '/'} HTTP/1.1\r\nHost: {target.netloc}\r\n{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
        await writer.drain()
        await asyncio.sleep(3.0)
        writer.close()
        await writer.wait_closed()

    running = asyncio.ensure_future(call_then_go() if mode == "gone" else long_call())
    # Time for the call to reach the component and write, on a loaded machine too.
    await asyncio.sleep(3.0)
    cancel_body = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1, "reason": "the user pressed stop"}}
    report = {}
    if mode == "plain":
        refused = await client.post(url, headers={**headers, "Origin": "http://evil.example"}, json=cancel_body)
        await asyncio.sleep(1.5)
        report["refused_cancel_status"] = refused.status_code
        report["alive_after_refused_cancel"] = not running.done()
    if mode == "dupid":
        report["same_id"] = await call(client, headers, url, "read_file", {"path": "notes.txt"}, id=1)
    if mode in ("end", "dupid"):
        stopped = await client.delete(url, headers=headers)
    elif mode == "gone":
        # The client went away: its connection closed with the call still running.
        await running
        await asyncio.sleep(0.5)
        other, _, _ = await raw_session(url, impl_token, session_id)
        stopped = await other.post(url, headers=headers, json=cancel_body)
        await other.aclose()
    else:
        stopped = await client.post(url, headers=headers, json=cancel_body)
    running_error = None
    if not running.done():
        try:
            await asyncio.wait_for(running, timeout=30)
        except Exception as error:  # the stream may end without a response, as the spec allows
            running_error = repr(error)
    # Wait until the host has finished the call (its record is the last thing it writes).
    await asyncio.sleep(0.5)
    seconds = time.monotonic() - started
    if mode in ("end", "dupid"):
        await client.aclose()
        client, headers, _ = await raw_session(url, impl_token)
    after = await call(client, headers, url, "read_file", {"path": "notes.txt"}, id=2)
    await client.aclose()
    progress = [message["params"]["progressToken"] for message in streamed if message.get("method") == "notifications/progress"]
    report.update({"cancel_status": stopped.status_code, "seconds": seconds, "running_error": running_error, "after": after,
                   "progress_tokens": progress, "lines": lines})
    return report


async def too_large(url, impl_token, review_token):
    """A call whose request is over `max_request_bytes`, then a normal call in the same session."""
    from mcp.shared.exceptions import MCPError

    async def actions(session, seen):
        try:
            await session.call_tool("write_file", {"path": "big.txt", "content": "x" * (5 * 1024 * 1024)})
            seen["big"] = {"error": None}
        except MCPError as error:
            seen["big"] = {"error": {"code": error.code, "message": error.message}}
        seen["after"] = result(await session.call_tool("read_file", {"path": "notes.txt"}))

    return await sdk(url, impl_token, actions)


def main():
    scenario, url, impl_token, review_token = sys.argv[1:5]
    if scenario == "main":
        report = asyncio.run(main_scenario(url, impl_token, review_token))
    elif scenario == "before-restart":
        report = asyncio.run(before_restart(url, impl_token, review_token))
    elif scenario == "too-large":
        report = asyncio.run(too_large(url, impl_token, review_token))
    elif scenario.startswith("cancel-"):
        report = asyncio.run(cancel(url, impl_token, review_token, scenario.removeprefix("cancel-")))
    elif scenario == "after-restart":
        report = asyncio.run(after_restart(url, impl_token, review_token, sys.argv[5]))
    else:
        raise SystemExit(f"unknown scenario {scenario}")
    json.dump(report, sys.stdout, default=str)


if __name__ == "__main__":
    main()
