"""One rank's part in ``spark-ops fleet``: join, collect, gather, measure, judge (rank 0), report.

Every rank runs this in its own process, started by torchrun (or any launcher that sets the
torch.distributed variables). Rank 0 decides and the others follow its decisions through the
store, so every rank runs the same collectives; every wait has a deadline, and a rank that falls
behind is named with the stage it did not finish. Only rank 0 writes and prints the fleet report;
the others print nothing on success and exit with the same code once rank 0 published it.

The order of one run:

1. every rank writes ``join/<rank>`` (host, pid, its torch runtime); rank 0 waits ``--join-timeout``
   and publishes the decision: go (and the backend) or the missing ranks;
2. the process group starts (``init_process_group`` on the same store), plus a gloo group for
   control messages when the backend is NCCL;
3. each rank collects its own facts (``sparkops.probes.collect_snapshot``) in its own process;
4. once every rank says "collected" (bounded), rank 0 gathers the facts (JSON bytes, never pickles);
5. the bandwidth probe: rank 0 plans sizes that fit every rank, all ranks time the collectives;
6. each rank sends its timings and NCCL transport; rank 0 judges, writes, prints, publishes the
   exit code, and waits briefly for the others to read it.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from sparkops.core.errors import InputError
from sparkops.facts.workload import Workload
from sparkops.fleet import collective, gather, judge, rendezvous
from sparkops.fleet.model import (
    BandwidthResult,
    FleetNode,
    FleetReport,
    LaunchEnv,
    MemberStatus,
    RuntimeFacts,
    TransportInfo,
)
from sparkops.fleet.settings import FleetKnowledge, load_fleet

NCCL_LOG_CAP_BYTES = 4 << 20  # NCCL's INFO output can be long; its transport lines come early


@dataclass(frozen=True)
class FleetOptions:
    backend: str = "auto"  # auto | nccl | gloo
    depth: str = "full"
    python: str | None = None  # the judged interpreter; default: the one running this rank
    config_paths: tuple[Path, ...] = ()
    offline: bool = False
    budget_s: float | None = None
    container: str | None = None
    matrix: Path | None = None
    workload: Workload = field(default_factory=Workload)
    join_timeout_s: float | None = None
    collective_timeout_s: float | None = None
    bandwidth: bool = True
    nccl_debug: bool = True
    report_path: Path = Path("fleet-report.json")
    as_json: bool = False
    # testing only (hidden options)
    fake_facts: dict[int, Path] = field(default_factory=dict)
    never_join: frozenset[int] = frozenset()
    hang_collective: frozenset[int] = frozenset()
    block_in_collective: frozenset[int] = frozenset()


@dataclass
class Outcome:
    code: int
    stdout: str = ""  # text still to print (rank 0 prints its report itself, before publishing the result)
    stderr: str = ""  # one line, when a rank has something to say
    report: FleetReport | None = None
    hard_exit: bool = False  # exit at once, without tearing the group down (a collective may be pending)


def import_torch() -> tuple[Any, Any]:
    """torch and torch.distributed, or an InputError saying what is missing (exit 3)."""
    try:
        import torch
        import torch.distributed as dist
    except Exception as exc:  # ImportError, or a broken build raising something else
        raise InputError(
            f"spark-ops fleet runs inside the training environment, but {sys.executable} cannot import torch "
            f"({type(exc).__name__}: {exc}). Install spark-ops into that environment (pip install dgx-spark-ops) "
            "or start the launcher with the interpreter that has torch.") from exc
    if not dist.is_available():
        raise InputError(f"this torch ({torch.__version__}) was built without torch.distributed")
    return torch, dist


def decide_backend(asked: str, joined: dict[int, dict]) -> tuple[str, str]:
    """The backend every rank will use (rank 0 decides for all), or an error text."""
    no_nccl = sorted(r for r, reg in joined.items() if not reg.get("nccl_ok"))
    if asked == "gloo":
        return "gloo", ""
    if asked == "nccl":
        if no_nccl:
            why = "; ".join(f"rank {r}: {joined[r].get('nccl_why', '?')}" for r in no_nccl[:4])
            return "nccl", f"--backend nccl, but NCCL cannot run on every rank ({why}); use --backend gloo"
        return "nccl", ""
    return ("gloo" if no_nccl else "nccl"), ""


def _nccl_readiness(torch: Any, dist: Any, rt: RuntimeFacts, local_rank: int) -> tuple[bool, str]:
    if not dist.is_nccl_available():
        return False, "this torch has no NCCL"
    if not rt.cuda_available:
        return False, "torch sees no CUDA device"
    if local_rank >= rt.device_count:
        return False, f"local rank {local_rank} but {rt.device_count} GPU(s) visible (NCCL needs one GPU per rank)"
    return True, ""


class NcclDebug:
    """Point NCCL's INFO output at a file of ours (only when the caller did not set NCCL_DEBUG), and read it back."""

    def __init__(self, enabled: bool, environ: dict[str, str], rank: int):
        self.path: Path | None = None
        self.ours = False
        self.why = ""
        if not enabled:
            self.why = "--no-nccl-debug given"
        elif environ.get("NCCL_DEBUG"):
            user_file = environ.get("NCCL_DEBUG_FILE", "")
            if user_file:
                import socket

                self.path = Path(user_file.replace("%h", socket.gethostname()).replace("%p", str(os.getpid())))
            else:
                self.why = "NCCL_DEBUG is set by the caller without NCCL_DEBUG_FILE: its output went to the console"
        else:
            fd, name = tempfile.mkstemp(prefix=f"sparkops-nccl-r{rank}-", suffix=".log")
            os.close(fd)
            self.path, self.ours = Path(name), True
            os.environ["NCCL_DEBUG"] = "INFO"
            os.environ.setdefault("NCCL_DEBUG_SUBSYS", "INIT,NET")
            os.environ["NCCL_DEBUG_FILE"] = name

    def read(self, rank: int) -> TransportInfo:
        if self.path is None:
            return TransportInfo(rank=rank, source=self.why)
        try:
            with open(self.path, encoding="utf-8", errors="replace") as fh:
                text = fh.read(NCCL_LOG_CAP_BYTES)
        except OSError as exc:
            return TransportInfo(rank=rank, source=f"{self.path}: {exc.strerror or exc}")
        return collective.parse_nccl_debug(text, rank, source=f"NCCL_DEBUG_FILE {self.path}")

    def cleanup(self) -> None:
        if self.ours and self.path is not None:
            with contextlib.suppress(OSError):
                self.path.unlink()


