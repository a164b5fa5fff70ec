"""What ended the last boot, from the lines :mod:`.collect` read. Pure; never raises on text.

Each recognised line becomes a :class:`Finding` (a sub-code, its G-number or none, the time as
logged, the line). :func:`verdict` picks the cause by weight: a thermal shutdown message (G4), a
kernel panic or lockup, a hardware Xid, the host or a cgroup OOM killer (G3, with the victim and
its size), the driver running out of memory before the log stops (G3, the GB10 host wedge), an
orderly shutdown or reboot (nothing failed), and, when the log simply stops with no shutdown
record, an unclean end — power, firmware or hardware — where this tool's own sampler log, if
one ran, says whether it was hot (G4 suspected).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

_TIME = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:[+-]\d{2}:?\d{2}|Z)?|"
                   r"[A-Z][a-z]{2}\s+\d{1,2}\s+\d{2}:\d{2}:\d{2}|\[\s*\d+\.\d+\])")
_BOOT_BANNER = re.compile(r"kernel: (?:\[\s*\d+\.\d+\] )?Linux version \d")  # printed once per boot
_XID = re.compile(r"NVRM: Xid \(([^)]*)\): (\d+)(?:, pid=([^,]+), name=([^,]+))?")
_OOM_KILLED = re.compile(r"(Memory cgroup out of memory|Out of memory): Killed process (\d+) \(([^)]*)\)"
                         r"(?:.*?anon-rss:(\d+)kB)?(?:.*?file-rss:(\d+)kB)?")
_OOM_CONSTRAINT = re.compile(r"oom-kill:constraint=(CONSTRAINT_\w+)")
_OOMD = re.compile(r"systemd-oomd\[\d+\]: (?:Killed|Considered) (\S+)")
_NO_MEM = re.compile(r"NVRM: .*NV_ERR_NO_MEMORY")
_THERMAL = re.compile(r"critical temperature reached|thermal.*shutting down|Thermal shutdown|"
                      r"temperature above threshold", re.I)
_PANIC = re.compile(r"Kernel panic - not syncing|soft lockup - CPU#\d+ stuck|self-detected stall|"
                    r"blocked for more than \d+ seconds|Internal error: Oops|BUG: unable to handle|"
                    r"Unable to handle kernel", re.I)
_ORDERLY = re.compile(r"reboot: (Restarting system|Power down)|systemd-shutdown\[\d+\]|"
                      r"Journal stopped|Reached target .*(Power-Off|Reboot|Shutdown)|System is (rebooting|powering)")


class Finding(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    code: str  # "G3.host_oom", "xid.hardware", "panic", ...
    gotcha: str | None = None  # "G3", "G4"; None: none of the ten
    time: str = ""
    source: str = ""
    line: str
    values: dict[str, Any] = Field(default_factory=dict)


class Cause(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    code: str
    gotcha: str | None
    summary: str
    fix: str = ""
    confidence: str = "likely"  # "certain" (the kernel said so) | "likely" | "suspected" | "unknown"


def _time(line: str) -> str:
    m = _TIME.match(line.strip())
    return m.group(1) if m else ""


def previous_boot(lines: Sequence[str]) -> tuple[list[str], bool]:
    """The lines of the boot before the last (kern.log holds several boots): the segment between
    the last two boot banners. (lines, True) when a banner bounded them; (all lines, False) when none did."""
    starts = [i for i, ln in enumerate(lines) if _BOOT_BANNER.search(ln)]
    if not starts:
        return list(lines), False
    last = starts[-1]
    prev = starts[-2] if len(starts) >= 2 else 0
    return list(lines[prev:last]), True


def scan(lines: Sequence[str], source: str, xids: Mapping[int, Mapping[str, str]]) -> list[Finding]:
    out: list[Finding] = []
    constraint = ""
    for raw in lines:
        line = raw.rstrip()
        t = _time(line)
        if m := _XID.search(line):
            num = int(m.group(2))
            info = xids.get(num, {})
            kind = info.get("kind", "unknown")
            out.append(Finding(code=f"xid.{kind}", time=t, source=source, line=line,
                               values={"xid": num, "name": info.get("name", "not in this table"),
                                       "device": m.group(1), "pid": (m.group(3) or "").strip("'"),
                                       "process": (m.group(4) or "").strip()}))
        elif m := _OOM_CONSTRAINT.search(line):
            constraint = m.group(1)
        elif m := _OOM_KILLED.search(line):
            cgroup = m.group(1).startswith("Memory cgroup") or constraint == "CONSTRAINT_MEMCG"
            anon = int(m.group(4)) * 1024 if m.group(4) else None
            out.append(Finding(code="G3.cgroup_oom" if cgroup else "G3.host_oom", gotcha="G3", time=t, source=source,
                               line=line, values={"pid": int(m.group(2)), "victim": m.group(3),
                                                  "anon_rss_bytes": anon, "constraint": constraint or None}))
            constraint = ""
        elif m := _OOMD.search(line):
            out.append(Finding(code="G3.userspace_oom", gotcha="G3", time=t, source=source, line=line,
                               values={"unit": m.group(1)}))
        elif _NO_MEM.search(line):
            out.append(Finding(code="G3.driver_no_memory", gotcha="G3", time=t, source=source, line=line))
        elif _THERMAL.search(line):
            out.append(Finding(code="G4.thermal_shutdown", gotcha="G4", time=t, source=source, line=line))
        elif _PANIC.search(line):
            out.append(Finding(code="panic", time=t, source=source, line=line))
        elif _ORDERLY.search(line):
            out.append(Finding(code="orderly_end", time=t, source=source, line=line))
    return out


def unclean_from_last(lines: Sequence[str]) -> bool | None:
    """``last -x`` (newest first): the record after the current boot's is a shutdown (False: the
    previous boot ended cleanly) or another boot / a "crash" (True); None when it cannot tell."""
    recs = [ln for ln in lines if ln.startswith(("reboot", "shutdown"))]
    if not recs or not recs[0].startswith("reboot"):
        return None
    if "crash" in recs[0]:
        return True
    if len(recs) < 2:
        return None
    return not recs[1].startswith("shutdown")  # two boots in a row: no shutdown between them


def own_log_tail(rows: Sequence[Mapping[str, Any]], hot_c: float) -> dict[str, Any] | None:
    """The last minutes of a sampler log: last temperature/power, max temperature, rising or not."""
    temps = [(r.get("timestamp"), r.get("temperature.gpu")) for r in rows if isinstance(r.get("temperature.gpu"),
                                                                                      (int, float))]
    if not temps:
        return None
    tail = temps[-120:]
    first_t, last_t = tail[0][1], tail[-1][1]
    powers = [r.get("power.draw [W]") for r in rows[-120:] if isinstance(r.get("power.draw [W]"), (int, float))]
    return {"last_timestamp": tail[-1][0], "last_temperature_c": last_t, "max_temperature_c": max(v for _, v in tail),
            "rise_c": round(last_t - first_t, 1), "last_power_w": powers[-1] if powers else None,
            "hot": max(v for _, v in tail) >= hot_c}


# the causes whose fix is data (knowledge/xid.yaml `fixes:`); "G3.oom" serves the three OOM killers,
# "xid.application" an application, driver or unknown Xid before an unclean end
FIX_KEYS = frozenset({"G4.thermal_shutdown", "panic", "xid.hardware", "G3.oom", "G3.driver_wedge", "xid.application",
                      "G4.suspected", "unclean_end"})


def verdict(findings: Sequence[Finding], *, unclean: bool | None, log_read: bool,
            own: dict[str, Any] | None, fixes: Mapping[str, str]) -> Cause:
    """The cause, by weight. ``unclean``: last -x says the boot ended without a shutdown record
    (True), with one (False), or nobody knows (None). ``log_read``: any previous-boot log was read.
    ``fixes``: the fix each cause names (``knowledge/xid.yaml`` ``fixes:``, keys :data:`FIX_KEYS`)."""
    codes = [f.code for f in findings]

    def first(code: str) -> Finding:
        return next(f for f in findings if f.code == code)

    if "G4.thermal_shutdown" in codes:
        f = first("G4.thermal_shutdown")
        return Cause(code="G4.thermal_shutdown", gotcha="G4", confidence="certain",
                     summary=f"the kernel shut the machine down for heat ({f.time or 'time not logged'}): {f.line[-160:]}",
                     fix=fixes["G4.thermal_shutdown"])
    if "panic" in codes:
        panics = [f for f in findings if f.code == "panic"]
        f = next((p for p in panics if "Kernel panic" in p.line), panics[0])
        return Cause(code="panic", gotcha=None, confidence="certain",
                     summary=f"kernel panic or lockup ({f.time or 'time not logged'}): {f.line[-160:]} — none of "
                             "the ten gotchas",
                     fix=fixes["panic"])
    hw = [f for f in findings if f.code == "xid.hardware"]
    if hw:
        nums = sorted({f.values["xid"] for f in hw})
        return Cause(code="xid.hardware", gotcha=None, confidence="likely",
                     summary=f"hardware Xid {', '.join(map(str, nums))} ({hw[0].values['name']}) from "
                             f"{hw[0].time or 'an unlogged time'} — none of the ten gotchas",
                     fix=fixes["xid.hardware"])
    oom = [f for f in findings if f.code in ("G3.host_oom", "G3.cgroup_oom", "G3.userspace_oom")]
    if oom:
        f = oom[-1]
        size = f.values.get("anon_rss_bytes")
        who = f"{f.values.get('victim') or f.values.get('unit')}" + (f" ({size / 1e9:.1f} GB resident)" if size else "")
        kind = {"G3.host_oom": "the kernel's OOM killer (the whole unified pool was exhausted)",
                "G3.cgroup_oom": "a cgroup memory limit (the container's or service's own cap, not the pool)",
                "G3.userspace_oom": "systemd-oomd (a userspace killer acting on memory pressure)"}[f.code]
        return Cause(code=f.code, gotcha="G3", confidence="certain",
                     summary=f"{kind} killed {who} at {f.time or 'an unlogged time'}"
                             + (f"; {len(oom)} kills in all" if len(oom) > 1 else ""),
                     fix=fixes["G3.oom"])
    nomem = [f for f in findings if f.code == "G3.driver_no_memory"]
    orderly = "orderly_end" in codes or unclean is False
    if nomem and not orderly:
        return Cause(code="G3.driver_wedge", gotcha="G3", confidence="likely",
                     summary=f"the GPU driver failed {len(nomem)} allocation(s) for lack of memory (NV_ERR_NO_MEMORY, "
                             f"last at {nomem[-1].time or 'an unlogged time'}) and the log then stops with no "
                             "shutdown: the GB10 host wedge under unified-memory pressure",
                     fix=fixes["G3.driver_wedge"])
    xapp = [f for f in findings if f.code in ("xid.application", "xid.driver", "xid.unknown")]
    if orderly:
        extra = ""
        if xapp:
            extra = (f"; Xid {xapp[0].values['xid']} ({xapp[0].values['name']}) was logged earlier — an "
                     f"{xapp[0].code.split('.')[1]} error, none of the ten gotchas")
        if nomem:
            extra += f"; {len(nomem)} NV_ERR_NO_MEMORY line(s) (seen on healthy runs too: evidence, not a cause)"
        return Cause(code="orderly_end", gotcha=None, confidence="certain" if "orderly_end" in codes else "likely",
                     summary="the previous boot ended with an orderly shutdown or reboot" + extra)
    if xapp:
        f = xapp[0]
        return Cause(code=f.code, gotcha=None, confidence="likely",
                     summary=f"Xid {f.values['xid']} ({f.values['name']}) for {f.values.get('process') or 'a process'} "
                             "— an application or driver error, none of the ten gotchas; the boot then ended with no "
                             "shutdown record", fix=fixes["xid.application"])
    if unclean or (log_read and unclean is None):
        if own and own.get("hot"):
            return Cause(code="G4.suspected", gotcha="G4", confidence="suspected",
                         summary=f"the boot ended with no shutdown and nothing in the kernel log; this tool's own "
                                 f"log ends hot ({own['last_temperature_c']:g} C, max {own['max_temperature_c']:g} C"
                                 + (f", {own['last_power_w']:g} W" if own.get("last_power_w") is not None else "")
                                 + f" at {own['last_timestamp']}): a thermal or power cut-off",
                         fix=fixes["G4.suspected"])
        return Cause(code="unclean_end", gotcha=None, confidence="suspected",
                     summary="the boot ended with no shutdown record and no error in the logs read: power loss, "
                             "firmware or hardware" + ("" if own else " (no sampler log of this tool to tell heat)"),
                     fix=fixes["unclean_end"])
    return Cause(code="unknown", gotcha=None, confidence="unknown",
                 summary="nothing readable says how the previous boot ended (see the sources)")
