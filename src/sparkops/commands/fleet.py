"""``spark-ops fleet``: heavy imports (torch above all) happen inside the command."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer


def _fake_facts(values: list[str]) -> dict[int, Path]:
    out: dict[int, Path] = {}
    for v in values:
        rank, sep, file = v.partition("=")
        if not sep or not rank.strip().isdigit() or not file.strip():
            raise typer.BadParameter(f"{v!r}: expected RANK=FILE, e.g. 1=node-b.json", param_hint="--test-fake-facts")
        out[int(rank)] = Path(file.strip())
    return out


def register(app: typer.Typer) -> None:
    @app.command("fleet")
    def fleet_cmd(
        backend: Annotated[str, typer.Option("--backend", help="auto | nccl | gloo (auto: NCCL when every rank has "
                                             "its own GPU, else gloo).")] = "auto",
        quick: Annotated[bool, typer.Option("--quick", help="Static target probe only on each node: no torch "
                                            "import in a child.")] = False,
        python: Annotated[Path | None, typer.Option("--python", help="The interpreter each node judges (default: "
                                                    "the one running this rank).", show_default=False)] = None,
        config: Annotated[list[Path] | None, typer.Option("--config", help="File or directory each node scans for "
                                                          "parallelism settings (G10); repeatable. Default: the "
                                                          "working directory.")] = None,
        workload: Annotated[str | None, typer.Option("--workload", help='Free text, e.g. "fsdp full 8b bf16".')] = None,
        tp: Annotated[int | None, typer.Option("--tp", help="Planned tensor-parallel size.")] = None,
        peak_gb: Annotated[float | None, typer.Option("--peak-gb", help="Estimated peak memory per rank (G3).")] = None,
        offline: Annotated[bool, typer.Option("--offline", help="No network: G8 uses its cache or skips.")] = False,
        budget: Annotated[float | None, typer.Option("--budget", help="Deadline in seconds for each node's "
                                                     "collection.", show_default=False)] = None,
        container: Annotated[str | None, typer.Option("--container", help="Each node probes its target inside this "
                                                      "image (as preflight --container); the digests are compared.",
                                                      show_default=False)] = None,
        matrix: Annotated[Path | None, typer.Option("--matrix", help="A newer stack-matrix YAML.")] = None,
        join_timeout: Annotated[float | None, typer.Option("--join-timeout", help="Seconds every rank has to join "
                                                           "(default 120).", show_default=False)] = None,
        collective_timeout: Annotated[float | None, typer.Option("--collective-timeout", help="Seconds a stage or "
                                                                 "one collective may take (default 60).",
                                                                 show_default=False)] = None,
        bandwidth: Annotated[bool, typer.Option("--bandwidth/--no-bandwidth", help="Measure all-reduce and "
                                                "all-gather bus bandwidth across the ranks.")] = True,
        nccl_debug: Annotated[bool, typer.Option("--nccl-debug/--no-nccl-debug", help="Read NCCL's INFO output "
                                                 "(to a file) for the transport: NET/IB or sockets, GPU Direct "
                                                 "RDMA. Left alone when NCCL_DEBUG is already set.")] = True,
        report: Annotated[Path, typer.Option("--report", help="Where rank 0 writes fleet-report.json.")] = Path("fleet-report.json"),
        as_json: Annotated[bool, typer.Option("--json", help="Rank 0 prints the report as JSON.")] = False,
        test_fake_facts: Annotated[list[str] | None, typer.Option("--test-fake-facts", hidden=True,
                                                                  help="RANK=FILE: that rank loads a snapshot "
                                                                       "instead of collecting (tests).")] = None,
        test_never_join: Annotated[list[int] | None, typer.Option("--test-never-join", hidden=True,
                                                                  help="RANK: that rank never joins (tests).")] = None,
        test_hang_collective: Annotated[list[int] | None, typer.Option("--test-hang-collective", hidden=True,
                                                                       help="RANK: that rank never enters the first "
                                                                            "collective (tests).")] = None,
        test_block_in_collective: Annotated[list[int] | None, typer.Option("--test-block-in-collective", hidden=True,
                                                                           help="RANK: that rank blocks as if "
                                                                                "inside the first collective "
                                                                                "(tests).")] = None,
    ) -> int:
        """Preflight several Sparks together, run once per GPU under torchrun: every rank collects its
        facts, rank 0 compares them (torch, CUDA, NCCL, driver, container, stack, outliers, G10) and
        measures collective bandwidth. Exit 0 ready, 1 warnings, 2 blocked, 3 tool error."""
        from sparkops.facts.workload import merge
        from sparkops.fleet import rendezvous, run

        if backend not in ("auto", "nccl", "gloo"):
            raise typer.BadParameter("auto, nccl or gloo", param_hint="--backend")
        for name, value in (("--join-timeout", join_timeout), ("--collective-timeout", collective_timeout)):
            if value is not None and not 0 < value <= 86400:
                raise typer.BadParameter("a number of seconds above 0", param_hint=name)
        fake_facts = _fake_facts(test_fake_facts or [])
        launch = rendezvous.parse_launch_env(os.environ)
        _torch, dist = run.import_torch()
        opts = run.FleetOptions(
            backend=backend, depth="quick" if quick else "full", python=str(python) if python else None,
            config_paths=tuple(config or ()), offline=offline, budget_s=budget, container=container, matrix=matrix,
            workload=merge(workload, tensor_parallel=tp, estimated_peak_gb=peak_gb),
            join_timeout_s=join_timeout, collective_timeout_s=collective_timeout, bandwidth=bandwidth,
            nccl_debug=nccl_debug, report_path=report, as_json=as_json,
            fake_facts=fake_facts, never_join=frozenset(test_never_join or ()),
            hang_collective=frozenset(test_hang_collective or ()),
            block_in_collective=frozenset(test_block_in_collective or ()))
        outcome = run.run_rank(opts, launch, dict(os.environ))
        run.finish(outcome, dist)
        return outcome.code
