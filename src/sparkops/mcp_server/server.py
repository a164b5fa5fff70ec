"""The MCP server: the tools of :mod:`sparkops.mcp_server.tools` and the knowledge as resources, over stdio.

Built on the official SDK's high-level server (``MCPServer`` in mcp 2.x, ``FastMCP`` in 1.x; the
same decorator API). Every tool runs in a worker thread under a wall-clock bound, so a slow probe
never stalls the protocol loop, and every failure comes back as a tool error carrying the message
the CLI would print: the server itself survives any call.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
from typing import Any

import anyio
import anyio.to_thread

try:  # mcp 2.x
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ResourceError, ToolError
    from mcp.server.mcpserver.exceptions import ResourceNotFoundError as _NotFound
except ImportError:  # mcp 1.x: FastMCP, same decorators
    from mcp.server.fastmcp import FastMCP as MCPServer  # type: ignore[no-redef]
    from mcp.server.fastmcp.exceptions import ResourceError, ToolError  # type: ignore[no-redef]

    _NotFound = ResourceError  # type: ignore[misc,assignment]
from mcp.types import ToolAnnotations

from sparkops import __version__
from sparkops.core.errors import InputError
from sparkops.facts.redact import redact_obj
from sparkops.mcp_server import tools
from sparkops.report.schemas import SCHEMAS, json_schema

NAME = "spark-ops"
BASE_BOUND_S = 120.0  # wall-clock bound of any call, on top of a collection's own budget
JSON = "application/json"

INSTRUCTIONS = """\
spark-ops judges whether an NVIDIA DGX Spark (GB10 Grace Blackwell, or another NVIDIA machine) is ready \
for an ML training or inference job, against ten known gotchas G1..G10. Back every verdict with a tool \
result and cite its G-number.
- preflight: judge this machine (or a recorded snapshot, facts_path) for a workload -> env-report JSON.
- explain: a G-number's catalog entry (symptom, cause, check, fix).
- diagnose: map an error log or traceback to its G-number.
- plan: will a fine-tune fit in memory, and what to change if not.
- plan_serve: will a model serve (vLLM, SGLang, llama.cpp, Ollama), with how much KV cache, beside what else.
- collect_facts: the raw facts snapshot (secrets removed).
Resources: sparkops://gotchas (the catalog), sparkops://gotchas/{gotcha_id}, sparkops://stack-matrix \
(the dated known-good stack), sparkops://schema/{schemas} (JSON Schemas of the results).
Nothing here changes the machine; a file is written only where a *_path argument names one. \
Relative paths resolve against the server's working directory: {cwd}"""


def _bound_s(spec: tools.ToolSpec, arguments: dict[str, Any]) -> float:
    """How long a call may take: the base bound, plus the collection budget for tools that collect."""
    if not spec.collects:
        return BASE_BOUND_S
    budget = arguments.get("budget_s")
    return BASE_BOUND_S + (float(budget) if budget else tools.default_budget_s())


def _guarded(spec: tools.ToolSpec):
    """``spec.fn`` as an async tool: run in a worker thread under a time bound; every failure becomes a
    tool error whose text says why (the CLI's message for bad input), never a crash of the server."""
    fn = spec.fn

    @functools.wraps(fn)  # the SDK reads the argument schema from the wrapped signature
    async def call(**arguments: Any) -> dict[str, Any]:
        limit = _bound_s(spec, arguments)
        try:
            with anyio.fail_after(limit):
                job = functools.partial(fn, **arguments)
                result = await anyio.to_thread.run_sync(job, abandon_on_cancel=True)
            return redact_obj(result)  # type: ignore[return-value] - the one redaction pass, as every output
        except TimeoutError as exc:
            raise ToolError(f"{spec.fn.__name__} did not finish within {limit:g} s") from exc
        except InputError as exc:
            raise ToolError(str(exc)) from exc
        except Exception as exc:  # the tool itself failed: say so plainly, as the CLI does
            raise ToolError(f"internal error: {type(exc).__name__}: {exc}") from exc

    return call


