"""Process probe: classifying neighbours in the unified pool and reading their memory caps (G6)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkops.facts.model import ProcessFacts
from sparkops.facts.reading import Unavailable, Why
from sparkops.knowledge import load as load_kb
from sparkops.probes import CollectOptions, processes
from sparkops.probes.processes import CMDLINE_MAX, classify, scan

CAPS = load_kb().thresholds.g6.default_caps
GB = 1024**3


@pytest.mark.parametrize(
    ("name", "cmdline", "kind", "fraction", "source"),
    [
        # vLLM: CLI entry point (a python script on PATH), module form, engine child, trl's vllm-serve
        ("vllm", ["/usr/bin/python3", "/usr/local/bin/vllm", "serve", "Qwen/Qwen3-30B-A3B-FP8",
                  "--gpu-memory-utilization", "0.85", "--max-model-len", "32768"], "vllm", 0.85, "cmdline"),
        ("python3", ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "x",
                     "--gpu_memory_utilization=0.5"], "vllm", 0.5, "cmdline"),
        ("vllm", ["/opt/venv/bin/python", "/opt/venv/bin/vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct"],
         "vllm", CAPS["vllm"], "default"),
        ("VLLM::EngineCor", ["VLLM::EngineCore"], "vllm", CAPS["vllm"], "default"),
        ("trl", ["/usr/bin/python3", "/usr/local/bin/trl", "vllm-serve", "--model", "Qwen/Qwen2.5-7B",
                 "--gpu_memory_utilization", "0.3"], "vllm", 0.3, "cmdline"),
        ("vllm", ["vllm", "serve", "x", "--gpu-memory-utilization", "7"], "vllm", CAPS["vllm"], "default"),
        # SGLang
        ("python", ["python", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen3-8B",
                    "--mem-fraction-static", "0.8", "--port", "30000"], "sglang", 0.8, "cmdline"),
        ("sglang::schedul", ["sglang::scheduler_TP0"], "sglang", CAPS["sglang"], "default"),
        # servers without a fraction
        ("ollama", ["/usr/local/bin/ollama", "serve"], "ollama", None, ""),
        ("ollama", ["/usr/local/bin/ollama", "runner", "--model", "/root/.ollama/models/blobs/sha256-x",
                    "--port", "41835"], "ollama", None, ""),
        ("llama-server", ["/opt/llama.cpp/build/bin/llama-server", "-m", "gpt-oss-20b.gguf", "-ngl", "99",
                          "--port", "8080"], "llama.cpp", None, ""),
        ("python3", ["python3", "-m", "llama_cpp.server", "--model", "m.gguf"], "llama.cpp", None, ""),
        # TGI, TensorRT-LLM, ComfyUI
        ("text-generation", ["text-generation-launcher", "--model-id", "x", "--cuda-memory-fraction", "0.6"],
         "tgi", 0.6, "cmdline"),
        ("text-generation", ["text-generation-launcher", "--model-id", "x"], "tgi", CAPS["tgi"], "default"),
        ("trtllm-serve", ["/usr/bin/python", "/usr/local/bin/trtllm-serve", "nvidia/Llama-3.1-8B-FP4",
                          "--kv_cache_free_gpu_memory_fraction", "0.7"], "trtllm", 0.7, "cmdline"),
        ("python", ["python", "/home/spark/ComfyUI/main.py", "--listen", "0.0.0.0"], "comfyui", None, ""),
        ("comfy", ["/usr/bin/python3", "/home/spark/.local/bin/comfy", "launch", "--", "--listen"],
         "comfyui", None, ""),
        # trainers
        ("torchrun", ["/usr/bin/python3", "/usr/local/bin/torchrun", "--nnodes", "2", "train_fsdp.py"],
         "trainer", None, ""),
        ("accelerate", ["/usr/bin/python3", "/usr/local/bin/accelerate", "launch", "-m", "axolotl.cli.train",
                        "cfg.yml"], "trainer", None, ""),
        ("python", ["python", "-u", "train_lora.py", "--epochs", "1"], "trainer", None, ""),
        ("python", ["python", "/workspace/unsloth/unsloth-cli.py", "--model_name", "x"], "trainer", None, ""),
        ("python3", ["python3", "finetune_qwen.py"], "trainer", None, ""),
        ("trl", ["/usr/bin/python3", "/usr/local/bin/trl", "sft", "--model_name_or_path", "x"], "trainer", None, ""),
        ("python3", ["uv", "run", "--with", "trl", "python", "sft_gemma.py"], "trainer", None, ""),
        ("nohup", ["nohup", "python3", "-m", "torch.distributed.run", "--nproc_per_node", "1", "t.py"],
         "trainer", None, ""),
        # not interesting
        ("python3", ["python3", "constrained_decoding.py"], "other", None, ""),
        ("bash", ["bash", "-c", "sleep 5"], "other", None, ""),
        ("vim", ["vim", "train.py"], "other", None, ""),
        ("python3", ["python3", "-m", "http.server"], "other", None, ""),
        ("ollama-exporter", ["/usr/bin/ollama-exporter"], "other", None, ""),
        ("", [], "other", None, ""),
    ],
)
def test_classify_real_looking_cmdlines(name, cmdline, kind, fraction, source):
    assert classify(name, cmdline, CAPS) == (kind, fraction, source)


def test_classify_accepts_a_single_string_and_setproctitle_argv0():
    assert classify("vllm", "vllm serve x --gpu-memory-utilization 0.4", CAPS) == ("vllm", 0.4, "cmdline")
    assert classify("vllm", ["vllm serve x --gpu-memory-utilization 0.4"], CAPS)[0] == "vllm"


def test_classify_uses_the_knowledge_base_defaults():
    assert classify("vllm", ["vllm", "serve", "x"]) == ("vllm", load_kb().thresholds.g6.default_caps["vllm"], "default")


VOCAB = ["python", "python3.12", "-m", "-c", "-X", "-W", "-u", "uv", "uvx", "run", "--with", "pipx", "conda", "-n",
         "nohup", "env", "A=1", "nice", "-n", "vllm", "serve", "vllm-serve", "trl", "sft", "sglang.launch_server",
         "vllm.entrypoints.openai.api_server", "--gpu-memory-utilization", "--gpu_memory_utilization=0.5",
         "--mem-fraction-static", "0.8", "nan", "inf", "-1", "1e400", "VLLM::EngineCore", "sglang::x",
         "accelerate", "launch", "torchrun", "train.py", "/x/ComfyUI/main.py", "comfy", "trtllm-serve",
         "--kv_cache_free_gpu_memory_fraction", "text-generation-launcher", "--cuda-memory-fraction", ""]


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.text(max_size=30), st.sampled_from(VOCAB)),
       st.lists(st.one_of(st.sampled_from(VOCAB), st.text(max_size=40)), max_size=12))
def test_classify_never_crashes(name, argv):
    kind, fraction, source = classify(name, argv, CAPS)
    assert isinstance(kind, str)
    assert fraction is None or 0 < fraction <= 1
    assert source in ("", "cmdline", "default")


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["--gpu-memory-utilization", "--gpu_memory_utilization"]),
       st.floats(0.01, 1.0, allow_nan=False), st.booleans())
def test_vllm_fraction_any_spelling(flag, value, with_equals):
    args = [f"{flag}={value!r}"] if with_equals else [flag, repr(value)]
    assert classify("vllm", ["vllm", "serve", "m", *args], CAPS) == ("vllm", value, "cmdline")


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
    facts = scan(infos, own_pid=os.getpid(), heavy_bytes=4 * GB, default_caps=CAPS)
    assert facts.scanned == 8 and facts.denied == 1 and not facts.truncated
    by_pid = {p.pid: p for p in facts.processes}
    assert set(by_pid) == {400700, 400721, 500, 501, 504}
    server, engine = by_pid[400700], by_pid[400721]
    assert (server.kind, server.memory_fraction, server.memory_cap_source) == ("vllm", 0.5, "cmdline")
    assert "sk-abc123" not in server.cmdline and "--api-key ***" in server.cmdline
    # the engine child carries no flags: it inherits the parent's cap instead of the 0.9 default
    assert (engine.kind, engine.memory_fraction, engine.memory_cap_source) == ("vllm", 0.5, "parent")
    assert engine.ppid == 400700 and engine.rss_bytes == int(96581 * 2**20)
    assert by_pid[500].kind == "other" and by_pid[500].rss_bytes == 6 * GB
    assert by_pid[501].state == "disk-sleep" and by_pid[501].cmdline == "kworker/u40:2"
    long = by_pid[504].cmdline
    assert len(long) == CMDLINE_MAX and "ghp_" + "a" * 20 not in long  # redacted before truncation


def test_scan_masks_secrets_argument_by_argument_before_joining():
    """A secret with a space in it is one argv entry: masked whole, not cut at the space by the join."""
    argv = ["/usr/bin/python3", "/usr/local/bin/vllm", "serve", "Qwen/Qwen3-8B", "--tokenizer",
            "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "4096", "--kv-cache-dtype", "fp8",
            "--password", "my secret", "--secret-key", "s3cr3tK3y", "--api-key=two words", "hf_token=abc123",
            "wandb_api_key=abc", "--gpu-memory-utilization", "0.5"]
    facts = scan([_info(7, "vllm", argv, rss=2 * GB)], own_pid=-1, heavy_bytes=4 * GB, default_caps=CAPS)
    (p,) = facts.processes
    for secret in ("my secret", "secret", "s3cr3tK3y", "two words", "abc123", "=abc"):
        assert secret not in p.cmdline.replace("--secret-key", "")
    assert "--password *** --secret-key *** --api-key=*** hf_token=*** wandb_api_key=***" in p.cmdline
    # ordinary flags survive unchanged (--tokenizer is not --token)
    assert "--tokenizer meta-llama/Llama-3.1-8B-Instruct --max-model-len 4096 --kv-cache-dtype fp8" in p.cmdline
    assert (p.kind, p.memory_fraction, p.memory_cap_source) == ("vllm", 0.5, "cmdline")


def test_engine_without_capped_parent_keeps_the_default():
    infos = [_info(1, "bash", ["bash"]), _info(2, "VLLM::EngineCor", ["VLLM::EngineCore"], ppid=1)]
    p = scan(infos, own_pid=-1, heavy_bytes=4 * GB, default_caps=CAPS).processes[0]
    assert (p.memory_fraction, p.memory_cap_source) == (CAPS["vllm"], "default")


def test_scan_stops_at_its_deadline():
    infos = (_info(i, "vllm", ["vllm", "serve", "m"]) for i in range(100, 100000))
    facts = scan(infos, own_pid=-1, heavy_bytes=4 * GB, default_caps=CAPS, deadline=time.monotonic() - 1)
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
        assert (found.kind, found.memory_fraction, found.memory_cap_source) == ("vllm", 0.42, "cmdline")
        assert "sk-livetest" not in found.cmdline
        assert all(p.pid != os.getpid() for p in facts.processes)
        ProcessFacts.model_validate(facts.model_dump(mode="json"))
    finally:
        proc.kill()
        proc.wait(timeout=5)


def test_unavailable_section():
    f = processes.unavailable(Why.timeout, "late")
    assert isinstance(f.processes, Unavailable) and f.processes.unavailable == Why.timeout


def _proc(pid, state, kind="other", rss=0):
    from sparkops.facts.model import HostProcess

    return HostProcess(pid=pid, name=f"p{pid}", kind=kind, state=state, rss_bytes=rss)


def test_disk_sleep_is_only_stuck_if_it_lasts():
    from sparkops.facts.model import ProcessFacts
    from sparkops.probes.processes import recheck_disk_sleep

    gib = 1024**3
    facts = ProcessFacts(processes=[
        _proc(1, "disk-sleep"),                       # small, left D: dropped (momentary I/O)
        _proc(2, "disk-sleep", rss=10 * gib),        # heavy, left D: kept, state updated
        _proc(3, "disk-sleep", kind="vllm"),         # a server, still D: kept as stuck
        _proc(4, "running", kind="vllm"),
    ], scanned=4)
    now = {1: "sleeping", 2: "running", 3: "disk-sleep"}
    slept = []
    out = recheck_disk_sleep(facts, 0.3, now.get, heavy_bytes=4 * gib, sleep=slept.append)
    assert slept == [0.3]
    assert [(p.pid, p.state) for p in out.processes] == [(2, "running"), (3, "disk-sleep"), (4, "running")]


def test_no_disk_sleep_means_no_wait():
    from sparkops.facts.model import ProcessFacts
    from sparkops.probes.processes import recheck_disk_sleep

    slept = []
    facts = ProcessFacts(processes=[_proc(4, "running", kind="vllm")])
    assert recheck_disk_sleep(facts, 0.3, lambda pid: None, 1, sleep=slept.append) == facts
    assert slept == []
