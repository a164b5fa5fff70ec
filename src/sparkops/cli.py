"""``spark-ops``: parse arguments, call one api function, render, exit. No logic lives here.

Exit codes (every judging command): 0 ready · 1 ready with warnings · 2 blocked · 3 the tool
itself could not run (bad usage, unreadable snapshot, internal error) · 4 (preflight) judged and
printed, but the report file could not be written (stderr says where and why).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from typer.core import TyperCommand, TyperGroup

from sparkops import __version__
from sparkops.core.errors import InputError
from sparkops.front import APP_HELP, COMMANDS, LAZY
from sparkops.report.formats import EXIT_REPORT_NOT_WRITTEN, EXIT_TOOL_ERROR, Format

if TYPE_CHECKING:
    from sparkops import api

# Heavy modules (pydantic models, checks, rich) are imported inside the commands, after the
# target interpreter's children were started: full mode then costs about one torch import.
# Feature packages (plan, diagnose, ...) are imported only when their command runs: see LazyGroup.

# typer >= 0.2x vendors click; take its exception classes from typer itself so both work.
UsageError = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")
ClickException = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


class LazyGroup(TyperGroup):
    """The top-level group: a feature package listed in :data:`sparkops.front.COMMANDS` with its
    module is imported, and its ``register(app)`` run, only when one of its commands is asked for;
    ``--help`` lists it from the table's one-line help. Order: the table's."""

    def list_commands(self, ctx):  # noqa: ANN001, ANN201 - click's signature
        listed = [name for name, _module, _help in COMMANDS]
        return listed + [name for name in self.commands if name not in listed]

    def get_command(self, ctx, cmd_name):  # noqa: ANN001, ANN201
        if cmd_name not in self.commands and cmd_name in LAZY:
            self.commands.update(load_feature(LAZY[cmd_name]))
        return self.commands.get(cmd_name)

    def format_commands(self, ctx, formatter):  # noqa: ANN001, ANN201
        shorts = {name: short for name, _module, short in COMMANDS}
        loaded = self.commands

        def listing(ctx, name):  # noqa: ANN001, ANN202 - a stand-in carrying the one-line help
            return loaded.get(name) or TyperCommand(name=name, short_help=shorts[name])

        self.get_command = listing  # type: ignore[method-assign]
        try:
            super().format_commands(ctx, formatter)
        finally:
            del self.get_command


def load_feature(module: str) -> dict:
    """The click commands a feature module's ``register(app)`` adds, by name."""
    import importlib

    sub = typer.Typer(add_completion=False, rich_markup_mode=None)
    importlib.import_module(module).register(sub)
    return dict(typer.main.get_group(sub).commands)


app = typer.Typer(cls=LazyGroup, add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help=APP_HELP)


class SchemaName(str, Enum):
    facts = "facts"
    report = "report"
    plan = "plan"
    serve = "serve"
    diagnosis = "diagnosis"
    bandwidth = "bandwidth"
    fleet = "fleet"


# ---- shared options
PythonOpt = Annotated[Path | None, typer.Option("--python", help="The interpreter you train with "
                      "(default: python3 on PATH, else this tool's own).", show_default=False)]
QuickOpt = Annotated[bool, typer.Option("--quick", help="Static target probe only: no torch import.")]
ConfigOpt = Annotated[list[Path] | None, typer.Option("--config", help="A config file, launch script or directory of them to scan for "
                      "parallelism settings (G10); repeatable. Default: the working directory's own config files.")]
OfflineOpt = Annotated[bool, typer.Option("--offline", help="No network: G8 uses its cache or skips.")]
ContainerOpt = Annotated[str | None, typer.Option("--container", help="Run the target probe inside this "
                         "image (ngc | unsloth | IMAGE[:TAG], the lock file's pin when there is one) with "
                         "`docker run --gpus all`; --python then names the interpreter inside it.",
                         show_default=False)]
EngineOpt = Annotated[str | None, typer.Option("--engine", help="With --container: the container CLI, docker "
                      "(Docker Engine, or podman's Docker API behind it) | podman. Default: the first on PATH.",
                      show_default=False)]
BudgetOpt = Annotated[float | None, typer.Option("--budget", help="Deadline in seconds for the whole "
                      "collection; a probe still running then is reported as timed out.", show_default=False)]


