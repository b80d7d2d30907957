"""A Python tool written against the raw bindings, without the SDK: an uncaught exception
traps the component, and conformance must still say where, in Python's terms."""

import json
from wit_world import exports
from wit_world.imports import types

class Tool(exports.Tool):
    def describe(self) -> types.ToolInfo:
        return types.ToolInfo(name="py_raw", title="Raw", description="Raises.",
            input_schema=json.dumps({"type": "object"}), output_schema=None,
            annotations=types.Annotations(read_only=True, destructive=False, idempotent=True))

    def call(self, args: str) -> types.ToolOutput:
        return helper(json.loads(args))

def helper(args):
    return 1 / 0
