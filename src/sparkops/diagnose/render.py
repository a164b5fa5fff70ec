"""Readable output for ``spark-ops diagnose``: per input, findings best first, then the notes."""

from __future__ import annotations

import textwrap

from sparkops.diagnose.model import Diagnosis, Finding

_WIDTH = 110


def _wrap(text: str, indent: str) -> list[str]:
    return textwrap.wrap(text, width=_WIDTH, initial_indent=indent, subsequent_indent=indent + "  ") or [indent]


def render_finding(f: Finding) -> list[str]:
    lines = [f"{f.gotcha}  {f.title}  (confidence {f.confidence:.2f})"]
    lines += _wrap(f"why: {f.why}", "  ")
    for e in f.evidence:
        lines += _wrap(f"line {e.line}: {e.text}", "  ")
        lines += _wrap(f"-> {e.why}", "      ")
    for fe in f.facts:
        lines += _wrap(f"fact {fe.fact} = {fe.value}: {fe.effect}", "  ")
    lines += _wrap(f"fix: {f.fix}", "  ")
    return lines


def render_diagnosis(d: Diagnosis, header: bool = True) -> str:
    lines = [f"== {d.file}"] if header else []
    if d.error is not None:
        lines.append(f"could not read: {d.error}")
        return "\n".join(lines) + "\n"
    if d.abstained:
        lines += _wrap(d.abstain_reason or "not one of the ten, or not enough to tell", "")
        for f in d.candidates:
            lines.append(f"  candidate {f.gotcha}  {f.title}  (p = {f.confidence:.2f})")
            for e in f.evidence[:2]:
                lines += _wrap(f"line {e.line}: {e.text}", "    ")
        if d.decide:
            lines.append("what would decide it:")
            for x in d.decide:
                lines += _wrap(f"{x.gotcha}: {x.command}" + (f"  (fact {x.fact})" if x.fact else ""), "  ")
                lines += _wrap(f"-> {x.why}", "      ")
    elif not d.findings:
        lines.append("none of the ten: no G1-G10 symptom found")
    for i, f in enumerate(d.findings):
        if i:
            lines.append("")
        lines += render_finding(f)
    if d.notes:
        lines.append("notes:")
        for n in d.notes:
            lines += _wrap(f"- {n}", "  ")
    return "\n".join(lines) + "\n"


def render_all(diagnoses: list[Diagnosis]) -> str:
    many = len(diagnoses) > 1
    return "\n".join(render_diagnosis(d, header=many or d.file != "-") for d in diagnoses)