def _annotations(spec: tools.ToolSpec) -> ToolAnnotations:
    # by alias: the Python field names differ between SDK versions, the wire names do not
    return ToolAnnotations.model_validate({
        "title": spec.title,
        "readOnlyHint": not spec.writes_on_request,
        "destructiveHint": False,
        "idempotentHint": True,
        "openWorldHint": spec.open_world,
    })


def _dumps(data: Any) -> str:
    return json.dumps(data, indent=2) + "\n"


def gotcha_catalog() -> str:
    """The whole catalog, in its file's order, with its version and date."""
    from sparkops import api

    kb = api.knowledge()
    return _dumps({"version": kb.catalog_version, "last_verified": kb.catalog_last_verified.isoformat(),
                   "gotchas": [g.model_dump(mode="json") for g in kb.gotchas.values()]})


def gotcha_entry(gotcha_id: str) -> str:
    from sparkops import api

    try:
        return _dumps(api.explain(gotcha_id).model_dump(mode="json"))
    except KeyError as exc:
        raise _NotFound(str(exc.args[0])) from exc


def stack_matrix() -> str:
    from sparkops import api

    return _dumps(api.knowledge().matrix.model_dump(mode="json"))


def _schema_resource(name: str):
    def read() -> str:
        return _dumps(json_schema(name))

    read.__name__ = f"schema_{name}"
    return read


def _resource_errors(fn):
    """A failed read says why (not only the URI, which is all the SDK tells of an unexpected error)."""

    @functools.wraps(fn)
    def read(*args: Any, **kwargs: Any) -> str:
        try:
            return fn(*args, **kwargs)
        except ResourceError:
            raise
        except InputError as exc:
            raise ResourceError(str(exc)) from exc
        except Exception as exc:
            raise ResourceError(f"internal error: {type(exc).__name__}: {exc}") from exc

    return read


def build(log_level: str = "WARNING") -> MCPServer:
    """The server, tools and resources registered; nothing runs until :func:`run`."""
    kwargs: dict[str, Any] = {"name": NAME, "instructions": INSTRUCTIONS.replace("{cwd}", os.getcwd()).replace("{schemas}", "{" + ",".join(SCHEMAS) + "}"),
                              "log_level": log_level}
    try:
        server = MCPServer(version=__version__, **kwargs)
    except TypeError:  # mcp 1.x takes no version: set it on its low-level server, else clients see the SDK's
        server = MCPServer(**kwargs)
        low = getattr(server, "_mcp_server", None)
        if low is not None and hasattr(low, "version"):
            low.version = __version__
    for spec in tools.TOOLS:
        server.add_tool(_guarded(spec), name=spec.fn.__name__, title=spec.title,
                        description=inspect.cleandoc(spec.fn.__doc__ or ""), annotations=_annotations(spec),
                        structured_output=True)
    server.resource("sparkops://gotchas", name="gotchas", title="Gotcha catalog G1..G10 (+ identity)",
                    description="Every gotcha's symptom, cause, check, fix and references, with the "
                                "catalog's version and last_verified date (JSON; the data of "
                                "knowledge/gotchas.yaml).",
                    mime_type=JSON)(_resource_errors(gotcha_catalog))
    server.resource("sparkops://gotchas/{gotcha_id}", name="gotcha",
                    title="One gotcha's catalog entry",
                    description='One entry by G-number ("G3", "g3", "3") or "identity" (JSON).',
                    mime_type=JSON)(_resource_errors(gotcha_entry))
    server.resource("sparkops://stack-matrix", name="stack-matrix", title="Known-good software stack (dated)",
                    description="The dated known-good stack for DGX Spark: base image, package pins, hard "
                                "blockers, NGC tags, component status, bare-pip sequence (JSON; the data of "
                                "knowledge/stack_matrix.yaml).",
                    mime_type=JSON)(_resource_errors(stack_matrix))
    for name in SCHEMAS:
        server.resource(f"sparkops://schema/{name}", name=f"schema-{name}", title=f"JSON Schema: {name}",
                        description=f"The JSON Schema of the {name} result (the same as the CLI's --json).",
                        mime_type=JSON)(_resource_errors(_schema_resource(name)))
    return server


def run(log_level: str = "WARNING") -> None:
    """Serve over stdio until the client closes the connection."""
    build(log_level).run("stdio")
