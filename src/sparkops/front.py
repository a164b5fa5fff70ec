"""The front door of ``spark-ops`` (its console entry point and ``python -m sparkops``).

Standard library only, on purpose: before typer, pydantic or rich load, it

* answers the commands that need none of them: ``--help`` (at 80 columns or wider), ``version``,
  ``explain ID`` (from the raw catalog YAML) and ``schema NAME`` (the checked-in contract file,
  which tests keep equal to the models' schema);
* starts what a preflight waits on longest, the target interpreter's children and NVML's first
  init (:func:`prestart`);
* runs a plain ``preflight --quick`` line (:data:`QUICK_FLAGS`, :data:`QUICK_VALUES`) straight
  into the preflight body without typer or rich (:func:`fast_preflight`: typer and its parsing
  cost the quick path about a quarter of a second on the device), else hands over to the typer
  app in :mod:`sparkops.cli`.

Anything it does not recognise exactly goes to typer, so usage errors, ``COMMAND --help`` and
every option keep typer's behaviour; tests compare both paths byte for byte. :data:`COMMANDS` is
the one place a command is listed.
"""

from __future__ import annotations

import os
import sys
from types import SimpleNamespace

from sparkops import __version__

APP_HELP = "Is this DGX Spark (GB10) ready for the job? Preflight G1-G10 from replayable facts."

# Every command of ``spark-ops``, in the order ``--help`` lists them:
# (name, the module of sparkops.commands whose ``register(app)`` adds it,
#  its one-line help exactly as ``spark-ops --help`` prints it at 80 columns).
# A command is added by its module under sparkops/commands/ and one line here, nothing else: cli.py
# imports the module only when that command runs (or for ``COMMAND --help``). tests/test_front.py
# says which line to write when a command's help changes.
COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("preflight", "sparkops.commands.preflight", "Judge G1-G10 and write env-report.json."),
    ("collect", "sparkops.commands.collect", "Collect this machine's facts into a replayable snapshot..."),
    ("explain", "sparkops.commands.explain", "Print a gotcha's symptom, cause, what is checked, and the fix."),
    ("schema", "sparkops.commands.schema", "Print the JSON Schema of an output: the facts snapshot,..."),
    ("stack", "sparkops.commands.stack", "Installed versions against the dated known-good matrix..."),
    ("plan", "sparkops.commands.plan", "Will this fine-tune fit? Itemised estimate, verdict, and..."),
    ("diagnose", "sparkops.commands.diagnose", "Which gotcha (G1-G10) does this log point at? Findings..."),
    ("bandwidth", "sparkops.commands.bandwidth", "Measure device memory bandwidth in the target environment..."),
    ("fleet", "sparkops.commands.fleet", "Preflight several Sparks together, run once per GPU under..."),
    ("mcp", "sparkops.commands.mcp", "Serve the checks to coding agents: a Model Context Protocol..."),
    ("postmortem", "sparkops.commands.postmortem", "What ended the last run? Reads the previous boot's kernel..."),
    ("fix", "sparkops.commands.fix", "Act on G3, with consent: drop the page cache (sync; 3 >..."),
    ("exporter", "sparkops.commands.exporter", "Serve this Spark's readings as Prometheus metrics on..."),
    ("report", "sparkops.commands.report", "A bug report you can paste into a forum or an issue:..."),
    ("watch", "sparkops.commands.watch", "Run COMMAND (after --), sample alongside, flag G3/G4/G6..."),
    ("version", "sparkops.commands.version", "Print the tool version."),
    ("setup", "sparkops.commands.setup", "Container-first setup: NGC, Unsloth (pinned), or bare pip."),
    ("triage", "sparkops.commands.triage", "Work a failure's known hypotheses in order, stopping at the..."),
    ("thermal", "sparkops.commands.thermal", "Background thermal/power/memory sampler (G4, G3, G6) and..."),
)

LAZY: dict[str, str] = {name: module for name, module, _help in COMMANDS}

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMA_DIR = os.path.join(HERE, "report", "schema")
KNOWLEDGE_DIR = os.path.join(HERE, "knowledge")
FAST_OFF_ENV = "SPARKOPS_NO_FAST"  # set to 1: every command goes through typer (tests compare both)


def program_name() -> str:
    """What the help's usage line calls us: ``spark-ops`` or ``python -m sparkops`` (click's rule)."""
    main = sys.modules.get("__main__")
    path = sys.argv[0] if sys.argv and sys.argv[0] else "spark-ops"
    package = getattr(main, "__package__", None)
    if not package:
        return os.path.basename(path)
    name = os.path.splitext(os.path.basename(path))[0]
    return f"python -m {package if name == '__main__' else f'{package}.{name}'}"


