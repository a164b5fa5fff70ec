"""A second reader for diagnose's labelled reports: how far can a careful reader of the excerpt alone get? (issue 18)

Issue 18's goal (85 % top-1) is measured against labels a first reader decided from the *whole* thread, while
`diagnose` sees only the excerpt. This study asks how much of the excerpt decides its label at all: a second reader
labels the training sets' excerpts blind (no ids, no sources, no first labels, shuffled), and the result is compared
with the first labels and with diagnose's own held-out answers on the same cases.

  python benchmarks/diagnose_second_reader.py blind --out DIR --key KEYDIR
      writes one shuffled, anonymous text file per case (rA001.txt, ...) for each reader and the key (case and first
      label per anonymous name) beside it; the seed is fixed, so the files are reproducible from the repository.
  python benchmarks/diagnose_second_reader.py score --key KEYDIR --labels DIR [--tool oof.json] [--out FILE.md]
      compares the reader's labels (DIR/A-labels.yaml, DIR/B-labels.yaml) with the first labels and, given
      `diagnose_learn.py --predictions oof.json`, with diagnose's held-out answers.

Round 18l's study: benchmarks/results/diagnose-second-reader/ (key/, A-labels.yaml, B-labels.yaml, diagnose's
held-out answers diagnose-oof-dealing0.json) and its scoring, benchmarks/results/diagnose-second-reader.md.
The readers of round 18l were two AI helper agents working from `shared/spec/gotchas.md` and the labelling rules of
`tests/diagnose/cases/README.md`, not human experts; their agreement is a measure of how decidable the excerpts are under
the written rules, not of expert consensus.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from diagnose_learn import LABELS, _pct  # noqa: E402  (the CV's labels and percentage cells)

CASES = ROOT / "tests" / "diagnose"
# the training sets of benchmarks/diagnose_learn.py's SETS, split in two readers' halves of similar size
READERS = {"A": ("cases", "holdout", "holdout2"),
           "B": ("holdout3", "holdout4", "holdout5", "holdout6", "topup8", "topup11")}
SEED = 20261204


def blind(out: Path, key: Path) -> None:
    """Anonymous, shuffled excerpts: the reader sees what diagnose sees (text and input kind), nothing else."""
    rng = random.Random(SEED)
    key.mkdir(parents=True, exist_ok=True)
    for reader, sets in READERS.items():
        cases = []
        for name in sets:
            for f in sorted((CASES / name).glob("*.yaml")):
                doc = yaml.safe_load(f.read_text(encoding="utf-8"))
                cases.append((f"{name}/{doc['id']}", doc))
        rng.shuffle(cases)
        folder = out / reader
        folder.mkdir(parents=True, exist_ok=True)
        mapping = {}
        for n, (case, doc) in enumerate(cases, 1):
            anon = f"r{reader}{n:03d}"
            (folder / f"{anon}.txt").write_text(f"# case {anon} (input_kind: {doc.get('input_kind')})\n{doc['text']}",
                                                encoding="utf-8")
            mapping[anon] = {"case": case, "label": doc["label"]}
        (key / f"{reader}.yaml").write_text(yaml.safe_dump(mapping, sort_keys=True), encoding="utf-8")
        print(f"reader {reader}: {len(cases)} cases from {', '.join(sets)}")


def load(key: Path, labels: Path) -> list[dict]:
    """One row per case: first label, second reader's answer; a case the reader skipped is counted as unlabelled."""
    rows = []
    for reader in READERS:
        mapping = yaml.safe_load((key / f"{reader}.yaml").read_text(encoding="utf-8"))
        path = labels / f"{reader}-labels.yaml"
        answers = yaml.safe_load(path.read_text(encoding="utf-8")) if path.exists() else {}
        for anon, k in sorted(mapping.items()):
            a = answers.get(anon) or {}
            label = str(a.get("label", "")).strip()
            rows.append({"anon": anon, "reader": reader, "case": k["case"], "set": k["case"].split("/")[0],
                         "gold": k["label"], "read": label if label in LABELS else None,
                         "high": str(a.get("confidence", "")).lower() == "high",
                         "second": a.get("second") if a.get("second") in LABELS else None,
                         "decidable": str(a.get("decidable", "")).lower() in ("yes", "true"),
                         "why": " ".join(str(a.get("why", "")).split())})
    return rows


def kappa(pairs: list[tuple[str, str]]) -> float:
    """Cohen's kappa: agreement beyond what the two readers' label frequencies give by chance."""
    n = len(pairs)
    if not n:
        return float("nan")
    seen = sum(a == b for a, b in pairs) / n
    fa, fb = Counter(a for a, _ in pairs), Counter(b for _, b in pairs)
    chance = sum(fa[x] * fb[x] for x in LABELS) / (n * n)
    return (seen - chance) / (1 - chance) if chance < 1 else 1.0


