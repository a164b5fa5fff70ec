"""The container features end to end against a real engine (``.ci/container-engine.sh start``):
podman's Docker API driven by the real ``docker`` CLI, podman itself, and a local registry on
loopback that stands for nvcr.io and Docker Hub (its registries.conf remaps both names).

Skipped, with the reason, where no engine was started; on CI (``SPARKOPS_CI=1``, set by
``.ci/run``) a missing engine is a failure instead: these tests must have run.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from sparkops.facts.model import TorchLive, TorchStatic
from sparkops.facts.reading import Unavailable, Why
from sparkops.probes.target_env import ContainerLimits, inspect_container

pytestmark = pytest.mark.engine

ROOT = Path(__file__).resolve().parent.parent
STATE = Path(os.environ.get("SPARKOPS_ENGINE_DIR", "/var/tmp/spark-ops-engine"))
NGC_TORCH = "2.9.0a0+50eac811a6.nv25.09"
IMG = {n: f"localhost/spark-ops-test/{n}:1" for n in ("ngc", "unsloth", "barepip", "segv", "hang", "nopython")}
LIMITS = ContainerLimits(inspect_timeout_s=20.0, quick_timeout_s=60.0, live_timeout_s=60.0)


def _engine_env() -> dict[str, str] | str:
    """The engine's environment (DOCKER_HOST, CONTAINERS_*), or why there is none."""
    path = Path(os.environ.get("SPARKOPS_ENGINE_ENV", STATE / "env"))
    if not path.is_file():
        return f"no container engine started ({path} missing): run `.ci/container-engine.sh start` (root, apt)"
    env = dict(os.environ)
    for line in path.read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep:
            env[key.strip()] = value.strip()
    try:
        res = subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"], env=env,
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"the docker CLI cannot reach the engine: {exc}"
    if res.returncode != 0:
        return f"the engine from {path} does not answer: {res.stderr.strip()[-200:]}"
    return env


@pytest.fixture(scope="module")
def eng() -> dict[str, str]:
    env = _engine_env()
    if isinstance(env, str):
        if os.environ.get("SPARKOPS_CI") == "1":
            pytest.fail(f"CI must run the engine tests, but: {env}")
        pytest.skip(env)
    return env


def spark_ops(*args: str, env: dict[str, str], cwd: Path, timeout: float = 180, input: str | None = None,
              prefix: tuple[str, ...] = ()):
    res = subprocess.run([*prefix, sys.executable, "-m", "sparkops", *args], capture_output=True, text=True,
                         env={**env, "PYTHONPATH": str(ROOT / "src")}, timeout=timeout, cwd=cwd, input=input)
    assert "Traceback" not in res.stderr, res.stderr
    return res


def docker(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], env=env, capture_output=True, text=True, timeout=timeout)


def image_id(env: dict[str, str], ref: str) -> str:
    return docker(env, "image", "inspect", "--format", "{{.Id}}", ref).stdout.strip()


