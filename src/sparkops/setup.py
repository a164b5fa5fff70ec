"""``spark-ops setup``: the container-first decision, the exact ``docker run``, digest pinning and
the bare-pip sequence (``shared/spec/stack-matrix.md``), as commands that print what to run.

Pure functions take the matrix, an ``env`` (whose PATH finds ``docker``) and the lock path, so
tests drive them with fake executables; :func:`register` adds the ``setup`` sub-app to the CLI.

Docker is only ever spawned through :func:`sparkops.probes._run.run` (bounded, never raises),
except ``docker-run --exec``: an interactive ``-it`` container needs the user's terminal, which
``_run`` (captured pipes, own session, a deadline) cannot give it, so the tool replaces itself
with ``docker`` through :func:`os.execvp` -- the container's exit status becomes ours.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from sparkops.knowledge import StackMatrix

EXIT_OK = 0
EXIT_TOOL_ERROR = 3
LOCK_NAME = ".spark-ops.lock.json"
INSPECT_TIMEOUT_S = 20.0
PULL_TIMEOUT_S = 1800.0  # a first pull of a ~20 GB image on a slow link
DIGEST_RE = re.compile(r"^[^\s@]+@sha256:[0-9a-f]{64}$")
VERIFY_LINE = 'python -c "import torch; print(torch.cuda.is_available(), torch.version.cuda)"'
VERIFY_EXPECT = "True 13.0"
_NO_ENGINE = "Cannot connect to the Docker daemon"


class SetupError(Exception):
    """An expected failure with a message for the user (exit 3)."""


def _matrix() -> StackMatrix:
    from sparkops.knowledge import load

    return load().matrix


# ---------------------------------------------------------------- 1. the container-first decision
class Use(str, Enum):
    ngc = "ngc"
    unsloth = "unsloth"
    custom = "custom"


def choices(matrix: StackMatrix) -> list[dict[str, str]]:
    """The three ways to set up, each with its image (or none) and why."""
    return [
        {"use": "ngc", "image": matrix.base_image, "approach": "NGC PyTorch container",
         "when": "standard training / inference",
         "why": f"ships the verified torch {matrix.base_torch} with CUDA 13.0 for GB10; nothing to build",
         "next": "spark-ops setup docker-run --image ngc"},
        {"use": "unsloth", "image": matrix.unsloth_image, "approach": "Unsloth container",
         "when": "Unsloth-centred fine-tuning",
         "why": "Unsloth's own DGX Spark image; a MOVING tag, so pin its digest and run by "
                "repo@sha256:... or the run cannot be reproduced",
         "next": f"spark-ops setup pin {matrix.unsloth_image} --pull && spark-ops setup docker-run --image unsloth"},
        {"use": "custom", "image": "", "approach": "bare pip in an isolated environment",
         "when": "neither image fits (a custom system package, a local IDE interpreter)",
         "why": "the exact sequence below keeps the pinned stack; order and --no-deps are load-bearing",
         "next": "spark-ops setup bare-pip --uv"},
    ]


def decide(use: Use | None, matrix: StackMatrix) -> dict[str, Any]:
    all_ = choices(matrix)
    if use is None:
        return {"decision": None, "choices": all_}
    return {"decision": next(c for c in all_ if c["use"] == use.value), "choices": all_}


# ---------------------------------------------------------------- lock file
def lock_path(cwd: Path | None = None) -> Path:
    return (cwd or Path.cwd()) / LOCK_NAME


def normalize_image(image: str) -> str:
    """``repo`` -> ``repo:latest`` (docker's default tag); a tag or digest is kept."""
    if "@" in image:
        return image
    last = image.rsplit("/", 1)[-1]
    return image if ":" in last else f"{image}:latest"


def read_lock(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {"version": 1, "images": {}}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SetupError(f"cannot read the lock file {path}: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("images"), dict):
        raise SetupError(f"the lock file {path} is not a spark-ops lock (no 'images' mapping)")
    return data


def pinned_ref(image: str, path: Path) -> str | None:
    entry = read_lock(path)["images"].get(normalize_image(image))
    return entry.get("ref") if isinstance(entry, dict) else None


def write_lock_entry(path: Path, image: str, ref: str, now: datetime | None = None) -> dict[str, Any]:
    from sparkops.facts.snapshot import write_atomic

    data = read_lock(path)
    data["images"][normalize_image(image)] = {
        "ref": ref, "pinned_at": (now or datetime.now(timezone.utc)).isoformat(timespec="seconds")}
    write_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
    return data


# ---------------------------------------------------------------- 3. pin
def resolve_alias(image: str, matrix: StackMatrix) -> str:
    return {"ngc": matrix.base_image, "unsloth": matrix.unsloth_image}.get(image, image)


def _docker_failure(what: str, res: Any) -> SetupError:
    from sparkops.probes._run import RunResult

    assert isinstance(res, RunResult)
    if res.error == "not_found":
        return SetupError("docker CLI not found on PATH: install Docker (DGX OS ships it) or use "
                          "`spark-ops setup bare-pip`")
    if res.error == "timeout":
        return SetupError(f"`{what}` did not answer within {res.duration_s:.0f} s and was killed: the Docker "
                          "engine looks hung (try `sudo systemctl restart docker`)")
    text = (res.stderr + "\n" + res.stdout).strip()
    if _NO_ENGINE in text:
        return SetupError("the Docker engine is not running (\"Cannot connect to the Docker daemon\"): start it "
                          "with `sudo systemctl start docker`; if it runs, add yourself to the docker group")
    if "permission denied while trying to connect to the Docker daemon" in text:
        return SetupError("no permission to reach the Docker engine: `sudo usermod -aG docker $USER`, then log "
                          "in again (or run `newgrp docker`)")
    tail = text.splitlines()[-1][:300] if text else f"exit {res.returncode}"
    hint = " (not pulled yet? add --pull)" if what.startswith("docker inspect") else ""
    return SetupError(f"`{what}` failed: {tail}{hint}")


def pin(image: str, *, pull: bool = False, env: Mapping[str, str] | None = None, lock: Path | None = None,
        timeout: float = INSPECT_TIMEOUT_S, pull_timeout: float = PULL_TIMEOUT_S,
        matrix: StackMatrix | None = None) -> dict[str, Any]:
    """Resolve ``image`` to ``repo@sha256:...`` through the docker CLI and record it in the lock file.
    Raises :class:`SetupError` (no docker, no engine, a hang, no digest)."""
    from sparkops.probes._run import run, which

    image = resolve_alias(image, matrix or _matrix())
    env = dict(env) if env is not None else dict(os.environ)
    if which("docker", env) is None:
        raise SetupError("docker CLI not found on PATH: install Docker (DGX OS ships it) or use "
                         "`spark-ops setup bare-pip`")
    if pull:
        res = run(["docker", "pull", image], timeout=pull_timeout, env=env)
        if not res.ok:
            raise _docker_failure(f"docker pull {image}", res)
    res = run(["docker", "inspect", "--format", "{{index .RepoDigests 0}}", image], timeout=timeout, env=env)
    if not res.ok:
        raise _docker_failure(f"docker inspect {image}", res)
    ref = res.stdout.strip()
    if not DIGEST_RE.match(ref):
        raise SetupError(f"docker reported no registry digest for {image} (got {ref[:200]!r}): a locally built "
                         "image has none; pull it from its registry first (--pull)")
    path = lock or lock_path()
    write_lock_entry(path, image, ref)
    return {"image": normalize_image(image), "ref": ref, "lock": str(path), "pulled": pull}


# ---------------------------------------------------------------- 2. docker run
@dataclass
class DockerRun:
    argv: list[str]
    image: str  # as asked (alias resolved)
    ref: str  # what runs: the pinned digest when the lock has one
    pinned: bool
    whys: list[tuple[str, str]]
    notes: list[str] = field(default_factory=list)

    def shell(self) -> str:
        """The invocation as one shell line; the mount in double quotes like the spec's example."""
        out: list[str] = []
        for i, a in enumerate(self.argv):
            if i and self.argv[i - 1] == "-v":
                out.append('"' + re.sub(r'(["\\$`])', r"\\\1", a) + '"')
            else:
                out.append(shlex.quote(a))
        return " ".join(out)


def _is_unsloth(image: str, matrix: StackMatrix) -> bool:
    unsloth_repo = matrix.unsloth_image.split("@")[0].rsplit(":", 1)[0]
    return image.split("@")[0].startswith(unsloth_repo) or "unsloth/unsloth" in image


def docker_run(image: str = "ngc", mount: Path | None = None, cmd: list[str] | None = None, *,
               lock: Path | None = None, matrix: StackMatrix | None = None) -> DockerRun:
    matrix = matrix or _matrix()
    resolved = resolve_alias(image, matrix)
    ref = resolved
    pinned = "@sha256:" in resolved
    if not pinned:
        found = pinned_ref(resolved, lock or lock_path())
        if found:
            ref, pinned = found, True
    src = (mount or Path.cwd()).expanduser().resolve()
    target = f"/workspace/{src.name or 'host'}"
    unsloth = _is_unsloth(resolved, matrix)
    whys: list[tuple[str, str]] = [
        ("--runtime=nvidia --gpus all", "exposes the GPU to the container; without it torch sees no GPU"),
        ("-it", "interactive terminal"),
        ("--rm", "deletes the container on exit: everything not in the mount is lost"),
        ("--ipc=host", "host shared memory, so DataLoader workers do not starve in the 64 MB default /dev/shm"),
        ("--ulimit memlock=-1", "unlimited pinned memory for CUDA/NCCL host buffers"),
        ("--ulimit stack=67108864", "64 MiB stack, as NVIDIA recommends for its PyTorch containers"),
    ]
    argv = ["docker", "run", "--runtime=nvidia", "--gpus", "all", "-it", "--rm", "--ipc=host",
            "--ulimit", "memlock=-1", "--ulimit", "stack=67108864"]
    if unsloth:
        argv.append("--shm-size=32GB")
        whys.append(("--shm-size=32GB", "the Unsloth image is run with a 32 GB /dev/shm"))
    argv += ["-v", f"{src}:{target}", ref, *(cmd or [])]
    whys.append((f"-v {src}:{target}",
                 "keeps checkpoints, logs and data outside the throwaway container layer"))
    notes: list[str] = []
    if pinned and ref != resolved:
        notes.append(f"{resolved} is pinned in {LOCK_NAME}: running {ref}")
    elif not pinned:
        if unsloth:
            notes.append(f"{resolved} is a MOVING tag: run `spark-ops setup pin {resolved} --pull` first so "
                         "this run is reproducible")
        else:
            notes.append(f"not pinned: `spark-ops setup pin {resolved}` records its digest for reproducible runs")
    if not src.is_dir():
        notes.append(f"{src} does not exist: docker would create it owned by root; mkdir it first")
    return DockerRun(argv, resolved, ref, pinned, whys, notes)


# ---------------------------------------------------------------- 4. bare pip
_PIN_RE = re.compile(r'"?([A-Za-z0-9_.\-]+)==([^"\s]+)"?')


def bare_pip(matrix: StackMatrix | None = None, *, uv: bool = False,
             override_file: str = "overrides.txt") -> dict[str, Any]:
    """The matrix's install sequence (order and flags kept), optionally as ``uv pip`` with the pins
    forced through an ``--override`` file."""
    matrix = matrix or _matrix()
    seq = list(matrix.bare_pip_sequence)
    pins: list[str] = []
    for line in seq:
        for name, ver in _PIN_RE.findall(line):
            if f"{name}=={ver}" not in pins:
                pins.append(f"{name}=={ver}")
    overrides = ""
    if uv:
        seq = [re.sub(r"^pip install", f"uv pip install --override {override_file}", line) for line in seq]
        overrides = "".join(p + "\n" for p in pins)
    notes = [
        "run inside an isolated environment (uv venv / python -m venv), never the system Python; torch "
        "(official cu130 aarch64 wheel, or the NGC base's) must already be installed there",
        "line 2 uses --no-deps: re-resolving Unsloth's tree on aarch64 pulls an incompatible torch/triton",
        "line 3 upgrades torchao: below 0.16.0 peft's LoRA attach raises ImportError (hard blocker)",
    ]
    return {"uv": uv, "steps": seq, "override_file": override_file if uv else None,
            "override_content": overrides if uv else None, "pins": pins,
            "verify": VERIFY_LINE, "expect": VERIFY_EXPECT, "notes": notes}


# ---------------------------------------------------------------- CLI
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]


def _emit_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2) + "\n")


