"""``spark-ops thermal soak``: a bounded sustained load in the target interpreter, sampled alongside.

Order: refuse on a busy GPU or short memory (the bandwidth measurement's rules) unless forced;
start the sampler (fsynced CSV log, the same columns as ``thermal start``); sample a few idle
seconds; run ``_load_script.py`` in the target interpreter (its own session, so Ctrl-C reaches
only us and we stop it: SIGTERM, then SIGKILL after a grace period); sample a few seconds of
cool-down; then measure (:mod:`sparkops.soak.metrics`) and judge G4 with the watch's analyzer over
the loaded rows. ``--save-baseline`` writes the result; ``--compare`` sets it against one.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from sparkops.core.errors import InputError
from sparkops.monitor.csvlog import seconds, stamp
from sparkops.monitor.events import Event, Sample
from sparkops.soak import _load_script
from sparkops.soak.metrics import SoakMetrics, compare, compute

SCRIPT = Path(_load_script.__file__)
BASELINE_KIND = "sparkops-soak-baseline"


class SoakReport(BaseModel):
    """What ``spark-ops thermal soak --json`` prints (and ``--save-baseline`` writes)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    kind: str = BASELINE_KIND
    status: Literal["measured", "interrupted", "refused", "failed"]
    reason: str = ""
    started_at: str = ""
    python: str = ""
    device: str | None = None
    profile: str = "generic"
    matrix_n: int | None = None
    minutes_asked: float = 0.0
    log_path: str | None = None
    metrics: SoakMetrics | None = None
    verdict: list[str] = Field(default_factory=list)  # G4 (and G3/G6) lines from the watch's analyzer
    events: list[Event] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    baseline_path: str | None = None
    comparison: list[dict[str, Any]] | None = None
    exit_code: int = 0


def thresholds(kb: Any) -> dict[str, float]:
    return {k: float(v) for k, v in kb.thresholds.soak.model_dump().items()}


def _cap(kb: Any, gpu_name: str | None) -> tuple[float | None, str, str]:
    """(cap W, where it came from, analyzer profile) from the GPU's profile."""
    prof = kb.profile_for(gpu_name) if gpu_name else None
    if prof is None:
        return None, "no profile for this GPU", "generic"
    analyzer = "gb10" if prof.key == "gb10" else "generic"
    if prof.sustained_power_w:
        return float(prof.sustained_power_w), f"{prof.key} profile sustained_power_w", analyzer
    if prof.board_power_w:
        return float(prof.board_power_w), f"{prof.key} profile board_power_w", analyzer
    return None, f"{prof.key} profile has no power figure", analyzer


def load_baseline(path: Path) -> SoakReport:
    try:
        rep = SoakReport.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"--compare {path}: not a soak baseline ({str(exc)[:200]})") from exc
    if rep.metrics is None:
        raise InputError(f"--compare {path}: the baseline has no measurements (status {rep.status})")
    return rep


def _exit(rep: SoakReport) -> int:
    if rep.status == "failed":
        return 3
    if rep.status == "refused":
        return 1
    if rep.comparison and any(r["worse"] for r in rep.comparison):
        return 2
    return 1 if any(line.startswith("G4 warn") for line in rep.verdict) or rep.status == "interrupted" else 0


def _default_assess(python: str | None, env: Mapping[str, str], kb: Any) -> tuple[list[str], str | None]:
    """The bandwidth measurement's refusal rules (other GPU jobs, short memory) on a quick collection."""
    from sparkops.bandwidth import refusal
    from sparkops.bandwidth.report import COLLECT_PROBES
    from sparkops.probes import collect_snapshot, live_options

    opts = live_options(quick=True, python=python, offline=True, env=env, only=COLLECT_PROBES, kb=kb)
    facts = collect_snapshot(opts)
    a = refusal.assess(facts, kb, kb.thresholds.bandwidth, own_pids={os.getpid()})
    return list(a.reasons), None


