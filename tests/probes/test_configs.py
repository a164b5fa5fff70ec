"""Config scan (G10): TP / multi-node settings in a workload tree, within limits, honest about gaps."""

from __future__ import annotations

import codecs
import contextlib
import os
import pickle
import pwd
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from build_fixtures import patch, run_check
from conftest import FIXTURES, load_facts_fixture
from sparkops.core.findings import Status
from sparkops.facts.model import ConfigScanFacts
from sparkops.facts.reading import Why
from sparkops.probes import CollectOptions, configs
from sparkops.probes.configs import (
    Limits,
    WalkLimit,
    decode_text,
    file_kind,
    find_line,
    parse_structured,
    scan_paths,
    script_jobs,
    settings_in_file,
    shell_commands,
    walk_structured,
    walk_yaml,
)

WORKLOAD = FIXTURES / "raw" / "configs" / "workload"
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
IGNORE = frozenset(configs.load_kb().thresholds.g10.ignore_dirs)


def limits(**kw) -> Limits:
    base = {"max_files": 2000, "max_file_bytes": 1 << 20, "max_depth": 8, "time_budget_s": 30.0,
            "ignore_dirs": IGNORE, "not_config_names": frozenset(configs.load_kb().thresholds.g10.not_config_names)}
    base.update(kw)
    return Limits(**base)


def line_of(path: Path, needle: str, nth: int = 1) -> int:
    seen = 0
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if needle in line:
            seen += 1
            if seen == nth:
                return i
    raise AssertionError(f"{needle!r} not in {path}")


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """The recorded workload plus what a real checkout has around it."""
    root = tmp_path / "work"
    shutil.copytree(WORKLOAD, root)
    _write(root / ".git" / "hooks" / "pre-push.sh", "vllm serve x --tensor-parallel-size 8\n")
    _write(root / ".venv" / "lib" / "python3.12" / "site-packages" / "pkg" / "cfg.yaml", "tp_size: 8\n")
    _write(root / "myenv" / "pyvenv.cfg", "home = /usr/bin\nversion = 3.12.3\n")  # a venv not named like one
    _write(root / "myenv" / "lib" / "defaults.yaml", "tensor_parallel_size: 8\n")
    _write(root / "node_modules" / "tool" / "run.sh", "--tp 8\n")
    _write(root / "weights" / "model.safetensors.index.json", '{"metadata": {"total_size": 1}}')
    _write(root / "bin.sh", "--tp 8\x00\x01binary")
    return root


def _hits(facts: ConfigScanFacts, root: Path) -> set[tuple[str, int, str, str, str]]:
    return {(str(Path(h.file).relative_to(root)), h.line, h.key, h.value, h.kind) for h in facts.hits}


# --------------------------------------------------------------------------- the workload tree
def test_workload_tree_hits(tree):
    f = scan_paths([tree], limits())
    got = _hits(f, tree)
    s, t = tree / "serve", tree / "train"
    expected = {  # the compose command's settings stand at its `command:` key
        ("serve/docker-compose.yml", line_of(s / "docker-compose.yml", "command:"),
         "tensor-parallel-size", "2", "tensor_parallel"),
        ("serve/engine.yaml", line_of(s / "engine.yaml", "tensor_parallel_size: 2"), "tensor_parallel_size", "2",
         "tensor_parallel"),
        ("serve/engine.yaml", line_of(s / "engine.yaml", "tensor_parallel_size: 1"), "tensor_parallel_size", "1",
         "tensor_parallel"),
        ("serve/vllm-config.yaml", line_of(s / "vllm-config.yaml", "tensor-parallel-size"), "tensor-parallel-size",
         "1", "tensor_parallel"),
        ("train/launch_torchrun.sh", line_of(t / "launch_torchrun.sh", "--nnodes 2"), "nnodes", "2", "nodes"),
        ("train/accelerate_multinode.yaml", line_of(t / "accelerate_multinode.yaml", "num_machines"), "num_machines",
         "2", "nodes"),
        ("train/ds_inference.json", line_of(t / "ds_inference.json", "tp_size"), "tp_size", "2", "tensor_parallel"),
        ("train/hostfile", 1, "hostfile", "2", "nodes"),
        ("train/settings.toml", line_of(t / "settings.toml", "tensor_parallel_size"), "tensor_parallel_size", "1",
         "tensor_parallel"),
        ("train/settings.toml", line_of(t / "settings.toml", "world_size"), "world_size", "2", "world"),
    }
    # Python source (infer.py) and Markdown (NOTES.md) are not configs; the Helm template does not parse
    # as YAML and is listed as not read, never grepped
    assert got == expected
    # nothing from .git, virtualenvs (by name or by pyvenv.cfg), node_modules, or the binary file
    assert not any(h.value == "8" for h in f.hits)
    assert f.scanned and not f.truncated and f.unreadable == []
    assert f.files_read == 9 and f.files_skipped == 2  # the safetensors index is not a config
    reasons = {Path(x.path).name: x.reason for x in f.skipped}
    assert "did not parse as YAML" in reasons["deployment.yaml"] and "binary" in reasons["bin.sh"]
    assert f.roots == [str(tree.resolve())]
    jobs = {Path(j.id).name: j for j in f.jobs}
    assert jobs[f"docker-compose.yml:{line_of(s / 'docker-compose.yml', 'command:')}"].launcher == "vllm"
    assert jobs[f"launch_torchrun.sh:{line_of(t / 'launch_torchrun.sh', 'torchrun')}"].launcher == "torchrun"


