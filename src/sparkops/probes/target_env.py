"""The Python the user trains with: its packages, torch's build, its CUDA extensions, and (full
depth) what a real ``import torch`` says there.

The tool never imports torch: the *target* interpreter runs ``_target_script.py`` in a child.
Quick depth (always) is static and sub-second: one child lists distributions and reads
``torch/version.py`` as text, then this process reads DT_NEEDED of the extension modules of
CUDA-sensitive packages. Full depth adds a live child that imports torch under a hard timeout; it
starts first and runs concurrently, so full costs about one torch import. A child that segfaults,
hangs or prints garbage becomes a :class:`TorchLive` that says so (G1 evidence), never an error.
"""

from __future__ import annotations

import ast
import json
import os
import re
import signal
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from sparkops.core.modeling import ValidationError
from sparkops.facts.model import ExtensionNeeds, PythonEnvFacts, TargetEnvFacts, TorchLive, TorchStatic
from sparkops.facts.reading import Unavailable, Why, missing
from sparkops.probes import _run, elf, engine, target_launch
from sparkops.probes._target_script import RESULT_MARKER, STAGE_MARKER

if TYPE_CHECKING:
    from sparkops.knowledge import Knowledge

SECTION = "target"
SCRIPT = target_launch.SCRIPT
INTEREST = target_launch.INTEREST
choose_interpreter = target_launch.choose_interpreter
_SO_NAME = re.compile(r"\.so(\.|$)")
_WALK_MAX_DEPTH = 6


@dataclass(frozen=True)
class Limits:
    """Per-run bounds, from thresholds.yaml ``probes.*`` unless a caller (a test) overrides them."""

    quick_timeout_s: float
    live_timeout_s: float
    elf_max_files: int
    elf_budget_s: float
    # distributions whose extensions are read for sm_121a code (g7.kernel_packages); None: the packaged list
    kernel_packages: frozenset[str] | None = None

    @classmethod
    def from_kb(cls, kb: Knowledge | None = None) -> Limits:
        """From ``kb`` (the one the caller loaded), else the packaged knowledge (direct library callers)."""
        from sparkops.knowledge import load

        kb = kb or load()
        return cls(
            quick_timeout_s=kb.thresholds.probes.target_quick_timeout_s,
            live_timeout_s=kb.thresholds.probes.target_live_timeout_s,
            elf_max_files=kb.thresholds.probes.elf_max_files,
            elf_budget_s=kb.thresholds.probes.elf_budget_s,
            kernel_packages=frozenset(kb.thresholds.g7.kernel_packages),
        )

    def within(self, budget_s: float, margin_s: float = 1.0) -> Limits:
        """The same limits, each child timeout cut to end ``margin_s`` before ``budget_s`` (0: no cut)."""
        if budget_s <= 0:
            return self
        cap = max(1.0, budget_s - margin_s)
        return Limits(min(self.quick_timeout_s, cap), min(self.live_timeout_s, cap), self.elf_max_files,
                      min(self.elf_budget_s, cap), self.kernel_packages)


# --------------------------------------------------------------------------- entry points
def unavailable(why: Why, detail: str) -> TargetEnvFacts:
    """Every reading of the section missing for the same reason."""
    m = missing(why, detail)
    return TargetEnvFacts(python_version=m, distributions=m, torch=m, extensions=m, live=m)


def collect(opts: Any) -> TargetEnvFacts:
    """Probe the interpreter ``opts`` names (``--python``, else python3 on PATH, else ours), or
    the one inside ``opts.container_ref``.

    The child timeouts are kept inside the collection budget, so a hanging import comes back as
    ``TorchLive(timed_out=True)`` from here rather than as the runner abandoning the whole section.
    """
    budget = float(getattr(opts, "budget_s", 0) or 0)
    ref = opts.container_ref
    if ref:
        return inspect_container(opts.container_image or ref, ref, opts.python, opts.env,
                                 depth=opts.depth, limits=ContainerLimits.from_kb(opts.knowledge()).within(budget),
                                 engine_name=getattr(opts, "container_engine", "") or None)
    return inspect_target(opts.python, opts.env, depth=opts.depth, limits=Limits.from_kb(opts.knowledge()).within(budget))


