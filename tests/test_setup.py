"""spark-ops setup: decision, docker-run, pin (fake docker executables), bare-pip."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from sparkops import setup as st
from sparkops.knowledge import load

FIXTURES = Path(__file__).parent / "fixtures" / "bin"
DIGEST = "unsloth/unsloth@sha256:" + "0123456789abcdef" * 4
UNSLOTH = "unsloth/unsloth:dgxspark-latest"


def _app() -> typer.Typer:
    app = typer.Typer(add_completion=False)

    @app.command()
    def version() -> int:  # a second command so "setup" stays a sub-command
        return 0

    st.register(app)
    return app


def invoke(args: list[str]):
    res = CliRunner().invoke(_app(), args, standalone_mode=False, catch_exceptions=False)
    return res, res.return_value


def fake_path(tmp_path: Path, fixture: str | None) -> str:
    """A PATH whose first directory holds ``docker`` -> the fixture (or no docker at all)."""
    d = tmp_path / "fakebin"
    d.mkdir(exist_ok=True)
    if fixture:
        (d / "docker").symlink_to(FIXTURES / fixture)
        return f"{d}:/usr/bin:/bin"
    return str(d)


@pytest.fixture
def work(tmp_path, monkeypatch):
    w = tmp_path / "work"
    w.mkdir()
    monkeypatch.chdir(w)
    return w


# ---------------------------------------------------------------- fixtures are executable
@pytest.mark.parametrize("name", ["docker-digest", "docker-noengine", "docker-hang", "docker-error"])
def test_fake_docker_executable(name):
    assert os.access(FIXTURES / name, os.X_OK)


# ---------------------------------------------------------------- decision
def test_setup_without_use_lists_three_choices(work):
    res, rc = invoke(["setup"])
    assert rc == 0
    for word in ("--use ngc", "--use unsloth", "--use custom"):
        assert word in res.stdout


@pytest.mark.parametrize("use,needle", [("ngc", "nvcr.io/nvidia/pytorch:25.09-py3"),
                                        ("unsloth", "MOVING"), ("custom", "bare pip")])
def test_setup_use(work, use, needle):
    res, rc = invoke(["setup", "--use", use])
    assert rc == 0 and needle in res.stdout
    res, rc = invoke(["setup", "--use", use, "--json"])
    assert rc == 0 and json.loads(res.stdout)["decision"]["use"] == use


# ---------------------------------------------------------------- pin (pure)
def test_pin_writes_lock_then_docker_run_uses_digest(tmp_path):
    lock = tmp_path / "lock.json"
    env = {"PATH": fake_path(tmp_path, "docker-digest")}
    res = st.pin(UNSLOTH, pull=True, env=env, lock=lock, timeout=10)
    assert res["ref"] == DIGEST
    data = json.loads(lock.read_text())
    assert data["images"][UNSLOTH]["ref"] == DIGEST and data["images"][UNSLOTH]["pinned_at"]
    dr = st.docker_run("unsloth", tmp_path, lock=lock)
    assert dr.pinned and dr.argv[-1] == DIGEST and UNSLOTH not in dr.argv
    assert "--shm-size=32GB" in dr.argv


@pytest.mark.parametrize("fixture,needle", [
    ("docker-noengine", "Docker engine is not running"),
    ("docker-error", "No such object"),
    (None, "docker CLI not found"),
])
def test_pin_failures_raise(tmp_path, fixture, needle):
    lock = tmp_path / "lock.json"
    with pytest.raises(st.SetupError, match=needle):
        st.pin(UNSLOTH, env={"PATH": fake_path(tmp_path, fixture)}, lock=lock, timeout=10)
    assert not lock.exists()


def test_pin_hang_is_killed_within_timeout(tmp_path):
    t0 = time.monotonic()
    with pytest.raises(st.SetupError, match="did not answer"):
        st.pin(UNSLOTH, env={"PATH": fake_path(tmp_path, "docker-hang")}, lock=tmp_path / "l.json", timeout=1)
    assert time.monotonic() - t0 < 8


def test_pin_update_keeps_other_images(tmp_path):
    lock = tmp_path / "lock.json"
    st.write_lock_entry(lock, "nvcr.io/nvidia/pytorch:25.09-py3", "nvcr.io/nvidia/pytorch@sha256:" + "a" * 64)
    st.pin(UNSLOTH, env={"PATH": fake_path(tmp_path, "docker-digest")}, lock=lock, timeout=10)
    assert len(json.loads(lock.read_text())["images"]) == 2


# ---------------------------------------------------------------- pin + docker-run through the CLI
def test_cli_pin_then_docker_run(work, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", fake_path(tmp_path, "docker-digest"))
    res, rc = invoke(["setup", "pin", UNSLOTH, "--pull"])
    assert rc == 0 and DIGEST in res.stdout
    assert (work / st.LOCK_NAME).exists()
    res, rc = invoke(["setup", "docker-run", "--image", "unsloth", "--mount", str(work), "--",
                      "python", "train.py", "--epochs", "1"])
    assert rc == 0
    line = res.stdout.splitlines()[0]
    assert line.startswith("docker run --runtime=nvidia --gpus all -it --rm --ipc=host "
                           "--ulimit memlock=-1 --ulimit stack=67108864 --shm-size=32GB ")
    assert f'-v "{work}:/workspace/work" {DIGEST} python train.py --epochs 1' in line
    res, rc = invoke(["setup", "docker-run", "--image", "unsloth", "--json"])
    out = json.loads(res.stdout)
    assert out["pinned"] and out["ref"] == DIGEST and out["argv"][-1] == DIGEST


@pytest.mark.parametrize("fixture,needle", [("docker-noengine", "Cannot connect to the Docker daemon"),
                                            ("docker-hang", "did not answer"),
                                            (None, "docker CLI not found")])
def test_cli_pin_failures_exit_3(work, tmp_path, monkeypatch, fixture, needle):
    monkeypatch.setenv("PATH", fake_path(tmp_path, fixture))
    t0 = time.monotonic()
    res, rc = invoke(["setup", "pin", UNSLOTH, "--timeout", "1"])
    assert rc == 3 and needle in res.stderr
    assert time.monotonic() - t0 < 8
    assert not (work / st.LOCK_NAME).exists()
    res, rc = invoke(["setup", "pin", UNSLOTH, "--timeout", "1", "--json"])
    assert rc == 3 and needle in json.loads(res.stdout)["error"]


def test_docker_run_ngc_unpinned(work):
    res, rc = invoke(["setup", "docker-run"])
    assert rc == 0
    line = res.stdout.splitlines()[0]
    assert line == ("docker run --runtime=nvidia --gpus all -it --rm --ipc=host --ulimit memlock=-1 "
                    f'--ulimit stack=67108864 -v "{work}:/workspace/work" nvcr.io/nvidia/pytorch:25.09-py3')
    assert "--shm-size" not in line
    assert "--ipc=host" in res.stdout.split("\n", 2)[2]  # the why lines
    assert "not pinned" in res.stdout


def test_docker_run_unsloth_unpinned_warns_moving_tag(work):
    res, rc = invoke(["setup", "docker-run", "--image", "unsloth"])
    assert rc == 0 and "MOVING" in res.stdout and UNSLOTH in res.stdout.splitlines()[0]


def test_docker_run_bad_lock_exit_3(work):
    (work / st.LOCK_NAME).write_text("{nope")
    res, rc = invoke(["setup", "docker-run"])
    assert rc == 3 and "lock file" in res.stderr


def test_docker_run_exec_replaces_process(work, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", fake_path(tmp_path, "docker-digest"))
    calls = []
    monkeypatch.setattr(st.os, "execvp", lambda exe, argv: calls.append((exe, argv)))
    _, rc = invoke(["setup", "docker-run", "--exec"])
    assert calls and calls[0][0].endswith("docker") and calls[0][1][:2] == ["docker", "run"]


def test_docker_run_exec_without_docker_exit_3(work, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", fake_path(tmp_path, None))
    res, rc = invoke(["setup", "docker-run", "--exec"])
    assert rc == 3 and "docker CLI not found" in res.stderr


def test_normalize_image():
    assert st.normalize_image("foo/bar") == "foo/bar:latest"
    assert st.normalize_image("localhost:5000/foo") == "localhost:5000/foo:latest"
    assert st.normalize_image("foo/bar:1") == "foo/bar:1"
    assert st.normalize_image("foo@sha256:" + "a" * 64).endswith("a" * 64)


# ---------------------------------------------------------------- bare-pip
def _three(stdout: str) -> list[str]:
    return [ln for ln in stdout.splitlines() if "pip install" in ln]


def test_bare_pip_sequence_in_order(work):
    res, rc = invoke(["setup", "bare-pip"])
    assert rc == 0
    lines = _three(res.stdout)
    assert lines == load().matrix.bare_pip_sequence
    assert lines[0].startswith('pip install "transformers==5.13.1"') and "--no-deps" not in lines[0]
    assert lines[1].startswith("pip install --no-deps ") and '"unsloth==2026.7.2"' in lines[1]
    assert lines[2] == 'pip install -U "torchao==0.17.0"'
    out = res.stdout
    assert out.index(lines[2]) < out.index(st.VERIFY_LINE)
    assert 'python -c "import torch; print(torch.cuda.is_available(), torch.version.cuda)"' in out
    assert "True 13.0" in out


def test_bare_pip_uv_override(work):
    res, rc = invoke(["setup", "bare-pip", "--uv"])
    assert rc == 0
    lines = _three(res.stdout)
    assert len(lines) == 3 and all(ln.startswith("uv pip install --override overrides.txt") for ln in lines)
    assert "--no-deps" in lines[1] and "--no-deps" not in lines[0] and "torchao==0.17.0" in lines[2]
    assert "overrides.txt" in res.stdout.splitlines()[0]
    for pin in ("transformers==5.13.1", "unsloth_zoo==2026.7.2", "torchao==0.17.0", "bitsandbytes==0.49.2"):
        assert f"  {pin}" in res.stdout
    data = json.loads(invoke(["setup", "bare-pip", "--uv", "--json"])[0].stdout)
    assert data["override_content"].splitlines()[0] == "transformers==5.13.1"
    assert len(data["override_content"].splitlines()) == 9
    assert data["expect"] == "True 13.0"