def test_near_misses_produce_no_hit():
    path = WORKLOAD / "train" / "negatives.sh"
    assert script_jobs(path, path.read_text()) == ([], [])


def unprivileged(fn):
    """Run ``fn`` as the current user, or — under root, where mode 000 blocks nothing — in a forked
    child that dropped to ``nobody``; its (picklable) result comes back through a pipe."""
    if not IS_ROOT:
        return fn()
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("running as root and there is no 'nobody' user to drop to")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            data = pickle.dumps(("ok", fn()))
        except BaseException as exc:
            data = pickle.dumps(("err", repr(exc)))
        with os.fdopen(w, "wb") as fh:
            fh.write(data)
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        data = fh.read()
    os.waitpid(pid, 0)
    status, value = pickle.loads(data)
    assert status == "ok", value
    return value


@pytest.fixture
def open_tree() -> Iterator[Path]:
    """The workload in a world-traversable directory (pytest's tmp_path is private to root)."""
    base = Path(tempfile.mkdtemp(prefix="sparkops-g10-"))
    try:
        base.chmod(0o755)
        shutil.copytree(WORKLOAD, base / "work")
        for p in (base / "work").rglob("*"):
            p.chmod(0o755 if p.is_dir() else 0o644)
        yield base / "work"
    finally:
        for p in base.rglob("*"):
            with contextlib.suppress(OSError):
                p.chmod(0o755 if p.is_dir() else 0o644)
        shutil.rmtree(base, ignore_errors=True)


def test_unreadable_directory_is_reported_not_read_as_no_tp(open_tree):
    private = open_tree / "private"
    _write(private / "run.sh", "vllm serve big --tensor-parallel-size 2\n")
    private.chmod(0)
    f = unprivileged(lambda: scan_paths([open_tree], limits()))
    assert f.unreadable == [str(private)]
    assert not any("private" in h.file for h in f.hits)
    assert any(h.file.endswith("docker-compose.yml") for h in f.hits)  # the rest was still read


def test_unreadable_file_is_reported(open_tree):
    secret = _write(open_tree / "serve" / "secret.yaml", "tensor_parallel_size: 2\n")
    secret.chmod(0)
    f = unprivileged(lambda: scan_paths([open_tree], limits()))
    assert f.unreadable == [str(secret)]
    assert not any(h.file == str(secret) for h in f.hits)


def test_unreadable_root_is_reported(open_tree):
    open_tree.chmod(0)
    f = unprivileged(lambda: scan_paths([open_tree], limits()))
    assert f.unreadable == [str(open_tree)] and f.hits == [] and f.files_read == 0


# --------------------------------------------------------------------------- limits
def test_depth_limit_truncates_and_says_where(tmp_path):
    deep = tmp_path / "a" / "b" / "c" / "d"
    _write(deep / "launch.sh", "torchrun --nnodes=2 train.py\n")
    _write(tmp_path / "a" / "top.sh", "torchrun --nnodes=1 train.py\n")
    f = scan_paths([tmp_path], limits(max_depth=2))
    assert [h.value for h in f.hits] == ["1"]
    assert f.truncated
    assert any("max_depth=2" in n and str(tmp_path / "a" / "b" / "c") in n for n in f.notes)
    g = scan_paths([tmp_path], limits(max_depth=4))
    assert sorted(h.value for h in g.hits) == ["1", "2"] and not g.truncated


def test_file_limit_truncates(tmp_path):
    for i in range(10):
        _write(tmp_path / f"job{i}.sh", f"torchrun --nnodes {i} x.py\n")
    f = scan_paths([tmp_path], limits(max_files=3))
    assert f.truncated and f.files_read == 3 and len(f.hits) == 3
    assert any("max_files=3" in n for n in f.notes)


