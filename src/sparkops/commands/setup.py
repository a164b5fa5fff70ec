"""``spark-ops setup``: the container-first decision, the exact ``docker run``, digest pinning and
the bare-pip sequence, as commands that print what to run; the library is :mod:`sparkops.setup`."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from sparkops.commands.contract import OutputFormat, Result, chosen, emit, format_option
from sparkops.setup import (
    EXIT_OK,
    EXIT_TOOL_ERROR,
    INSPECT_TIMEOUT_S,
    PULL_TIMEOUT_S,
    SetupError,
    Use,
    _exec_container,
    _exec_prepare,
    _matrix,
    bare_pip,
    decide,
    docker_run,
    execute_bare_pip,
    pin,
)

JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output (same as --format json).")]
EngineOpt = Annotated[str | None, typer.Option("--engine", help="docker (Docker Engine, or podman's Docker API "
                      "behind it) | podman. Default: the first on PATH.", show_default=False)]


class SetupResult(Result[dict[str, Any]]):
    """A setup answer: a JSON object (the library's dict, no registered schema yet) or its text; exit 0."""

    def data(self) -> Any:
        return self.model

    def json(self) -> str:
        return json.dumps(self.model, indent=2) + "\n"

    def exit_code(self) -> int:
        return EXIT_OK


class DecisionResult(SetupResult):
    """``setup [--use X]``: the decision, or the three choices."""

    def text(self, fmt: OutputFormat) -> str:
        d = self.model["decision"]
        if d is None:
            lines = ["Container first. Pick one with --use:"]
            for c in self.model["choices"]:
                lines += [f"  --use {c['use']:<8} {c['approach']} -- {c['when']}", f"  {'':<14} why: {c['why']}"]
        else:
            lines = [f"{d['approach']}" + (f": {d['image']}" if d["image"] else ""), f"  when: {d['when']}",
                     f"  why:  {d['why']}", f"  next: {d['next']}"]
        return "\n".join(lines) + "\n"


class PinResult(SetupResult):
    """``setup pin``: the pinned reference (where it was recorded goes to stderr)."""

    def text(self, fmt: OutputFormat) -> str:
        return self.model["ref"] + "\n"


class BarePipResult(SetupResult):
    """``setup bare-pip`` without --exec: the sequence to run and the verification."""

    def text(self, fmt: OutputFormat) -> str:
        res = self.model
        lines = []
        if res["uv"]:
            lines.append(f"# {res['override_file']} (forces the pins; uv must not substitute other builds):")
            lines += [f"  {line}" for line in res["override_content"].splitlines()]
            lines.append("")
        lines += ["# install, in this order:", *res["steps"], "", "# then verify (expect: " + res["expect"] + "):",
                  res["verify"], ""]
        lines += [f"note: {n}" for n in res["notes"]]
        lines.append("note: `spark-ops setup bare-pip --exec --python PATH` runs it and the verification for you")
        return "\n".join(lines) + "\n"


FormatOpt = format_option(*SetupResult.formats)


def _emit_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2) + "\n")


def _fail(msg: str, as_json: bool) -> int:
    if as_json:
        _emit_json({"error": msg})
    typer.echo(f"spark-ops: {msg}", err=True)
    return EXIT_TOOL_ERROR


