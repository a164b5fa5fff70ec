#!/usr/bin/env python3
"""Train and measure diagnose's learned decision layer (sparkops/diagnose/learned.py) under grouped cross-validation.

Usage:
  python benchmarks/diagnose_learn.py [--sets cases,holdout,...] [--folds 10] [--out FILE] [--write]

What it does:
  1. reads every labelled case of the sets with the rules version that had NOT seen that set (diagnose_cv.BLIND_RULES:
     cases by v1 ... holdout3 by v4; holdout4, holdout5 and holdout6 were never used to write a rule), and turns
     the rules' candidates and the text into features (learned.py);
  2. grouped cross-validation by source (a GitHub repository, the NVIDIA forum, a web site): the groups are dealt
     into ``--folds`` folds; for each fold a conditional-logit model is fitted on the other folds' groups only, its
     answer bar (the probability under which it says "none") is chosen by an inner grouped cross-validation on those
     same training groups, and the fold's cases are predicted; no model or bar ever sees its own group;
  3. reports the mean top-1 over held-out groups (every group weighs the same) and pooled, next to the rules-only
     answer (the shipped v6 behaviour) on the same cases, the precision of high-confidence answers (p >= 0.8), the
     reliability curve, per-set and per-label tables and the confusion matrix;
  4. ``--write``: fits the model on every set, chooses the bar by grouped cross-validation on all of them, and rewrites
     src/sparkops/knowledge/diagnose_model.yaml (deterministic: same data, same file).

What is learned: one weight per feature, one prior per gotcha (learned.CANDIDATE_FEATURES, NONE_FEATURES), and the
answer bar. L2-regularised, fitted by Newton's method in pure Python.
A case whose label is not among the rules' candidates is trained as "none" (none of these candidates is right): the
model learns when the rules' best guess is not to be trusted, which is what the abstention needs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from diagnose_cv import BLIND_RULES, blind_kb, load_sets  # noqa: E402

from sparkops.diagnose.learned import (  # noqa: E402
    CANDIDATE_FEATURES,
    NONE,
    NONE_FEATURES,
    candidate_features,
    ceiling,
    failure_tokens,
    text_features,
    text_similarity,
)
from sparkops.diagnose.matcher import candidates, match  # noqa: E402
from sparkops.diagnose.rules import GOTCHAS, load  # noqa: E402
from sparkops.diagnose.text import from_text  # noqa: E402

SETS = ("cases", "holdout", "holdout2", "holdout3", "holdout4", "holdout5", "holdout6", "topup8", "topup11")
# the sets no rule was written on before issue 18's third session (blind protocol: read by v7, which had not seen
# them; with --rules current they are in-sample: v8's rules were widened on their unreachable cases)
# topup11 (issue 18, eighth round): a training top-up no rule was written on, read by today's rules (v9), which had not seen it
NEVER_TUNED = ("holdout4", "holdout5", "holdout6", "topup8", "topup11")
LABELS = (*GOTCHAS, NONE)
FAMILIES = {"G3": ["memory"], "G4": ["thermal"], "G5": ["speed", "bandwidth"], "G6": ["memory"],
            "G7": ["speed"], "G10": ["speed", "bandwidth"]}
PARAMS = tuple(["c." + k for k in CANDIDATE_FEATURES] + ["p." + g for g in GOTCHAS]
               + ["n." + k for k in NONE_FEATURES] + ["a." + g for g in GOTCHAS] + ["t.text", "t.only"])
INDEX = {k: i for i, k in enumerate(PARAMS)}
L2 = 1.0
VETOS = (0.5, 0.6, 0.7, 0.8, 0.9, 1.01)  # 1.01: never veto
PROMOTES = (0.4, 0.5, 0.6, 0.7, 1.01)  # 1.01: never promote
POLICY = "learned"  # "learned": the model decides; "hybrid": the rules decide, the model vetoes or promotes
HIGH = 0.8
BINS = (0.0, 0.2, 0.4, 0.6, 0.8, 0.9, 1.0001)
SECOND_AT = 0.3
G10 = "off"  # round 18z: "setup": one more "none" feature n.setup_fault (learned.setup_fault); "gate": a G10 answer
# needs learned.tp_failure (a TP-specific failure), else the best other candidate over the bar, or none;
# "gate2" (round 18ab, B'): the same gate, where learned.tp_hang (TP > 1 across nodes and a hang) also counts
G1 = "off"  # round 18ac: "gate": a G1 answer needs learned.cuda_mismatch (a line shows a CUDA major-version mismatch),
# else the best other candidate over the bar, or none; "gap": one more "none" feature n.kernel_gap (learned.kernel_gap
# without learned.cuda_mismatch: a missing SM12x kernel with no CUDA major-version mismatch)
SECOND = "p"  # "p": a second gotcha is offered when its probability reaches SECOND_AT (what diagnose does);
# "failure": also when it has failure-line evidence of its own (--second failure; tried and dropped, results v12)
SEVERAL_AT = 0.8  # symptoms.yaml scoring.calibration.several_at: two strong problems on failure lines are both named


# --- features -------------------------------------------------------------------------------------------------------

RULES = "blind"  # "blind": each set read by the rules that had not seen it; "current": every set by today's rules


_CACHED = ("labels", "rows", "rules", "target", "strong", "cap", "tokens", "tokens_fp", "tokens_all",
           "setup_fault", "tp_failure", "tp_hang", "cuda_mismatch", "kernel_gap", "wrong_cuda", "no_cuda_torch",
           "cuda13_needed")


def featurized_cases(sets: list[str], cache: Path | None = None, *, write_cache: bool = False) -> list[dict]:
    """The labelled sets' cases with their features (read from ``cache`` when it exists, else computed and, with
    ``write_cache``, saved there) and the pristine rows the CV restores per fold (rows0 / labels0 / cap0): the one
    setup every CV script starts from."""
    cases = load_sets(sets)
    if cache and cache.exists():
        feats = json.loads(cache.read_text())
        for c in cases:
            c.update(feats[c["set"] + "/" + c["id"]])
    else:
        featurize(cases)
        if cache and write_cache:
            cache.write_text(json.dumps({c["set"] + "/" + c["id"]: {k: c[k] for k in _CACHED} for c in cases}))
    for c in cases:
        c["rows0"], c["labels0"], c["cap0"] = c["rows"], c["labels"], c["cap"]
    return cases


def featurize(cases: list[dict]) -> None:
    """Adds to each case: its candidates' labels, their sparse feature rows and the "none" row, and the rules'
    own answer (v6: the top candidate over the rules' threshold, else none)."""
    kb = load()
    kbs: dict[str, object] = {}
    for c in cases:
        if c["set"] not in kbs:
            kbs[c["set"]] = blind_kb(c["set"], kb) if BLIND_RULES.get(c["set"]) and RULES == "blind" else kb
        k = kbs[c["set"]]
        inp = from_text(c["text"], c["id"], k.text_limits)
        res = match(inp, k)
        cands = candidates(res)
        text = text_features(inp.lines, res.roles)
        rows = []
        for cand, f in zip(cands, candidate_features(cands, text, FAMILIES), strict=True):
            row = [(INDEX["c." + name], v) for name, v in f.items() if v]
            row.append((INDEX["p." + cand.gotcha], 1.0))
            if f["anchored"]:
                row.append((INDEX["a." + cand.gotcha], 1.0))
            rows.append(row)
        rows.append([(INDEX["n." + name], text[name]) for name in NONE_FEATURES if text.get(name)])
        c["cap"] = {x.gotcha: ceiling(x, text)[0] for x in cands}  # learned.ceiling, as diagnose applies it
        c["labels"] = [x.gotcha for x in cands] + [NONE]
        c["rows"] = rows
        c["rules"] = res.scored[0].gotcha if res.scored else NONE
        c["strong"] = [x.gotcha for x in res.scored + res.below if x.confidence >= SEVERAL_AT and x.failure_evidence]
        c["target"] = c["labels"].index(c["label"]) if c["label"] in c["labels"] else len(cands)
        c["tokens"] = sorted(failure_tokens(inp.lines, res.roles))
        c["tokens_fp"] = sorted(failure_tokens(inp.lines, res.roles, ("failure", "plain")))
        c["tokens_all"] = sorted(failure_tokens(inp.lines, res.roles, ("failure", "plain", "context", "quoted")))
        c["setup_fault"], c["tp_failure"] = text["setup_fault"], text["tp_failure"]  # round 18z readings
        c["cuda_mismatch"], c["kernel_gap"] = text["cuda_mismatch"], text["kernel_gap"]  # round 18ac readings
        c["wrong_cuda"] = text["wrong_cuda"]
        c["no_cuda_torch"], c["cuda13_needed"] = text["no_cuda_torch"], text["cuda13_needed"]  # round 18ag readings
        c["tp_hang"] = text["tp_hang"]  # round 18ab reading


# --- the text layer (naive Bayes over the failure lines' words, fitted on training groups only) ----------------------

TEXT = "rocchio"  # "off": the v9 layer; "nb": one more candidate feature, the naive Bayes log-odds of the failure words
TEXT_ONLY = True  # a gotcha the text speaks for but no rule found becomes a candidate (t.only)
TEXT_ONLY_AT = 0.0  # ... when its text score is over this (closer to its reports than to the "none" ones)
ALPHA = 0.5
MIN_GROUPS = 2  # a word is kept only when reports of at least this many source groups use it
TEXT_FOLDS = 5
PRUNE = 0.04  # centroid weights under this are dropped (a smaller weights file)
SCALE = 10.0
SALT = ""  # how the groups are dealt into the outer folds ("" : the v9 dealing)
TOKENS = "tokens_fp"  # which lines' words: "tokens" (failure lines), "tokens_fp" (+ plain), "tokens_all"


def fit_text(train: list[dict]) -> tuple[dict[str, list[float]], list[float], list[float]]:
    """Naive Bayes counts over ``train``: per kept token, the reports of each label holding it."""
    k = len(LABELS)
    idx = {lab: j for j, lab in enumerate(LABELS)}
    counts: dict[str, list[float]] = {}
    groups: dict[str, set[str]] = defaultdict(set)
    docs = [0.0] * k
    for c in train:
        j = idx[c["label"]]
        docs[j] += 1
        for t in c[TOKENS]:
            counts.setdefault(t, [0.0] * k)[j] += 1
            groups[t].add(c["group"])
    vocab = {t: row for t, row in counts.items() if len(groups[t]) >= MIN_GROUPS}
    totals = [sum(row[j] for row in vocab.values()) for j in range(k)]
    return vocab, docs, totals


def fit_rocchio(train: list[dict]) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Per label, the unit centroid of its reports' unit tf-idf vectors (binary words; idf over ``train``)."""
    groups: dict[str, set[str]] = defaultdict(set)
    df: dict[str, int] = defaultdict(int)
    for c in train:
        for t in c[TOKENS]:
            groups[t].add(c["group"])
            df[t] += 1
    n = len(train)
    idf = {t: math.log(n / df[t]) for t in groups if len(groups[t]) >= MIN_GROUPS}
    cent: dict[str, dict[str, float]] = {lab: defaultdict(float) for lab in LABELS}
    for c in train:
        v = {t: idf[t] for t in c[TOKENS] if t in idf}
        z = math.sqrt(sum(x * x for x in v.values())) or 1.0
        for t, x in v.items():
            cent[c["label"]][t] += x / z
    out = {}
    for lab, vec in cent.items():
        z = math.sqrt(sum(x * x for x in vec.values())) or 1.0
        out[lab] = {t: x / z for t, x in vec.items() if x / z >= PRUNE}
    used = set().union(*out.values())  # the words the shipped layer knows: a report is normed over these only
    return {t: v for t, v in idf.items() if t in used}, out


def text_log_odds(tokens: frozenset[str] | set[str], vocab: Mapping[str, Sequence[float]], docs: Sequence[float],
                  totals: Sequence[float], labels: Sequence[str], alpha: float) -> dict[str, float]:
    """The naive Bayes variant of the text layer (``--text nb``: tried and dropped, results v10). Per gotcha: the naive Bayes log-odds of that label against "none" from the tokens the model knows, divided by
    the square root of how many it knows (long reports are not more certain for being long). ``labels`` ends with
    "none"; ``docs`` (reports per label), ``totals`` (token occurrences per label) and each vocab row follow it."""
    known = [vocab[t] for t in tokens if t in vocab]
    v = len(vocab)
    k = len(labels)
    logp = [math.log(max(docs[j], 0.5)) for j in range(k)]
    for row in known:
        for j in range(k):
            logp[j] += math.log((row[j] + alpha) / (totals[j] + alpha * v))
    scale = math.sqrt(max(len(known), 1))
    n = k - 1  # "none" is last
    return {labels[j]: (logp[j] - logp[n]) / scale for j in range(n)}


def text_scores(c: dict, model) -> dict[str, float]:
    if TEXT == "rocchio":
        idf, cent = model
        sims = text_similarity(frozenset(c[TOKENS]), idf, cent)
        return {g: SCALE * (sims[g] - sims[NONE]) for g in GOTCHAS}
    vocab, docs, totals = model
    return text_log_odds(frozenset(c[TOKENS]), vocab, docs, totals, LABELS, ALPHA)


def attach(c: dict, scores: dict[str, float] | None) -> None:
    """The case's rows, labels, target and caps with the text layer's feature (or without it: scores None)."""
    rows = [list(r) for r in c["rows0"][:-1]]
    labels = list(c["labels0"][:-1])
    cap = dict(c["cap0"])
    if scores is not None:
        for g, row in zip(labels, rows, strict=True):
            row.append((INDEX["t.text"], scores[g]))
        if TEXT_ONLY:
            for g in GOTCHAS:
                if g not in labels and scores[g] > TEXT_ONLY_AT:
                    labels.append(g)
                    rows.append([(INDEX["t.text"], scores[g]), (INDEX["t.only"], 1.0)])
                    cap[g] = 0.79  # no rule evidence to show: never high confidence (learned.CEILING)
    none_row = list(c["rows0"][-1])
    if G10 == "setup" and c.get("setup_fault"):
        none_row.append((INDEX["n.setup_fault"], 1.0))
    if G1 == "gap" and c.get("kernel_gap") and not c.get("cuda_mismatch"):
        none_row.append((INDEX["n.kernel_gap"], 1.0))
    rows.append(none_row)
    labels.append(NONE)
    c["rows_nt"], c["labels_nt"] = c["rows0"], c["labels0"]
    c["rows"], c["labels"], c["cap"] = rows, labels, cap
    c["target"] = labels.index(c["label"]) if c["label"] in labels else len(labels) - 1


def attach_oof(train: list[dict], folds: int = TEXT_FOLDS) -> None:
    """Text features for training cases, each from a model that did not see its group (no leak into the logit)."""
    if TEXT == "off":
        for c in train:
            attach(c, None)
        return
    for k in range(folds):
        inner = [c for c in train if _fold_of(c["group"], folds, "text") != k]
        held = [c for c in train if _fold_of(c["group"], folds, "text") == k]
        if held:
            m = fit_rocchio(inner) if TEXT == "rocchio" else fit_text(inner)
            for c in held:
                attach(c, text_scores(c, m))


def attach_fitted(test: list[dict], train: list[dict]) -> None:
    if TEXT == "off":
        for c in test:
            attach(c, None)
        return
    m = fit_rocchio(train) if TEXT == "rocchio" else fit_text(train)
    for c in test:
        attach(c, text_scores(c, m))


# --- the conditional logit -----------------------------------------------------------------------------------------

def _probs(w: list[float], rows: list[list[tuple[int, float]]]) -> list[float]:
    us = [sum(w[i] * v for i, v in r) for r in rows]
    top = max(us)
    ex = [math.exp(max(u - top, -60.0)) for u in us]
    z = sum(ex)
    return [e / z for e in ex]


def fit(cases: list[dict], l2: float = L2, iters: int = 25) -> list[float]:
    """Newton's method on the L2-regularised conditional log-likelihood (strictly convex: one optimum)."""
    d = len(PARAMS)
    w = [0.0] * d
    for _ in range(iters):
        grad = [l2 * x for x in w]
        hess = [[0.0] * d for _ in range(d)]
        for i in range(d):
            hess[i][i] = l2
        for c in cases:
            p = _probs(w, c["rows"])
            mu: dict[int, float] = defaultdict(float)
            for pc, row in zip(p, c["rows"], strict=True):
                for i, v in row:
                    mu[i] += pc * v
            for i, v in c["rows"][c["target"]]:
                grad[i] -= v
            for i, v in mu.items():
                grad[i] += v
            for pc, row in zip(p, c["rows"], strict=True):
                if pc < 1e-12:
                    continue
                for i, vi in row:
                    hi = hess[i]
                    for j, vj in row:
                        hi[j] += pc * vi * vj
            items = list(mu.items())
            for i, vi in items:
                hi = hess[i]
                for j, vj in items:
                    hi[j] -= vi * vj
        step = _solve(hess, grad)
        w = [a - b for a, b in zip(w, step, strict=True)]
        if max(abs(s) for s in step) < 1e-7:
            break
    return w


def _solve(a: list[list[float]], b: list[float]) -> list[float]:
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for col in range(n):
        piv = max(range(col, n), key=lambda r: abs(m[r][col]))
        m[col], m[piv] = m[piv], m[col]
        if abs(m[col][col]) < 1e-12:
            m[col][col] = 1e-12
        pc = m[col]
        for r in range(n):
            if r != col and m[r][col]:
                f = m[r][col] / pc[col]
                row = m[r]
                for k in range(col, n + 1):
                    row[k] -= f * pc[k]
    return [m[i][n] / m[i][i] for i in range(n)]


def decide(w: list[float], c: dict, bar: tuple[float, float]) -> tuple[str, float, str, float]:
    """(answer, its probability, second label, its probability) under the hybrid policy: the rules' own answer
    stands unless the model puts "none" at or above ``veto`` (then none); where the rules answer none, the model's
    best gotcha is answered when its probability reaches ``promote``."""
    veto, promote = bar
    p = _probs(w, c["rows"])
    pr = dict(zip(c["labels"], p, strict=True))
    gotchas = sorted((i for i in range(len(p)) if c["labels"][i] != NONE), key=lambda i: -p[i])
    if POLICY == "learned" and len(c.get("strong", [])) >= 2:  # several clear problems: all named (diagnose)
        label = max(c["strong"], key=lambda g: pr[g])
    elif POLICY == "learned":  # the most likely of the candidates and none; a gotcha needs p >= promote
        best = max(range(len(p)), key=lambda i: p[i])
        label = c["labels"][best] if c["labels"][best] != NONE and p[best] >= promote else NONE
        tp_own = c.get("tp_failure") or (G10 == "gate2" and c.get("tp_hang"))  # 18ab (B'): or a TP hang across nodes
        gated = set()
        if G10 in ("gate", "gate2") and not tp_own:  # round 18z (B): no TP-specific failure
            gated.add("G10")
        g1_own = c.get("cuda_mismatch") or (G1 in ("gate2", "gate3", "gate4") and c.get("wrong_cuda"))  # 18ac (A')
        g1_own = g1_own or (G1 in ("gate3", "gate4") and c.get("no_cuda_torch"))  # 18ag (B): no-CUDA torch, GPU there
        g1_own = g1_own or (G1 == "gate4" and c.get("cuda13_needed"))  # 18ag (C): needs / fixed by a CUDA 13 build
        if G1 in ("gate", "gate2", "gate3", "gate4") and not g1_own:  # round 18ac (A): no line shows a CUDA mismatch
            gated.add("G1")
        if label in gated:
            rest = [i for i in gotchas if c["labels"][i] not in gated and p[i] >= promote]
            label = c["labels"][rest[0]] if rest else NONE
    else:
        label = c["rules"]
        if label != NONE and pr[NONE] >= veto:
            label = NONE
        elif label == NONE and gotchas and p[gotchas[0]] >= promote:
            label = c["labels"][gotchas[0]]
    second = ("", 0.0)
    if label != NONE:
        rest = [i for i in gotchas if c["labels"][i] != label]
        if SECOND == "failure":  # issue 18, sixth session, second round: a second gotcha with failure-line evidence of its own
            fe = INDEX["c.failure_evidence"]  # is offered too, whatever its probability (tried, results v12)
            rest = [i for i in rest if p[i] >= SECOND_AT or any(j == fe and v for j, v in c["rows"][i])]
            if rest:
                second = (c["labels"][rest[0]], p[rest[0]])
        elif rest and p[rest[0]] >= SECOND_AT:
            second = (c["labels"][rest[0]], p[rest[0]])
    top_p = pr.get(label, 0.0) if label != NONE else (p[gotchas[0]] if gotchas else 0.0)
    if label != NONE:  # the ceiling diagnose applies (learned.ceiling): held under high confidence
        top_p = min(top_p, c.get("cap", {}).get(label, 1.0), words_hold(w, c).get(label, 1.0))
    return label, top_p, second[0], second[1]


# --- grouped cross-validation ----------------------------------------------------------------------------------------

def _fold_of(group: str, folds: int, salt: str = "") -> int:
    return int(hashlib.sha256((salt + group).encode()).hexdigest(), 16) % folds


def group_mean(cases: list[dict], key: str) -> float:
    by: dict[str, list[bool]] = defaultdict(list)
    for c in cases:
        by[c["group"]].append(c[key] == c["label"])
    return 100 * sum(sum(v) / len(v) for v in by.values()) / len(by) if by else 0.0


def choose_bar(train: list[dict], folds: int = 4) -> tuple[float, float]:
    """The (veto, promote) pair with the best group-mean top-1 on out-of-fold predictions inside ``train`` only."""
    oof: dict[str, list[float]] = {}
    for k in range(folds):
        inner = [c for c in train if _fold_of(c["group"], folds, "inner") != k]
        held = [c for c in train if _fold_of(c["group"], folds, "inner") == k]
        if not inner or not held:
            continue
        w = fit(inner)
        for c in held:
            oof[c["set"] + "/" + c["id"]] = w
    best, best_score = (VETOS[-1], PROMOTES[-1]), -1.0
    grid = [(1.01, pm) for pm in (0.0, 0.3, 0.4, 0.5, 0.6, 0.7)] if POLICY == "learned" else \
        [(v, pm) for v in VETOS for pm in PROMOTES]
    scored = [c for c in train if not c.get("train_only")]  # round 18ai: training-only reports are never scored
    for bar in grid:
        for c in scored:
            w = oof.get(c["set"] + "/" + c["id"])
            c["_inner"] = decide(w, c, bar)[0] if w is not None else c["rules"]
        score = group_mean(scored, "_inner")
        if score > best_score + 1e-9:
            best, best_score = bar, score
    return best


def grouped_cv(cases: list[dict], folds: int, extra: Sequence[dict] = ()) -> None:
    """``extra`` (round 18ai, ``--train-only``): reports that join every outer fold's training data unless their source
    group is held out in that fold; they are never predicted and never scored."""
    for k in range(folds):
        train = [c for c in cases if _fold_of(c["group"], folds, SALT) != k]
        test = [c for c in cases if _fold_of(c["group"], folds, SALT) == k]
        if not test:
            continue
        held_groups = {c["group"] for c in test}
        train += [c for c in extra if c["group"] not in held_groups]
        attach_oof(train)
        attach_fitted(test, train)
        bar = choose_bar(train)
        w = fit(train)
        for c in test:
            c["pred"], c["p"], c["second"], c["p2"] = decide(w, c, bar)
            c["top_g"], c["p_top"] = top_gotcha(w, c)
            p = _probs(w, c["rows"])
            c["probs"] = dict(zip(c["labels"], p, strict=True))  # held-out probability of every candidate and none
            c["named"] = [g for _p, g in sorted(((p[i], g) for i, g in enumerate(c["labels"]) if g != NONE),
                                                key=lambda t: -t[0])][:3]  # what diagnose lists (answer or candidates)
            c["bar"] = bar
        print(f"fold {k + 1}/{folds}: {len(test)} cases, bar {bar}", file=sys.stderr)


# --- report ---------------------------------------------------------------------------------------------------------

def _pct(ok: int, n: int) -> str:
    return f"{ok}/{n} = {100 * ok / n:.1f} %" if n else "-"


def report(cases: list[dict], sets: list[str], folds: int) -> str:
    groups = len({c["group"] for c in cases})
    out = ["# diagnose: the learned decision layer under grouped cross-validation (issue 18)", "",
           f"`python benchmarks/diagnose_learn.py --sets {','.join(sets)} --folds {folds} --rules {RULES} --text {TEXT}"
           + ("" if TEXT_ONLY else " --no-text-only") + (f" --salt {SALT}" if SALT else "") + "` · "
           f"text layer: {TEXT} over {TOKENS} (min groups {MIN_GROUPS}, prune {PRUNE}, scale {SCALE}; fitted inside each "
           "training fold, its feature on the training cases from an inner 5-fold grouped fit) · "
           f"{len(cases)} cases in "
           f"{groups} source groups, dealt into {folds} folds by group · each fold's model and answer bar fitted on "
           f"the other folds only (bar by an inner 4-fold grouped CV) · "
           + ("each set read by the rules version that had not seen it" if RULES == "blind" else
              "**every set read by today's rules (in-sample for the rules: they were written on these cases)**")
           + f" · high confidence = p >= {HIGH}", "",
           "| scope | cases | groups | group-mean top-1, learned | pooled, learned | group-mean top-1, rules only "
           "(v6) | pooled, rules only | high-confidence precision, learned | answered | top-2, learned |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, cs in (("all sets", cases), ("the later sets (" + " + ".join(NEVER_TUNED) + ")",
                                           [c for c in cases if c["set"] in NEVER_TUNED])):
        if not cs:
            continue
        hi = [c for c in cs if c["pred"] != NONE and c["p"] >= HIGH]
        out.append(f"| {name} | {len(cs)} | {len({c['group'] for c in cs})} | {group_mean(cs, 'pred'):.1f} % | "
                   f"{_pct(sum(c['pred'] == c['label'] for c in cs), len(cs))} | {group_mean(cs, 'rules'):.1f} % | "
                   f"{_pct(sum(c['rules'] == c['label'] for c in cs), len(cs))} | "
                   f"{_pct(sum(c['pred'] == c['label'] for c in hi), len(hi))} | "
                   f"{sum(c['pred'] != NONE for c in cs)} | "
                   f"{_pct(sum(c['label'] in (c['pred'], c['second']) for c in cs), len(cs))} |")
    sec = [c for c in cases if c["second"]]
    out += ["", f"A second gotcha was offered on {len(sec)} reports ({SECOND}, at {SECOND_AT}); it was the label on "
            f"{sum(c['second'] == c['label'] for c in sec)} (each time the answer was wrong), and the report was a "
            f"\"none\" on {sum(c['label'] == NONE for c in sec)}."]
    pos = [c for c in cases if c["label"] != NONE]
    abst = [c for c in pos if c["pred"] == NONE]
    out += ["", "The three most likely gotchas hold the label for "
            f"{_pct(sum(c['label'] in c['named'] for c in pos), len(pos))} of the reports with a G label; on those "
            "diagnose abstained on (it then lists these three as candidates, each with what would decide it), for "
            f"{_pct(sum(c['label'] in c['named'] for c in abst), len(abst))}."]
    out += ["", "## Per set (held-out predictions pooled)", "",
            "| set | cases | learned top-1 | rules-only top-1 | answered | said none |", "|---|---:|---:|---:|---:|---:|"]
    for s in sets:
        cs = [c for c in cases if c["set"] == s]
        if cs:
            out.append(f"| {s} | {len(cs)} | {_pct(sum(c['pred'] == c['label'] for c in cs), len(cs))} | "
                       f"{_pct(sum(c['rules'] == c['label'] for c in cs), len(cs))} | "
                       f"{sum(c['pred'] != NONE for c in cs)} | {sum(c['pred'] == NONE for c in cs)} |")
    out += ["", "## Per label (all sets)", "",
            "| label | cases | right (recall), learned | answered as this label | of which right (precision) | "
            "recall, rules only |", "|---|---:|---:|---:|---:|---:|"]
    for lab in LABELS:
        n = [c for c in cases if c["label"] == lab]
        a = [c for c in cases if c["pred"] == lab]
        out.append(f"| {lab} | {len(n)} | {_pct(sum(c['pred'] == lab for c in n), len(n))} | {len(a)} | "
                   f"{_pct(sum(c['label'] == lab for c in a), len(a))} | "
                   f"{_pct(sum(c['rules'] == lab for c in n), len(n))} |")
    out += ["", "## Confusion, learned (rows: label, columns: answer; all sets)", "",
            "| label | " + " | ".join(LABELS) + " |", "|---|" + "---|" * len(LABELS)]
    for lab in LABELS:
        cnt = Counter(c["pred"] for c in cases if c["label"] == lab)
        if cnt:
            out.append(f"| {lab} | " + " | ".join(str(cnt[x]) if cnt[x] else "·" for x in LABELS) + " |")
    out += ["", "## Reliability (held-out probability of the best gotcha candidate vs how often it is the label)", "",
            "| p bin | cases | mean p | observed right |", "|---|---:|---:|---:|"]
    for lo, hi_ in zip(BINS, BINS[1:], strict=False):
        b = [c for c in cases if c.get("top_g") and lo <= c["p_top"] < hi_]
        if b:
            right = sum(c["top_g"] == c["label"] for c in b)
            out.append(f"| {lo:.1f}–{min(hi_, 1.0):.1f} | {len(b)} | {sum(c['p_top'] for c in b) / len(b):.2f} | "
                       f"{_pct(right, len(b))} |")
    bars = Counter(c["bar"] for c in cases)
    out += ["", "Answer bars chosen inside the training folds (cases per bar): "
            + ", ".join(f"{b}: {n}" for b, n in sorted(bars.items())) + "."]
    return "\n".join(out) + "\n"


