#!/usr/bin/env python3
"""Leave-one-group-out CV of the fitted non-KV terms of vLLM's KV budget (round 20al, issue 20).

Usage: python benchmarks/serve_learned_terms_cv.py [--groups-only] [--out FILE]
Protocol: benchmarks/results/serve-learned-terms-v1.md. Groups records by source (group_of), holds out one group at a
time, fits each term's one number on the others (a median of the residual non-KV memory) and scores the held-out
group's vLLM rows with serve_accuracy.evaluate(), the unchanged planner scored in the same run. Pure CPU.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from contextlib import contextmanager
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import serve_accuracy as sa  # noqa: E402

GROUPS_OUT = ROOT / "benchmarks" / "results" / "serve-learned-terms-groups.yaml"
ENGINE_REPOS = ("vllm-project/", "pytorch/pytorch", "sgl-project/", "ggml-org/")
# handles that are one author or one notes set (rule 5 of the protocol), each with its reason
MERGES = {
    "gb10": ("wsl", "the GB10 docker-compose notes say 'the same user's arm64' setup as the WSL2 docker-compose notes"),
    "kr": ("llmso", "vllm-kr-lab3 cites the same code-index file (61815222665) as the llmso-orca3 records"),
    "orca3": ("llmso", "the orca3/llm-model-inference Korean notes are the course the llmso-orca3 records follow"),
    "twogpu": ("kubesimplify", "'Running a single LLM across two GPUs with vLLM' and 'Running a big LLM across multiple "
                               "GPUs with vLLM': one series, likely one author (merging is the conservative choice)"),
    "gh:orca3": ("llmso", "the llmso-orca3 records' source names the orca3/llm-model-inference course notebooks (the "
                          "course's repository, not the author's); the same code-index file as the llmso notes"),
    "recon": ("gh:alexostapiuk11", "alexostapiuk11/coldstart-recon-worker, the same repository as the a5 records"),
    "a5": ("gh:alexostapiuk11", "alexostapiuk11/coldstart-recon-worker"),
}
# record-level exceptions to the handle rule: id -> (group, reason)
BY_ID = {
    "vllm-llmd-qwen25-1.5b-instruct-gb10-kvbytes6g-u010-8k": (
        "gh:gyliu513", "an llm-d demo on a DGX Spark, like gyliu513/langX101's llm-d notes (merging is conservative)"),
    "vllm-llmd-qwen3-0.6b-rtx3050-u060-2k-eager": (
        "llmd-study-kr", "a Korean study group's llm-d notes (RTX 3050): not the gyliu513 notes that share the handle"),
}


def group_of(rec: dict) -> str:
    """The source group of a record (protocol rules 1-5)."""
    rid, src = rec["id"], str(rec.get("source") or "")
    if rid in BY_ID:
        return BY_ID[rid][0]
    m = re.search(r"github\.com/([^/\s]+)/([^/\s]+)(?:/(?:issues|pull|discussions)/(\d+))?", src)
    w = re.search(r"https?://([^/\s]+)", src)
    if m:
        repo = f"{m.group(1)}/{m.group(2)}"
        key = f"gh:{repo}#{m.group(3)}" if repo.startswith(ENGINE_REPOS) and m.group(3) else f"gh:{m.group(1)}"
    elif w:
        key = f"web:{w.group(1)}"
    else:
        key = rid.split("-")[1]
    return MERGES[key][0] if key in MERGES else key


def mapping(records: list[dict]) -> dict:
    groups: dict[str, list[str]] = {}
    for r in records:
        if r["engine"] == "vllm":
            groups.setdefault(group_of(r), []).append(r["id"])
    return {"rule": "benchmarks/results/serve-learned-terms-v1.md (Groups); group_of() in benchmarks/serve_learned_terms_cv.py",
            "merges": {k: {"into": v[0], "why": v[1]} for k, v in MERGES.items()},
            "by_id": {k: {"group": v[0], "why": v[1]} for k, v in BY_ID.items()},
            "groups": dict(sorted(groups.items()))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups-only", action="store_true", help="write the group mapping and stop (no count)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    records = yaml.safe_load(sa.LOGS.read_text())["records"]
    GROUPS_OUT.write_text(yaml.safe_dump(mapping(records), sort_keys=False, allow_unicode=True, width=120))
    if args.groups_only:
        return 0
    return run_cv(records, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