def check_python(python: Path | None) -> None:
    """A mistyped --python is a usage error (exit 3, named), not "G1 skip: torch not installed"."""
    if python is None:
        return
    given = os.path.expanduser(str(python))
    if os.sep not in given:  # a bare name is looked up on PATH, as the probe does
        if shutil.which(given) is None:
            raise typer.BadParameter(f"{given}: not found on PATH", param_hint="--python")
        return
    python = Path(given)
    if not python.exists():
        raise typer.BadParameter(f"{python}: no such file", param_hint="--python")
    if python.is_dir():
        raise typer.BadParameter(f"{python} is a directory, not an interpreter", param_hint="--python")
    if not os.access(python, os.X_OK):
        raise typer.BadParameter(f"{python} is not executable", param_hint="--python")


def _prestart(python: Path | None, quick: bool, container: str | None = None) -> None:
    """Start the target interpreter's children and NVML's init now, before the heavy imports
    (with --container the target runs in the image, started by its probe)."""
    from sparkops.probes.early import warm_nvml
    from sparkops.probes.target_launch import prestart

    env = dict(os.environ)
    if container is None:
        check_python(python)
        prestart(str(python) if python else None, env, "quick" if quick else "full")
    warm_nvml(env)


def _opts(python: Path | None, quick: bool, config: list[Path] | None, offline: bool,
          budget: float | None = None, container: str | None = None,
          engine: str | None = None) -> api.CollectOptions:
    from sparkops import api

    kb = api.knowledge()  # loaded once here and passed to the probes
    th = kb.thresholds  # a container start costs seconds
    budget = budget if budget is not None else (th.setup.container_budget_s if container else th.probes.budget_s)
    return api.CollectOptions(depth="quick" if quick else "full", python=str(python) if python else None,
                              config_paths=tuple(config or ()), offline=offline, budget_s=budget,
                              counter_window_s=0.1 if quick else 1.0,  # full: hidden behind the torch import
                              container_engine=_engine(engine), kb=kb)


def _engine(engine: str | None) -> str:
    if engine is not None and engine not in ("docker", "podman"):
        raise InputError(f"--engine {engine}: docker or podman")
    return engine or ""


@app.command()
def preflight(
    python: PythonOpt = None,
    quick: QuickOpt = False,
    facts: Annotated[Path | None, typer.Option("--facts", help="Judge a recorded snapshot instead of this machine.")] = None,
    workload: Annotated[str | None, typer.Option("--workload", help='Free text, e.g. "qlora 70b seq 8192 nvfp4".')] = None,
    method: Annotated[str | None, typer.Option(help="full | lora | qlora | inference")] = None,
    model: Annotated[str | None, typer.Option(help="Model name, e.g. llama-3.1-70b.")] = None,
    params_b: Annotated[float | None, typer.Option("--params-b", help="Model size in billions.")] = None,
    seq_len: Annotated[int | None, typer.Option("--seq-len")] = None,
    batch_size: Annotated[int | None, typer.Option("--batch-size")] = None,
    precision: Annotated[str | None, typer.Option(help="nvfp4 | fp8 | bf16 | ...")] = None,
    tp: Annotated[int | None, typer.Option("--tp", help="Planned tensor-parallel size.")] = None,
    nodes: Annotated[int | None, typer.Option(help="Planned number of nodes (Sparks).")] = None,
    component: Annotated[list[str] | None, typer.Option("--component", help="Stack component the run uses (vllm, unsloth, ...); repeatable.")] = None,
    peak_gb: Annotated[float | None, typer.Option("--peak-gb", help="Estimated peak memory of the workload (G3 fit test).")] = None,
    config: ConfigOpt = None,
    offline: OfflineOpt = False,
    budget: BudgetOpt = None,
    container: ContainerOpt = None,
    engine: EngineOpt = None,
    matrix: Annotated[Path | None, typer.Option("--matrix", help="A newer stack-matrix YAML.")] = None,
    measure: Annotated[bool, typer.Option("--measure", help="Also measure device memory bandwidth for G5 "
                       "(intrusive: at most 2 GB for about a second; refused while other GPU jobs run or memory "
                       "is short, see `spark-ops bandwidth`).")] = False,
    report: Annotated[Path, typer.Option("--report", help="Where env-report.json goes.")] = Path("env-report.json"),
    fmt: Annotated[Format, typer.Option("--format", help="table | lines | json")] = Format.table,
    as_json: Annotated[bool, typer.Option("--json", help="Same as --format json.")] = False,
) -> int:
    """Judge G1-G10 and write env-report.json. Exit 0 ready, 1 warnings, 2 blocked, 3 tool error,
    4 judged and printed but the report could not be written."""
    if measure and facts is not None:
        raise InputError("--measure measures this machine now; it cannot be combined with --facts")
    if facts is None:
        _prestart(python, quick, container)
    from dataclasses import replace

    from sparkops import api
    from sparkops.facts.workload import merge

    wl = merge(workload, method=method, model=model, params_b=params_b, seq_len=seq_len, batch_size=batch_size,
               precision=precision, tensor_parallel=tp, nodes=nodes, components=component or [],
               estimated_peak_gb=peak_gb)
    from sparkops.facts.workload import refusals

    if problems := refusals(wl):
        raise typer.BadParameter("; ".join(problems), param_hint="--workload")
    kb = api.knowledge(matrix)
    fmt = Format.json if as_json else fmt
    opts = replace(_opts(python, quick, config, offline, budget, container, engine), measure_bandwidth=measure)
    rep = api.preflight(facts=facts, opts=opts, workload=wl,
                        kb=kb, also_import=("sparkops.report.render",) if fmt is Format.table else (),
                        container=container)
    out = fmt.render(rep, color=sys.stdout.isatty() and fmt is Format.table)
    sys.stdout.write(out)  # the verdict first: a report that cannot be written must not hide it
    sys.stdout.flush()
    from sparkops.core.errors import OutputError

    try:
        api.write_report(rep, report)
    except OutputError as exc:
        typer.echo(f"spark-ops: warning: the verdict above stands, but the report was not written: {exc} "
                   f"(exit {EXIT_REPORT_NOT_WRITTEN}; --report PATH writes it elsewhere)", err=True)
        return EXIT_REPORT_NOT_WRITTEN
    return api.exit_code(rep)


