"""Secrets never leave, in any position (facts, reports, evidence, share reports), and the share-safe
report masks the machine's identity consistently (issue 17, items 10 and 11)."""

from __future__ import annotations

import copy
import json
import string
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparkops import api
from sparkops.diagnose import diagnose_text
from sparkops.facts.redact import MASK, redact_obj, redact_text
from sparkops.facts.snapshot import load_facts
from sparkops.report.share import HostMasker, build

FIXTURES = Path(__file__).parent.parent / "fixtures" / "facts"
BLOCKED = FIXTURES / "gb10_bare_pip_cu128.json"
DOC = json.loads(BLOCKED.read_text())


@pytest.mark.parametrize("line,secret", [
    ("python train.py --wandb-key WANDBSECRET123", "WANDBSECRET123"),
    ("server --key KEYSECRET987 --port 8000", "KEYSECRET987"),
    ("curl -u admin:CURLPASS42 https://api.internal", "CURLPASS42"),
    ("mysql -h db -uroot -pMYSQLPASS77 train", "MYSQLPASS77"),
    ("etl --db-pass DBPASS5521", "DBPASS5521"),
    ("tensor_parallel_size: $(curl -u admin:SUBSTPASS9 https://vault/tp)", "SUBSTPASS9"),
    ("tp=$(vault kv get -field=tp secret/ghp_abcdefghijklmnopqrstuvwxyz0123)", "ghp_abcdefghijklmnopqrstuvwxyz0123"),
    ("OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuvwxyz0123", "abcdefghijklmnopqrstuvwxyz0123"),
    ("git remote add origin bob:GITPASS31@git.internal/x.git", "GITPASS31"),
    ("SESSION=Zq8LmN3pRt7VwX2yBc5DfG9h", "Zq8LmN3pRt7VwX2yBc5DfG9h"),
])
def test_the_issue_leaks_are_masked(line, secret):
    out = redact_text(line)
    assert secret not in out and MASK in out
    assert redact_text(out) == out


@pytest.mark.parametrize("line", ["--tokenizer meta-llama/Llama-3.1-8B --max-tokens 4096", "--auth-type basic",
                                  "--num-key-value-heads 8", "sha256:0123456789abcdef0123456789abcdef",
                                  "torch 2.9.0a0+50eac811a6.nv25.09", "CUDA_VISIBLE_DEVICES=0,1",
                                  "mail root@localhost", "/home/spark/venv/bin/python"])
def test_ordinary_text_is_left_alone(line):
    assert redact_text(line) == line


def test_diagnose_does_not_echo_a_key_in_its_evidence():
    log = ("OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuvwxyz0123 python train.py\n"
           "ImportError: libcudart.so.12: cannot open shared object file: No such file or directory "
           "--hf-token hf_abcdefghijklmnopqrstuvwxyz0123\n")
    out = diagnose_text(log).model_dump_json()
    assert "abcdefghijklmnopqrstuvwxyz0123" not in out


# ---- property: a generated secret in every string position never appears in any output
_SECRET = st.text(alphabet=string.ascii_letters + string.digits, min_size=12, max_size=24).filter(
    lambda s: any(c.isdigit() for c in s) and any(c.isalpha() for c in s))
_CARRIERS = [
    "--api-key {s}", "--wandb-key {s}", "--db-pass {s}", "--client-secret={s}", "-u admin:{s}",
    "mysql -p{s}", "HF_TOKEN={s}", "https://user:{s}@host.example/x", "Authorization: Bearer {s}",
    "password: {s}", "$(curl -u root:{s} https://x)", "db.password={s}",
]