def help_text(prog: str, width: int = 78) -> str | None:
    """The top-level ``--help`` as click formats it at ``width`` (None: a row would wrap, let click do it)."""
    import textwrap

    first = max(len(name) for name, _m, _h in COMMANDS)
    if any(len(h) > width - first - 4 for _n, _m, h in COMMANDS):
        return None
    lines = [f"Usage: {prog} [OPTIONS] COMMAND [ARGS]...", "",
             textwrap.fill(APP_HELP, width, initial_indent="  ", subsequent_indent="  "), "",
             "Options:", "  --help  Show this message and exit.", "", "Commands:"]
    lines += [f"  {name:<{first}}  {h}" for name, _m, h in COMMANDS]
    return "\n".join(lines) + "\n"


def _read_yaml(name: str) -> object:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # as sparkops.knowledge reads it
    with open(os.path.join(KNOWLEDGE_DIR, name), encoding="utf-8") as f:
        return yaml.load(f.read(), Loader=loader)  # noqa: S506


def gotcha_id(text: str) -> str:
    """"G3", "g3", "3", "identity" -> the catalog key (sparkops.api.explain's rule)."""
    key = text.strip()
    if key.isascii() and key.isdigit():
        key = f"G{int(key)}"
    key = key.upper() if key.lower() != "identity" else "identity"
    if key.startswith("G") and key[1:].isascii() and key[1:].isdigit():
        key = f"G{int(key[1:])}"
    return key


ENTRY_PREFIX = "  - id: "  # how gotchas.yaml starts each catalog entry


