"""The CLI end to end, as a user and a script see it: exit codes, files written, formats.

Run as real subprocesses (``python -m sparkops``) so exit codes and stdout are the real ones.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import FIXTURES
from sparkops.report.schemas import SCHEMAS

GOTCHAS = [f"G{i}" for i in range(1, 11)]
LINE = re.compile(r"^G(10|[1-9]) (PASS|FAIL|WARN|SKIP|INFO|UNKNOWN): \S")
SCENARIOS = {  # fixture -> (exit code, platform)
    "gb10_ngc_2509_healthy": (0, "dgx-spark"),
    "gb10_bare_pip_cu128": (2, "dgx-spark"),
    "gb10_page_cache": (1, "dgx-spark"),
    "gb10_vllm_default": (1, "dgx-spark"),
    "gb10_two_node_tp2": (2, "dgx-spark"),
    "h200_generic": (None, "nvidia"),
    "no_gpu": (2, "none"),
}


def spark_ops(*args: str, env: dict | None = None, timeout: float = 120, cwd: Path | None = None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "sparkops", *args], capture_output=True, text=True,
                          env=e, timeout=timeout, cwd=cwd)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_replayed_scenarios_exit_codes_and_report(tmp_path, name):
    code, platform = SCENARIOS[name]
    rep = tmp_path / "env-report.json"
    p = spark_ops("preflight", "--facts", str(FIXTURES / "facts" / f"{name}.json"), "--report", str(rep))
    assert p.returncode in (0, 1, 2), p.stderr
    if code is not None:
        assert p.returncode == code, p.stdout
    data = json.loads(rep.read_text())
    assert data["platform"] == platform
    assert sorted(data["checks"]) == sorted(GOTCHAS)
    assert {0: "ready", 1: "ready-with-warnings", 2: "blocked"}[p.returncode] == data["verdict"]
    for v in data["checks"].values():
        assert re.match(r"^(pass|(fail|warn|skip|info|unknown): .+)$", v), v
    assert p.stdout.lstrip().startswith("Verdict:")
    if data["verdict"] == "blocked":  # fixes of failing gotchas come before the per-check table
        assert p.stdout.index("Blocking") < p.stdout.index("check")


def test_lines_format_is_the_grep_contract(tmp_path):
    p = spark_ops("preflight", "--facts", str(FIXTURES / "facts" / "gb10_bare_pip_cu128.json"),
                  "--format", "lines", "--report", str(tmp_path / "r.json"))
    lines = p.stdout.splitlines()
    assert [ln.split()[0] for ln in lines] == ["identity", *GOTCHAS, "verdict"]
    assert all(LINE.match(ln) for ln in lines[1:-1]), lines
    assert re.match(r"^identity (PASS|FAIL|WARN|SKIP|INFO|UNKNOWN): \S", lines[0]), lines[0]
    assert any(ln.startswith("G1 FAIL: ") for ln in lines)
    assert lines[-1].startswith("verdict BLOCKED: fix first: ") and "G1" in lines[-1], lines[-1]
    assert p.returncode == 2


def test_json_output_equals_the_written_report(tmp_path):
    rep = tmp_path / "r.json"
    p = spark_ops("preflight", "--facts", str(FIXTURES / "facts" / "gb10_page_cache.json"), "--json",
                  "--report", str(rep))
    out, written = json.loads(p.stdout), json.loads(rep.read_text())
    out.pop("generated_at"), written.pop("generated_at")
    assert out == written
    assert [f["gotcha"] for f in out["findings"]] == ["identity", *GOTCHAS]


def test_workload_is_recorded_and_feeds_checks(tmp_path):
    rep = tmp_path / "r.json"
    spark_ops("preflight", "--facts", str(FIXTURES / "facts" / "gb10_ngc_2509_healthy.json"),
              "--workload", "nvfp4 inference vllm tp 2 on 2 sparks", "--report", str(rep))
    data = json.loads(rep.read_text())
    assert data["workload"]["precision"] == "nvfp4"
    assert data["workload"]["nodes"] == 2
    assert data["checks"]["G10"].startswith("warn: serving with tensor parallel 2")  # serving: a trade-off
    assert data["checks"]["G7"].startswith("warn")
    assert data["verdict"] == "ready-with-warnings"


def test_peak_that_does_not_fit_blocks(tmp_path):
    rep = tmp_path / "r.json"
    p = spark_ops("preflight", "--facts", str(FIXTURES / "facts" / "gb10_ngc_2509_healthy.json"),
                  "--peak-gb", "500", "--report", str(rep))
    assert p.returncode == 2
    assert json.loads(rep.read_text())["checks"]["G3"].startswith("fail")


@pytest.mark.parametrize("args", [
    ["preflight", "--format", "xml"],
    ["preflight", "--no-such-flag"],
    ["explain", "G42"],
    ["schema", "nothing"],
])
def test_bad_usage_exits_3(tmp_path, args):
    p = spark_ops(*args, "--report", str(tmp_path / "r.json")) if args[0] == "preflight" else spark_ops(*args)
    assert p.returncode == 3, (p.stdout, p.stderr)
    assert "Traceback" not in p.stderr


def test_unreadable_snapshot_exits_3_without_traceback(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    p = spark_ops("preflight", "--facts", str(bad), "--report", str(tmp_path / "r.json"))
    assert p.returncode == 3
    assert "not JSON" in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "r.json").exists()


def test_explain_prints_the_catalog_entry():
    p = spark_ops("explain", "g3")
    assert p.returncode == 0
    assert p.stdout.startswith("G3 — Unified-memory OOM")
    assert "drop_caches" in p.stdout and "Last verified: 2026-07-14" in p.stdout


@pytest.mark.parametrize("name", list(SCHEMAS))  # facts, report, plan, serve, diagnosis, bandwidth, fleet, ...
def test_schema_is_printed_and_matches_the_checked_in_copy(name):
    """`spark-ops schema NAME` prints the checked-in contract (without loading pydantic), so the
    checked-in copy must be what the models define today."""
    from sparkops.report.schemas import json_schema

    checked_in = Path(__file__).parents[1] / "src" / "sparkops" / "report" / "schema" / f"{name}.schema.json"
    assert json_schema(name) == json.loads(checked_in.read_text()), (
        f"the {name} schema changed: review the contract, then regenerate with "
        f"`SPARKOPS_NO_FAST=1 python -m sparkops schema {name} > {checked_in}`")
    p = spark_ops("schema", name)
    assert p.returncode == 0
    assert p.stdout == checked_in.read_text()


def test_schema_from_the_models_prints_the_same_text(tmp_path):
    """The typer path (the models' schema, the regeneration command) and the fast path agree byte for byte."""
    fast, slow = spark_ops("schema", "report"), spark_ops("schema", "report", env={"SPARKOPS_NO_FAST": "1"})
    assert fast.returncode == slow.returncode == 0
    assert fast.stdout == slow.stdout


def test_live_preflight_on_a_cpu_box_is_blocked_and_replays(tmp_path):
    """On this GPU-less machine: platform none, exit 2, every G present; collect + replay agree."""
    if Path("/dev/nvidia0").exists():
        pytest.skip("this machine has a GPU")
    rep = tmp_path / "env-report.json"
    p = spark_ops("preflight", "--offline", "--config", str(tmp_path), "--report", str(rep), cwd=tmp_path)
    assert p.returncode == 2, p.stdout + p.stderr
    live = json.loads(rep.read_text())
    assert live["platform"] == "none" and live["verdict"] == "blocked"
    assert sorted(live["checks"]) == sorted(GOTCHAS)
    snap = tmp_path / "facts.json"
    assert spark_ops("collect", "-o", str(snap), "--offline", "--config", str(tmp_path)).returncode == 0
    rep2 = tmp_path / "replay.json"
    p2 = spark_ops("preflight", "--facts", str(snap), "--report", str(rep2))
    assert p2.returncode == 2
    replay = json.loads(rep2.read_text())
    assert replay["verdict"] == live["verdict"] and replay["platform"] == live["platform"]
    assert {k: v.split(":")[0] for k, v in replay["checks"].items()} == \
           {k: v.split(":")[0] for k, v in live["checks"].items()}


def _fake_path(tmp_path: Path, nvidia_smi: str) -> dict:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "nvidia-smi").symlink_to(FIXTURES / "bin" / nvidia_smi)
    return {"PATH": f"{bindir}:{os.environ['PATH']}", "SPARKOPS_NO_NVML": "1"}