def test_oversized_and_binary_files_are_skipped_not_read(tmp_path):
    _write(tmp_path / "big.yaml", "tensor_parallel_size: 2\n" + "# pad\n" * 400)
    _write(tmp_path / "small.yaml", "tensor_parallel_size: 1\n")
    (tmp_path / "blob.json").write_bytes(b'{"tp_size": 2}\x00\x00')
    f = scan_paths([tmp_path], limits(max_file_bytes=100))
    assert f.files_read == 1 and f.files_skipped == 2
    assert [h.value for h in f.hits] == ["1"]
    assert sorted((Path(x.path).name, x.reason.split(" (")[0]) for x in f.skipped) == [
        ("big.yaml", "over 100 bytes"), ("blob.json", "binary")]


def test_time_budget_truncates(tmp_path):
    _write(tmp_path / "a.sh", "--tp 2\n")
    f = scan_paths([tmp_path], limits(time_budget_s=0.0))
    assert f.truncated and any("time budget" in n for n in f.notes)


# --------------------------------------------------------------------------- symlinks
def test_symlinked_config_directory_is_followed(tmp_path):
    outside = tmp_path / "shared" / "serving"
    _write(outside / "engine.yaml", "model: big\ntensor_parallel_size: 2\n")
    root = tmp_path / "work"
    _write(root / "run.sh", "vllm serve big --config configs/engine.yaml\n")
    (root / "configs").symlink_to(outside, target_is_directory=True)
    f = scan_paths([root], limits())
    assert [(h.file, h.line, h.value) for h in f.hits] == [(str(root / "configs" / "engine.yaml"), 2, "2")]
    assert f.files_read == 2 and not f.truncated and f.unreadable == []


def test_symlink_loop_terminates_and_is_reported(tmp_path):
    _write(tmp_path / "real" / "x.sh", "--tp 2\n")
    (tmp_path / "real" / "loop").symlink_to(tmp_path, target_is_directory=True)  # back to the root
    (tmp_path / "real" / "self").symlink_to(tmp_path / "real" / "self")  # ELOOP
    (tmp_path / "up").symlink_to(tmp_path.parent, target_is_directory=True)  # above the root
    f = scan_paths([tmp_path], limits())
    assert [(h.file, h.value) for h in f.hits] == [(str(tmp_path / "real" / "x.sh"), "2")]
    assert not f.truncated and f.unreadable == []  # a loop holds nothing that was not scanned
    notes = " | ".join(f.notes)
    assert f"{tmp_path / 'real' / 'loop'}: symlink loop" in notes
    assert f"{tmp_path / 'real' / 'self'}: symlink loop" in notes
    assert f"{tmp_path / 'up'}: symlink loop" in notes


