"""What a perfect step reader would give `wf` (issue 50): its rules read with the gold step labels.

The default ``wf`` reads each system turn's step by cosine similarity (or with the step reader,
``step_reader="auto"``). This ablation replaces that reading with the track's own gold labels
(STAR's wizard action labels, SGD's acts as the sgd track maps them; ``system_nodes`` /
``system_node_tasks`` of each test record): a turn labelled with a step of its task is that step,
sure (similarity 1, no rival); a turn labelled with another task's step is off-task; a turn without
a usable label keeps the detector's own reading, and so do the other questions a turn asks beside its
step (``NodeAssignment.also``, which the slot reader is told). Everything else (the fitted thresholds, the
repeat/order rules, the dialogue-state tracker with its slot patterns) is the detector's, so the
difference between the two rows of a track is what reading the steps right is worth, and what is
left is what the rules and the slot reading miss.

It is an upper bound for a step reader, not a detector: no detector sees the gold labels.

Tracks: STAR's human-picked and human-typed test dialogues (``wf`` fitted on the template train
split, no human dialogue; as ``bench_task3_tracks.py``'s no-human stage) and the sgd track (``wf``
fitted from the workflow files alone; as ``bench_sgd_track.py``'s files fit).

    python benchmarks/bench_gold_steps.py            # writes benchmarks/results/gold_steps.{json,md}
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_sgd_track as SGD  # noqa: E402
import bench_task3_tracks as T3  # noqa: E402


def gold_assignment(det: Any, record: dict, E: np.ndarray) -> tuple[Any, list[dict], list[int], int]:
    """The detector's node assignment of ``record``'s system turns with the gold labels put in.

    Returns:
        ``(assignment, turns, system rows, number of turns the gold labels set)``.
    """
    from dialfork_dataset.turns import as_turns

    task = record["task"]
    turns = as_turns(record["turns"])
    rows = det._system_rows(turns)
    a = det.assigner_.assign(task, E[rows])
    own_nodes = set(det.assigner_.task_nodes(task))
    gold = list(record.get("system_nodes") or [None] * len(rows))
    gold_tasks = list(record.get("system_node_tasks") or [task] * len(rows))
    nodes, reasons, rival_names = list(a.nodes), list(a.reasons), list(a.rival)
    own, rival = a.own_similarity.copy(), a.rival_similarity.copy()
    second = a.second_similarity.copy() if len(a.second_similarity) == len(rows) else np.zeros(len(rows))
    used = 0
    for j, (g, gt) in enumerate(zip(gold, gold_tasks)):
        if j >= len(rows):
            break
        if gt is not None and gt != task and g is not None:  # another task's step: off-task
            nodes[j], reasons[j], rival_names[j] = None, "off-task", f"{gt}:{g}"
            own[j], rival[j] = 0.0, 1.0
            used += 1
        elif g is not None and g in own_nodes:  # its own task's step, sure
            nodes[j], reasons[j] = g, None
            own[j], rival[j], second[j] = 1.0, -np.inf, 0.0
            used += 1
    ga = dataclasses.replace(
        a,
        nodes=nodes,
        best=[n or b for n, b in zip(nodes, a.best)],
        own_similarity=own,
        rival_similarity=rival,
        rival=rival_names,
        reasons=reasons,
        second_similarity=second,
        prob=np.zeros(0),
        # the other questions a turn asks, as the detector reads them (its own cosine), never the gold step itself
        also=[tuple(x for x in more if x != n) for more, n in zip(a.also or [()] * len(rows), nodes)],
    )
    return ga, turns, rows, used


def excess_gold(det: Any, records: list[dict], embs: list[np.ndarray]) -> tuple[list[list[float]], float]:
    """Per record, per system turn: the deviation beyond its task's threshold with the gold steps,
    and the share of system turns the gold labels set."""
    out, used, total = [], 0, 0
    for r, E in zip(records, embs):
        a, turns, rows, k = gold_assignment(det, r, E)
        used, total = used + k, total + len(rows)
        task = r["task"]
        dev = det._flag_deviations(task, a, det._answered(turns, rows), turns) - det._threshold_of(task)
        out.append([float(x) for x in dev])
    return out, used / max(total, 1)


def star_tracks(args: argparse.Namespace) -> dict[str, Any]:
    """Own reading vs gold steps on the human-picked and human-typed tracks (no-human fit), with the
    slot patterns and with the shipped slot reader (trained on SGD alone)."""
    from dialfork_dataset.star import StarCorpus
    from dialfork_metrics.task3.streaming._common import resolve_encoder

    ns = argparse.Namespace(star=args.star, tasks=T3.DEFAULT_TASKS.split(","), per_task=12, seed=args.seed)
    tracks, fits, _ = T3.load_tracks(ns, Path(args.out_star))
    enc = resolve_encoder("minilm")
    rows = fits["no-human"]
    fit_embs = T3.embed(enc, rows)
    res: dict[str, Any] = {}
    for slots, variant in (("patterns", "wf-patterns"), ("slot reader", "wf")):
        det = T3.make(variant, ns, enc, StarCorpus(args.star))
        T3.fit_detector(det, variant, rows, fit_embs)
        for name in ("human-picked", "human-typed"):
            test = tracks[name]
            embs = T3.embed(enc, test)
            own = [[float(x) for x in d] for d in det.turn_deviations(test, embeddings=embs)]
            gold, share = excess_gold(det, test, embs)
            for reading, ex in (("own", own), ("gold", gold)):
                st = {
                    "excess": {r["dialogue_id"]: e for r, e in zip(test, ex)},
                    "pred": {r["dialogue_id"]: T3.first_above(e, 0.0) for r, e in zip(test, ex)},
                }
                m = T3.metrics(test, st)
                bt = m["by_type"]
                key = f"{name}, {reading} steps, {slots}"
                res[key] = {
                    "score": m["score"],
                    "false_alarms": m["false_alarms"],
                    "recall_at_5": bt["all"]["recall_at_0.05"],
                    "wic_at_5": bt["WIC"]["recall_at_0.05"],
                    "csc_at_5": bt["CSC"]["recall_at_0.05"],
                    "skip_question_outcome_at_5": _pooled(bt, ("SSPC-skip/question", "SSPC-skip/outcome")),
                    "repeat_at_5": bt["SSPC-repeat"]["recall_at_0.05"],
                    "gold_share": share if reading == "gold" else None,
                    "n_conformant": m["n_conformant"],
                }
                T3.log(f"{key}: {res[key]}")
    return res


def _pooled(by_type: dict, keys: tuple[str, ...]) -> float | None:
    n = sum(by_type[k]["n"] for k in keys if k in by_type)
    if not n:
        return None
    return sum(by_type[k]["recall_at_0.05"] * by_type[k]["n"] for k in keys if k in by_type) / n


def sgd_track(args: argparse.Namespace) -> dict[str, Any]:
    """Own reading vs gold steps on the sgd track (files alone), with the slot patterns and with the
    slot reader (crossfit: each service read by a reader trained without it, as bench_sgd_track)."""
    from dialfork_dataset.sources import open_source
    from dialfork_dataset.tracks.sgd import SGD_TASKS, WORKFLOWS_DIR
    from dialfork_metrics.task3 import make_detector
    from dialfork_metrics.task3.streaming._common import resolve_encoder
    from dialfork_metrics.task3.workflow.reader.data import FOLDS

    _, _, test, _ = SGD.track_and_logs(args.sgd, args.seed, args.max_per_task, 20)
    enc = resolve_encoder("minilm")
    E = SGD.embeddings(enc, test, Path(args.out_sgd) / f"test-s{args.seed}-m{args.max_per_task}.pkl")
    source = open_source(f"workflow:{WORKFLOWS_DIR}")
    steps = {t.name: dict(t.steps) for t in SGD_TASKS}
    service = {t.name: t.service for t in SGD_TASKS}
    slot_readers = SGD.crossfit_slot_readers(args.sgd, Path(args.out_sgd) / "readers", seed=args.seed)
    res: dict[str, Any] = {}
    for slots in ("patterns", "slot reader"):
        own: list[int | None] = [None] * len(test)
        gold: list[int | None] = [None] * len(test)
        used = total = 0
        for fold, srd in zip(FOLDS, slot_readers):
            ix = [i for i, r in enumerate(test) if service[r["task"]] in fold]
            if not ix:
                continue
            extra = {"slot_reader": "auto" if slots == "slot reader" else None}
            with SGD.readers_as(None, srd):
                det = make_detector("wf", workflow=source, encoder=enc, **extra).fit(None)
                sub, E_sub = [test[i] for i in ix], [E[i] for i in ix]
                for i, p in zip(ix, det.predict_many(sub, embeddings=E_sub)):
                    own[i] = p
                ex, share = excess_gold(det, sub, E_sub)
                n = sum(len(r["system_nodes"]) for r in sub)
                used, total = used + share * n, total + n
                for i, e in zip(ix, ex):
                    gold[i] = T3.first_above(e, 0.0)
        for reading, preds in (("own", own), ("gold", gold)):
            m = SGD.evaluate(None, test, E, steps, preds=preds, hit={})
            key = f"sgd files, {reading} steps, {slots}"
            res[key] = {
                "score": m["score"],
                "false_alarms": m["false_alarms"],
                **{k: m[k] for k in SGD.EDITS},
                "gold_share": used / max(total, 1) if reading == "gold" else None,
                "n_conformant": m["n_conformant"],
            }
            T3.log(f"{key}: {res[key]}")
    return res


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def markdown(res: dict[str, Any]) -> str:
    lines = [
        "# `wf` with the gold step labels (what a perfect step reader would give)",
        "",
        f"Written by `{res['command']}` ({res['seconds']:.0f} s; load average {res['loadavg']}).",
        "",
        "Own: the default `wf` reading the steps by cosine. Gold: the same fitted detector, each system "
        "turn's step set from the track's gold label (off-task when the label is another task's); the "
        "rules, thresholds and slot reading are the detector's. STAR tracks: fitted on the template "
        "train split (no human dialogue), recall at 5% false alarms (threshold-free, as "
        "bench_task3_tracks). sgd track: fitted from the workflow files alone, recall at or after the "
        "fork turn at the operating point (as bench_sgd_track).",
        "",
        "| track / steps read | Score | false alarms % | WIC @5% | CSC @5% | skip of a question or outcome @5% | repeat @5% | gold-set turns % |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for k, v in res["star"].items():
        lines.append(
            f"| {k} | {v['score']:.1f} | {pct(v['false_alarms'])} | {pct(v['wic_at_5'])} | "
            f"{pct(v['csc_at_5'])} | {pct(v['skip_question_outcome_at_5'])} | {pct(v['repeat_at_5'])} | "
            f"{pct(v['gold_share'])} |"
        )
    lines += [
        "",
        "| track / steps read | Score | false alarms % | switches % | inserted sub-goals % | skip % | repeat % | gold-set turns % |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for k, v in res["sgd"].items():
        lines.append(
            f"| {k} | {v['score']:.1f} | {pct(v['false_alarms'])} | {pct(v['switch'])} | "
            f"{pct(v['insert'])} | {pct(v['skip'])} | {pct(v['repeat'])} | {pct(v['gold_share'])} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--star", default=T3.star_default())
    ap.add_argument("--sgd", default=os.environ.get("DIALFORK_SGD_DIR", str(ROOT.parent / "shared" / "sgd")))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--max-per-task", type=int, default=80, help="sgd track: dialogues per task (as bench_sgd_track)"
    )
    ap.add_argument("--out-star", default=str(ROOT / "benchmarks" / "out" / "task3_tracks"))
    ap.add_argument("--out-sgd", default=str(ROOT / "benchmarks" / "out" / "sgd_track"))
    ap.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "gold_steps.json"))
    ap.add_argument("--md", default=str(ROOT / "benchmarks" / "results" / "gold_steps.md"))
    args = ap.parse_args(argv)
    command = "python benchmarks/bench_gold_steps.py" + "".join(
        " " + shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:])
    )
    t0, load0 = time.perf_counter(), round(os.getloadavg()[0], 2)
    res: dict[str, Any] = {"command": command, "code": T3.code_state()}
    res["star"] = star_tracks(args)
    res["sgd"] = sgd_track(args)
    res["seconds"] = round(time.perf_counter() - t0, 1)
    res["loadavg"] = [load0, round(os.getloadavg()[0], 2)]
    Path(args.json).write_text(json.dumps(res, indent=2, default=str) + "\n", encoding="utf-8")
    Path(args.md).write_text(markdown(res), encoding="utf-8")
    T3.log(f"wrote {args.json} and {args.md}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
