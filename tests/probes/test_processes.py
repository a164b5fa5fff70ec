"""Process probe: the raw facts of the processes that may share the unified pool (G6). What they are
is judged by checks/processes.py (tests/checks/test_processes.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from sparkops.checks.processes import classify_all
from sparkops.facts.model import ProcessFacts
from sparkops.facts.reading import Unavailable, Why
from sparkops.knowledge import load as load_kb
from sparkops.probes import CollectOptions, processes
from sparkops.probes.processes import CMDLINE_MAX, scan

CAPS = load_kb().thresholds.g6.default_caps
WORDS = load_kb().thresholds.probes.process_record_words
GB = 1024**3


# --------------------------------------------------------------------------- scan (pure)
def _info(pid, name, cmdline, rss=0, status="sleeping", ppid=1):
    return {"pid": pid, "ppid": ppid, "name": name, "cmdline": cmdline, "status": status,
            "memory_info": SimpleNamespace(rss=rss)}


def test_scan_keeps_only_interesting_processes_and_redacts():
    infos = [
        _info(10, "systemd", ["/sbin/init"], rss=12 * 2**20),
        _info(400700, "vllm", ["/usr/bin/python3", "/usr/local/bin/vllm", "serve", "Qwen/Qwen3-8B",
                               "--gpu-memory-utilization", "0.5", "--api-key", "sk-abc123def456ghi789jkl012mno"],
              rss=2 * GB, ppid=1),
        _info(400721, "VLLM::EngineCor", ["VLLM::EngineCore"], rss=int(96581 * 2**20), ppid=400700),
        _info(500, "python3", ["python3", "big_numpy_job.py"], rss=6 * GB),
        _info(501, "kworker/u40:2", [], status="disk-sleep"),
        _info(502, "python3", ["python3", "small.py"], rss=1 * GB),
        _info(os.getpid(), "pytest", ["pytest"], rss=5 * GB),
        _info(503, "secret-holder", None),  # access denied: cmdline unreadable
        _info(504, "x", ["x", "--token", "ghp_" + "a" * 36] + ["pad"] * 200, rss=5 * GB),
    ]
    facts = scan(infos, own_pid=os.getpid(), heavy_bytes=4 * GB, words=WORDS)
    assert facts.scanned == 8 and facts.denied == 1 and not facts.truncated
    by_pid = {p.pid: p for p in facts.processes}
    assert set(by_pid) == {400700, 400721, 500, 501, 504}
    cls = classify_all(facts.processes)  # what they are is the checks' judgment, from the raw argv
    server, engine = by_pid[400700], by_pid[400721]
    assert (cls[400700].kind, cls[400700].fraction, cls[400700].cap_source) == ("vllm", 0.5, "cmdline")
    assert "sk-abc123" not in server.cmdline and "--api-key ***" in server.cmdline
    assert server.argv[-4:] == ["--gpu-memory-utilization", "0.5", "--api-key", "***"]  # raw, redacted
    # the engine child carries no flags: it inherits the parent's cap instead of the 0.9 default
    assert (cls[400721].kind, cls[400721].fraction, cls[400721].cap_source) == ("vllm", 0.5, "parent")
    assert engine.ppid == 400700 and engine.rss_bytes == int(96581 * 2**20)
    assert cls[500].kind == "other" and by_pid[500].rss_bytes == 6 * GB
    assert by_pid[501].state == "disk-sleep" and by_pid[501].cmdline == "kworker/u40:2"
    long = by_pid[504].cmdline
    assert len(long) == CMDLINE_MAX and "ghp_" + "a" * 20 not in long  # redacted before truncation
    assert "ghp_" + "a" * 20 not in " ".join(by_pid[504].argv) and len(by_pid[504].argv) == 128
    assert not any(hasattr(p, "kind") for p in facts.processes)  # raw facts: no judgment recorded


def test_scan_masks_secrets_argument_by_argument_before_joining():
    """A secret with a space in it is one argv entry: masked whole, not cut at the space by the join."""
    argv = ["/usr/bin/python3", "/usr/local/bin/vllm", "serve", "Qwen/Qwen3-8B", "--tokenizer",
            "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "4096", "--kv-cache-dtype", "fp8",
            "--password", "my secret", "--secret-key", "s3cr3tK3y", "--api-key=two words", "hf_token=abc123",
            "wandb_api_key=abc", "--gpu-memory-utilization", "0.5"]
    facts = scan([_info(7, "vllm", argv, rss=2 * GB)], own_pid=-1, heavy_bytes=4 * GB, words=WORDS)
    (p,) = facts.processes
    c = classify_all(facts.processes)[7]
    for secret in ("my secret", "secret", "s3cr3tK3y", "two words", "abc123", "=abc"):
        assert secret not in p.cmdline.replace("--secret-key", "")
    assert "--password *** --secret-key *** --api-key=*** hf_token=*** wandb_api_key=***" in p.cmdline
    # ordinary flags survive unchanged (--tokenizer is not --token)
    assert "--tokenizer meta-llama/Llama-3.1-8B-Instruct --max-model-len 4096 --kv-cache-dtype fp8" in p.cmdline
    assert (c.kind, c.fraction, c.cap_source) == ("vllm", 0.5, "cmdline")
    assert "my secret" not in p.argv and "s3cr3tK3y" not in p.argv


def test_engine_without_capped_parent_keeps_the_default():
    infos = [_info(1, "bash", ["bash"]), _info(2, "VLLM::EngineCor", ["VLLM::EngineCore"], ppid=1)]
    facts = scan(infos, own_pid=-1, heavy_bytes=4 * GB, words=WORDS)
    p = classify_all(facts.processes)[2]
    assert (p.fraction, p.cap_source) == (CAPS["vllm"], "default")


def test_scan_stops_at_its_deadline():
    infos = (_info(i, "vllm", ["vllm", "serve", "m"]) for i in range(100, 100000))
    facts = scan(infos, own_pid=-1, heavy_bytes=4 * GB, words=WORDS, deadline=time.monotonic() - 1)
    assert facts.truncated and facts.scanned == 0


# --------------------------------------------------------------------------- live
def test_live_scan_finds_a_real_vllm_looking_process(tmp_path: Path):
    fake = tmp_path / "vllm"
    fake.write_text("import time\ntime.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, str(fake), "serve", "Qwen/Qwen3-8B", "--gpu-memory-utilization",
                             "0.42", "--api-key", "sk-livetest0123456789abcdefghij"])
    try:
        deadline = time.monotonic() + 10
        found = None
        while time.monotonic() < deadline and found is None:
            facts = processes.collect(CollectOptions(env={}))
            assert isinstance(facts.processes, list)
            found = next((p for p in facts.processes if p.pid == proc.pid), None)
            if found is None:
                time.sleep(0.2)
        assert found is not None, "the fake vLLM server was not reported"
        c = classify_all(facts.processes)[found.pid]
        assert (c.kind, c.fraction, c.cap_source) == ("vllm", 0.42, "cmdline")
        assert "sk-livetest" not in found.cmdline
        assert all(p.pid != os.getpid() for p in facts.processes)
        ProcessFacts.model_validate(facts.model_dump(mode="json"))
    finally:
        proc.kill()
        proc.wait(timeout=5)


def test_unavailable_section():
    f = processes.unavailable(Why.timeout, "late")
    assert isinstance(f.processes, Unavailable) and f.processes.unavailable == Why.timeout


def _proc(pid, state, argv=(), rss=0):
    from sparkops.facts.model import HostProcess

    return HostProcess(pid=pid, name=f"p{pid}", argv=list(argv), state=state, rss_bytes=rss)


def test_disk_sleep_is_only_stuck_if_it_lasts():
    from sparkops.facts.model import ProcessFacts
    from sparkops.probes.processes import recheck_disk_sleep

    gib = 1024**3
    facts = ProcessFacts(processes=[
        _proc(1, "disk-sleep"),                       # small, left D: dropped (momentary I/O)
        _proc(2, "disk-sleep", rss=10 * gib),        # heavy, left D: kept, state updated
        _proc(3, "disk-sleep", argv=["vllm", "serve"]),  # a server, still D: kept as stuck
        _proc(4, "running", argv=["vllm", "serve"]),
    ], scanned=4)
    now = {1: "sleeping", 2: "running", 3: "disk-sleep"}
    slept = []
    out = recheck_disk_sleep(facts, 0.3, now.get, heavy_bytes=4 * gib, words=WORDS, sleep=slept.append)
    assert slept == [0.3]
    assert [(p.pid, p.state) for p in out.processes] == [(2, "running"), (3, "disk-sleep"), (4, "running")]


def test_no_disk_sleep_means_no_wait():
    from sparkops.facts.model import ProcessFacts
    from sparkops.probes.processes import recheck_disk_sleep

    slept = []
    facts = ProcessFacts(processes=[_proc(4, "running", argv=["vllm", "serve"])])
    assert recheck_disk_sleep(facts, 0.3, lambda pid: None, 1, sleep=slept.append) == facts
    assert slept == []


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=700), st.sampled_from(["--api-key", "sk-" + "a" * 40, "--gpu-memory-utilization",
                                                                  "0.5", "ghp_" + "b" * 36]), st.none(), st.integers()),
                max_size=300),
       st.text(max_size=30), st.integers(0, 8 * GB), st.sampled_from(["running", "sleeping", "disk-sleep", ""]))
def test_scan_records_any_process_bounded_and_never_raises(argv, name, rss, status):
    facts = scan([{"pid": 7, "ppid": 1, "name": name, "cmdline": argv, "status": status, "exe": "/usr/bin/x",
                   "memory_info": SimpleNamespace(rss=rss)}], own_pid=-1, heavy_bytes=4 * GB, words=WORDS)
    assert facts.scanned == 1
    for p in facts.processes:
        assert len(p.argv) <= 128 and all(len(a) <= 512 for a in p.argv) and len(p.cmdline) <= CMDLINE_MAX
        assert not any(("sk-" + "a" * 20) in a or ("ghp_" + "b" * 20) in a for a in p.argv)
        assert p.exe == "/usr/bin/x"
    kept = rss > 4 * GB or status == "disk-sleep" or processes.wanted(name, [a for a in argv if isinstance(a, str)], WORDS)
    assert len(facts.processes) == int(kept)
