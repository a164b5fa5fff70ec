"""spark-ops setup: decision, docker-run, pin (fake docker executables), bare-pip."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import typer
from hypothesis import given
from hypothesis import strategies as hst
from typer.testing import CliRunner

from sparkops import setup as st
from sparkops.commands import setup as setup_cmd
from sparkops.knowledge import load

FIXTURES = Path(__file__).parent / "fixtures" / "bin"
DIGEST = "unsloth/unsloth@sha256:" + "0123456789abcdef" * 4
UNSLOTH = "unsloth/unsloth:dgxspark-latest"


def _app() -> typer.Typer:
    app = typer.Typer(add_completion=False)

    @app.command()
    def version() -> int:  # a second command so "setup" stays a sub-command
        return 0

    setup_cmd.register(app)
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
    assert "--ipc=host" in dr.argv and not any(a.startswith("--shm-size") for a in dr.argv)  # podman refuses both


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
                           "--ulimit memlock=-1 --ulimit stack=67108864 -v ")
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


# ---------------------------------------------------------------- bare-pip --exec (fake pythons)
def pip_env(tmp_path: Path, extra_path: str = "") -> dict[str, str]:
    return {"PATH": f"{extra_path}:/usr/bin:/bin" if extra_path else "/usr/bin:/bin",
            "FAKE_PIP_LOG": str(tmp_path / "pip.log")}


def pip_calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "pip.log"
    return [ln for ln in log.read_text().splitlines() if "_target_script.py" not in ln] if log.exists() else []


class Sink:
    def __init__(self) -> None:
        self.text = ""

    def write(self, s: str) -> None:
        self.text += s

    def flush(self) -> None:
        pass


def test_exec_bare_pip_success_runs_steps_in_order_then_verifies(tmp_path):
    sink = Sink()
    res = st.execute_bare_pip(str(FIXTURES / "python-pip-ok"), env=pip_env(tmp_path), out=sink)
    assert res["exit_code"] == 0 and res["failed_step"] is None
    assert [s["status"] for s in res["steps"]] == ["ok", "ok", "ok"]
    assert all(s["exit_code"] == 0 and s["duration_s"] is not None for s in res["steps"])
    calls = pip_calls(tmp_path)
    assert calls[0].startswith("-m pip install transformers==5.13.1")
    assert calls[1].startswith("-m pip install --no-deps unsloth==2026.7.2")
    assert calls[2] == "-m pip install -U torchao==0.17.0"
    assert calls[3].startswith("-c import torch")  # verification last
    assert res["verify"]["status"] == "pass" and res["verify"]["output"] == "True 13.0"
    assert "Successfully installed" in sink.text  # step output streamed


def test_exec_bare_pip_failing_middle_step_stops(tmp_path):
    res = st.execute_bare_pip(str(FIXTURES / "python-pip-fails-nodeps"), env=pip_env(tmp_path), out=Sink())
    assert res["exit_code"] == st.EXIT_STEP_FAILED == 1 and res["failed_step"] == 2
    assert [s["status"] for s in res["steps"]] == ["ok", "failed", "not_run"]
    assert res["steps"][1]["exit_code"] == 1
    assert "No matching distribution found for unsloth==2026.7.2" in res["steps"][1]["stderr_tail"]
    calls = pip_calls(tmp_path)
    assert len(calls) == 2 and not any("torchao" in c or c.startswith("-c") for c in calls)  # step 3, verify: not run
    assert res["verify"]["status"] == "not_run"


def test_exec_bare_pip_hanging_step_is_killed(tmp_path):
    t0 = time.monotonic()
    res = st.execute_bare_pip(str(FIXTURES / "python-pip-hangs-nodeps"), env=pip_env(tmp_path), out=Sink(),
                              step_timeout_s=1.5)
    assert time.monotonic() - t0 < 10
    assert res["exit_code"] == 1 and res["failed_step"] == 2
    assert res["steps"][1]["status"] == "timeout" and res["steps"][2]["status"] == "not_run"
    assert not any("torchao" in c for c in pip_calls(tmp_path))


def test_exec_bare_pip_verification_false_points_at_triage(tmp_path):
    res = st.execute_bare_pip(str(FIXTURES / "python-torch-nogpu"), env=pip_env(tmp_path), out=Sink())
    assert res["exit_code"] == st.EXIT_VERIFY_FAILED == 2
    v = res["verify"]
    assert v["status"] == "fail" and v["output"] == "False 13.0" and "sees no GPU" in v["reason"]
    assert "spark-ops triage gpu --python" in v["hint"]


def test_exec_bare_pip_uv_uses_python_and_override(tmp_path):
    b = tmp_path / "uvbin"
    b.mkdir()
    (b / "uv").symlink_to(FIXTURES / "uv-ok")
    py = str(FIXTURES / "python-pip-ok")
    res = st.execute_bare_pip(py, uv=True, env=pip_env(tmp_path, str(b)), out=Sink())
    assert res["exit_code"] == 0
    text = (tmp_path / "pip.log").read_text()
    uv_lines = [ln for ln in text.splitlines() if ln.startswith("uv ")]
    assert len(uv_lines) == 3 and all(f"pip install --python {py} --override " in ln for ln in uv_lines)
    assert "--no-deps" in uv_lines[1] and "torchao==0.17.0" in uv_lines[2]
    assert "unsloth_zoo==2026.7.2" in text.splitlines()  # the override file's content


def test_exec_bare_pip_refuses_to_start(tmp_path):
    with pytest.raises(st.SetupError, match="uv not found"):
        st.execute_bare_pip(str(FIXTURES / "python-pip-ok"), uv=True, env=pip_env(tmp_path), out=Sink())
    with pytest.raises(st.SetupError, match="does not exist"):
        st.execute_bare_pip(str(tmp_path / "nope"), env=pip_env(tmp_path), out=Sink())


def test_exec_bare_pip_without_torch_installs_nothing(tmp_path):
    from fakeenv import clean_env, make_fake_env

    py = make_fake_env(tmp_path, {"peft": "0.19.1"}, None, None)  # no torch in it
    with pytest.raises(st.SetupError, match="torch is not installed"):
        st.execute_bare_pip(str(py), env=clean_env(), out=Sink())


def test_cli_bare_pip_exec_json_and_text(work, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_PIP_LOG", str(tmp_path / "pip.log"))
    res, rc = invoke(["setup", "bare-pip", "--exec", "--python", str(FIXTURES / "python-pip-fails-nodeps"), "--json"])
    out = json.loads(res.stdout)  # step output went to stderr: stdout is only the JSON
    assert rc == 1 and out["failed_step"] == 2
    assert [(s["n"], s["status"]) for s in out["steps"]] == [(1, "ok"), (2, "failed"), (3, "not_run")]
    res, rc = invoke(["setup", "bare-pip", "--exec", "--python", str(FIXTURES / "python-pip-fails-nodeps")])
    assert rc == 1 and "step 2 failed (exit 1)" in res.stdout and "No matching distribution" in res.stdout
    res, rc = invoke(["setup", "bare-pip", "--exec", "--python", str(FIXTURES / "python-pip-ok")])
    assert rc == 0 and "PASS: printed 'True 13.0'" in res.stdout
    res, rc = invoke(["setup", "bare-pip", "--exec", "--python", str(tmp_path / "nope")])
    assert rc == 3


def test_bare_pip_without_exec_runs_nothing(work, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_PIP_LOG", str(tmp_path / "pip.log"))
    res, rc = invoke(["setup", "bare-pip", "--python", str(FIXTURES / "python-pip-ok")])
    assert rc == 0 and not (tmp_path / "pip.log").exists()


@pytest.mark.parametrize("stdout,ok,error,status,needle", [
    ("True 13.0\n", True, "", "pass", "as expected"),
    ("some warning\nTrue 13.0\n", True, "", "pass", "as expected"),
    ("False 13.0\n", True, "", "fail", "sees no GPU"),
    ("True 12.8\n", True, "", "fail", "CUDA 12.8"),
    ("", False, "nonzero_exit", "fail", "import torch failed"),
    ("", False, "timeout", "fail", "did not finish"),
])
def test_judge_verify(stdout, ok, error, status, needle):
    from sparkops.probes._run import RunResult

    res = RunResult(("py",), ok, 0 if ok else 1, stdout, "ModuleNotFoundError: No module named 'torch'", error, 1.0)
    got, why = st.judge_verify(res)
    assert got == status and needle in why


@given(hst.text(max_size=200), hst.text(max_size=200), hst.booleans())
def test_judge_verify_never_raises(stdout, stderr, ok):
    from sparkops.probes._run import RunResult

    got, why = st.judge_verify(RunResult(("py",), ok, 0, stdout, stderr, "" if ok else "nonzero_exit", 0.1))
    assert got in ("pass", "fail") and why
    assert (got == "pass") == (ok and [ln.strip() for ln in stdout.splitlines() if ln.strip()][-1:] == ["True 13.0"])


def test_exec_argv():
    assert st.exec_argv('pip install -U "torchao==0.17.0"', "/v/bin/python", None) == [
        "/v/bin/python", "-m", "pip", "install", "-U", "torchao==0.17.0"]
    assert st.exec_argv('uv pip install --override o.txt "a==1"', "/v/py", "/bin/uv") == [
        "/bin/uv", "pip", "install", "--python", "/v/py", "--override", "o.txt", "a==1"]


# ---------------------------------------------------------------- pin: the repository's own digest
def test_repo_digests_by_repository_not_index_0():
    d = {c: c * 64 for c in "1239"}
    text = (f"sha256:{d['1']} 127.0.0.1:5055/unsloth/unsloth@sha256:{d['9']} "
            f"docker.io/unsloth/unsloth@sha256:{d['2']} docker.io/unsloth/unsloth@sha256:{d['3']} garbage")
    mine, others = st.repo_digests(text, UNSLOTH)
    assert mine == [f"docker.io/unsloth/unsloth@sha256:{d['2']}", f"docker.io/unsloth/unsloth@sha256:{d['3']}"]
    assert others == [f"127.0.0.1:5055/unsloth/unsloth@sha256:{d['9']}"]


@given(hst.text(max_size=300), hst.text(min_size=1, max_size=60))
def test_repo_digests_never_raises(text, image):
    mine, others = st.repo_digests(text, image)
    assert all("@sha256:" in d for d in mine + others)


def _podman_like(tmp_path: Path, served: str) -> str:
    """A fake `docker` answering like podman's API: no Digest: line on pull, every name x every
    manifest digest in RepoDigests (a local build's included), and a pull by digest that works only
    for the digest the registry serves."""
    d = tmp_path / "podmanbin"
    d.mkdir()
    local = "4" * 64
    script = f"""#!/bin/sh
echo "$*" >> {tmp_path}/calls.log
case "$1" in
  pull) case "$2" in *@sha256:*) case "$2" in *{served}) exit 0 ;; esac
          echo "Error: reading manifest: manifest unknown" >&2; exit 1 ;; esac
        echo "docker.io/unsloth/unsloth:dgxspark-latest"; exit 0 ;;
  image) echo "sha256:{'5' * 64} docker.io/unsloth/unsloth@sha256:{served} docker.io/unsloth/unsloth@sha256:{local}\
 localhost/x/unsloth@sha256:{served} localhost/x/unsloth@sha256:{local}"; exit 0 ;;