@pytest.mark.parametrize("fake", ["nvidia-smi-hang", "nvidia-smi-crash", "nvidia-smi-garbage"])
def test_hostile_nvidia_smi_still_gives_a_bounded_honest_verdict(tmp_path, fake):
    env = _fake_path(tmp_path, fake)
    rep = tmp_path / "r.json"
    t0 = time.monotonic()
    p = spark_ops("preflight", "--quick", "--offline", "--config", str(tmp_path), "--report", str(rep), env=env)
    elapsed = time.monotonic() - t0
    assert p.returncode == 2, p.stdout + p.stderr
    assert "Traceback" not in p.stderr
    data = json.loads(rep.read_text())
    assert data["platform"] == "none"
    ident = data["findings"][0]
    assert ident["status"] == "fail"
    assert elapsed < 60


@pytest.mark.parametrize("live,expect", [("segfault", "signal"), ("hang", "did not finish")])
def test_target_python_that_dies_or_hangs_on_import_torch(tmp_path, live, expect):
    from fakeenv import make_fake_env

    py = make_fake_env(tmp_path / "env", {"torch": "2.11.0+cu130"}, torch_version="2.11.0+cu130",
                       torch_cuda="13.0", live=live)
    env = _fake_path(tmp_path, "nvidia-smi-gb10")
    rep = tmp_path / "r.json"
    t0 = time.monotonic()
    p = spark_ops("preflight", "--python", str(py), "--offline", "--budget", "6", "--config", str(tmp_path),
                  "--report", str(rep), env=env)
    assert time.monotonic() - t0 < 30
    assert p.returncode in (1, 2), p.stdout + p.stderr
    assert "Traceback" not in p.stderr
    data = json.loads(rep.read_text())
    g1 = next(f for f in data["findings"] if f["gotcha"] == "G1")
    assert g1["status"] in ("fail", "unknown")
    assert expect in json.dumps(g1).lower()