def catalog_entry(key: str) -> dict | None:
    """The raw catalog entry ``key`` of gotchas.yaml. Only that entry's lines are parsed when the
    file has its usual layout (the catalog grows with every sub-code); the whole file otherwise."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with open(os.path.join(KNOWLEDGE_DIR, "gotchas.yaml"), encoding="utf-8") as f:
        lines = f.read().splitlines(keepends=True)
    starts = [i for i, ln in enumerate(lines) if ln.startswith(ENTRY_PREFIX)]
    for n, i in enumerate(starts):
        if lines[i][len(ENTRY_PREFIX):].split("#")[0].strip().strip("'\"") != key:
            continue
        end = starts[n + 1] if n + 1 < len(starts) else len(lines)
        try:
            got = yaml.load("".join(lines[i:end]), Loader=loader)  # noqa: S506 - a SafeLoader
        except yaml.YAMLError:
            break
        if isinstance(got, list) and len(got) == 1 and isinstance(got[0], dict) and got[0].get("id") == key:
            return got[0]
        break
    entries = {e["id"]: e for e in yaml.load("".join(lines), Loader=loader)["gotchas"]}  # noqa: S506
    return entries.get(key)


def explain_text(gid: str) -> str | None:
    """``spark-ops explain GID`` from the raw catalog; None when the id is unknown (typer says so)."""
    from sparkops.report.gotcha_text import render_gotcha

    key = gotcha_id(gid)
    raw = catalog_entry(key)
    if raw is None:
        return None
    entry = {"known_problems": "", "references": [], **raw}
    entry["codes"] = {code: SimpleNamespace(**{"fix": "", "where": "", **sub})
                      for code, sub in (entry.get("codes") or {}).items()}
    g = SimpleNamespace(**entry)
    matrix = SimpleNamespace(**_read_yaml("stack_matrix.yaml")["matrix"]) if key == "G9" else None  # type: ignore[index]
    return render_gotcha(g, matrix)


def schema_text(name: str) -> str | None:
    """The checked-in JSON Schema of an output (None when unknown or not installed)."""
    path = os.path.join(SCHEMA_DIR, f"{name}.schema.json")
    if not name.isidentifier() or not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return f.read()


def columns() -> int:
    """The terminal's width as click reads it (shutil.get_terminal_size's rule, without shutil)."""
    try:
        cols = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        cols = 0
    if cols <= 0:
        try:
            cols = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            cols = 0
    return cols or 80


def fast_answer(argv: list[str], prog: str | None = None) -> str | None:
    """The whole output of a command answered without typer, or None: typer handles it."""
    if os.environ.get(FAST_OFF_ENV, "").strip() not in ("", "0"):
        return None
    if argv == ["--help"]:
        if columns() < 80:
            return None  # click wraps differently below 80 columns
        return help_text(prog or program_name())
    if argv == ["version"]:
        return f"dgx-spark-ops {__version__}\n"
    if len(argv) == 2 and not argv[1].startswith("-"):
        if argv[0] == "explain":
            return explain_text(argv[1])
        if argv[0] == "schema":
            return schema_text(argv[1])
    return None


FLAGS = frozenset({"--quick", "--offline", "--json", "--measure"})  # options of these commands without a value


def peek(argv: list[str]) -> tuple[str | None, bool, str | None] | None:
    """(python, quick, container) of a live-collecting command line (preflight, collect, stack,
    triage gpu), as the CLI will pass them to :func:`sparkops.probes.target_launch.prestart`; None
    when it collects nothing (a snapshot, --help, another command) or the line is not plain enough
    to read without typer. A guess: a wrong one costs a child process, never a fact (the target
    probe takes a prestarted child only for exactly its command line and environment)."""
    if not argv:
        return None
    from pathlib import Path  # collecting commands load it anyway

    cmd, rest = argv[0], argv[1:]
    if cmd == "triage":
        if rest[:1] != ["gpu"]:
            return None
        rest = rest[1:]
    elif cmd not in ("preflight", "collect", "stack"):
        return None
    python = container = None
    quick = cmd == "stack"
    it = iter(rest)
    for tok in it:
        name, eq, value = tok.partition("=")
        if not tok.startswith("-") or tok == "--" or name in ("--facts", "--help"):
            return None
        if name in FLAGS:
            if eq:
                return None
            quick = quick or (name == "--quick" and cmd in ("preflight", "collect"))
            continue
        value = value if eq else next(it, None)
        if value is None:
            return None
        if name == "--python":
            python = str(Path(value))  # as typer hands it over: a Path, then str()
        elif name == "--container":
            container = value
    return python, quick, container


def prestart(argv: list[str]) -> None:
    """Start what a live-collecting command waits on longest, the target interpreter's children
    and NVML's first init, before typer and pydantic load; never raises. The CLI's own call later
    finds them started (with --container the target runs in the image, started by its probe)."""
    try:
        got = peek(argv)
        if got is None:
            return
        python, quick, container = got
        env = dict(os.environ)
        if container is None:
            from sparkops.probes.target_launch import prestart as start_children

            start_children(python, env, "quick" if quick else "full")
        from sparkops.probes.early import warm_nvml

        warm_nvml(env)
    except Exception:  # the probes start what is missing themselves, and say why if they cannot
        pass


# ``preflight --quick`` with these options is run without typer (fast_preflight); anything else
# on its line (a workload, --facts, --container, --matrix, --measure, --help...) goes to typer.
QUICK_FLAGS = frozenset({"--quick", "--offline", "--json"})
QUICK_VALUES = frozenset({"--python", "--config", "--budget", "--report", "--format"})
FORMATS = ("table", "lines", "json")  # preflight's --format choices (report.formats.Format)


def quick_preflight_args(argv: list[str]) -> dict | None:
    """The options of a plain ``preflight --quick`` line as typer would hand them to the command,
    or None: typer parses it (another option, a positional, a value typer would refuse or read
    differently, a value that looks like an option)."""
    if not argv or argv[0] != "preflight":
        return None
    from pathlib import Path

    got: dict = {"python": None, "quick": False, "config": [], "offline": False, "budget": None,
                 "report": Path("env-report.json"), "format": "table", "json": False}
    it = iter(argv[1:])
    for tok in it:
        name, eq, value = tok.partition("=")
        if name in QUICK_FLAGS:
            if eq:
                return None
            got[name[2:]] = True
            continue
        if name not in QUICK_VALUES:
            return None
        if not eq:
            value = next(it, None)
        if not value or value.startswith("-"):
            return None
        if name == "--format":
            if value not in FORMATS:
                return None
            got["format"] = value
        elif name == "--budget":
            try:
                got["budget"] = float(value)
            except ValueError:
                return None
        elif name == "--config":
            got["config"].append(Path(value))
        else:
            got[name[2:]] = Path(value)
    if not got["quick"] or any(k.startswith("_") and k.endswith("_COMPLETE") for k in os.environ):
        return None  # full mode and shell completion: typer's
    return got


def _echo_err(line: str) -> None:
    """``typer.echo(line, err=True)`` as click writes it: ANSI escapes stripped when stderr is not a terminal."""
    stream = sys.stderr
    if not stream.isatty():
        import re

        line = re.sub(r"\033\[[0-?]*[ -/]*[@-~]", "", line)  # click._compat's _ansi_re
    stream.write(line + "\n")
    stream.flush()


LITE_OFF_ENV = "SPARKOPS_NO_LITE"  # set to 1: the fast path keeps pydantic (tests and benchmarks compare both)


def fast_preflight(argv: list[str], lite: bool = False) -> int | None:
    """``preflight --quick`` without typer or rich (the lines and json formats): the exit code, or
    None when typer must handle the line. The same body as the typer command
    (:func:`sparkops.commands._preflight_run.run`), the same failures mapped the same way as
    :func:`sparkops.cli.main`; tests compare both paths byte for byte.

    ``lite`` (the console entry point asks for it): the models run on :mod:`sparkops.core.lite`, not
    pydantic, when no model module is loaded yet. If the lite runtime declines anything, or anything
    fails before the output starts, the sparkops modules it imported are dropped and the line is
    answered again on pydantic: the answer is pydantic's either way (:func:`_lite_failed`)."""
    if os.environ.get(FAST_OFF_ENV, "").strip() not in ("", "0"):
        return None
    got = quick_preflight_args(argv)
    if got is None:
        return None
    if lite and os.environ.get(LITE_OFF_ENV, "").strip() in ("", "0"):
        from sparkops.core import lite as lite_runtime
        from sparkops.core import modeling

        if modeling.runtime() in (None, "lite"):
            modeling.use_lite()
            lite_runtime.DECLINE_ON_ERROR = True  # pydantic's error texts are not the lite runtime's
            code = _quick(got, lite=True)
            if code is not _LITE_FAILED:
                return code  # type: ignore[return-value]
            _drop_lite_modules()
    return _quick(got, lite=False)  # type: ignore[return-value]


