"""The GPU-visibility triage (shared/spec/gotchas.md): when no GPU is usable, which of the five
hypotheses fires first, judged from the facts alone.

Order matters: reinstalling torch is right only for the fifth, so the first four are ruled out
before it is named. A hypothesis the facts cannot decide is reported as not checked, never as
ruled out.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sparkops.checks import container
from sparkops.facts.model import Facts, TorchLive
from sparkops.facts.reading import Unavailable, known
from sparkops.knowledge import Knowledge

HYPOTHESES = {
    1: "runtime/flags: a container started without `--runtime=nvidia --gpus all`",
    2: "device visibility: CUDA_VISIBLE_DEVICES hides the GPU",
    3: "permissions: /dev/nvidia* missing or not readable and writable",
    4: "CUDA init state: a crashed process left the context wedged",
    5: "ABI mismatch: torch.version.cuda is not the driver's CUDA major (G1)",
}
# Each hypothesis is an identity sub-code: its fix lives in the catalog (knowledge/gotchas.yaml).
CODES = {1: "identity.triage-runtime", 2: "identity.triage-visible-devices", 3: "identity.triage-device-nodes",
         4: "identity.triage-wedged", 5: "identity.triage-abi"}


@dataclass(frozen=True)
class Triage:
    fired: int | None  # the first hypothesis that fired, None when none did
    reason: str = ""
    ruled_out: list[int] = field(default_factory=list)
    not_checked: list[int] = field(default_factory=list)

    def summary(self) -> str:
        if self.fired is None:
            return "no triage hypothesis fired" + (
                f" (not checked: {', '.join(map(str, self.not_checked))})" if self.not_checked else "")
        return f"triage #{self.fired} {HYPOTHESES[self.fired].split(':')[0]}: {self.reason}"

    @property
    def code(self) -> str:
        """The identity sub-code of the hypothesis that fired ("identity.no-gpu" when none did)."""
        return CODES[self.fired] if self.fired is not None else "identity.no-gpu"

    def fix(self, kb: Knowledge) -> str:
        from sparkops.checks.base import render

        if self.fired is None:
            return ""
        return render(kb.subcode(self.code).fix, self.values())

    def values(self) -> dict[str, str]:
        """What the identity sub-codes' templates are worded from."""
        return {"triage": self.summary(),
                "ruled_out": ", ".join(f"#{n}" for n in self.ruled_out) or "nothing",
                "not_checked": (f"; could not check {', '.join(f'#{n}' for n in self.not_checked)}"
                                if self.not_checked else "")}

    def steps(self) -> list[tuple[int, str, str]]:
        """(number, hypothesis, status) in order: "fired", "ruled out", "not checked", or "not reached"
        (after the one that fired, by design: the order is the point)."""
        out = []
        for n, text in HYPOTHESES.items():
            if n == self.fired:
                status = "fired"
            elif n in self.ruled_out:
                status = "ruled out"
            elif n in self.not_checked:
                status = "not checked"
            else:
                status = "not reached"
            out.append((n, text, status))
        return out


def _cvd_hides(value: str | None, device_nodes: int | None) -> str | None:
    if value is None:
        return None
    v = value.strip()
    if v == "" or v.lower() in ("-1", "none", "void", "no"):
        return f"CUDA_VISIBLE_DEVICES={value!r} hides every GPU"
    first = v.split(",")[0].strip()
    if first.isascii() and first.isdigit() and device_nodes is not None and int(first) >= device_nodes:
        return f"CUDA_VISIBLE_DEVICES={value!r} names GPU {first}, but {device_nodes} device node(s) exist"
    return None


def triage(facts: Facts, kb: Knowledge) -> Triage:
    """Walk hypotheses 1..5 in order and stop at the first that fires."""
    host, env = facts.host, facts.host.env
    ruled_out: list[int] = []
    not_checked: list[int] = []
    nodes = host.dev_nvidia
    gpu_nodes = ({k: v for k, v in nodes.items() if k.rstrip("0123456789") == "/dev/nvidia" and k[-1].isdigit()}
                 if isinstance(nodes, dict) else None)
    cont = container.classify(host.container)
    in_container = cont.in_container

    # 1. container without the NVIDIA runtime: no device nodes, or NVIDIA_VISIBLE_DEVICES void
    if in_container:
        nvd = env.get("NVIDIA_VISIBLE_DEVICES")
        if not gpu_nodes:
            return Triage(1, "inside a container (" + ", ".join(cont.markers[:2]) + ") with no "
                          "/dev/nvidia<N> device node" + (f"; NVIDIA_VISIBLE_DEVICES={nvd!r}" if nvd else ""),
                          ruled_out, not_checked)
        if nvd is not None and nvd.strip().lower() in ("", "void", "none"):
            return Triage(1, f"inside a container with NVIDIA_VISIBLE_DEVICES={nvd!r}", ruled_out, not_checked)
    ruled_out.append(1)

    # 2. CUDA_VISIBLE_DEVICES
    why = _cvd_hides(env.get("CUDA_VISIBLE_DEVICES"), len(gpu_nodes) if gpu_nodes is not None else None)
    if why:
        return Triage(2, why, ruled_out, not_checked)
    ruled_out.append(2)

    # 3. device nodes missing or not usable
    if isinstance(nodes, Unavailable):
        if nodes.unavailable.value == "not_found":
            return Triage(3, nodes.detail or "no /dev/nvidia* device nodes", ruled_out, not_checked)
        not_checked.append(3)
    elif isinstance(nodes, dict):
        bad = [f"{k} ({v})" for k, v in nodes.items() if v != "rw" and (k in (gpu_nodes or {}) or k.endswith("ctl"))]
        if not gpu_nodes:
            return Triage(3, "no /dev/nvidia<N> device node", ruled_out, not_checked)
        if bad:
            return Triage(3, "not readable and writable: " + ", ".join(bad[:4]), ruled_out, not_checked)
        ruled_out.append(3)
    else:
        not_checked.append(3)

    # 4. a wedged context: the driver answers (NVML sees the GPU) but CUDA init fails
    live = facts.target.live
    if isinstance(live, TorchLive) and live.import_ok and live.cuda_available is False:
        err = (live.cuda_error or "").lower()
        wedged = any(s in err for s in ("unknown error", "initialization error", "busy or unavailable",
                                         "launch failure", "misaligned", "illegal"))
        if facts.gpu.devices and wedged:
            return Triage(4, f"the driver sees the GPU but CUDA init failed: {live.cuda_error[:160]}",
                          ruled_out, not_checked)
        (ruled_out if facts.gpu.devices else not_checked).append(4)
    elif isinstance(live, TorchLive) and live.import_ok and live.cuda_available:
        ruled_out.append(4)  # CUDA initialised in the target: no wedged context
    else:
        not_checked.append(4)

    # 5. the torch build
    torch_cuda = None
    if isinstance(live, TorchLive) and live.import_ok:
        torch_cuda = live.cuda
    elif known(facts.target.torch):
        torch_cuda = facts.target.torch.cuda  # type: ignore[union-attr]
    if known(facts.target.torch) or (isinstance(live, TorchLive) and live.import_ok):
        drv = facts.gpu.cuda_driver_version
        want = str(drv).split(".")[0] if known(drv) else str(kb.thresholds.g1.fallback_cuda_major)
        if torch_cuda is None or str(torch_cuda).split(".")[0] != want:
            return Triage(5, f"torch.version.cuda is {torch_cuda} (want {want}.x)", ruled_out, not_checked)
        ruled_out.append(5)
    else:
        not_checked.append(5)
    return Triage(None, "", ruled_out, not_checked)
