"""plan --serve --from-log, round 20ay: what a read-only review found, each reproduced on the REAL recorded logs
(tests/planner/serve_logs/logs.yaml, read from the YAML here, never copied by hand). Every test here fails on the code
before this round (1ed8e2e^)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from sparkops import api, cli
from sparkops.core.errors import InputError
from sparkops.planner import serve
from sparkops.planner.serve_calibrate import calibrate
from sparkops.planner.serve_engines import spec_from_text
from sparkops.planner.serve_log import launch_line, read_vllm_log

LOGS = Path(__file__).parent / "serve_logs" / "logs.yaml"
BY_ID = {r["id"]: r for r in yaml.safe_load(LOGS.read_text())["records"]}
# torch's capability warning as a GB10 start prints it (vllm-project/vllm#31588, the reporter's own output)
GB10_LINE = "    Found GPU0 NVIDIA GB10 which is of cuda capability 12.1."
RETRIVA_8K = "vllm-retriva-qwen3-0.6b-rtx3060-eager-u075-8k"
RETRIVA_4K = "vllm-retriva-qwen3-0.6b-rtx3060-eager-u060-4k-seqs8"
JETHAC = "vllm-jethac-gemma4-26b-a4b-bf16-gb10-u080-8k"
MESA = "vllm-mesaclm-qwen3-8b-pooling-gb10-u020-4k-eager-0929a"
A5_CUT = "vllm-a5-qwen3-4b-lora1-4090-u080"


def log(rid: str) -> str:
    return BY_ID[rid]["log"]


def own_line(rid: str) -> str:
    line = launch_line(read_vllm_log(log(rid)).launch_args)
    assert line is not None
    return line


def machine(total: float, name: str = "") -> serve.Machine:
    return serve.Machine(source="explicit", total_gib=total, free_gib=total, gpu_name=name)


# ------------------------------------------------------------------ 1. a restart in one file


def test_two_starts_in_one_file_are_read_from_the_last_start_only():
    """Two real starts of one server (retriva's 0.75 / 8k start, then its 0.6 / 4k / 8-seq restart) in one file:
    every field is the last start's, the launch args included, and the reading says the file held two starts."""
    both = read_vllm_log(log(RETRIVA_8K) + "\n" + log(RETRIVA_4K))
    last = read_vllm_log(log(RETRIVA_4K))
    assert both.starts == 2 and last.starts == 1
    assert both.model_dump(exclude={"starts"}) == last.model_dump(exclude={"starts"})
    assert both.launch_args != read_vllm_log(log(RETRIVA_8K)).launch_args  # the first start's args are not read


def test_two_models_in_one_file_never_calibrate_one_with_the_others_pool():
    first, second = read_vllm_log(log(JETHAC)), read_vllm_log(log(RETRIVA_4K))
    both = read_vllm_log(log(JETHAC) + "\n" + log(RETRIVA_4K))
    assert both.starts == 2 and both.model == second.model != first.model
    assert both.kv_gib == second.kv_gib and both.launch_args == second.launch_args


# ------------------------------------------------------------------ 2. another GPU


def test_a_log_with_no_device_total_or_name_is_refused_unless_the_user_says_it_is_this_machine():
    rec = BY_ID[JETHAC]
    reading = read_vllm_log(log(JETHAC))
    assert reading.total_gpu_gib is None and reading.gpu_name is None
    spec = spec_from_text(own_line(JETHAC))
    shape = serve.resolve_shape(spec.model)
    h100 = machine(79.19, "NVIDIA H100 80GB HBM3")  # an H100 80GB's printed total (start-artemail-h100-u090-fail)
    refused = calibrate(reading, spec, spec, h100, log_shape=shape, shape=shape)
    assert not refused.applied and "--from-log-same-machine" in refused.refused
    ok = calibrate(reading, spec, spec, h100, log_shape=shape, shape=shape, same_machine=True)
    assert ok.applied, rec["id"]


def test_a_printed_gpu_name_matches_this_machine_or_refuses():
    reading = read_vllm_log(GB10_LINE + "\n" + log(JETHAC))
    assert reading.gpu_name == "NVIDIA GB10"
    spec = spec_from_text(own_line(JETHAC))
    shape = serve.resolve_shape(spec.model)
    gb10 = serve.machine_from_target("dgx-spark", 0.0).model_copy(update={"gpu_name": "NVIDIA GB10"})
    assert calibrate(reading, spec, spec, gb10, log_shape=shape, shape=shape).applied
    other = gb10.model_copy(update={"gpu_name": "NVIDIA H100 80GB HBM3"})
    c = calibrate(reading, spec, spec, other, log_shape=shape, shape=shape, same_machine=True)
    assert not c.applied and "another GPU" in c.refused and "GB10" in c.refused


# ------------------------------------------------------------------ 3. the log against --from-log-line


@pytest.mark.parametrize(("rid", "edit", "field"), [
    (MESA, ("--gpu-memory-utilization 0.2", "--gpu-memory-utilization 0.3"), "gpu_memory_utilization"),
    (RETRIVA_8K, ("--max-model-len 8192", "--max-model-len 4096"), "max_model_len"),
    (RETRIVA_8K, ("--enforce-eager", ""), "enforce_eager"),
    ("vllm-agvllm-qwen25-1.5b-instruct-tu102-u090-4k-eager-tp2", ("--tensor-parallel-size 2", ""),
     "tensor_parallel_size"),
    (RETRIVA_8K, ("Qwen/Qwen3-0.6B", "Qwen/Qwen3-8B"), "the model"),
])
def test_a_from_log_line_that_disagrees_with_what_the_log_printed_is_refused_by_name(rid, edit, field):
    from sparkops.planner.serve_calibrate import line_mismatch

    reading = read_vllm_log(log(rid))
    own = _recorded_line(rid)
    assert line_mismatch(reading, spec_from_text(own)) is None  # the log's own line agrees
    assert edit[0] in own
    why = line_mismatch(reading, spec_from_text(own.replace(edit[0], edit[1])))
    assert why is not None and field in why


def _recorded_line(rid: str) -> str:
    """The record's launch line: the printed args where the log prints them, else the record's own flags."""
    args = read_vllm_log(log(rid)).launch_args
    if args and not read_vllm_log(log(rid)).launch_args_cut:
        return own_line(rid)
    rec = BY_ID[rid]
    parts = ["vllm", "serve", rec["model"]]
    for k, v in (rec.get("flags") or {}).items():
        flag = "--" + k.replace("_", "-")
        parts += [flag] if v is True else ([f"--no-{k.replace('_', '-')}"] if v is False else [flag, str(v)])
    return " ".join(parts)


def test_the_printed_share_refuses_a_different_share_end_to_end():
    out = api.serve_plan(workload="vllm serve Qwen/Qwen3-8B --runner pooling --gpu-memory-utilization 0.3 "
                                  "--max-model-len 4096 --enforce-eager", target="dgx-spark", offline=True,
                         from_log=log(MESA), from_log_same_machine=True,
                         from_log_line="vllm serve Qwen/Qwen3-8B --runner pooling --gpu-memory-utilization 0.3 "
                                       "--max-model-len 4096 --enforce-eager")
    assert not out.calibration.applied and "gpu_memory_utilization" in out.calibration.refused


# ------------------------------------------------------------------ 4. a cut non-default args


def test_a_cut_non_default_args_is_not_planned_as_the_launch_line():
    reading = read_vllm_log(log(A5_CUT))
    assert reading.launch_args_cut
    out = api.serve_plan(workload="vllm serve Qwen/Qwen3-4B", target="dgx-spark", offline=True,
                         from_log=log(A5_CUT), from_log_same_machine=True)
    assert not out.calibration.applied and "cut" in out.calibration.refused
    assert "--from-log-line" in out.calibration.refused


# ------------------------------------------------------------------ 5. --from-log-line must be a launch line


def test_a_from_log_line_that_is_not_a_launch_line_is_an_input_error_naming_the_option():
    with pytest.raises(InputError, match="--from-log-line"):
        api.serve_plan(workload="vllm serve Qwen/Qwen3-8B", target="dgx-spark", offline=True, from_log=log(MESA),
                       from_log_line="Qwen/Qwen3-8B gpu util 0.2 max len 4096")
    with pytest.raises(InputError, match="^--from-log-line: "):
        api.serve_plan(workload="vllm serve Qwen/Qwen3-8B", target="dgx-spark", offline=True, from_log=log(MESA),
                       from_log_line="vllm serve Qwen/Qwen3-8B --gpu-memory-utilization lots")


# ------------------------------------------------------------------ 6. pooling vs generate


def test_a_pooling_log_does_not_calibrate_a_generate_plan_nor_the_reverse():
    rec = BY_ID[MESA]
    pooled = spec_from_text(_recorded_line(MESA))
    assert serve.vllm_pooling(pooled) == "embed"
    generate = pooled.model_copy(update={"runner": None})
    shape = serve.resolve_shape(pooled.model)
    m = machine(float(rec["gpu_total_gib"] or read_vllm_log(log(MESA)).total_gpu_gib))
    reading = read_vllm_log(log(MESA))
    same = calibrate(reading, pooled, pooled, m, log_shape=shape, shape=shape)
    assert same.applied and "sampler" not in same.carried  # 10: a pooling start runs no sampler
    for a, b in ((pooled, generate), (generate, pooled)):
        c = calibrate(reading, a, b, m, log_shape=shape, shape=shape)
        assert not c.applied and "pooling" in c.refused


# ------------------------------------------------------------------ 9. MCP: a long log line is no file name


def test_mcp_takes_a_long_one_line_log_text_without_touching_the_filesystem():
    from sparkops.mcp_server import tools

    rid = "vllm-tokenkaki-qwen3-8b-a100-40g-defaults"
    line = next(x for x in log(rid).splitlines() if len(x) > 255 and "/" not in x)
    with pytest.raises(OSError):  # what the old check did with it
        Path(line).is_file()
    assert tools._log_arg(line) == line
    out = tools.plan_serve(workload="vllm serve Qwen/Qwen3-8B", target="dgx-spark", offline=True, from_log=line)
    assert out["calibration"]["applied"] is False and out["calibration"]["refused"]


# ------------------------------------------------------------------ 10. the low ones


def _cli(*args: str):
    return CliRunner().invoke(cli.app, list(args), standalone_mode=False, catch_exceptions=False)


def test_from_log_without_serve_is_an_error_not_silently_ignored(tmp_path):
    p = tmp_path / "start.log"
    p.write_text(log(MESA))
    with pytest.raises(Exception, match="--serve"):
        _cli("plan", "--json", "--budget-gb", "100", "-w", "lora llama-3.1-8b seq 2048", "--from-log", str(p))


def test_the_eager_flag_of_a_from_log_line_reaches_the_compile_state():
    line = _recorded_line(MESA)
    assert "--enforce-eager" in line and read_vllm_log(log(MESA)).compile_state != "eager"
    out = api.serve_plan(workload=line, target="dgx-spark", offline=True, from_log=log(MESA), from_log_line=line,
                         from_log_same_machine=True)
    assert out.calibration.log_compile_state == "eager"


def test_the_logs_tokens_per_gib_are_compared_with_the_plans_page_arithmetic():
    """A hybrid model (Qwen3.6: gated DeltaNet beside attention) whose log's tokens per GiB are off the plan's by
    more than 10 %: the calibration says so; a dense model's own log (Qwen3-8B) does not."""
    def notes(rid: str) -> list[str]:
        rec = BY_ID[rid]
        reading = read_vllm_log(log(rid))
        spec = spec_from_text(_recorded_line(rid))
        shape = serve.resolve_shape(spec.model)
        total = rec.get("gpu_total_gib") or reading.total_gpu_gib or 1000.0
        c = calibrate(reading, spec, spec, machine(float(total)), log_shape=shape, shape=shape, same_machine=True)
        assert c.applied, (rid, c.refused)
        return [n for n in c.notes if "tokens per GiB" in n]

    assert notes("vllm-wsl-qwen36-35b-a3b-nvfp4-u080-8k-seqs32-eager")
    assert not notes(MESA)


def test_cli_same_machine_flag_and_json(tmp_path):
    p = tmp_path / "start.log"
    p.write_text(log(JETHAC))
    base = ["plan", "--serve", "--offline", "--target", "dgx-spark", "--json", "-w", own_line(JETHAC),
            "--from-log", str(p)]
    assert "--from-log-same-machine" in json.loads(_cli(*base).stdout)["calibration"]["refused"]
    assert json.loads(_cli(*base, "--from-log-same-machine").stdout)["calibration"]["applied"]


def test_a_gpu_name_line_gives_the_name_alone():
    """The Kaggle notebook's own line (`GPU 0: Tesla T4 total=14.56 GiB free=14.46 GiB`): the name is the device's,
    not the figures after it (else the same T4 reads as 'another GPU')."""
    reading = read_vllm_log(log("vllm-kaggle-qwen3-8b-awq-t4-eager-u062-3k"))
    assert reading.gpu_name == "Tesla T4"
    assert read_vllm_log("GPU 0: NVIDIA H100 80GB HBM3").gpu_name == "NVIDIA H100 80GB HBM3"
