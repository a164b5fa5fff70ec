"""The lite model runtime (sparkops.core.lite) answers exactly as pydantic, or declines.

``preflight --quick`` runs its models on the lite runtime (no pydantic import). Every comparison
here runs each runtime in its own subprocess (one runtime per process, as in the tool):

* every facts fixture through the quick path, every format: stdout and env-report.json bytes equal;
* a live ``preflight --quick --offline`` on this machine: the reports equal once what moves between
  two collections is removed (:data:`VOLATILE`), and each runtime's collected facts, validated by
  the other, dump the same bytes;
* facts documents mutated from the fixtures (hypothesis): the same dump, or both refuse;
* a lite decline mid-run: pydantic answers instead, with the same bytes.

The runtime's own refusals (unsupported annotations, config keys, Field options) are checked here too.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparkops.core import lite

FIXTURES = Path(__file__).parent / "fixtures" / "facts"
FIXTURE_FILES = sorted(p.name for p in FIXTURES.glob("*.json"))
FORMATS = [["--format", "lines"], ["--format", "json"], ["--json"], ["--format", "table"]]

# one runtime per process: LITE=1 chooses the lite runtime before any model module is imported
PRELUDE = r"""
import json, os, sys
lite_run = os.environ["LITE"] == "1"
from sparkops.core import modeling
if lite_run:
    modeling.use_lite()
"""

QUICK_DRIVER = PRELUDE + r"""
from datetime import datetime, timezone
from pathlib import Path
from sparkops import api, front
from sparkops.probes import target_launch
from sparkops.report import build
from sparkops.core import lite

FROZEN = datetime(2026, 12, 3, 17, 0, 0, 123456, tzinfo=timezone.utc)
class Frozen(datetime):
    @classmethod
    def now(cls, tz=None):
        return FROZEN if tz is not None else FROZEN.replace(tzinfo=None)
build.datetime = Frozen
target_launch.prestart = lambda *a, **k: None
fixtures, formats, work = Path(sys.argv[1]), json.loads(sys.argv[2]), Path(sys.argv[3])
os.chdir(work)
out = {}
for name in json.loads(sys.argv[4]):
    api.collect = lambda opts, also_import=(), _p=fixtures / name: api.load_facts(_p)
    for fmt in formats:
        report = work / "env-report.json"
        report.unlink(missing_ok=True)
        sys.stdout.flush()
        r, w = os.pipe()
        saved = os.dup(1)
        os.dup2(w, 1)
        try:
            code = front.fast_preflight(["preflight", "--quick", "--offline", *fmt], lite=lite_run)
            sys.stdout.flush()
        finally:
            os.dup2(saved, 1)
            os.close(w)
        text = b""
        while chunk := os.read(r, 1 << 16):
            text += chunk
        os.close(r)
        out[f"{name} {' '.join(fmt)}"] = [code, text.decode(), report.read_text() if report.exists() else None]
