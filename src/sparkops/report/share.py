"""A bug report a user can paste into a forum or an issue (``spark-ops report``).

From an ``env-report.json`` or a facts snapshot: the verdict, the failing and warning checks with
their evidence and fixes, the versions that matter, and the file itself as an attachment. Every
string goes through the redaction pass (secrets by shape); ``redact_host`` also masks the
machine's identity: hostname, user names, home paths, private IP addresses and MAC addresses, each
replaced by a stable token (the same host is ``host-1`` everywhere in the text).
"""

from __future__ import annotations

import ipaddress
import json
import re
from pathlib import Path
from typing import Any, Literal

from sparkops.core.errors import InputError
from sparkops.facts.redact import redact_obj

Flavor = Literal["markdown", "github"]
MAX_INPUT_BYTES = 64 * 1024 * 1024
_ATTACH_MAX_CHARS = 60_000  # GitHub's comment limit is 65,536 characters


# --------------------------------------------------------------------------- host identity
_MAC = re.compile(r"(?<![0-9A-Fa-f:])(?:[0-9A-Fa-f]{2}[:-]){5}[0-9A-Fa-f]{2}(?![0-9A-Fa-f:])")
_IPV4 = re.compile(r"(?<![\d.])(?:\d{1,3}\.){3}\d{1,3}(?![\d.])")
_IPV6 = re.compile(r"(?<![0-9A-Fa-f:])(?:[0-9A-Fa-f]{1,4}:){2,7}[0-9A-Fa-f]{0,4}(?![0-9A-Fa-f:])")
_HOME = re.compile(r"(?<![\w.-])(/home/|/Users/|/var/home/)([A-Za-z0-9._-]+)")
_ROOT_HOME = re.compile(r"(?<![\w.-])/root(?=/|\b)")


class HostMasker:
    """Masks one machine's identity consistently: each distinct value gets one token."""

    def __init__(self, hostnames: list[str] | None = None, users: list[str] | None = None) -> None:
        self.tokens: dict[tuple[str, str], str] = {}
        self.counts: dict[str, int] = {}
        self.hostnames = sorted({h for h in (hostnames or []) if h and len(h) >= 2}, key=len, reverse=True)
        self.users = sorted({u for u in (users or []) if u and len(u) >= 2}, key=len, reverse=True)

    def token(self, kind: str, value: str) -> str:
        key = (kind, value.lower())
        if key not in self.tokens:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            self.tokens[key] = f"{kind}-{self.counts[kind]}"
        return self.tokens[key]

    def __call__(self, text: str) -> str:
        if not text:
            return text
        text = _MAC.sub(lambda m: self.token("mac", m.group(0).replace("-", ":")), text)
        text = _IPV4.sub(self._ipv4, text)
        text = _IPV6.sub(self._ipv6, text)
        text = _HOME.sub(lambda m: m.group(1) + self.token("user", m.group(2)), text)
        text = _ROOT_HOME.sub("/root", text)
        for host in self.hostnames:
            text = re.sub(rf"(?<![\w-]){re.escape(host)}(?![\w-])", self.token("host", host), text, flags=re.I)
            short = host.split(".")[0]
            if short != host and len(short) >= 2:
                text = re.sub(rf"(?<![\w-]){re.escape(short)}(?![\w-])", self.token("host", host), text, flags=re.I)
        for user in self.users:
            text = re.sub(rf"(?<![\w-]){re.escape(user)}(?![\w-])", self.token("user", user), text)
        return text

    def _ipv4(self, m: re.Match[str]) -> str:
        try:
            ip = ipaddress.IPv4Address(m.group(0))
        except ValueError:
            return m.group(0)
        if ip.is_private or ip.is_link_local or ip in ipaddress.IPv4Network("100.64.0.0/10"):
            if ip.is_loopback or ip.is_unspecified:
                return m.group(0)
            return self.token("ip", str(ip))
        return m.group(0)

    def _ipv6(self, m: re.Match[str]) -> str:
        try:
            ip = ipaddress.IPv6Address(m.group(0))
        except ValueError:
            return m.group(0)
        if (ip.is_private or ip.is_link_local) and not (ip.is_loopback or ip.is_unspecified):
            return self.token("ip", str(ip))
        return m.group(0)


