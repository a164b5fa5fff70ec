"""``spark-ops setup``: the container-first decision, the exact ``docker run``, digest pinning and
the bare-pip sequence (``shared/spec/stack-matrix.md``), as commands that print what to run.

Pure functions take the matrix, an ``env`` (whose PATH finds ``docker``) and the lock path, so
tests drive them with fake executables; :mod:`sparkops.commands.setup` is the ``setup`` sub-app of the CLI.

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
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sparkops.knowledge import StackMatrix
    from sparkops.probes import CollectOptions

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


def _docker_failure(what: str, res: Any, engine_name: str = "docker") -> SetupError:
    from sparkops.probes import engine
    from sparkops.probes._run import RunResult

    assert isinstance(res, RunResult)
    if res.error == "not_found":
        return SetupError(_no_cli(engine_name))
    if res.error == "timeout":
        return SetupError(f"`{what}` did not answer within {res.duration_s:.0f} s and was killed: the {engine_name} "
                          "engine looks hung (try `sudo systemctl restart docker`)")
    text = (res.stderr + "\n" + res.stdout).strip()
    kind = engine.problem(engine_name, text)
    if kind in ("no_engine", "no_permission"):
        return SetupError(engine.advice(engine_name, kind))
    tail = text.splitlines()[-1][:300] if text else f"exit {res.returncode}"
    hint = " (not pulled yet? add --pull)" if " inspect " in what and kind == "no_image" else ""
    return SetupError(f"`{what}` failed: {tail}{hint}")


def _no_cli(engine_name: str) -> str:
    return (f"{engine_name} CLI not found on PATH: install Docker (DGX OS ships it) or podman (then --engine "
            "podman), or use `spark-ops setup bare-pip`")


_PULLED_DIGEST_RE = re.compile(r"^Digest: (sha256:[0-9a-f]{64})\s*$", re.M)


def repo_digests(inspect_text: str, image: str) -> tuple[list[str], list[str]]:
    """(the ``repo@sha256:...`` of ``image``'s own repository, those of other repositories) in
    ``docker image inspect --format INSPECT_FORMAT`` output. An image carries one digest per name
    it was pulled or pushed under, and podman lists every name with every manifest digest the image
    has (a locally built manifest included, which no registry serves): index 0 is not the answer."""
    from sparkops.probes.engine import full_repo
    from sparkops.probes.target_env import _REPO_DIGEST_RE, image_repo

    repo = full_repo(image_repo(image))
    mine: list[str] = []
    others: list[str] = []
    for token in inspect_text.split():
        if _REPO_DIGEST_RE.match(token):
            (mine if full_repo(image_repo(token)) == repo else others).append(token)
    return mine, others


def pin(image: str, *, pull: bool = False, env: Mapping[str, str] | None = None, lock: Path | None = None,
        timeout: float = INSPECT_TIMEOUT_S, pull_timeout: float = PULL_TIMEOUT_S,
        matrix: StackMatrix | None = None, engine_name: str | None = None) -> dict[str, Any]:
    """Resolve ``image`` to ``repo@sha256:...`` through the docker (or podman) CLI and record it in the
    lock file: the digest the registry serves for THAT repository (the pull's ``Digest:`` line when
    the engine prints one; else the image's digests for that repository, each confirmed by a pull by
    digest when there are several). Raises :class:`SetupError` (no CLI, no engine, a hang, no digest)."""
    from sparkops.probes import engine
    from sparkops.probes._run import run, which
    from sparkops.probes.target_env import INSPECT_FORMAT, image_repo

    image = resolve_alias(image, matrix or _matrix())
    env = dict(env) if env is not None else dict(os.environ)
    eng, _why = engine.choose(engine_name, env)
    if which(eng, env) is None:
        raise SetupError(_no_cli(eng))
    served: str | None = None
    if pull:
        res = run([eng, "pull", image], timeout=pull_timeout, env=env)
        if not res.ok:
            raise _docker_failure(f"{eng} pull {image}", res, eng)
        m = _PULLED_DIGEST_RE.search(res.stdout)
        served = m.group(1) if m else None  # Docker Engine prints it; podman (CLI or API) does not
    res = run([eng, "image", "inspect", "--format", INSPECT_FORMAT, image], timeout=timeout, env=env)
    if not res.ok:
        raise _docker_failure(f"{eng} image inspect {image}", res, eng)
    mine, others = repo_digests(res.stdout, image)
    if served:
        ref = next((d for d in mine if d.endswith("@" + served)), f"{image_repo(image)}@{served}")
    elif len(mine) == 1:
        ref = mine[0]
    elif mine:
        confirmed = [d for d in mine
                     if run([eng, "pull", d], timeout=pull_timeout, env=env).ok]
        if len(confirmed) != 1:
            raise SetupError(f"{image} carries {len(mine)} digests for its repository and the registry "
                             f"{'serves none' if not confirmed else 'serves ' + str(len(confirmed))} of them "
                             f"({', '.join(mine)}): pull it again with --pull, or pin one explicitly")
        ref = confirmed[0]
    else:
        also = f"; it carries digests only for other repositories ({', '.join(others[:3])})" if others else ""
        raise SetupError(f"{eng} reported no registry digest of {image_repo(image)} for {image}{also}: a locally "
                         "built or retagged image has none; pull it from its registry first (--pull)")
    if not DIGEST_RE.match(ref):
        raise SetupError(f"{eng} reported no usable digest for {image} (got {ref[:200]!r})")
    path = lock or lock_path()
    write_lock_entry(path, image, ref)
    return {"image": normalize_image(image), "ref": ref, "lock": str(path), "pulled": pull, "engine": eng}


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


def run_ref(image: str, lock: Path | None = None, matrix: StackMatrix | None = None) -> tuple[str, str, bool]:
    """(image with the alias resolved, what to run, pinned?): an explicit ``@sha256:`` ref runs as
    given, else the lock file's pinned digest when it has one, else the tag. ``docker-run`` and
    ``--container`` both resolve through here. Raises :class:`SetupError` on a bad lock file."""
    resolved = resolve_alias(image, matrix or _matrix())
    if "@sha256:" in resolved:
        return resolved, resolved, True
    found = pinned_ref(resolved, lock or lock_path())
    return (resolved, found, True) if found else (resolved, resolved, False)


def docker_run(image: str = "ngc", mount: Path | None = None, cmd: list[str] | None = None, *,
               lock: Path | None = None, matrix: StackMatrix | None = None, engine_name: str = "docker",
               tty: bool = True, rm: bool = True, name: str | None = None, ulimits: bool = True) -> DockerRun:
    """The invocation for ``image`` on ``engine_name``; ``tty=False`` drops ``-t`` (stdin is not a
    terminal), ``rm=False`` with ``name`` runs a container removed by name afterwards (podman's
    Docker API loses a ``--rm`` container's exit status)."""
    from sparkops.probes import engine

    matrix = matrix or _matrix()
    resolved, ref, pinned = run_ref(image, lock, matrix)
    src = (mount or Path.cwd()).expanduser().resolve()
    target = f"/workspace/{src.name or 'host'}"
    unsloth = _is_unsloth(resolved, matrix)
    gpu = engine.gpu_flags(engine_name)
    whys: list[tuple[str, str]] = [
        (" ".join(gpu), engine.gpu_flags_why(engine_name)),
        ("-it" if tty else "-i", "interactive terminal" if tty else "stdin kept open (no terminal here, so no -t)"),
        ("--rm", "deletes the container on exit: everything not in the mount is lost") if rm else
        (f"--name {name}", "removed by name on exit (podman's Docker API loses the exit status of --rm): "
                           "everything not in the mount is lost"),
        ("--ipc=host", "host shared memory, so DataLoader workers do not starve in the 64 MB default /dev/shm"),
    ]
    if ulimits:
        whys += [("--ulimit memlock=-1", "unlimited pinned memory for CUDA/NCCL host buffers"),
                 ("--ulimit stack=67108864", "64 MiB stack, as NVIDIA recommends for its PyTorch containers")]
    argv = [engine_name, "run", *gpu, "-it" if tty else "-i", *(["--rm"] if rm else ["--name", name or ""]),
            "--ipc=host", *(["--ulimit", "memlock=-1", "--ulimit", "stack=67108864"] if ulimits else [])]
    notes: list[str] = [] if ulimits else [
        "--no-ulimits: the engine's default memlock and stack limits apply (pinned-memory transfers may be slower)"]
    if unsloth:  # its docs add --shm-size=32GB; beside --ipc=host it is moot, and podman refuses the pair
        notes.append("Unsloth's own invocation adds --shm-size=32GB: --ipc=host already shares the host's /dev/shm "
                     "(Docker ignores a size beside it; podman refuses the pair), so it is left out")
    argv += ["-v", f"{src}:{target}", ref, *(cmd or [])]
    whys.append((f"-v {src}:{target}",
                 "keeps checkpoints, logs and data outside the throwaway container layer"))
    if pinned and ref != resolved:
        notes.append(f"{resolved} is pinned in {LOCK_NAME}: running {ref}")
    elif not pinned:
        if unsloth:
            notes.append(f"{resolved} is a MOVING tag: run `spark-ops setup pin {resolved} --pull` first so "
                         "this run is reproducible")
        else:
            notes.append(f"not pinned: `spark-ops setup pin {resolved}` records its digest for reproducible runs")
    if not src.is_dir():
        notes.append(f"{src} does not exist: {engine_name} would create it owned by root; mkdir it first")
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


# ---------------------------------------------------------------- 4b. bare pip, executed
EXIT_STEP_FAILED = 1
EXIT_VERIFY_FAILED = 2


@dataclass
class Step:
    """One command of the sequence and how it went (``status``: ok | failed | timeout | not_run)."""

    n: int
    command: str  # as the sequence prints it
    argv: list[str]  # what runs (the target's ``-m pip`` or ``uv pip --python``)
    status: str = "not_run"
    exit_code: int | None = None
    duration_s: float | None = None
    stderr_tail: str = ""

    def as_json(self) -> dict[str, Any]:
        return {"n": self.n, "command": self.command, "argv": self.argv, "status": self.status,
                "exit_code": self.exit_code, "duration_s": self.duration_s, "stderr_tail": self.stderr_tail}


def exec_argv(line: str, python: str, uv_exe: str | None) -> list[str]:
    """A printed sequence line as the argv that installs into ``python``'s environment."""
    words = shlex.split(line)
    if uv_exe and words[:3] == ["uv", "pip", "install"]:
        return [uv_exe, "pip", "install", "--python", python, *words[3:]]
    if words[:1] == ["pip"]:
        return [python, "-m", "pip", *words[1:]]
    return words


def judge_verify(res: Any, expect: str = VERIFY_EXPECT) -> tuple[str, str]:
    """(pass | fail, why) for the verification's outcome: exactly ``True 13.0`` passes."""
    from sparkops.probes._run import RunResult

    assert isinstance(res, RunResult)
    lines = [ln.strip() for ln in res.stdout.splitlines() if ln.strip()]
    last = lines[-1] if lines else ""
    if res.error == "timeout":
        return "fail", f"import torch did not finish within {res.duration_s:.0f} s (killed)"
    if not res.ok or not last:
        err = (res.stderr.strip().splitlines() or [res.describe()])[-1][:300]
        return "fail", f"import torch failed: {err}"
    if last == expect:
        return "pass", f"printed {last!r} as expected"
    words = last.split()
    if words and words[0] == "False":
        return "fail", f"printed {last!r}: torch sees no GPU"
    if len(words) == 2 and words[0] == "True":
        return "fail", f"printed {last!r}: torch is built for CUDA {words[1]}, expected {expect.split()[1]} (G1)"
    return "fail", f"printed {last!r}, expected {expect!r}"


class _Tee:
    """Copies what a running step has written so far to the user's stream, as it comes
    (:meth:`Pending.output_so_far`, polled). Bytes are decoded incrementally so a UTF-8 character
    split across reads is not mangled."""

    def __init__(self, pending: Any, out: Any) -> None:
        import codecs

        self.pending, self.out = pending, out
        self.sent = [0, 0]  # bytes of stdout, stderr already written
        self.dec = [codecs.getincrementaldecoder("utf-8")(errors="replace") for _ in self.sent]

    def pump(self, final: bool = False) -> None:
        for i, data in enumerate(self.pending.output_so_far()):
            chunk, self.sent[i] = data[self.sent[i]:], len(data)
            text = self.dec[i].decode(chunk, final=final)
            if text:
                self.out.write(text)
                self.out.flush()


def run_step(argv: list[str], timeout: float, env: Mapping[str, str], out: Any, poll_s: float = 0.1) -> Any:
    """Run one step, bounded, streaming its output to ``out``; the RunResult. Ctrl-C kills it."""
    import time

    from sparkops.probes._run import spawn

    pending = spawn(argv, env=env)
    tee = _Tee(pending, out)
    try:
        while pending.proc is not None and pending.proc.poll() is None \
                and time.monotonic() - pending.started < timeout:
            tee.pump()
            time.sleep(poll_s)
        res = pending.result(timeout)
    finally:
        pending.kill()
    tee.pump(final=True)
    return res


def execute_bare_pip(python: str | None = None, *, uv: bool = False, env: Mapping[str, str] | None = None,
                     out: Any = None, step_timeout_s: float | None = None, verify_timeout_s: float | None = None,
                     matrix: StackMatrix | None = None) -> dict[str, Any]:
    """Run the bare-pip sequence in the target environment, step by step, stopping at the first
    failing step, then the verification. Raises :class:`SetupError` when nothing can start (no
    interpreter, no uv, no torch in it). The dict carries ``exit_code``: 0 verified, 1 a step
    failed, 2 the verification failed."""
    import tempfile

    from sparkops.facts.reading import Unavailable, Why
    from sparkops.knowledge import load
    from sparkops.probes import target_env
    from sparkops.probes._run import run, which

    kb = load()
    env = dict(env) if env is not None else dict(os.environ)
    out = out or sys.stdout
    step_timeout_s = step_timeout_s or kb.thresholds.setup.pip_step_timeout_s
    verify_timeout_s = verify_timeout_s or kb.thresholds.setup.verify_timeout_s
    tail_lines = kb.thresholds.setup.stderr_tail_lines
    exe, chosen = target_env.choose_interpreter(python, env)
    if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
        raise SetupError(f"target interpreter {exe} ({chosen}) does not exist or is not executable")
    uv_exe = which("uv", env) if uv else None
    if uv and uv_exe is None:
        raise SetupError("uv not found on PATH: install it (`curl -LsSf https://astral.sh/uv/install.sh | sh`) "
                         "or drop --uv")
    pre = target_env.inspect_target(exe, env, depth="quick", limits=target_env.Limits(
        kb.thresholds.setup.precheck_timeout_s, 0.0, 0, 0.0))
    if isinstance(pre.torch, Unavailable) and pre.torch.unavailable is Why.not_found:
        raise SetupError(f"torch is not installed in {exe}: install the official cu130 wheel first "
                         "(`pip install torch --index-url https://download.pytorch.org/whl/cu130`) or use the "
                         "NGC container; the sequence would otherwise pull a torch of its own")
    notes = [f"target: {exe} ({chosen})"]
    if pre.env.kind == "system":
        notes.append(f"{exe} is a system Python: outside a container, prefer an isolated environment (uv venv)")
    with tempfile.TemporaryDirectory(prefix="spark-ops-") as tmp:
        override = os.path.join(tmp, "overrides.txt")
        plan = bare_pip(matrix, uv=uv, override_file=override)
        if uv:
            Path(override).write_text(plan["override_content"], encoding="utf-8")
        steps = [Step(i + 1, line, exec_argv(line, exe, uv_exe)) for i, line in enumerate(plan["steps"])]
        failed: Step | None = None
        for step in steps:
            out.write(f"\n[{step.n}/{len(steps)}] {shlex.join(step.argv)}\n")
            out.flush()
            res = run_step(step.argv, step_timeout_s, env, out)
            step.exit_code, step.duration_s = res.returncode, round(res.duration_s, 1)
            step.status = "ok" if res.ok else ("timeout" if res.error == "timeout" else "failed")
            if not res.ok:
                tail = (res.stderr or res.stdout).strip().splitlines()[-tail_lines:]
                step.stderr_tail = "\n".join(tail) or res.describe()
                failed = step
                break
    verify: dict[str, Any] = {"command": VERIFY_LINE, "expect": VERIFY_EXPECT, "status": "not_run",
                              "output": "", "exit_code": None, "duration_s": None, "reason": "", "hint": ""}
    if failed is None:
        vres = run([exe, "-c", "import torch; print(torch.cuda.is_available(), torch.version.cuda)"],
                   timeout=verify_timeout_s, env=env)
        status, reason = judge_verify(vres)
        verify.update(status=status, reason=reason, exit_code=vres.returncode, duration_s=round(vres.duration_s, 1),
                      output=(vres.stdout.strip().splitlines() or [""])[-1][:200])
        if status != "pass":
            verify["hint"] = f"run `spark-ops triage gpu --python {shlex.quote(exe)}`: the five hypotheses, in order"
    code = EXIT_STEP_FAILED if failed else (EXIT_OK if verify["status"] == "pass" else EXIT_VERIFY_FAILED)
    return {"exec": True, "python": exe, "chosen_because": chosen, "uv": uv, "steps": [s.as_json() for s in steps],
            "failed_step": failed.n if failed else None, "verify": verify, "notes": notes, "exit_code": code}


# ---------------------------------------------------------------- docker-run --exec
def _exec_prepare(image: str, mount: Path | None, cmd: list[str] | None, eng: str,
                  env: Mapping[str, str] | None = None, ulimits: bool = True) -> DockerRun:
    """The invocation ``--exec`` runs: the engine must answer first (no CLI, no engine, no
    permission, a hang: :class:`SetupError`, exit 3, before anything starts); ``-t`` only with a
    terminal; behind podman's Docker API, a named container removed afterwards instead of ``--rm``."""
    import secrets

    from sparkops.probes import engine
    from sparkops.probes._run import run, which

    env = dict(env) if env is not None else dict(os.environ)
    if which(eng, env) is None:
        raise SetupError(_no_cli(eng))
    res = run([eng, "version", "--format", "{{json .Server}}"], timeout=INSPECT_TIMEOUT_S, env=env)
    if not res.ok:
        raise _docker_failure(f"{eng} version", res, eng)
    tty = sys.stdin.isatty() and sys.stdout.isatty()
    behind = eng == "docker" and engine.podman_behind(res.stdout)
    name = f"spark-ops-run-{os.getpid()}-{secrets.token_hex(3)}" if behind else None
    dr = docker_run(image, mount, cmd, engine_name=eng, tty=tty, rm=not behind, name=name, ulimits=ulimits)
    if behind:
        dr.notes.append("podman serves this Docker API: run without --rm (it would lose the exit status), the "
                        f"container {name} is removed when it exits")
    if not tty:
        dr.notes.append("stdin/stdout is not a terminal: -i without -t")
    return dr


def _exec_container(dr: DockerRun) -> int:
    """Run ``dr``; its exit status is ours (128+N when it died on signal N). With ``--rm`` the tool
    replaces itself with the CLI; else it waits (Ctrl-C goes to the container) and removes the
    named container afterwards."""
    import signal
    import subprocess

    from sparkops.probes._run import run, which

    exe = which(dr.argv[0])
    if exe is None:
        raise SetupError(_no_cli(dr.argv[0]))
    sys.stdout.flush()
    sys.stderr.flush()
    if "--rm" in dr.argv:
        os.execvp(exe, dr.argv)  # noqa: S606 - interactive: the container takes over this terminal
        return EXIT_TOOL_ERROR  # not reached (execvp raises OSError on failure -> exit 3 in main)
    name = dr.argv[dr.argv.index("--name") + 1]
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)  # the CLI in the foreground gets it
    try:
        proc = subprocess.Popen([exe, *dr.argv[1:]])  # noqa: S603
        rc = proc.wait()
    finally:
        signal.signal(signal.SIGINT, old)
        run([exe, "rm", "-f", name], timeout=INSPECT_TIMEOUT_S)
    return 128 - rc if rc < 0 else rc


def container_options(opts: CollectOptions | None, image: str, matrix: StackMatrix | None = None,
                      lock: Path | None = None) -> CollectOptions:
    """``opts`` whose target probe runs inside ``image`` (``--container``): an alias (ngc, unsloth)
    or a tag pinned in the lock file resolves as in ``spark-ops setup docker-run``."""
    from dataclasses import replace

    from sparkops.core.errors import InputError
    from sparkops.probes import CollectOptions

    try:
        resolved, ref, _pinned = run_ref(image, lock, matrix)
    except SetupError as exc:
        raise InputError(str(exc)) from exc
    return replace(opts or CollectOptions(), container_image=resolved, container_ref=ref)