out["_runtime"] = modeling.runtime()
out["_pydantic_loaded"] = "pydantic" in sys.modules
out["_declined"] = list(lite.DECLINED)
json.dump(out, open(sys.argv[5], "w"))
"""


def _run(driver: str, lite_run: bool, *args: str, timeout: int = 240) -> subprocess.CompletedProcess:
    env = {**os.environ, "LITE": "1" if lite_run else "0", "SPARKOPS_NO_NVML": "1"}
    env.pop("SPARKOPS_NO_FAST", None)
    env.pop("SPARKOPS_NO_LITE", None)
    p = subprocess.run([sys.executable, "-c", driver, *args], capture_output=True, text=True, env=env,
                       timeout=timeout)
    assert p.returncode == 0, p.stderr[-3000:]
    return p


def _quick_outputs(tmp_path: Path, lite_run: bool, names: list[str]) -> dict:
    work = tmp_path / ("lite" if lite_run else "pydantic")
    work.mkdir()
    result = tmp_path / f"{work.name}.json"
    _run(QUICK_DRIVER, lite_run, str(FIXTURES), json.dumps(FORMATS), str(work), json.dumps(names), str(result))
    return json.loads(result.read_text())


def test_every_fixture_prints_and_writes_the_same_bytes_on_both_runtimes(tmp_path):
    lite_out = _quick_outputs(tmp_path, True, FIXTURE_FILES)
    pyd_out = _quick_outputs(tmp_path, False, FIXTURE_FILES)
    assert lite_out.pop("_runtime") == "lite" and pyd_out.pop("_runtime") == "pydantic"
    assert lite_out.pop("_pydantic_loaded") is False and pyd_out.pop("_pydantic_loaded") is True
    assert lite_out.pop("_declined") == [], "the lite runtime declined: pydantic answered instead"
    pyd_out.pop("_declined")
    assert len(lite_out) == len(FIXTURE_FILES) * len(FORMATS)
    for key, (code, text, report) in pyd_out.items():
        assert text.strip() and report, key
        assert lite_out[key] == [code, text, report], key


# ---- a live collection on this machine, once per runtime

LIVE_DRIVER = PRELUDE + r"""
from pathlib import Path
from sparkops import api, front
from sparkops.core import lite
work, facts_out = Path(sys.argv[1]), Path(sys.argv[2])
os.chdir(work)
real = api.collect
def collect(opts, also_import=()):
    facts = real(opts, also_import=also_import)
    facts_out.write_text(facts.model_dump_json(indent=2))
    return facts
api.collect = collect
code = front.fast_preflight(["preflight", "--quick", "--offline", "--format", "json", "--report", sys.argv[3],
                             *sys.argv[4:]], lite=lite_run)
assert code is not None
print(json.dumps({"code": code, "runtime": modeling.runtime(), "pydantic": "pydantic" in sys.modules,
                  "declined": list(lite.DECLINED)}), file=sys.stderr)
"""

REVALIDATE = PRELUDE + r"""
from sparkops.facts.model import Facts
for src, dst in zip(sys.argv[1::2], sys.argv[2::2]):
    Path = __import__("pathlib").Path
    facts = Facts.model_validate(json.loads(Path(src).read_text()))
    Path(dst).write_text(facts.model_dump_json(indent=2))