def _places(doc: dict, text: str) -> dict:
    doc = copy.deepcopy(doc)
    doc["host"]["env"]["NCCL_DEBUG_FILE"] = text
    doc["processes"]["processes"] = [{"pid": 4242, "name": "python", "kind": "trainer", "cmdline": text,
                                      "argv": ["python", "train.py", text], "rss_bytes": 1 << 30, "state": "running"}]
    doc["configs"]["hits"] = [{"file": "/work/run.yaml", "line": 3, "key": "tensor_parallel_size", "value": text}]
    doc["probes"]["gpu"]["reason"] = text
    doc["target"]["python"] = "/usr/bin/python3 " + text
    return doc


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(secret=_SECRET, carrier=st.sampled_from(_CARRIERS))
def test_a_generated_secret_never_leaves(tmp_path, secret, carrier):
    text = carrier.format(s=secret)
    f = tmp_path / "facts.json"
    f.write_text(json.dumps(_places(DOC, text)))
    facts = load_facts(f)
    assert secret not in facts.model_dump_json()
    rep = api.preflight(facts=facts)
    assert secret not in rep.model_dump_json()
    assert secret not in build(f, "github")
    assert secret not in json.dumps(redact_obj({"k": [text, {"x": text}]}))


# ---- item 11: the share-safe report
def test_share_report_from_facts_has_verdict_failures_versions_and_attachment(tmp_path):
    md = build(BLOCKED, "github")
    assert md.startswith("## spark-ops preflight: **BLOCKED**")
    assert "❌ G1 FAIL" in md and "Fix:" in md and "Evidence:" in md
    assert "| torch | 2.9.1+cu128 (CUDA 12.8) |" in md
    assert "<details>" in md and '"schema_version": 1' in md
    plain = build(BLOCKED, "markdown")
    assert "<details>" not in plain and "### Attachment: facts.json" in plain


def test_share_report_from_an_env_report(tmp_path):
    rep = tmp_path / "env-report.json"
    p = subprocess.run([sys.executable, "-m", "sparkops", "preflight", "--facts", str(BLOCKED), "--report", str(rep)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    out = subprocess.run([sys.executable, "-m", "sparkops", "report", "--from", str(rep), "--format", "markdown"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "**BLOCKED**" in out.stdout and "### Attachment: env-report.json" in out.stdout


def test_redact_host_masks_identity_consistently(tmp_path):
    doc = copy.deepcopy(DOC)
    doc["host"]["hostname"] = "spark-alice.lab.example"
    doc["host"]["env"]["MASTER_ADDR"] = "192.168.7.21"
    doc["host"]["env"]["NCCL_SOCKET_IFNAME"] = "enP7s7 mac 4c:bb:47:2a:91:0e via 10.0.0.5 and 8.8.8.8"
    doc["target"]["python"] = "/home/alice/venv/bin/python"
    doc["probes"]["gpu"]["reason"] = "spark-alice: /home/alice/x at 192.168.7.21 (4C-BB-47-2A-91-0E)"
    f = tmp_path / "facts.json"
    f.write_text(json.dumps(doc))
    md = build(f, "github", redact_host=True)
    for leaked in ("spark-alice", "alice", "192.168.7.21", "10.0.0.5", "4c:bb:47", "4C-BB-47"):
        assert leaked not in md, leaked
    assert "8.8.8.8" in md  # a public address is not the user's machine
    masker = HostMasker(["spark-alice.lab.example"], ["alice"])
    assert masker("spark-alice") == masker("SPARK-ALICE.lab.example") == "host-1"
    assert masker("192.168.7.21 192.168.7.21") == "ip-1 ip-1"
    assert "host-1" in md and "user-1" in md and "ip-1" in md and "mac-1" in md


@pytest.mark.parametrize("content", [b"", b"[]", b"\xff\xfe", b'{"a": 1}', b"[" * 100_000])
def test_report_refuses_what_it_cannot_use_plainly(tmp_path, content):
    f = tmp_path / "x.json"
    f.write_bytes(content)
    p = subprocess.run([sys.executable, "-m", "sparkops", "report", "--from", str(f)], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 3 and p.stderr.startswith("spark-ops: ") and "Traceback" not in p.stderr
