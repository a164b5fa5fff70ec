"""The matcher: each gotcha, each context rule both ways, facts, the knowledge file, the contract.

These tests check which gotcha the rules and facts point at, so they read inputs with the rules alone
(``RULES_ONLY``: the packaged knowledge without its calibration map, i.e. every finding over min_confidence).
Whether diagnose then answers or abstains is the calibration layer's job, tested in test_reading.py."""

from __future__ import annotations

import copy
import random

import pytest
from pydantic import ValidationError

from conftest import load_facts_fixture
from sparkops.diagnose import Diagnosis, diagnose_files, load_symptoms
from sparkops.diagnose import diagnose_text as _diagnose_text
from sparkops.diagnose import rules as symptom_rules
from sparkops.diagnose.rules import GOTCHAS
from sparkops.knowledge import load as load_catalog
from sparkops.knowledge import safe_load

# One representative input per gotcha, in the words these failures really use.
EACH_GOTCHA = {
    "G1": "import vllm\nImportError: libcudart.so.12: cannot open shared object file: No such file or directory",
    "G2": "Building wheel for flash-attn (setup.py) ... error\n  error: subprocess-exited-with-error\n"
          "Failed to build flash-attn",
    "G3": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
          "of 119.70 GiB of which 1.21 GiB is free.",
    "G4": "    Clocks Event Reasons\n        HW Slowdown                       : Active\n"
          "        SW Thermal Slowdown               : Active\nthroughput drops after two hours of training",
    "G5": "Llama-3.3-70B dense decode only reaches 4 tok/s; the plan assumed 273 GB/s memory bandwidth",
    "G6": "I run vllm serve alongside a LoRA fine-tune on the same Spark; the KV cache gets evicted and there is "
          "no OOM in either log",
    "G7": "Switched from FP8 to NVFP4: NVFP4 is 30% slower than FP8 on the GB10 (18 vs 26 tok/s)",
    "G8": "Following the vLLM playbook from build.nvidia.com/spark step by step, the playbook fails at step 3:\n"
          "manifest for nvcr.io/nvidia/vllm:25.09-py3-spark not found: manifest unknown",
    "G9": "ImportError: Found an incompatible version of torchao. Found version 0.13.0+git, but only versions "
          "above 0.16.0 are supported",
    "G10": "vllm serve meta-llama/Llama-3.3-70B-Instruct --tensor-parallel-size 2 on two Sparks over ray\n"
           "[E ProcessGroupNCCL.cpp:632] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=3, "
           "OpType=ALLGATHER) ran for 600003 milliseconds before timing out.",
}


_KB = load_symptoms()
RULES_ONLY = _KB.model_copy(update={"scoring": _KB.scoring.model_copy(update={"calibration": None})})


def diagnose_text(text: str, **kw) -> Diagnosis:
    kw.setdefault("kb", RULES_ONLY)
    return _diagnose_text(text, **kw)


def top(text: str, **kw) -> str:
    return diagnose_text(text, **kw).top


@pytest.mark.parametrize("gotcha", GOTCHAS)
def test_each_gotcha_is_recognised(gotcha):
    d = diagnose_text(EACH_GOTCHA[gotcha])
    assert d.top == gotcha, d.model_dump()
    f = d.findings[0]
    assert 0 < f.confidence <= 1 and f.evidence and f.why and f.fix
    assert f.title == load_catalog().gotcha(gotcha).title
    assert f.fix == load_catalog().gotcha(gotcha).fix


def test_evidence_points_at_the_lines_that_matter():
    text = "step 1 ok\nstep 2 ok\n\x1b[31mImportError: libcudart.so.12: cannot open shared object file\x1b[0m\n"
    f = diagnose_text(text).findings[0]
    assert [e.line for e in f.evidence] == [3]
    assert f.evidence[0].text.startswith("ImportError: libcudart.so.12")  # ANSI stripped
    assert "CUDA 12" in f.evidence[0].why


def test_plain_logs_are_none_of_the_ten():
    for text in ("", "epoch 1/3 loss 1.234\nepoch 2/3 loss 0.987\nsaved checkpoint to out/",
                 "OSError: You are trying to access a gated repo.\n401 Client Error",
                 "KeyError: 'qwen3_next'", "hangs"):  # one weak word is not enough
        d = diagnose_text(text)
        assert d.findings == [], (text, d.model_dump())
        assert d.top == "none"


# ---------------------------------------------------------------- context rules, both ways
def test_undefined_symbol_between_cu13_nightlies_is_drift_not_abi():
    drift = ("ImportError: /usr/local/lib/python3.12/dist-packages/vllm/_C.abi3.so: undefined symbol: "
             "_ZN2at4cuda24getCurrentCUDABlasHandleEv\nvllm 0.19.1rc1.dev71+gdd9342e6b, torch 2.12.0.dev20260409+cu130")
    abi = ("ImportError: /opt/venv/lib/python3.12/site-packages/bitsandbytes/libbitsandbytes_cuda128.so: "
           "undefined symbol: cudaGetDriverEntryPointByVersion, version libcudart.so.12")
    d = diagnose_text(drift)
    assert d.top == "G9"
    assert "drift" in d.findings[0].why
    assert top(abi) == "G1"
    # the same undefined symbol with a CUDA 12 build named stays G1
    assert top(drift.replace("+cu130", "+cu128")) == "G1"