"""

# What legitimately differs between two collections a second apart: timestamps, probe durations,
# the memory figures (MemAvailable moves; G3's and G6's lines and evidence quote it and the process
# table), the budget derived from them, and on a machine with a GPU G4's live sensor readings
# (temperature, power, clocks: the H200 run of 2026-12-04 moved them between the two collections).
# Everything else of the report must be equal, G4's status included.
LIVE_READINGS = ("G3", "G4", "G6")
VOLATILE = ("generated_at", "facts_collected_at", "headroom_gb", "headroom_gib", "probe_notes[].duration_s",
            "findings[G3|G4|G6].summary/detail/evidence/values/notes", "checks.G3|G4|G6 text after the status")


def _stable(report: dict) -> dict:
    out = {k: v for k, v in report.items() if k not in ("generated_at", "facts_collected_at", "headroom_gb",
                                                          "headroom_gib")}
    out["probe_notes"] = [{k: v for k, v in p.items() if k != "duration_s"} for p in report["probe_notes"]]
    out["checks"] = {k: v.split(":")[0] if k in LIVE_READINGS else v for k, v in report["checks"].items()}
    out["findings"] = [f if f["gotcha"] not in LIVE_READINGS else
                       {k: v for k, v in f.items() if k not in ("summary", "detail", "evidence", "values", "notes")}
                       for f in report["findings"]]
    return out


@pytest.mark.parametrize("target", ["python3 on PATH", "this interpreter"])
def test_a_live_quick_run_gives_the_same_report_on_both_runtimes(tmp_path, target):
    """Twice: the default target, and this interpreter (the test environment: torch's files, its
    distributions and the extensions' ELF needs are read when torch is installed here)."""
    python = [] if target == "python3 on PATH" else ["--python", sys.executable]
    runs = {}
    work = tmp_path / "cwd"  # the same empty working directory (G10 names it), the report written outside
    work.mkdir()
    for lite_run in (True, False):
        name = "lite" if lite_run else "pydantic"
        p = _run(LIVE_DRIVER, lite_run, str(work), str(tmp_path / f"{name}-facts.json"),
                 str(tmp_path / f"{name}-report.json"), *python)
        said = json.loads(p.stderr.strip().splitlines()[-1])
        runs[name] = said, json.loads((tmp_path / f"{name}-report.json").read_text()), p.stdout
    (lite_said, lite_rep, lite_text), (pyd_said, pyd_rep, _t) = runs["lite"], runs["pydantic"]
    assert lite_said["runtime"] == "lite" and not lite_said["pydantic"] and lite_said["declined"] == []
    assert pyd_said["runtime"] == "pydantic" and pyd_said["pydantic"]
    assert lite_said["code"] == pyd_said["code"]
    assert json.loads(lite_text) == lite_rep  # what it printed is what it wrote
    a, b = _stable(lite_rep), _stable(pyd_rep)
    assert [f for f in a["findings"] if f not in b["findings"]] == []
    assert a == b
    # each runtime's collected facts, validated by the other runtime, dump the same bytes
    for producer, reader in (("lite", False), ("pydantic", True)):
        src = tmp_path / f"{producer}-facts.json"
        dst = tmp_path / f"{producer}-read-by-{'lite' if reader else 'pydantic'}.json"
        _run(REVALIDATE, reader, str(src), str(dst))
        assert dst.read_text() == src.read_text(), producer


# ---- mutated facts documents, one batch per runtime

BATCH_DRIVER = PRELUDE + r"""
from pathlib import Path
from sparkops.core import lite
from sparkops.facts.model import Facts
from sparkops.facts.snapshot import SnapshotError, load_facts
docs = json.loads(Path(sys.argv[1]).read_text())
work = Path(sys.argv[3])
out = []
for i, doc in enumerate(docs):
    row = {}
    lite.DECLINED.clear()
    try:
        row["validate"] = Facts.model_validate(doc).model_dump_json(indent=2)
    except lite.LiteDeclined:
        row["validate"] = "DECLINED"
    except modeling.ValidationError as exc:
        row["validate"] = "REJECTED"
    path = work / f"doc{i}.json"
    path.write_text(json.dumps(doc))
    try:
        row["load"] = load_facts(path).model_dump_json(indent=2)
    except lite.LiteDeclined:
        row["load"] = "DECLINED"
    except SnapshotError:
        row["load"] = "REJECTED"
    if lite.DECLINED and "DECLINED" not in row.values():
        row["load"] = row["validate"] = "DECLINED"  # a decline a caller swallowed still counts as one
    out.append(row)
Path(sys.argv[2]).write_text(json.dumps(out))
"""

_BASES = {name: json.loads((FIXTURES / name).read_text()) for name in FIXTURE_FILES}
ODD = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.integers(min_value=-(2**70), max_value=2**70),
                st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, 1.0, 2.5, -1.0, 1e300, 151.0,
                                                                                   5001.0, 1e-7, 100.0]),
                st.text(max_size=6), st.sampled_from(["5", "1.5", "nan", "true", "2026-01-02T03:04:05Z",
                                                     "not_supported", "error", "quick", "nvml", "2026-01-02"]),
                st.lists(st.integers(0, 9), max_size=3), st.just({}), st.just({"unavailable": "error"}),
                st.just({"unavailable": "timeout", "detail": "x"}), st.just({"unavailable": "bogus"}))


def _paths(doc: object, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:3]):
            out += _paths(v, (*prefix, i))
    return out


def _fresh(value: object) -> object:
    """A copy: `st.just({})` hands out one dict object, and placing it twice can nest it in itself (a cycle)."""
    return json.loads(json.dumps(value))


