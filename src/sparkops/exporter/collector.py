"""Prometheus metrics for one Spark, gathered per scrape with a bound on each part.

Parts: host memory (/proc/meminfo, PSI), free memory by block size (/proc/buddyinfo), the GPU (one
row of the watch sampler: temperature, power, SM clock, clock-event reason bits, violation
counters, compute processes), known engines from the process table with their memory caps, and
the last preflight's verdict and per-check status from an env-report.json. A part that fails or
runs out of time is reported by ``sparkops_exporter_part_up{part=...} 0``, never by a failed
scrape. Units are Prometheus base units (bytes, seconds, hertz, celsius, watts).
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sparkops.monitor.analyze import number, processes, reasons
from sparkops.soak.metrics import REASON_NAMES

PART_TIMEOUT_S = 4.0  # one part of one scrape; Prometheus' default scrape timeout is 10 s
PROCESS_TTL_S = 15.0  # the process table is scanned at most this often


def _g(name: str, doc: str, labels: list[str] | None = None, unit: str = "") -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=labels, unit=unit)


def memory_metrics(root: Path) -> list[Metric]:
    from sparkops.monitor.sampler import read_memory
    from sparkops.probes.host import read_small, under_root
    from sparkops.probes.memory import parse_psi

    mem = read_memory(root)
    g = _g("sparkops_memory", "Host (unified) memory from /proc/meminfo", ["kind"], "bytes")
    for kind, col in (("free", "mem.free [B]"), ("available", "mem.available [B]"), ("cached", "mem.cached [B]"),
                      ("swap_used", "swap.used [B]")):
        if mem.get(col) is not None:
            g.add_metric([kind], float(mem[col]))
    out: list[Metric] = [g]
    text = read_small(under_root(root, "/proc/pressure/memory"))
    if isinstance(text, str):
        psi = parse_psi(text)
        if not hasattr(psi, "unavailable"):
            p = _g("sparkops_memory_pressure_avg10_percent", "PSI memory stall share over 10 s", ["scope"])
            p.add_metric(["some"], psi.some_avg10)
            p.add_metric(["full"], psi.full_avg10)
            out.append(p)
    return out


def buddy_metrics(root: Path) -> list[Metric]:
    from sparkops.checks.g03_fragmentation import summary
    from sparkops.probes import fragmentation

    s = summary(fragmentation.gather(root))
    if s is None:
        return []
    g = _g("sparkops_buddy_free", "Free memory the buddy allocator holds, all blocks and large blocks (>= 2 MiB)",
           ["blocks"], "bytes")
    g.add_metric(["all"], float(s["free_bytes"]))
    g.add_metric(["large"], float(s["free_large_bytes"]))
    big = _g("sparkops_buddy_largest_free_block", "Largest free contiguous block", unit="bytes")
    big.add_metric([], float(s["largest_free_block_bytes"]))
    return [g, big]


def gpu_metrics(sampler: Any) -> list[Metric]:
    row = sampler.sample()
    out: list[Metric] = []
    for name, col, doc, scale in (
            ("sparkops_gpu_temperature_celsius", "temperature.gpu", "GPU temperature", 1.0),
            ("sparkops_gpu_power_watts", "power.draw [W]", "GPU power draw", 1.0),
            ("sparkops_gpu_sm_clock_hertz", "clocks.sm [MHz]", "SM clock", 1e6),
            ("sparkops_gpu_utilization_percent", "utilization.gpu [%]", "GPU utilisation", 1.0)):
        v = number(row.get(col))
        if v is not None:
            g = _g(name, doc)
            g.add_metric([], v * scale)
            out.append(g)
    bits = reasons(row.get("clocks_event_reasons.active"))
    if bits is not None:
        mask = _g("sparkops_gpu_clock_event_reasons", "Clock-event reason bitmask (nvidia-smi clocks_event_reasons)")
        mask.add_metric([], float(bits))
        active = _g("sparkops_gpu_clock_event_reason_active", "One clock-event reason bit", ["reason"])
        for bit, rname in REASON_NAMES.items():
            active.add_metric([rname], 1.0 if bits & bit else 0.0)
        out += [mask, active]
    viol = CounterMetricFamily("sparkops_gpu_violation", "Cumulative time clocks were held back, per cause",
                               labels=["counter"], unit="seconds")
    seen = False
    for c in ("sw_power_cap", "sw_thermal", "hw_thermal"):
        v = number(row.get(f"violation.{c} [us]"))
        if v is not None:
            viol.add_metric([c], v / 1e6)
            seen = True
    if seen:
        out.append(viol)
    procs = processes(row.get("gpu.processes"))
    if procs:
        g = _g("sparkops_gpu_process_memory", "GPU memory of a compute process (NVML)", ["pid", "name"], "bytes")
        for pid, (pname, size) in procs.items():
            g.add_metric([str(pid), pname[:60]], float(size))
        out.append(g)
    return out


def engine_metrics(scan: Callable[[], Any]) -> list[Metric]:
    facts = scan()
    procs = getattr(facts, "processes", None)
    if not isinstance(procs, list):
        return []
    from sparkops.checks.processes import classify_all

    classes = classify_all(procs)
    rss = _g("sparkops_engine_resident_memory", "Resident memory of a known engine or trainer", ["pid", "kind", "name"],
             "bytes")
    cap = _g("sparkops_engine_memory_cap_ratio", "A server's memory cap as a share of the pool "
             "(--gpu-memory-utilization and the like; default when not given)", ["pid", "kind", "name", "source"])
    for p in procs:
        c = classes[p.pid]
        if c.kind == "other":
            continue
        labels = [str(p.pid), c.kind, p.name[:60]]
        rss.add_metric(labels, float(p.rss_bytes))
        if c.fraction is not None:
            cap.add_metric([*labels, c.cap_source or ""], float(c.fraction))
    return [rss, cap]


def preflight_metrics(report_path: Path) -> list[Metric]:
    try:
        rep = json.loads(report_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    verdict = _g("sparkops_preflight_verdict", "The last preflight's verdict (1 for the one it gave)", ["verdict"])
    for v in ("ready", "ready-with-warnings", "blocked"):
        verdict.add_metric([v], 1.0 if rep.get("verdict") == v else 0.0)
    checks = _g("sparkops_preflight_check", "The last preflight's status per check (1 for the status it has)",
                ["check", "status"])
    for cid, text in sorted((rep.get("checks") or {}).items()):
        status = str(text).split(":", 1)[0].strip() or "unknown"
        checks.add_metric([cid, status], 1.0)
    out: list[Metric] = [verdict, checks]
    ts = rep.get("generated_at")
    if isinstance(ts, str):
        from datetime import datetime

        try:
            t = _g("sparkops_preflight_generated_timestamp", "When the last preflight report was written",
                   unit="seconds")
            t.add_metric([], datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp())
            out.append(t)
        except ValueError:
            pass
    return out


class SparkCollector(Collector):
    """Gathers every part on each scrape, each under ``part_timeout_s`` on a worker thread."""

    def __init__(self, *, root: Path = Path("/"), sampler: Any = None, report_path: Path | None = None,
                 process_scan: Callable[[], Any] | None = None, part_timeout_s: float = PART_TIMEOUT_S) -> None:
        self.root = root
        self.sampler = sampler
        self.report_path = report_path
        self.part_timeout_s = part_timeout_s
        self._scan = process_scan
        self._procs: tuple[float, Any] | None = None
        self._pool = cf.ThreadPoolExecutor(max_workers=4, thread_name_prefix="sparkops-exporter")
        self._lock = threading.Lock()  # one scrape at a time: parts share the sampler

    def _engines(self) -> Any:
        now = time.monotonic()
        if self._procs is None or now - self._procs[0] > PROCESS_TTL_S:
            if self._scan is not None:
                facts = self._scan()
            else:
                from sparkops.probes import CollectOptions
                from sparkops.probes import processes as proc_probe

                facts = proc_probe.collect(CollectOptions())  # the packaged bounds (heavy, deadline, D-state recheck)
            self._procs = (now, facts)
        return self._procs[1]

    def parts(self) -> dict[str, Callable[[], list[Metric]]]:
        parts: dict[str, Callable[[], list[Metric]]] = {
            "memory": lambda: memory_metrics(self.root),
            "buddyinfo": lambda: buddy_metrics(self.root),
            "engines": lambda: engine_metrics(self._engines),
        }
        if self.sampler is not None:
            parts["gpu"] = lambda: gpu_metrics(self.sampler)
        if self.report_path is not None:
            parts["preflight"] = lambda: preflight_metrics(self.report_path)
        return parts

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            t0 = time.monotonic()
            up = _g("sparkops_exporter_part_up", "1 when this part of the scrape was gathered in time", ["part"])
            futures = {name: self._pool.submit(fn) for name, fn in self.parts().items()}
            deadline = t0 + self.part_timeout_s
            for name, fut in futures.items():
                try:
                    metrics = fut.result(timeout=max(0.0, deadline - time.monotonic()))
                except Exception:  # noqa: BLE001 - a failing part costs that part, never the scrape
                    up.add_metric([name], 0.0)
                    continue
                up.add_metric([name], 1.0)
                yield from metrics
            yield up
            d = _g("sparkops_exporter_scrape_duration_seconds", "Time this scrape took to gather")
            d.add_metric([], time.monotonic() - t0)
            yield d