class StallGuard:
    """A watchdog thread for the one wait no deadline can bound: a call that blocks inside the backend
    (NCCL sets up its communicator, synchronously, in the first collective; a peer that never arrives
    holds it there). When the main thread reports no progress (``kick``) for ``limit_s``, ``on_stall``
    runs on the watchdog thread; it reports and ends the process."""

    def __init__(self, limit_s: float, on_stall: Any):
        import threading

        self.limit_s, self.on_stall = limit_s, on_stall
        self.last = time.monotonic()
        self.step = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="sparkops-fleet-stall-guard", daemon=True)

    def kick(self, step: str = "") -> None:
        self.last, self.step = time.monotonic(), step or self.step

    def _watch(self) -> None:
        while not self._stop.wait(0.2):
            if time.monotonic() - self.last > self.limit_s:
                self.on_stall(self.step)
                return

    def __enter__(self) -> StallGuard:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()


def _collect_options(opts: FleetOptions, environ: dict[str, str]) -> Any:
    from sparkops import setup
    from sparkops.knowledge import load_with_matrix
    from sparkops.probes import live_options

    kb = load_with_matrix(opts.matrix)
    co = live_options(quick=opts.depth == "quick", python=opts.python or sys.executable,
                      config_paths=opts.config_paths, offline=opts.offline, budget_s=opts.budget_s,
                      container=bool(opts.container), env=environ, kb=kb)
    if opts.container:
        co = setup.container_options(co, opts.container, kb.matrix)
    return co


