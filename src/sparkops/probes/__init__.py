"""Probes collect facts: impure, concurrent, each bounded in time, never raising.

Every probe module exposes ``SECTION`` (the :class:`~sparkops.facts.model.Facts` field it fills),
``collect(opts) -> section model`` and ``unavailable(why, detail) -> section model``. The runner
starts them all at once, waits for each until the shared deadline, and records how each went in
``Facts.probes``. A probe that raises or overruns leaves a section that says so.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from types import ModuleType

from sparkops import __version__
from sparkops.facts.model import Facts, ProbeRecord
from sparkops.facts.reading import Why


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


def _modules() -> dict[str, ModuleType]:
    from sparkops.probes import configs, cuda_libs, gpu, host, memory, playbooks, processes, target_env

    return {m.SECTION: m for m in (target_env, gpu, host, memory, cuda_libs, processes, configs, playbooks)}


def collect(opts: CollectOptions | None = None) -> Facts:
    """Run every probe concurrently within ``opts.budget_s`` and assemble one snapshot."""
    opts = opts or CollectOptions()
    modules = _modules()
    if opts.only:
        modules = {k: v for k, v in modules.items() if k in opts.only}
    results: dict[str, object] = {}
    records: dict[str, ProbeRecord] = {}
    started = time.monotonic()

    def work(name: str, mod: ModuleType) -> None:
        t0 = time.monotonic()
        try:
            section = mod.collect(opts)
            results[name] = section
            records[name] = ProbeRecord(name=name, ok=True, duration_s=round(time.monotonic() - t0, 3),
                                        source=getattr(section, "source", "") or "")
        except Exception as exc:  # a probe must never take the run down: record and go on
            results[name] = mod.unavailable(Why.error, f"{type(exc).__name__}: {exc}")
            records[name] = ProbeRecord(name=name, ok=False, duration_s=round(time.monotonic() - t0, 3),
                                        reason=f"{type(exc).__name__}: {exc}"[:300])

    threads = {n: threading.Thread(target=work, args=(n, m), name=f"probe-{n}", daemon=True)
               for n, m in modules.items()}
    for t in threads.values():
        t.start()
    deadline = started + opts.budget_s
    for name, t in threads.items():
        t.join(max(0.0, deadline - time.monotonic()))
        if t.is_alive():
            mod = modules[name]
            results[name] = mod.unavailable(Why.timeout, f"probe still running after the {opts.budget_s:.0f} s budget")
            records[name] = ProbeRecord(name=name, ok=False, duration_s=round(time.monotonic() - started, 3),
                                        reason="timeout: abandoned at the collection deadline")
    facts = Facts(tool_version=__version__, collected_at=datetime.now(timezone.utc), depth=opts.depth)  # noqa: UP017
    update = {name: results[name] for name in modules if name in results}
    facts = facts.model_copy(update=update)
    facts.probes.update(records)
    # re-validate so a probe returning a wrong type is caught here, not in a check
    return Facts.model_validate(facts.model_dump())
