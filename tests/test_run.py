"""The bounded runner: deadlines count from the start, finished children are never "timeouts"."""

import sys
import threading
import time

from sparkops.probes import _run


def test_a_child_that_finished_before_we_looked_is_not_a_timeout():
    pending = _run.spawn([sys.executable, "-c", "print('done')"])
    time.sleep(1.0)
    res = pending.result(0.5)  # deadline already past when we collect
    assert res.ok and res.error == "" and res.stdout.strip() == "done"


def test_a_hung_child_is_killed_at_its_deadline_counted_from_spawn():
    pending = _run.spawn([sys.executable, "-c", "import time; time.sleep(60)"])
    time.sleep(0.3)
    t0 = time.monotonic()
    res = pending.result(0.8)
    assert res.error == "timeout" and not res.ok
    assert time.monotonic() - t0 < 2.0


def test_missing_program_and_signal_death():
    assert _run.run(["/nonexistent/tool"], 1).error == "not_found"
    res = _run.run([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"], 10)
    assert res.error == "signal" and res.signal == 11 and "SIGSEGV" in res.describe()


def test_a_probe_returning_the_wrong_shape_is_recorded_not_raised(monkeypatch):
    import types

    from sparkops import probes
    from sparkops.facts.model import MemoryFacts

    bad = types.ModuleType("bad_probe")
    bad.SECTION = "memory"
    bad.collect = lambda opts: MemoryFacts.model_construct(meminfo_bytes="not a mapping")
    bad.unavailable = lambda why, detail: MemoryFacts()
    monkeypatch.setitem(sys.modules, "bad_probe", bad)
    monkeypatch.setitem(probes.PROBES, "memory", "bad_probe")
    facts = probes.collect(probes.CollectOptions(only=("memory",), budget_s=5))
    assert facts.probes["memory"].ok is False and "ValidationError" in facts.probes["memory"].reason


def test_a_flood_of_output_is_capped_and_does_not_block():
    code = "import sys\nfor _ in range(400): sys.stdout.write('x' * 65536)\n"  # ~26 MB
    res = _run.run([sys.executable, "-c", code], 20)
    assert res.ok and res.truncated
    assert len(res.stdout) == _run.MAX_OUTPUT_BYTES


def test_stdin_is_fed():
    res = _run.run([sys.executable, "-c", "import sys; print(sys.stdin.read().upper())"], 10, stdin_text="abc")
    assert res.stdout.strip() == "ABC"


def test_nvml_warmup_starts_once_and_respects_the_opt_out(monkeypatch):
    import types

    from sparkops.probes import early

    calls = []
    fake = types.ModuleType("pynvml")
    fake.nvmlInit = lambda: calls.append("init")
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(early, "_started", False)
    assert early.warm_nvml({early.NO_NVML_ENV: "1"}) is None
    t = early.warm_nvml({})
    t.join(5)
    assert early.warm_nvml({}) is None  # once per process
    assert calls == ["init"]


def test_nvml_warmup_swallows_a_broken_binding(monkeypatch):
    import types

    from sparkops.probes import early

    fake = types.ModuleType("pynvml")

    def boom():
        raise OSError("libnvidia-ml.so.1: cannot open shared object file")

    fake.nvmlInit = boom
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(early, "_started", False)
    escaped = []
    monkeypatch.setattr(threading, "excepthook", escaped.append)
    early.warm_nvml({}).join(5)
    assert escaped == []  # the probe retries and reports; the warm-up itself stays silent


def test_output_so_far_shows_a_running_childs_output_before_it_ends():
    spawn = _run.spawn

    p = spawn((sys.executable, "-c", "import sys,time; print('step 1', flush=True); "
                                       "print('warn', file=sys.stderr, flush=True); time.sleep(30)"), env={})
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and p.output_so_far() != (b"step 1\n", b"warn\n"):
            time.sleep(0.05)
        assert p.output_so_far() == (b"step 1\n", b"warn\n")
        assert p.proc.poll() is None  # still running: this is the streaming view, not the result
    finally:
        p.kill()
    assert spawn(("/nonexistent-tool",), env={}).output_so_far() == (b"", b"")