def run_rank(opts: FleetOptions, launch: LaunchEnv, environ: dict[str, str]) -> Outcome:
    """This rank's whole part; rank 0's Outcome carries the report."""
    torch, dist = import_torch()
    fk = load_fleet()
    join_t = opts.join_timeout_s or fk.timeouts.join_timeout_s
    coll_t = opts.collective_timeout_s or fk.timeouts.collective_timeout_s
    rank, world = launch.rank, launch.world_size
    if rank in opts.never_join:  # testing: this rank stays away; the others must name it and finish
        time.sleep(join_t + 2 * coll_t + 30)
        return Outcome(2, stderr=f"spark-ops fleet: rank {rank}: stayed away for the --test-never-join test")

    collect_opts = _collect_options(opts, environ)  # before NCCL's variables are set: facts show the caller's env
    try:
        store = rendezvous.open_store(dist, launch, join_t)
    except Exception as exc:
        raise InputError(f"rank {rank} could not reach the rendezvous store at {launch.master_addr}:"
                         f"{launch.master_port} within {join_t:g} s: {type(exc).__name__}: {exc}") from exc
    coord = rendezvous.Coordinator(store, rank, world, fk.timeouts.stage_poll_s)
    runtime = gather.read_runtime(torch, launch.local_rank)
    nccl_ok, nccl_why = _nccl_readiness(torch, dist, runtime, launch.local_rank)
    registration = {"hostname": runtime.hostname, "pid": runtime.pid, "local_rank": launch.local_rank,
                    "local_world_size": launch.local_world_size, "node_rank": launch.node_rank,
                    "runtime": runtime.model_dump(mode="json"), "nccl_ok": nccl_ok, "nccl_why": nccl_why}
    coord.put(f"join/{rank}", registration)
    coord.stage("joined")

    # 1. membership and the backend: rank 0 decides
    joined: dict[int, dict] = {}
    if rank == 0:
        joined, missing = coord.wait_all("join/", join_t)
        backend, error = decide_backend(opts.backend, joined)
        decision = {"go": not missing and not error, "missing": missing, "backend": backend, "error": error}
        coord.put("decision", decision)
    else:
        decision = coord.wait_key("decision", join_t + coll_t)
        if decision is None:
            return Outcome(2, stderr=f"spark-ops fleet: rank {rank}: rank 0 did not answer within "
                                     f"{join_t + coll_t:g} s; no fleet report (is rank 0 running?)")
    if decision["error"]:
        raise InputError(decision["error"])
    backend: str = decision["backend"]
    runtime = runtime.model_copy(update={"backend": backend})
    if rank != 0 and not decision["go"]:
        return Outcome(2)  # rank 0 reports the missing ranks

    nccl_debug = NcclDebug(opts.nccl_debug and backend == "nccl", environ, rank)
    state = _RankState(rank=rank, world=world, backend=backend, fk=fk, coll_t=coll_t, join_t=join_t,
                       go=bool(decision["go"]))
    try:
        if decision["go"]:
            state.init_group(torch, dist, store, launch)
        # 2. facts, in this rank's own process
        coord.stage("collecting")
        local = gather.collect_local(collect_opts, opts.fake_facts.get(rank))
        coord.stage("collected")
        # 3. gather to rank 0, once everyone has collected
        texts = state.gather(torch, dist, coord, gather.payload(launch, runtime, local),
                             wait_s=collect_opts.budget_s + 2 * coll_t, go=bool(decision["go"]))
        if texts is None and rank != 0:
            return state.follower_exit(coord, "rank 0 did not start the gather")
        # 4. the bandwidth probe, and each rank's transport
        measurement = None
        if opts.bandwidth and state.gathered:
            def stalled(step: str) -> None:  # on the guard's thread: report what is known, then leave
                m = collective.LocalMeasurement(timed_out_at=step or "a collective")
                state.broken = True
                coord.put(f"end/{rank}", {"bw": m.to_json(), "transport": None})
                if rank == 0:
                    rep = state.report(coord, opts, joined, texts, local, runtime, launch, m)
                    out = state.leader_exit(coord, rep, opts)
                else:
                    out = state.follower_exit(coord, "")
                out.hard_exit = True
                nccl_debug.cleanup()
                finish(out)  # exits the process

            with StallGuard(coll_t + 2, stalled) as guard:
                measurement = state.bandwidth(torch, dist, coord, opts, local, guard)
        transport = nccl_debug.read(rank) if backend == "nccl" else None
        coord.put(f"end/{rank}", {"bw": measurement.to_json() if measurement else None,
                                  "transport": transport.model_dump(mode="json") if transport else None})
        coord.stage("done")
        if rank != 0:
            return state.follower_exit(coord, "")
        # 5. rank 0: judge and report
        report = state.report(coord, opts, joined, texts, local, runtime, launch, measurement)
        return state.leader_exit(coord, report, opts)
    finally:
        nccl_debug.cleanup()


