"""Processes that may share the one memory pool (G6): raw facts only, no judgment.

The psutil scan is bounded by time, skips processes that vanish or deny access, and records a
process when it is big (``g6.heavy_neighbour_gb``), in uninterruptible sleep, or when its name or
command line holds one of the words of ``probes.process_record_words`` (a wide net: "vllm",
"train", "ollama"...). What a recorded process *is* (server, trainer, its memory cap) is decided by
:mod:`sparkops.checks.processes` when the snapshot is judged, so a replay uses today's knowledge.
Command lines are redacted argument by argument before anything is cut (a cut token would slip
past the patterns).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sparkops.facts.model import HostProcess, ProcessFacts
from sparkops.facts.reading import Why, missing
from sparkops.facts.redact import redact_argv, redact_text
from sparkops.knowledge import load as load_kb

SECTION = "processes"

CMDLINE_MAX = 300  # the display text
ARGV_MAX_ARGS = 128  # the raw argv the checks read: a vLLM command line has a few dozen
ARGV_MAX_CHARS = 512  # per argument, after redaction


def recorded_argv(argv: Sequence[Any]) -> list[str]:
    """The argv as a snapshot keeps it: strings only, redacted whole, then bounded."""
    return [a[:ARGV_MAX_CHARS] for a in redact_argv([a for a in argv if isinstance(a, str)])[:ARGV_MAX_ARGS]]


def wanted(name: str, argv: Sequence[str], words: Iterable[str]) -> bool:
    """The recording rule's word test: one of ``words`` (lower case) in the name or the command line."""
    text = (name + "\0" + "\0".join(a for a in argv if isinstance(a, str))).lower()
    return any(w in text for w in words)


def scan(infos: Iterable[Mapping[str, Any]], own_pid: int, heavy_bytes: int, words: Iterable[str],
         deadline: float | None = None) -> ProcessFacts:
    """Pick the processes worth recording out of psutil-style info dicts (pure apart from the clock)."""
    kept: list[HostProcess] = []
    scanned = denied = 0
    truncated = False
    words = tuple(w.lower() for w in words)
    for info in infos:
        if deadline is not None and time.monotonic() > deadline:
            truncated = True
            break
        pid = info.get("pid")
        if not isinstance(pid, int) or pid == own_pid:
            continue
        scanned += 1
        name = info.get("name") or ""
        argv = info.get("cmdline")
        if argv is None:
            denied += 1
            argv = []
        mem = info.get("memory_info")
        rss = int(getattr(mem, "rss", 0) or 0)
        state = info.get("status") or ""
        if state != "disk-sleep" and rss <= heavy_bytes and not wanted(str(name), argv, words):
            continue
        # argument by argument first (a secret with spaces is masked whole), then the joined text
        raw = recorded_argv(argv)
        text = redact_text(" ".join(redact_argv([a for a in argv if isinstance(a, str)])) or name)
        ppid, exe = info.get("ppid"), info.get("exe")
        kept.append(HostProcess(pid=pid, name=str(name)[:100], exe=exe[:ARGV_MAX_CHARS] if isinstance(exe, str) else "",
                                cmdline=text[:CMDLINE_MAX], argv=raw, rss_bytes=rss, state=str(state),
                                ppid=ppid if isinstance(ppid, int) else None))
    return ProcessFacts(processes=kept, scanned=scanned, denied=denied, truncated=truncated)


def collect(opts) -> ProcessFacts:
    """The process section for the runner (live psutil scan)."""
    import psutil

    kb = opts.knowledge()
    heavy = int(kb.thresholds.g6.heavy_neighbour_gb * 1024**3)
    deadline = time.monotonic() + kb.thresholds.probes.subprocess_timeout_s
    words = tuple(kb.thresholds.probes.process_record_words)
    attrs = ["pid", "ppid", "name", "exe", "cmdline", "status", "memory_info"]
    try:
        infos = (p.info for p in psutil.process_iter(attrs, ad_value=None))
        facts = scan(infos, os.getpid(), heavy, words, deadline)
    except (psutil.Error, OSError) as exc:
        return unavailable(Why.error, f"process scan failed: {exc}")
    return recheck_disk_sleep(facts, kb.thresholds.g6.dstate_recheck_s, _status_of, heavy, words)


def _status_of(pid: int) -> str | None:
    import psutil

    try:
        return psutil.Process(pid).status()
    except (psutil.Error, OSError):
        return None


def recheck_disk_sleep(facts: ProcessFacts, wait_s: float, status_of, heavy_bytes: int,  # noqa: ANN001
                       words: Iterable[str] | None = None, sleep=time.sleep) -> ProcessFacts:  # noqa: ANN001
    """A process caught in D state may just be waiting on a disk read. Look again after ``wait_s``:
    only one still in D is recorded as stuck; one that only made the list for its D state and has
    left it is dropped."""
    procs = facts.processes
    if not isinstance(procs, list) or not any(p.state == "disk-sleep" for p in procs):
        return facts
    sleep(wait_s)
    words = tuple(w.lower() for w in (words if words is not None else load_kb().thresholds.probes.process_record_words))
    kept: list[HostProcess] = []
    for p in procs:
        if p.state == "disk-sleep":
            now = status_of(p.pid)
            if now != "disk-sleep":
                argv = p.argv if isinstance(p.argv, list) else p.cmdline.split()
                if p.rss_bytes <= heavy_bytes and not wanted(p.name, argv, words):
                    continue
                p = p.model_copy(update={"state": now or "gone"})
        kept.append(p)
    return facts.model_copy(update={"processes": kept})


def unavailable(why: Why, detail: str) -> ProcessFacts:
    return ProcessFacts(processes=missing(why, detail))
