"""``spark-ops mcp``: the SDK and the server load inside the command."""

from __future__ import annotations

from enum import Enum
from typing import Annotated

import typer

EXTRA_HINT = 'pip install "dgx-spark-ops[mcp]"'


class LogLevel(str, Enum):
    debug = "DEBUG"
    info = "INFO"
    warning = "WARNING"
    error = "ERROR"


def register(app: typer.Typer) -> None:
    @app.command("mcp")
    def mcp_cmd(
        log_level: Annotated[LogLevel, typer.Option("--log-level", help="Server log level (on stderr).",
                                                    case_sensitive=False)] = LogLevel.warning,
    ) -> int:
        """Serve the checks to coding agents: a Model Context Protocol server over stdio (read-only).
        Tools: preflight, explain, diagnose, plan, collect_facts. Resources: sparkops://gotchas,
        sparkops://stack-matrix, sparkops://schema/*. Needs the MCP SDK (the `mcp` extra)."""
        from sparkops.core.errors import InputError

        try:
            import mcp  # noqa: F401 - the official SDK; our package is named so it never shadows it
        except ImportError as exc:
            raise InputError(f"the MCP server needs the official MCP Python SDK: {EXTRA_HINT}") from exc
        try:
            from sparkops.mcp_server import server
        except ImportError as exc:  # an SDK too old or too new for this tool, or broken beside its deps
            raise InputError(f"the installed MCP SDK cannot be used ({exc}); {EXTRA_HINT} installs a "
                             "supported one") from exc

        server.run(log_level.value)
        return 0