def inspect_target(
    python: str | None,
    env: Mapping[str, str],
    depth: str = "full",
    limits: Limits | None = None,
) -> TargetEnvFacts:
    """Quick static facts, plus the live torch probe when ``depth == "full"``."""
    limits = limits or Limits.from_kb()
    exe, why = choose_interpreter(python, env)
    if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
        facts = unavailable(Why.not_found, f"target interpreter {exe} ({why}) does not exist or is not executable")
        return facts.model_copy(update={"python": exe, "chosen_because": why})

    live_box: dict[str, TorchLive] = {}

    def live_work() -> None:
        try:
            live_box["live"] = run_live(exe, env, limits.live_timeout_s)
        except Exception as exc:  # a bug here must not read as a hang of the user's torch
            live_box["live"] = TorchLive(import_ok=False, error=f"live probe failed: {type(exc).__name__}: {exc}")

    live_thread: threading.Thread | None = None
    if depth == "full":  # start the slow import first, read the files meanwhile
        live_thread = threading.Thread(target=live_work, name="target-live", daemon=True)
        live_thread.start()

    facts = run_quick(exe, env, limits)
    facts = facts.model_copy(update={"python": exe, "chosen_because": why})
    if live_thread is not None:
        live_thread.join(limits.live_timeout_s + 5.0)  # run_live is itself bounded; this is a backstop
        live = live_box.get("live") or TorchLive(
            import_ok=False, timed_out=True, error="live probe thread did not finish")
        facts = facts.model_copy(update={"live": live})
    return facts


# --------------------------------------------------------------------------- inside a container
@dataclass(frozen=True)
class ContainerLimits:
    """Bounds of ``--container`` (thresholds.yaml ``setup.container_*``): the inspect, and each
    probe container from ``docker run`` to its result."""

    inspect_timeout_s: float
    quick_timeout_s: float
    live_timeout_s: float

    @classmethod
    def from_kb(cls, kb: Knowledge | None = None) -> ContainerLimits:
        """From ``kb`` (the one the caller loaded), else the packaged knowledge (direct library callers)."""
        from sparkops.knowledge import load

        kb = kb or load()
        return cls(kb.thresholds.setup.container_inspect_timeout_s, kb.thresholds.setup.container_quick_timeout_s,
                   kb.thresholds.setup.container_live_timeout_s)

    def within(self, budget_s: float, margin_s: float = 1.0) -> ContainerLimits:
        """Each bound cut to end ``margin_s`` before ``budget_s`` (0: no cut)."""
        if budget_s <= 0:
            return self
        cap = max(1.0, budget_s - margin_s)
        return ContainerLimits(min(self.inspect_timeout_s, cap), min(self.quick_timeout_s, cap),
                               min(self.live_timeout_s, cap))


# {{.Id}} always; the registry digests after it (none for a locally built image)
INSPECT_FORMAT = "{{.Id}}{{range .RepoDigests}} {{.}}{{end}}"
_SHA_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
_REPO_DIGEST_RE = re.compile(r"^([^\s@]+)@sha256:[0-9a-f]{64}$")
_DOCKER_OWN_EXIT = (125, 126, 127)  # docker run itself failed / could not start / no python in the image


def image_repo(ref: str) -> str:
    """``nvcr.io/nvidia/pytorch:25.09-py3`` -> ``nvcr.io/nvidia/pytorch`` (tag and digest dropped)."""
    name = ref.split("@", 1)[0]
    head, _, last = name.rpartition("/")
    return (head + "/" if head else "") + last.split(":", 1)[0]