_LITE_FAILED = object()


def _drop_lite_modules() -> None:
    """Forget every sparkops module imported under the lite runtime (and the runtime choice), so the
    next import builds them on pydantic."""
    for name in [m for m in sys.modules if m.startswith("sparkops.") and m != "sparkops.front"]:
        del sys.modules[name]


def _quick(got: dict, lite: bool) -> int | None | object:
    from sparkops.commands._preflight_run import python_problem, run

    if python_problem(got["python"]) is not None:
        return None  # typer says it as a usage error
    from sparkops.commands.contract import OutputFormat, chosen
    from sparkops.core.errors import InputError
    from sparkops.facts.workload import Workload

    try:
        return run(python=got["python"], quick=True, facts=None, workload=Workload(), config=got["config"] or None,
                   offline=got["offline"], budget=got["budget"], container=None, engine=None, matrix=None,
                   measure=False, report=got["report"], out=chosen(OutputFormat(got["format"]), got["json"]),
                   warn=_echo_err)
    except KeyboardInterrupt:  # typer: exit 130, nothing said
        return 130
    except Exception as exc:
        if lite and _lite_failed():
            return _LITE_FAILED
        if isinstance(exc, EOFError):  # typer: a blank line, then click's Abort, which the CLI says as "aborted"
            _echo_err("")
            _echo_err("aborted")
            return 130
        if isinstance(exc, BrokenPipeError):  # typer (EPIPE): exit 1, no complaint when the closed stream is flushed
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            return 1
        if isinstance(exc, InputError):
            _echo_err(f"spark-ops: {exc}")
            return 3
        # the tool itself failed: exit 3, no traceback (as sparkops.cli.main)
        if os.environ.get("SPARKOPS_DEBUG"):
            raise
        _echo_err(f"spark-ops: internal error: {type(exc).__name__}: {exc}")
        return 3


def _lite_failed() -> bool:
    """A failure under the lite runtime before its verdict (:func:`sparkops.core.modeling.lite_verdict`):
    nothing is printed yet, so pydantic answers instead. After the verdict a failure is the tool's own."""
    from sparkops.core import modeling

    return not modeling.verdict_given()


def main(argv: list[str] | None = None) -> None:
    """Console entry point: the fast answers, else the early starts, then ``preflight --quick``
    without typer when its line is plain, else the typer app."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        out = fast_answer(args)
    except Exception:  # a broken install or file: typer's path reports it properly
        out = None
    if out is not None:
        try:
            sys.stdout.write(out)
            sys.stdout.flush()
        except BrokenPipeError:
            sys.exit(3)
        sys.exit(0)
    prestart(args)
    code = fast_preflight(args, lite=True)
    if code is not None:
        sys.exit(code)
    from sparkops.cli import main as cli_main

    cli_main(args)