def test_capability_121_warning_is_harmless_but_an_old_build_is_not():
    harmless = ("UserWarning:\n    Found GPU0 NVIDIA GB10 which is of cuda capability 12.1.\n"
                "    Minimum and Maximum cuda capability supported by this version of PyTorch is\n    (8.0) - (12.0)\n")
    d = diagnose_text(harmless)
    assert d.findings == []
    assert any("harmless" in n and n.startswith("line 2:") for n in d.notes)
    old = harmless.replace("(8.0) - (12.0)", "(5.0) - (9.0)")
    assert top(old) == "G1"
    incompatible = ("NVIDIA GB10 with CUDA capability sm_121 is not compatible with the current PyTorch installation.\n"
                    "The current PyTorch install supports CUDA capabilities sm_50 sm_80 sm_86 sm_90.")
    assert top(incompatible) == "G1"


def test_two_node_hang_with_an_oom_is_g3_without_it_g10():
    hang = ("torchrun --nnodes=2 --node_rank=0 --master_addr=spark-01 serve.py --tensor-parallel-size 2\n"
            "[rank0]: Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1183, OpType=ALLREDUCE) ran "
            "for 600000 milliseconds before timing out.")
    assert top(hang) == "G10"
    oom = "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.50 GiB.\n" + hang
    d = diagnose_text(oom)
    assert d.top == "G3"
    assert "consequence" in d.findings[0].why


def test_slow_nvfp4_on_a_dense_model_is_bandwidth_unless_fp8_is_faster():
    dense = ("Llama-3.3-70B-Instruct-NVFP4 serves at ~4 tok/s on a single Spark; MoE models with A3B run at "
             "50 tok/s, the dense one is slow")
    assert top(dense) == "G5"
    vs_fp8 = "Llama-3.3-70B-Instruct in NVFP4 serves at 4 tok/s, slower than the FP8 checkpoint at 6 tok/s"
    assert top(vs_fp8) == "G7"


def test_no_vram_in_a_monitor_is_harmless_unless_something_ran_out():
    nvsmi = ("| N/A   36C    P8              3W /  N/A  | Not Supported          |      0%      Default |\n"
             "nvtop shows no VRAM for my GB10")
    d = diagnose_text(nvsmi)
    assert d.findings == []
    assert any("unified memory" in n for n in d.notes)
    d = diagnose_text(nvsmi + "\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB.")
    assert d.top == "G3"


def test_ptxas_rejecting_sm121a_is_triton_not_nvfp4():
    ptxas = ("triton.runtime.errors.PTXASError: PTXAS error: Internal Triton PTX codegen error\n"
             "ptxas fatal   : Value 'sm_121a' is not defined for option 'gpu-name'\nserving an NVFP4 checkpoint")
    assert top(ptxas) == "G9"
    assert top("NVFP4 kernels built for sm_121 without sm_121a are slower than FP8 on my Spark") == "G7"


def test_compiler_killed_building_flash_attn_is_g2_a_training_kill_is_g3():
    build = "MAX_JOBS=16 pip install flash-attn --no-build-isolation\nBuilding wheel for flash-attn\nKilled\n"
    assert top(build) == "G2"
    train = "python train.py --model llama-70b --qlora\nLoading checkpoint shards: 60%\nKilled\nexit code 137"
    assert top(train) == "G3"


def test_playbook_that_fails_on_its_own_is_g8_a_local_cause_comes_first():
    assert top("The Unsloth playbook doesn't work as-is: the URL of the test script is wrong") == "G8"
    local = ("Following the playbook at build.nvidia.com/spark/vllm\n"
             "ImportError: libcudart.so.12: cannot open shared object file: No such file or directory")
    assert top(local) == "G1"


def test_throughput_falling_over_time_is_thermal_not_bandwidth():
    assert top("tokens/s dropped from 2100 to 1500 after about two hours; GB/s looks fine at the start") == "G4"
    assert top("decode is only 9 tok/s, memory bandwidth bound at 273 GB/s") == "G5"


def test_oom_on_a_discrete_card_is_not_the_unified_memory_gotcha():
    h100 = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
            "capacity of 79.10 GiB of which 1.2 GiB is free. (NVIDIA H100 80GB HBM3)")
    assert top(h100) == "none"
    assert top(h100.replace("79.10", "119.70").replace("(NVIDIA H100 80GB HBM3)", "")) == "G3"


def test_pip_swapping_torch_for_a_cpu_build_is_drift_a_cpu_wheel_alone_is_g1():
    assert top("installing vllm uninstalls cuda-enabled torch every time and downgrades it to 2.8.0 with "
               "cpu-only support") == "G9"
    assert top("AssertionError: Torch not compiled with CUDA enabled\ntorch 2.9.1+cpu") == "G1"


def test_an_oom_beside_another_server_points_at_contention():
    d = diagnose_text("torch.OutOfMemoryError: CUDA out of memory.\nollama is running alongside vllm on the box")
    assert {f.gotcha for f in d.findings} >= {"G3", "G6"}