@app.command()
def collect(
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Write the snapshot here (default: stdout).")] = None,
    python: PythonOpt = None,
    quick: QuickOpt = False,
    config: ConfigOpt = None,
    offline: OfflineOpt = False,
    budget: BudgetOpt = None,
) -> int:
    """Collect this machine's facts into a replayable snapshot (secrets removed)."""
    _prestart(python, quick)
    from sparkops import api

    facts = api.collect(_opts(python, quick, config, offline, budget))
    if output is None:
        sys.stdout.write(facts.model_dump_json(indent=2) + "\n")
    else:
        api.save_facts(facts, output)
        failed = [r.name for r in facts.probes.values() if not r.ok]
        typer.echo(f"wrote {output}" + (f" (probes unavailable: {', '.join(failed)})" if failed else ""), err=True)
    return 0


@app.command()
def explain(gotcha: Annotated[str, typer.Argument(help="G1..G10 or identity")]) -> int:
    """Print a gotcha's symptom, cause, what is checked, and the fix."""
    from sparkops import api

    try:
        g = api.explain(gotcha)
    except KeyError as exc:
        raise typer.BadParameter(str(exc.args[0]), param_hint="GOTCHA") from exc
    from sparkops.report.render import render_gotcha

    sys.stdout.write(render_gotcha(g, api.knowledge().matrix))
    return 0


@app.command()
def schema(name: Annotated[SchemaName, typer.Argument(help="facts | report | plan | serve | diagnosis | bandwidth | fleet")]) -> int:
    """Print the JSON Schema of an output: the facts snapshot, env-report.json, plan / plan --serve / diagnose /
    bandwidth --json, or fleet-report.json."""
    from sparkops.report.schemas import json_schema

    sys.stdout.write(json.dumps(json_schema(name.value), indent=2) + "\n")
    return 0


@app.command("stack")
def stack_cmd(
    python: PythonOpt = None,
    facts: Annotated[Path | None, typer.Option("--facts", help="Judge a recorded snapshot.")] = None,
    matrix: Annotated[Path | None, typer.Option("--matrix", help="A newer stack-matrix YAML.")] = None,
    container: ContainerOpt = None,
    engine: EngineOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> int:
    """Installed versions against the dated known-good matrix (G9): per package, the matrix's age,
    hard blockers. Exit 0 pass/info, 1 warn/unknown/skip, 2 a hard blocker."""
    if facts is None:
        _prestart(python, True, container)
    from sparkops import api

    res = api.stack(facts, _opts(python, True, [Path.cwd()], True, None, container, engine), api.knowledge(matrix),
                    container=container)
    if as_json:
        sys.stdout.write(json.dumps(res, indent=2) + "\n")
    else:
        mx = res["matrix"]
        lines = [f"target python: {res['target_python']}",
                 f"matrix v{mx['version']}, last verified {mx['last_verified']}"
                 + (f", {mx['age_days']} days old" if mx["age_days"] is not None else "")
                 + (f" (past its {mx['refresh_horizon_days']}-day horizon)" if mx["stale"] else "")]
        if not res["packages_read"]:
            lines.append(f"installed packages could not be read ({res['packages_unavailable']})")
        lines += [f"  {r['package']:<14} {r['installed'] or '-':<22} verified {r['verified']:<10} {r['status']}"
                  for r in res["packages"]]
        g9 = res["G9"]
        lines.append(f"G9 {g9['status'].upper()}: {g9['summary']}")
        if g9["fix"]:
            lines.append(f"fix: {g9['fix']}")
        sys.stdout.write("\n".join(lines) + "\n")
    return {"pass": 0, "info": 0, "fail": 2}.get(res["G9"]["status"], 1)


triage_app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                         help="Work a failure's known hypotheses in order, stopping at the first that fires.")
app.add_typer(triage_app, name="triage")