def test_mutual_symlinks_terminate(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _write(a / "x.sh", "--tp 2\n")
    _write(b / "y.sh", "--nnodes 2\n")
    (a / "to_b").symlink_to(b, target_is_directory=True)
    (b / "to_a").symlink_to(a, target_is_directory=True)
    t0 = time.monotonic()
    f = scan_paths([tmp_path], limits())
    assert time.monotonic() - t0 < 5
    assert sorted((Path(h.file).relative_to(tmp_path).as_posix(), h.value) for h in f.hits) == [
        ("a/x.sh", "2"), ("b/y.sh", "2")]  # each real directory once, under its own path
    assert any("to_b: symlink to" in n and "not followed again" in n for n in f.notes)


def test_symlinked_directory_outside_reached_twice_is_read_once(tmp_path):
    outside = tmp_path / "cfg"
    _write(outside / "serve.sh", "vllm serve m --tensor-parallel-size 4\n")
    root = tmp_path / "work"
    root.mkdir()
    (root / "one").symlink_to(outside, target_is_directory=True)
    (root / "two").symlink_to(outside, target_is_directory=True)
    f = scan_paths([root], limits())
    assert [h.file for h in f.hits] == [str(root / "one" / "serve.sh")]
    assert any(str(root / "two") in n and "not followed again" in n for n in f.notes)


def test_dangling_symlinks_are_reported_unreadable(tmp_path):
    _write(tmp_path / "run.sh", "--tp 1\n")
    (tmp_path / "configs").symlink_to(tmp_path / "unmounted" / "configs", target_is_directory=True)
    (tmp_path / "serve.yaml").symlink_to(tmp_path / "gone.yaml")
    (tmp_path / "model.safetensors").symlink_to(tmp_path / "blobs" / "abc")  # never read: not reported
    (tmp_path / ".#run.sh").symlink_to("user@host.1234:1700000000")  # an editor's lock file
    f = scan_paths([tmp_path], limits())
    assert f.unreadable == [str(tmp_path / "configs"), str(tmp_path / "serve.yaml")]
    assert any("configs: dangling symlink to" in n for n in f.notes)
    assert [h.value for h in f.hits] == ["1"]


def test_symlinked_directories_obey_depth_and_ignore_rules(tmp_path):
    outside = tmp_path / "elsewhere"
    _write(outside / "deep" / "x.sh", "--tp 2\n")
    root = tmp_path / "work"
    _write(root / "a" / "top.sh", "--tp 1\n")
    (root / "a" / "link").symlink_to(outside, target_is_directory=True)  # depth 2; its deep/ is depth 3
    (root / "node_modules").symlink_to(outside, target_is_directory=True)  # ignored by name
    f = scan_paths([root], limits(max_depth=2))
    assert [h.value for h in f.hits] == ["1"] and f.truncated
    assert any("max_depth=2" in n and str(root / "a" / "link" / "deep") in n for n in f.notes)
    g = scan_paths([root], limits(max_depth=3))
    assert sorted(h.value for h in g.hits) == ["1", "2"] and not g.truncated


def test_overlapping_roots_are_scanned_once(tmp_path):
    _write(tmp_path / "sub" / "x.sh", "--tp 2\n")
    f = scan_paths([tmp_path, tmp_path / "sub"], limits())
    assert len(f.hits) == 1 and any("already scanned" in n for n in f.notes)


def test_single_file_and_missing_roots(tmp_path):
    one = _write(tmp_path / "serve.sh", "vllm serve m --tensor_parallel_size=2\n")
    f = scan_paths([one, tmp_path / "nope"], limits())
    assert [(h.key, h.value) for h in f.hits] == [("tensor_parallel_size", "2")]
    assert str(tmp_path / "nope") in f.unreadable
    assert any("does not exist" in n for n in f.notes)


def test_a_virtualenv_given_as_root_is_not_scanned(tmp_path):
    _write(tmp_path / "pyvenv.cfg", "home = /usr/bin\n")
    _write(tmp_path / "lib" / "x.yaml", "tp_size: 2\n")
    f = scan_paths([tmp_path], limits())
    assert f.hits == [] and any("virtualenv" in n for n in f.notes)


def test_collect_defaults_to_the_working_directory(tmp_path, monkeypatch):
    _write(tmp_path / "run.sh", "sglang serve --tp 2\n")
    monkeypatch.chdir(tmp_path)
    f = configs.collect(CollectOptions(env={}))
    assert f.roots == [str(tmp_path.resolve())] and [h.value for h in f.hits] == ["2"]
    g = configs.collect(CollectOptions(env={}, config_paths=(WORKLOAD / "train",)))
    assert any(h.key == "num_machines" for h in g.hits)


def test_unavailable_section():
    f = configs.unavailable(Why.timeout, "late")
    assert not f.scanned and f.notes == ["timeout: late"]


# --------------------------------------------------------------------------- pure pieces
def _shell(text: str) -> list[tuple[int, str, str, str]]:
    return [(h.line, h.key, h.value, h.kind) for h in script_jobs(Path("x.sh"), text)[1]]


@pytest.mark.parametrize(("text", "expected"), [
    ("python -m sglang.launch_server --tp-size 4", [(1, "tp-size", "4", "tensor_parallel")]),
    ("vllm serve x \\\n    --tensor-parallel-size \\\n    2", [(2, "tensor-parallel-size", "2", "tensor_parallel")]),
    ("torchrun --nnodes=1:4 t.py", [(1, "nnodes", "1:4", "nodes")]),
    ("#!/bin/bash\n#SBATCH --nodes=2\nsrun vllm serve m -tp 2", [(2, "nodes", "2", "nodes"), (3, "tp", "2", "tensor_parallel")]),
    ("deepspeed --num_nodes 2 --num_gpus 1 t.py", [(1, "num_nodes", "2", "nodes")]),
    ("accelerate launch --num_machines 2 t.py", [(1, "num_machines", "2", "nodes")]),
    ("text-generation-launcher --num-shard 2", [(1, "num-shard", "2", "tensor_parallel")]),
    ("megatron --tensor-model-parallel-size 2", [(1, "tensor-model-parallel-size", "2", "tensor_parallel")]),
    ("cd /srv && vllm serve m --tp 2 | tee log; echo done", [(1, "tp", "2", "tensor_parallel")]),
    ('RUN ["vllm", "serve", "m", "--tensor-parallel-size", "2"]', [(1, "tensor-parallel-size", "2", "tensor_parallel")]),
])
def test_shell_flags(text, expected):
    assert _shell(text) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("vllm serve m --tensor-parallel-size $TP", [(1, "tensor-parallel-size", "$TP", "tensor_parallel")]),
    ('vllm serve m --tensor-parallel-size "${TP_SIZE:-2}"',
     [(1, "tensor-parallel-size", "${TP_SIZE:-2}", "tensor_parallel")]),
    ("vllm serve m --tp=${TP:-${DEFAULT_TP}}", [(1, "tp", "${TP:-${DEFAULT_TP}}", "tensor_parallel")]),
    ("python -m sglang.launch_server --tp $1", [(1, "tp", "$1", "tensor_parallel")]),
    ("vllm serve m --tensor-parallel-size $(nproc)", [(1, "tensor-parallel-size", "$(nproc)", "tensor_parallel")]),
    ("torchrun --nnodes=$NNODES t.py", [(1, "nnodes", "$NNODES", "nodes")]),
    # the script's own assignments resolve; an export counts as one
    ("TP=2\nvllm serve m --tensor-parallel-size $TP", [(2, "tensor-parallel-size", "2", "tensor_parallel")]),
    ("export NN=2\ntorchrun --nnodes ${NN} t.py", [(2, "nnodes", "2", "nodes")]),
    # not settings: a comment, another flag after the flag, a flag of another name, a bare dollar
    ("# vllm serve m --tensor-parallel-size 2", []),
    ("vllm serve m  # --tensor-parallel-size 2", []),
    ("vllm serve m --tensor-parallel-size --max-model-len 4096", []),
    ("python x.py --tp $ --top-p 0.9", []),
    ("python x.py --tpx 4", []),
    ('echo "run with --tensor-parallel-size 2 later"', []),
    ("TENSOR_PARALLEL_SIZE=2", []),  # a shell variable is not a launcher's setting until it is used
])
def test_shell_variables_comments_and_near_misses(text, expected):
    assert _shell(text) == expected


