"""Recall with and without the ``task`` field on the sgd track (issue 51 item 7).

Without ``task`` a dialogue is routed (:meth:`WorkflowDetector.route`: its user turns against each
fitted task's user turns). This fits ``wf`` as :mod:`bench_sgd_track` does (the workflow files plus
``--logs`` unlabelled conformant dialogues a task), predicts the same test records once with their
``task`` and once without it, and reports, per edit, the recall at or after the fork turn, the false
alarms, and how many first alarms the explanation calls ``off-task`` (a reason routing can get wrong).

Run: ``python benchmarks/bench_routing.py`` (``--max-per-task 40`` by default). Writes
benchmarks/results/routing.json; embeddings are cached in benchmarks/out/sgd_track.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_sgd_track import EDITS, embeddings, strip, track_and_logs  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sgd", default=os.environ.get("DIALFORK_SGD_DIR", str(ROOT.parent / "shared" / "sgd")))
    ap.add_argument("--max-per-task", type=int, default=40)
    ap.add_argument("--logs", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "out" / "sgd_track"))
    ap.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "routing.json"))
    args = ap.parse_args(argv)
    from dialfork_dataset.sources import open_source
    from dialfork_dataset.tracks.sgd import WORKFLOWS_DIR
    from dialfork_metrics.task3 import make_detector
    from dialfork_metrics.task3.streaming._common import resolve_encoder

    t0, load0 = time.perf_counter(), round(os.getloadavg()[0], 2)
    _, _, test, logs = track_and_logs(args.sgd, args.seed, args.max_per_task, args.logs)
    logs = [strip(r) for r in logs]
    enc = resolve_encoder("minilm")
    tag = f"s{args.seed}-m{args.max_per_task}"
    E_test = embeddings(enc, test, Path(args.out) / f"test-{tag}.pkl")
    E_logs = embeddings(enc, logs, Path(args.out) / f"logs-{tag}-{args.logs}.pkl")
    # the slot patterns: the shipped slot reader learned these very services (bench_sgd_track crossfits it)
    det = make_detector(
        "wf", workflow=open_source(f"workflow:{WORKFLOWS_DIR}"), encoder=enc, slot_reader=None
    )
    det.fit(logs, embeddings=E_logs)
    out: dict = {
        "command": "python benchmarks/bench_routing.py " + " ".join(argv or sys.argv[1:]),
        "n_test": len(test),
        "logs_per_task": args.logs,
    }
    for mode in ("with task", "without task"):
        rows = test if mode == "with task" else [{k: v for k, v in r.items() if k != "task"} for r in test]
        preds = det.predict_many(rows, embeddings=E_test)
        flagged = [i for i, p in enumerate(preds) if p is not None]
        why = det.explain_many([rows[i] for i in flagged], embeddings=[E_test[i] for i in flagged])
        rule_of = {i: (w or {}).get("rule") for i, w in zip(flagged, why)}
        by: dict[str, list[tuple]] = defaultdict(list)
        for i, (r, p) in enumerate(zip(test, preds)):
            by["conformant" if r["edit"] is None else r["edit"]].append((p, r["fork_turn"], rule_of.get(i)))
        res = {"false_alarms": float(np.mean([p is not None for p, _, _ in by["conformant"]]))}
        for name, edits in EDITS.items():
            xs = [x for e in edits for x in by[e]]
            res[name] = float(np.mean([p is not None and p >= tk for p, tk, _ in xs])) if xs else None
            res[f"{name}_rules"] = dict(Counter(rl for p, _, rl in xs if p is not None))
            res[f"n_{name}"] = len(xs)
        out[mode] = res
        print(mode, json.dumps(res), file=sys.stderr, flush=True)
    out["seconds"] = round(time.perf_counter() - t0, 1)
    out["loadavg"] = [load0, round(os.getloadavg()[0], 2)]
    Path(args.json).write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
