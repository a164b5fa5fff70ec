"""vLLM pooling servers (--runner pooling / --convert / --task): engines.yaml vllm.pooling, read in vLLM's sdists
0.9.2-0.34.0 (round 20an). The recorded starts are blind v22's Qwen3-8B encoder starts (idss-mesa/mesa-clm, vLLM
0.27.1 on a DGX Spark): IN-SAMPLE for this code, which was written after they were scored."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from sparkops.planner import serve
from sparkops.planner.serve_engines import ServeInputError, parse_command, spec_from_text

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("serve_accuracy", ROOT / "benchmarks" / "serve_accuracy.py")
sa = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sa)
RECS = [r for r in yaml.safe_load(sa.LOGS.read_text())["records"] if r["id"].startswith("vllm-mesaclm-")]
QWEN3_8B = serve.resolve_shape("Qwen/Qwen3-8B")
GIB = 1024**3


def _spec_of(line: str, version: str | None = None):
    spec = parse_command(line)
    return spec.model_copy(update={"engine_version": version}) if version else spec


# ------------------------------------------------------------------ the recorded starts


def test_the_recorded_pooling_starts_are_the_eight_with_flags_runner():
    assert len(RECS) == 8
    assert all(r["flags"]["runner"] == "pooling" and "--runner pooling" in r["flags_note"] for r in RECS)


@pytest.mark.parametrize("rec", RECS, ids=[r["id"].removeprefix("vllm-mesaclm-qwen3-8b-pooling-gb10-") for r in RECS])
def test_a_pooling_start_loads_no_lm_head_and_its_kv_row_is_in_the_band(rec):
    obs = rec["observed"]
    p = sa.plan_of(rec)
    # "Model loading took 14.11 GiB": Qwen3-8B's 8.19 B parameters less its untied 0.62 B lm_head, in bf16
    assert p.weights_gib == pytest.approx(obs["weights_gib"], rel=0.01)
    assert "lm_head not loaded" in p.model.weights_detail
    generate = sa.plan_of(rec, runner=None)  # the same launch read as a generate server counts the lm_head
    assert generate.weights_gib - p.weights_gib == pytest.approx(QWEN3_8B.params_lm_head * 2 / GIB, abs=0.01)
    assert p.kv.available_gib == pytest.approx(obs["kv_gib"], rel=0.10)
    if rec["flags"].get("kv_cache_memory_bytes"):  # the pinned start: --kv-cache-memory-bytes decides, not the head
        assert p.kv.available_gib == generate.kv.available_gib
    else:  # what the lm_head held is KV now
        assert p.kv.available_gib - generate.kv.available_gib == pytest.approx(QWEN3_8B.params_lm_head * 2 / GIB, abs=0.02)
    assert p.overheads.get("sampler_gib", 0.0) == 0.0
    assert any(n.startswith("pooling server (embed adapter)") and "Model Runner V1" in n for n in p.notes)


def test_the_recorded_starts_log_model_runner_v1_and_the_plan_picks_it():
    for rec in RECS:
        assert "[gpu_model_runner.py:" in rec["log"] and "Using V2 Model Runner" not in rec["log"]
        assert serve.vllm_model_runner_v2(QWEN3_8B, sa.spec_of(rec)) is False


# ------------------------------------------------------------------ the flags, release by release


@pytest.mark.parametrize(("line", "runner", "convert", "task", "pooled"), [
    ("vllm serve Qwen/Qwen3-8B --runner pooling", "pooling", None, None, "embed"),
    ("vllm serve Qwen/Qwen3-8B --runner=pooling --convert classify", "pooling", "classify", None, "classify"),
    ("vllm serve Qwen/Qwen3-8B --convert embed", None, "embed", None, "embed"),  # _get_runner_type: pooling
    ("vllm serve Qwen/Qwen3-8B --convert reward", None, "reward", None, "embed"),  # 0.13: reward -> embed
    ("vllm serve Qwen/Qwen3-8B --task embed", None, None, "embed", "embed"),  # 0.9-0.12
    ("vllm serve Qwen/Qwen3-8B --task=embedding", None, None, "embedding", "embed"),
    ("vllm serve Qwen/Qwen3-8B --task classify", None, None, "classify", "classify"),
    ("vllm serve Qwen/Qwen3-8B --task score", None, None, "score", "embed"),
    ("vllm serve Qwen/Qwen3-8B --task generate", None, None, "generate", None),
    ("vllm serve Qwen/Qwen3-8B --runner generate", "generate", None, None, None),
    ("vllm serve Qwen/Qwen3-8B --runner auto --convert auto", None, None, None, None),
    ("vllm serve Qwen/Qwen3-8B --runner pooling --convert none", "pooling", "none", None, "embed"),
    ("vllm serve Qwen/Qwen3-8B", None, None, None, None),
])
def test_each_flag_form_reads_into_the_spec(line, runner, convert, task, pooled):
    spec = parse_command(line)
    assert (spec.runner, spec.convert, spec.task) == (runner, convert, task)
    assert serve.vllm_pooling(spec) == pooled


@pytest.mark.parametrize(("line", "version", "says"), [
    ("vllm serve Qwen/Qwen3-8B --task embed", "0.27.1", "--task is not a flag of vLLM 0.27.1"),
    ("vllm serve Qwen/Qwen3-8B --task embed", "0.13.0", "--task is not a flag of vLLM 0.13.0"),
    ("vllm serve Qwen/Qwen3-8B --task embed", "0.11.0", None),  # deprecated, still parsed
    ("vllm serve Qwen/Qwen3-8B --task embed", "0.10.0", None),
    ("vllm serve Qwen/Qwen3-8B --runner pooling", "0.10.0", "--runner / --convert are not flags of vLLM 0.10.0"),
    ("vllm serve Qwen/Qwen3-8B --runner pooling", "0.11.0", None),
    ("vllm serve Qwen/Qwen3-8B --convert reward", "0.20.0", "--convert reward is not a choice of vLLM 0.20.0"),
    ("vllm serve Qwen/Qwen3-8B --convert reward", "0.13.0", None),
    ("vllm serve Qwen/Qwen3-8B --convert classify", "0.34.0", None),
])
def test_a_flag_the_release_does_not_parse_is_named(line, version, says):
    note = serve.vllm_pooling_flag_note(_spec_of(line, version))
    if says is None:
        assert note is None
    else:
        assert note is not None and note.startswith(says)


@pytest.mark.parametrize(("version", "env", "v2"), [
    ("0.22.0", "", False), ("0.27.1", "", False), ("0.28.0", "", False),  # runner_type != "generate": not default V2
    ("0.27.1", "VLLM_USE_V2_MODEL_RUNNER=1 ", True),  # the variable still decides
    ("0.29.0", "", True), ("0.33.0", "", True), ("0.34.0", "", True),  # nothing in the unsupported list; V2 only
])
def test_the_model_runner_of_a_pooling_launch_by_release(version, env, v2):
    line = f"{env}vllm serve Qwen/Qwen3-8B --runner pooling"
    assert serve.vllm_model_runner_v2(QWEN3_8B, _spec_of(line, version)) is v2
    # the same launch as a generate server: Qwen3 is a default V2 architecture from 0.22
    assert serve.vllm_model_runner_v2(QWEN3_8B, _spec_of(f"{env}vllm serve Qwen/Qwen3-8B", version)) is True


def test_a_pooling_profile_has_no_sampler_term():
    spec = _spec_of("vllm serve Qwen/Qwen3-8B --runner pooling --max-num-seqs 256", "0.27.1")
    gen = _spec_of("vllm serve Qwen/Qwen3-8B --max-num-seqs 256", "0.27.1")
    assert serve.vllm_sampler(spec, "NVIDIA GB10", QWEN3_8B).kind == "none"
    ov, ov_gen = (serve.vllm_overheads(QWEN3_8B, s, 121.69, 1, "NVIDIA GB10", True) for s in (spec, gen))
    assert ov["sampler_gib"] == 0.0 and ov_gen["sampler_gib"] > 0.0


def test_a_tied_lm_head_is_the_embedding_and_pooling_changes_no_weights():
    shape = serve.resolve_shape("Qwen/Qwen3-0.6B")
    assert shape.params_lm_head == 0
    m = serve.Machine(source="test", total_gib=121.69, free_gib=110.0, unified=True, gpu_name="NVIDIA GB10")
    pooled = serve.plan_serve(shape, _spec_of("vllm serve Qwen/Qwen3-0.6B --runner pooling", "0.27.1"), m)
    gen = serve.plan_serve(shape, _spec_of("vllm serve Qwen/Qwen3-0.6B", "0.27.1"), m)
    assert pooled.weights_gib == gen.weights_gib and "lm_head not loaded" not in pooled.model.weights_detail


# ------------------------------------------------------------------ free text and odd input


@pytest.mark.parametrize(("text", "runner", "convert"), [
    ("an embedding server for Qwen/Qwen3-8B with vllm, 4k context", "pooling", "embed"),
    ("serve Qwen/Qwen3-8B embeddings on vllm", "pooling", "embed"),
    ("a reranker: Qwen/Qwen3-8B on vllm 8k context", "pooling", "classify"),
    ("serve Qwen/Qwen3-8B with vllm 32k context 8 users", None, None),
])
def test_free_text_asking_for_an_embedding_server(text, runner, convert):
    spec = spec_from_text(text)
    assert (spec.runner, spec.convert) == (runner, convert)


@pytest.mark.parametrize("flag", ["--runner", "--convert", "--task"])
def test_a_value_vllm_does_not_offer_is_an_input_error(flag):
    with pytest.raises(ServeInputError, match=flag):
        parse_command(f"vllm serve Qwen/Qwen3-8B {flag} embeddingz")


_RUNNERS = ["auto", "generate", "pooling", "draft"]
_CONVERTS = ["auto", "none", "embed", "classify", "reward"]


@given(runner=st.sampled_from(_RUNNERS), convert=st.sampled_from(_CONVERTS), upper=st.booleans(),
       eq=st.booleans(), underscore=st.booleans())
def test_any_runner_convert_pair_parses_and_resolves(runner, convert, upper, eq, underscore):
    def flag(name: str, value: str) -> str:
        name = name.replace("-", "_") if underscore else name
        value = value.upper() if upper else value
        return f"--{name}={value}" if eq else f"--{name} {value}"

    spec = parse_command(f"vllm serve Qwen/Qwen3-8B {flag('runner', runner)} {flag('convert', convert)}")
    assert spec.runner == (None if runner == "auto" else runner)
    assert spec.convert == (None if convert == "auto" else convert)
    pooled = serve.vllm_pooling(spec)
    if runner in ("generate", "draft") or (runner == "auto" and convert in ("auto", "none")):
        assert pooled is None
    else:
        assert pooled == ("classify" if convert == "classify" else "embed")


@given(value=st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126, blacklist_characters="\"'\\="),
                     min_size=1, max_size=12))
def test_an_unknown_runner_value_is_refused_never_crashes(value):
    try:
        spec = parse_command(f"vllm serve Qwen/Qwen3-8B --runner {value}")
    except ServeInputError:
        assert value.lower() not in _RUNNERS or value.startswith("-")
    else:
        assert value.lower() in _RUNNERS or value.startswith("-")
        assert spec.runner in (None, *(_RUNNERS[1:]))