def test_a_cuda12_stack_on_a_gb10_is_g1_on_another_gpu_it_is_nothing():
    on_spark = "Running the cu128 image on my DGX Spark: docker compose -f docker-compose-cu128.yml up"
    d = diagnose_text(on_spark)
    assert d.top == "G1" and "cuda12-stack-on-spark" in d.findings[0].why
    assert top(on_spark.replace("DGX Spark", "RTX 4090 box")) == "none"
    assert top("ASUS Ascent GX10 here\nCUDA Version 12.8.1\nContainer image Copyright (c) NVIDIA") == "G1"


def test_a_cpu_torch_on_a_gb10_is_g1_unless_pip_swapped_it_in():
    cpu = "On a DGX Spark torch.__version__ is `2.9.1+cpu` and `torch.version.cuda` is `None`"
    d = diagnose_text(cpu)
    assert d.top == "G1" and "torch-without-cuda-on-spark" in d.findings[0].why
    swapped = "On a DGX Spark, installing vllm uninstalls cuda-enabled torch and downgrades it to 2.9.1+cpu"
    assert top(swapped) == "G9"


def test_flash_attn_trouble_on_aarch64_is_g2_but_vllms_own_backend_is_not():
    d = diagnose_text("Can't run on dgx spark - flash-attn issues\nTRITON_PTXAS_PATH=/usr/local/cuda/bin/ptxas python x.py")
    assert d.top == "G2" and "flash-attn-trouble-on-aarch64" in d.findings[0].why
    backend = "(EngineCore) INFO [cuda.py:123] Using FLASH_ATTN backend on V1 engine. NVIDIA GB10"
    d = diagnose_text(backend)
    assert d.findings == [] and any("vllm_flash_attn" in n for n in d.notes)


def test_a_host_wedge_is_g3_when_memory_is_the_topic_and_nothing_without_it():
    wedge = "gpu_memory_utilization=0.7 is not respected on the GB10: the host becomes unresponsive and SSH dies"
    d = diagnose_text(wedge)
    assert d.top == "G3" and "host-wedge-under-memory-load" in d.findings[0].why
    assert top("after the update the host becomes unresponsive and SSH dies on my GB10") == "none"


def test_free_memory_capped_below_the_pool_is_g3_even_across_two_sparks():
    text = ("2x DGX Spark (GB10, 128 GB)\nthe default GPU_MEM_UTIL=0.87 **never passes** vLLM's startup check: "
            "Free memory on cuda:0 at boot caps at **101.3–102.2 GiB of 121.69**")
    assert top(text) == "G3"
    assert top("2x DGX Spark (GB10, 128 GB) connected over ConnectX-7") == "none"


def test_two_sparks_and_their_link_alone_are_not_g10_tensor_parallel_is():
    link = "Two DGX Sparks connected with a QSFP cable over ConnectX-7; the link shows 200G"
    assert top(link) == "none"
    assert "two-nodes-without-tp-or-failure" in symptom_rules.load().model_dump_json()
    assert top(link + "\nvllm serve --tensor-parallel-size 2 hangs at NCCL init") == "G10"


def test_slow_decode_with_tp_across_sparks_is_g10_on_one_spark_it_is_bandwidth():
    tp = "trtllm-serve $MODEL --tp_size 2 across two sparks: decoding speed was incredibly slow"
    d = diagnose_text(tp)
    assert d.top == "G10" and "tp-across-sparks-slow-is-g10" in d.findings[0].why
    assert top("decode is slow on one Spark, 8 tok/s, memory bandwidth bound at 273 GB/s") == "G5"


def test_a_two_node_stall_with_memory_ruled_out_stays_g10_with_uma_accounting_it_is_g3():
    ruled_out = ("2x DGX Spark, TP=2 across two nodes: one rank stuck inside ncclAllGather; "
                 "memory pressure is absent (KV under 1%)")
    assert top(ruled_out) == "G10"
    uma = "2x DGX Spark, TP=2 across two nodes — hang at ~109 GiB; UMA accounting omits host-side memory"
    d = diagnose_text(uma)
    assert d.top == "G3" and "two-node-hang-with-oom-is-g3" in d.findings[0].why


def test_a_hot_reading_without_slowdown_is_none_a_shutdown_under_load_is_g4():
    assert top("CPU at 90-92 c degree during inference. Just high temperature, no shutdown issue.") == "none"
    assert top("GPU at 91 C and the box shuts down under sustained load after about 2 hours") == "G4"
    # "no throttle reason" does not excuse the low-clock state: only a load test (and a power cycle) shows it
    assert top("GPU sits at 690 MHz under load with no throttling reason set; a power cycle clears it") == "G4"


def test_a_failed_field_diagnostic_is_none_but_a_power_capped_unit_is_g4():
    rma = ("sudden hard power-off under sustained co-tenant GPU load on the DGX Spark\n"
           "Field Diagnostic failed GpuStress in 16 seconds. That's hardware, RMA is the right call")
    d = diagnose_text(rma)
    assert d.findings == [], d.model_dump()
    assert top("the GX10 unit is capped at ~30W under load, painfully slow; NVIDIA recommends RMA") == "G4"


