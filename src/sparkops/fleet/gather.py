"""Each rank's facts, collected in that rank's own process, then gathered to rank 0 through torch.distributed.

The payload is plain JSON text (the facts snapshot, the runtime the rank saw, where the facts came
from), sent as bytes with ``all_gather``/``gather`` on a gloo group: the same engine the training
job will use, CPU-only so gathering never touches the GPU, and never unpickled. The wait is bounded by the caller (every rank first
reports "collected" in the store; only then does rank 0 start the gather).
"""

from __future__ import annotations

import json
import os
import platform
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkops.facts.model import Facts
from sparkops.fleet.model import FleetNode, LaunchEnv, RuntimeFacts


def read_runtime(torch: Any, local_rank: int) -> RuntimeFacts:
    """What this process's torch says about itself: the build that will run the collectives."""
    notes: list[str] = []
    rt = RuntimeFacts(python=sys.executable, python_version=platform.python_version(), pid=os.getpid(),
                      hostname=socket.gethostname(), torch_version=str(getattr(torch, "__version__", "")))
    try:
        rt.torch_cuda = torch.version.cuda
    except Exception as exc:  # a broken build: say so, go on
        notes.append(f"torch.version.cuda: {type(exc).__name__}: {exc}")
    try:
        rt.cuda_available = bool(torch.cuda.is_available())
        rt.device_count = int(torch.cuda.device_count()) if rt.cuda_available else 0
        if rt.cuda_available and local_rank < rt.device_count:
            rt.device_name = torch.cuda.get_device_name(local_rank)
            rt.capability = tuple(torch.cuda.get_device_capability(local_rank))  # type: ignore[assignment]
    except Exception as exc:
        notes.append(f"CUDA query: {type(exc).__name__}: {exc}")
    if rt.torch_cuda:
        try:
            v = torch.cuda.nccl.version()
            rt.nccl_version = ".".join(str(p) for p in v) if isinstance(v, tuple) else str(v)
        except Exception as exc:
            notes.append(f"torch.cuda.nccl.version(): {type(exc).__name__}: {exc}")
    rt.note = "; ".join(notes)[:500]
    return rt


@dataclass
class LocalFacts:
    facts: Facts | None
    source: str
    error: str = ""


def collect_local(opts: Any, fake: Path | None) -> LocalFacts:
    """This machine's facts (``sparkops.probes.collect_snapshot``), or, for tests, a snapshot standing in
    for them."""
    from sparkops.core.errors import InputError
    from sparkops.facts.snapshot import load_facts
    from sparkops.probes import collect_snapshot

    if fake is not None:
        try:
            return LocalFacts(load_facts(fake), f"test snapshot {fake}")
        except InputError as exc:
            return LocalFacts(None, f"test snapshot {fake}", str(exc))
    try:
        return LocalFacts(collect_snapshot(opts), "live")
    except Exception as exc:  # collection never raises by design; if it does, the fleet still reports
        return LocalFacts(None, "live", f"collection failed: {type(exc).__name__}: {exc}"[:500])


def payload(launch: LaunchEnv, runtime: RuntimeFacts, local: LocalFacts) -> str:
    """One rank's message to rank 0."""
    return json.dumps({
        "rank": launch.rank, "hostname": runtime.hostname, "local_rank": launch.local_rank,
        "local_world_size": launch.local_world_size, "node_rank": launch.node_rank,
        "facts_source": local.source, "error": local.error, "runtime": runtime.model_dump(mode="json"),
        "facts": local.facts.model_dump(mode="json") if local.facts is not None else None,
    })


def node_from_payload(text: str) -> FleetNode:
    """Rank 0's view of one rank's message; a malformed one becomes a node with the error said."""
    try:
        d = json.loads(text)
        facts = Facts.model_validate(d["facts"]) if d.get("facts") is not None else None
        return FleetNode(rank=d["rank"], hostname=d["hostname"], local_rank=d["local_rank"],
                         local_world_size=d.get("local_world_size"), node_rank=d.get("node_rank"),
                         facts_source=d.get("facts_source", ""), runtime=RuntimeFacts.model_validate(d["runtime"]),
                         facts=facts, error=d.get("error", ""))
    except Exception as exc:
        return FleetNode(rank=-1, hostname="", local_rank=-1, error=f"unreadable payload: {type(exc).__name__}: {exc}"[:300])


def gather_to_rank0(torch: Any, dist: Any, group: Any, text: str, rank: int, world_size: int,
                    device: Any = None) -> list[str] | None:
    """Rank 0 gets every rank's text in rank order, the others None.

    Bytes, not ``gather_object``: that one unpickles what the peers send (code execution from any
    node that can reach the store) and needs numpy in recent torch. Lengths first (all_gather), then
    the UTF-8 bytes padded to the longest (gather).
    """
    data = text.encode("utf-8")
    dev = device if device is not None else torch.device("cpu")
    length = torch.tensor([len(data)], dtype=torch.int64, device=dev)
    lengths = [torch.zeros(1, dtype=torch.int64, device=dev) for _ in range(world_size)]
    dist.all_gather(lengths, length, group=group)
    longest = max(int(x.item()) for x in lengths)
    buf = torch.zeros(max(longest, 1), dtype=torch.uint8, device=dev)
    if data:
        buf[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(dev)
    out = [torch.zeros_like(buf) for _ in range(world_size)] if rank == 0 else None
    dist.gather(buf, out, dst=0, group=group)
    if out is None:
        return None
    return [bytes(t[: int(n.item())].cpu().tolist()).decode("utf-8", errors="replace") for t, n in zip(out, lengths, strict=True)]