@dataclass
class _RankState:
    """What one rank carries between the stages, and the stage logic that needs it."""

    rank: int
    world: int
    backend: str
    fk: FleetKnowledge
    coll_t: float
    join_t: float
    go: bool = True  # every rank joined: the others take part in every later stage
    control: Any = None  # the gloo group for control messages
    control_on_gpu: bool = False
    group_error: str = ""
    gathered: bool = False
    gather_error: str = ""
    late: list[int] = field(default_factory=list)  # ranks that did not collect in time
    plan: list[tuple[int, int]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    bw_note: str = ""
    broken: bool = False  # a collective timed out or failed: do not tear the group down
    answering: list[int] = field(default_factory=list)

    def init_group(self, torch: Any, dist: Any, store: Any, launch: LaunchEnv) -> None:
        # the group's own timeout is a backstop; our bounded waits name the stuck rank first
        timeout = timedelta(seconds=2 * self.coll_t + 30)
        try:
            if self.backend == "nccl":
                torch.cuda.set_device(launch.local_rank)
            dist.init_process_group(self.backend, store=dist.PrefixStore("pg/", store), rank=self.rank,
                                    world_size=self.world, timeout=timeout)
            if self.backend == "gloo":
                self.control = dist.group.WORLD
            elif dist.is_gloo_available():
                self.control = dist.new_group(backend="gloo", timeout=timeout)
            else:  # no gloo in this build: control messages ride on NCCL, in GPU memory
                self.control, self.control_on_gpu = dist.group.WORLD, True
        except Exception as exc:
            self.group_error = f"init_process_group({self.backend}) failed: {type(exc).__name__}: {exc}"[:500]
            self.broken = True

    def gather(self, torch: Any, dist: Any, coord: rendezvous.Coordinator, text: str, wait_s: float, go: bool) -> list[str] | None:
        """Rank 0: every rank's payload, or None when the gather could not run (the reason is kept)."""
        if self.rank == 0:
            self.late = coord.wait_stage("collected", self.coll_t) if go else []
            ok = go and not self.late and not self.group_error
            coord.put("gather", {"go": ok})
        else:
            d = coord.wait_key("gather", wait_s)
            if d is None:
                return None
            ok = bool(d["go"])
        if not ok:
            self.gather_error = self.group_error or ("rank(s) missing" if not go else
                                                     f"rank(s) {self.late} did not collect in time")
            return [] if self.rank != 0 else None
        try:
            dev = torch.device("cuda", torch.cuda.current_device()) if self.control_on_gpu else None
            texts = gather.gather_to_rank0(torch, dist, self.control, text, self.rank, self.world, dev)
        except Exception as exc:
            self.gather_error = f"gathering the facts failed: {type(exc).__name__}: {exc}"[:500]
            self.broken = True
            return [] if self.rank != 0 else None
        self.gathered = True
        coord.stage("gathered")
        return texts if self.rank == 0 else []

    def bandwidth(self, torch: Any, dist: Any, coord: rendezvous.Coordinator, opts: FleetOptions,
                  local: gather.LocalFacts, guard: StallGuard) -> collective.LocalMeasurement:
        s = self.fk.bandwidth
        plan = s.plan(self.backend)
        cap = collective.affordable_bytes(torch, self.backend, s.reserve_gb, _host_budget_bytes(local, self.backend))
        coord.put(f"bwcap/{self.rank}", cap)
        coord.stage("bandwidth 0")
        if self.rank in opts.hang_collective:  # testing: ready, then never enters the first collective
            guard.limit_s = float("inf")  # this rank's own guard must not end it: the others are under test
            time.sleep(self.join_t + 4 * self.coll_t + 30)
        if self.rank == 0:
            caps, missing = coord.wait_all("bwcap/", self.coll_t)
            known_caps = [c for c in caps.values() if c is not None]
            sizes, skipped = collective.plan_sizes(plan, self.world, s.dtype_bytes, min(known_caps) if known_caps else None)
            go = not missing and bool(sizes)
            coord.put("bwplan", {"go": go, "sizes": sizes, "skipped": skipped,
                                 "why": f"rank(s) {missing} did not get ready in time" if missing else
                                 ("no size fits" if not sizes else "")})
        plan_msg = coord.wait_key("bwplan", 2 * self.coll_t)
        if plan_msg is None:
            self.broken = True
            return collective.LocalMeasurement(error="rank 0 did not publish the bandwidth plan")
        self.plan = [tuple(x) for x in plan_msg["sizes"]]  # type: ignore[misc]
        self.skipped = plan_msg["skipped"]
        if not plan_msg["go"]:
            self.bw_note = plan_msg["why"]
            return collective.LocalMeasurement(error=plan_msg["why"])
        steps = [f"{op}:{size}" for op in collective.OPS for size, _ in self.plan]

        def on_stage(stage: str) -> None:
            coord.stage(stage)
            k = int(stage.rsplit(" ", 1)[-1])
            guard.kick(steps[k - 1] if 0 < k <= len(steps) else "")
            if k == 1 and self.rank in opts.block_in_collective:  # testing: stuck as inside NCCL's first call
                time.sleep(self.join_t + 4 * self.coll_t + 30)

        guard.kick()
        m = collective.measure(torch, dist, None, self.backend, self.plan, plan.warmup, self.coll_t, on_stage=on_stage)
        if m.timed_out_at or m.error:
            self.broken = True
        else:
            coord.stage("measured")
        return m

    def follower_exit(self, coord: rendezvous.Coordinator, why: str) -> Outcome:
        """A rank other than 0: wait for rank 0's exit code (bounded), acknowledge, leave."""
        code = coord.wait_key("result", self.coll_t + 60) if not why else None
        if code is None:
            return Outcome(2, stderr=f"spark-ops fleet: rank {self.rank}: {why or 'rank 0 published no result'}; "
                                     "no fleet report from this rank", hard_exit=True)
        coord.put(f"ack/{self.rank}", 1)
        # leave at once: rank 0 exits after the acks, and a launcher stops the ranks still running then
        return Outcome(int(code), hard_exit=True)

    def report(self, coord: rendezvous.Coordinator, opts: FleetOptions, joined: dict[int, dict],
               texts: list[str] | None, local: gather.LocalFacts, runtime: RuntimeFacts, launch: LaunchEnv,
               measurement: collective.LocalMeasurement | None) -> FleetReport:
        from sparkops.knowledge import load_with_matrix

        kb = load_with_matrix(opts.matrix)
        # what the others sent at the end: timings and transport (short grace after a timeout)
        wait = self.fk.timeouts.ack_timeout_s if self.broken else self.coll_t
        ends, _ = coord.wait_all("end/", wait, ranks=None if self.go else [0])
        self.answering = sorted(r for r in ends if r != 0)  # the ranks that will wait for the result
        stages = coord.stages()
        nodes = self._nodes(texts, joined, local, runtime, launch)
        bw = self._bandwidth_result(measurement, ends, stages, len({m["hostname"] for m in joined.values()}), opts)
        members = self._members(joined, stages, bw)
        transport = [TransportInfo.model_validate(e["transport"]) for e in ends.values() if e.get("transport")]
        notes = [x for x in (self.group_error, self.gather_error) if x]
        return judge.assemble(nodes=nodes, members=members, world_size=self.world, backend=self.backend,
                              launcher=launch.launcher, bandwidth=bw, transport=transport, workload=opts.workload,
                              kb=kb, fk=self.fk, join_timeout_s=self.join_t, collective_timeout_s=self.coll_t,
                              notes=notes)

    def _nodes(self, texts: list[str] | None, joined: dict[int, dict], local: gather.LocalFacts,
               runtime: RuntimeFacts, launch: LaunchEnv) -> list[FleetNode]:
        if texts:
            return [gather.node_from_payload(t) for t in texts]
        # no gather: rank 0's own node, and what the others said when they joined
        why = f"facts not gathered: {self.gather_error or 'the fleet did not get that far'}"
        nodes = [gather.node_from_payload(gather.payload(launch, runtime, local))]
        for r, reg in sorted(joined.items()):
            if r != 0:
                nodes.append(FleetNode(rank=r, hostname=reg["hostname"], local_rank=reg["local_rank"],
                                       local_world_size=reg.get("local_world_size"), node_rank=reg.get("node_rank"),
                                       runtime=RuntimeFacts.model_validate(reg["runtime"]), error=why))
        return nodes

    def _bandwidth_result(self, mine: collective.LocalMeasurement | None, ends: dict[int, Any],
                          stages: dict[int, str], nodes: int, opts: FleetOptions) -> BandwidthResult:
        s = self.fk.bandwidth
        base = {"backend": self.backend, "world_size": self.world, "nodes": nodes,
                "timer": "cuda-events" if self.backend == "nccl" else "perf_counter",
                "reference_busbw_gbs": s.reference_busbw_gbs, "reference_source": s.reference_source,
                "skipped_sizes": self.skipped}
        if not opts.bandwidth:
            return BandwidthResult(status="skipped", reason="--no-bandwidth given", **base)
        if mine is None:
            return BandwidthResult(status="skipped", reason=f"not measured: {self.gather_error or 'the fleet did not get that far'}", **base)
        per = {r: e["bw"] for r, e in ends.items() if e.get("bw") is not None}
        per[0] = mine.to_json()
        if self.bw_note:
            return BandwidthResult(status="skipped", reason=self.bw_note, **base)
        timed_out = {r: m["timed_out_at"] for r, m in per.items() if m.get("timed_out_at")}
        errors = {r: m["error"] for r, m in per.items() if m.get("error")}
        silent = [r for r in range(self.world) if r not in per]
        rows = collective.rows_from_times(self.world, {r: m["times_s"] for r, m in per.items()}, self.plan,
                                          s.plan(self.backend).warmup)
        if timed_out or silent:
            keys = {r: rendezvous.stage_key(stages.get(r, "")) for r in range(self.world)}
            top = max(keys.values())
            stalled = sorted(r for r, k in keys.items() if k < top)
            first = sorted(timed_out.items())[0][1] if timed_out else ""
            op, _, size = first.partition(":")
            what = (f"{op.replace('_', '-')} of {collective.human_bytes(int(size))}" if size.isdigit()
                    else "a collective")
            if stalled:
                where = "; ".join(f"rank {r} last reported: {_stage_text(stages.get(r, ''), self.plan)}" for r in stalled)
                reason = f"{what} did not complete within {self.coll_t:g} s: {where}"
            else:
                reason = (f"{what} did not complete within {self.coll_t:g} s on any rank although all entered it: "
                          "the link or a GPU is stuck")
            return BandwidthResult(status="timed-out", reason=reason, rows=rows, stalled_ranks=stalled or silent, **base)
        if errors:
            r, e = sorted(errors.items())[0]
            return BandwidthResult(status="failed", reason=f"rank {r}: {e}", rows=rows, **base)
        return BandwidthResult(status="measured", rows=rows, **base)

    def _members(self, joined: dict[int, dict], stages: dict[int, str], bw: BandwidthResult) -> list[MemberStatus]:
        out = []
        for r in range(self.world):
            reg = joined.get(r)
            if reg is None:
                out.append(MemberStatus(rank=r, joined=False, last_stage=stages.get(r, ""),
                                        note="no join key in the store"))
                continue
            stalled = ""
            last = _stage_text(stages.get(r, ""), self.plan)
            if r in self.late:
                stalled = f"collecting its facts (last reported: {last})"
            elif r in bw.stalled_ranks and bw.status == "timed-out":
                stalled = f"the bandwidth probe (last reported: {last})"
            out.append(MemberStatus(rank=r, joined=True, hostname=reg["hostname"], local_rank=reg["local_rank"],
                                    pid=reg["pid"], last_stage=stages.get(r, ""), stalled_at=stalled))
        return out

    def leader_exit(self, coord: rendezvous.Coordinator, report: FleetReport, opts: FleetOptions) -> Outcome:
        from sparkops.facts.snapshot import write_atomic
        from sparkops.fleet import render

        code = judge.exit_code(report)
        write_atomic(opts.report_path, render.render_json(report))
        text = render.render_json(report) if opts.as_json else render.render_text(report, str(opts.report_path))
        # print before publishing the result: once the others have it they exit, and a launcher
        # such as torchrun then stops the ranks still running, this one included
        sys.stdout.write(text)
        sys.stdout.flush()
        coord.put("result", code)
        if self.answering:  # a stalled rank or one that left at the decision will not acknowledge
            coord.wait_all("ack/", self.fk.timeouts.ack_timeout_s, ranks=self.answering)
        return Outcome(code, report=report, hard_exit=self.broken)


def _host_budget_bytes(local: gather.LocalFacts, backend: str) -> int | None:
    """MemAvailable where it bounds the probe: always for gloo (host buffers), and for NCCL on unified
    memory (GB10: CUDA's free memory tracks MemFree, and the pool is the host's). None otherwise."""
    f = local.facts
    if f is None or not isinstance(f.memory.meminfo_bytes, dict):
        return None
    avail = f.memory.meminfo_bytes.get("MemAvailable")
    if backend != "nccl":
        return avail
    from sparkops.checks import identity
    from sparkops.knowledge import load

    return avail if identity.identify(f, load()).unified_memory else None


def _stage_text(stage: str, plan: list[tuple[int, int]]) -> str:
    head, _, tail = stage.partition(" ")
    if head == "bandwidth" and tail.isdigit():
        step = int(tail)
        return "ready, not yet in a collective" if step == 0 else f"inside the {collective.step_label(step, plan)}"
    return stage or "nothing"


def finish(outcome: Outcome, dist: Any | None = None) -> None:
    """Print, tear down (unless a collective is pending), exit with the outcome's code."""
    if outcome.stdout:
        sys.stdout.write(outcome.stdout)
    if outcome.stderr:
        sys.stderr.write(outcome.stderr.rstrip("\n") + "\n")
    sys.stdout.flush()
    sys.stderr.flush()
    if outcome.hard_exit:
        os._exit(outcome.code)  # a pending collective would block a normal interpreter exit
    if dist is not None and dist.is_available() and dist.is_initialized():
        with contextlib.suppress(Exception):
            dist.destroy_process_group()
