"""The slot reader (issue 50, user turns): slots-given F1 on held-out SGD services, against today's hand
patterns, with latency per turn.

Every user turn of ``../shared/sgd`` is read for every slot its service lets a user give
(:func:`~dialfork_metrics.task3.workflow.reader.slots.sgd_slot_infos`); gold: the slots of its
``INFORM`` acts. Six folds leave whole services out (the step reader's five, plus Payment_1 with
Weather_1); each fold's reader learns from the other services only. Two reading modes:

* ``asked known``: the reader is told which slots the previous system turn asked for (its ``REQUEST``
  acts), as the tracker knows them from its pending question;
* ``asked unknown``: only the texts.

Contenders: the reader (a one-hidden-layer perceptron, the default), a logistic regression over the same
features, and today's tracker: :func:`~dialfork_metrics.task3.workflow.state.volunteered_slots` plus, as
``observe_user`` does, every slot the previous system turn asked for (read-only: today's functions are
called). Also: F1 against SGD's wider gold (slots whose state value changed, which includes offers
taken), the value accuracy of the slots found, the calibration of the reader's probability, and the
latency of one ``read`` per turn (MiniLM, every turn new to the encoder's cache).

    python benchmarks/bench_slot_reader.py --sgd ../shared/sgd \\
        --md benchmarks/results/slot_reader.md --json benchmarks/results/slot_reader.json
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import sys
import time

import numpy as np

FOLDS = (
    ("Banks_1", "Buses_1"),
    ("Calendar_1", "Hotels_1"),
    ("Media_1", "Music_1"),
    ("RentalCars_1", "Trains_1"),
    ("Services_2", "Services_3"),
    ("Payment_1", "Weather_1"),
)


def prf(y: np.ndarray, p: np.ndarray) -> dict[str, float]:
    """Micro precision, recall and F1 of 0/1 arrays."""
    y, p = y.astype(bool), p.astype(bool)
    tp, fp, fn = int((y & p).sum()), int((~y & p).sum()), int((y & ~p).sum())
    return {
        "f1": 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else float("nan"),
        "precision": tp / (tp + fp) if tp + fp else float("nan"),
        "recall": tp / (tp + fn) if tp + fn else float("nan"),
        "n_gold": tp + fn,
    }


def ece(y: np.ndarray, q: np.ndarray, bins: int = 10) -> float:
    """Expected calibration error over equal-width bins."""
    idx = np.minimum((q * bins).astype(int), bins - 1)
    return float(
        sum(
            abs(y[idx == b].mean() - q[idx == b].mean()) * (idx == b).mean()
            for b in range(bins)
            if (idx == b).any()
        )
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sgd", default="../shared/sgd")
    ap.add_argument("--encoder", default="minilm")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--latency-turns", type=int, default=200)
    ap.add_argument("--md", default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)

    from sklearn.linear_model import LogisticRegression

    from dialfork_dataset.atomic import write_json_atomic, write_text_atomic
    from dialfork_dataset.tracks.sgd import read_sgd
    from dialfork_dataset.workflow.roles import TaskRoles
    from dialfork_metrics.encoders import get_encoder
    from dialfork_metrics.task3.workflow.reader import slots as S
    from dialfork_metrics.task3.workflow.state import volunteered_slots

    t0 = time.perf_counter()
    corpus = read_sgd(args.sgd)
    slots_of = S.sgd_slot_infos(corpus.schema)
    turns = S.sgd_user_turns(corpus)
    enc = get_encoder(args.encoder)
    Xk, pairs = S.pair_features(enc, turns, slots_of)
    Xu, _ = S.pair_features(enc, [dataclasses.replace(t, asked=None) for t in turns], slots_of)
    print(
        f"{len(turns)} user turns, {len(pairs)} (turn, slot) pairs, features in {time.perf_counter() - t0:.0f} s"
    )
    y = np.array([s.name in turns[i].given for i, s in pairs], dtype=np.int64)
    yc = np.array([s.name in turns[i].changed for i, s in pairs], dtype=np.int64)
    svc = np.array([turns[i].service for i, _ in pairs])
    typ = np.array([s.value_type for _, s in pairs])

    # today's tracker, read-only: volunteered values, plus every slot the system turn asked for
    roles = {
        k: TaskRoles(k, {}, {}, {s.name: s.values for s in v}, {s.name: s.value_type for s in v})
        for k, v in slots_of.items()
    }
    base_vol = np.zeros(len(pairs), dtype=np.int64)
    base_ans = np.zeros(len(pairs), dtype=np.int64)
    seen_of: dict[int, dict[str, str]] = {}
    t1 = time.perf_counter()
    for r, (i, s) in enumerate(pairs):
        if i not in seen_of:
            seen_of[i] = volunteered_slots(turns[i].text, roles[turns[i].service])
        base_vol[r] = s.name in seen_of[i]
        base_ans[r] = base_vol[r] or s.name in (turns[i].asked or ())
    base_ms = (time.perf_counter() - t1) / len(turns) * 1e3

    preds: dict[str, np.ndarray] = {k: np.zeros(len(pairs)) for k in ("mlp_k", "mlp_u", "lr_k", "lr_u")}
    last = None
    for fold in FOLDS:
        te = np.isin(svc, fold)
        tr = ~te
        Xtr, ytr = np.vstack([Xk[tr], Xu[tr]]), np.concatenate([y[tr], y[tr]])
        arrays = S.SlotReader.train_arrays(Xtr, ytr, args.seed)
        reader = S.SlotReader(arrays, {"encoder": "minilm"}, enc)
        preds["mlp_k"][te] = reader.proba(Xk[te])
        preds["mlp_u"][te] = reader.proba(Xu[te])
        m, sd = arrays["mean"], arrays["scale"]
        lr = LogisticRegression(C=0.05, max_iter=3000, random_state=args.seed).fit((Xtr - m) / sd, ytr)
        preds["lr_k"][te] = lr.predict_proba((Xk[te] - m) / sd)[:, 1]
        preds["lr_u"][te] = lr.predict_proba((Xu[te] - m) / sd)[:, 1]
        last = (fold, arrays)
        print(f"fold {'+'.join(fold)}: F1 {prf(y[te], preds['mlp_k'][te] >= 0.5)['f1']:.3f}", flush=True)

    # what read() returns: the classifier, and for a checkable type (CHECKED_TYPES) its value in the turn
    checked = np.array([S._value_for(turns[i], sl) is not None for i, sl in pairs], dtype=bool)
    rows = {
        "reader, value checked (read, asked known)": (preds["mlp_k"] >= 0.5) & checked,
        "reader (asked known)": preds["mlp_k"] >= 0.5,
        "reader (asked unknown)": preds["mlp_u"] >= 0.5,
        "logistic regression (asked known)": preds["lr_k"] >= 0.5,
        "logistic regression (asked unknown)": preds["lr_u"] >= 0.5,
        "today: volunteered + asked (tracker)": base_ans.astype(bool),
        "today: volunteered only": base_vol.astype(bool),
    }
    types = sorted(set(typ.tolist()), key=lambda t: -int(y[typ == t].sum()))
    result: dict = {
        "n_turns": len(turns),
        "n_pairs": len(pairs),
        "folds": [list(f) for f in FOLDS],
        "rows": {},
    }
    for name, p in rows.items():
        result["rows"][name] = {
            "micro": prf(y, p),
            "by_type": {t: prf(y[typ == t], p[typ == t]) for t in types},
            "by_fold": {"+".join(f): prf(y[np.isin(svc, f)], p[np.isin(svc, f)])["f1"] for f in FOLDS},
            "state_change_f1": prf(yc, p)["f1"],
        }
    # values of the slots found (asked known)
    hit = (preds["mlp_k"] >= 0.5) & (y == 1)
    ok = n = 0
    for r in np.flatnonzero(hit):
        i, s = pairs[r]
        gold = S._norm(turns[i].given.get(s.name, "")).strip()
        got = S._norm(S._value_for(turns[i], s) or "").strip()
        n += 1
        ok += bool(gold) and (gold in f" {got} " or got in f" {gold} " or gold == got)
    result["value_accuracy"] = ok / n if n else float("nan")
    result["calibration"] = {
        k: {"ece": ece(y, preds[k]), "brier": float(np.mean((preds[k] - y) ** 2))} for k in ("mlp_k", "mlp_u")
    }

    # latency: one read per turn, a fresh encoder (every text new to its cache), the last fold's reader
    fold, arrays = last
    os.environ.pop("DIALFORK_EMBEDDING_CACHE", None)  # no disk cache: every turn is really encoded
    fresh = get_encoder(args.encoder, shared=False)
    reader = S.SlotReader(arrays, {"encoder": "minilm"}, fresh)
    held = [t for t in turns if t.service in fold]
    random.Random(args.seed).shuffle(held)
    held = held[: args.latency_turns]
    reader.read("warm up", slots_of[held[0].service], "warm up")
    times = []
    for t in held:
        a = time.perf_counter()
        reader.read(t.text, slots_of[t.service], t.prev_system or None, t.asked)
        times.append((time.perf_counter() - a) * 1e3)
    result["latency_ms"] = {
        "reader_p50": float(np.percentile(times, 50)),
        "reader_p95": float(np.percentile(times, 95)),
        "today_mean": base_ms,
        "turns": len(times),
        "fold": "+".join(fold),
    }
    result["wall_s"] = time.perf_counter() - t0

    lines = [
        "# Slot reader: slots given by a user turn, held-out SGD services",
        "",
        "`python benchmarks/bench_slot_reader.py --sgd ../shared/sgd --md benchmarks/results/slot_reader.md "
        "--json benchmarks/results/slot_reader.json` (packaged MiniLM, seed "
        f"{args.seed}). {len(turns)} user turns of ../shared/sgd, {len(pairs)} (turn, slot) pairs; gold: the "
        "turn's INFORM acts. Six folds, each holding out whole services ("
        + "; ".join("+".join(f) for f in FOLDS)
        + "); every figure is on held-out services. Target (issue 50): F1 >= 0.90.",
        "",
        "| contender | F1 | precision | recall | F1 vs state changes | " + " | ".join(types) + " |",
        "|---|---|---|---|---|" + "---|" * len(types),
    ]
    for name, r in result["rows"].items():
        m = r["micro"]
        lines.append(
            f"| {name} | {m['f1']:.3f} | {m['precision']:.3f} | {m['recall']:.3f} | {r['state_change_f1']:.3f} | "
            + " | ".join(f"{r['by_type'][t]['f1']:.3f}" for t in types)
            + " |"
        )
    lines += [
        "",
        "Gold slots per type: "
        + ", ".join(f"{t} {result['rows']['reader (asked known)']['by_type'][t]['n_gold']}" for t in types)
        + ".",
        "",
        "Per fold (F1): "
        + "; ".join(
            f"{f}: reader {result['rows']['reader (asked known)']['by_fold'][f]:.3f}, today "
            f"{result['rows']['today: volunteered + asked (tracker)']['by_fold'][f]:.3f}"
            for f in result["rows"]["reader (asked known)"]["by_fold"]
        )
        + ".",
        "",
        f"Values: of the slots the reader finds (asked known), {result['value_accuracy']:.1%} carry the gold "
        "value (one contains the other, case and punctuation aside).",
        "",
        "Calibration of the reader's probability (held out): "
        + "; ".join(
            f"{k}: ECE {v['ece']:.3f}, Brier {v['brier']:.3f}" for k, v in result["calibration"].items()
        )
        + ".",
        "",
        f"Latency per user turn (`SlotReader.read`, MiniLM on this machine's CPU, one intra-op thread, each turn new "
        f"to the encoder's cache, {len(times)} turns of {result['latency_ms']['fold']}): p50 "
        f"{result['latency_ms']['reader_p50']:.1f} ms, p95 {result['latency_ms']['reader_p95']:.1f} ms; today's "
        f"patterns {base_ms:.2f} ms a turn.",
        "",
        "F1 vs state changes: the same predictions against SGD's wider gold (every slot whose state value "
        "changed after the turn, which includes values taken from a system offer or confirmation; the "
        "tracker fills those as *offered*, not from the user's words).",
        "",
    ]
    md = "\n".join(lines)
    print(md)
    if args.md:
        write_text_atomic(args.md, md)
    if args.json:
        write_json_atomic(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