def parse_image_inspect(text: str, ref: str) -> tuple[str | None, str | None]:
    """(image Id, the digest to report) from ``docker image inspect --format INSPECT_FORMAT``.

    The digest is the ``repo@sha256:...`` of the repository asked for when the image has several,
    else the first one, else the Id (a locally built image has no registry digest). Never raises.
    """
    tokens = text.split()
    image_id = next((t for t in tokens if _SHA_RE.match(t)), None)
    digests = [t for t in tokens if _REPO_DIGEST_RE.match(t)]
    if "@sha256:" in ref and ref in digests:
        return image_id, ref
    repo = engine.full_repo(image_repo(ref))
    same = [d for d in digests if engine.full_repo(image_repo(d)) == repo]
    return image_id, (same or digests or [image_id])[0]


def docker_problem(res: _run.RunResult, ref: str, what: str, engine_name: str = "docker") -> tuple[Why, str]:
    """Why a docker (or podman) call failed, in words a user can act on."""
    if res.error == "not_found":
        return Why.not_found, (f"{engine_name} CLI not found on PATH: install Docker (or podman, with "
                               "--engine podman), or drop --container to judge the host")
    if res.error == "timeout":
        return Why.timeout, (f"`{what}` did not answer within {res.duration_s:.0f} s (killed): the {engine_name} "
                             "engine looks hung (`sudo systemctl restart docker`)")
    text = f"{res.stderr}\n{res.stdout}".strip()
    kind = engine.problem(engine_name, text)
    if kind == "no_engine":
        return Why.error, engine.advice(engine_name, kind)
    if kind == "no_permission":
        return Why.no_permission, engine.advice(engine_name, kind)
    if kind == "no_gpu_runtime":
        return Why.error, engine.advice(engine_name, kind) + f" [{_tail(text)}]"
    if kind == "no_image":
        return Why.not_found, (f"image {ref} is not present locally: `{engine_name} pull {ref}` "
                               f"(or `spark-ops setup pin {ref} --pull`) first")
    return Why.error, f"`{what}` failed: {_tail(text) or f'exit {res.returncode}'}"


def _tail(text: str) -> str:
    return text.strip().splitlines()[-1][:300] if text.strip() else ""


def container_exit(res: _run.RunResult) -> _run.RunResult:
    """The probe container's outcome as the child's: the CLI exits 128+N when the process in the
    container died on signal N (a segfault: 139; ``docker kill``: 137) and printed no result."""
    rc = res.returncode
    if res.error == "nonzero_exit" and rc is not None and 128 < rc < 128 + 65 and parse_result(res.stdout)[0] is None:
        return replace(res, error="signal", signal=rc - 128)
    return res