class _Child:
    """The load process and what it said."""

    def __init__(self, argv: list[str], env: Mapping[str, str]) -> None:
        self.start: dict[str, Any] | None = None
        self.end: dict[str, Any] | None = None
        self.error: dict[str, Any] | None = None
        self.beats: list[tuple[float, float]] = []  # (epoch, TFLOPS)
        self.started = threading.Event()
        self.stderr_tail: list[str] = []
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,  # noqa: S603
                                     env=dict(env), start_new_session=True)
        self._threads = [threading.Thread(target=self._out, daemon=True),
                         threading.Thread(target=self._err, daemon=True)]
        for t in self._threads:
            t.start()

    def _out(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if not line.startswith(_load_script.MARKER):
                continue
            try:
                msg = json.loads(line[len(_load_script.MARKER):])
            except ValueError:
                continue
            ev = msg.get("event")
            if ev == "start":
                self.start = {**msg, "t": time.time()}
                self.started.set()
            elif ev == "beat" and isinstance(msg.get("tflops"), (int, float)):
                self.beats.append((time.time(), float(msg["tflops"])))
            elif ev == "end":
                self.end = {**msg, "t": time.time()}
            elif ev == "error":
                self.error = msg
                self.started.set()

    def _err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr_tail = (self.stderr_tail + [line.rstrip()])[-5:]

    def stop(self, grace_s: float) -> None:
        """SIGTERM to the load's session, SIGKILL after ``grace_s``; returns when it has exited."""
        if self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def join(self, timeout: float = 2.0) -> None:
        for t in self._threads:
            t.join(timeout)


def _rel(epoch: float | None, first_stamp: float | None) -> float | None:
    """An epoch on the rows' own clock (local time read as UTC, as :func:`csvlog.seconds`)."""
    if epoch is None or first_stamp is None:
        return None
    s = seconds(stamp(epoch))
    return None if s is None else s - first_stamp


def soak(minutes: float, python: str | None = None, *, force: bool = False, log_path: Path | None = None,
         interval_s: float | None = None, compare_path: Path | None = None, save_baseline: Path | None = None,
         env: Mapping[str, str] | None = None, kb: Any, sampler: Any = None,
         assess: Callable[[str | None, Mapping[str, str], Any], tuple[list[str], str | None]] | None = None,
         on_row: Callable[[Sample], None] | None = None) -> SoakReport:
    """Run the soak now against ``kb`` (the loaded knowledge). ``sampler``/``assess`` are injectable (tests);
    bad input raises InputError."""
    from sparkops.monitor import analyze
    from sparkops.monitor.sampler import Sampler, run_sampling
    from sparkops.probes import target_launch

    th = thresholds(kb)
    env = dict(os.environ) if env is None else dict(env)
    if not 0 < minutes <= th["max_minutes"]:
        raise InputError(f"--minutes {minutes:g}: give more than 0 and at most {th['max_minutes']:g}")
    base = load_baseline(compare_path) if compare_path else None
    exe, _why = target_launch.choose_interpreter(python, env)
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    rep = SoakReport(status="measured", started_at=started, python=exe, minutes_asked=minutes)
    reasons, _ = (assess or _default_assess)(python, env, kb)
    if reasons and not force:
        rep.status, rep.reason = "refused", "; ".join(reasons) + "; --force to run anyway"
        rep.exit_code = _exit(rep)
        return rep
    rep.notes += [f"--force overrode: {r}" for r in reasons]
    interval = float(interval_s if interval_s is not None else th["interval_s"])
    log = Path(log_path or f"soak-{datetime.now():%Y%m%d-%H%M%S}.csv")
    rep.log_path = str(log)
    rows: list[Sample] = []
    own_sampler = sampler is None
    sampler = sampler or Sampler(env)
    stop = threading.Event()

    def keep(row: Sample) -> None:
        rows.append(row)
        if on_row is not None:
            on_row(row)

    thread = threading.Thread(target=run_sampling, args=(log, interval, stop, sampler),
                              kwargs={"fsync": True, "on_row": keep}, daemon=True)
    thread.start()
    child: _Child | None = None
    try:
        time.sleep(th["preroll_s"])
        cfg = {"seconds": minutes * 60.0, "max_bytes": int(th["max_matrix_bytes"]), "chunk_s": 1.0}
        child = _Child([exe, str(SCRIPT), json.dumps(cfg)], env)
        if not child.started.wait(th["start_timeout_s"]) or child.error:
            child.stop(th["stop_grace_s"])
            child.join()
            err = child.error or {}
            tail = "; ".join(child.stderr_tail)
            rep.status = "failed"
            rep.reason = (f"{err.get('kind')}: {err.get('detail')}" if err else
                          f"the load did not start within {th['start_timeout_s']:g} s (exit {child.proc.poll()})"
                          + (f": {tail}" if tail else ""))
            return rep
        try:
            child.proc.wait(timeout=minutes * 60.0 + th["start_timeout_s"])
        except subprocess.TimeoutExpired:
            rep.notes.append("the load outlived its deadline: stopped")
            child.stop(th["stop_grace_s"])
        except KeyboardInterrupt:
            rep.status, rep.reason = "interrupted", "stopped by Ctrl-C: the load was stopped and its memory freed"
            child.stop(th["stop_grace_s"])
        child.join()
        with contextlib.suppress(KeyboardInterrupt):
            time.sleep(th["cooldown_s"])
    except KeyboardInterrupt:
        rep.status, rep.reason = "interrupted", "stopped by Ctrl-C before the load ran"
        if child is not None:
            child.stop(th["stop_grace_s"])
    finally:
        stop.set()
        thread.join(timeout=10)
        if own_sampler:
            with contextlib.suppress(Exception):
                sampler.close()
        rep.exit_code = _exit(rep)
    if child is None or child.start is None:
        return rep
    rep.device = child.start.get("device")
    rep.matrix_n = child.start.get("n")
    cap, cap_source, profile = _cap(kb, getattr(sampler, "gpu_name", None) or rep.device)
    rep.profile = profile
    first = next((seconds(r.get("timestamp")) for r in rows if seconds(r.get("timestamp")) is not None), None)
    end_epoch = (child.end or {}).get("t") or (child.beats[-1][0] if child.beats else None)
    start_rel, end_rel = _rel(child.start["t"], first), _rel(end_epoch, first)
    beats = [(r, tf) for t, tf in child.beats if (r := _rel(t, first)) is not None]
    rep.metrics = compute(rows, start_rel, end_rel, beats, cap, cap_source, th["ramp_fraction"])
    if start_rel is not None and end_rel is not None:
        loaded = [r for r in rows if (s := seconds(r.get("timestamp"))) is not None
                  and start_rel <= s - first <= end_rel]
        res = analyze.analyze(loaded, kb, profile)
        rep.verdict, rep.events, rep.notes = res.verdict, res.events, rep.notes + res.notes
    if base is not None and base.metrics is not None:
        rep.baseline_path = str(compare_path)
        rep.comparison = compare(rep.metrics, base.metrics, th)
        if base.device and rep.device and base.device != rep.device:
            rep.notes.append(f"baseline from another GPU model ({base.device}): differences are not a regression "
                             "of this box alone")
    rep.exit_code = _exit(rep)
    if save_baseline is not None:
        save_baseline.write_text(rep.model_dump_json(indent=2) + "\n", encoding="utf-8")
    return rep


def render(rep: SoakReport) -> str:
    m = rep.metrics

    def f(v: float | None, unit: str = "", d: int = 1) -> str:
        return "n/a" if v is None else f"{v:.{d}f}{unit}"

    lines = [f"thermal soak: {rep.status}" + (f" — {rep.reason}" if rep.reason else ""),
             f"  python {rep.python}; GPU {rep.device or 'n/a'}; matrix {rep.matrix_n or 'n/a'} bf16; "
             f"{rep.minutes_asked:g} min asked; log {rep.log_path or 'none'}"]
    if m is not None:
        lines += [
            f"  loaded {f(m.loaded_s, ' s', 0)} ({m.loaded_samples} samples); ramp-up {f(m.ramp_up_s, ' s')}",
            f"  power plateau {f(m.power_plateau_w, ' W')} vs cap {f(m.power_cap_w, ' W', 0)} "
            f"({m.power_cap_source}) = {f(None if m.plateau_vs_cap is None else 100 * m.plateau_vs_cap, ' %', 0)}",
            f"  SM clock median {f(m.clock_median_mhz, ' MHz', 0)}, CV {f(m.clock_cv_pct, ' %', 2)}; "
            f"throughput {f(m.tflops_median, ' TFLOPS')} (CV {f(m.tflops_cv_pct, ' %', 2)})",
            f"  temperature {f(m.temp_start_c, ' C', 0)} -> max {f(m.temp_max_c, ' C', 0)}, slope at steady state "
            f"{f(m.thermal_slope_c_per_min, ' C/min', 2)}",
            f"  reason bits seen {', '.join(m.reason_names) or 'none'}; violation counters grew "
            + (", ".join(f"{k} {v:g} us" for k, v in m.violation_growth_us.items()) or "n/a"),
        ]
    lines += [f"  {v}" for v in rep.verdict]
    for row in rep.comparison or []:
        flag = {True: "WORSE", False: "ok", None: "n/a"}[row["worse"]]
        lines.append(f"  vs baseline {row['metric']}: {row['now']} (was {row['baseline']}) {flag}")
    lines += [f"  note: {n}" for n in rep.notes]
    return "\n".join(lines) + "\n"
