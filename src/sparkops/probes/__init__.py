"""Probes collect facts: impure, concurrent, each bounded in time, never raising.

Every probe module exposes ``SECTION`` (the :class:`~sparkops.facts.model.Facts` field it fills),
``collect(opts) -> section model`` and ``unavailable(why, detail) -> section model``. The runner
starts them all at once, waits for each until the shared deadline, and records how each went in
``Facts.probes``. A probe that raises or overruns leaves a section that says so.
"""

from __future__ import annotations

import importlib
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # this package stays light: target_launch starts children before pydantic loads
    from sparkops.facts.model import Facts
    from sparkops.knowledge import Knowledge


@dataclass(frozen=True)
class CollectOptions:
    """What to collect and how. ``env`` is the environment probes read (injectable for tests)."""

    depth: str = "full"  # "quick" | "full"
    python: str | None = None  # target interpreter; None -> python3 on PATH, else our own
    config_paths: tuple[Path, ...] = ()
    offline: bool = False  # G8: no network
    budget_s: float = 60.0  # whole-collection deadline
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    cache_dir: Path | None = None
    counter_window_s: float = 0.5  # how long the GPU probe waits to see counters grow
    only: tuple[str, ...] = ()  # restrict to these probe names (tests, benchmarks)
    # --container: the target probe runs inside this image; ``python`` then names the interpreter
    # inside it (default: python3, else python, on the image's PATH)
    container_image: str = ""  # as asked, alias resolved
    container_ref: str = ""  # what runs: the lock file's repo@sha256:... when pinned, else the tag
    container_engine: str = ""  # docker | podman; "" = the first on PATH (sparkops.probes.engine.choose)
    # G5: after the probes, measure device memory bandwidth in the target (sparkops.bandwidth; opt-in, intrusive)
    measure_bandwidth: bool = False
    # the knowledge the probes take their bounds and word lists from, loaded once by the caller (api);
    # None: the packaged one, loaded (once, cached) by the first probe that asks
    kb: Knowledge | None = field(default=None, compare=False, repr=False)

    def knowledge(self) -> Knowledge:
        """The knowledge passed in, else the packaged one. Probes ask here, never ``load()`` themselves."""
        if self.kb is not None:
            return self.kb
        from sparkops.knowledge import load

        return load()


def live_options(*, quick: bool = False, python: str | Path | None = None, config_paths: Iterable[Path] = (),
                 offline: bool = False, budget_s: float | None = None, container: bool = False,
                 engine: str | None = None, env: Mapping[str, str] | None = None, only: tuple[str, ...] = (),
                 kb: Knowledge | None = None) -> CollectOptions:
    """A live collection with the tool's defaults, the one place for them (the CLI, the MCP tools,
    fleet, soak and bandwidth build theirs here). ``budget_s`` None: thresholds.yaml's whole-collection
    deadline (``setup.container_budget_s`` when the target runs in a ``container``: starting one costs
    seconds); GPU counters watched 0.1 s when ``quick``, 1 s in full (hidden behind the torch import);
    ``engine`` docker | podman | None (the first on PATH). The image itself is resolved by the caller."""
    if engine is not None and engine not in ("docker", "podman"):
        from sparkops.core.errors import InputError

        raise InputError(f"--engine {engine}: docker or podman")
    base = CollectOptions(kb=kb)
    if budget_s is None:
        th = base.knowledge().thresholds
        budget_s = th.setup.container_budget_s if container else th.probes.budget_s
    return CollectOptions(depth="quick" if quick else "full", python=str(python) if python is not None else None,
                          config_paths=tuple(config_paths), offline=offline, budget_s=float(budget_s),
                          env=dict(os.environ) if env is None else dict(env), only=tuple(only),
                          counter_window_s=0.1 if quick else 1.0, container_engine=engine or "", kb=kb)


