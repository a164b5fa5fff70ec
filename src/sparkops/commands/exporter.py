"""``spark-ops exporter``: heavy imports inside the command."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    @app.command("exporter")
    def exporter_cmd(
        port: Annotated[int, typer.Option("--port", help="TCP port of /metrics.")] = 9839,
        listen: Annotated[str, typer.Option("--listen", help="Address to bind; loopback unless you open it "
                          "(0.0.0.0 lets a Prometheus on another machine scrape this one).")] = "127.0.0.1",
        report: Annotated[Path, typer.Option("--report", help="The preflight report whose verdict and per-check "
                          "status are exported (written by `spark-ops preflight`).")] = Path("env-report.json"),
        no_gpu: Annotated[bool, typer.Option("--no-gpu", help="Do not open NVML / nvidia-smi.")] = False,
        once: Annotated[bool, typer.Option("--once", help="Print one scrape's metrics and exit.")] = False,
    ) -> int:
        """Serve this Spark's readings as Prometheus metrics on /metrics: unified memory, PSI, buddyinfo
        large blocks, GPU temperature/power/SM clock, clock-event reason bits, violation counters, GPU memory
        per process, known engines with their caps, and the last preflight's verdict and per-check status.
        Each scrape is bounded (a slow part is reported as down). Read-only."""
        from sparkops.exporter import serve

        reg = serve.registry(report.resolve(), gpu=not no_gpu)
        if once:
            sys.stdout.write(serve.once(reg))
            return 0
        try:
            serve.serve(reg, port, listen)
        except OSError as exc:
            raise typer.BadParameter(f"cannot listen on {listen}:{port}: {exc}") from exc
        sys.stderr.write(f"spark-ops exporter: http://{listen}:{port}/metrics (Ctrl-C to stop)\n")
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            return 0
        return 0
