"""A toolcell tool in Python: the TODO-style markers under a directory, with their lines."""

import os
from dataclasses import dataclass, field
from typing import Annotated

import toolcell


@dataclass
class Args:
    path: Annotated[str, "The directory (or file) to search, relative to the workspace root."] = "."
    markers: Annotated[list[str], "The words to look for."] = field(default_factory=lambda: ["TODO", "FIXME"])


@dataclass
class Found:
    path: str
    line: int
    text: str


@dataclass
class Findings:
    found: list[Found]
    files: int


@toolcell.tool(name="todo_finder", title="Find TODOs", read_only=True, output=Findings,
               description="List the lines holding TODO or FIXME (or other `markers`) under `path`, as `path:line: text`.")
def todo_finder(args: Args) -> toolcell.Result:
    paths = [args.path] if not os.path.isdir(args.path) else list(toolcell.walk(args.path))
    found = []
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as file:
            found += [Found(path, number, line.strip()) for number, line in enumerate(file, 1) if any(marker in line for marker in args.markers)]
    toolcell.note(f"{len(found)} markers in {len(paths)} files")
    text = "\n".join(f"{hit.path}:{hit.line}: {hit.text}" for hit in found) or f"No {', '.join(args.markers)} under `{args.path}`."
    return toolcell.Result(text, Findings(found, len(paths)))


Tool = toolcell.export(todo_finder)