def test_an_oom_beside_a_resident_neighbour_is_g6_alone_it_is_g3():
    alone = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB on the GB10"
    assert top(alone) == "G3"
    d = diagnose_text(alone + "\nboth servers start fine when run separately")
    assert d.top == "G6" and "neighbour-oom-is-contention" in d.findings[0].why
    assert top("at 97% the system will OOM if you have something like llama-swap running") == "G6"


def test_memory_given_back_by_a_restart_is_g6_by_drop_caches_it_is_g3():
    assert top("sudo systemctl restart polkit brings the memory back on my Spark") == "G6"
    d = diagnose_text("sync; echo 3 > /proc/sys/vm/drop_caches brings the memory back; MemAvailable was low")
    assert d.top == "G3"


def test_an_image_that_never_pulled_is_the_playbook_not_the_abi():
    gone = ("~/dgx-spark-playbooks/nvidia/multi-agent-chatbot$ docker run --gpus all nvidia/cuda:12.0-base nvidia-smi\n"
            "docker: Error response from daemon: manifest for nvidia/cuda:12.0-base not found: manifest unknown")
    assert top(gone) == "G8"
    assert top(gone.splitlines()[0]) == "G1"  # the CUDA 12 image itself, had it run on the Spark
    ran = "On the DGX Spark in nvidia/cuda:12.0-base: ImportError: libcudart.so.12: cannot open shared object file"
    assert top(ran) == "G1"


def test_rdma_registration_enomem_is_not_the_unified_pool():
    rdma = "ibv_reg_mr_iova2 failed: Cannot allocate memory (ENOMEM) between two DGX Sparks over RoCE"
    d = diagnose_text(rdma)
    assert d.findings == [] and any("memory-registration" in n for n in d.notes)
    assert top("RuntimeError: Cannot allocate memory (ENOMEM) while loading the model on the GB10") == "G3"


def test_a_stack_package_missing_a_name_another_imports_is_drift():
    assert top("ImportError: cannot import name 'LinearActivationQuantizedTensor' from 'torchao.quantization'") == "G9"
    assert top("ImportError: cannot import name 'helper' from 'mytool.utils'") == "none"


# ---------------------------------------------------------------- facts
def test_facts_confirm_a_cuda12_torch():
    text = "RuntimeError: CUDA error: no kernel image is available for execution on the device"
    plain = diagnose_text(text).findings[0]
    with_facts = diagnose_text(text, facts=load_facts_fixture("gb10_bare_pip_cu128")).findings[0]
    assert plain.gotcha == with_facts.gotcha == "G1"
    assert with_facts.confidence > plain.confidence
    # the G1 owner's decision (the same one preflight prints), not a re-derivation
    assert [(f.fact, f.effect) for f in with_facts.facts] == [("G1.wheel-cuda12", "confirms")]
    assert "CUDA 12.8" in with_facts.facts[0].value


def test_facts_rule_out_g1_and_turn_an_undefined_symbol_into_drift():
    text = "ImportError: /opt/venv/lib/python3.12/site-packages/foo/_C.so: undefined symbol: _ZN5torch3jit17parseSchemaOrNameERKSsb"
    cu13 = load_facts_fixture("gb10_vllm_default")  # torch 2.11.0+cu130
    d = diagnose_text(text, facts=cu13)
    assert d.top == "G9"
    assert all(f.gotcha != "G1" or f.facts[0].effect == "rules-out" for f in d.findings)


def test_facts_alone_never_make_a_finding_but_are_noted():
    d = diagnose_text("epoch 1 loss 1.0", facts=load_facts_fixture("gb10_bare_pip_cu128"))
    assert d.findings == []
    assert any("CUDA 12.8" in n for n in d.notes)


def test_facts_confirm_contention_and_tensor_parallel():
    d = diagnose_text(EACH_GOTCHA["G6"], facts=load_facts_fixture("gb10_vllm_default"))
    assert d.findings[0].gotcha == "G6" and d.findings[0].facts[0].effect == "confirms"
    d = diagnose_text("the launch hangs at NCCL init over ConnectX-7 with tensor parallel",
                      facts=load_facts_fixture("gb10_two_node_tp2"))
    f = d.findings[0]
    assert f.gotcha == "G10" and {x.fact for x in f.facts} == {"G10.train-tp-across-nodes"}
    assert "WORLD_SIZE=2 > LOCAL_WORLD_SIZE=1" in f.facts[0].value


def test_facts_in_a_pinned_container_weaken_drift():
    text = EACH_GOTCHA["G9"]
    bare = diagnose_text(text).findings[0].confidence
    ngc = diagnose_text(text, facts=load_facts_fixture("gb10_ngc_2509_healthy")).findings[0]
    assert ngc.gotcha == "G9" and ngc.confidence < bare and ngc.facts[0].effect == "rules-out"


# ---------------------------------------------------------------- contract, determinism, limits
def test_json_contract():
    d = diagnose_text(EACH_GOTCHA["G1"], source="crash.log")
    data = d.model_dump(mode="json")
    assert set(data) >= {"file", "findings"} and data["file"] == "crash.log"
    f = data["findings"][0]
    assert set(f) == {"gotcha", "confidence", "title", "evidence", "why", "fix", "facts"}
    assert set(f["evidence"][0]) == {"line", "text", "why"}
    assert Diagnosis.model_validate(data) == d


