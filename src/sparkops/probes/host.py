"""Host identity and container markers (G9 and the GPU-visibility triage).

Everything is read from files under a root directory (``/`` live, a fake tree in tests; the
``SPARKOPS_ROOT`` variable in ``opts.env`` points it elsewhere). A failed container-marker match is
recorded as *unknown*, never as "bare host": cgroup v2 hides runtime names from ``/proc/1/cgroup``.
The markers are recorded raw; the container kind is judged by :mod:`sparkops.checks.container`.
"""

from __future__ import annotations

import os
import platform
import re
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sparkops.facts.model import ContainerFacts, HostFacts
from sparkops.facts.reading import Unavailable, Why, from_os_error, missing
from sparkops.facts.redact import is_secret_name, redact_env, redact_text

SECTION = "host"

_READ_LIMIT = 1 << 20
_CGROUP_RUNTIMES = ("docker", "containerd", "kubepods", "lxc", "podman", "libpod", "crio", "buildkit")
_NVIDIA_CONTAINER_VARS = ("NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "NVIDIA_REQUIRE_CUDA")
_UNSLOTH_PATHS = ("workspace/unsloth", "workspace/unsloth-studio", "opt/unsloth")
# Arm "CPU part" ids (MIDR) of the cores found on Grace/GB10 and common Arm servers.
_ARM_PARTS = {
    "0xd85": "Cortex-X925", "0xd87": "Cortex-A725", "0xd4f": "Neoverse-V2", "0xd40": "Neoverse-V1",
    "0xd0c": "Neoverse-N1", "0xd49": "Neoverse-N2", "0xd8e": "Neoverse-N3", "0xd84": "Neoverse-V3",
    "0xd81": "Cortex-A720", "0xd82": "Cortex-X4", "0xd80": "Cortex-A520", "0xd4e": "Cortex-X3",
    "0xd41": "Cortex-A78", "0xd44": "Cortex-X1", "0xd0b": "Cortex-A76", "0xd08": "Cortex-A72",
}


def root_of(env: Mapping[str, str]) -> Path:
    """Where the probes read /proc, /sys, /etc and /dev from (tests point it at a fake tree)."""
    return Path(env.get("SPARKOPS_ROOT") or "/")


def under_root(root: Path, path: str) -> Path:
    return root / path.lstrip("/")


def read_small(path: Path, limit: int = _READ_LIMIT) -> str | Unavailable:
    """A small text file, or why it could not be read. Never raises."""
    try:
        with open(path, "rb") as fh:
            return fh.read(limit).decode("utf-8", errors="replace")
    except OSError as exc:
        return from_os_error(exc, str(path))


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:
        return False


# --------------------------------------------------------------------------- pure parsers
def parse_os_release(text: str) -> dict[str, str]:
    """``KEY=value`` lines of os-release/dgx-release; quotes removed, last duplicate wins.

    dgx-release appends a ``DGX_OTA_VERSION`` pair per update and OEM files leave values with
    spaces unquoted (``DGX_PLATFORM=HP ZGX Nano G1n AI Station``), so this is not shlex.
    """
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        key = key.strip()
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            quote, value = value[0], value[1:-1]
            if quote == '"':
                value = re.sub(r'\\([\\$"`])', r"\1", value)
        out[key] = value
    return out


def parse_cpuinfo(text: str) -> tuple[str | None, int]:
    """(model description, logical CPU count) from /proc/cpuinfo.

    x86 has ``model name``; arm64 has none, so cores are named from their ``CPU part`` id and
    grouped in the order first seen: GB10 reads ``10x Cortex-A725 + 10x Cortex-X925``.
    """
    models: list[str] = []
    parts: list[tuple[str, str]] = []
    count = 0
    implementer = ""
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip().lower(), value.strip()
        if key == "processor" and value.isascii() and value.isdigit():
            count += 1
        elif key == "model name" and value:
            models.append(value)
        elif key == "cpu implementer":
            implementer = value.lower()
        elif key == "cpu part":
            parts.append((implementer, value.lower()))
    groups: dict[str, int] = {}
    for name in models or [_ARM_PARTS.get(p, f"Arm part {p}" if impl in ("0x41", "") else f"part {p} ({impl})")
                          for impl, p in parts]:
        groups[name] = groups.get(name, 0) + 1
    if not groups:
        return None, count
    if len(groups) == 1:
        return next(iter(groups)), count
    return " + ".join(f"{n}x {name}" for name, n in groups.items()), count


def cgroup_runtime_names(text: str) -> list[str]:
    """Container runtimes named in a /proc/<pid>/cgroup file (cgroup v1, or v2 on some hosts)."""
    found: list[str] = []
    for line in text.splitlines():
        path = line.split(":", 2)[-1].lower()
        for name in _CGROUP_RUNTIMES:
            if name in path and name not in found:
                found.append(name)
    return found


def overlay_root(mountinfo: str) -> bool:
    """True when ``/`` is an overlay mount (the usual container root filesystem)."""
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) > 4 and fields[4] == "/" and " - " in line:
            fstype = line.split(" - ", 1)[1].split()[:1]
            if fstype and fstype[0] == "overlay":
                return True
    return False


