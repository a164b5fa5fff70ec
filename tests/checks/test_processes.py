"""Process classification (checks/processes.py): what a recorded process is and its memory cap (G6)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from build_fixtures import patch
from sparkops.checks import CHECKS, context, judge
from sparkops.checks.base import Status
from sparkops.checks.processes import classify, classify_all
from sparkops.facts.model import FACTS_SCHEMA_VERSION, Facts, HostProcess, migrate
from sparkops.facts.reading import Unavailable
from sparkops.facts.snapshot import load_facts
from sparkops.facts.workload import Workload
from sparkops.knowledge import load as load_kb

CAPS = load_kb().thresholds.g6.default_caps


CASES = [
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
]


@pytest.mark.parametrize(("name", "cmdline", "kind", "fraction", "source"), CASES)
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




def test_the_probe_records_every_process_the_classifier_recognises():
    """The probe's recording rule (probes.process_record_words) is a superset of this classifier: a
    small server the probe dropped could never be judged."""
    from sparkops.probes.processes import wanted

    words = load_kb().thresholds.probes.process_record_words
    recognised = [(name, cmdline) for name, cmdline, kind, _, _ in CASES if kind != "other"]
    assert len(recognised) >= 20
    for name, cmdline in recognised:
        assert wanted(name, cmdline, words), (name, cmdline)


# --------------------------------------------------------------------------- classify_all, snapshots old and new
def _raw_v2(facts):
    """The recorded vLLM box as schema 2 records it: the front's argv (the same 300 characters here, which
    hold the whole command) and the engine child's setproctitle name, no collect-time judgment."""
    procs = []
    for p in facts.processes.processes:
        argv = p.cmdline.split() if p.name == "vllm" else ["VLLM::EngineCore"]
        procs.append(p.model_copy(update={"argv": argv, "v1_class": None}).model_dump())
    return patch(facts, {"processes.processes": procs})


def _kb_with(**g6):
    return load_kb().with_thresholds("g6", **g6)


def test_a_schema_1_snapshot_is_migrated_on_load_keeping_its_recorded_verdict():
    path = Path(__file__).parents[1] / "fixtures" / "facts" / "gb10_vllm_default.json"
    assert json.loads(path.read_text())["schema_version"] == 1
    facts = load_facts(path)
    assert facts.schema_version == FACTS_SCHEMA_VERSION and "snapshot" not in facts.probes
    front = facts.processes.processes[0]
    assert front.v1_class is not None and front.v1_class.kind == "vllm"
    assert isinstance(front.argv, Unavailable) and "schema-1 snapshot" in front.argv.detail
    cls = classify_all(facts.processes.processes)
    assert {(c.kind, c.fraction, c.cap_source) for c in cls.values()} == {("vllm", CAPS["vllm"], "default")}


def test_an_old_snapshot_and_the_same_machine_recorded_raw_judge_alike():
    old = load_facts(Path(__file__).parents[1] / "fixtures" / "facts" / "gb10_vllm_default.json")
    new = _raw_v2(old)
    ko, kn = (CHECKS["G6"].check(context(f, load_kb())) for f in (old, new))
    assert ko.status is kn.status is Status.warn
    assert (ko.code, ko.summary, ko.notes) == (kn.code, kn.summary, kn.notes)
    old_j, new_j = judge(old, load_kb(), Workload()), judge(new, load_kb(), Workload())
    assert [(f.gotcha, f.status, f.summary) for f in old_j.findings] == [(f.gotcha, f.status, f.summary)
                                                                         for f in new_j.findings]
    assert old_j.verdict == new_j.verdict


