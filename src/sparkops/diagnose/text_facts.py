"""Facts a report states, read as facts and judged by the gotchas' own owners (issue 18, round 18x).

Many reports state what a facts snapshot would hold: package versions (``torch 2.9.0+cu128``, ``peft==0.18.1``,
``flash_attn-2.8.3``), the CUDA version of the driver (``CUDA Version: 13.0``), the GPU (``NVIDIA GB10``,
``sm_121``), a container image (``nvcr.io/nvidia/pytorch:25.10-py3``) or a bare Python environment (``uv venv``,
``.venv/lib/python3.12/site-packages``). An expert reads those as facts and asks the gotcha's owner. This module:

- :func:`extract` reads them into a PARTIAL :class:`~sparkops.facts.model.Facts` (pure, never raises): only what
  the text states; every other reading stays ``not_collected``, so the owners say skip/unknown for it;
- :func:`judge_text` runs the owners on it through :func:`sparkops.diagnose.facts_confirm.judge` (the path
  ``--facts`` uses) and keeps only the decisions that CONFIRM a gotcha (a stated fact is weaker evidence than a
  collected one: it never rules out), as ``text.fact.*`` signals and per-gotcha effects.

Where a fact is read (reading.py's roles): only from **failure** and **context** lines, the lines that tell what
happened on the reporter's machine and how it is set up. Quoted lines (a Markdown ``>`` quote, the +/- lines of a
pasted diff: documentation or code under review) and plain prose (a README excerpt, a PR's description of other
machines) are not read: a version there is not the user's machine.

A decision that rests on something the text does not state is not a stated fact. Two readings are absent from a
snapshot only when nobody set them: an environment variable (``TRITON_PTXAS_PATH``) and a container marker. When
the text names neither, the owners are asked again with each one present, and a confirmation counts only when it
holds either way (``G9.triton-ptxas`` from a stated Triton on a stated sm_121 is dropped unless the text shows the
environment; ``G9.bare-pip-off-matrix`` from a stated venv is dropped unless the text shows no container could
hold it, which it never can). No decision is re-derived here: the owners decide, this module only asks them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from sparkops.diagnose.reading import CONTEXT, FAILURE
from sparkops.facts.model import Facts

READ_ROLES = (FAILURE, CONTEXT)
_LINE_CHARS = 600  # a stated fact sits in a short line; a minified blob is not read past this
_MAX_LINES = 2000  # at most this many lines are read (a 200 MB log is a log, not a statement)

# the GB10 family, as a report names the machine (the owners key the platform on the GPU name)
_GB10 = re.compile(r"\b(gb10|dgx[ -]?spark|gx10|ascent gx10)\b", re.IGNORECASE)
_SM121 = re.compile(r"\bsm_?121a?\b|\b(compute )?capability:? \(?12[.,] ?1\)?", re.IGNORECASE)
# the driver's CUDA (nvidia-smi's header) and its version
_DRIVER_CUDA = re.compile(r"\bCUDA Version:?\s*(\d{2}\.\d)\b")
_DRIVER = re.compile(r"\bDriver Version:?\s*(\d{3}\.\d+(?:\.\d+)?)\b")
# a package and its version: "name==1.2.3", "name 1.2.3" (pip list), "name: 1.2.3" / "| name | 1.2.3 |" (env
# tables), "name-1.2.3" (a wheel file name), "[pip3] name==1.2.3" (collect_env)
_VERSION = r"v?(\d+(?:\.\d+){1,3}(?:(?:a|b|rc|\.post|\.dev)\d*)?(?:\+[\w.]+)?)"
_SEP = r"(?:\s*[=:]=?\s*|\s+|\s*\|\s*|-)"
_TORCH_TAG = re.compile(r"\+(cu(\d{2})(\d)|cpu)\b")
_BUILT_CUDA = re.compile(r"\bCUDA used to build PyTorch\s*:\s*(\d+\.\d+|None)\b", re.IGNORECASE)  # collect_env
_NVIDIA_WHEEL = re.compile(r"\b(nvidia-[a-z-]+-cu1[23])\b(?:[=\s:]+)?(\d+(?:\.\d+)*)?", re.IGNORECASE)
_TRITON_PTXAS = re.compile(r"\bTRITON_PTXAS_PATH\s*=\s*(\S+)")
# a container the reporter runs in (an image they pull or run); a container image named in prose is not read
_IMAGE = re.compile(r"\b(nvcr\.io/nvidia/[\w.-]+:[\w.-]+|unsloth/unsloth(?::[\w.-]+|@sha256:[0-9a-f]+)?|"
                    r"vllm/vllm-openai:[\w.-]+|lmsysorg/sglang:[\w.-]+)")
_RUNS_IMAGE = re.compile(r"\b(docker|podman)\s+(run|pull|compose)\b|^\s*FROM\s|\bcontainer\b|\bimage\b",
                         re.IGNORECASE)
# a bare Python environment the reporter's own paths or commands show
_ENV_KIND = (
    ("conda", re.compile(r"\bconda (create|activate|install)\b|/(mini|ana)(conda|forge)3?/envs/", re.IGNORECASE)),
    ("uv", re.compile(r"\buv (venv|pip install|sync)\b", re.IGNORECASE)),
    ("venv", re.compile(r"\bpython3? -m venv\b|/\.?venv/(lib|bin)/|\bsource \S*venv\S*/bin/activate\b",
                        re.IGNORECASE)),
)


def _canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass
class TextFacts:
    """What a report states, as a partial snapshot, and where each fact stands (fact -> 1-based line)."""

    facts: Facts
    stated: dict[str, int] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not self.stated


def watched_packages(kb=None) -> tuple[str, ...]:  # noqa: ANN001 - Knowledge
    """The distributions some owner reads (canonical names): the known-good matrix, its hard blockers, Triton
    (G9), flash-attn and Unsloth (G2), torch's family and the CUDA-library wheels (G1), huggingface-hub (G9).
    Read from the catalog, so a newer matrix file widens it."""
    from sparkops.knowledge import load as load_catalog

    try:
        kb = kb or load_catalog()
        names = {_canon(p.name) for p in kb.matrix.known_good}
        for hb in kb.matrix.hard_blockers:
            names |= {_canon(hb.package), _canon(hb.when_installed)}
        names |= {_canon(d) for d in kb.thresholds.g9.triton_dists}
        for wheels in kb.thresholds.g1.cuda_lib_wheels.values():
            names |= {_canon(w) for w in wheels}
    except Exception:  # noqa: BLE001 - a broken catalog must not break diagnose
        names = set()
    names |= {"flash-attn", "unsloth", "torch", "torchvision", "torchaudio", "huggingface-hub"}
    return tuple(sorted(names, key=lambda n: (-len(n), n)))  # longest first: "unsloth-zoo" before "unsloth"


def _package_pattern(names: Sequence[str]) -> re.Pattern[str]:
    alts = "|".join(re.escape(n).replace(r"\-", "[-_.]?") for n in names)
    return re.compile(rf"(?<![\w/.-])(?<!build )(?:\[pip3?\]\s*|\[conda\]\s*)?({alts}|pytorch)(?:\s+version)?{_SEP}"
                      rf"{_VERSION}(?![\w])", re.IGNORECASE)


_PATTERN_CACHE: dict[tuple[str, ...], re.Pattern[str]] = {}


def extract(lines: Sequence[str], roles: Sequence[str], kb=None,  # noqa: ANN001 - Knowledge
            read: Sequence[str] = READ_ROLES) -> TextFacts:
    """The facts the lines of the roles in ``read`` (default: failure and context) state, as a partial snapshot.
    Pure; never raises (odd input gives an empty one)."""
    try:
        return _extract(lines, roles, kb, tuple(read))
    except Exception:  # noqa: BLE001 - a reader must never break diagnose
        return TextFacts(Facts())


def _extract(lines: Sequence[str], roles: Sequence[str], kb, read: tuple[str, ...]) -> TextFacts:  # noqa: ANN001
    names = watched_packages(kb)
    rx = _PATTERN_CACHE.get(names)
    if rx is None:
        rx = _PATTERN_CACHE.setdefault(names, _package_pattern(names))
    stated: dict[str, int] = {}
    dists: dict[str, str] = {}
    gpu: dict = {}
    cap: tuple[int, int] | None = None
    driver_cuda = driver = image = env_kind = ptxas = built_cuda = ""
    container_said = False
    for i, (line, role) in enumerate(zip(lines, roles, strict=False)):
        if i >= _MAX_LINES:
            break
        if role not in read or not isinstance(line, str):
            continue
        ln = line[:_LINE_CHARS]
        if not gpu and _GB10.search(ln):
            gpu = {"index": 0, "name": "NVIDIA GB10"}
            stated.setdefault("gpu.devices[0].name", i + 1)
        if cap is None and _SM121.search(ln):
            cap = (12, 1)
            stated.setdefault("gpu.devices[0].capability", i + 1)
        if not driver_cuda and (m := _DRIVER_CUDA.search(ln)):
            driver_cuda = m.group(1)
            stated.setdefault("gpu.cuda_driver_version", i + 1)
        if not driver and (m := _DRIVER.search(ln)):
            driver = m.group(1)
            stated.setdefault("gpu.driver_version", i + 1)
        if not built_cuda and (m := _BUILT_CUDA.search(ln)):
            built_cuda = m.group(1)
            stated.setdefault("target.torch.cuda", i + 1)
        for m in rx.finditer(ln):
            name = _canon(m.group(1))
            name = "torch" if name == "pytorch" else name
            if name not in dists:
                dists[name] = m.group(2)
                stated.setdefault(f"target.distributions[{name}]", i + 1)
        for m in _NVIDIA_WHEEL.finditer(ln):
            name = _canon(m.group(1))
            if name not in dists:
                dists[name] = m.group(2) or "0"
                stated.setdefault(f"target.distributions[{name}]", i + 1)
        if not ptxas and (m := _TRITON_PTXAS.search(ln)):
            ptxas = m.group(1)
            stated.setdefault("host.env.TRITON_PTXAS_PATH", i + 1)
        if not image and (m := _IMAGE.search(ln)) and _RUNS_IMAGE.search(ln):
            image = m.group(1)
            stated.setdefault("host.container.image", i + 1)
        if not container_said and re.search(r"\b(docker|podman)\s+run\b", ln, re.IGNORECASE):
            container_said = True
            stated.setdefault("host.container.markers", i + 1)
        if not env_kind:
            for kind, krx in _ENV_KIND:
                if krx.search(ln):
                    env_kind = kind
                    stated.setdefault("target.env.kind", i + 1)
                    break
    data: dict = {}
    if gpu:
        if cap is not None:
            gpu["capability"] = list(cap)
        data["gpu"] = {"devices": [gpu]}
    if driver_cuda or driver:
        g = data.setdefault("gpu", {})
        if driver_cuda:
            g["cuda_driver_version"] = driver_cuda
        if driver:
            g["driver_version"] = driver
    target: dict = {}
    if dists:
        target["distributions"] = dists
        torch = _torch_static(dists.get("torch", ""), built_cuda)
        if torch is not None:
            target["torch"] = torch
            stated.setdefault("target.torch", stated.get("target.distributions[torch]", 0))
    if env_kind:
        target["env"] = {"kind": env_kind}
    if target:
        data["target"] = target
    host: dict = {}
    if ptxas:
        host["env"] = {"TRITON_PTXAS_PATH": ptxas}
    if image or container_said:
        host["container"] = {"image": image, "markers": ["stated: " + (image or "docker run")],
                             "markers_read": True}
    if host:
        data["host"] = host
    return TextFacts(Facts.model_validate(data), stated)


def _torch_static(version: str, built_cuda: str = "") -> dict | None:
    """torch's build as its version states it: ``+cu128`` -> CUDA 12.8, ``+cpu`` -> a CPU build; else as
    collect_env's "CUDA used to build PyTorch" states it. A version with neither (an NGC build, a plain ``2.9.1``)
    does not state its CUDA: not read."""
    m = _TORCH_TAG.search(version or "")
    if not m:
        if not version or not built_cuda:
            return None
        if built_cuda.lower() == "none":
            return {"version": version, "cuda": None, "local_tag": ""}
        return {"version": version, "cuda": built_cuda, "local_tag": ""}
    if m.group(1) == "cpu":
        return {"version": version, "cuda": None, "local_tag": "cpu"}
    return {"version": version, "cuda": f"{int(m.group(2))}.{m.group(3)}", "local_tag": m.group(1)}


# --- the owners' judgement of the stated facts -----------------------------------------------------------------------

@dataclass
class TextJudgement:
    """What the owners say on a report's stated facts: ``text.fact.*`` signals and, per gotcha, the decisions that
    confirm it (never a rule-out)."""

    signals: set[str] = field(default_factory=set)
    confirms: dict[str, list[str]] = field(default_factory=dict)  # gotcha -> the owners' sub-codes
    effects: dict = field(default_factory=dict)  # gotcha -> [FactEffect] (confirms only), as match() takes them


def judge_text(tf: TextFacts, catalog=None) -> TextJudgement:  # noqa: ANN001 - Knowledge
    """The owners' decisions on the stated facts that confirm a gotcha whatever the unstated ones are (see the
    module doc), and the facts' readings as ``text.fact.*`` signals. Never raises."""
    out = TextJudgement()
    if tf.empty:
        return out
    try:
        from sparkops.diagnose.facts_confirm import judge
        from sparkops.knowledge import load as load_catalog

        kb = catalog or load_catalog()
        base = judge(tf.facts, kb)
        kept = {g: [e for e in es if e.effect == "confirms"] for g, es in base.effects.items()}
        for variant in _unstated_variants(tf):
            other = judge(variant, kb)
            held = {(g, e.fact) for g, es in other.effects.items() for e in es if e.effect == "confirms"}
            kept = {g: [e for e in es if (g, e.fact) in held] for g, es in kept.items()}
        out.effects = {g: es for g, es in kept.items() if es}
        out.confirms = {g: [e.fact for e in es] for g, es in out.effects.items()}
        out.signals = {"text." + s for s in base.signals} | {f"text.fact.confirms-{g}" for g in out.effects}
    except Exception:  # noqa: BLE001 - diagnose must never fail on what a report states
        return TextJudgement()
    return out


def _unstated_variants(tf: TextFacts) -> list[Facts]:
    """The snapshot with each reading the text leaves unstated, and whose absence an owner could read as a fact,
    set the other way: TRITON_PTXAS_PATH set; a container marker present."""
    out = []
    if "host.env.TRITON_PTXAS_PATH" not in tf.stated:
        f = tf.facts.model_copy(deep=True)
        f.host.env = {**f.host.env, "TRITON_PTXAS_PATH": "(unstated)"}
        out.append(f)
    if "host.container.image" not in tf.stated and "host.container.markers" not in tf.stated:
        f = tf.facts.model_copy(deep=True)
        f.host.container = f.host.container.model_copy(update={"markers": ["(unstated)"], "markers_read": True})
        out.append(f)
    return out