def test_triage_gpu_on_snapshots():
    p = spark_ops("triage", "gpu", "--facts", str(FIXTURES / "facts" / "no_gpu.json"), "--json")
    assert p.returncode == 2, p.stderr
    res = json.loads(p.stdout)
    assert res["fired"] == 1 and res["fix"].startswith("Restart the container")
    assert [h["status"] for h in res["hypotheses"]] == ["fired"] + ["not reached"] * 4
    ok = spark_ops("triage", "gpu", "--facts", str(FIXTURES / "facts" / "h200_device_recorded.json"))
    assert ok.returncode == 0 and ok.stdout.startswith("torch sees the GPU")
    assert "not checked" not in ok.stdout  # every hypothesis decided on a healthy GPU host


def test_triage_gpu_live_never_crashes(tmp_path):
    p = spark_ops("triage", "gpu", cwd=tmp_path)
    assert p.returncode in (0, 1, 2) and "Traceback" not in p.stderr


def test_stack_on_snapshots():
    p = spark_ops("stack", "--facts", str(FIXTURES / "facts" / "gb10_torchao_013.json"), "--json")
    assert p.returncode == 2, p.stderr
    res = json.loads(p.stdout)
    rows = {r["package"]: r for r in res["packages"]}
    assert rows["torchao"]["status"] == "off-matrix" and rows["peft"]["status"] == "match"
    assert res["G9"]["status"] == "fail" and res["matrix"]["last_verified"] == "2026-07-14"
    ok = spark_ops("stack", "--facts", str(FIXTURES / "facts" / "gb10_ngc_2509_healthy.json"))
    assert ok.returncode == 0 and "G9 PASS" in ok.stdout


def test_stack_on_a_fake_env_with_newer_majors(tmp_path):
    from fakeenv import make_fake_env

    py = make_fake_env(tmp_path / "env", {"transformers": "6.0.0", "peft": "0.19.1", "trl": "1.8.0"},
                       torch_version="2.11.0+cu130", torch_cuda="13.0")
    p = spark_ops("stack", "--python", str(py), "--json", cwd=tmp_path)
    assert p.returncode in (1, 2), p.stdout + p.stderr
    rows = {r["package"]: r for r in json.loads(p.stdout)["packages"]}
    assert rows["transformers"]["status"] == "newer-major" and rows["trl"]["status"] == "match"
    assert rows["unsloth"]["status"] == "not-installed"


def test_a_bad_matrix_file_is_a_plain_usage_error(tmp_path):
    bad = tmp_path / "m.yaml"
    bad.write_text("matrix:\n  version: one\n")
    p = spark_ops("preflight", "--facts", str(FIXTURES / "facts" / "no_gpu.json"), "--matrix", str(bad),
                  "--report", str(tmp_path / "r.json"))
    assert p.returncode == 3 and "matrix." in p.stderr and "internal error" not in p.stderr


def test_a_newer_matrix_file_replaces_the_packaged_one(tmp_path):
    from sparkops.knowledge import __file__ as kfile

    text = (Path(kfile).parent / "stack_matrix.yaml").read_text()
    newer = tmp_path / "matrix.yaml"
    newer.write_text(text.replace("last_verified: 2026-07-14", "last_verified: 2026-11-30")
                     .replace('version: 5.13.1', 'version: 5.14.0'))
    args = ["stack", "--facts", str(FIXTURES / "facts" / "gb10_ngc_2509_healthy.json"), "--json"]
    base = json.loads(spark_ops(*args).stdout)
    over = json.loads(spark_ops(*args, "--matrix", str(newer)).stdout)
    assert base["matrix"]["last_verified"] == "2026-07-14" and over["matrix"]["last_verified"] == "2026-11-30"
    assert {r["package"]: r["verified"] for r in over["packages"]}["transformers"] == "5.14.0"


def test_the_readme_run_command_from_the_checkout_does_not_fail_g10(tmp_path):
    """Issue 15: the README's first command, run from the repository root (default G10 scope: the
    working directory's own config files), must not block on this repository's prose, source,
    fixtures or the tool's own env-report.json."""
    repo = Path(__file__).parents[1]
    report = tmp_path / "env-report.json"
    p = spark_ops("preflight", "--python", sys.executable, "--quick", "--offline", "--report", str(report),
                  cwd=repo)
    assert p.returncode in (0, 1, 2), p.stderr
    g10 = next(f for f in json.loads(report.read_text())["findings"] if f["gotcha"] == "G10")
    assert g10["status"] == "pass" and g10["code"] == "G10.no-tp", g10["summary"]
    assert "the working directory's own files" in g10["detail"]