def test_env_file_settings():
    jobs, hits, _ = settings_in_file(Path(".env"), "MODEL=big\nTENSOR_PARALLEL_SIZE=2\n# NNODES=4\nexport NNODES=2\n", "env")
    assert [(h.line, h.key, h.value, h.kind) for h in hits] == [(2, "TENSOR_PARALLEL_SIZE", "2", "tensor_parallel"),
                                                             (4, "NNODES", "2", "nodes")]
    assert [j.id for j in jobs] == [".env"]


def test_commented_setting_in_yaml_is_not_a_setting(tmp_path):
    """Issue 15 case 2: a live `tensor_model_parallel_size: 1` beside a commented-out `2`."""
    cfg = _write(tmp_path / "pp.yaml", "trainer:\n  num_nodes: 2\nmodel:\n  tensor_model_parallel_size: 1\n"
                 "  # tensor_model_parallel_size: 2\n  pipeline_model_parallel_size: 2\n")
    f = scan_paths([cfg], limits())
    assert [(h.key, h.value) for h in f.hits] == [("num_nodes", "2"), ("tensor_model_parallel_size", "1")]


def test_yaml_command_lists_are_launch_commands(tmp_path):
    k8s = _write(tmp_path / "deploy.yaml", "spec:\n  containers:\n    - name: vllm\n      command: [vllm, serve]\n"
                 "      args:\n        - meta-llama/Llama-3.1-70B\n        - --tensor-parallel-size\n        - '2'\n")
    f = scan_paths([k8s], limits())
    assert [(h.line, h.key, h.value, h.job) for h in f.hits] == [(5, "tensor-parallel-size", "2", f"{k8s}:5")]


def test_notebook_shell_cells_are_read_and_prose_is_not(tmp_path):
    nb = {"cells": [{"cell_type": "markdown", "source": ["Run `vllm serve m -tp 2` across two Sparks"]},
                    {"cell_type": "code", "source": ["llm = LLM(tensor_parallel_size=2)\n"]},
                    {"cell_type": "code", "source": ["!torchrun --nnodes 2 train.py\n"]}]}
    path = _write(tmp_path / "run.ipynb", __import__("json").dumps(nb))
    f = scan_paths([path], limits())
    assert [(h.key, h.value) for h in f.hits] == [("nnodes", "2")]


@pytest.mark.parametrize(("data", "named_reason"), [
    ("x" * 2000, "over 1000 bytes"),
    ("\ufefftensor_parallel_size: 2\n".encode("utf-16"), None),  # read: UTF-16 with a BOM is text
])
def test_named_files_are_read_or_listed_with_a_reason(tmp_path, data, named_reason):
    path = tmp_path / "cfg.yaml"
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    f = scan_paths([path], limits(max_file_bytes=1000))
    if named_reason is None:
        assert [(h.key, h.value) for h in f.hits] == [("tensor_parallel_size", "2")] and not f.skipped
    else:
        assert f.hits == [] and f.skipped[0].named and named_reason in f.skipped[0].reason