def inspect_container(
    image: str,
    ref: str,
    python: str | None,
    env: Mapping[str, str],
    depth: str = "full",
    limits: ContainerLimits | None = None,
    engine_name: str | None = None,
) -> TargetEnvFacts:
    """The target probe run inside ``ref`` (``docker run``, script on stdin, the container removed by
    name afterwards), bounded; the digest of the image actually used comes from ``docker image
    inspect``. No docker, no engine, a missing image, no GPU runtime, a hang or a killed container
    leave the section (or its live part) Unavailable with the reason, never an error."""
    limits = limits or ContainerLimits.from_kb()
    eng, eng_why = engine.choose(engine_name, env)
    base: dict[str, Any] = {"container_image": image, "container_ref": ref, "python": python or "python3",
                            "chosen_because": f"inside the container {ref}", "container_engine": eng}

    def failed(why: Why, detail: str, digest: str | Unavailable | None = None) -> TargetEnvFacts:
        facts = unavailable(why, f"container {ref}: {detail}")
        return facts.model_copy(update={**base, "container_digest": digest or missing(why, detail)})

    res = _run.run((eng, "image", "inspect", "--format", INSPECT_FORMAT, ref),
                   timeout=limits.inspect_timeout_s, env=env)
    if not res.ok:
        return failed(*docker_problem(res, ref, f"{eng} image inspect {ref}", eng))
    _image_id, found = parse_image_inspect(res.stdout, ref)
    digest: str | Unavailable = found or missing(Why.error, f"{eng} image inspect printed no Id: {res.stdout[:120]!r}")
    try:
        script = SCRIPT.read_text(encoding="utf-8")
    except OSError as exc:
        return failed(Why.error, f"cannot read the probe script {SCRIPT}: {exc}", digest)

    def start(mode: str) -> tuple[str, _run.Pending]:
        name = target_launch.container_name(mode)
        return name, _run.spawn(target_launch.container_argv(ref, mode, python, name, eng), env=env,
                                stdin_text=script)

    live_run = start("live") if depth == "full" else None  # the slow one first
    quick_name, quick_pending = start("quick")
    quick = quick_pending.result(limits.quick_timeout_s)
    _remove(quick_name, env, limits, eng)
    quick = container_exit(quick)
    payload, problem = parse_result(quick.stdout)
    if payload is None or payload.get("mode") != "quick" or "error" in payload:
        if live_run is not None:
            live_run[1].kill()
            live_run[1].result(0)
            _remove(live_run[0], env, limits, eng)
        if quick.error == "timeout":
            return failed(Why.timeout, f"the probe container did not finish within {limits.quick_timeout_s:g} s "
                                       "(killed and removed)", digest)
        text = f"{quick.stderr}\n{quick.stdout}"
        if quick.returncode in _DOCKER_OWN_EXIT or engine.problem(eng, text):
            why, detail = docker_problem(quick, ref, f"{eng} run {ref}", eng)
            if "no python3 or python on the image PATH" in text:
                why, detail = Why.not_found, ("no python3 or python on the image PATH: the image has no Python "
                                              "(name one with --python PATH-INSIDE-THE-IMAGE)")
        elif quick.error == "signal":
            why, detail = Why.error, (f"the probe container died on signal {quick.signal} ({_signal_name(quick.signal)})"
                                      " before it reported: killed from outside, or the image's python crashed")
        else:
            why, detail = Why.error, _describe_failure(quick, problem or str((payload or {}).get("error", "")))
        return failed(why, detail, digest)
    facts = facts_from_quick(payload, Limits(0, 0, 0, 0), scan=False)
    facts = facts.model_copy(update={**base, "container_digest": digest,
                                     "python": _str(payload.get("executable")) or base["python"]})
    if eng_why == "--engine" or eng != "docker":
        facts = facts.model_copy(update={"chosen_because": f"inside the container {ref} ({eng}, {eng_why})"})
    if live_run is None:
        return facts
    name, pending = live_run
    lres = pending.result(limits.live_timeout_s)
    _remove(name, env, limits, eng)
    lres = container_exit(lres)
    live: TorchLive | Unavailable
    if lres.error == "timeout" and not last_stage(lres.stdout):
        live = missing(Why.timeout, f"the probe container never reached the script within {limits.live_timeout_s:g} s")
    elif lres.returncode in _DOCKER_OWN_EXIT and parse_result(lres.stdout)[0] is None:
        live = missing(*docker_problem(lres, ref, f"{eng} run {ref}", eng))
    else:
        live = live_from_result(lres, limits.live_timeout_s)
    return facts.model_copy(update={"live": live})


def _remove(name: str, env: Mapping[str, str], limits: ContainerLimits, eng: str = "docker") -> None:
    """Remove the probe container by name (bounded): it runs without ``--rm``, and killing the CLI at
    a timeout does not stop it either. Never raises; a container already gone is fine."""
    _run.run((eng, "rm", "-f", name), timeout=limits.inspect_timeout_s, env=env)