def test_findings_are_ranked_and_top_limits_them():
    text = EACH_GOTCHA["G1"] + "\n" + EACH_GOTCHA["G3"] + "\n" + EACH_GOTCHA["G9"]
    d = diagnose_text(text)
    confs = [f.confidence for f in d.findings]
    assert len(confs) >= 3 and confs == sorted(confs, reverse=True)
    assert len(diagnose_text(text, top=1).findings) == 1
    assert all(f.confidence >= symptom_rules.load().scoring.min_confidence for f in d.findings)


def test_deterministic():
    text = "\n".join(EACH_GOTCHA.values())
    runs = {diagnose_text(text).model_dump_json() for _ in range(5)}
    assert len(runs) == 1


def test_diagnose_files_keeps_order_and_reports_unreadable(tmp_path):
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_text(EACH_GOTCHA["G9"])
    b.write_text(EACH_GOTCHA["G3"])
    out = diagnose_files([str(b), str(tmp_path / "nope.log"), str(a)])
    assert [d.file for d in out] == [str(b), str(tmp_path / "nope.log"), str(a)]
    assert [d.top for d in out] == ["G3", "none", "G9"]
    assert out[1].error and "no such file" in out[1].error


def test_a_huge_input_is_bounded_and_still_finds_the_tail_error():
    noise = "\n".join(f"step {i} loss 0.5" for i in range(200_000))
    d = diagnose_text(noise + "\n" + EACH_GOTCHA["G3"])
    assert d.truncated and any("skipped" in n for n in d.notes)
    assert d.top == "G3" and d.findings[0].evidence[0].line == 200_001


def test_binary_garbage_gives_an_answer_not_an_error():
    rnd = random.Random(7)
    junk = bytes(rnd.randrange(256) for _ in range(50_000)).decode("latin-1")
    d = diagnose_text(junk)
    assert d.error is None


# ---------------------------------------------------------------- the knowledge file
def _raw():
    from importlib import resources

    return safe_load(resources.files("sparkops.knowledge").joinpath("symptoms.yaml").read_text(encoding="utf-8"))


def test_knowledge_file_is_dated_and_covers_every_gotcha():
    kb = symptom_rules.load()
    assert kb.version >= 1 and kb.last_verified
    assert set(kb.patterns) == set(GOTCHAS)
    assert all(p.why for ps in kb.patterns.values() for p in ps)
    assert all(r.why for r in kb.rules) and all(h.note for h in kb.harmless)


@pytest.mark.parametrize("breakage,message", [
    (lambda d: d["patterns"]["G1"][0].update(re="(unclosed"), "does not compile"),
    (lambda d: d["rules"][0].update(when_all=["no.such.id"]), "unknown id"),
    (lambda d: d["harmless"][0].update(silences=["g9.nothing"]), "unknown pattern"),
    (lambda d: d["patterns"].update(G11=[]), "unknown gotchas"),
    (lambda d: d["patterns"]["G2"].append(dict(d["patterns"]["G1"][0])), "ids used twice"),
    (lambda d: d["rules"][0].update(target="G12"), "G1..G10"),
    (lambda d: d.pop("last_verified"), "last_verified"),
    (lambda d: d["rules"][0].update(sources=["G3"]), "suppress rules only"),
    (lambda d: next(r for r in d["rules"] if r["effect"] == "suppress").update(sources=["G11"]), "G1..G10"),
])
def test_a_bad_knowledge_edit_fails_at_load(breakage, message):
    data = copy.deepcopy(_raw())
    breakage(data)
    with pytest.raises(ValidationError, match=message):
        symptom_rules.parse(data)


def test_a_user_knowledge_file_changes_the_answer(tmp_path):
    import yaml

    data = copy.deepcopy(_raw())
    data["patterns"]["G8"].append({"id": "g8.custom", "re": "frobnicate", "weight": 5, "why": "a local rule"})
    path = tmp_path / "symptoms.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    kb = symptom_rules.load_file(path)
    assert diagnose_text("frobnicate failed", kb=kb).top == "G8"
    assert diagnose_text("frobnicate failed").top == "none"


# ---------------------------------------------------------------- the development set
def test_development_cases_are_well_formed_and_mostly_right():
    """tests/diagnose/dev: calibration inputs (real thread excerpts and a few synthetic ones). A guard
    against regressions while tuning symptoms.yaml; the honest score comes from tests/diagnose/cases/."""
    from pathlib import Path

    dev = sorted((Path(__file__).parent / "dev").glob("*.yaml"))
    assert len(dev) >= 40
    right = 0
    for p in dev:
        case = safe_load(p.read_text(encoding="utf-8"))
        assert set(case) == {"id", "source", "label", "kind", "why", "input_kind", "text"}, p.name
        assert case["id"] == p.stem and case["label"] in (*GOTCHAS, "none"), p.name
        right += diagnose_text(case["text"], source=p.name).top == case["label"]
    assert right / len(dev) >= 0.9, f"{right}/{len(dev)}"