def register(app: typer.Typer) -> None:
    """Add the ``setup`` sub-app (decision, docker-run, pin, bare-pip) to ``app``."""
    setup_app = typer.Typer(add_completion=False, rich_markup_mode=None,
                            help="Container-first setup: NGC, Unsloth (pinned), or bare pip.")

    @setup_app.callback(invoke_without_command=True)
    def setup_cmd(
        ctx: typer.Context,
        use: Annotated[Use | None, typer.Option("--use", help="ngc | unsloth | custom", show_default=False)] = None,
        fmt: FormatOpt = "table",  # type: ignore[valid-type,assignment]
        as_json: JsonOpt = False,
    ) -> int:
        """The container-first decision and its reason; without --use, the three choices."""
        if ctx.invoked_subcommand is not None:
            return EXIT_OK
        return emit(DecisionResult(decide(use, _matrix())), fmt, as_json)

    @setup_app.command("docker-run")
    def docker_run_cmd(
        cmd: Annotated[list[str] | None, typer.Argument(help="Command to run in the container (after --).",
                                                        show_default=False)] = None,
        image: Annotated[str, typer.Option("--image", help="ngc | unsloth | any IMAGE[:TAG]")] = "ngc",
        mount: Annotated[Path | None, typer.Option("--mount", help="Host directory to mount (default: the "
                         "working directory) at /workspace/<name>.", show_default=False)] = None,
        do_exec: Annotated[bool, typer.Option("--exec", help="Run it now (hands the terminal to the container); "
                           "exits with the container's exit status.")] = False,
        engine_opt: EngineOpt = None,
        no_ulimits: Annotated[bool, typer.Option("--no-ulimits", help="Leave out --ulimit memlock/stack: an engine "
                              "that may not raise limits (rootless podman, a sandbox without CAP_SYS_RESOURCE) "
                              "refuses to start the container with them.")] = False,
        as_json: JsonOpt = False,
    ) -> int:
        """The exact `docker run` for the image, each flag with its reason; pinned digest when locked."""
        from sparkops.probes import engine

        try:
            eng, _why = engine.choose(engine_opt, os.environ)
            if not do_exec:
                dr = docker_run(image, mount, cmd, engine_name=eng, ulimits=not no_ulimits)
            else:
                dr = _exec_prepare(image, mount, cmd, eng, ulimits=not no_ulimits)
        except (SetupError, ValueError) as exc:
            return _fail(str(exc), as_json)
        if as_json:
            _emit_json({"argv": dr.argv, "command": dr.shell(), "image": dr.image, "ref": dr.ref,
                        "pinned": dr.pinned, "why": [{"flag": f, "why": w} for f, w in dr.whys],
                        "notes": dr.notes, "exec": do_exec, "engine": eng})
        else:
            out = typer.echo if not do_exec else (lambda m: typer.echo(m, err=True))  # stdout is the container's
            out(dr.shell())
            out("")
            for flag, why in dr.whys:
                out(f"  {flag:<28} {why}")
            for n in dr.notes:
                out(f"note: {n}")
        if not do_exec:
            return EXIT_OK
        try:
            return _exec_container(dr)
        except SetupError as exc:
            return _fail(str(exc), False)

    @setup_app.command("pin")
    def pin_cmd(
        image: Annotated[str, typer.Argument(help="IMAGE[:TAG] (or ngc | unsloth)")],
        pull: Annotated[bool, typer.Option("--pull", help="docker pull IMAGE first.")] = False,
        timeout: Annotated[float, typer.Option("--timeout", help="Seconds for docker inspect.")] = INSPECT_TIMEOUT_S,
        pull_timeout: Annotated[float, typer.Option("--pull-timeout", help="Seconds for docker pull.")] = PULL_TIMEOUT_S,
        engine_opt: EngineOpt = None,
        fmt: FormatOpt = "table",  # type: ignore[valid-type,assignment]
        as_json: JsonOpt = False,
    ) -> int:
        """Resolve a (moving) tag to repo@sha256:... and record it in .spark-ops.lock.json."""
        as_json = chosen(fmt, as_json) is OutputFormat.json
        try:
            res = pin(image, pull=pull, timeout=timeout, pull_timeout=pull_timeout, engine_name=engine_opt)
        except (SetupError, ValueError) as exc:
            return _fail(str(exc), as_json)
        code = emit(PinResult(res), fmt, as_json)
        if not as_json:
            typer.echo(f"recorded in {res['lock']} for {res['image']}", err=True)
        return code

    @setup_app.command("bare-pip")
    def bare_pip_cmd(
        uv: Annotated[bool, typer.Option("--uv", help="uv pip install with an --override file of the pins.")] = False,
        do_exec: Annotated[bool, typer.Option("--exec", help="Run it now in the --python environment, step by "
                                              "step, then the verification.")] = False,
        python: Annotated[str | None, typer.Option("--python", help="With --exec: the environment's interpreter "
                          "(default: python3 on PATH).", show_default=False)] = None,
        step_timeout: Annotated[float | None, typer.Option("--step-timeout", help="With --exec: seconds per "
                                "step (default from thresholds.yaml: 1800).", show_default=False)] = None,
        fmt: FormatOpt = "table",  # type: ignore[valid-type,assignment]
        as_json: JsonOpt = False,
    ) -> int:
        """The exact bare-pip install sequence (order and --no-deps matter), then the verification.
        With --exec: exit 0 verified, 1 a step failed (later steps not run), 2 the verification
        failed, 3 nothing could start."""
        if do_exec:
            return _exec_bare_pip(python, uv, step_timeout, chosen(fmt, as_json) is OutputFormat.json)
        return emit(BarePipResult(bare_pip(uv=uv)), fmt, as_json)

    app.add_typer(setup_app, name="setup")


def _exec_bare_pip(python: str | None, uv: bool, step_timeout: float | None, as_json: bool) -> int:
    """``bare-pip --exec``: the steps' output streams to stdout (stderr with --json, which keeps
    stdout for the result)."""
    try:
        res = execute_bare_pip(python, uv=uv, out=sys.stderr if as_json else sys.stdout,
                               step_timeout_s=step_timeout)
    except SetupError as exc:
        return _fail(str(exc), as_json)
    if as_json:
        _emit_json(res)
        return int(res["exit_code"])
    echo = typer.echo
    echo("")
    for n in res["notes"]:
        echo(f"note: {n}")
    for st in res["steps"]:
        took = f" ({st['duration_s']:g} s)" if st["duration_s"] is not None else ""
        echo(f"  {st['n']}. {st['status']:<8}{took} {st['command']}")
    if res["failed_step"] is not None:
        st = res["steps"][res["failed_step"] - 1]
        what = "did not finish in time (killed)" if st["status"] == "timeout" else f"failed (exit {st['exit_code']})"
        echo(f"step {st['n']} {what}: {st['command']}")
        if st["stderr_tail"]:
            echo("stderr (last lines):")
            for line in st["stderr_tail"].splitlines():
                echo(f"  | {line}")
        echo("later steps were not run; fix this one and run again")
        return int(res["exit_code"])
    v = res["verify"]
    echo(f"verify: {v['command']}")
    echo(f"  {v['status'].upper()}: {v['reason']}")
    if v["hint"]:
        echo(f"  next: {v['hint']}")
    return int(res["exit_code"])