def test_a_raw_snapshot_is_judged_with_the_knowledge_of_the_day():
    """Schema 2 keeps the argv, so a changed rule in knowledge re-judges a recorded snapshot."""
    facts = _raw_v2(load_facts(Path(__file__).parents[1] / "fixtures" / "facts" / "gb10_vllm_default.json"))
    today = CHECKS["G6"].check(context(facts, load_kb()))
    assert today.status is Status.warn and today.code == "G6.uncapped-server"
    # vLLM's default cap as a newer knowledge base might state it
    lower = CHECKS["G6"].check(context(facts, _kb_with(default_caps={**CAPS, "vllm": 0.5})))
    assert lower.status is Status.passed and any("capped at 0.5 (default" in n for n in lower.notes)
    # a cap flag the knowledge did not know when the snapshot was taken
    procs = [p.model_copy(update={"argv": [*p.argv, "--kv-cache-share", "0.4"]}).model_dump() if p.name == "vllm"
             else p.model_dump() for p in facts.processes.processes]
    flagged = patch(facts, {"processes.processes": procs})
    assert CHECKS["G6"].check(context(flagged, load_kb())).code == "G6.uncapped-server"
    flags = {**load_kb().thresholds.g6.cap_flags, "vllm": ["gpu_memory_utilization", "kv_cache_share"]}
    known_flag = CHECKS["G6"].check(context(flagged, _kb_with(cap_flags=flags)))
    assert known_flag.status is Status.passed
    assert any("capped at 0.4 (parent)" in n and "400721" in n for n in known_flag.notes), known_flag.notes


def test_a_schema_1_default_cap_follows_todays_knowledge_but_an_explicit_one_stays():
    facts = load_facts(Path(__file__).parents[1] / "fixtures" / "facts" / "gb10_vllm_default.json")
    kb = _kb_with(default_caps={**CAPS, "vllm": 0.5})
    assert {c.fraction for c in classify_all(facts.processes.processes, kb).values()} == {0.5}
    explicit = [p.model_copy(update={"v1_class": p.v1_class.model_copy(update={
        "memory_fraction": 0.7, "memory_cap_source": "cmdline"})}) for p in facts.processes.processes]
    assert {(c.fraction, c.cap_source) for c in classify_all(explicit, kb).values()} == {(0.7, "cmdline")}


def test_migration_leaves_other_snapshots_and_its_input_alone():
    raw = json.loads((Path(__file__).parents[1] / "fixtures" / "facts" / "gb10_vllm_default.json").read_text())
    before = copy.deepcopy(raw)
    migrated = migrate(raw)
    assert raw == before and migrated["schema_version"] == FACTS_SCHEMA_VERSION
    assert all("kind" not in p and "v1_class" in p for p in migrated["processes"]["processes"])
    assert migrate(migrated) is migrated  # a schema-2 document passes through
    assert migrate([1]) == [1]


def test_a_schema_2_process_with_schema_1_fields_is_refused():
    facts = load_facts(Path(__file__).parents[1] / "fixtures" / "facts" / "gb10_vllm_default.json")
    data = facts.model_dump(mode="json")
    data["processes"]["processes"][0]["kind"] = "vllm"
    with pytest.raises(ValidationError):
        Facts.model_validate(data)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.fixed_dictionaries({
    "pid": st.integers(1, 40), "ppid": st.one_of(st.none(), st.integers(1, 40)),
    "name": st.sampled_from(["vllm", "VLLM::EngineCore", "python3", "sglang::scheduler", ""]),
    "argv": st.lists(st.sampled_from(VOCAB), max_size=8)}), max_size=12, unique_by=lambda d: d["pid"]))
def test_classify_all_never_crashes_and_only_lends_explicit_caps(rows):
    procs = [HostProcess(**r) for r in rows]
    cls = classify_all(procs)
    assert set(cls) == {p.pid for p in procs}
    for c in cls.values():
        assert c.fraction is None or 0 < c.fraction <= 1
        assert c.cap_source in ("", "cmdline", "default", "parent")


@pytest.mark.parametrize(("name", "kind"), [("VLLM::EngineCore", "vllm"), ("/usr/local/bin/ollama", "ollama"),
                                            ("llama-server", "llama.cpp"), ("tensorrt_llm worker", "trtllm"),
                                            ("/usr/lib/xorg/Xorg", "other"), ("", "other")])
def test_a_gpu_process_known_only_by_name(name, kind):
    from sparkops.checks.processes import kind_from_name

    assert kind_from_name(name) == kind
