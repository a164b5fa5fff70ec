"""``spark-ops explain``'s text: one catalog entry in ruff's rule-doc sections.

Standard library only, so ``explain`` can answer from the raw YAML before pydantic loads
(:mod:`sparkops.front`); the typed path (:mod:`sparkops.report.render`) re-exports the same
function, so both print the same text.
"""

from __future__ import annotations

from typing import Any


def render_gotcha(g: Any, matrix: Any = None) -> str:
    """``spark-ops explain G3``: the catalog entry (a ``Gotcha`` or anything with its fields, sub-codes
    included); G9 adds the dated bare-pip sequence from the stack matrix."""
    out = [f"{g.id} — {g.title}", "", "Symptom", f"  {g.symptom}", "", "Cause", f"  {g.cause}",
           "", "What is checked", f"  {g.check}", "", "Fix", f"  {g.fix}"]
    if g.id == "G9" and matrix is not None:
        out += ["", f"Bare-pip sequence (stack matrix v{matrix.version}, last verified "
                    f"{matrix.last_verified.isoformat()}; order and flags are load-bearing)"]
        out += [f"  {line}" for line in matrix.bare_pip_sequence]
        out += ["  then verify: python -c \"import torch; print(torch.cuda.is_available(), torch.version.cuda)\""
                "  (expect: True 13.0)"]
    if g.codes:
        out += ["", "Decisions (sub-codes; findings carry them in `code`)"]
        for code, sub in g.codes.items():
            where = f", fix runs {'in the ' if sub.where in ('container', 'target-env') else 'on the '}{sub.where}" \
                if sub.where and sub.where != "anywhere" else ""
            out.append(f"  {code} ({sub.status}{where}): {sub.line}")
    if g.known_problems:
        out += ["", "Known problems", f"  {g.known_problems}"]
    if g.references:
        out += ["", "References"] + [f"  {r}" for r in g.references]
    out += ["", f"Last verified: {g.last_verified.isoformat()}"]
    return "\n".join(out) + "\n"