@st.composite
def mutated(draw: st.DrawFn) -> dict:
    doc = json.loads(json.dumps(_BASES[draw(st.sampled_from(FIXTURE_FILES))]))
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(doc) if p]
        where = draw(st.sampled_from(paths))
        parent = doc
        for part in where[:-1]:
            parent = parent[part]
        key = where[-1]
        action = draw(st.sampled_from(["set", "set", "set", "delete", "extra", "scale"]))
        if action == "delete" and isinstance(parent, dict) and key != "schema_version":
            del parent[key]
        elif action == "extra" and isinstance(parent, dict):
            parent[draw(st.sampled_from(["zz_new", "extra_field", "unavailable"]))] = _fresh(draw(ODD))
        elif action == "scale" and isinstance(parent[key], int | float) and not isinstance(parent[key], bool):
            parent[key] = parent[key] * draw(st.sampled_from([-1, 0, 1000, 1e12, 0.5]))
        elif key != "schema_version" or draw(st.booleans()):
            parent[key] = _fresh(draw(ODD))
    return doc


def _batch(tmp_path: Path, lite_run: bool, docs: list[dict]) -> list[dict]:
    name = "lite" if lite_run else "pydantic"
    work = tmp_path / f"{name}-docs"
    work.mkdir(exist_ok=True)
    src, dst = tmp_path / "docs.json", tmp_path / f"{name}-out.json"
    src.write_text(json.dumps(docs))
    _run(BATCH_DRIVER, lite_run, str(src), str(dst), str(work))
    return json.loads(dst.read_text())


DECLINES: list[int] = []


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                               HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(mutated(), min_size=40, max_size=40))
def test_mutated_facts_dump_the_same_or_are_refused_by_both(tmp_path_factory, docs):
    tmp_path = tmp_path_factory.mktemp("batch")
    got_lite, got_pyd = _batch(tmp_path, True, docs), _batch(tmp_path, False, docs)
    assert all("DECLINED" not in r.values() for r in got_pyd)
    declined = 0
    for i, (a, b) in enumerate(zip(got_lite, got_pyd, strict=True)):
        for what in ("validate", "load"):
            if a[what] == "DECLINED":
                declined += 1
                continue
            assert a[what] == b[what], (what, json.dumps(docs[i])[:2000])
    DECLINES.append(declined)
    assert declined < len(docs), "the lite runtime declined everything: nothing was compared"


# ---- a decline mid-run: pydantic answers

DECLINE_DRIVER = r"""
import json, os, sys
from sparkops import front
from sparkops.core import lite
real = lite._v_str
def unsure_of_hostnames(v):
    if v == os.uname().nodename:
        raise lite._Unsure("pretend")
    return real(v)
lite._v_str = unsure_of_hostnames
lite._SCALARS[str] = unsure_of_hostnames
code = front.fast_preflight(["preflight", "--quick", "--offline", "--format", "lines", "--report", sys.argv[1]],
                            lite=True)
from sparkops.core import modeling
print(json.dumps({"code": code, "runtime": modeling.runtime(), "pydantic": "pydantic" in sys.modules}),
      file=sys.stderr)
"""


def test_a_lite_decline_is_answered_by_pydantic_with_nothing_printed_twice(tmp_path):
    env = {**os.environ, "SPARKOPS_NO_NVML": "1"}
    env.pop("SPARKOPS_NO_LITE", None)
    p = subprocess.run([sys.executable, "-c", DECLINE_DRIVER, str(tmp_path / "r.json")], capture_output=True,
                       text=True, env=env, timeout=240, cwd=tmp_path)
    said = json.loads(p.stderr.strip().splitlines()[-1])
    assert said["runtime"] == "pydantic" and said["pydantic"], said  # the fallback ran
    assert p.stdout.count("verdict ") == 1, p.stdout  # printed once, by the pydantic run
    assert json.loads((tmp_path / "r.json").read_text())["depth"] == "quick"


# ---- in process: the runtime's own rules