# --------------------------------------------------------------------------- quick depth
def run_quick(exe: str, env: Mapping[str, str], limits: Limits) -> TargetEnvFacts:
    """One child lists the environment; this process reads torch's version.py text and ELF needs."""
    res = target_launch.start(target_launch.argv_for(exe, "quick"), env).result(limits.quick_timeout_s)
    payload, problem = parse_result(res.stdout)
    if payload is None or payload.get("mode") != "quick" or "error" in payload:
        why = Why.timeout if res.error == "timeout" else Why.error
        detail = _describe_failure(res, problem or str((payload or {}).get("error", "unexpected result")))
        return unavailable(why, f"static probe of {exe}: {detail}").model_copy(update={"live": missing(Why.not_collected)})
    return facts_from_quick(payload, limits)


def facts_from_quick(payload: Mapping[str, Any], limits: Limits, scan: bool = True) -> TargetEnvFacts:
    """Turn the quick child's JSON into facts, scanning extension modules on the way (not when
    the paths are inside a container: this process cannot read them)."""
    kind = payload.get("env_kind")
    env = PythonEnvFacts(
        kind=kind if kind in ("venv", "uv", "conda", "system") else "unknown",
        prefix=_str(payload.get("prefix")),
        base_prefix=_str(payload.get("base_prefix")),
        site_packages=_str_list(payload.get("site_packages")),
    )
    raw_dists = payload.get("distributions")
    dists: dict[str, str] | Unavailable
    if isinstance(raw_dists, dict):
        dists = {str(k): _str(v) for k, v in raw_dists.items()}
    else:
        dists = missing(Why.error, "; ".join(_str_list(payload.get("errors"))) or "no distribution list")
    torch = static_torch(payload, dists)
    sources = payload.get("extension_sources")
    if not scan:
        ext, truncated = missing(Why.not_collected, "not scanned: the extension modules are inside the container"), False
    elif isinstance(sources, dict):
        kernel_packages = limits.kernel_packages
        if kernel_packages is None:
            from sparkops.knowledge import load

            kernel_packages = frozenset(load().thresholds.g7.kernel_packages)
        extensions, truncated = scan_extensions(sources, limits.elf_max_files, limits.elf_budget_s, kernel_packages)
        ext: list[ExtensionNeeds] | Unavailable = extensions
    else:
        ext, truncated = missing(Why.error, "no extension list"), False
    return TargetEnvFacts(
        python_version=_str(payload.get("python_version")) or missing(Why.error, "not reported"),
        env=env,
        distributions=dists,
        torch=torch,
        extensions=ext,
        extensions_truncated=truncated,
    )


def static_torch(payload: Mapping[str, Any], dists: dict[str, str] | Unavailable) -> TorchStatic | Unavailable:
    """torch's build from torch/version.py text; the dist version only names it in a failure."""
    text = payload.get("torch_version_py")
    location = _str(payload.get("torch_dir"))
    dist_version = dists.get("torch") if isinstance(dists, dict) else None
    if not isinstance(text, str):
        if not location and not dist_version:
            return missing(Why.not_found, "torch is not installed in this interpreter")
        err = _str(payload.get("torch_error")) or "torch/version.py not readable"
        return missing(Why.error, f"torch {dist_version or '?'} at {location or '?'}: {err}")
    fields = parse_torch_version_py(text)
    version = fields.get("__version__")
    if not isinstance(version, str) or not version:
        return missing(Why.error, f"torch/version.py at {location} has no __version__")
    cuda = fields.get("cuda")
    git = fields.get("git_version")
    return TorchStatic(
        version=version,
        cuda=cuda if isinstance(cuda, str) and cuda else None,
        local_tag=local_tag(version),
        location=location,
        git_version=git if isinstance(git, str) else "",
    )


def local_tag(version: str) -> str:
    """The PEP 440 local label: ``cu130``, ``cpu``, ``50eac811a6.nv25.09`` (NGC, no cu tag)."""
    return version.split("+", 1)[1].strip() if "+" in version else ""


_ASSIGN_RE = re.compile(
    r"""^(?P<name>__version__|cuda|git_version|hip|debug)\s*(?::[^=\n]*)?=\s*(?P<value>'[^'\n]*'|"[^"\n]*"|None|True|False)\s*(?:#.*)?$""",
    re.M,
)