def test_anchored_scan_finds_exactly_what_a_full_scan_finds():
    """Each regex runs only around its required literals (a one-line pattern on the literal's line, a
    pattern that may cross lines within its maximum width). On every text we have, that must give
    the very matches a plain scan of the whole text gives, or the shortcut would change answers."""
    from pathlib import Path

    from sparkops.diagnose.matcher import _Scanner
    from sparkops.diagnose.text import from_text

    kb = symptom_rules.load()
    items = [*kb.signals, *(p for ps in kb.patterns.values() for p in ps), *kb.harmless]
    assert sum(i.anchors is not None for i in items) > 0.9 * len(items)
    assert sum(i.reach == 0 for i in items) > 0.8 * len(items)
    texts = list(EACH_GOTCHA.values())
    texts += [safe_load(p.read_text(encoding="utf-8"))["text"] for p in (Path(__file__).parent / "dev").glob("*.yaml")]
    texts.append("\n".join(texts))  # everything at once: matches next to each other, windows merging
    checked = 0
    for text in texts:
        inp = from_text(text)
        starts, pos = [], 0
        for line in inp.lines:
            starts.append(pos)
            pos += len(line) + 1
        scan = _Scanner(inp.text, starts)
        for item in items:
            full = [m.span() for m in item.rx.finditer(inp.text)]
            assert [m.span() for m in scan.finditer(item, limit=10**6)] == full, (item.id, text[:60])
            checked += len(full)
    assert checked > 300


# ---------------------------------------------------------------- round two: minimum evidence, "the cause is elsewhere"
def test_topic_words_alone_do_not_name_a_gotcha():
    """NVFP4, sm_121a and two Sparks only say what the report is about; a failure has to be read too."""
    topic = "Serving the NVFP4 checkpoint on 2x DGX Spark (GB10 / sm_121a) with FP4 weights"
    assert top(topic) == "none"
    assert top(topic + "\nNVFP4 is 30% slower than the FP8 checkpoint") == "G7"
    # the mechanism, not a lucky weight: with the damping switched off the same words do name G7
    data = copy.deepcopy(_raw())
    data["scoring"]["topic_only_keep"] = 1.0
    assert diagnose_text(topic, kb=symptom_rules.parse(data)).top == "G7"


def test_a_hot_box_without_a_failure_is_not_throttling():
    hot = "The SoC runs hot: it peaked at 95 °C during decode, cooling looked fine"
    assert top(hot) == "none"
    assert top(hot + "\nthroughput drops after two hours, clocks fall to 600 MHz") == "G4"


def test_flash_attn_dropped_for_sdpa_on_a_gb10_is_g2_elsewhere_not():
    spark = "On the DGX Spark (sm_121) we disable flash-attn and fall back to PyTorch SDPA instead"
    assert top(spark) == "G2"
    assert top(spark.replace("On the DGX Spark (sm_121)", "On our servers")) == "none"


def test_a_broken_network_is_not_tensor_parallelism():
    tp_hang = ("vllm serve model --tensor-parallel-size 2 across two DGX Sparks over ConnectX-7; the first "
               "request hangs, NCCL WARN NET/IB : Got completion with error")
    assert top(tp_hang) == "G10"
    assert top(tp_hang + "\nNIC counters: packet_seq_err keeps growing, no PFC/ECN configured") == "none"
    assert top(tp_hang + "\nthe head bound the Wi-Fi address, the worker could not reach it") == "none"


def test_an_engine_bug_fixed_upstream_is_none():
    tp_hot = "2x DGX Spark with --tensor-parallel-size 2: the SoC reaches 95 °C while the GPUs are idle"
    assert top(tp_hot) == "G10"
    assert top(tp_hot + "\nthree cores are pinned by a busy-wait in the broadcast queue; a one-line patch fixed it") \
        == "none"


def test_speed_that_recovers_after_warm_up_is_not_the_nvfp4_gotcha():
    slow = "NVFP4 decodes at 20 tok/s, slower than the FP8 build at 35 tok/s on the GB10"
    assert top(slow) == "G7"
    assert top(slow + "\nbut decoding speed fluctuates and it needs warm-up: later requests run at full speed") \
        == "none"


def test_a_library_without_a_prebuilt_sm121_wheel_is_not_the_cuda_abi():
    gap = ("mamba-ssm ships no prebuilt wheels for sm_121; torch 2.10.0+cu130 on the GB10\n"
           "RuntimeError: CUDA error: no kernel image is available for execution on the device")
    assert top(gap) == "none"
    assert top(gap.replace("+cu130", "+cu126")) == "G1"


def test_a_server_that_reserves_the_pool_starves_the_next_one():
    oom = "the sandbox container exits 1; dmesg: NVRM: nvAssertFailed ... Out of memory [NV_ERR_NO_MEMORY]"
    assert top(oom) == "G3"
    assert top("The managed vLLM server reserves most of the unified memory on the Spark.\n" + oom) == "G6"
    assert top("Another GPU workload was already running on the Spark.\n"
               "insufficient currently available GPU memory: the model runner exited during load") == "G6"


def test_two_servers_means_two_different_servers():
    assert top("a patch for vllm shm_broadcast and a note on how vllm spins on DGX Spark") == "none"
    assert top("I run ollama alongside vllm on one Spark and the KV cache gets evicted") == "G6"


def test_the_low_clock_state_cleared_by_a_power_cycle_is_g4():
    assert top("GB10 GPU clock stuck at about 702 MHz during inference, 25 tok/s; the problem disappeared "
               "after a complete power cycle") == "G4"
    assert top("GB10 GPU clock at 2398 MHz during inference, 50 tok/s") == "none"


