"""Which container CLI runs images: ``docker`` (Docker Engine, or podman's Docker API behind it) or
``podman`` itself. Standard library only (plus :mod:`sparkops.probes._run`): ``target_launch``
imports it before the tool's heavy imports.

What differs between them, as met on a real engine (tests/test_engine.py):

- the GPU: Docker's ``--runtime=nvidia --gpus all``; podman's CDI device ``nvidia.com/gpu=all``
  (the NVIDIA Container Toolkit's ``nvidia-ctk cdi generate`` writes its spec);
- podman 4's Docker API loses a ``docker run --rm`` container's exit status (the CLI exits 0 after
  a segfault or an ``exit 7``): the probe therefore runs without ``--rm`` and removes its container
  by name, and ``setup docker-run --exec`` does the same when podman is behind ``docker``;
- the errors' words (no engine, no image, no runtime), read by :func:`problem`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from sparkops.probes import _run

ENGINES = ("docker", "podman")


def choose(asked: str | None, env: Mapping[str, str]) -> tuple[str, str]:
    """(engine, why): ``asked`` when given, else the first of docker, podman on PATH, else docker
    (whose absence the caller reports)."""
    if asked:
        if asked not in ENGINES:
            raise ValueError(f"unknown container engine {asked!r}: docker or podman")
        return asked, "--engine"
    for name in ENGINES:
        if _run.which(name, env):
            return name, f"{name} on PATH"
    return "docker", "neither docker nor podman on PATH"


def gpu_flags(engine: str) -> tuple[str, ...]:
    """The flags that give a container the GPU on this engine."""
    if engine == "podman":
        return ("--device", "nvidia.com/gpu=all")
    return ("--runtime=nvidia", "--gpus", "all")


def gpu_flags_why(engine: str) -> str:
    if engine == "podman":
        return ("the GPU through the NVIDIA CDI spec (`sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml` "
                "writes it); without it torch sees no GPU")
    return "exposes the GPU to the container; without it torch sees no GPU"


def server_components(version_json: str) -> list[str]:
    """The component names of ``docker version --format '{{json .Server}}'`` (empty when unreadable)."""
    try:
        data = json.loads(version_json)
    except ValueError:
        return []
    comps = data.get("Components") if isinstance(data, dict) else None
    if not isinstance(comps, list):
        return []
    return [str(c.get("Name", "")) for c in comps if isinstance(c, dict)]


def podman_behind(version_json: str) -> bool:
    """Is the Docker API served by podman (``docker version`` names a "Podman Engine")?"""
    return any("podman" in name.lower() for name in server_components(version_json))


NO_ENGINE = ("Cannot connect to the Docker daemon", "Cannot connect to Podman", "connect: connection refused")
NO_PERMISSION = ("permission denied while trying to connect to the Docker daemon",
                 "connect: permission denied")
NO_IMAGE = re.compile(r"No such (image|object)|Unable to find image|image not known|manifest unknown|"
                      r"pull access denied|repository does not exist")
NO_GPU_RUNTIME = re.compile(r"unknown or invalid runtime name: nvidia|unresolvable CDI devices|"
                            r"could not select device driver .* with capabilities: \[\[gpu\]\]|CDI device")


def problem(engine: str, text: str) -> str | None:
    """The kind of an engine failure from its words: no_engine | no_permission | no_image |
    no_gpu_runtime, or None."""
    if any(s in text for s in NO_PERMISSION):
        return "no_permission"
    if any(s in text for s in NO_ENGINE):
        return "no_engine"
    if NO_GPU_RUNTIME.search(text):
        return "no_gpu_runtime"
    if NO_IMAGE.search(text):
        return "no_image"
    return None


def advice(engine: str, kind: str) -> str:
    """What to do about a :func:`problem` kind, in words for this engine."""
    if kind == "no_engine":
        if engine == "podman":
            return "podman cannot reach its service: check `podman info` (or `podman system service`)"
        return ("the Docker engine is not running (\"Cannot connect to the Docker daemon\"): start it with "
                "`sudo systemctl start docker` (or check DOCKER_HOST)")
    if kind == "no_permission":
        return ("no permission to reach the Docker engine's socket: `sudo usermod -aG docker $USER`, then log in "
                "again (or run `newgrp docker`)")
    if kind == "no_gpu_runtime":
        if engine == "podman":
            return ("no NVIDIA CDI spec for podman (nvidia.com/gpu=all is unresolvable): install the NVIDIA "
                    "Container Toolkit and run `sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml`")
        return ("no NVIDIA container runtime in Docker (unknown runtime nvidia): install the NVIDIA Container "
                "Toolkit and run `sudo nvidia-ctk runtime configure --runtime=docker`, then restart Docker")
    return kind


def full_repo(repo: str) -> str:
    """A repository name as the engine normalises it: ``unsloth/unsloth`` ->
    ``docker.io/unsloth/unsloth``, ``ubuntu`` -> ``docker.io/library/ubuntu``; a name whose first
    part is a registry (has a dot or a port, or is ``localhost``) is kept."""
    first, sep, rest = repo.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return repo
    if first in ("docker.io", "index.docker.io") and sep:
        repo = rest
    return "docker.io/" + (repo if "/" in repo else "library/" + repo)