PROBES: dict[str, str] = {  # section -> module; the target interpreter first: it is the slowest
    "target": "sparkops.probes.target_env",
    "gpu": "sparkops.probes.gpu",
    "cuda_libs": "sparkops.probes.cuda_libs",
    "processes": "sparkops.probes.processes",
    "host": "sparkops.probes.host",
    "memory": "sparkops.probes.memory",
    "configs": "sparkops.probes.configs",
    "playbooks": "sparkops.probes.playbooks",
}


def _unavailable(mod: ModuleType | None, why: object, detail: str) -> object | None:
    """The module's own "could not collect" section, or None (defaults stay) if even that fails."""
    if mod is None:
        return None
    try:
        return mod.unavailable(why, detail)
    except Exception:
        return None


def collect(opts: CollectOptions | None = None, while_waiting: Callable[[], object] | None = None) -> Facts:
    """Run every probe concurrently within ``opts.budget_s`` and assemble one snapshot.

    Each probe imports its own module in its own thread, so the slow ones (the target
    interpreter, NVML) start before the rest is even imported. ``while_waiting`` runs on the
    calling thread meanwhile (the CLI uses it to import the checks while probes run).
    """
    from sparkops import __version__
    from sparkops.facts.model import Facts, ProbeRecord
    from sparkops.facts.reading import Why

    opts = opts or CollectOptions()
    names = [n for n in PROBES if not opts.only or n in opts.only]
    results: dict[str, object] = {}
    records: dict[str, ProbeRecord] = {}
    loaded: dict[str, ModuleType] = {}
    lock = threading.Lock()
    abandoned: set[str] = set()  # past the deadline: a late answer must not overwrite "timed out"
    started = time.monotonic()

    def work(name: str) -> None:
        t0 = time.monotonic()
        try:
            mod = loaded[name] = importlib.import_module(PROBES[name])
            section = mod.collect(opts)
            # a probe returning the wrong shape fails here, as its own error, not the whole snapshot
            section = Facts.model_fields[name].annotation.model_validate(section.model_dump(warnings=False))
            record = ProbeRecord(name=name, ok=True, duration_s=round(time.monotonic() - t0, 3),
                                 source=getattr(section, "source", "") or "")
        except Exception as exc:  # a probe must never take the run down: record and go on
            section = _unavailable(loaded.get(name), Why.error, f"{type(exc).__name__}: {exc}")
            record = ProbeRecord(name=name, ok=False, duration_s=round(time.monotonic() - t0, 3),
                                 reason=f"{type(exc).__name__}: {exc}"[:300])
        with lock:
            if name not in abandoned:
                if section is not None:
                    results[name] = section
                records[name] = record

    threads = {n: threading.Thread(target=work, args=(n,), name=f"probe-{n}", daemon=True) for n in names}
    for t in threads.values():
        t.start()
    if while_waiting is not None:
        while_waiting()
    deadline = started + opts.budget_s
    for name, t in threads.items():
        t.join(max(0.0, deadline - time.monotonic()))
        with lock:
            if name in records:
                continue
            abandoned.add(name)
            late = _unavailable(loaded.get(name), Why.timeout,
                                f"probe still running after the {opts.budget_s:g} s budget")
            if late is not None:
                results[name] = late
            records[name] = ProbeRecord(name=name, ok=False, duration_s=round(time.monotonic() - started, 3),
                                        reason="timeout: abandoned at the collection deadline")
    facts = Facts(tool_version=__version__, collected_at=datetime.now(timezone.utc), depth=opts.depth)  # noqa: UP017
    with lock:
        update = {name: results[name] for name in names if name in results}
        facts = facts.model_copy(update=update)
        facts.probes.update(records)
    # re-validate so a probe returning a wrong type is caught here, not in a check
    return Facts.model_validate(facts.model_dump())


def collect_snapshot(opts: CollectOptions | None = None, while_waiting: Callable[[], object] | None = None) -> Facts:
    """:func:`collect`, then the one redaction pass over every string: the snapshot features and
    front ends keep, write or show (a command line's ``--api-key X`` never leaves)."""
    from sparkops.facts.redact import redact_model

    return redact_model(collect(opts, while_waiting))
