"""Joining the fleet with every wait bounded, so a missing or stuck rank is named, never waited on forever.

The launcher (torchrun, or anything that sets RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT) gives
each rank the address of a c10d key-value store. Before any process group exists, every rank writes
``join/<rank>`` there (its host, pid and runtime); rank 0 waits a bounded time for all of them and
publishes a decision (go, or the missing ranks, and the backend). Only when everyone is in does the
process group start, so a rank that never comes cannot hang ``init_process_group``. Later stages
work the same way: each rank writes ``stage/<rank>`` as it goes, and a rank that falls behind is
named with the last stage it reached.

torch is passed in by the caller (the tool does not depend on it); the parsing here is pure.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from sparkops.core.errors import InputError
from sparkops.fleet.model import LaunchEnv

REQUIRED_ENV = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
STAGES = ("joined", "collecting", "collected", "gathered", "bandwidth", "measured", "done")
# the bandwidth probe adds a step number: "bandwidth 0" ready, "bandwidth k" inside its k-th collective
LAUNCH_HINT = ("spark-ops fleet runs once per GPU under a torch.distributed launcher, e.g. on each Spark:\n"
               "  torchrun --nnodes 2 --nproc-per-node 1 --node-rank <0|1> --rdzv-backend c10d \\\n"
               "      --rdzv-endpoint <spark-a address>:29500 -m sparkops fleet\n"
               "or, on one machine for a dry run: torchrun --standalone --nproc-per-node 2 -m sparkops fleet --backend gloo")


def _int(env: Mapping[str, str], name: str, default: int | None = None) -> int | None:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise InputError(f"{name}={raw!r} is not a whole number; {LAUNCH_HINT}") from exc


def parse_launch_env(env: Mapping[str, str]) -> LaunchEnv:
    """The torch.distributed variables of this rank; an InputError that says how to launch when absent."""
    missing = [v for v in REQUIRED_ENV if not env.get(v, "").strip()]
    if missing:
        raise InputError(f"not launched by torch.distributed: {', '.join(missing)} not set.\n{LAUNCH_HINT}")
    rank, world = _int(env, "RANK"), _int(env, "WORLD_SIZE")
    port = _int(env, "MASTER_PORT")
    assert rank is not None and world is not None and port is not None
    if world < 1 or not 0 <= rank < world:
        raise InputError(f"RANK={rank} does not fit WORLD_SIZE={world}; {LAUNCH_HINT}")
    if not 0 < port < 65536:
        raise InputError(f"MASTER_PORT={port} is not a TCP port")
    node_rank = _int(env, "GROUP_RANK", None)
    if node_rank is None:
        node_rank = _int(env, "NODE_RANK", None)
    return LaunchEnv(
        rank=rank, world_size=world, local_rank=_int(env, "LOCAL_RANK", rank) or 0,
        local_world_size=_int(env, "LOCAL_WORLD_SIZE", None), node_rank=node_rank,
        master_addr=env["MASTER_ADDR"].strip(), master_port=port,
        launcher="torchrun" if env.get("TORCHELASTIC_RUN_ID") else "env",
        run_id=env.get("TORCHELASTIC_RUN_ID", ""), restart_count=_int(env, "TORCHELASTIC_RESTART_COUNT", 0) or 0,
        agent_store=env.get("TORCHELASTIC_USE_AGENT_STORE", "") == "True")


def open_store(dist: Any, launch: LaunchEnv, timeout_s: float) -> Any:
    """The launcher's store (torchrun's agent hosts one), or one hosted by rank 0, under a prefix of
    our own. Unlike ``init_process_group``'s store, rank 0 does not wait here for the others to
    connect: the join keys say who came. A client that cannot reach the store raises after ``timeout_s``."""
    timeout = timedelta(seconds=timeout_s)
    if launch.agent_store:
        base = dist.TCPStore(launch.master_addr, launch.master_port, is_master=False, timeout=timeout)
    else:
        base = dist.TCPStore(launch.master_addr, launch.master_port, world_size=None,
                             is_master=launch.rank == 0, timeout=timeout, wait_for_workers=False,
                             multi_tenant=True)
    prefix = f"sparkops-fleet/{launch.run_id or 'env'}/{launch.restart_count}/"
    return dist.PrefixStore(prefix, base)


def stage_key(stage: str) -> tuple[int, int]:
    """Where a stage sits in the run, for "who is behind": ``"bandwidth 3"`` (the third collective
    of the bandwidth probe) sorts after ``"bandwidth 2"``; an unknown or absent stage sorts first."""
    head, _, tail = stage.partition(" ")
    if head not in STAGES:
        return (-1, 0)
    return (STAGES.index(head), int(tail) if tail.isdigit() else 0)


class Coordinator:
    """Bounded waits over the store. Keys hold JSON text; reads never block past a deadline."""

    def __init__(self, store: Any, rank: int, world_size: int, poll_s: float = 0.05):
        self.store, self.rank, self.world_size, self.poll_s = store, rank, world_size, poll_s

    # ---- writing
    def put(self, key: str, value: Any) -> None:
        self.store.set(key, json.dumps(value))

    def stage(self, name: str) -> None:
        self.put(f"stage/{self.rank}", name)

    # ---- reading without blocking
    def peek(self, key: str) -> Any | None:
        """The key's value when it is set, else None (``check`` does not wait)."""
        if not self.store.check([key]):
            return None
        return json.loads(self.store.get(key))

    def stages(self) -> dict[int, str]:
        out: dict[int, str] = {}
        for r in range(self.world_size):
            v = self.peek(f"stage/{r}")
            if v is not None:
                out[r] = str(v)
        return out

    # ---- bounded waits
    def wait_key(self, key: str, timeout_s: float) -> Any | None:
        """The key's value once set, or None after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            v = self.peek(key)
            if v is not None or time.monotonic() > deadline:
                return v
            time.sleep(self.poll_s)

    def wait_all(self, prefix: str, timeout_s: float, ranks: list[int] | None = None) -> tuple[dict[int, Any], list[int]]:
        """``prefix<rank>`` for every rank (or ``ranks``): what arrived, and the ranks still missing."""
        want = list(range(self.world_size)) if ranks is None else list(ranks)
        got: dict[int, Any] = {}
        deadline = time.monotonic() + timeout_s
        while True:
            for r in want:
                if r not in got and (v := self.peek(f"{prefix}{r}")) is not None:
                    got[r] = v
            if len(got) == len(want) or time.monotonic() > deadline:
                return got, [r for r in want if r not in got]
            time.sleep(self.poll_s)

    def wait_stage(self, stage: str, timeout_s: float) -> list[int]:
        """Wait until every rank reached ``stage`` (or a later one); the ranks still behind after
        ``timeout_s``."""
        need = stage_key(stage)
        deadline = time.monotonic() + timeout_s
        while True:
            st = self.stages()
            behind = [r for r in range(self.world_size) if stage_key(st.get(r, "")) < need]
            if not behind or time.monotonic() > deadline:
                return behind
            time.sleep(self.poll_s)
