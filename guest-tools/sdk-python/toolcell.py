"""Write toolcell tools in Python: a function, a dataclass of arguments, and one line to export.

    from dataclasses import dataclass
    from typing import Annotated
    import toolcell

    @dataclass
    class Args:
        path: Annotated[str, "The file to count, relative to the workspace root."]

    @dataclass
    class Counted:
        lines: int

    @toolcell.tool(name="line_count", title="Line count", read_only=True, output=Counted,
                   description="Count the lines of a text file.")
    def line_count(args: Args) -> toolcell.Result:
        with open(args.path) as file:
            lines = sum(1 for _ in file)
        return toolcell.Result(f"{args.path}: {lines} lines", Counted(lines))

    Tool = toolcell.export(line_count)

The argument schema is derived from the dataclass (its type hints, defaults and `Annotated`
descriptions) and the output schema from the `output` dataclass, so neither can disagree
with the code. Files are plain Python: `open`, `os`, `pathlib` on workspace-relative paths;
the host checks every access against the policy, whatever the tool does. Build with
componentize-py against toolcell's `wit/` (world `plugin`); see guest-tools/README.md.
"""

import dataclasses
import json
import os
import sys
import traceback
import types as pytypes
import typing

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import context
from wit_world.imports import types as wit

__all__ = [
    "Result",
    "ToolError",
    "attach_image",
    "call_id",
    "export",
    "inspect",
    "note",
    "recall",
    "remember",
    "role",
    "schema_of",
    "session_id",
    "tool",
    "walk",
]


class ToolError(Exception):
    """A failure the agent sees: `kind` is one of the WIT `tool-error` cases (`invalid-args`,
    `not-found`, `denied`, `conflict`, `too-large`, `unsupported`, `failed`); the message
    names the value and says what to do next."""

    KINDS = {
        "invalid-args": wit.ToolError_InvalidArgs,
        "not-found": wit.ToolError_NotFound,
        "denied": wit.ToolError_Denied,
        "conflict": wit.ToolError_Conflict,
        "too-large": wit.ToolError_TooLarge,
        "unsupported": wit.ToolError_Unsupported,
        "failed": wit.ToolError_Failed,
    }

    def __init__(self, kind: str, message: str):
        if kind not in self.KINDS:
            raise ValueError(f"`{kind}` is not a tool-error kind: use one of {', '.join(self.KINDS)}")
        super().__init__(message)
        self.kind = kind
        self.message = message


class Result:
    """A successful result: the text the agent reads, and the structured value (an instance of
    the tool's `output` dataclass, or a dict) for programs."""

    def __init__(self, text: str, structured: typing.Any = None):
        self.text = text
        self.structured = structured


def schema_of(hint: typing.Any) -> dict:
    """The JSON Schema of a type hint: str, int, float, bool, list[T], dict[str, T], T | None,
    Literal[...], Annotated[T, "description"] and dataclasses (objects)."""
    description = None
    if typing.get_origin(hint) is typing.Annotated:
        hint, *extras = typing.get_args(hint)
        description = next((extra for extra in extras if isinstance(extra, str)), None)
    schema = _schema_of_plain(hint)
    if description:
        schema["description"] = description
    return schema


def _schema_of_plain(hint: typing.Any) -> dict:
    origin = typing.get_origin(hint)
    if hint is str:
        return {"type": "string"}
    if hint is bool:
        return {"type": "boolean"}
    if hint is int:
        return {"type": "integer"}
    if hint is float:
        return {"type": "number"}
    if dataclasses.is_dataclass(hint):
        return _object_schema(hint)
    if origin in (list, typing.List, tuple) and typing.get_args(hint):
        return {"type": "array", "items": schema_of(typing.get_args(hint)[0])}
    if origin in (dict, typing.Dict):
        arguments = typing.get_args(hint)
        return {"type": "object", "additionalProperties": schema_of(arguments[1])} if arguments else {"type": "object"}
    if origin is typing.Literal:
        return {"enum": list(typing.get_args(hint))}
    if origin in (typing.Union, pytypes.UnionType):
        variants = [argument for argument in typing.get_args(hint) if argument is not type(None)]
        if len(variants) == 1:
            return schema_of(variants[0])
        return {"anyOf": [schema_of(variant) for variant in variants]}
    raise TypeError(f"toolcell cannot describe the type {hint!r} as JSON Schema: use str, int, float, bool, list, dict, Literal or a dataclass")


def _is_optional(hint: typing.Any) -> bool:
    if typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    return typing.get_origin(hint) in (typing.Union, pytypes.UnionType) and type(None) in typing.get_args(hint)


def _object_schema(cls: type) -> dict:
    hints = typing.get_type_hints(cls, include_extras=True)
    properties = {}
    required = []
    for field in dataclasses.fields(cls):
        properties[field.name] = schema_of(hints[field.name])
        has_default = field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING
        if not has_default and not _is_optional(hints[field.name]):
            required.append(field.name)
    schema = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = required
    return schema