def score(rows: list[dict], tool: dict | None) -> str:
    done = [r for r in rows if r["read"]]
    out = ["# diagnose: a second, blind reader of the training sets' excerpts (issue 18)", "",
           f"{len(rows)} cases of the CV's training sets ({', '.join(s for v in READERS.values() for s in v)}); "
           f"{len(done)} labelled by the second reader. The first labels were decided from the whole thread; the "
           "second reader saw only the excerpt diagnose sees (anonymous, shuffled, no source). Readers: AI helper "
           "agents working from `shared/spec/gotchas.md` and the cases' labelling rules (see the script's docstring); the rules' "
           "section of case-by-case decisions was withheld because it names cases, and with it the convention that a "
           "cross-node TP hang with no diagnosis beyond a stuck rank is G10.",
           "", "## Agreement with the first labels", "",
           "| scope | cases | agree | Cohen's kappa |", "|---|---:|---:|---:|"]
    scopes = [("all", done), ("first label a gotcha", [r for r in done if r["gold"] != "none"]),
              ("first label none", [r for r in done if r["gold"] == "none"]),
              ("reader: high confidence", [r for r in done if r["high"]]),
              ("reader: low confidence", [r for r in done if not r["high"]]),
              ("reader: decidable from the excerpt", [r for r in done if r["decidable"]]),
              ("reader: not decidable from the excerpt", [r for r in done if not r["decidable"]])]
    scopes += [(f"reader {x} ({', '.join(READERS[x])})", [r for r in done if r["reader"] == x]) for x in READERS]
    for name, rs in scopes:
        # kappa needs both readers to vary: over a scope of one first label it says nothing
        k = f"{kappa([(r['gold'], r['read']) for r in rs]):.2f}" if len({r["gold"] for r in rs}) > 1 else "–"
        out.append(f"| {name} | {len(rs)} | {_pct(sum(r['read'] == r['gold'] for r in rs), len(rs))} | {k} |")
    hi = [r for r in done if r["high"] and r["read"] != "none"]
    out += ["", f"The reader's high-confidence gotcha answers match the first label in "
            f"{_pct(sum(r['read'] == r['gold'] for r in hi), len(hi))} (the issue's bar for diagnose is 90 %)."]
    out += ["", "## Per first label", "", "| first label | cases | reader agrees | reader answered this label | "
            "of which first label agrees |", "|---|---:|---:|---:|---:|"]
    for lab in LABELS:
        g = [r for r in done if r["gold"] == lab]
        a = [r for r in done if r["read"] == lab]
        if g or a:
            out.append(f"| {lab} | {len(g)} | {_pct(sum(r['read'] == lab for r in g), len(g))} | {len(a)} | "
                       f"{_pct(sum(r['gold'] == lab for r in a), len(a))} |")
    out += ["", "## Confusion (rows: first label, columns: second reader)", "",
            "| first | " + " | ".join(LABELS) + " |", "|---|" + "---|" * len(LABELS)]
    for lab in LABELS:
        cnt = Counter(r["read"] for r in done if r["gold"] == lab)
        if cnt:
            out.append(f"| {lab} | " + " | ".join(str(cnt[x]) if cnt[x] else "·" for x in LABELS) + " |")
    if tool:
        both = [r for r in done if r["case"] in tool]
        for r in both:
            r["tool"] = tool[r["case"]]["answer"]
        out += ["", "## diagnose's held-out answers on the same cases", "",
                "diagnose's answers are the out-of-fold answers of `diagnose_learn.py` (v14 protocol, dealing \"\": "
                "10 folds by source group, rules read blind, every weight fitted on the other folds).", "",
                "| scope | cases | diagnose right | second reader right |", "|---|---:|---:|---:|"]
        agree = [r for r in both if r["read"] == r["gold"]]
        for name, rs in (("all", both), ("reader agrees with the first label", agree),
                         ("reader disagrees", [r for r in both if r["read"] != r["gold"]]),
                         ("reader agrees, first label a gotcha", [r for r in agree if r["gold"] != "none"]),
                         ("reader agrees, first label none", [r for r in agree if r["gold"] == "none"])):
            out.append(f"| {name} | {len(rs)} | {_pct(sum(r['tool'] == r['gold'] for r in rs), len(rs))} | "
                       f"{_pct(sum(r['read'] == r['gold'] for r in rs), len(rs))} |")
        grid = Counter((r["tool"] == r["gold"], r["read"] == r["gold"]) for r in both)
        out += ["", f"Both right {grid[True, True]}, only diagnose {grid[True, False]}, only the reader "
                f"{grid[False, True]}, both wrong {grid[False, False]}. diagnose agrees with the second reader on "
                f"{_pct(sum(r['tool'] == r['read'] for r in both), len(both))}."]
    out += ["", "## Disagreements (for adjudication against the whole thread)", "",
            "| case | first label | second reader | conf. | decidable | reader's why |", "|---|---|---|---|---|---|"]
    for r in sorted((r for r in done if r["read"] != r["gold"]), key=lambda r: r["case"]):
        out.append(f"| {r['case']} | {r['gold']} | {r['read']} | {'high' if r['high'] else 'low'} | "
                   f"{'yes' if r['decidable'] else 'no'} | {r['why'].replace('|', '/')} |")
    missing = [r["anon"] for r in rows if not r["read"]]
    if missing:
        out += ["", f"Not labelled by the reader ({len(missing)}): " + ", ".join(missing) + "."]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("blind")
    b.add_argument("--out", type=Path, required=True)
    b.add_argument("--key", type=Path, required=True)
    s = sub.add_parser("score")
    s.add_argument("--key", type=Path, required=True)
    s.add_argument("--labels", type=Path, required=True)
    s.add_argument("--tool", type=Path, help="diagnose_learn.py --predictions output")
    s.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    if args.cmd == "blind":
        blind(args.out, args.key)
        return 0
    tool = json.loads(args.tool.read_text(encoding="utf-8")) if args.tool else None
    text = score(load(args.key, args.labels), tool)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
