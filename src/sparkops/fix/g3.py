"""``spark-ops fix G3``: drop the page cache or compact memory — with consent, on the host, as root.

The one place in the tool that changes the system, and only with ``--apply``. The order of the
guards: the action must be known; inside a container it is refused (``/proc/sys`` is read-only
there, and the fix belongs on the host, where the page cache lives); without root it is refused
(the command to run with sudo is printed); while a training or serving process runs it is refused
unless ``--force`` (the seeds: between runs, never mid-training); then the caller's ``confirm`` is
asked unless ``yes``. MemFree, MemAvailable, the page cache and free memory in large blocks are
read before and after. The paths are injectable so the tests write to a temporary file, never to
the real ``/proc/sys``. Never exposed through the MCP server.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from sparkops.checks.g03_fragmentation import summary
from sparkops.facts.reading import known
from sparkops.probes import fragmentation
from sparkops.probes.host import read_small, under_root
from sparkops.probes.memory import parse_meminfo

Action = Literal["drop-caches", "compact"]
WRITES: dict[str, tuple[str, str]] = {  # action -> (file under /proc/sys, value)
    "drop-caches": ("vm/drop_caches", "3"),  # page cache + reclaimable slab (dentries, inodes)
    "compact": ("vm/compact_memory", "1"),
}
SHELL = {"drop-caches": "sync; echo 3 | sudo tee /proc/sys/vm/drop_caches",
         "compact": "echo 1 | sudo tee /proc/sys/vm/compact_memory"}


class MemSnapshot(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    mem_free_bytes: int | None = None
    mem_available_bytes: int | None = None
    page_cache_bytes: int | None = None  # Cached + SReclaimable - Shmem
    free_large_bytes: int | None = None  # buddyinfo: free in blocks of 2 MiB or more
    largest_free_block_bytes: int | None = None


class FixResult(BaseModel):
    """What ``spark-ops fix G3 --json`` prints."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    action: str
    status: Literal["applied", "dry-run", "refused", "declined", "failed"]
    reason: str = ""
    command: str = ""
    before: MemSnapshot | None = None
    after: MemSnapshot | None = None
    duration_s: float | None = None
    notes: list[str] = Field(default_factory=list)
    exit_code: int = 0


def snapshot(root: Path = Path("/")) -> MemSnapshot:
    text = read_small(under_root(root, "/proc/meminfo"))
    m = parse_meminfo(text) if isinstance(text, str) else {}
    cache = None
    if "Cached" in m:
        cache = m["Cached"] + m.get("SReclaimable", 0) - m.get("Shmem", 0)
    s = summary(fragmentation.gather(root))
    return MemSnapshot(mem_free_bytes=m.get("MemFree"), mem_available_bytes=m.get("MemAvailable"),
                       page_cache_bytes=cache, free_large_bytes=s["free_large_bytes"] if s else None,
                       largest_free_block_bytes=s["largest_free_block_bytes"] if s else None)


def in_container(env: Mapping[str, str], root: Path, proc_sys: Path) -> str | None:
    """Why this looks like a container (None: it does not)."""
    from sparkops.probes import host

    try:
        if os.statvfs(proc_sys).f_flag & os.ST_RDONLY:
            return f"{proc_sys} is mounted read-only (a container)"
    except OSError:
        pass
    try:
        from sparkops.checks import container

        markers = container.classify(host.gather(env, root).container).markers
    except Exception:  # noqa: BLE001 - a probe surprise must not turn into a write
        return "could not tell whether this is a container"
    return f"container markers: {', '.join(markers[:3])}" if markers else None


def busy(kinds: Sequence[str], kb: Any) -> list[str]:
    """Training or serving processes now (the process scan's kinds), scanned and classified with ``kb``."""
    from sparkops.checks.processes import classify_all
    from sparkops.probes import CollectOptions, processes

    facts = processes.collect(CollectOptions(kb=kb))
    if not known(facts.processes):
        return []
    classes = classify_all(facts.processes, kb)  # type: ignore[arg-type]
    return [f"{p.name} (pid {p.pid}, {classes[p.pid].kind})" for p in facts.processes  # type: ignore[union-attr]
            if classes[p.pid].kind in kinds]


def fix_g3(action: Action = "drop-caches", *, apply: bool = False, yes: bool = False, force: bool = False,
           confirm: Callable[[str], bool] | None = None, env: Mapping[str, str] | None = None,
           root: Path = Path("/"), proc_sys: Path = Path("/proc/sys"), euid: int | None = None,
           busy_fn: Callable[[], list[str]] | None = None, container_fn: Callable[[], str | None] | None = None,
           kb: Any) -> FixResult:
    """Drop the page cache or compact memory now, if every guard allows it. ``kb``: the loaded knowledge."""
    if action not in WRITES:
        raise ValueError(f"unknown action {action!r}")
    env = dict(os.environ) if env is None else env
    rel, value = WRITES[action]
    res = FixResult(action=action, status="dry-run", command=SHELL[action], before=snapshot(root))
    if not apply:
        res.reason = "nothing changed: add --apply to run it (as root, on the host, between runs)"
        return res
    why = (container_fn or (lambda: in_container(env, root, proc_sys)))()
    if why:
        res.status, res.reason = "refused", f"inside a container ({why}): run it on the host: {SHELL[action]}"
        res.exit_code = 1
        return res
    if (os.geteuid() if euid is None else euid) != 0:
        res.status, res.reason = "refused", f"needs root: sudo spark-ops fix G3 --apply ({SHELL[action]})"
        res.exit_code = 1
        return res
    running = (busy_fn or (lambda: busy(kb.thresholds.bandwidth.neighbour_kinds, kb)))()
    if running and not force:
        res.status = "refused"
        res.reason = (f"a training or serving process is running ({'; '.join(running[:4])}): do it between runs; "
                      "--force to do it anyway")
        res.exit_code = 1
        return res
    if running:
        res.notes.append(f"--force overrode: running {'; '.join(running[:4])}")
    if not yes and not (confirm and confirm(f"Write {value} to {proc_sys / rel}?")):
        res.status, res.reason = "declined", "not confirmed: nothing changed"
        res.exit_code = 1
        return res
    t0 = time.monotonic()
    try:
        if action == "drop-caches":
            os.sync()  # dirty pages are written first, or they stay cached
        with open(proc_sys / rel, "w", encoding="ascii") as fh:
            fh.write(value)
    except OSError as exc:
        res.status, res.reason, res.exit_code = "failed", f"{proc_sys / rel}: {exc.strerror or exc}", 3
        return res
    res.duration_s = round(time.monotonic() - t0, 3)
    res.after = snapshot(root)
    res.status, res.reason = "applied", f"wrote {value} to {proc_sys / rel}"
    return res


def _gb(n: int | None) -> str:
    return "n/a" if n is None else f"{n / 1e9:.1f} GB"


def render(res: FixResult) -> str:
    lines = [f"fix G3 {res.action}: {res.status} — {res.reason}", f"  command: {res.command}"]
    rows = [("MemFree", "mem_free_bytes"), ("MemAvailable", "mem_available_bytes"), ("page cache", "page_cache_bytes"),
            ("free in blocks >= 2 MiB", "free_large_bytes")]
    for label, key in rows:
        b = getattr(res.before, key) if res.before else None
        a = getattr(res.after, key) if res.after else None
        lines.append(f"  {label:<24} {_gb(b):>10}" + (f" -> {_gb(a):>10}" if res.after else ""))
    lines += [f"  note: {n}" for n in res.notes]
    return "\n".join(lines) + "\n"