def parse_torch_version_py(text: str) -> dict[str, object]:
    """Top-level ``name = literal`` assignments of torch/version.py, read without executing it.

    ``ast`` handles the real files (``cuda: Optional[str] = '13.0'``); a line regex is the
    fallback for text ``ast`` rejects. Never raises.
    """
    out: dict[str, object] = {}
    try:
        tree = ast.parse(text)
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target, value = node.targets[0], node.value
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                target, value = node.target, node.value
            else:
                continue
            if (isinstance(target, ast.Name) and isinstance(value, ast.Constant)
                    and (value.value is None or isinstance(value.value, (str, bool)))):
                out[target.id] = value.value
        return out
    except (SyntaxError, ValueError, RecursionError, MemoryError, TypeError):
        pass
    for m in _ASSIGN_RE.finditer(text):
        raw = m.group("value")
        out[m.group("name")] = {"None": None, "True": True, "False": False}.get(raw, raw[1:-1])
    return out


# --------------------------------------------------------------------------- extension scan
def _candidate_files(sources: Mapping[str, Any], deadline: float, cut: list[bool]) -> Iterable[tuple[str, str]]:
    """(package, path) in INTEREST order: RECORD-listed .so files, or a bounded walk of roots.

    Stops at ``deadline`` even inside a walk that finds nothing (so a huge tree cannot stall it)
    and then sets ``cut[0]``.
    """
    order = {name: i for i, name in enumerate(INTEREST)}
    for package in sorted(sources, key=lambda n: order.get(str(n), len(order))):
        src = sources.get(package)
        if not isinstance(src, dict):
            continue
        for path in _str_list(src.get("files")):
            yield str(package), path
        for root in _str_list(src.get("roots")):
            base_depth = root.rstrip(os.sep).count(os.sep)
            for dirpath, dirnames, filenames in os.walk(root):
                if time.monotonic() > deadline:
                    cut[0] = True
                    return
                if dirpath.count(os.sep) - base_depth >= _WALK_MAX_DEPTH:
                    dirnames[:] = []
                dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
                for fn in sorted(filenames):
                    if _SO_NAME.search(fn):
                        yield str(package), os.path.join(dirpath, fn)


def scan_extensions(
    sources: Mapping[str, Any], max_files: int, budget_s: float, kernel_packages: frozenset[str] = frozenset()
) -> tuple[list[ExtensionNeeds], bool]:
    """CUDA DT_NEEDED of each extension module, and for ``kernel_packages`` (serving engines' kernel
    libraries) the GPU targets their fatbins carry; ``truncated`` when the file or time budget ran out."""
    found: list[ExtensionNeeds] = []
    seen: set[str] = set()
    deadline = time.monotonic() + budget_s
    examined = 0
    cut = [False]
    for package, path in _candidate_files(sources, deadline, cut):
        if path in seen:
            continue
        if examined >= max_files or time.monotonic() > deadline:
            return found, True
        seen.add(path)
        examined += 1
        info = elf.dynamic_info(path)
        needs = elf.cuda_needs(info.needed)
        kernels = elf.fatbin_targets(path) if package in kernel_packages else []
        if needs or kernels:
            runpath = elf.expand_origin(info.runpath, path)
            resolved = {}
            for need in needs:
                hit = next((os.path.join(d, need) for d in runpath if os.path.exists(os.path.join(d, need))), None)
                if hit:
                    resolved[need] = hit
            found.append(ExtensionNeeds(package=package, file=path, needed=needs, runpath=runpath, resolved=resolved,
                                        kernels=kernels))
    return found, cut[0]


def _str(x: object) -> str:
    return x if isinstance(x, str) else ""


def _str_list(x: object) -> list[str]:
    """A list of strings from untrusted JSON (the child's output): anything else is dropped."""
    return [v for v in x if isinstance(v, str)] if isinstance(x, list) else []