def _fail(msg: str, as_json: bool) -> int:
    if as_json:
        _emit_json({"error": msg})
    typer.echo(f"spark-ops: {msg}", err=True)
    return EXIT_TOOL_ERROR


def register(app: typer.Typer) -> None:
    """Add the ``setup`` sub-app (decision, docker-run, pin, bare-pip) to ``app``."""
    setup_app = typer.Typer(add_completion=False, rich_markup_mode=None,
                            help="Container-first setup: NGC, Unsloth (pinned), or bare pip.")

    @setup_app.callback(invoke_without_command=True)
    def setup_cmd(
        ctx: typer.Context,
        use: Annotated[Use | None, typer.Option("--use", help="ngc | unsloth | custom", show_default=False)] = None,
        as_json: JsonOpt = False,
    ) -> int:
        """The container-first decision and its reason; without --use, the three choices."""
        if ctx.invoked_subcommand is not None:
            return EXIT_OK
        res = decide(use, _matrix())
        if as_json:
            _emit_json(res)
            return EXIT_OK
        d = res["decision"]
        if d is None:
            typer.echo("Container first. Pick one with --use:")
            for c in res["choices"]:
                typer.echo(f"  --use {c['use']:<8} {c['approach']} -- {c['when']}")
                typer.echo(f"  {'':<14} why: {c['why']}")
            return EXIT_OK
        typer.echo(f"{d['approach']}" + (f": {d['image']}" if d["image"] else ""))
        typer.echo(f"  when: {d['when']}")
        typer.echo(f"  why:  {d['why']}")
        typer.echo(f"  next: {d['next']}")
        return EXIT_OK

    @setup_app.command("docker-run")
    def docker_run_cmd(
        cmd: Annotated[list[str] | None, typer.Argument(help="Command to run in the container (after --).",
                                                        show_default=False)] = None,
        image: Annotated[str, typer.Option("--image", help="ngc | unsloth | any IMAGE[:TAG]")] = "ngc",
        mount: Annotated[Path | None, typer.Option("--mount", help="Host directory to mount (default: the "
                         "working directory) at /workspace/<name>.", show_default=False)] = None,
        do_exec: Annotated[bool, typer.Option("--exec", help="Run it now (hands the terminal to docker).")] = False,
        as_json: JsonOpt = False,
    ) -> int:
        """The exact `docker run` for the image, each flag with its reason; pinned digest when locked."""
        try:
            dr = docker_run(image, mount, cmd)
        except SetupError as exc:
            return _fail(str(exc), as_json)
        if as_json:
            _emit_json({"argv": dr.argv, "command": dr.shell(), "image": dr.image, "ref": dr.ref,
                        "pinned": dr.pinned, "why": [{"flag": f, "why": w} for f, w in dr.whys],
                        "notes": dr.notes, "exec": do_exec})
        else:
            typer.echo(dr.shell())
            typer.echo("")
            for flag, why in dr.whys:
                typer.echo(f"  {flag:<28} {why}")
            for n in dr.notes:
                typer.echo(f"note: {n}")
        if not do_exec:
            return EXIT_OK
        from sparkops.probes._run import which

        exe = which("docker")
        if exe is None:
            return _fail("docker CLI not found on PATH", as_json)
        sys.stdout.flush()
        sys.stderr.flush()
        os.execvp(exe, dr.argv)  # noqa: S606 - interactive: the container takes over this terminal
        return EXIT_TOOL_ERROR  # not reached (execvp raises OSError on failure -> exit 3 in main)

    @setup_app.command("pin")
    def pin_cmd(
        image: Annotated[str, typer.Argument(help="IMAGE[:TAG] (or ngc | unsloth)")],
        pull: Annotated[bool, typer.Option("--pull", help="docker pull IMAGE first.")] = False,
        timeout: Annotated[float, typer.Option("--timeout", help="Seconds for docker inspect.")] = INSPECT_TIMEOUT_S,
        pull_timeout: Annotated[float, typer.Option("--pull-timeout", help="Seconds for docker pull.")] = PULL_TIMEOUT_S,
        as_json: JsonOpt = False,
    ) -> int:
        """Resolve a (moving) tag to repo@sha256:... and record it in .spark-ops.lock.json."""
        try:
            res = pin(image, pull=pull, timeout=timeout, pull_timeout=pull_timeout)
        except SetupError as exc:
            return _fail(str(exc), as_json)
        if as_json:
            _emit_json(res)
        else:
            typer.echo(res["ref"])
            typer.echo(f"recorded in {res['lock']} for {res['image']}", err=True)
        return EXIT_OK

    @setup_app.command("bare-pip")
    def bare_pip_cmd(
        uv: Annotated[bool, typer.Option("--uv", help="uv pip install with an --override file of the pins.")] = False,
        as_json: JsonOpt = False,
    ) -> int:
        """The exact bare-pip install sequence (order and --no-deps matter), then the verification."""
        res = bare_pip(uv=uv)
        if as_json:
            _emit_json(res)
            return EXIT_OK
        if uv:
            typer.echo(f"# {res['override_file']} (forces the pins; uv must not substitute other builds):")
            for line in res["override_content"].splitlines():
                typer.echo(f"  {line}")
            typer.echo("")
        typer.echo("# install, in this order:")
        for step in res["steps"]:
            typer.echo(step)
        typer.echo("")
        typer.echo("# then verify (expect: " + res["expect"] + "):")
        typer.echo(res["verify"])
        typer.echo("")
        for n in res["notes"]:
            typer.echo(f"note: {n}")
        return EXIT_OK

    app.add_typer(setup_app, name="setup")
