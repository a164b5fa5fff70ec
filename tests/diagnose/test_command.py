"""`spark-ops diagnose` end to end, as a user and a script see it: stdin, files, JSON, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import FIXTURES

OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
ABI = "ImportError: libcudart.so.12: cannot open shared object file: No such file or directory\n"
PLAIN = "epoch 1 loss 0.9\nepoch 2 loss 0.7\n"


def spark_ops(*args: str, stdin: bytes | None = None, timeout: float = 60):
    return subprocess.run([sys.executable, "-m", "sparkops", "diagnose", *args], input=stdin,
                          capture_output=True, timeout=timeout, env=dict(os.environ))


def as_json(p) -> list[dict]:
    assert p.returncode in (0, 1), p.stderr.decode()
    return json.loads(p.stdout)


def test_stdin_without_a_file_and_with_dash():
    for args in ((), ("-",)):
        p = spark_ops(*args, "--json", stdin=ABI.encode())
        assert p.returncode == 1
        out = as_json(p)
        assert len(out) == 1 and out[0]["file"] == "-"
        assert out[0]["findings"][0]["gotcha"] == "G1"


def test_json_one_object_per_file_in_input_order(tmp_path):
    files = []
    for name, text in (("c.log", PLAIN), ("a.log", OOM), ("b.log", ABI)):
        (tmp_path / name).write_text(text)
        files.append(str(tmp_path / name))
    out = as_json(spark_ops(*files, "--json"))
    assert [d["file"] for d in out] == files
    assert [d["findings"][0]["gotcha"] if d["findings"] else "none" for d in out] == ["none", "G3", "G1"]
    f = out[1]["findings"][0]
    assert set(f) == {"gotcha", "confidence", "title", "evidence", "why", "fix", "facts"}
    assert f["evidence"][0] == {"line": 1, "text": OOM.strip(), "why": f["evidence"][0]["why"]}
    assert 0 < f["confidence"] <= 1 and out[0]["findings"] == []


def test_exit_codes_none_findings_unreadable(tmp_path):
    plain = tmp_path / "plain.log"
    plain.write_text(PLAIN)
    assert spark_ops(str(plain)).returncode == 0
    p = spark_ops(str(plain), stdin=None)
    assert b"none of the ten" in p.stdout
    bad = tmp_path / "missing.log"
    oom = tmp_path / "oom.log"
    oom.write_text(OOM)
    p = spark_ops(str(oom), str(bad), "--json")
    assert p.returncode == 3
    assert str(bad).encode() in p.stderr and b"no such file" in p.stderr
    out = json.loads(p.stdout)  # the readable input is still diagnosed
    assert out[0]["findings"][0]["gotcha"] == "G3" and out[1]["error"]


def test_readable_output_names_the_gotcha_line_and_fix(tmp_path):
    f = tmp_path / "crash.log"
    f.write_text("starting\n" + ABI)
    p = spark_ops(str(f))
    text = p.stdout.decode()
    assert p.returncode == 1
    assert "G1  CUDA 12/13 ABI mismatch" in text and "line 2: ImportError: libcudart.so.12" in text
    assert "fix: Reinstall torch from the cu130 index" in text


def test_top_limits_findings(tmp_path):
    f = tmp_path / "mixed.log"
    f.write_text(ABI + OOM + "ImportError: Found version 0.13.0, but only versions above 0.16.0 are supported\n")
    assert len(as_json(spark_ops(str(f), "--json"))[0]["findings"]) >= 3
    assert len(as_json(spark_ops(str(f), "--json", "--top", "1"))[0]["findings"]) == 1


def test_facts_file_confirms(tmp_path):
    f = tmp_path / "crash.log"
    f.write_text("RuntimeError: CUDA error: no kernel image is available for execution on the device\n")
    out = as_json(spark_ops(str(f), "--json", "--facts", str(FIXTURES / "facts" / "gb10_bare_pip_cu128.json")))
    facts = out[0]["findings"][0]["facts"]
    assert [(x["fact"], x["effect"]) for x in facts] == [("G1.wheel-cuda12", "confirms")] and "12.8" in facts[0]["value"]


def test_bad_facts_file_and_conflicting_options_exit_3(tmp_path):
    junk = tmp_path / "facts.json"
    junk.write_text("not json")
    p = spark_ops("--facts", str(junk), stdin=ABI.encode())
    assert p.returncode == 3 and b"not JSON" in p.stderr
    p = spark_ops("--facts", str(FIXTURES / "facts" / "no_gpu.json"), "--live", stdin=ABI.encode())
    assert p.returncode == 3


def test_binary_garbage_file(tmp_path):
    f = tmp_path / "core"
    f.write_bytes(bytes(range(256)) * 400)
    p = spark_ops(str(f), "--json")
    assert p.returncode == 3  # binary input is said to be binary, not diagnosed (issue 17)
    out = json.loads(p.stdout)
    assert "looks binary" in out[0]["error"] and not out[0]["findings"]


def test_live_collects_quick_facts(monkeypatch, capsys):
    """--live goes through sparkops.api.collect (quick depth); replaced here by a recorded machine."""
    from conftest import load_facts_fixture
    from sparkops import api, cli

    seen = {}

    def fake_collect(opts=None, also_import=()):
        seen["depth"] = opts.depth
        return load_facts_fixture("gb10_bare_pip_cu128")

    monkeypatch.setattr(api, "collect", fake_collect)
    monkeypatch.setattr(sys, "stdin", type("S", (), {"buffer": __import__("io").BytesIO(
        b"RuntimeError: CUDA error: no kernel image is available for execution on the device\n")})())
    with pytest.raises(SystemExit) as exc:
        cli.main(["diagnose", "--live", "--json"])
    assert exc.value.code == 1 and seen["depth"] == "quick"
    out = json.loads(capsys.readouterr().out)
    assert out[0]["findings"][0]["facts"][0]["effect"] == "confirms"


def test_the_library_api_diagnoses_with_a_snapshot_path():
    from pathlib import Path

    from sparkops import api

    snap = Path(__file__).parents[1] / "fixtures" / "facts" / "gb10_page_cache.json"
    d = api.diagnose("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", source="t.log",
                     facts=snap)
    assert d.top == "G3" and d.model_dump(mode="json")["file"] == "t.log"
    assert api.diagnose("all good, training finished").top == "none"