def _walk(obj: Any, fn) -> Any:  # noqa: ANN001 - str -> str
    if isinstance(obj, str):
        return fn(obj)
    if isinstance(obj, dict):
        return {k: _walk(v, fn) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_walk(v, fn) for v in obj]
    return obj


def _identities(doc: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Hostnames and user names a document names about its own machine."""
    hosts, users = [], []
    host = doc.get("host") if isinstance(doc.get("host"), dict) else {}
    if isinstance(host.get("hostname"), str):
        hosts.append(host["hostname"])
    text = json.dumps(doc)
    users += [m.group(2) for m in _HOME.finditer(text)]
    return hosts, [u for u in users if u not in ("shared", "linuxbrew")]


# --------------------------------------------------------------------------- input
def load_source(path: Path) -> tuple[str, dict[str, Any]]:
    """("report" | "facts", the parsed document). Bounded and plain about what it refuses."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_INPUT_BYTES + 1)
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if len(data) > MAX_INPUT_BYTES:
        raise InputError(f"{path} is over the {MAX_INPUT_BYTES // (1024 * 1024)} MiB limit")
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise InputError(f"{path} is not a JSON env-report.json or facts snapshot ({type(exc).__name__})") from exc
    if isinstance(doc, dict) and "verdict" in doc and "checks" in doc:
        return "report", doc
    if isinstance(doc, dict) and "schema_version" in doc and ("host" in doc or "gpu" in doc or "probes" in doc):
        return "facts", doc
    raise InputError(f"{path} is neither an env-report.json (verdict, checks) nor a facts snapshot")


def build(path: Path, flavor: Flavor = "github", redact_host: bool = False) -> str:
    """The shareable Markdown for the file at ``path``."""
    from sparkops.facts.snapshot import load_facts
    from sparkops.knowledge import load
    from sparkops.report.build import build_report

    kind, doc = load_source(path)
    if kind == "facts":  # judged as preflight judges a snapshot with no workload (nothing to plan)
        report = build_report(load_facts(path), None, load(), facts_source=str(path)).model_dump(mode="json")
        attachment_doc = doc
    else:
        report = doc
        attachment_doc = doc
    report = redact_obj(report)
    attachment_doc = redact_obj(attachment_doc)
    masker = None
    if redact_host:
        hosts, users = _identities(attachment_doc if kind == "facts" else report)
        masker = HostMasker(hosts, users)
        report = _walk(report, masker)
        attachment_doc = _walk(attachment_doc, masker)
    text = render(report, attachment_doc, kind, flavor, facts=attachment_doc if kind == "facts" else None)
    if masker is not None:
        text = masker(text)  # a value the renderer composed (e.g. a path joined into a sentence)
    return text


# --------------------------------------------------------------------------- rendering
_ICON = {"fail": "❌", "warn": "⚠️", "unknown": "❔", "skip": "⏭️", "info": "ℹ️", "pass": "✅"}


def _cell(text: Any) -> str:
    return str(text if text is not None else "").replace("|", "\\|").replace("\n", " ")


def _versions(report: dict[str, Any], facts: dict[str, Any] | None) -> list[tuple[str, str]]:
    ident = report.get("identity") or {}
    rows = [("dgx-spark-ops", str(report.get("tool_version", ""))),
            ("platform", f"{report.get('platform', '')} {ident.get('gpu_name') or ''}".strip()),
            ("GPU capability", ".".join(str(x) for x in ident.get("capability") or []) or "-"),
            ("driver", str(ident.get("driver_version") or "-")),
            ("CUDA (driver)", str(ident.get("cuda_driver_version") or "-")),
            ("arch", str(ident.get("arch") or "-")),
            ("target python", str(report.get("target_python") or "-"))]
    if facts:
        host = facts.get("host") or {}
        osr = host.get("os_release") or {}
        if isinstance(osr, dict) and osr.get("PRETTY_NAME"):
            rows.append(("OS", str(osr["PRETTY_NAME"])))
        if isinstance(host.get("kernel"), str):
            rows.append(("kernel", host["kernel"]))
        target = facts.get("target") or {}
        torch = target.get("torch") if isinstance(target.get("torch"), dict) else {}
        if torch.get("version"):
            rows.append(("torch", f"{torch['version']} (CUDA {torch.get('cuda') or 'none'})"))
        dists = target.get("distributions") if isinstance(target.get("distributions"), dict) else {}
        for name in ("transformers", "vllm", "unsloth", "flash-attn", "bitsandbytes", "triton", "peft", "trl"):
            if isinstance(dists.get(name), str):
                rows.append((name, dists[name]))
        image = (host.get("container") or {}).get("image_hint")
        if image:
            rows.append(("container", str(image)))
    return rows


def render(report: dict[str, Any], attachment: dict[str, Any], kind: str, flavor: Flavor,
           facts: dict[str, Any] | None = None) -> str:
    """Markdown (``github`` adds a collapsible attachment) from already-redacted documents."""
    verdict = str(report.get("verdict", "unknown"))
    findings = [f for f in report.get("findings") or [] if isinstance(f, dict)]
    if not findings:  # a minimal-contract report: only "checks"
        for gid, s in (report.get("checks") or {}).items():
            status, _, summary = str(s).partition(": ")
            findings.append({"gotcha": gid, "status": "pass" if status == "pass" else status, "summary": summary})
    out = [f"## spark-ops preflight: **{verdict.upper()}**", ""]
    gen = report.get("generated_at") or ""
    out.append(f"Generated {gen} by dgx-spark-ops {report.get('tool_version', '')} from "
               f"{'a facts snapshot' if kind == 'facts' else 'env-report.json'}"
               f" ({report.get('depth', 'full')} depth). Secrets are masked (`***`).")
    out.append("")
    bad = [f for f in findings if f.get("status") in ("fail", "warn", "unknown")]
    if bad:
        out += ["### Failing and warning checks", ""]
        for f in bad:
            out.append(f"#### {_ICON.get(f.get('status'), '')} {f.get('gotcha')} {str(f.get('status')).upper()}: "
                       f"{f.get('summary', '')}")
            if f.get("detail"):
                out += ["", str(f["detail"])]
            ev = [e for e in f.get("evidence") or [] if isinstance(e, dict)]
            if ev:
                out += ["", "Evidence:", ""]
                out += [f"- `{e.get('fact')}` = `{json.dumps(e.get('value'))[:300]}`" for e in ev[:12]]
            if f.get("fix"):
                out += ["", f"Fix: {f['fix']}"]
            out.append("")
    out += ["### All checks", "", "| check | status | finding |", "|---|---|---|"]
    out += [f"| {_cell(f.get('gotcha'))} | {_ICON.get(f.get('status'), '')} {_cell(str(f.get('status')).upper())} | "
            f"{_cell(f.get('summary'))} |" for f in findings]
    out += ["", "### Versions", "", "| | |", "|---|---|"]
    out += [f"| {_cell(k)} | {_cell(v)} |" for k, v in _versions(report, facts)]
    notes = [n for n in report.get("probe_notes") or [] if isinstance(n, dict)]
    if notes:
        out += ["", "### Probe notes", ""]
        out += [f"- {n.get('name')}: {n.get('reason') or 'ok via ' + str(n.get('source'))}" for n in notes]
    body = json.dumps(attachment, indent=2, sort_keys=False)
    name = "facts.json" if kind == "facts" else "env-report.json"
    cut = ""
    if len(body) > _ATTACH_MAX_CHARS:
        body = body[:_ATTACH_MAX_CHARS]
        cut = f"\n(cut at {_ATTACH_MAX_CHARS} characters: attach the whole {name} file instead)"
    fence = "````" if "```" in body else "```"
    if flavor == "github":
        out += ["", "<details>", f"<summary>{name} (the snapshot this report judged)</summary>", "",
                f"{fence}json", body, fence, cut, "</details>"]
    else:
        out += ["", f"### Attachment: {name}", "", f"{fence}json", body, fence, cut]
    return "\n".join(out).rstrip() + "\n"
