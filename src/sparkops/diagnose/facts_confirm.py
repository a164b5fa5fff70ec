"""Facts that confirm or rule out what the text suggests (``--facts FILE`` or ``--live``).

Pure: a snapshot in, per-gotcha effects and ``fact.*`` signals out. The effects are the decisions of
the gotchas' owners (``sparkops.checks``, the same functions preflight runs), never re-derived here:
a fail/warn confirms its gotcha, and the few passes the catalog marks ``diagnose: rules-out`` exclude
it. State that drifts between the failure and the collection (free memory, temperature) may
confirm, never rule out. The signals are plain readings the context rules in symptoms.yaml may use
(a CUDA 13 torch turns an `undefined symbol` from G1 into drift, G9).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sparkops.checks import container
from sparkops.core.findings import Finding, Status
from sparkops.diagnose.model import FactEffect
from sparkops.facts.model import Facts
from sparkops.facts.reading import known
from sparkops.knowledge import Knowledge
from sparkops.knowledge import load as load_catalog


@dataclass
class FactJudgement:
    signals: set[str] = field(default_factory=set)
    effects: dict[str, list[FactEffect]] = field(default_factory=dict)
    hints: list[tuple[str, str]] = field(default_factory=list)  # (gotcha, what the facts say on their own)

    def add(self, gotcha: str, fact: str, value: object, effect: str) -> None:
        self.effects.setdefault(gotcha, []).append(FactEffect(fact=fact, value=value, effect=effect))


def _torch_cuda(facts: Facts) -> tuple[str, object, bool] | None:
    """(fact path, torch.version.cuda, torch present) from the live probe, else from torch's files."""
    live = facts.target.live
    if known(live) and live.import_ok and live.version:
        return "target.live.cuda", live.cuda, True
    torch = facts.target.torch
    if known(torch):
        return "target.torch.cuda", torch.cuda, True
    return None


def effect_of(finding: Finding, kb: Knowledge) -> str:
    """What an owner's decision means for a diagnosis: "confirms", "rules-out" or "" (says nothing)."""
    if not finding.code or finding.code == "internal-error":
        return ""
    declared = kb.subcode(finding.code).diagnose
    if declared:
        return "" if declared == "none" else declared
    return "confirms" if finding.status in (Status.fail, Status.warn) else ""


def judge(facts: Facts, catalog: Knowledge | None = None) -> FactJudgement:
    """The gotchas' owners judge the snapshot (the same functions preflight runs); their decisions
    confirm or rule out what the text suggests. The ``fact.*`` signals are plain readings that the
    context rules in symptoms.yaml may use."""
    from sparkops.checks import judge as judge_facts

    kb = catalog or load_catalog()
    out = FactJudgement()
    findings = judge_facts(facts, kb).findings
    for f in findings:
        if f.gotcha == "identity":
            continue
        effect = effect_of(f, kb)
        if not effect:
            continue
        out.add(f.gotcha, f.code, f.summary, effect)
        if effect == "confirms":
            out.hints.append((f.gotcha, f"facts: {f.summary} — {f.gotcha} ({f.code})"))
    _signals(facts, out)
    return out


def _signals(facts: Facts, out: FactJudgement) -> None:
    """Readings the symptom rules may condition on (not decisions: those are the owners')."""
    t = facts.target
    tc = _torch_cuda(facts)
    if tc is not None:
        cuda = tc[1]
        if cuda is None:
            out.signals.add("fact.torch-cpu")
        elif str(cuda).split(".")[0] in {"10", "11", "12"}:
            out.signals.add("fact.torch-cuda12")
        elif str(cuda).startswith("13"):
            out.signals.add("fact.torch-cuda13")
    if known(t.extensions) and any(n.endswith((".so.12", ".so.11")) for ext in t.extensions for n in ext.needed):
        out.signals.add("fact.extension-needs-cuda12")
    dists = t.distributions if known(t.distributions) else None
    if dists is not None and (dists.get("flash-attn") or dists.get("flash_attn")):
        out.signals.add("fact.flash-attn-installed")
    if "G6" in out.effects and any(e.effect == "confirms" for e in out.effects["G6"]):
        out.signals.add("fact.heavy-neighbour")
    ct = container.classify(facts.host.container)
    if known(ct.image_kind) and ct.image_kind in ("ngc-pytorch", "unsloth"):
        out.signals.add("fact.in-container")
    elif not ct.markers and t.env.kind in ("venv", "uv", "conda"):
        out.signals.add("fact.bare-env")
    if any(h.kind == "tensor_parallel" and h.value.strip().isdigit() and int(h.value) > 1 for h in facts.configs.hits):
        out.signals.add("fact.tp-config")
    ws, lws = facts.host.env.get("WORLD_SIZE", ""), facts.host.env.get("LOCAL_WORLD_SIZE", "")
    if ws.isdigit() and lws.isdigit() and int(ws) > int(lws):
        out.signals.add("fact.multi-node")
