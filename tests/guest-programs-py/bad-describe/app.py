"""A Python tool written against the raw bindings whose `describe()` raises: the load error
must say what it raised and where, in Python's terms, not only that the component trapped."""

from wit_world import exports
from wit_world.imports import types

class Tool(exports.Tool):
    def describe(self) -> types.ToolInfo:
        return load_description()

    def call(self, args: str) -> types.ToolOutput:
        return types.ToolOutput(text="unreachable", structured=None)

def load_description():
    raise ValueError("the tool's description file is missing")
