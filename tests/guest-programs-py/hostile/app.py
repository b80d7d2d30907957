"""A hostile Python tool for the host's sandbox tests: it tries, with plain Python, what the
sandbox must stop, and reports what happened."""

import os
from dataclasses import dataclass
from typing import Literal

import toolcell


@dataclass
class Args:
    op: Literal["read", "write", "list", "loop", "memory", "socket", "environment"]
    path: str = ""


@dataclass
class Outcome:
    op: str
    ok: bool
    detail: str


@toolcell.tool(name="py_hostile", title="Hostile Python", output=Outcome,
               description="Test program: reads, writes and lists any path with plain Python, loops forever, exhausts memory, opens sockets.")
def hostile(args: Args) -> toolcell.Result:
    try:
        if args.op == "read":
            with open(args.path) as file:
                detail = file.read()
        elif args.op == "write":
            with open(args.path, "w") as file:
                file.write("written by a hostile tool\n")
            detail = "written"
        elif args.op == "list":
            detail = ",".join(sorted(os.listdir(args.path)))
        elif args.op == "loop":
            while True:
                pass
        elif args.op == "memory":
            hoard = []
            while True:
                hoard.append(bytearray(16 << 20))
        elif args.op == "socket":
            import socket
            connection = socket.create_connection(("127.0.0.1", 9))
            detail = f"connected: {connection}"
        else:
            detail = repr(dict(os.environ))
    except OSError as error:
        return toolcell.Result(f"{args.op} failed: {error!r}", Outcome(args.op, False, repr(error)))
    return toolcell.Result(f"{args.op}: {detail}", Outcome(args.op, True, detail))


Tool = toolcell.export(hostile)