def top_gotcha(w: list[float], c: dict) -> tuple[str, float]:
    p = _probs(w, c["rows"])
    best = [(c["labels"][i], p[i]) for i in range(len(p)) if c["labels"][i] != NONE]
    if not best:
        return ("", 0.0)
    g, pg = max(best, key=lambda t: t[1])
    return g, min(pg, c.get("cap", {}).get(g, 1.0), words_hold(w, c).get(g, 1.0))


HOLD = True  # the words alone never make a finding confident (learned.words_hold)


def words_hold(w: list[float], c: dict) -> dict[str, float]:
    """learned.words_hold: a gotcha whose probability without the text layer's feature stays under HIGH is held at
    the ceiling (the words may promote an answer, they do not make it sure)."""
    if not HOLD or "rows_nt" not in c:
        return {}
    p = dict(zip(c["labels_nt"], _probs(w, c["rows_nt"]), strict=True))
    return {g: 0.79 for g in c["labels"] if g != NONE and p.get(g, 0.0) < HIGH}


def write_weights(w: list[float], bar: float, sets: list[str], n: int, groups: int, text=None) -> Path:
    path = ROOT / "src" / "sparkops" / "knowledge" / "diagnose_model.yaml"
    lines = [
        "# The learned decision layer of `spark-ops diagnose` (sparkops/diagnose/learned.py, issue 18).",
        "# Written by `python benchmarks/diagnose_learn.py --write`: do not edit by hand; retrain after a change to",
        "# the rules (symptoms.yaml) or to the labelled sets. A conditional logit over the rules' candidates and",
        "# \"none\": utility(gotcha) = prior[gotcha] + sum(candidate[k] * feature[k]); utility(none) = sum(none[k] *",
        "# feature[k]); probabilities by softmax. A gotcha is answered when it is the most likely and its probability",
        "# reaches answer_at (chosen by grouped cross-validation by source on the training sets).",
        f"version: {1 if text is None else 2}",
        f"last_verified: {date.today().isoformat()}",
        f"trained_on: [{', '.join(sets)}]  # each set read by the rules version that had not seen it",
        f"cases: {n}",
        f"groups: {groups}",
        f"answer_at: {bar}",
        f"second_at: {SECOND_AT}",
        "families:  # the measured numbers each gotcha is about (learned.py _NUMBERS)",
    ]
    lines += [f"  {g}: [{', '.join(f)}]" for g, f in FAMILIES.items()]
    lines.append("priors:")
    lines += [f"  {g}: {w[INDEX['p.' + g]]:.4f}" for g in GOTCHAS]
    lines.append("candidate:")
    lines += [f"  {k}: {w[INDEX['c.' + k]]:.4f}" for k in CANDIDATE_FEATURES]
    lines.append("none:")
    lines += [f"  {k}: {w[INDEX['n.' + k]]:.4f}" for k in NONE_FEATURES]
    lines.append("anchored:  # per gotcha: what a failure pattern on a failure line adds to its utility")
    lines += [f"  {g}: {w[INDEX['a.' + g]]:.4f}" for g in GOTCHAS]
    if text is not None:
        idf, cent = text
        read = {"tokens": ["failure"], "tokens_fp": ["failure", "plain"],
                "tokens_all": ["failure", "plain", "context", "quoted"]}[TOKENS]
        lines += [
            "text:  # the learned text layer (learned.py text_scores): words of these lines against each label's centroid",
            f"  read: [{', '.join(read)}]",
            f"  min_groups: {MIN_GROUPS}",
            f"  prune: {PRUNE}",
            f"  scale: {SCALE}",
            f"  weight: {w[INDEX['t.text']]:.4f}",
            f"  only: {w[INDEX['t.only']] if TEXT_ONLY else -30.0:.4f}",
            f"  only_at: {TEXT_ONLY_AT if TEXT_ONLY else 1e9}",
            "  idf:",
        ]
        lines += [f"    {json.dumps(tok)}: {v:.4f}" for tok, v in sorted(idf.items())]
        lines.append("  centroids:")
        for lab in LABELS:
            lines.append(f"    {lab}:")
            lines += [f"      {json.dumps(tok)}: {v:.4f}" for tok, v in sorted(cent[lab].items())]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--folds", type=int, default=10)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--cache", type=Path, help="features JSON: read if it exists, else written (faster reruns)")
    ap.add_argument("--policy", choices=("learned", "hybrid"), default="learned")
    ap.add_argument("--rules", choices=("blind", "current"), default="blind",
                    help="current: read every set with today's rules (in-sample for the rules; report only)")
    ap.add_argument("--text", choices=("off", "nb", "rocchio"), default="rocchio", help="the text layer (off: the v9 layer)")
    ap.add_argument("--no-text-only", action="store_true", help="the text layer may not add a candidate no rule found")
    ap.add_argument("--alpha", type=float, default=0.5)
    ap.add_argument("--min-groups", type=int, default=2)
    ap.add_argument("--prune", type=float, default=0.04)
    ap.add_argument("--scale", type=float, default=10.0)
    ap.add_argument("--no-hold", action="store_true", help="let the text layer's feature alone make a confident answer")
    ap.add_argument("--salt", default="", help="another dealing of the groups into folds (a check on fold luck)")
    ap.add_argument("--tokens", default="tokens_fp", choices=("tokens", "tokens_fp", "tokens_all"))
    ap.add_argument("--second", default="p", choices=("p", "failure"), help="when a second gotcha is offered")
    ap.add_argument("--second-at", type=float, default=0.3,
                    help="the probability that offers a second gotcha (--write ships 0.3 whatever this says)")
    ap.add_argument("--g10", default="off", choices=("off", "setup", "gate", "gate2"),
                    help="round 18z variants: setup = n.setup_fault feature, gate = G10 needs a TP-specific failure; "
                         "round 18ab: gate2 = gate, where a hang of TP > 1 across nodes also counts")
    ap.add_argument("--g1", default="off", choices=("off", "gate", "gate2", "gate3", "gate4", "gap"),
                    help="round 18ac variants: gate = G1 needs a CUDA major-version mismatch on a line; gate2 = the same, "
                         "where 'built for the wrong CUDA' / 'CUDA mismatch' in words also counts; gap = n.kernel_gap "
                         "feature (a missing SM12x kernel without such a mismatch; declared, not run); round 18ag: "
                         "gate3 = gate2, where a no-CUDA torch on a visible GPU also counts; gate4 = gate3, or a line "
                         "needing / fixed by CUDA 13")
    ap.add_argument("--train-only", default="",
                    help="round 18ai: sets whose reports only train (never predicted, never scored); in each outer fold "
                         "those whose source group is held out are left out")
    ap.add_argument("--write", action="store_true", help="fit on every set and rewrite knowledge/diagnose_model.yaml")
    ap.add_argument("--predictions", type=Path,
                    help="also write each case's held-out answer (set/id, label, answer, p) as JSON, for a per-case "
                         "comparison such as benchmarks/diagnose_second_reader.py")
    args = ap.parse_args(argv)
    sets = [s for s in args.sets.split(",") if s]
    global POLICY, RULES, TEXT, TEXT_ONLY, ALPHA, MIN_GROUPS, TOKENS
    TOKENS = args.tokens
    global PRUNE
    PRUNE = args.prune
    global SCALE
    SCALE = args.scale
    global SALT
    SALT = args.salt
    global HOLD, SECOND, SECOND_AT
    HOLD = not args.no_hold
    SECOND, SECOND_AT = args.second, args.second_at
    if args.write and (SECOND, SECOND_AT) != ("p", 0.3):
        raise SystemExit("--write ships second_at 0.3 (diagnose offers a second gotcha by its probability only)")
    POLICY = args.policy
    global G10, PARAMS, INDEX
    G10 = args.g10
    if G10 == "setup" and "n.setup_fault" not in INDEX:
        PARAMS = (*PARAMS, "n.setup_fault")
        INDEX = {k: i for i, k in enumerate(PARAMS)}
    global G1
    G1 = args.g1
    if G1 == "gap" and "n.kernel_gap" not in INDEX:
        PARAMS = (*PARAMS, "n.kernel_gap")
        INDEX = {k: i for i, k in enumerate(PARAMS)}
    RULES = args.rules
    TEXT, TEXT_ONLY, ALPHA, MIN_GROUPS = args.text, not args.no_text_only, args.alpha, args.min_groups
    if args.write and RULES != "blind":
        raise SystemExit("--write trains on the blind reading only")
    cases = featurized_cases(sets, args.cache, write_cache=True)
    extra_sets = [s for s in args.train_only.split(",") if s]
    extra = featurized_cases(extra_sets, args.cache.with_suffix(".extra.json") if args.cache else None,
                             write_cache=True) if extra_sets else []
    for c in extra:
        c["train_only"] = True
    if extra and args.write:
        raise SystemExit("--train-only is a CV arm; --write trains on --sets")
    if args.write:
        attach_oof(cases)
        bar = choose_bar(cases)  # the same inner 4-fold grouped CV as inside each CV fold
        w = fit(cases)
        if POLICY != "learned":
            raise SystemExit("--write ships the learned policy only (diagnose's _learned)")
        text = fit_rocchio(cases) if TEXT == "rocchio" else None
        if TEXT == "nb":
            raise SystemExit("--write ships the rocchio text layer or none (--text off)")
        path = write_weights(w, bar[1], sets, len(cases), len({c["group"] for c in cases}), text)
        print(f"wrote {path.relative_to(ROOT)} (answer_at {bar[1]})")
        return 0
    grouped_cv(cases, args.folds, extra)
    text = report(cases, sets, args.folds)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    if args.predictions:
        args.predictions.write_text(json.dumps(
            {c["set"] + "/" + c["id"]: {"label": c["label"], "answer": c["pred"], "p": round(c["p"], 4),
                                         "second": c["second"]} for c in cases}, indent=1, sort_keys=True) + "\n")
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