esac
exit 2
"""
    (d / "docker").write_text(script)
    (d / "docker").chmod(0o755)
    return f"{d}:/usr/bin:/bin"


def test_pin_confirms_among_several_digests_by_pulling_each(tmp_path):
    served = "7" * 64
    res = st.pin(UNSLOTH, pull=True, env={"PATH": _podman_like(tmp_path, served)}, lock=tmp_path / "l.json",
                 timeout=10, engine_name="docker")
    assert res["ref"] == f"docker.io/unsloth/unsloth@sha256:{served}"
    calls = (tmp_path / "calls.log").read_text().splitlines()
    assert sum(c.startswith("pull docker.io/unsloth/unsloth@sha256:") for c in calls) == 2


def test_pin_never_records_a_digest_the_registry_does_not_serve(tmp_path):
    path = _podman_like(tmp_path, "7" * 64)
    fake = Path(path.split(":")[0]) / "docker"
    fake.write_text(fake.read_text().replace("*" + "7" * 64 + ") exit 0", "*NEVER) exit 0"))  # serves none
    with pytest.raises(st.SetupError, match="serves none"):
        st.pin(UNSLOTH, env={"PATH": path}, lock=tmp_path / "l.json", timeout=10, engine_name="docker")
    assert not (tmp_path / "l.json").exists()


def test_pin_a_name_with_only_other_repositories_digests_is_refused(tmp_path):
    d = tmp_path / "b"
    d.mkdir()
    (d / "docker").write_text(f"#!/bin/sh\necho 'sha256:{'1' * 64} mirror.example/other/repo@sha256:{'2' * 64}'\n")
    (d / "docker").chmod(0o755)
    with pytest.raises(st.SetupError, match="only for other repositories"):
        st.pin(UNSLOTH, env={"PATH": f"{d}:/usr/bin:/bin"}, lock=tmp_path / "l.json", timeout=10, engine_name="docker")


def test_docker_run_podman_and_no_tty_and_no_ulimits(tmp_path):
    dr = st.docker_run("ngc", tmp_path, ["true"], lock=tmp_path / "none.json", engine_name="podman", tty=False,
                       rm=False, name="n1", ulimits=False)
    assert dr.argv[:5] == ["podman", "run", "--device", "nvidia.com/gpu=all", "-i"]
    assert "--rm" not in dr.argv and dr.argv[dr.argv.index("--name") + 1] == "n1"
    assert "--ulimit" not in dr.argv and any("--no-ulimits" in n for n in dr.notes)
    assert any("everything not in the mount is lost" in why for _f, why in dr.whys)
