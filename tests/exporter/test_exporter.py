"""exporter: the metrics from recorded readings, the per-part bound, loopback, and a REAL Prometheus
scraping it (Debian's `prometheus` package; CI installs it via .ci/install-prometheus.sh)."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sparkops.exporter import serve
from sparkops.exporter.collector import SparkCollector
from sparkops.monitor.csvlog import read_log, stamp

TESTS = Path(__file__).parents[1]
THERMAL = TESTS / "fixtures" / "raw" / "thermal"
RAW = TESTS / "fixtures" / "raw" / "buddyinfo"
README = TESTS.parent / "README.md"


class ReplaySampler:
    """NVML cannot run here: one recorded row (the device's H200 soak, loaded) per sample."""

    def __init__(self, row: int = 60) -> None:
        rows, _ = read_log((THERMAL / "h200_soak_20261203.csv").read_text())
        self.row = dict(rows[row], timestamp=stamp())

    def sample(self):
        return dict(self.row)


@pytest.fixture
def root(tmp_path):
    r = tmp_path / "root"
    (r / "proc" / "self").mkdir(parents=True)
    (r / "proc" / "meminfo").write_text((RAW / "h200-device.meminfo").read_text())
    (r / "proc" / "buddyinfo").write_text((RAW / "h200-device.buddyinfo").read_text())
    (r / "proc" / "self" / "smaps").write_text("KernelPageSize:        4 kB\n")
    return r


@pytest.fixture
def report(tmp_path):
    p = tmp_path / "env-report.json"
    p.write_text(json.dumps({"verdict": "ready-with-warnings", "generated_at": "2026-12-03T11:00:00+00:00",
                             "checks": {"G1": "pass", "G3": "warn: page cache 9 GB", "G4": "skip: no load"}}))
    return p


def _samples(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _registry(root, report, **kw):
    return serve.registry(report, gpu=False, sampler=ReplaySampler(), root=root,
                          process_scan=lambda: type("P", (), {"processes": []})(), **kw)


def test_metrics_from_recorded_readings(root, report):
    got = _samples(serve.once(_registry(root, report)))
    mem_kb = {ln.split(":")[0]: int(ln.split()[1]) for ln in (RAW / "h200-device.meminfo").read_text().splitlines()}
    assert got[("sparkops_memory_bytes", (("kind", "available"),))] == mem_kb["MemAvailable"] * 1024
    row = ReplaySampler().row
    assert got[("sparkops_gpu_sm_clock_hertz", ())] == row["clocks.sm [MHz]"] * 1e6
    assert got[("sparkops_gpu_power_watts", ())] == row["power.draw [W]"]
    assert got[("sparkops_gpu_clock_event_reason_active", (("reason", "SwPowerCap"),))] == 1.0
    assert got[("sparkops_gpu_clock_event_reason_active", (("reason", "SwThermalSlowdown"),))] == 0.0
    assert got[("sparkops_gpu_violation_seconds_total", (("counter", "sw_power_cap"),))] == \
        pytest.approx(row["violation.sw_power_cap [us]"] / 1e6)
    assert got[("sparkops_preflight_verdict", (("verdict", "ready-with-warnings"),))] == 1.0
    assert got[("sparkops_preflight_check", (("check", "G3"), ("status", "warn")))] == 1.0
    assert got[("sparkops_buddy_free_bytes", (("blocks", "large"),))] <= got[("sparkops_buddy_free_bytes",
                                                                            (("blocks", "all"),))]
    assert all(v == 1.0 for (n, _), v in got.items() if n == "sparkops_exporter_part_up")


def test_a_slow_part_is_reported_down_and_the_scrape_stays_bounded(root, report):
    reg = _registry(root, report, part_timeout_s=0.5)
    collector = next(iter(reg._collector_to_names))  # the one SparkCollector
    assert isinstance(collector, SparkCollector)
    slow = type("S", (), {"sample": lambda self: time.sleep(3) or {}})()
    collector.sampler = slow
    t0 = time.monotonic()
    got = _samples(serve.once(reg))
    assert time.monotonic() - t0 < 2.5
    assert got[("sparkops_exporter_part_up", (("part", "gpu"),))] == 0.0
    assert got[("sparkops_exporter_part_up", (("part", "memory"),))] == 1.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_binds_to_loopback_by_default(root, report):
    server, thread = serve.serve(_registry(root, report), _free_port())
    try:
        assert server.server_address[0] == "127.0.0.1"
        body = urllib.request.urlopen(f"http://127.0.0.1:{server.server_address[1]}/metrics", timeout=10).read()
        assert b"sparkops_memory_bytes" in body
    finally:
        server.shutdown()
        server.server_close()


def _need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        if os.environ.get("SPARKOPS_REQUIRE_PROMETHEUS") == "1":
            pytest.fail(f"{tool} not found although CI requires it (.ci/install-prometheus.sh)")
        pytest.skip(f"{tool} not installed (Debian package `prometheus`)")
    return path


def _readme_block(name: str) -> str:
    m = re.search(rf"<!-- {name}:start -->\n```yaml\n(.*?)```\n<!-- {name}:end -->", README.read_text(), re.S)
    assert m, f"README has no {name} block"
    return m.group(1)


def test_readme_alert_rules_pass_promtool(tmp_path):
    promtool = _need("promtool")
    (tmp_path / "rules.yml").write_text(_readme_block("alert-rules"))
    p = subprocess.run([promtool, "check", "rules", str(tmp_path / "rules.yml")], capture_output=True, text=True,
                       timeout=60, check=False)
    assert p.returncode == 0 and "3 rules found" in p.stdout + p.stderr, p.stdout + p.stderr
    (tmp_path / "prom.yml").write_text(_readme_block("scrape-config"))
    c = subprocess.run([promtool, "check", "config", str(tmp_path / "prom.yml")], capture_output=True, text=True,
                       timeout=60, check=False)
    assert c.returncode == 0, c.stdout + c.stderr


def _query(base: str, q: str) -> list[dict]:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": q})
    with urllib.request.urlopen(url, timeout=5) as r:
        body = json.load(r)
    assert body["status"] == "success"
    return body["data"]["result"]


def test_real_prometheus_scrapes_the_exporter(root, report, tmp_path):
    prometheus = _need("prometheus")
    server, _thread = serve.serve(_registry(root, report), _free_port())
    port = server.server_address[1]
    web = _free_port()
    rules = tmp_path / "rules.yml"
    rules.write_text(_readme_block("alert-rules"))
    (tmp_path / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"rule_files: [{json.dumps(str(rules))}]\n"
        "scrape_configs:\n  - job_name: sparkops\n    scrape_interval: 1s\n    scrape_timeout: 1s\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{port}']}}]\n")
    proc = subprocess.Popen([prometheus, f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{web}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    base = f"http://127.0.0.1:{web}"
    try:
        deadline = time.monotonic() + 60
        found: list[dict] = []
        while time.monotonic() < deadline:
            try:
                found = _query(base, 'sparkops_gpu_sm_clock_hertz{job="sparkops"}')
                if found:
                    break
            except OSError:
                pass
            if proc.poll() is not None:
                pytest.fail(f"prometheus exited: {proc.stderr.read().decode()[-2000:]}")
            time.sleep(0.5)
        assert found, "Prometheus never stored a sparkops series"
        assert float(found[0]["value"][1]) == ReplaySampler().row["clocks.sm [MHz]"] * 1e6
        assert _query(base, 'up{job="sparkops"}')[0]["value"][1] == "1"
        kinds = {r["metric"]["kind"] for r in _query(base, "sparkops_memory_bytes")}
        assert {"free", "available", "cached"} <= kinds
        checks = {r["metric"]["check"] for r in _query(base, "sparkops_preflight_check")}
        assert checks == {"G1", "G3", "G4"}
        with urllib.request.urlopen(f"{base}/api/v1/rules", timeout=5) as r:
            names = {rule["name"] for g in json.load(r)["data"]["groups"] for rule in g["rules"]}
        assert names == {"SparkThermalThrottling", "SparkMemoryPressure", "SparkLowClockState"}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
        server.shutdown()
        server.server_close()
