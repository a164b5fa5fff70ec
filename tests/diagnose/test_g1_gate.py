"""The G1 gate (rounds 18ac/18ag: learned.GATES["G1"], read in diagnose ``_learned``; the readings' own tests are in
test_g1_readings.py): G1 is answered only where a line shows a CUDA major-version mismatch (a CUDA 12 library, tag,
toolkit or torch.version.cuda; a CPU-only torch; a driver older than the runtime; "built for the wrong CUDA"), not
where a library merely lacks an SM12x kernel (labelled none). Read on the verbatim excerpts of labelled reports."""

from __future__ import annotations

from pathlib import Path

from sparkops.diagnose import diagnose_text
from sparkops.diagnose.learned import text_features
from sparkops.diagnose.reading import line_roles
from sparkops.knowledge import safe_load

HERE = Path(__file__).parent


def _case(rel: str) -> tuple[str, list[str]]:
    case = safe_load((HERE / rel).read_text(encoding="utf-8"))
    return str(case["label"]), str(case["text"]).splitlines()


def test_g1_on_a_missing_sm121_kernel_alone_is_not_answered_and_says_why() -> None:
    _label, lines = _case("holdout/causal-conv1d-119-no-sm121-prebuilt-wheel.yaml")
    cut = [ln for ln in lines if "kernel image" in ln]  # the excerpt's failure line, cut not rewritten
    d = diagnose_text("\n".join(cut))
    assert all(f.gotcha != "G1" for f in d.findings)
    assert d.abstained and "no line shows a CUDA major-version mismatch" in (d.abstain_reason or "")
    assert any(c.gotcha == "G1" for c in d.candidates)  # still named as a candidate, with what would decide it
    _l, omni = _case("holdout/sglang-omni-620-sgl-kernel-cuda12-libs-on-spark.yaml")
    d2 = diagnose_text("\n".join([omni[0], *cut]))  # the same failure beside a CUDA 12 runtime library not found
    assert d2.findings and d2.findings[0].gotcha == "G1"


def test_a_fact_that_confirms_g1_passes_the_gate_and_a_healthy_one_does_not() -> None:
    """Round 18ae: a machine fact (--facts / --live) that confirms G1 through its owner's decision (facts_confirm) is
    stronger evidence of the mismatch than any line, so the gate lets G1 through; a cu130 machine confirms nothing."""
    from conftest import load_facts_fixture

    _label, lines = _case("holdout/causal-conv1d-119-no-sm121-prebuilt-wheel.yaml")
    cut = "\n".join(ln for ln in lines if "kernel image" in ln)
    assert all(f.gotcha != "G1" for f in diagnose_text(cut).findings)  # text alone: gated
    d = diagnose_text(cut, facts=load_facts_fixture("gb10_bare_pip_cu128"))  # a recorded cu128 pip torch on a GB10
    assert d.findings and d.findings[0].gotcha == "G1"
    assert ("G1.wheel-cuda12", "confirms") in [(x.fact, x.effect) for x in d.findings[0].facts]
    healthy = diagnose_text(cut, facts=load_facts_fixture("gb10_ngc_2509_healthy"))
    assert all(f.gotcha != "G1" for f in healthy.findings)


def test_a_tool_finding_no_accelerator_on_a_listed_gb10_passes_the_gate() -> None:
    """Round 18ag (variant B, diagnose-learn-cv-v30.md): heretic-13 (G1) shows no CUDA 12 build on any line, but the
    tool finds no accelerator while nvidia-smi lists the GB10: a torch with no CUDA on a GPU host, G1 by the labelling
    rule. Gated under (A'), it is answered G1 again."""
    label, lines = _case("holdout2/heretic-13-gb10-no-accelerator-detected.yaml")
    assert label == "G1"
    d = diagnose_text("\n".join(lines))
    assert d.findings and d.findings[0].gotcha == "G1"
    assert text_features(lines, line_roles(lines))["no_cuda_torch"] == 1.0


def test_every_gate_says_why_it_held_a_gotcha_back():
    from sparkops.diagnose.learned import GATE_WHY, GATES

    assert set(GATE_WHY) == set(GATES) and all(a and b for a, b in GATE_WHY.values())


def test_a_second_finding_passes_its_own_gate():
    """Found by the session-13 review: an OOM beside a "no kernel image" line answered G3 and, second, G1 at 0.34
    with the cu130 reinstall fix, although the same kernel line alone is held back as a library gap."""
    text = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
            "RuntimeError: CUDA error: no kernel image is available for execution on the device\n")
    d = diagnose_text(text)
    assert d.findings and d.findings[0].gotcha == "G3"
    assert all(f.gotcha != "G1" for f in d.findings)