def test_documentation_and_source_named_with_config_are_listed_not_read(tmp_path):
    md = _write(tmp_path / "HOWTO.md", "vllm serve m -tp 2\n")
    py = _write(tmp_path / "serve.py", "LLM(tensor_parallel_size=2)\n")
    f = scan_paths([md, py], limits())
    assert f.hits == [] and {(Path(x.path).name, x.named) for x in f.skipped} == {("HOWTO.md", True), ("serve.py", True)}
    assert "Markdown" in f.skipped[0].reason


def test_reports_this_tool_wrote_are_not_configs(tmp_path):
    _write(tmp_path / "env-report.json", '{"tool_version": "0.1.0", "schema_version": 1, "tp_size": 2}')
    f = scan_paths([tmp_path], limits())
    assert f.hits == [] and f.skipped[0].unread is False and "written by spark-ops" in f.skipped[0].reason


def test_default_scope_reads_only_the_working_directory_own_files(tmp_path):
    _write(tmp_path / "run.sh", "vllm serve m --tp 1\n")
    _write(tmp_path / "tests" / "fixtures" / "two_node.sh", "torchrun --nnodes 2 t.py --tp 2\n")
    f = scan_paths([tmp_path], limits(), default_scope=True)
    assert [h.value for h in f.hits] == ["1"] and not f.truncated and f.scope == "default"
    assert any("default scope" in n for n in f.notes)


@pytest.mark.parametrize(("data", "text"), [
    (b"a: 1\n", "a: 1\n"),
    (codecs.BOM_UTF8 + b"a: 1\n", "a: 1\n"),
    ("a: 1\n".encode("utf-16-le"), "a: 1\n"),  # BOM-less UTF-16 (every other byte zero)
    ("a: 1\n".encode("utf-32"), "a: 1\n"),
    (b"\x7fELF\x02\x01\x00\x00\x00\x00", None),
])
def test_decode_text(data, text):
    assert decode_text(data)[0] == text


def test_variable_tp_in_every_file_kind_is_a_hit_with_its_line(tmp_path):
    _write(tmp_path / "serve.sh", "#!/bin/sh\nTP=${TP:-2}\nvllm serve big \\\n  --tensor-parallel-size \"$TP\"\n")
    _write(tmp_path / ".env", "MODEL=big\nTENSOR_PARALLEL_SIZE=2\n")
    _write(tmp_path / "compose.yaml", "services:\n  vllm:\n    environment:\n      TP_SIZE: ${TP_SIZE:-2}\n")
    _write(tmp_path / "engine.yaml", "engine:\n  tensor_parallel_size: ${TP}\n")
    _write(tmp_path / "ds.json", '{\n  "tensor_parallel": {\n    "tp_size": "$TP"\n  }\n}\n')
    _write(tmp_path / "run.toml", '[serve]\ntensor_parallel_size = "{{ tp }}"\n')
    f = scan_paths([tmp_path], limits())
    assert {(Path(h.file).name, h.line, h.key, h.value) for h in f.hits} == {
        ("serve.sh", 4, "tensor-parallel-size", "${TP:-2}"),  # the flag's line; the default may be overridden
        (".env", 2, "TENSOR_PARALLEL_SIZE", "2"),
        ("compose.yaml", 4, "TP_SIZE", "${TP_SIZE:-2}"),
        ("engine.yaml", 2, "tensor_parallel_size", "${TP}"),
        ("ds.json", 3, "tp_size", "$TP"),
        ("run.toml", 2, "tensor_parallel_size", "{{ tp }}"),
    }
    assert all(h.kind == "tensor_parallel" for h in f.hits)


@pytest.mark.parametrize("fixture", ["gb10_ngc_2509_healthy", "gb10_two_node_tp2", "h200_generic"])
def test_variable_tp_reaches_g10_as_a_warning_with_file_and_line(tmp_path, fixture):
    """End to end: a TP setting whose value is a variable warns "not a plain number" (never passes,
    never crashes), on one Spark, on two, and on a generic GPU host."""
    script = _write(tmp_path / "serve.sh", "vllm serve big --tensor-parallel-size ${TP_SIZE:-2}\n")
    scanned = scan_paths([tmp_path], limits())
    base = load_facts_fixture(fixture)
    # keep only the scanned TP hit (the two-node fixture's own hits would fail it first)
    finding = run_check("G10", patch(base, {"configs": scanned.model_dump()}))
    assert finding.status is Status.warn
    assert f"{script}:1" in finding.summary and "${TP_SIZE:-2}" in finding.summary
    assert "not a plain number" in finding.summary


def test_walk_structured_nested_and_typed():
    doc = {"a": [{"Tensor-Parallel-Size": 2}, {"tp": True}, {"nodes": ["n1", "n2"]}],
           "b": {"world_size": "4", "tp_size": 2.5}}
    assert list(walk_structured(doc)) == [("Tensor-Parallel-Size", "2", "tensor_parallel"),
                                          ("world_size", "4", "world")]


