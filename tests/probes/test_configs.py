"""Config scan (G10): TP / multi-node settings in a workload tree, within limits, honest about gaps."""

from __future__ import annotations

import contextlib
import os
import pickle
import pwd
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import FIXTURES
from sparkops.facts.model import ConfigScanFacts
from sparkops.facts.reading import Why
from sparkops.probes import CollectOptions, configs
from sparkops.probes.configs import (
    Limits,
    file_kind,
    parse_structured,
    scan_paths,
    scan_text,
    walk_structured,
)

WORKLOAD = FIXTURES / "raw" / "configs" / "workload"
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
IGNORE = frozenset(configs.load_kb().t("g10.ignore_dirs"))


def limits(**kw) -> Limits:
    base = {"max_files": 2000, "max_file_bytes": 1 << 20, "max_depth": 8, "time_budget_s": 30.0,
            "ignore_dirs": IGNORE}
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
    expected = {
        ("serve/docker-compose.yml", line_of(s / "docker-compose.yml", "--tensor-parallel-size 2"),
         "tensor_parallel_size", "2", "tensor_parallel"),
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
        ("train/infer.py", line_of(t / "infer.py", "tensor_parallel_size=1"), "tensor_parallel_size", "1",
         "tensor_parallel"),
        ("deploy/templates/deployment.yaml", line_of(tree / "deploy/templates/deployment.yaml", "tensor_parallel"),
         "tensor_parallel_size", "4", "tensor_parallel"),
        ("docs/NOTES.md", line_of(tree / "docs/NOTES.md", "-tp 2"), "tp_size", "2", "tensor_parallel"),
    }
    assert got == expected
    # nothing from .git, virtualenvs (by name or by pyvenv.cfg), node_modules, or the binary file
    assert not any(h.value == "8" for h in f.hits)
    assert f.scanned and not f.truncated and f.unreadable == []
    assert f.files_read == 13 and f.files_skipped == 1  # 12 workload files + the safetensors index; bin.sh
    assert any("deployment.yaml" in n and "did not parse" in n for n in f.notes)
    assert f.roots == [str(tree.resolve())]


def test_near_misses_produce_no_hit():
    text = (WORKLOAD / "train" / "negatives.sh").read_text()
    assert scan_text(text) == []


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


def test_time_budget_truncates(tmp_path):
    _write(tmp_path / "a.sh", "--tp 2\n")
    f = scan_paths([tmp_path], limits(time_budget_s=0.0))
    assert f.truncated and any("time budget" in n for n in f.notes)


def test_symlinked_directories_are_not_followed(tmp_path):
    _write(tmp_path / "real" / "x.sh", "--tp 2\n")
    (tmp_path / "real" / "loop").symlink_to(tmp_path, target_is_directory=True)
    f = scan_paths([tmp_path], limits())
    assert len(f.hits) == 1 and not f.truncated


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
@pytest.mark.parametrize(("text", "expected"), [
    ("python -m sglang.launch_server --tp-size 4", [(1, "tp_size", "4", "tensor_parallel")]),
    ("vllm serve x \\\n    --tensor-parallel-size \\\n    2", [(2, "tensor_parallel_size", "2", "tensor_parallel")]),  # the flag's line
    ("torchrun --nnodes=1:4 t.py", [(1, "nnodes", "1:4", "nodes")]),
    ("#SBATCH --nodes=2", [(1, "nodes", "2", "nodes")]),
    ("deepspeed --num_nodes 2 --num_gpus 1 t.py", [(1, "num_nodes", "2", "nodes")]),
    ("accelerate launch --num_machines 2 t.py", [(1, "num_machines", "2", "nodes")]),
    ("text-generation-launcher --num-shard 2", [(1, "num_shard", "2", "tensor_parallel")]),
    ("megatron --tensor-model-parallel-size 2", [(1, "tensor_model_parallel_size", "2", "tensor_parallel")]),
    ("export WORLD_SIZE=2", [(1, "WORLD_SIZE", "2", "world")]),
    ('{"tp_size": 2}', [(1, "tp_size", "2", "tensor_parallel")]),
])
def test_scan_text_patterns(text, expected):
    assert scan_text(text) == expected


def test_walk_structured_nested_and_typed():
    doc = {"a": [{"Tensor-Parallel-Size": 2}, {"tp": True}, {"nodes": ["n1", "n2"]}],
           "b": {"world_size": "4", "tp_size": 2.5}}
    assert list(walk_structured(doc)) == [("Tensor-Parallel-Size", "2", "tensor_parallel"),
                                          ("world_size", "4", "world")]


def test_parse_structured_multidoc_yaml_and_bad_input():
    assert parse_structured("a: 1\n---\nb: 2\n", "yaml") == [{"a": 1}, {"b": 2}]
    assert parse_structured("{{ .Values }}: [", "yaml") is None
    assert parse_structured("{", "json") is None


@pytest.mark.parametrize(("name", "kind"), [
    ("compose.yaml", "yaml"), ("x.JSON", "json"), ("pyproject.toml", "toml"), ("Dockerfile", "text"),
    ("Dockerfile.gb10", "text"), (".env", "text"), (".env.local", "text"), ("Makefile", "text"),
    ("hostfile", "text"), ("job.sbatch", "text"), ("model.safetensors", None), ("notes", None),
])
def test_file_kind(name, kind):
    assert file_kind(Path(name)) == kind


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_text_scan_never_crashes(text):
    for line, key, value, kind in scan_text(text):
        assert line >= 1 and key and value[0].isdigit() and kind in ("tensor_parallel", "nodes", "world")


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
        assert value.isdigit() and kind in ("tensor_parallel", "nodes", "world")


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300), st.sampled_from(["yaml", "json", "toml"]))
def test_structured_parsers_never_crash(text, kind):
    docs = parse_structured(text, kind)
    assert docs is None or isinstance(docs, list)