@triage_app.command("gpu")
def triage_gpu(
    python: PythonOpt = None,
    facts: Annotated[Path | None, typer.Option("--facts", help="Triage a recorded snapshot.")] = None,
    container: ContainerOpt = None,
    engine: EngineOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> int:
    """Torch sees no GPU? Runtime flags, CUDA_VISIBLE_DEVICES, /dev/nvidia*, a wedged context, then
    the torch build — in that order; reinstall advice only for the last. Exit 0 torch sees the GPU,
    2 a hypothesis fired, 1 undecided."""
    if facts is None:
        _prestart(python, False, container)
    from sparkops import api

    res = api.triage_gpu(facts, _opts(python, False, [Path.cwd()], True, None, container, engine),
                         container=container)
    if as_json:
        sys.stdout.write(json.dumps(res, indent=2) + "\n")
    else:
        sees = {True: "torch sees the GPU", False: "torch sees NO GPU", None: "torch's view unknown (no live probe)"}
        lines = [f"{sees[res['torch_sees_gpu']]} ({res['target_python'] or 'no target python'})"]
        if res["live_unavailable"]:
            lines.append(f"  why unknown: {res['live_unavailable']}")
        lines += [f"  {h['number']}. {h['status']:<11} {h['hypothesis']}" for h in res["hypotheses"]]
        if res["fired"] is not None:
            lines += [f"first that fired: #{res['fired']}: {res['reason']}", f"fix: {res['fix']}"]
        sys.stdout.write("\n".join(lines) + "\n")
    if res["fired"] is not None:
        return 2
    return 0 if res["torch_sees_gpu"] else 1


thermal_app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                          help="Background thermal/power/memory sampler (G4, G3, G6) and log analysis.")
app.add_typer(thermal_app, name="thermal")


def _register_thermal_commands() -> None:
    from sparkops.soak import command as soak

    soak.register(thermal_app)


_register_thermal_commands()

IntervalOpt = Annotated[float | None, typer.Option("--interval", help="Seconds between samples "
                        "(default 5, as the seeds' thermal-sample.sh; at least 0.1).", show_default=False)]