# --------------------------------------------------------------------------- full depth
def run_live(exe: str, env: Mapping[str, str], timeout_s: float) -> TorchLive:
    """Import torch in the target interpreter, bounded; every way it can go wrong is a TorchLive."""
    res = target_launch.start(target_launch.argv_for(exe, "live"), env).result(timeout_s)
    return live_from_result(res, timeout_s)


def live_from_result(res: _run.RunResult, timeout_s: float) -> TorchLive:
    """Read the live child's outcome: result line, death by signal, timeout or garbage."""
    duration = round(res.duration_s, 3)
    where = last_stage(res.stdout)
    while_ = f" while: {where}" if where else ""
    if res.error == "timeout":
        return TorchLive(import_ok=where not in ("", "import torch"), timed_out=True, duration_s=duration, stage=where,
                         error=f"target python did not finish within {timeout_s:g} s (killed){while_}")
    payload, problem = parse_result(res.stdout)
    if res.error == "signal":
        sig = res.signal
        return TorchLive(import_ok=where not in ("", "import torch"), died_by_signal=sig, duration_s=duration,
                         stage=where, error=f"target python died on signal {sig} ({_signal_name(sig)}){while_}")
    if payload is None:
        return TorchLive(import_ok=False, duration_s=duration, stage=where,
                         error=_describe_failure(res, problem or "no result"))
    fields = {k: payload[k] for k in TorchLive.model_fields if k in payload and payload[k] is not None}
    fields.setdefault("import_ok", False)
    fields["duration_s"] = duration
    for key in ("capability", "mem_get_info_bytes"):
        if isinstance(fields.get(key), list):
            fields[key] = tuple(fields[key])
    try:
        return TorchLive.model_validate(fields)
    except ValidationError as exc:
        return TorchLive(import_ok=False, duration_s=duration, stage=where,
                         error=f"target python printed a result that does not validate: {str(exc)[:300]}")


# --------------------------------------------------------------------------- output parsing
def parse_result(stdout: str) -> tuple[dict[str, Any] | None, str]:
    """The last marked JSON object in the child's stdout, or (None, why not). Never raises."""
    last = None
    for line in stdout.splitlines():
        i = line.find(RESULT_MARKER)
        if i >= 0:
            last = line[i + len(RESULT_MARKER):]
    if last is None:
        snippet = " ".join(stdout.split())[:160]
        return None, f"printed no result line (stdout: {snippet!r})" if snippet else "printed nothing"
    try:
        payload = json.loads(last)
    except (ValueError, RecursionError) as exc:
        return None, f"printed an unparseable result line ({type(exc).__name__}: {str(exc)[:120]})"
    if not isinstance(payload, dict):
        return None, "printed a result line that is not a JSON object"
    return payload, ""


def last_stage(stdout: str) -> str:
    """The last step the live child announced before it finished, died or was killed."""
    where = ""
    for line in stdout.splitlines():
        i = line.find(STAGE_MARKER)
        if i >= 0:
            where = line[i + len(STAGE_MARKER):].strip()[:80]
    return where


def _signal_name(sig: int | None) -> str:
    try:
        return signal.Signals(sig).name if sig else "?"
    except ValueError:
        return "?"


def _describe_failure(res: _run.RunResult, problem: str) -> str:
    if res.ok:
        return f"target python {problem}"
    tail = (res.stderr or "").strip().splitlines()[-1:] or [""]
    base = res.describe()
    return f"{base}; {problem}" + (f"; stderr: {tail[0][:300]}" if tail[0] and tail[0] not in base else "")


__all__ = [
    "INSPECT_FORMAT", "INTEREST", "SECTION", "ContainerLimits", "Limits", "choose_interpreter", "collect",
    "image_repo", "inspect_container", "inspect_target", "parse_image_inspect",
    "last_stage", "live_from_result", "local_tag", "parse_result", "parse_torch_version_py", "run_live",
    "run_quick", "scan_extensions", "static_torch", "unavailable",
]