def test_floats_are_written_as_pydantic_writes_them():
    import pydantic

    class F(pydantic.BaseModel):
        x: float

    def pyd(v: float) -> str:
        return F(x=v).model_dump_json().removeprefix('{"x":').removesuffix("}")

    @given(st.floats(allow_nan=True, allow_infinity=True))
    @settings(max_examples=500)
    def check(v: float) -> None:
        assert lite.float_text(v) == pyd(v)

    check()
    for v in (1e-5, 1.234e-5, 1e-6, 1e16, 1e15, 5e-324, -0.0, 1e21, math.inf, -math.inf, math.nan):
        assert lite.float_text(v) == pyd(v), v


def _define(body: str) -> type:
    import types

    mod = types.ModuleType("lite_probe_models")
    sys.modules[mod.__name__] = mod
    code = f"from typing import *\nfrom sparkops.core.lite import *\nclass M(BaseModel):\n{body}\n"
    exec(compile(code, mod.__name__, "exec", dont_inherit=True), mod.__dict__)  # noqa: S102
    return mod.M


@pytest.mark.parametrize("body", [
    "    x: set[int] = set()",  # no set fields in the models
    "    x: frozenset[str]",
    "    x: bytes = b''",
    "    x: dict[int, str]",  # only str keys
    "    x: float | int = 0",  # pydantic's serialiser picks between them by value
    "    x: type = int",
    "    x: Annotated[int, 'a note']",
])
def test_an_annotation_it_does_not_implement_is_refused_when_the_model_is_built(body):
    model = _define(body)
    with pytest.raises(lite.LiteUnsupported):
        model.model_fields  # noqa: B018 - builds the model


@pytest.mark.parametrize("body", [
    "    model_config = ConfigDict(strict=True)\n    x: int = 0",
    "    model_config = ConfigDict(extra='allow')\n    x: int = 0",
    "    x: int = Field(0, alias='y')",
    "    x: int = Field(0, multiple_of=2)",
    "    x: int = 0\n    @field_validator('x', mode='wrap')\n    @classmethod\n    def f(cls, v, h): return h(v)",
    "    x: int = 0\n    @model_validator(mode='wrap')\n    @classmethod\n    def f(cls, v, h): return h(v)",
    "    x: int = 0\n    def model_post_init(self, ctx): pass",
])
def test_a_config_key_field_option_or_validator_mode_it_does_not_implement_is_refused(body):
    with pytest.raises(lite.LiteUnsupported):
        _define(body)


BUILD_ALL = PRELUDE + r"""
import importlib, inspect
from sparkops.core import lite
mods = sys.argv[1:]
built = 0
for name in mods:
    mod = importlib.import_module(name)
    for obj in vars(mod).values():
        if inspect.isclass(obj) and issubclass(obj, lite.BaseModel) and obj is not lite.BaseModel:
            obj.model_fields
            built += 1
print(built, json.dumps(lite.DECLINED))
"""

MODEL_MODULES = ["sparkops.facts.reading", "sparkops.facts.model", "sparkops.facts.workload", "sparkops.core.findings",
                 "sparkops.knowledge.thresholds", "sparkops.knowledge", "sparkops.report.model"]


def test_every_model_of_the_quick_path_builds_on_the_lite_runtime():
    """A model change the lite runtime does not implement fails here, not silently in a user's run."""
    p = _run(BUILD_ALL, True, *MODEL_MODULES)
    built, declined = p.stdout.split(" ", 1)
    assert int(built) >= 60 and json.loads(declined) == []


def test_modeling_refuses_lite_after_pydantic_was_handed_out():
    from sparkops.core import modeling

    modeling.BaseModel  # noqa: B018 - this process's models are pydantic's
    assert modeling.runtime() == "pydantic"
    with pytest.raises(RuntimeError):
        modeling.use_lite()


def test_modeling_refuses_lite_once_a_model_module_is_loaded():
    p = subprocess.run([sys.executable, "-c", "import sparkops.core.findings as f\n"
                        "from sparkops.core import modeling\n"
                        "try:\n    modeling.use_lite()\nexcept RuntimeError as e:\n    print('refused', e)\n"],
                       capture_output=True, text=True, timeout=60)
    assert p.stdout.startswith("refused") and "sparkops.core.findings" in p.stdout
