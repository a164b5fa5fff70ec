"""The GPU memory harness (benchmarks/memory/harness.py): configs, catalog, parent/child protocol.

The harness runs on the device machine; here it is driven with fake children (crash, hang,
garbage) so its robustness is tested without a GPU, plus a CPU dry run when torch is present.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
HARNESS = ROOT / "benchmarks" / "memory" / "harness.py"
CONFIGS = ROOT / "benchmarks" / "memory" / "configs.yaml"
CATALOG = ROOT / "src" / "sparkops" / "knowledge" / "models.yaml"


def _load_harness() -> Any:
    spec = importlib.util.spec_from_file_location("memory_harness", HARNESS)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


H = _load_harness()

GOOD: dict[str, Any] = {"id": "x1", "model": "llama-3.2-1b", "method": "lora", "batch": 2, "seq_len": 128,
                        "lora": {"r": 8}}
TINY = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "vocab_size": 256}


def _write(tmp_path: Path, data: Any, name: str = "c.yaml") -> Path:
    p = tmp_path / name
    p.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return p


# --- configuration loading and validation ---------------------------------------------------


def test_defaults_filled_in() -> None:
    cfg = H.validate_config(GOOD)
    assert cfg["dtype"] == "bf16" and cfg["optimizer"] == "adamw_torch" and cfg["attention"] == "sdpa"
    assert cfg["steps"] == 3 and cfg["grad_checkpointing"] is False and cfg["autocast"] is False
    assert H.validate_config({**GOOD, "dtype": "fp32"})["autocast"] is True
    assert H.validate_config({**GOOD, "autocast": True})["autocast"] is True
    assert cfg["lora"] == {"r": 8, "alpha": 16, "targets": "all-linear", "dropout": 0.0}


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"method": "dpo"}, "method 'dpo' is not one of ['full', 'lora', 'qlora']"),
        ({"dtype": "fp16"}, "dtype 'fp16'"),
        ({"optimizer": "adam"}, "optimizer 'adam'"),
        ({"attention": "flash"}, "attention 'flash'"),
        ({"batch": 0}, "batch must be an integer >= 1"),
        ({"seq_len": True}, "seq_len must be an integer >= 1"),
        ({"steps": 1.5}, "steps must be an integer >= 1"),
        ({"grad_checkpointing": "yes"}, "grad_checkpointing must be true or false"),
        ({"grad_checkpoint": True}, "unknown field(s) ['grad_checkpoint']"),
        ({"model": ""}, "'model' must be a non-empty string"),
        ({"lora": None}, "lora/qlora needs"),
        ({"lora": {"r": 0}}, "lora.r must be an integer >= 1"),
        ({"lora": {"r": 8, "rank": 8}}, "unknown lora field(s) ['rank']"),
        ({"lora": {"r": 8, "targets": []}}, "lora.targets must be"),
        ({"lora": {"r": 8, "dropout": 1.0}}, "lora.dropout must be in [0, 1)"),
        ({"method": "qlora", "dtype": "fp32"}, "dtype must be bf16"),
        ({"method": "full"}, "'lora' given for method full"),
        ({"autocast": "yes"}, "autocast must be true or false"),
        ({"dtype": "fp32", "autocast": False}, "autocast: false is not measured"),
        ({"hf_config": {"hidden_size": 8}}, "hf_config must be a mapping with a 'model_type'"),
    ],
)
def test_bad_entry_gives_clear_error(change: dict[str, Any], fragment: str) -> None:
    with pytest.raises(H.ConfigError) as exc:
        H.validate_config({**GOOD, **change})
    assert "configuration 'x1'" in str(exc.value)
    assert fragment in str(exc.value)


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("[]", "non-empty list"),
        ("{a: 1}", "non-empty list"),
        ("- [unclosed", "cannot read configurations"),
        ([GOOD, GOOD], "appears twice"),
        (["just a string"], "expected a mapping"),
        ([{"model": "m"}], "'id' must be a non-empty string"),
    ],
)
def test_bad_file_gives_clear_error(tmp_path: Path, content: Any, fragment: str) -> None:
    with pytest.raises(H.ConfigError) as exc:
        H.load_configs(_write(tmp_path, content))
    assert fragment in str(exc.value)


def test_missing_file_is_config_error(tmp_path: Path) -> None:
    with pytest.raises(H.ConfigError, match="cannot read configurations"):
        H.load_configs(tmp_path / "nope.yaml")


def test_only_selects_in_file_order_and_rejects_unknown_ids() -> None:
    cfgs = [H.validate_config({**GOOD, "id": i}) for i in ("a", "b", "c")]
    assert [c["id"] for c in H.select(cfgs, "c, a")] == ["a", "c"]
    assert H.select(cfgs, None) == cfgs
    with pytest.raises(H.ConfigError, match=r"unknown configuration id\(s\) \['zz'\]"):
        H.select(cfgs, "a,zz")


# --- the shipped configs.yaml against the shipped catalog -----------------------------------


def test_shipped_configs_are_valid_and_span_the_axes() -> None:
    cfgs = H.load_configs(CONFIGS)
    assert len(cfgs) >= 12
    assert {c["method"] for c in cfgs} == {"full", "lora", "qlora"}
    assert {c["attention"] for c in cfgs} == {"sdpa", "eager"}
    assert {c["grad_checkpointing"] for c in cfgs} == {True, False}
    assert {"bf16", "fp32"} <= {c["dtype"] for c in cfgs}
    assert {"adamw_torch", "adamw_torch_fused", "adamw_8bit"} <= {c["optimizer"] for c in cfgs}
    assert any(c.get("lora", {}).get("dropout", 0) > 0 for c in cfgs)
    assert all(c["steps"] == 3 for c in cfgs)


@pytest.mark.skipif(not CATALOG.exists(), reason="model catalog not written yet")
def test_shipped_configs_resolve_in_catalog_small_to_large() -> None:
    catalog = H.load_catalog(CATALOG)
    sizes = []
    for cfg in H.load_configs(CONFIGS):
        hf = H.resolve_hf_config(cfg, catalog)
        assert isinstance(hf["model_type"], str)
        sizes.append(float(H.lookup_model(catalog, cfg["model"])["params_b"]))
    assert sizes == sorted(sizes), "configurations must run small to large"


def test_blind_19_set_covers_both_loops_and_an_unseen_model_type() -> None:
    """The issue-19 blind set: plain loop and Trainer, each configuration resolvable offline."""
    catalog = H.load_catalog(CATALOG)
    cfgs = H.load_configs(CONFIGS.parent / "blind-19.yaml")
    assert {c["loop"] for c in cfgs} == {"plain", "trainer"}
    assert all(c["autocast"] for c in cfgs if c["loop"] == "trainer")
    assert any(c["grad_accum"] > 1 for c in cfgs) and any(c["method"] == "qlora" for c in cfgs)
    for cfg in cfgs:
        assert isinstance(H.resolve_hf_config(cfg, catalog)["model_type"], str)
    from sparkops.planner import architecture

    unseen = [c for c in cfgs if "hf_config" in c]
    assert unseen and all(c["hf_config"]["model_type"] not in architecture.SUPPORTED_TYPES for c in unseen)


def test_trainer_loop_is_validated() -> None:
    base = {"id": "x", "model": "m", "method": "full", "batch": 1, "seq_len": 8}
    assert H.validate_config({**base, "loop": "trainer"})["autocast"] is True
    with pytest.raises(H.ConfigError, match="grad_accum"):
        H.validate_config({**base, "grad_accum": 2})
    with pytest.raises(H.ConfigError, match="loop"):
        H.validate_config({**base, "loop": "accelerate"})
    with pytest.raises(H.ConfigError, match="autocast"):
        H.validate_config({**base, "loop": "trainer", "autocast": False})


# --- catalog lookup --------------------------------------------------------------------------


@pytest.fixture
def catalog(tmp_path: Path) -> dict[str, Any]:
    data = {"models": [
        {"id": "llama-3.2-1b", "aliases": ["llama3.2-1b"], "hf_ids": ["meta-llama/Llama-3.2-1B"],
         "config": {**TINY, "hidden_size": 2048}},
        {"id": "llama-3.1-8b", "config": {**TINY, "hidden_size": 4096}},
        {"id": "broken", "config": {"hidden_size": 1}},
        "not a mapping",
    ]}
    return H.load_catalog(_write(tmp_path, data, "models.yaml"))


def test_lookup_by_id_alias_and_hf_id(catalog: dict[str, Any]) -> None:
    for name in ("llama-3.2-1b", "LLAMA3.2-1B", "meta-llama/llama-3.2-1b"):
        assert H.lookup_model(catalog, name)["id"] == "llama-3.2-1b"
    assert H.lookup_model(catalog, "llama-9b") is None
    assert H.resolve_hf_config({"model": "llama-3.1-8b"}, catalog)["hidden_size"] == 4096


def test_inline_hf_config_wins_over_catalog(catalog: dict[str, Any]) -> None:
    cfg = H.validate_config({**GOOD, "hf_config": {**TINY, "hidden_size": 96}})
    assert H.resolve_hf_config(cfg, catalog)["hidden_size"] == 96
    assert H.resolve_hf_config(cfg, None)["hidden_size"] == 96


def test_unknown_or_broken_model_is_a_lookup_error(catalog: dict[str, Any]) -> None:
    with pytest.raises(LookupError, match=r"not in the catalog.*llama-3.1-8b"):
        H.resolve_hf_config({"model": "llama-9b"}, catalog)
    with pytest.raises(LookupError, match="no config with a model_type"):
        H.resolve_hf_config({"model": "broken"}, catalog)
    with pytest.raises(LookupError, match="no catalog loaded"):
        H.resolve_hf_config({"model": "llama-3.2-1b"}, None)


@pytest.mark.parametrize("content", ["models: 3", "[1, 2]", ": : :"])
def test_bad_catalog_is_config_error(tmp_path: Path, content: str) -> None:
    with pytest.raises(H.ConfigError):
        H.load_catalog(_write(tmp_path, content, "models.yaml"))


# --- parent/child protocol with fake children ----------------------------------------------

FAKE_CHILD = textwrap.dedent(
    """
    import json, os, subprocess, sys, time
    cfg = json.loads(sys.argv[sys.argv.index("--one") + 1])
    kind = cfg["id"].split("-")[0]
    if kind == "ok":
        print("transformers says hello")          # noise on stdout is ignored
        print("@@HARNESS_ROW@@ {broken json")     # a damaged marked line is skipped
        row = {"id": cfg["id"], "measured": {"peak_allocated_bytes": 5 << 30,
               "hf": cfg["_hf_config"]["hidden_size"], "device": cfg["_device"]}, "env": {"torch": "x"},
               "error": None}
        print("@@HARNESS_ROW@@ " + json.dumps(row))
    elif kind == "crash":
        sys.stderr.write("Fatal Python error: Segmentation fault\\n")
        sys.stderr.flush()
        os.abort()
    elif kind == "exit":
        sys.stderr.write("ImportError: no module named torch\\n")
        sys.exit(7)
    elif kind == "hang":
        sub = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        open(cfg["pidfile"], "w").write(str(sub.pid))
        time.sleep(120)
    elif kind == "garbage":
        sys.stdout.write("\\x00\\xff not json at all\\n{\\"id\\": 1}\\n")
    """
)


@pytest.fixture
def fake_child(tmp_path: Path) -> list[str]:
    p = tmp_path / "fake_child.py"
    p.write_text(FAKE_CHILD)
    return [sys.executable, str(p)]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purpose
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return True


def test_each_failure_is_a_row_and_the_run_goes_on(tmp_path: Path, fake_child: list[str]) -> None:
    pidfile = tmp_path / "grandchild.pid"
    ids = ["ok-1", "crash-1", "exit-1", "hang-1", "garbage-1", "unknown-model", "ok-2"]
    cfgs = [H.validate_config({**GOOD, "id": i, "hf_config": TINY}) for i in ids]
    cfgs[3]["pidfile"] = str(pidfile)  # the fake child reads it; the row carries it too
    cfgs[5] = H.validate_config({**GOOD, "id": "unknown-model", "model": "nope"})
    out = tmp_path / "res" / "rows.jsonl"
    out.parent.mkdir()
    out.write_text('{"earlier": "row"}\n')
    lines: list[str] = []
    t0 = time.monotonic()
    rows = H.run_all(cfgs, out, catalog={}, timeout_s=3, device="cpu", child_argv=fake_child,
                     log=lines.append)
    assert time.monotonic() - t0 < 20
    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert written[0] == {"earlier": "row"}, "rows are appended, not overwritten"
    assert written[1:] == rows
    assert [r["id"] for r in rows] == ids
    kinds = [r["error"] and r["error"]["error"] for r in rows]
    assert kinds == [None, "ChildCrashed", "ChildCrashed", "Timeout", "NoResultLine", "UnknownModel", None]
    ok = rows[0]
    assert ok["measured"] == {"peak_allocated_bytes": 5 << 30, "hf": 64, "device": "cpu"}
    assert ok["method"] == "lora" and ok["batch"] == 2 and ok["child_returncode"] == 0
    assert "Segmentation fault" in rows[1]["error"]["stderr_tail"]
    assert rows[1]["error"]["returncode"] < 0 and "signal" in rows[1]["error"]["message"]
    assert rows[2]["error"]["returncode"] == 7 and "no module named torch" in rows[2]["error"]["stderr_tail"]
    assert "not json" in rows[4]["error"]["stdout_tail"]
    assert "not in the catalog" in rows[5]["error"]["message"]
    for r in rows[1:6]:
        assert r["measured"] is None and r["env"] is None
        assert len(r["error"]["message"]) <= H.MESSAGE_CHARS
    assert not _alive(int(pidfile.read_text())), "the hung child's own children are killed too"
    assert len(lines) == len(ids) and "ERROR Timeout" in lines[3] and "5.00 GiB" in lines[0]


def test_child_that_cannot_start_is_a_row(tmp_path: Path) -> None:
    cfg = H.validate_config({**GOOD, "hf_config": TINY})
    rows = H.run_all([cfg], tmp_path / "r.jsonl", catalog=None, timeout_s=5,
                     child_argv=[str(tmp_path / "no-such-python")], log=lambda s: None)
    assert rows[0]["error"]["error"] == "ChildNotStarted"


@given(st.text(max_size=400))
@settings(max_examples=200, deadline=None)
def test_parse_child_output_never_raises(text: str) -> None:
    row = H.parse_child_output(text)
    assert row is None or isinstance(row, dict)


@given(st.lists(st.text(alphabet=st.characters(blacklist_characters="\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"),
                        max_size=40), max_size=5))
@settings(max_examples=100, deadline=None)
def test_parse_child_output_takes_the_last_marked_object(noise: list[str]) -> None:
    good = H.ROW_MARKER + json.dumps({"id": "a", "v": 1})
    later = H.ROW_MARKER + json.dumps({"id": "b"})
    text = "\n".join([*noise, good, *noise, H.ROW_MARKER + "[1, 2]", *noise])
    assert H.parse_child_output(text) == {"id": "a", "v": 1}
    assert H.parse_child_output(text + "\n" + later) == {"id": "b"}


def test_summary_line_for_measured_and_failed_rows() -> None:
    base = H.config_fields(H.validate_config({**GOOD, "grad_checkpointing": True}))
    ok = {**base, "error": None, "measured": {"peak_allocated_bytes": 3 << 30, "peak_reserved_bytes": None,
                                              "step_wall_s_mean": 0.5}}
    line = H.summary_line(ok)
    assert line.startswith("x1 llama-3.2-1b lora bf16 b2 s128 gc=on sdpa:")
    assert "peak alloc 3.00 GiB" in line and "reserved - GiB" in line and "0.5 s/step" in line
    bad = H.error_row(base, "OutOfMemoryError", "CUDA out of memory. " * 100)
    assert "ERROR OutOfMemoryError (parent)" in H.summary_line(bad)


# --- the command line --------------------------------------------------------------------------


def test_main_bad_configs_exit_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, [{**GOOD, "method": "dpo"}])
    assert H.main(["--configs", str(path), "--out", str(tmp_path / "o.jsonl")]) == H.EXIT_BAD_INPUT
    assert "method 'dpo' is not one of" in capsys.readouterr().err
    assert not (tmp_path / "o.jsonl").exists()


def test_main_needs_out_and_a_readable_catalog(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, [GOOD])
    assert H.main(["--configs", str(path)]) == H.EXIT_BAD_INPUT
    assert "--out is required" in capsys.readouterr().err
    rc = H.main(["--configs", str(path), "--out", str(tmp_path / "o.jsonl"),
                 "--catalog", str(tmp_path / "missing.yaml")])
    assert rc == H.EXIT_BAD_INPUT and "cannot read the model catalog" in capsys.readouterr().err


def test_main_unknown_model_is_an_error_row_exit_1(tmp_path: Path, catalog: dict[str, Any]) -> None:
    path = _write(tmp_path, [{**GOOD, "model": "gpt-5"}])
    cat = _write(tmp_path, {"models": [{"id": "llama-3.2-1b", "config": TINY}]}, "models.yaml")
    out = tmp_path / "o.jsonl"
    assert H.main(["--configs", str(path), "--out", str(out), "--catalog", str(cat)]) == H.EXIT_SOME_FAILED
    (row,) = [json.loads(x) for x in out.read_text().splitlines()]
    assert row["error"]["error"] == "UnknownModel" and row["id"] == "x1"


def test_child_main_with_bad_payload_still_prints_a_row(capsys: pytest.CaptureFixture[str]) -> None:
    assert H.main(["--one", "{not json"]) == 0
    row = H.parse_child_output(capsys.readouterr().out)
    assert row is not None and row["error"]["error"] == "JSONDecodeError"


# --- end to end on CPU (needs torch, transformers, peft; CI has none) -------------------------


def _have(*mods: str) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in mods)


@pytest.mark.skipif(not _have("torch", "transformers", "peft"), reason="torch/transformers/peft not installed")
def test_dry_run_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "dry.jsonl"
    rc = H.main(["--dry-run", "--out", str(out), "--timeout", "120"])
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert rc == H.EXIT_OK, [r["error"] for r in rows]
    assert [r["id"] for r in rows] == [c["id"] for c in H.DRY_RUN_CONFIGS]
    full, lora, trainer = rows
    t = trainer["measured"]
    assert trainer["error"] is None and trainer["loop"] == "trainer" and trainer["autocast"] is True
    assert t["trainer_optim"].lower().endswith("adamw_torch_fused") and len(t["steps"]) == 1
    assert set(t["steps"][0]["phases"]) == {"train"} and t["peak_allocated_bytes"] is None  # no CUDA counters on CPU
    for r in (full, lora):
        m = r["measured"]
        assert r["error"] is None and r["env"]["torch"] and r["env"]["device"] == "cpu"
        assert m["gradient_checkpointing_active"] is True
        assert m["peak_allocated_bytes"] is None and m["weights_allocated_bytes"] is None  # no CUDA counters
        assert len(m["steps"]) == 2 and set(m["steps"][0]["phases"]) == {"forward", "backward", "optimizer"}
        assert all(s["loss"] > 0 for s in m["steps"])
    assert full["measured"]["trainable_params"] == full["measured"]["total_params"]
    assert full["measured"]["param_bytes_by_dtype"] == {"torch.bfloat16": 2 * full["measured"]["total_params"]}
    lm = lora["measured"]
    # r=4 on q_proj (64->64) and v_proj (64->32) in 2 layers: A r*in + B out*r
    assert lm["trainable_params"] == 2 * (4 * 64 + 64 * 4 + 4 * 64 + 32 * 4)
    assert lm["trainable_dtypes"] == ["torch.float32"] and lm["attn_implementation"] == "eager"


@pytest.mark.skipif(not _have("torch", "transformers", "peft", "bitsandbytes"),
                    reason="torch/transformers/peft/bitsandbytes not installed")
def test_qlora_path_on_cpu(tmp_path: Path) -> None:
    """Checkpoint on disk, NF4 + double-quant load, kbit preparation, LoRA: counted as 4-bit."""
    cfg = H.validate_config({"id": "q", "model": "tiny", "method": "qlora", "batch": 1, "seq_len": 16,
                             "steps": 1, "grad_checkpointing": True, "lora": {"r": 4},
                             "hf_config": {**TINY, "intermediate_size": 128, "num_key_value_heads": 2}})
    (row,) = H.run_all([cfg], tmp_path / "q.jsonl", catalog=None, timeout_s=120, device="cpu",
                       log=lambda s: None)
    if row["error"] and "backend" in row["error"]["message"].lower():
        pytest.skip(f"this bitsandbytes has no CPU 4-bit path: {row['error']['message'][:100]}")
    assert row["error"] is None, row["error"]
    m = row["measured"]
    assert m["linear4bit_modules"] == 2 * 7  # q k v o gate up down, LoRA wrappers not counted twice
    assert m["linear4bit_logical_params"] == 2 * (64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 128)
    assert m["checkpoint_bytes"] > 0 and m["trainable_dtypes"] == ["torch.float32"]