def served_digest(registry: str, repo: str, tag: str) -> str:
    """What the registry itself serves for repo:tag (its Docker-Content-Digest), asked over HTTP."""
    req = urllib.request.Request(f"http://{registry}/v2/{repo}/manifests/{tag}", method="HEAD", headers={
        "Accept": "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.headers["Docker-Content-Digest"]


def probe_leftovers(env: dict[str, str]) -> list[str]:
    out = docker(env, "ps", "-a", "--format", "{{.Names}}").stdout.split()
    return [n for n in out if n.startswith("spark-ops-")]


# ---------------------------------------------------------------- the probe in real images
def test_preflight_container_runs_the_probe_in_the_image_and_reports_its_digest(eng, tmp_path):
    res = spark_ops("preflight", "--container", IMG["ngc"], "--offline", "--json", "--report",
                    str(tmp_path / "r.json"), env=eng, cwd=tmp_path)
    assert res.returncode in (0, 1, 2), res.stderr
    rep = json.loads((tmp_path / "r.json").read_text())
    digests = docker(eng, "image", "inspect", "--format", "{{range .RepoDigests}}{{.}} {{end}}", IMG["ngc"]).stdout
    m = re.search(r"in container (\S+) \((\S+)\) via docker$", rep["target_python"])
    assert m and m.group(1) == IMG["ngc"] and m.group(2) in digests.split()
    assert m.group(2).startswith("localhost/spark-ops-test/ngc@sha256:")  # its own repository's digest
    table = spark_ops("preflight", "--container", IMG["ngc"], "--offline", "--quick", "--report",
                      str(tmp_path / "r2.json"), env=eng, cwd=tmp_path)
    assert m.group(2) in table.stdout
    assert probe_leftovers(eng) == []


def test_container_facts_from_the_ngc_like_image(eng):
    facts = inspect_container(IMG["ngc"], IMG["ngc"], None, eng, depth="full", limits=LIMITS)
    assert facts.container_engine == "docker"
    assert facts.python == "/usr/bin/python3" and facts.python_version.startswith("3.11.")
    assert facts.distributions["torch"] == NGC_TORCH and facts.distributions["flash-attn"] == "2.7.4.post1"
    assert isinstance(facts.torch, TorchStatic) and facts.torch.cuda == "13.0"
    # no GPU in this container: torch imports and says so (triage hypothesis 1 tells it apart)
    assert isinstance(facts.live, TorchLive) and facts.live.import_ok and facts.live.cuda_available is False
    assert facts.live.version == NGC_TORCH and facts.live.flash_attn_import is True


def test_stack_container_bare_pip_image_hard_blocker(eng, tmp_path):
    res = spark_ops("stack", "--container", IMG["barepip"], "--json", env=eng, cwd=tmp_path)
    out = json.loads(res.stdout)
    installed = {r["package"]: r["installed"] for r in out["packages"]}
    assert installed["torchao"] == "0.13.0" and installed["peft"] == "0.19.1"
    assert out["G9"]["status"] == "fail" and res.returncode == 2
    assert out["container"]["engine"] == "docker" and out["container"]["ref"] == IMG["barepip"]


def test_triage_container_without_gpu_fires_hypothesis_1(eng, tmp_path):
    res = spark_ops("triage", "gpu", "--container", IMG["ngc"], "--json", env=eng, cwd=tmp_path)
    out = json.loads(res.stdout)
    assert out["torch_sees_gpu"] is False and out["fired"] == 1 and res.returncode == 2
    assert "--runtime=nvidia --gpus all" in out["fix"]


def test_segfault_on_import_torch_is_a_signal_not_a_silent_pass(eng):
    facts = inspect_container(IMG["segv"], IMG["segv"], None, eng, depth="full", limits=LIMITS)
    assert facts.distributions["torch"] == NGC_TORCH  # the static half stands
    assert isinstance(facts.live, TorchLive) and not facts.live.import_ok
    assert facts.live.died_by_signal == 11 and "SIGSEGV" in (facts.live.error or "")
    assert probe_leftovers(eng) == []


def test_image_without_python_says_so(eng):
    facts = inspect_container(IMG["nopython"], IMG["nopython"], None, eng, depth="full", limits=LIMITS)
    for reading in (facts.distributions, facts.torch, facts.live):
        assert isinstance(reading, Unavailable) and reading.unavailable is Why.not_found
        assert "no python3 or python on the image PATH" in reading.detail
    assert isinstance(facts.container_digest, str)  # the image exists: its digest is still reported


def test_hanging_import_is_bounded_and_the_container_removed(eng):
    limits = ContainerLimits(inspect_timeout_s=20.0, quick_timeout_s=60.0, live_timeout_s=6.0)
    t0 = time.monotonic()
    facts = inspect_container(IMG["hang"], IMG["hang"], None, eng, depth="full", limits=limits)
    assert time.monotonic() - t0 < 40
    assert isinstance(facts.live, TorchLive) and facts.live.timed_out and facts.live.stage == "import torch"
    assert facts.distributions["torch"] == NGC_TORCH
    assert probe_leftovers(eng) == []


def test_container_killed_mid_probe_is_reported(eng):
    box: dict[str, object] = {}
    t = threading.Thread(target=lambda: box.update(f=inspect_container(
        IMG["hang"], IMG["hang"], None, eng, depth="full", limits=LIMITS)))
    t0 = time.monotonic()
    t.start()
    killed = ""
    while time.monotonic() - t0 < 30 and not killed:
        live = [n for n in probe_leftovers(eng) if "-live-" in n]
        if live and "import torch" in docker(eng, "logs", live[0]).stdout \
                and docker(eng, "kill", live[0]).returncode == 0:  # killed inside the hanging import
            killed = live[0]
        time.sleep(0.3)
    t.join(70)
    assert killed and not t.is_alive()
    assert time.monotonic() - t0 < LIMITS.live_timeout_s  # not waited out: the kill ended it
    facts = box["f"]
    assert isinstance(facts.live, TorchLive) and not facts.live.import_ok and not facts.live.timed_out
    assert facts.live.died_by_signal == 9 and facts.live.stage == "import torch"
    assert probe_leftovers(eng) == []


def test_engine_down_and_socket_without_permission(eng, tmp_path):
    down = {**eng, "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}
    facts = inspect_container(IMG["ngc"], IMG["ngc"], None, down, limits=LIMITS, engine_name="docker")
    assert isinstance(facts.torch, Unavailable) and "engine is not running" in facts.torch.detail
    res = spark_ops("setup", "pin", IMG["ngc"], env=down, cwd=tmp_path)
    assert res.returncode == 3 and "engine is not running" in res.stderr
    res = spark_ops("setup", "docker-run", "--image", IMG["ngc"], "--exec", "--", "true", env=down, cwd=tmp_path)
    assert res.returncode == 3 and "engine is not running" in res.stderr
    res = spark_ops("triage", "gpu", "--container", IMG["ngc"], "--json", env=down, cwd=tmp_path)
    assert json.loads(res.stdout)["live_unavailable"].startswith("unavailable (") and res.returncode in (1, 2)
    # the socket is root's (0600): another user is refused by the kernel
    sock = eng["DOCKER_HOST"].removeprefix("unix://")
    if os.getuid() != 0 or oct(os.stat(sock).st_mode & 0o777) != "0o600":
        pytest.skip("needs root and the engine's 0600 socket to run a user without permission")
    nobody = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")
    home = Path(tempfile.mkdtemp(prefix="spark-ops-nobody-"))  # pytest's tmp_path is root's (0700 parents)
    home.chmod(0o777)
    can = subprocess.run([*nobody, sys.executable, "-c", "import sparkops.cli"], capture_output=True, text=True,
                         env={**eng, "HOME": str(home), "PYTHONPATH": str(ROOT / "src")}, cwd=home, timeout=60)
    if can.returncode != 0:  # a checkout in a 0700 directory (mktemp -d): another user cannot load the tool
        shutil.rmtree(home, ignore_errors=True)
        pytest.skip(f"user nobody cannot load the tool from this checkout ({ROOT}): "
                    f"{(can.stderr.strip().splitlines() or ['?'])[-1]}")
    res = spark_ops("setup", "pin", IMG["ngc"], env={**eng, "HOME": str(home)}, cwd=home, prefix=nobody)
    assert res.returncode == 3 and "no permission to reach the Docker engine" in res.stderr
    res = spark_ops("stack", "--container", IMG["ngc"], "--json", env={**eng, "HOME": str(home)},
                    cwd=home, prefix=nobody)
    shutil.rmtree(home, ignore_errors=True)
    assert "no permission" in json.dumps(json.loads(res.stdout))


# ---------------------------------------------------------------- setup pin / docker-run
def test_pin_records_the_registry_digest_of_that_repository_and_a_moved_tag_keeps_the_old(eng, tmp_path):
    reg = eng["SPARKOPS_TEST_REGISTRY"]
    ns = "t" + uuid.uuid4().hex[:8]
    repo, other = f"{reg}/{ns}/app", f"{reg}/{ns}/mirror"
    # the same image under two names, both pushed: RepoDigests index 0 is the other repository's
    for name in (f"{repo}:moving", f"{other}:x"):
        assert docker(eng, "tag", IMG["ngc"], name).returncode == 0
        assert docker(eng, "push", name).returncode == 0
    old = served_digest(reg, f"{ns}/app", "moving")
    res = spark_ops("setup", "pin", f"{repo}:moving", "--pull", "--json", env=eng, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["ref"] == f"{repo}@{old}"
    lock = json.loads((tmp_path / ".spark-ops.lock.json").read_text())
    assert lock["images"][f"{repo}:moving"]["ref"] == f"{repo}@{old}"

    def run_version() -> subprocess.CompletedProcess:
        return spark_ops("setup", "docker-run", "--image", f"{repo}:moving", "--no-ulimits", "--exec", "--",
                         "python3", "-c", "import torch; print(torch.__version__)", env=eng, cwd=tmp_path)

    first = run_version()
    assert first.returncode == 0 and first.stdout.strip() == NGC_TORCH, first.stderr
    # move the tag: the registry now serves another image for it
    assert docker(eng, "tag", IMG["unsloth"], f"{repo}:moving").returncode == 0
    assert docker(eng, "push", f"{repo}:moving").returncode == 0
    new = served_digest(reg, f"{ns}/app", "moving")
    assert new != old
    again = run_version()
    assert again.stdout.strip() == NGC_TORCH and f"{repo}@{old}" in again.stderr  # the pin still runs the old
    res = spark_ops("setup", "pin", f"{repo}:moving", "--pull", env=eng, cwd=tmp_path)
    assert res.returncode == 0 and res.stdout.strip() == f"{repo}@{new}"
    moved = run_version()
    assert moved.stdout.strip() == "2.9.0+cu130"  # the Unsloth-like image's torch
    # a name never pushed: podman still lists digests under it (every name x every manifest); none is
    # served by the registry, so nothing is pinned
    assert docker(eng, "tag", IMG["ngc"], f"{reg}/{ns}/local:only").returncode == 0
    res = spark_ops("setup", "pin", f"{reg}/{ns}/local:only", env=eng, cwd=tmp_path)
    assert res.returncode == 3 and re.search(r"no registry digest|serves none", res.stderr)
    assert f"{reg}/{ns}/local:only" not in json.loads((tmp_path / ".spark-ops.lock.json").read_text())["images"]


def test_docker_run_exec_mounts_passes_the_exit_code_and_warns_about_rm(eng, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    res = spark_ops("setup", "docker-run", "--image", IMG["ngc"], "--no-ulimits", "--exec", "--", "sh", "-c",
                    "echo saved > /workspace/work/out.txt; echo lost > /tmp/lost.txt; exit 7", env=eng, cwd=work)
    assert res.returncode == 7, res.stderr
    assert (work / "out.txt").read_text() == "saved\n"  # the mount
    assert "everything not in the mount is lost" in res.stderr  # --rm, or the removal by name
    assert "-it" not in shlex.split(res.stderr.splitlines()[0])  # no terminal here: -i only
    assert probe_leftovers(eng) == []  # removed afterwards


def test_docker_run_exec_engine_refusal_is_passed_through(eng, tmp_path):
    """The literal flags: where the engine may not raise memlock (no CAP_SYS_RESOURCE, rootless
    podman) the container does not start; the CLI's failure is the exit status, never 0."""
    res = spark_ops("setup", "docker-run", "--image", IMG["ngc"], "--exec", "--", "true", env=eng, cwd=tmp_path)
    if res.returncode != 0:
        assert res.returncode in (1, 125, 126)
    assert probe_leftovers(eng) == []


# ---------------------------------------------------------------- podman itself
def test_podman_engine_pin_and_probe(eng, tmp_path):
    res = spark_ops("setup", "pin", "ngc", "--pull", "--engine", "podman", "--json", env=eng, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    reg = eng["SPARKOPS_TEST_REGISTRY"]
    assert out["engine"] == "podman"
    assert out["ref"] == "nvcr.io/nvidia/pytorch@" + served_digest(reg, "nvidia/pytorch", "25.09-py3")
    # podman gives the GPU through CDI; with no NVIDIA CDI spec the probe says so
    facts = inspect_container(IMG["ngc"], IMG["ngc"], None, eng, limits=LIMITS, engine_name="podman")
    assert facts.container_engine == "podman"
    assert isinstance(facts.torch, Unavailable) and "nvidia-ctk cdi generate" in facts.torch.detail
    res = spark_ops("stack", "--container", IMG["ngc"], "--engine", "podman", "--json", env=eng, cwd=tmp_path)
    assert json.loads(res.stdout)["container"]["engine"] == "podman"


# ---------------------------------------------------------------- the README, literally
def test_readme_from_nothing_to_a_verified_environment(eng, tmp_path):
    text = (ROOT / "README.md").read_text()
    section = text.split("## From nothing to a verified environment", 1)[1].split("\n## ", 1)[0]
    block = section.split("```", 2)[1]
    lines = [ln.split("#", 1)[0].strip() for ln in block.splitlines()]
    cmds = [shlex.split(ln)[1:] for ln in lines if ln.startswith("spark-ops ")]
    assert len(cmds) >= 7 and cmds[2][:2] == ["setup", "pin"]
    reg = eng["SPARKOPS_TEST_REGISTRY"]
    results = []
    for args in cmds:
        stdin = "python3 -c 'import torch; print(torch.__version__)'\nexit 0\n" if "--exec" in args else None
        res = spark_ops(*args, env=eng, cwd=tmp_path, input=stdin)
        if "--exec" in args and res.returncode != 0:
            # this host may not raise memlock (no CAP_SYS_RESOURCE; through podman's API the CLI only
            # says "unable to upgrade to tcp, received 409"): the same line without the limits
            res = spark_ops(*args, "--no-ulimits", env=eng, cwd=tmp_path, input=stdin)
        results.append(res)
    pinned = "docker.io/unsloth/unsloth@" + served_digest(reg, "unsloth/unsloth", "dgxspark-latest")
    setup, use, pin, run, pre, stack, exe = results[:7]
    assert setup.returncode == use.returncode == 0 and "unsloth" in use.stdout
    assert pin.returncode == 0 and pin.stdout.strip() == pinned
    assert run.returncode == 0 and pinned in run.stdout.splitlines()[0]
    assert pre.returncode in (0, 1, 2) and f"({pinned}) via docker" in pre.stdout
    assert stack.returncode in (0, 1) and "unsloth" in stack.stdout
    assert exe.returncode == 0 and exe.stdout.strip() == "2.9.0+cu130", exe.stderr
    assert probe_leftovers(eng) == []