def _build(cls: typing.Any, value: typing.Any) -> typing.Any:
    """`value` (decoded JSON, already checked against the schema by the host) as `cls`."""
    if typing.get_origin(cls) is typing.Annotated:
        cls = typing.get_args(cls)[0]
    if dataclasses.is_dataclass(cls) and isinstance(value, dict):
        hints = typing.get_type_hints(cls, include_extras=True)
        return cls(**{name: _build(hints[name], item) for name, item in value.items() if name in hints})
    origin = typing.get_origin(cls)
    if origin in (list, typing.List) and isinstance(value, list) and typing.get_args(cls):
        return [_build(typing.get_args(cls)[0], item) for item in value]
    if origin in (typing.Union, pytypes.UnionType) and value is not None:
        variants = [argument for argument in typing.get_args(cls) if argument is not type(None)]
        if len(variants) == 1:
            return _build(variants[0], value)
    return value


def _plain(value: typing.Any) -> typing.Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value


class _Described:
    def __init__(self, function, info, arguments):
        self.function = function
        self.info = info
        self.arguments = arguments


def tool(*, name: str, title: str, description: str, read_only: bool = False, destructive: bool = False,
         idempotent: bool = False, output: typing.Optional[type] = None):
    """Describe a tool function. Its one parameter's type (a dataclass) is the arguments, whose
    schema is derived from it; `output` (a dataclass) the structured results'. A read-only
    tool is idempotent."""

    def describe(function):
        hints = typing.get_type_hints(function, include_extras=True)
        parameters = [hint for parameter, hint in hints.items() if parameter != "return"]
        if len(parameters) != 1 or not dataclasses.is_dataclass(parameters[0]):
            raise TypeError(f"the tool function `{function.__name__}` takes one argument whose type is a dataclass of the arguments")
        info = wit.ToolInfo(
            name=name,
            title=title,
            description=description,
            input_schema=json.dumps(_object_schema(parameters[0])),
            output_schema=json.dumps(_object_schema(output)) if output is not None else None,
            annotations=wit.Annotations(read_only=read_only, destructive=destructive, idempotent=idempotent or read_only),
        )
        return _Described(function, info, parameters[0])

    return describe


def export(described: _Described) -> type:
    """The class componentize-py exports as the component's `toolcell:tool/tool`: assign it to
    `Tool` in the app module (`Tool = toolcell.export(my_tool)`)."""

    class Tool(exports.Tool):
        def describe(self) -> wit.ToolInfo:
            return described.info

        def call(self, args: str) -> wit.ToolOutput:
            try:
                result = described.function(_build(described.arguments, json.loads(args)))
            except ToolError as error:
                raise Err(ToolError.KINDS[error.kind](error.message))
            except FileNotFoundError as error:
                raise Err(wit.ToolError_NotFound(f"`{error.filename}` does not exist: check the path with list_files"))
            except PermissionError as error:
                raise Err(wit.ToolError_Denied(f"access to `{error.filename}` was refused by the host: it is outside the workspace or the policy does not allow it"))
            except IsADirectoryError as error:
                raise Err(wit.ToolError_Unsupported(f"`{error.filename}` is a directory"))
            except Exception as error:
                # The whole traceback for the operator (stderr is kept with the call); the
                # agent gets the exception and where it happened, in Python's terms.
                traceback.print_exc(file=sys.stderr)
                frame = traceback.extract_tb(error.__traceback__)[-1]
                where = f"{os.path.basename(frame.filename)}, line {frame.lineno}, in {frame.name}"
                raise Err(wit.ToolError_Failed(f"the tool raised {type(error).__name__}: {error} ({where}); this is a bug in the tool"))
            if not isinstance(result, Result):
                result = Result(str(result))
            structured = None if result.structured is None else json.dumps(_plain(result.structured))
            return wit.ToolOutput(text=result.text, structured=structured)

    return Tool


def walk(top: str = "."):
    """The workspace-relative paths of the regular files under `top`, sorted, without
    following symlinks or entering `.git`. Directories the host hides are left out."""
    for directory, subdirectories, files in os.walk(top):
        subdirectories[:] = sorted(name for name in subdirectories if name != ".git")
        for name in sorted(files):
            path = os.path.normpath(os.path.join(directory, name))
            if os.path.isfile(path) and not os.path.islink(path):
                yield path


def role() -> str:
    """The role the caller acts as."""
    return context.role()


def session_id() -> str:
    """The caller's session id."""
    return context.session_id()


def call_id() -> str:
    """This call's id (its audit record's key)."""
    return context.call_id()


def note(text: str) -> None:
    """Attach a note to this call's audit record."""
    context.note(text)


def inspect(path: str) -> context.PathFacts:
    """A path's permission bits and what the caller's policy lets it do with the path."""
    try:
        return context.inspect(path)
    except Err as error:
        raise ToolError(_kind_of(error.value), error.value.value) from None


def attach_image(mime_type: str, data: bytes) -> None:
    """Show the agent an image (PNG, JPEG, GIF or WebP bytes) beside the result's text."""
    try:
        context.attach_image(mime_type, data)
    except Err as error:
        raise ToolError(_kind_of(error.value), error.value.value) from None


def remember(key: str, value: bytes) -> None:
    """Keep up to 64 KiB for this tool's later calls in the session (a hint, never a fact)."""
    context.remember(key, value)


def recall(key: str) -> typing.Optional[bytes]:
    """What this tool kept under `key` earlier in the session, if the host still holds it."""
    return context.recall(key)


def _kind_of(error: typing.Any) -> str:
    for kind, case in ToolError.KINDS.items():
        if isinstance(error, case):
            return kind
    return "failed"