def test_walk_structured_reference_values():
    doc = {"TP_SIZE": "${TP:-2}", "nnodes": "$NNODES", "tp": "auto", "world_size": None,
           "tensor_parallel_size": "-1", "x": {"Tensor_Parallel_Size": " {{ .Values.tp }} "}}
    assert list(walk_structured(doc)) == [("TP_SIZE", "${TP:-2}", "tensor_parallel"), ("nnodes", "$NNODES", "nodes"),
                                          ("Tensor_Parallel_Size", "{{ .Values.tp }}", "tensor_parallel")]


def test_walk_structured_visits_shared_and_recursive_containers_once():
    shared = {"tp_size": 2}
    level = [shared] * 9
    for _ in range(12):  # 9**12 paths through 12 lists
        level = [level] * 9
    t0 = time.monotonic()
    assert list(walk_structured({"a": shared, "b": level})) == [("tp_size", "2", "tensor_parallel")]
    assert time.monotonic() - t0 < 0.5
    loop: list = [{"nodes": 2}]
    loop.append(loop)
    assert list(walk_structured(loop)) == [("nodes", "2", "nodes")]


def test_walk_structured_stops_at_its_limits():
    big = [{"x": i} for i in range(5000)] + [{"tp_size": 2}]
    limit = WalkLimit(max_nodes=100)
    assert list(walk_structured(big, limit=limit)) == [] and limit.cut == "stopped after 100 nodes"
    late = WalkLimit(deadline=time.monotonic() - 1)
    assert list(walk_structured(big, limit=late)) == [] and late.cut == "stopped at the time budget"
    assert late.nodes <= 256  # the clock is read every 256 nodes
    assert list(walk_structured(big)) == [("tp_size", "2", "tensor_parallel")]


def test_walk_yaml_lines_aliases_and_multidoc():
    text = ("base: &base\n  tp_size: 2\nserve:\n  <<: *base\n  tensor-parallel-size: '${TP}'\n"
            "  nodes: [n1, n2]\n  nnodes: true\n  ? [complex, key]\n  : 3\n---\nworld_size: 4\n")
    assert list(walk_yaml(text)) == [(2, "tp_size", "2", "tensor_parallel"),
                                     (5, "tensor-parallel-size", "${TP}", "tensor_parallel"),
                                     (11, "world_size", "4", "world")]
    limit = WalkLimit(max_nodes=5)
    assert list(walk_yaml(text, limit)) == [] and limit.cut
    with pytest.raises(yaml.YAMLError):
        list(walk_yaml("a: [\n"))


def test_alias_bomb_yaml_is_scanned_within_the_budget(tmp_path):
    bomb = FIXTURES / "raw" / "configs" / "alias_bomb.yaml"
    shutil.copy(bomb, tmp_path / "alias_bomb.yaml")
    t0 = time.monotonic()
    f = scan_paths([tmp_path], limits(time_budget_s=0.5))
    elapsed = time.monotonic() - t0
    # the budget is checked between steps, so a loaded CI machine may overshoot it a little; without the budget the
    # bomb's 9**9 paths would never finish (speed itself is a benchmark's business, not a unit test's)
    assert elapsed < 5.0, f"scan took {elapsed:.2f} s against a 0.5 s budget"
    assert [(h.line, h.key, h.value) for h in f.hits] == [(1, "tensor_parallel_size", "2")]
    assert f.files_read == 1 and not f.truncated
    # the constructed document (shared objects, 9**9 paths) is walked as fast
    docs = parse_structured(bomb.read_text(), "yaml")
    t0 = time.monotonic()
    assert list(walk_structured(docs[0], limit=WalkLimit(deadline=time.monotonic() + 0.5))) == [
        ("tensor_parallel_size", "2", "tensor_parallel")]
    assert time.monotonic() - t0 < 0.5


def test_a_structured_walk_cut_short_is_listed_as_read_only_in_part(tmp_path, monkeypatch):
    monkeypatch.setattr(configs, "_MAX_NODES", 50)
    body = "".join(f"- name: item{i}\n  size: {i}\n" for i in range(100))
    big = _write(tmp_path / "big.yaml", body + "- tensor_parallel_size: 2\n")
    _write(tmp_path / "big.json", "[" + ",".join(f'{{"x": {i}}}' for i in range(100)) + ',\n{"tp_size": 4}]')
    f = scan_paths([tmp_path], limits())
    assert f.hits == []  # never grepped: the part not walked is not read
    assert f.truncated and f.files_read == 2
    assert any(x.path == str(big) and "stopped after 50 nodes" in x.reason for x in f.skipped)