def test_an_upstream_release_in_an_unpinned_build_is_drift():
    drift = ("The new release of PyTorch 2.10 is breaking our source build of vLLM.\n"
             "I'll roll back PyTorch to 2.9.1 until the build is fixed.")
    assert top(drift) == "G9"
    assert top("We build vLLM from source against PyTorch 2.10 on the Spark.") == "none"


def test_cpu_torch_build_on_a_spark_is_g1_even_when_the_fix_is_cu130():
    assert top("On the DGX Spark (aarch64) the installer picked the PyPI torch==2.10.0 CPU build; now it "
               "resolves torch==2.10.0+cu130") == "G1"
    assert top("torch==2.10.0+cu130 installed on the DGX Spark") == "none"


def test_outdated_text_in_the_docs_is_a_stale_playbook():
    assert top("Fix outdated CUDA version references in the installation documentation (12.9 -> 13.0)") == "G8"
    assert top("Updated CUDA from 12.9 to 13.0 in our container") != "G8"


# round three: mechanisms that read the shape of a report (fresh wording, not copied from any case)

def test_a_howto_question_names_no_gotcha_until_something_fails():
    ask = "Is it possible to keep two vLLM servers loaded at the same time on one Spark? How would I set that up?"
    assert top(ask) == "none"
    assert top(ask + "\nWhen I start the second one the first gets evicted and decode crawls.") == "G6"


def test_a_scheduler_holding_the_gpus_is_not_memory_or_tp():
    reserved = ("Two Sparks in one Ray cluster, --tensor-parallel-size 2. Starting a second model says\n"
                "ValueError: Current node has no GPU available")
    assert top(reserved) == "none"
    assert top("Two Sparks, --tensor-parallel-size 2 over the RoCE link: the engine hangs at NCCL init,\n"
               "Watchdog caught collective operation timeout") == "G10"


def test_a_two_spark_tp_run_that_worked_is_not_g10():
    ok = ("Two DGX Sparks over ConnectX-7 with tensor parallel 2: the run completed the benchmark and "
          "served requests; verified on real hardware.")
    assert top(ok) == "none"
    assert top("Two DGX Sparks over ConnectX-7 with tensor parallel 2: decode is slower than on one Spark.") == "G10"


def test_the_unified_pool_accounting_and_its_fix_are_g3():
    uma = ("On the GB10 the loader sized the checkpoint against MemFree on the unified memory pool, so the page "
           "cache from the download made it refuse the model; dropping the page cache let it load.")
    assert top(uma) == "G3"
    assert top("Our dashboard shows MemTotal and MemFree for each node.") == "none"


def test_a_model_already_holding_the_pool_makes_the_oom_contention():
    oom = "vLLM: No available memory for the cache blocks while starting the 70B on the Spark."
    assert top(oom) == "G3"
    assert top(oom + "\nThe embedding server container was already holding about 20 GB of the pool.") == "G6"


def test_nvfp4_behind_fp8_is_g7_even_on_two_sparks_but_nvfp4_ahead_is_not():
    tp = "Two Sparks, --tensor-parallel-size 2.\n"
    assert top(tp + "The NVFP4 weights cost us about a quarter of decode speed versus fp8 on the same cluster.") == "G7"
    assert top("On the Spark NVFP4 beats FP8 by 1.4x in single-stream decode for this dense model.") == "none"


def test_no_accelerator_seen_on_a_gb10_is_g1_unless_a_monitor_misread_nvml():
    assert top("DGX Spark, fresh venv: No GPU or other accelerator detected. Running on CPU.") == "G1"
    assert top("On GB10 the monitor reads [N/A] for memory.used and so shows No GPU detected") == "none"


def test_the_resolver_replacing_torch_is_drift_and_a_cuda12_only_wheel_is_g1():
    swap = ("On the DGX Spark, after installing the extras our torch got replaced by torch 2.10.0+cpu and "
            "vLLM dies with ImportError: libtorch_cuda.so: cannot open shared object file")
    assert top(swap) == "G9"
    assert top("On the DGX Spark vLLM dies with ImportError: libtorch_cuda.so: cannot open shared object file") == "G1"
    assert top("On the DGX Spark pip fetched a vllm wheel built only for CUDA 12 and it will not import") == "G1"


def test_triton_bundling_an_old_ptxas_is_drift():
    assert top("On the GB10, torch.compile fails: Triton ships a CUDA 12.8 ptxas that is too old for this GPU") == "G9"
    assert top("Triton compiles our kernels on the GB10 in about a minute") == "none"


def test_refreshing_a_playbooks_names_and_tags_is_g8_elsewhere_it_is_not():
    assert top("Update the model names and Docker image tags in the fine-tuning playbook README") == "G8"
    assert top("Update the model names and Docker image tags in our internal deploy script") == "none"


def test_heat_that_stalls_a_long_run_is_g4_in_any_language_and_a_calm_reading_is_not():
    assert top("Forty minutes into a LoRA run on the DGX Spark the GPU sits at 92 C; iteration time creeps up.") == "G4"
    assert top("Meine DGX Spark drosselt nach einer Stunde Training, die GPU steht bei 90 °C.") == "G4"
    assert top("На DGX Spark при долгом инференсе начинается троттлинг, GPU 91°C.") == "G4"
    assert top("After two hours of inference the GB10 reads 87 C; clocks stay at 2.4 GHz, no throttling.") == "none"
    assert top("DGX Spark перегрев? Нет, 80°C под нагрузкой это нормально, без троттлинга.") == "none"


