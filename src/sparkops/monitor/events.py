"""Events a monitor reports, and the row shape samplers write and analyzers read.

``COLUMNS`` is the CSV contract: the first three are exactly what the seed plugin's
``thermal-sample.sh`` wrote (``nvidia-smi --query-gpu=timestamp,temperature.gpu,power.draw
--format=csv -l N``: header ``timestamp, temperature.gpu, power.draw [W]``, rows like
``2025/11/24 20:25:50.123, 74, 105.21 W``), so existing correlation scripts keep working; the
rest follow. A row in memory is a ``Sample``: column name -> value (float for numbers, str for
timestamp/pstate/process lists, None when the reading was unavailable at that instant).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# CSV header cells, in order (nvidia-smi spelling, units in brackets as nvidia-smi writes them)
COLUMNS: tuple[str, ...] = (
    "timestamp",                      # "2025/11/24 20:25:50.123" (local time, nvidia-smi format)
    "temperature.gpu",                # °C
    "power.draw [W]",
    "clocks.sm [MHz]",
    "utilization.gpu [%]",
    "pstate",                         # "P0"
    "clocks_event_reasons.active",    # "0x0000000000000020"
    "violation.sw_power_cap [us]",    # cumulative counters (NVML/nvidia-smi -q), µs
    "violation.sw_thermal [us]",
    "violation.hw_thermal [us]",
    "mem.free [B]",                   # /proc/meminfo MemFree
    "mem.available [B]",              # MemAvailable
    "mem.cached [B]",                 # Cached + SReclaimable - Shmem (reclaimable page cache)
    "swap.used [B]",
    "psi.memory.full.avg10",          # /proc/pressure/memory, percent
    "mem.free_large [B]",             # /proc/buddyinfo: free memory in blocks of 2 MiB or more (G3.fragmented)
    "gpu.processes",                  # "pid:name:bytes;pid:name:bytes" (compute processes)
)

Sample = dict[str, "float | str | None"]

EventKind = Literal[
    "power-plateau",          # G4 info: power flat at the platform cap, clocks stable (normal, not a bug)
    "throttling",     # G4: power flat at the plateau while temperature climbs/sits high and clocks fall
    "throttle-reason",        # G4: thermal / HW-slowdown reason bits active, or thermal counters growing
    "rising-temperature",     # G4 info: temperature climbing at full power, clocks holding (not yet throttling)
    "low-clock-state",        # G4: GB10 stuck low (~690 MHz, ~17 W, P0) under high utilisation
    "memory-pressure",        # G3: MemAvailable / CUDA-visible memory falling toward zero, PSI stalls
    "swap-growth",            # G3: swap in use growing during the run
    "new-neighbour",      # G6: a heavy GPU process appeared during the run
    "insufficient-load",      # too little load to judge G4 (say so rather than guess)
]
EVENT_KINDS: tuple[str, ...] = EventKind.__args__  # type: ignore[attr-defined]


class Event(BaseModel):
    """One judged episode in a run, with the time it began (and ended, when it did)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    gotcha: Literal["G3", "G4", "G6"]
    kind: EventKind
    start: str  # timestamp of the first sample showing it (as logged)
    end: str | None = None  # None: still going at the last sample
    summary: str  # one line with the values
    severity: Literal["info", "warn"] = "warn"
    evidence: dict[str, float | str | None] = Field(default_factory=dict)