# --------------------------------------------------------------------------- container
def _container(env: Mapping[str, str], root: Path) -> ContainerFacts:
    """The raw container markers and variables; what they mean is ``sparkops.checks.container``'s."""
    markers: list[str] = []
    image = ""
    if _exists(under_root(root, "/.dockerenv")):
        markers.append("/.dockerenv")
    containerenv = read_small(under_root(root, "/run/.containerenv"))
    if isinstance(containerenv, str):
        markers.append("/run/.containerenv")
        image = redact_text(parse_os_release(containerenv).get("image", ""))
    cg = read_small(under_root(root, "/proc/1/cgroup"))
    if isinstance(cg, str):
        markers += [f"cgroup:{n}" for n in cgroup_runtime_names(cg)]
    mi = read_small(under_root(root, "/proc/1/mountinfo"))
    if isinstance(mi, str) and overlay_root(mi):
        markers.append("mountinfo:overlay-root")
    if env.get("container"):
        markers.append(f"env:container={env['container'][:40]}")
    for var in _NVIDIA_CONTAINER_VARS:
        if env.get(var):
            markers.append(f"env:{var}")

    nvidia_env = {k: ("***" if is_secret_name(k) else redact_text(v)) for k, v in sorted(env.items())
                  if k.startswith(("NVIDIA_", "NV_")) or k in ("PYTORCH_VERSION", "PYTORCH_BUILD_VERSION",
                                                                 "CUDA_VERSION", "NVIDIA_BUILD_ID")}
    paths = [f"/{rel}" for rel in _UNSLOTH_PATHS if _exists(under_root(root, rel))]
    unsloth_env = sorted(k for k in env if k.startswith("UNSLOTH_"))[:20]
    return ContainerFacts(markers=markers, markers_read=True, image=image[:200], nvidia_env=nvidia_env,
                          unsloth_paths=paths, unsloth_env=unsloth_env)


# --------------------------------------------------------------------------- /dev/nvidia*
def dev_nvidia_access(root: Path) -> dict[str, str] | Unavailable:
    """Each /dev/nvidia* node and what this process may do with it: "rw", "r" or "none"."""
    dev = under_root(root, "/dev")
    try:
        entries = sorted(p for p in dev.iterdir() if p.name.startswith("nvidia"))
    except OSError as exc:
        return from_os_error(exc, str(dev))
    out: dict[str, str] = {}
    for p in entries:
        try:
            if p.is_dir():
                continue  # /dev/nvidia-caps
        except OSError:
            pass
        r, w = os.access(p, os.R_OK), os.access(p, os.W_OK)
        out[f"/dev/{p.name}"] = "rw" if r and w else "r" if r else "none"
    if not out:
        return missing(Why.not_found, "no /dev/nvidia* device nodes (driver not loaded, or not passed "
                       "into this container)")
    return out


# --------------------------------------------------------------------------- collect
def gather(env: Mapping[str, str], root: Path = Path("/"), uname: Any = None) -> HostFacts:
    """All host facts from ``root``; ``uname`` (a ``platform.uname()`` result) is injectable."""
    un = uname if uname is not None else platform.uname()
    live = root == Path("/")

    arch_file = read_small(under_root(root, "/proc/sys/kernel/arch"))
    arch: str | Unavailable = (arch_file.strip() if isinstance(arch_file, str) and arch_file.strip()
                               else (un.machine if live and un.machine else missing(Why.not_found, "no arch")))
    kfile = read_small(under_root(root, "/proc/sys/kernel/osrelease"))
    kernel: str | Unavailable = (kfile.strip() if isinstance(kfile, str) and kfile.strip()
                                 else (un.release if live and un.release else
                                       kfile if isinstance(kfile, Unavailable) else missing(Why.error, "empty")))
    hfile = read_small(under_root(root, "/proc/sys/kernel/hostname"))
    hostname = hfile.strip() if isinstance(hfile, str) else ((un.node or socket.gethostname()) if live else "")

    os_release: dict[str, str] = {}
    for rel in ("/etc/os-release", "/usr/lib/os-release"):
        text = read_small(under_root(root, rel))
        if isinstance(text, str):
            os_release = parse_os_release(text)
            break
    dgx = read_small(under_root(root, "/etc/dgx-release"))
    if isinstance(dgx, str):
        os_release.update({k: v for k, v in parse_os_release(dgx).items()
                           if k.startswith("DGX_") and k != "DGX_SERIAL_NUMBER"})  # serials identify a box

    prod = read_small(under_root(root, "/sys/class/dmi/id/product_name"))
    dmi: str | Unavailable = prod.strip() if isinstance(prod, str) and prod.strip() else (
        prod if isinstance(prod, Unavailable) else missing(Why.not_found, "empty product_name"))

    cpuinfo = read_small(under_root(root, "/proc/cpuinfo"))
    model, count = parse_cpuinfo(cpuinfo) if isinstance(cpuinfo, str) else (None, 0)
    cpu_model: str | Unavailable = model or (cpuinfo if isinstance(cpuinfo, Unavailable)
                                             else missing(Why.not_found, "no model name or CPU part in cpuinfo"))
    if not count and live:
        count = os.cpu_count() or 0
    cpu_count: int | Unavailable = count or missing(Why.not_found, "no processor entries")

    return HostFacts(
        arch=arch, kernel=kernel, os_release=os_release, dmi_product=dmi, cpu_model=cpu_model,
        cpu_count=cpu_count, hostname=hostname, container=_container(env, root), env=redact_env(env),
        dev_nvidia=dev_nvidia_access(root),
    )


def collect(opts) -> HostFacts:
    """The host section for the runner."""
    return gather(opts.env, root_of(opts.env))


def unavailable(why: Why, detail: str) -> HostFacts:
    m = missing(why, detail)
    return HostFacts(arch=m, kernel=m, dmi_product=m, cpu_model=m, cpu_count=m, dev_nvidia=m,
                     container=ContainerFacts(markers_read=m))