def test_a_framework_without_a_cuda13_arm64_gpu_build_is_g1_a_missing_extension_wheel_is_not():
    assert top("On the GB10 the library can't use the GPU at all and inference falls back to the CPU. "
               "Please publish a package for arm64 with CUDA 13.") == "G1"
    assert top("causal-conv1d doesn't ship a prebuilt wheel for sm_121, so you compile it from source on the "
               "Spark; it builds fine with torch cu130.") == "none"
    assert top("Does PaddleOCR support GPU on the DGX Spark? I haven't tried it yet.") == "none"


def test_nvfp4_kept_off_its_native_sm121_kernels_is_g7_a_widened_gate_that_works_is_not():
    assert top("On the GB10 (sm_121) the NVFP4 MoE kernel dispatch only checks for sm 120, so the native FP4 "
               "grouped GEMM is skipped.") == "G7"
    assert top("sglang on GB10: the FP4 MoE path is gated to capability 12.0, so sm121 never reaches the NVFP4 "
               "kernels and decode is slow.") == "G7"
    assert top("vLLM on DGX Spark: for our NVFP4 checkpoint the kernel selector picks a W4A16 dequant kernel "
               "instead of the native W4A4 GEMM; prefill is 30% slower.") == "G7"
    assert top("Add 12.1 to TORCH_CUDA_ARCH_LIST for the release wheels and Docker images; the NVFP4 and Marlin "
               "kernel lists already include 12.1.") == "none"
    assert top("I claimed sm_120f broke FP4 on sm_121, but I ran it on the GB10: identical output from both "
               "targets. Reverting that part.") == "none"


def test_pipeline_chosen_over_tp_across_two_sparks_is_g10_tp_that_works_is_not():
    assert top("Two DGX Sparks over the 200G link: pipeline parallelism beats tensor parallelism for us.") == "G10"
    assert top("Across our two GB10 nodes tensor parallel loses to pipeline parallel by 40% on decode.") == "G10"
    assert top("Two Sparks over ConnectX-7 with tensor parallel 2 works well; the 1 us RTT is plenty. The higher "
               "aggregate throughput is because it's batching across many requests.") == "none"


def test_a_pool_shared_with_a_resident_server_is_g6_a_start_that_needs_headroom_is_g3():
    assert top("ComfyUI and Ollama both live on our GB10; the GPU is time-sliced and the memory pool is shared "
               "with the Ollama server, so ComfyUI gets evicted when Ollama loads a big model.") == "G6"
    headroom = ("The 120B recipe on the Spark crashed on startup until I lowered the memory utilisation to 0.85 "
                "and it started; nothing else running. You need to free up the last GB.")
    assert top(headroom) == "G3"


def test_flash_attention_3_being_hopper_only_on_the_gb10_is_g2():
    assert top("FlashAttention 3 is Hopper-only, so on the GB10 we replaced FA3 with SDPA.") == "G2"
    assert top("FlashAttention 3 runs on our H100 nodes.") == "none"


def test_a_dispatch_that_matches_sm120_exactly_is_g7_only_when_nvfp4_is_behind_it():
    guard = ("The kernel dispatch compares the SM version with == 120, an exact match that misses SM121 on the "
             "GB10, so it falls through to NOT_IMPLEMENTED.\n")
    assert top(guard + "Affected: the NVFP4 scaled-mm and NVFP4 MoE kernels.") == "G7"
    assert top(guard + "Affected: the rotary-embedding kernel.") == "none"


def test_pipeline_training_across_two_sparks_that_scales_is_not_g10():
    assert top("Two DGX Sparks train a 70B LoRA with torch pipelining (1F1B); the pair reaches 1.7x one node's "
               "tokens per second, and plain data parallel is better where the model fits on one node.") == "none"


def test_ranks_hanging_together_in_their_collectives_on_several_sparks_is_g10():
    """symptoms.yaml v9 (issue 18, fourth session): any count of Sparks, and the ranks hanging in their collectives."""
    from sparkops.diagnose.matcher import match
    from sparkops.diagnose.text import from_text

    KB = load_symptoms()
    hang = ("Kimi NVFP4 on 8x DGX Spark: after loading, the init-time all-reduce hangs with the GPU in a spin-loop\n"
            "tensor parallel across the Sparks, NCCL over RoCE\n")
    res = match(from_text(hang, "-", KB.text_limits), KB)
    assert {"g10.collective-hang", "g10.two-sparks"} <= res.matched
    assert top(hang) == "G10"
    assert "g10.collective-hang" in match(from_text("all four workers froze at the same instant on a TP4 group",
                                                    "-", KB.text_limits), KB).matched
    # a hang with no collective, rank or link in the line is not this pattern
    single = "The Spark hangs when loading the model with 120 GiB of weights; no error in dmesg."
    assert "g10.collective-hang" not in match(from_text(single, "-", KB.text_limits), KB).matched
