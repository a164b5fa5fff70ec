"""Collect in a second process, started by the front door before typer and pydantic load.

``spark-ops preflight`` and ``collect`` spend their time in two kinds of work: collecting (the
probes, with pydantic's facts models) and everything else (typer's argument parsing, the judging
modules, the renderer). :func:`start` runs the first in a child process
(``python -m sparkops.probes.prefetch SPEC``) while the main process does the second, so a
machine with a spare core pays roughly the longer of the two, not their sum. The child starts the
target interpreter's children and NVML's init first thing, then collects exactly as
:func:`sparkops.probes.collect` does in-process, and prints the options it used and the facts.

:func:`take` hands the facts over only when the options the CLI parsed are exactly those the child
used (and the environment is the same); anything else (a misread command line, a crash, a
timeout, a truncated answer) returns None and the caller collects in-process, as it would have
without the child. The facts cross as JSON, which round-trips a snapshot losslessly (a replayed
snapshot is judged the same). The launcher half is standard library only, on purpose.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkops.probes import CollectOptions, _run

if TYPE_CHECKING:
    from sparkops.facts.model import Facts

SPEC_KEYS = ("quick", "python", "config", "offline", "budget")
ANSWER_MARGIN_S = 5.0  # past the collection budget: the child is judged hung and collection restarts here
POLL_S = 0.005

_lock = threading.Lock()
_pending: tuple[dict[str, str], _run.Pending] | None = None
used: bool | None = None  # after take(): whether the child's facts were used (benchmarks, tests)


def cli_options(*, quick: bool = False, python: str | None = None, config: Sequence[str] | None = None,
                offline: bool = False, budget: float | None = None, container: str | None = None,
                env: Mapping[str, str] | None = None) -> CollectOptions:
    """The collection options of ``spark-ops preflight`` / ``collect`` / ``stack`` / ``triage``
    (one definition for the CLI and the child). Without ``--budget`` the packaged default, longer
    with ``--container`` (a container start costs seconds); ``--quick`` watches the GPU counters
    0.1 s, full mode 1 s (hidden behind the torch import)."""
    from sparkops import knowledge

    key = "setup.container_budget_s" if container else "probes.budget_s"
    budget = budget if budget is not None else float(knowledge.load().t(key))
    return CollectOptions(depth="quick" if quick else "full", python=python,
                          config_paths=tuple(Path(c) for c in (config or [os.getcwd()])), offline=offline,
                          budget_s=budget, counter_window_s=0.1 if quick else 1.0,
                          env=dict(env) if env is not None else dict(os.environ))


def options_key(opts: CollectOptions) -> str:
    """Everything in ``opts`` that shapes the facts, as one comparable string (the environment is
    compared on its own; a bandwidth measurement is attached later, in the main process)."""
    return json.dumps({f.name: getattr(opts, f.name) for f in fields(opts) if f.name not in ("env", "measure_bandwidth")},
                      default=str, sort_keys=True)


def start(spec: Mapping[str, Any], env: Mapping[str, str] | None = None) -> bool:
    """Start the collecting child for ``spec`` (:data:`SPEC_KEYS`; once per process); never raises."""
    global _pending
    env = dict(os.environ if env is None else env)
    with _lock:
        if _pending is not None:
            return False
        argv = (sys.executable, "-m", "sparkops.probes.prefetch", json.dumps({k: spec.get(k) for k in SPEC_KEYS}))
        pending = _run.spawn(argv, env=env)
        if pending.proc is None:
            return False
        _pending = (env, pending)
        return True


def waiting() -> bool:
    """Whether a collecting child was started and not yet taken."""
    with _lock:
        return _pending is not None


def _first_line(pending: _run.Pending, timeout_s: float) -> str | None:
    """The child's first line (the options it collects with), as soon as it is written."""
    deadline = time.monotonic() + timeout_s
    while True:
        out, _err = pending.output_so_far()
        if b"\n" in out:
            return out.split(b"\n", 1)[0].decode("utf-8", errors="replace")
        if pending.proc is None or pending.proc.poll() is not None or time.monotonic() > deadline:
            out, _err = pending.output_so_far()
            return out.split(b"\n", 1)[0].decode("utf-8", errors="replace") if b"\n" in out else None
        time.sleep(POLL_S)


def take(opts: CollectOptions, while_waiting: Callable[[], object] | None = None) -> Facts | None:
    """The child's facts if it collected exactly ``opts``, else None (the caller collects itself).
    ``while_waiting`` runs on this thread first, while the child works."""
    global _pending, used
    with _lock:
        got, _pending = _pending, None
    if got is None:
        return None
    env, pending = got
    used = False
    if dict(opts.env) != env:
        pending.kill()
        return None
    if while_waiting is not None:  # needed whoever collects: done while the child works
        while_waiting()
    wait_s = float(opts.budget_s) + ANSWER_MARGIN_S
    line = _first_line(pending, wait_s)
    if line is None or line != options_key(opts):
        pending.kill()
        return None
    res = pending.result(wait_s)
    if not res.ok or res.truncated:
        return None
    from sparkops.facts.model import Facts

    try:
        facts = Facts.model_validate_json(res.stdout.split("\n", 1)[1])
    except Exception:
        return None
    used = True
    return facts


@atexit.register
def _kill_leftover() -> None:
    with _lock:
        if _pending is not None:
            _pending[1].kill()


def _child(spec_text: str) -> int:
    """The child: start the slow steps, collect, print the options line and the facts."""
    from sparkops.probes import early, target_launch

    spec = json.loads(spec_text)
    env = dict(os.environ)
    target_launch.prestart(spec.get("python"), env, "quick" if spec.get("quick") else "full")
    early.warm_nvml(env)
    opts = cli_options(**{k: spec.get(k) for k in SPEC_KEYS}, env=env)
    sys.stdout.write(options_key(opts) + "\n")
    sys.stdout.flush()
    from sparkops.probes import collect

    facts = collect(opts)
    sys.stdout.write(facts.model_dump_json())
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(_child(sys.argv[1]))
    except (BrokenPipeError, KeyboardInterrupt):  # the CLI went away: nobody to answer
        sys.exit(1)