LogOpt = Annotated[Path | None, typer.Option("--log", help="CSV log (default: thermal-YYYYMMDD.csv "
                   "in the working directory).", show_default=False)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def _daemon_out(st, as_json: bool) -> int:  # noqa: ANN001 - DaemonStatus
    from sparkops.monitor import daemon

    sys.stdout.write((st.model_dump_json(indent=2) if as_json else daemon.render(st)) + "\n")
    return 0


@thermal_app.command("start")
def thermal_start(interval: IntervalOpt = None, log: LogOpt = None, as_json: JsonOpt = False) -> int:
    """Start a background sampler writing CSV (one per log; a second start reports the running one)."""
    from sparkops.monitor import daemon

    try:
        st = daemon.start(log or daemon.default_log(), interval)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--interval") from exc
    _daemon_out(st, as_json)
    return 0 if st.running else 1


def _running_log(log: Path | None) -> Path:
    """The log to stop/inspect: the one given, else the single sampler running from this directory
    (its default name carries the start date, so after midnight today's name would miss it)."""
    from sparkops.monitor import daemon

    if log is not None:
        return log
    live = [p for p in sorted(Path.cwd().glob("thermal-*.csv.pid")) if daemon.status(p.with_suffix("")).running]
    if len(live) > 1:
        raise typer.BadParameter("several samplers run from this directory: "
                                 + ", ".join(str(p.with_suffix("")) for p in live), param_hint="--log")
    return live[0].with_suffix("") if live else daemon.default_log()


@thermal_app.command("stop")
def thermal_stop(log: LogOpt = None, as_json: JsonOpt = False) -> int:
    """Stop the sampler writing to LOG (default: the one running from here); a no-op when none runs."""
    from sparkops.monitor import daemon

    return _daemon_out(daemon.stop(_running_log(log)), as_json)


@thermal_app.command("status")
def thermal_status(log: LogOpt = None, as_json: JsonOpt = False) -> int:
    """Is a sampler running on LOG (default: the one running from here), since when, how many samples."""
    from sparkops.monitor import daemon

    return _daemon_out(daemon.status(_running_log(log)), as_json)


@thermal_app.command("analyze")
def thermal_analyze(
    file: Annotated[Path, typer.Argument(help="This tool's CSV log, or nvidia-smi --query-gpu ... --format=csv output.")],
    profile: Annotated[str, typer.Option(help="gb10 | generic")] = "gb10",
    as_json: JsonOpt = False,
    timeout: Annotated[float, typer.Option("--timeout", min=0.1, help="Seconds to wait on a FIFO or pipe "
                                           "(a regular file is read at once).")] = 60.0,
) -> int:
    """Judge a recorded log: throttling, power plateau, low-clock state, memory pressure, new neighbours.

    Exit 0: nothing to warn about; 1: warn-level events; 3: the file could not be read or held no samples.
    """
    from sparkops.monitor.analyze import analyze
    from sparkops.monitor.csvlog import LogStream

    if profile not in ("gb10", "generic"):
        raise typer.BadParameter("gb10 or generic", param_hint="--profile")
    stream = LogStream(file, timeout_s=timeout)  # streamed in timestamp order: any length, bounded memory
    res = analyze(stream.samples(), profile=profile, notes=stream)  # type: ignore[arg-type]
    if stream.error is not None:
        raise typer.BadParameter(stream.error, param_hint="FILE")
    if as_json:
        sys.stdout.write(res.model_dump_json(indent=2) + "\n")
    else:
        span = f"over {res.duration_s:.0f} s" if res.duration_s is not None else "(no usable timestamps)"
        lines = [f"{res.samples} samples {span} ({profile} profile)", *res.verdict]
        lines += [f"  {e.gotcha} {e.kind} {e.start} -> {e.end or 'end of log'}: {e.summary}" for e in res.events]
        lines += [f"note: {n}" for n in res.notes]
        sys.stdout.write("\n".join(lines) + "\n")
    if res.samples == 0:  # nothing could be read as a sample: that is not "nothing to warn about"
        sys.stderr.write(f"spark-ops: no samples could be read from {file}\n")
        return 3
    return 1 if any(e.severity == "warn" for e in res.events) else 0


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def watch(
    ctx: typer.Context,
    interval: IntervalOpt = None,
    log: Annotated[Path | None, typer.Option("--log", help="CSV log (default: watch-<time>.csv).",
                                                show_default=False)] = None,
    plot: Annotated[Path | None, typer.Option("--plot", help="Also draw FILE.png (needs matplotlib).",
                                                 show_default=False)] = None,
) -> int:
    """Run COMMAND (after --), sample alongside, flag G3/G4/G6 events live; exit with COMMAND's code."""
    from sparkops.monitor.watch import watch as run_watch

    try:
        res = run_watch(list(ctx.args), interval_s=interval, log_path=log, plot_path=plot)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="COMMAND") from exc
    return res.exit_code


@app.command()
def version() -> int:
    """Print the tool version."""
    typer.echo(f"dgx-spark-ops {__version__}")
    return 0


def main(argv: list[str] | None = None) -> None:
    """Console entry point: map every way of failing onto the exit-code contract."""
    try:
        rv = app(args=argv, standalone_mode=False)
    except UsageError as exc:
        exc.show()
        sys.exit(EXIT_TOOL_ERROR)
    except ClickException as exc:
        exc.show()
        sys.exit(EXIT_TOOL_ERROR)
    except typer.Exit as exc:  # --help
        sys.exit(exc.exit_code)
    except typer.Abort:
        typer.echo("aborted", err=True)
        sys.exit(130)
    except InputError as exc:  # a snapshot, a matrix file...: the user's input, said plainly
        typer.echo(f"spark-ops: {exc}", err=True)
        sys.exit(EXIT_TOOL_ERROR)
    except BrokenPipeError:
        sys.exit(EXIT_TOOL_ERROR)
    except Exception as exc:  # the tool itself failed: say so, exit 3, no traceback
        if os.environ.get("SPARKOPS_DEBUG"):
            raise
        typer.echo(f"spark-ops: internal error: {type(exc).__name__}: {exc}", err=True)
        sys.exit(EXIT_TOOL_ERROR)
    sys.exit(rv if isinstance(rv, int) else 0)