def test_hits_per_file_are_capped(tmp_path, monkeypatch):
    monkeypatch.setattr(configs, "_MAX_HITS_PER_FILE", 10)
    _write(tmp_path / "jobs.sh", "".join(f"torchrun --nnodes {i} t.py\n" for i in range(30)))
    f = scan_paths([tmp_path], limits())
    assert len(f.hits) == 10 and f.truncated and any("only the first 10" in n for n in f.notes)


def test_large_files_do_not_scan_quadratically():
    lines = "".join(f'  {{"tp_size": {i % 7}, "nnodes": {i % 3}}},\n' for i in range(20000))
    text = "[\n" + lines + '  {"tp_size": 1}\n]\n'
    t0 = time.monotonic()
    _jobs, hits, why = settings_in_file(Path("big.json"), text, "json")
    assert time.monotonic() - t0 < 5
    assert not why and len(hits) == 40001
    assert {h.line for h in hits if h.key == "tp_size"} == set(range(2, 20003))


def test_settings_sharing_a_line_are_all_kept(tmp_path):
    sh = _write(tmp_path / "job.sh", "torchrun --nnodes 2 train.py --tp 2\n")
    js = _write(tmp_path / "ds.json", '{"tp_size": 2, "num_nodes": 2}\n')
    f = scan_paths([tmp_path], limits())
    assert sorted((h.file, h.line, h.kind, h.value) for h in f.hits) == [
        (str(js), 1, "nodes", "2"), (str(js), 1, "tensor_parallel", "2"),
        (str(sh), 1, "nodes", "2"), (str(sh), 1, "tensor_parallel", "2")]


def test_find_line_prefers_the_line_with_the_value():
    lines = ["tp_size: 1", "tp_size: 2", "other: 3", "tp_size: ${TP}"]
    used: set[int] = set()
    assert [find_line(lines, "tp_size", v, used) for v in ("2", "${TP}", "9", "9")] == [2, 4, 1, 0]


def test_parse_structured_multidoc_yaml_and_bad_input():
    assert parse_structured("a: 1\n---\nb: 2\n", "yaml") == [{"a": 1}, {"b": 2}]
    assert parse_structured("{{ .Values }}: [", "yaml") is None
    assert parse_structured("{", "json") is None


@pytest.mark.parametrize(("name", "kind"), [
    ("compose.yaml", "yaml"), ("x.JSON", "json"), ("pyproject.toml", "toml"), ("Dockerfile", "shell"),
    ("Dockerfile.gb10", "shell"), (".env", "env"), (".env.local", "env"), ("Makefile", "shell"),
    ("hostfile", "hostfile"), ("job.sbatch", "shell"), ("run.ipynb", "notebook"), ("model.safetensors", None),
    ("notes", None), ("README.md", None), ("train.py", None),
])
def test_file_kind(name, kind):
    assert file_kind(Path(name)) == kind


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_shell_parse_never_crashes(text):
    for line, key, value, kind in _shell(text):
        assert line >= 1 and key and kind in ("tensor_parallel", "nodes", "world")
        assert value[0].isdigit() or configs._REF_RX.search(value), value
    commands, directives = shell_commands(text)
    assert all(c.line >= 1 for c in commands + directives)


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.sampled_from(["tp", "tp_size", "nodes", "world_size", "x", "num_machines"]) | st.text(max_size=8),
                      children, max_size=4),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(JSONISH)
def test_structured_walk_never_crashes(data):
    for _key, value, kind in walk_structured(data):
        assert (value.isdigit() or configs._REF_RX.search(value)) and kind in ("tensor_parallel", "nodes", "world")


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300), st.sampled_from(["yaml", "json", "toml"]))
def test_structured_parsers_never_crash(text, kind):
    docs = parse_structured(text, kind)
    assert docs is None or isinstance(docs, list)


PIECES = ["--tp", "--tensor-parallel-size", "TP_SIZE=", "tp_size: ", "--nnodes", " ", "\\\n", "=", '"', "'",
          "$TP", "${TP}", "${TP_SIZE:-2}", "{{ tp }}", "$(nproc)", "2", "x", "$", "${", "{", "}"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=12).map("".join))
def test_variable_values_never_crash_the_shell_parse(text):
    for line, _key, value, _kind in _shell(text):
        assert line >= 1 and (value[0].isdigit() or configs._REF_RX.search(value))


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="ab:&*[]{}-,\\n tp_size2$", max_size=200))
def test_yaml_walk_never_crashes(text):
    try:
        for line, _key, value, _kind in walk_yaml(text):
            assert line >= 1 and value
    except yaml.YAMLError:
        pass
