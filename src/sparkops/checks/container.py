"""What container this is (G9's reading, used by G1, G2, G3, identity, the GPU-visibility triage,
fleet and diagnose): the one owner of the container-kind classification.

The host probe records raw markers (``/.dockerenv``, ``/run/.containerenv`` and the image it names,
cgroup runtime names, an overlay root, the ``container`` and NVIDIA runtime variables), the
NVIDIA/NGC variables and the Unsloth paths and variables it saw. This module decides, when the
snapshot is judged: NGC PyTorch, another NGC image, the Unsloth image, another container, or
unknown. A failed marker match is *unknown*, never "bare host": cgroup v2 hides runtime names.
A container from a schema-1 snapshot keeps the kind and image its tool recorded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from sparkops.facts.model import ContainerFacts
from sparkops.facts.reading import Unavailable, Why, missing

NGC_VERSION = re.compile(r"^[0-9]{2}\.[0-9]{2}\Z")  # NGC release tags: 25.09, 25.11 ...


@dataclass(frozen=True)
class ContainerKind:
    """The container judgment: its kind, the image it names, and the markers that count."""

    image_kind: Any  # "ngc-pytorch" | "ngc-other" | "unsloth" | "other" | "none" | Unavailable
    image_hint: str = ""  # "nvcr.io/nvidia/pytorch:25.09-py3", "unsloth container (/workspace/unsloth exists)"
    markers: list[str] = field(default_factory=list)  # the raw markers, plus a corroborated NGC version

    @property
    def in_container(self) -> bool:
        return bool(self.markers)


def _unsloth_hint(c: ContainerFacts) -> str:
    """Why this container looks like an Unsloth image, or ""."""
    if "unsloth" in c.image.lower():
        return f"image {c.image}"
    if c.unsloth_paths:
        return f"{c.unsloth_paths[0]} exists"
    if c.unsloth_env:
        return f"env {c.unsloth_env[0]}"
    # the unsloth package in site-packages is not the image: `pip install unsloth` in an NGC container puts
    # it there too, and that stack is NGC's with Unsloth on top (G9 says so), not the pinned Unsloth image
    return ""


def classify(c: ContainerFacts) -> ContainerKind:
    """The container kind from the recorded markers and variables. Pure."""
    if c.v1_class is not None:  # a schema-1 snapshot: judged at collect time, its markers final
        return ContainerKind(c.v1_class.image_kind, c.v1_class.image_hint, list(c.markers))
    env = c.nvidia_env
    markers = list(c.markers)
    hint = c.image
    ngc_version = env.get("NVIDIA_PYTORCH_VERSION", "").strip()
    ngc_product = env.get("NVIDIA_PRODUCT_NAME", "").strip()
    other_ngc = sorted(k for k, v in env.items()
                       if re.fullmatch(r"NVIDIA_[A-Z0-9_]+_VERSION", k) and k != "NVIDIA_PYTORCH_VERSION"
                       and NGC_VERSION.match(v.strip() if isinstance(v, str) else ""))
    # NGC images set these; a lone hand-exported NVIDIA_PYTORCH_VERSION (seen in HPC job scripts)
    # is not a container, so NGC variables count only beside another NGC or container signal.
    corroborated = bool(markers) or bool(env.get("NVIDIA_BUILD_ID")) or bool(ngc_product)
    if ngc_version and NGC_VERSION.match(ngc_version) and corroborated:
        markers.append(f"env:NVIDIA_PYTORCH_VERSION={ngc_version}")
    elif other_ngc and corroborated:
        markers.append(f"env:{other_ngc[0]}={env[other_ngc[0]].strip()}")

    unsloth = _unsloth_hint(c) if markers else ""
    kind: Any
    if unsloth:
        kind = "unsloth"
        base = f" on nvcr.io/nvidia/pytorch:{ngc_version}-py3" if NGC_VERSION.match(ngc_version) else ""
        hint = hint or f"unsloth container ({unsloth}){base}"
    elif ngc_version and NGC_VERSION.match(ngc_version) and corroborated:
        kind = "ngc-pytorch"
        hint = hint or f"nvcr.io/nvidia/pytorch:{ngc_version}-py3"
    elif "nvcr.io/nvidia/pytorch" in hint:
        kind = "ngc-pytorch"
    elif "nvcr.io/nvidia/" in hint:
        kind = "ngc-other"
    elif other_ngc and corroborated:
        kind = "ngc-other"
        product = other_ngc[0][len("NVIDIA_"):-len("_VERSION")].lower().replace("_", "-")
        hint = hint or f"nvcr.io/nvidia/{product}:{env[other_ngc[0]].strip()}-py3 (guessed from {other_ngc[0]})"
    elif markers:
        kind = "other"
    elif isinstance(c.markers_read, Unavailable):
        kind = c.markers_read
    elif ngc_version:
        kind = missing(Why.not_found, "no container marker matched (cgroup v2 may hide it); "
                       f"NVIDIA_PYTORCH_VERSION={ngc_version[:20]} is set without one (exported by hand?)")
    else:
        kind = missing(Why.not_found, "no container marker matched (cgroup v2 may hide it)")
    return ContainerKind(kind, hint[:200], markers)
