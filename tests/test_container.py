"""``--container IMAGE``: the target probe inside an image, through fake ``docker`` executables.

``docker-container`` emulates a container with this machine (its ``run`` executes the entrypoint
with the probe script on stdin, so the "image" is whatever ``python3`` the PATH finds: a fake
target environment here); the others stand for no engine, a hung engine, a missing image and a
missing NVIDIA runtime.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import FIXTURES
from fakeenv import clean_env, make_fake_env
from sparkops import api
from sparkops import setup as setup_mod
from sparkops.facts.model import TorchLive, TorchStatic
from sparkops.facts.reading import Unavailable, Why
from sparkops.probes import CollectOptions
from sparkops.probes.target_env import ContainerLimits, image_repo, inspect_container, parse_image_inspect
from sparkops.probes.target_launch import container_argv

BIN = FIXTURES / "bin"
NGC = "nvcr.io/nvidia/pytorch:25.09-py3"
NGC_TORCH = "2.9.0a0+50eac811a6.nv25.09"  # stack-matrix.md: the 25.09 base's torch
FAKE_DIGEST = "nvcr.io/nvidia/pytorch@sha256:" + "2" * 64
FAST = ContainerLimits(inspect_timeout_s=5.0, quick_timeout_s=20.0, live_timeout_s=30.0)


def image_env(tmp_path: Path, docker: str | None, live: object = None,
              dists: dict[str, str] | None = None) -> dict[str, str]:
    """A PATH with ``docker`` -> the fixture and ``python3`` -> a fake NGC-like environment (a
    wrapper script, not a symlink: a venv is recognised by the path it is started from)."""
    b = tmp_path / "imagebin"
    b.mkdir(exist_ok=True)
    if docker:
        (b / "docker").symlink_to(BIN / docker)
    py = make_fake_env(tmp_path, dists if dists is not None else {"peft": "0.19.1", "torchao": "0.17.0"},
                       NGC_TORCH, "13.0", live=live)
    wrapper = b / "python3"
    wrapper.write_text(f'#!/bin/sh\nexec {py} "$@"\n')
    wrapper.chmod(0o755)
    return clean_env({"PATH": f"{b}:/usr/bin:/bin", "FAKE_DOCKER_LOG": str(tmp_path / "docker.log")})


def docker_calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "docker.log"
    return log.read_text().splitlines() if log.exists() else []


# ---------------------------------------------------------------- the probe
def test_container_probe_reads_the_image_and_reports_its_digest(tmp_path):
    env = image_env(tmp_path, "docker-container")
    facts = inspect_container(NGC, NGC, None, env, depth="full", limits=FAST, engine_name="docker")
    assert facts.container_image == NGC and facts.container_ref == NGC
    assert facts.container_digest == FAKE_DIGEST
    assert facts.distributions == {"torch": NGC_TORCH, "peft": "0.19.1", "torchao": "0.17.0"}
    assert isinstance(facts.torch, TorchStatic) and facts.torch.cuda == "13.0"
    assert isinstance(facts.live, TorchLive) and facts.live.import_ok and facts.live.cuda_available
    assert facts.live.capability == (12, 1)
    # the host cannot read the image's files: not scanned, and said so
    assert isinstance(facts.extensions, Unavailable) and facts.extensions.unavailable is Why.not_collected
    calls = docker_calls(tmp_path)
    assert calls[0].startswith("image inspect --format") and calls[0].endswith(NGC)
    runs = [c for c in calls if c.startswith("run ")]
    assert len(runs) == 2  # quick and live
    for c in runs:
        for flag in ("--gpus all", "--runtime=nvidia", "--ipc=host", "--pull never", "--entrypoint sh", "--name"):
            assert flag in c
        assert "--rm" not in c  # podman's Docker API would lose the exit status: removed by name instead
        assert f" {NGC} -c " in c  # the script comes on stdin: no mount
        assert " -v " not in c.split(" -c ")[0] and "--volume" not in c
    names = [c.split("--name ")[1].split()[0] for c in runs]
    assert sorted(c for c in calls if c.startswith("rm -f ")) == sorted(f"rm -f {n}" for n in names)


def test_container_quick_runs_one_container_and_no_import(tmp_path):
    env = image_env(tmp_path, "docker-container", live="hang")  # an import would hang: quick must not import
    t0 = time.monotonic()
    facts = inspect_container(NGC, NGC, None, env, depth="quick", limits=FAST)
    assert time.monotonic() - t0 < 15
    assert isinstance(facts.live, Unavailable) and facts.live.unavailable is Why.not_collected
    assert len([c for c in docker_calls(tmp_path) if c.startswith("run ")]) == 1
    assert facts.distributions["torch"] == NGC_TORCH


def test_container_python_option_names_the_interpreter_inside(tmp_path):
    env = image_env(tmp_path, "docker-container")
    inside = str(tmp_path / "imagebin" / "python3")
    facts = inspect_container(NGC, NGC, inside, env, depth="quick", limits=FAST)
    assert facts.distributions["peft"] == "0.19.1"
    assert f"--entrypoint {inside} {NGC} - quick" in next(c for c in docker_calls(tmp_path) if c.startswith("run "))


def test_container_torch_hang_is_killed_and_the_container_removed(tmp_path):
    env = image_env(tmp_path, "docker-container", live="hang")
    limits = ContainerLimits(inspect_timeout_s=5.0, quick_timeout_s=20.0, live_timeout_s=3.0)
    t0 = time.monotonic()
    facts = inspect_container(NGC, NGC, None, env, depth="full", limits=limits, engine_name="docker")
    assert time.monotonic() - t0 < 15
    assert isinstance(facts.live, TorchLive) and facts.live.timed_out and facts.live.stage == "import torch"
    assert any(c.startswith("rm -f spark-ops-probe-") for c in docker_calls(tmp_path))
    assert facts.container_digest == FAKE_DIGEST  # the rest of the facts stand


@pytest.mark.parametrize("docker,why,needle", [
    (None, Why.not_found, "docker CLI not found"),
    ("docker-noengine", Why.error, "Docker engine is not running"),
    ("docker-error", Why.not_found, f"docker pull {NGC}"),
    ("docker-nogpu-runtime", Why.error, "unknown or invalid runtime name: nvidia"),
])
def test_container_failures_leave_target_unavailable_with_the_reason(tmp_path, docker, why, needle):
    env = image_env(tmp_path, docker)
    facts = inspect_container(NGC, NGC, None, env, depth="full", limits=FAST, engine_name="docker")
    for reading in (facts.distributions, facts.torch, facts.live, facts.python_version):
        assert isinstance(reading, Unavailable) and reading.unavailable is why and needle in reading.detail
    assert facts.container_ref == NGC
    if docker == "docker-nogpu-runtime":  # the image exists: its Id is the digest reported
        assert facts.container_digest == "sha256:" + "3" * 64
    else:
        assert isinstance(facts.container_digest, Unavailable)


def test_container_hung_engine_is_bounded(tmp_path):
    env = image_env(tmp_path, "docker-hang")
    t0 = time.monotonic()
    facts = inspect_container(NGC, NGC, None, env, limits=ContainerLimits(1.0, 5.0, 5.0), engine_name="docker")
    assert time.monotonic() - t0 < 8
    assert isinstance(facts.torch, Unavailable) and facts.torch.unavailable is Why.timeout
    assert "did not answer" in facts.torch.detail


def test_runner_collects_the_target_in_the_container(tmp_path):
    env = image_env(tmp_path, "docker-container")
    opts = api.container_options(CollectOptions(depth="quick", env=env, only=("target",), budget_s=30),
                                 "ngc", lock=tmp_path / "none.json")
    assert isinstance(opts, CollectOptions) and opts.container_ref == NGC and opts.budget_s == 30
    facts = api.collect(opts)
    assert facts.probes["target"].ok and facts.target.container_digest == FAKE_DIGEST
    assert api.target_label(facts).endswith(f"in container {NGC} ({FAKE_DIGEST}) via docker")


def test_container_alias_resolves_through_the_lock_like_docker_run(tmp_path):
    lock = tmp_path / "lock.json"
    pinned = "unsloth/unsloth@sha256:" + "0123456789abcdef" * 4
    setup_mod.write_lock_entry(lock, "unsloth/unsloth:dgxspark-latest", pinned)
    opts = api.container_options(None, "unsloth", lock=lock)
    assert opts.container_image == "unsloth/unsloth:dgxspark-latest" and opts.container_ref == pinned
    assert setup_mod.docker_run("unsloth", tmp_path, lock=lock).ref == pinned
    opts = api.container_options(None, "ngc", lock=lock)
    assert opts.container_ref == NGC  # not pinned: the tag


def test_container_bad_lock_is_an_input_error(tmp_path):
    from sparkops.core.errors import InputError

    lock = tmp_path / "lock.json"
    lock.write_text("{nope")
    with pytest.raises(InputError, match="lock file"):
        api.container_options(None, "ngc", lock=lock)


def test_container_argv_feeds_the_script_on_stdin():
    argv = container_argv(NGC, "live", None, "n1")
    assert argv[:2] == ("docker", "run") and "-i" in argv and argv[-1] == "live"
    assert argv[argv.index("--entrypoint") + 1] == "sh" and NGC in argv
    quick = container_argv("img@sha256:" + "a" * 64, "quick", "/opt/venv/bin/python", "n2")
    i = quick.index("--entrypoint")
    assert quick[i + 1:i + 4] == ("/opt/venv/bin/python", "img@sha256:" + "a" * 64, "-")
    assert json.loads(quick[-1])[-1] == "torch"


# ---------------------------------------------------------------- parsing the inspect answer
def test_parse_image_inspect_picks_the_asked_repository():
    text = ("sha256:" + "1" * 64 + " docker.io/library/other@sha256:" + "9" * 64
            + " nvcr.io/nvidia/pytorch@sha256:" + "2" * 64 + "\n")
    assert parse_image_inspect(text, NGC) == ("sha256:" + "1" * 64, FAKE_DIGEST)
    pinned = "nvcr.io/nvidia/pytorch@sha256:" + "2" * 64
    assert parse_image_inspect(text, pinned)[1] == pinned
    assert parse_image_inspect("sha256:" + "4" * 64 + "\n", "mine:dev") == ("sha256:" + "4" * 64,) * 2  # local build
    assert parse_image_inspect("", NGC) == (None, None)


def test_image_repo():
    assert image_repo(NGC) == "nvcr.io/nvidia/pytorch"
    assert image_repo("localhost:5000/foo") == "localhost:5000/foo"
    assert image_repo("localhost:5000/foo:1@sha256:" + "a" * 64) == "localhost:5000/foo"
    assert image_repo("ubuntu") == "ubuntu"


@given(st.text(max_size=400), st.text(max_size=80))
def test_parse_image_inspect_never_raises(text, ref):
    image_id, digest = parse_image_inspect(text, ref)
    assert image_id is None or image_id.startswith("sha256:")
    assert digest is None or "sha256:" in digest
    assert isinstance(image_repo(ref), str)


# ---------------------------------------------------------------- through the CLI
def spark_ops(*args: str, env: dict[str, str], cwd: Path, timeout: float = 120):
    return subprocess.run([sys.executable, "-m", "sparkops", *args], capture_output=True, text=True,
                          env={**env, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}, timeout=timeout, cwd=cwd)


def test_cli_stack_in_container_json(tmp_path):
    env = image_env(tmp_path, "docker-container", dists={"peft": "0.19.1", "torchao": "0.13.0"})
    res = spark_ops("stack", "--container", "ngc", "--json", env=env, cwd=tmp_path)
    out = json.loads(res.stdout)
    assert out["container"] == {"image": NGC, "ref": NGC, "digest": FAKE_DIGEST, "engine": "docker"}
    assert FAKE_DIGEST in out["target_python"]
    assert {r["package"]: r["installed"] for r in out["packages"]}["torchao"] == "0.13.0"
    assert out["G9"]["status"] == "fail" and res.returncode == 2  # torchao 0.13 beside peft: the image's blocker


def test_cli_preflight_in_container_reports_the_digest(tmp_path):
    env = image_env(tmp_path, "docker-container")
    res = spark_ops("preflight", "--container", NGC, "--offline", "--json", "--report", str(tmp_path / "r.json"),
                    env=env, cwd=tmp_path)
    assert res.returncode in (0, 1, 2), res.stderr
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["target_python"].endswith(f"in container {NGC} ({FAKE_DIGEST}) via docker")
    table = spark_ops("preflight", "--container", NGC, "--offline", "--report", str(tmp_path / "r2.json"),
                      env=env, cwd=tmp_path)
    assert f"in container {NGC} ({FAKE_DIGEST}) via docker (full)" in table.stdout and "Traceback" not in table.stderr


@pytest.mark.parametrize("docker", ["docker-noengine", "docker-hang", None])
def test_cli_triage_without_a_usable_engine_says_why(tmp_path, docker):
    env = image_env(tmp_path, docker)
    t0 = time.monotonic()
    res = spark_ops("triage", "gpu", "--container", "ngc", "--engine", "docker", "--json", env=env, cwd=tmp_path)
    out = json.loads(res.stdout)
    assert "Traceback" not in res.stderr and res.returncode in (1, 2)
    assert out["torch_sees_gpu"] is None and out["container"]["ref"] == NGC
    assert out["live_unavailable"].startswith("unavailable (")
    assert time.monotonic() - t0 < 60  # docker-hang: the inspect timeout (20 s), not forever


def test_cli_container_with_facts_is_a_usage_error(tmp_path):
    res = spark_ops("stack", "--container", "ngc", "--facts", str(FIXTURES / "facts" / "no_gpu.json"),
                    env=clean_env(), cwd=tmp_path)
    assert res.returncode == 3 and "--container" in res.stderr


# ---------------------------------------------------------------- engines: what the real ones say
def test_engine_choose_and_flags(tmp_path):
    from sparkops.probes import engine

    only_podman = tmp_path / "p"
    only_podman.mkdir()
    (only_podman / "podman").write_text("#!/bin/sh\n")
    (only_podman / "podman").chmod(0o755)
    assert engine.choose(None, {"PATH": str(only_podman)}) == ("podman", "podman on PATH")
    assert engine.choose("docker", {"PATH": str(only_podman)}) == ("docker", "--engine")
    assert engine.choose(None, {"PATH": str(tmp_path / "none")})[0] == "docker"
    with pytest.raises(ValueError):
        engine.choose("lxc", {})
    assert engine.gpu_flags("docker") == ("--runtime=nvidia", "--gpus", "all")
    assert engine.gpu_flags("podman") == ("--device", "nvidia.com/gpu=all")
    argv = container_argv(NGC, "quick", None, "n", "podman")
    assert argv[:2] == ("podman", "run") and "nvidia.com/gpu=all" in argv and "--rm" not in argv


@pytest.mark.parametrize("text,kind", [
    # recorded from the docker CLI 28.2 against podman 4.3's API, and from podman 4.3 itself
    ("Cannot connect to the Docker daemon at unix:///var/tmp/spark-ops-engine/podman.sock. Is the docker daemon "
     "running?", "no_engine"),
    ("permission denied while trying to connect to the Docker daemon socket at unix:///var/tmp/spark-ops-engine/"
     "podman.sock: Get \"http://%2Fvar%2Ftmp%2Fspark-ops-engine%2Fpodman.sock/v1.41/version\": dial unix "
     "/var/tmp/spark-ops-engine/podman.sock: connect: permission denied", "no_permission"),
    ("Error: setting up CDI devices: unresolvable CDI devices nvidia.com/gpu=all", "no_gpu_runtime"),
    ("docker: Error response from daemon: unknown or invalid runtime name: nvidia", "no_gpu_runtime"),
    ("Error: No such object: nvcr.io/nvidia/pytorch:25.09-py3", "no_image"),
    ("Error: initializing source docker://unsloth/unsloth@sha256:44d9: reading manifest sha256:44d9 in "
     "127.0.0.1:5055/unsloth/unsloth: manifest unknown: manifest unknown", "no_image"),
    ("Error: localhost/spark-ops-test/none:1: image not known", "no_image"),
    ("unable to upgrade to tcp, received 409", None),
])
def test_engine_problem_words(text, kind):
    from sparkops.probes import engine

    assert engine.problem("docker", text) == kind


def test_podman_behind_the_docker_api():
    from sparkops.probes import engine

    podman = ('{"Platform":{"Name":"linux/amd64/debian-12"},"Components":[{"Name":"Podman Engine",'
              '"Version":"4.3.1"},{"Name":"Conmon","Version":"conmon version 2.1.6"}]}')
    assert engine.podman_behind(podman)
    assert not engine.podman_behind('{"Components":[{"Name":"Engine","Version":"28.2.2"}]}')
    assert not engine.podman_behind("not json") and engine.server_components("[1]") == []


def test_full_repo():
    from sparkops.probes.engine import full_repo

    assert full_repo("unsloth/unsloth") == "docker.io/unsloth/unsloth"
    assert full_repo("docker.io/unsloth/unsloth") == "docker.io/unsloth/unsloth"
    assert full_repo("ubuntu") == "docker.io/library/ubuntu"
    assert full_repo("127.0.0.1:5055/unsloth/unsloth") == "127.0.0.1:5055/unsloth/unsloth"
    assert full_repo("localhost/spark-ops-test/ngc") == "localhost/spark-ops-test/ngc"
    assert full_repo("nvcr.io/nvidia/pytorch") == "nvcr.io/nvidia/pytorch"


def test_parse_image_inspect_same_path_on_another_registry_is_not_the_repository():
    text = ("sha256:" + "1" * 64 + " 127.0.0.1:5055/unsloth/unsloth@sha256:" + "9" * 64
            + " docker.io/unsloth/unsloth@sha256:" + "2" * 64)
    assert parse_image_inspect(text, "unsloth/unsloth:dgxspark-latest")[1] == "docker.io/unsloth/unsloth@sha256:" + "2" * 64


@given(st.text(max_size=200))
def test_engine_parsers_never_raise(text):
    from sparkops.probes import engine

    assert engine.problem("podman", text) in (None, "no_engine", "no_permission", "no_image", "no_gpu_runtime")
    assert isinstance(engine.podman_behind(text), bool)
    assert engine.full_repo(text or "x").count("/") >= 1
