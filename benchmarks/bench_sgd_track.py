"""Task 3 on the sgd track: the workflow-aware detector on workflows a user wrote, before and after.

The track (:mod:`dialfork_dataset.tracks.sgd`): real crowd-written SGD dialogues of nine services that follow
the hand-written workflow files of ``examples/workflows/sgd`` (one or two phrasings a step), and
their edits (another service's dialogue from t_k, two exchanges of another service inserted, a step
skipped, a step repeated). Three fits of each detector:

* ``files``: the workflow files alone, no dialogue (``fit(None)``);
* ``logs``: plus the first ``--logs`` conformant fit dialogues of each task, unlabelled (the
  assigner self-trains on them);
* ``logs-labelled``: the same dialogues with their gold step labels (``system_nodes``, from SGD's
  acts).

Detectors: ``wf`` (the default), ``wf-before`` (the detector before issue 44: no shared steps, no
self-training, no value variants, each task's threshold from its own dialogues with the
``upper_bound`` rule, no rule budget), and the workflow-free ``ss+nc`` (logs fits only).
Reported per fit: the Task 3 Score, false alarms (share of conformant test dialogues that alarm),
recall at or after the fork turn per edit (task switches: ``wic``+``gr``; inserted sub-goals:
``csc``; ``skip``; ``repeat``), and the node-assignment accuracy of the conformant test dialogues'
system turns against the gold acts, overall and per act.

Run: ``python benchmarks/bench_sgd_track.py`` (``--max-per-task 80`` by default; ``--sgd`` the SGD
folder). ``--reader crossfit`` (the default) reads each service's tasks with a step reader trained
without that service (the leave-services-out folds of ``reader/data.py``, the shipped recipe,
cached under benchmarks/out/sgd_track/readers): the shipped reader learned every SGD service, so it
would be tested on its training turns; ``--reader shipped`` does that, ``--reader none`` is cosine. Writes benchmarks/results/sgd_track.{json,md}; embeddings are cached in
benchmarks/out/sgd_track.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pickle
import shlex
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BEFORE = {
    "shared_steps": False,
    "self_training": False,
    "realise_values": 0,
    "threshold_rule": "upper_bound",
    "min_task_dialogues": 1,
    "rule_budget": False,
}
EDITS = {"switch": ("wic", "gr"), "insert": ("csc",), "skip": ("skip",), "repeat": ("repeat",)}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def strip(r: dict) -> dict:
    return {k: v for k, v in r.items() if k not in ("system_nodes", "system_node_tasks")}


def track_and_logs(sgd: str, seed: int, max_per_task: int, n_logs: int) -> tuple[Any, list, list, list]:
    """The sgd track, its conformant train dialogues, its test records and the logs fit set: the
    first ``n_logs`` conformant train dialogues of each task, labelled (:func:`strip` them for the
    unlabelled fit)."""
    from dialfork_dataset.tracks.sgd import build_sgd_track

    track = build_sgd_track(sgd, seed=seed, max_dialogues_per_task=max_per_task)
    train = [r for r in track.split("train") if r["edit"] is None]
    by_task: dict[str, list[dict]] = defaultdict(list)
    for r in train:
        by_task[r["task"]].append(r)
    logs = [r for t in sorted(by_task) for r in by_task[t][:n_logs]]
    return track, train, track.split("test"), logs


def embeddings(enc: Any, rows: list[dict], cache: Path) -> list[np.ndarray]:
    if cache.is_file():
        return pickle.loads(cache.read_bytes())
    E = [np.asarray(e, dtype=np.float32) for e in enc.encode_dialogues([r["turns"] for r in rows])]
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_bytes(pickle.dumps(E))
    return E


def crossfit_readers(sgd: str, star: str, folder: Path, epochs: int = 16, seed: int = 0) -> list[Any]:
    """One step reader per leave-services-out fold (reader/data.py FOLDS), trained with the shipped
    recipe (``python -m dialfork_metrics.task3.workflow.reader train``) without the fold's services;
    fold f's reader is calibrated on the other folds' readers' held-out turns (never on f's services).
    Cached under ``folder/fold<i>`` (the embeddings under benchmarks/out/reader/emb)."""
    from dialfork_metrics.task3.workflow.reader import data as D
    from dialfork_metrics.task3.workflow.reader import train as T
    from dialfork_metrics.task3.workflow.reader.steps import StepReader

    dirs = [folder / f"fold{i}" for i in range(len(D.FOLDS))]
    if all((d / "config.json").is_file() for d in dirs):
        return [StepReader.from_pretrained(d) for d in dirs]
    from dialfork_dataset.star import StarCorpus
    from dialfork_dataset.tracks.sgd import WORKFLOWS_DIR
    from dialfork_dataset.workflow.files import WorkflowCorpus
    from dialfork_metrics.encoders import get_encoder
    from dialfork_metrics.task3.workflow.reader.steps import encoder_fingerprint

    t0 = time.perf_counter()
    enc = get_encoder("minilm", cache_dir=str(ROOT / "benchmarks" / "out" / "reader" / "emb"))
    rows = D.sgd_turns(sgd)
    wf_rows = D.star_workflow_turns(star) + D.file_phrasings()
    texts = list(dict.fromkeys(r.text for r in rows + wf_rows if r.text))
    vec = dict(zip(texts, D.embed(texts, enc)))
    sa = T.assigner_for(WorkflowCorpus(WORKFLOWS_DIR), enc)
    tables = {**T.tables_of(sa), **T.tables_of(T.assigner_for(StarCorpus(star), enc))}
    fp = encoder_fingerprint(enc)
    readers = T.fold_readers(rows, wf_rows, tables, vec.__getitem__, fingerprint=fp, epochs=epochs, seed=seed)
    held = []
    for f, rd in zip(D.FOLDS, readers):
        out = [r for r in rows if r.service in f and r.step is not None]
        steps = T.read_rows(rd, sa, out, vec.__getitem__)[0]
        p = T.raw_confidence(rd, sa, out, vec.__getitem__)
        held.append((p, np.array([s == r.step for s, r in zip(steps, out)])))
        log(f"fold reader {','.join(f)}: held-out step accuracy {100 * held[-1][1].mean():.1f}%")
    for i, (rd, d) in enumerate(zip(readers, dirs)):
        others = [h for j, h in enumerate(held) if j != i]
        p, ok = np.concatenate([h[0] for h in others]), np.concatenate([h[1] for h in others])
        keep = np.isfinite(p)  # a turn kept on a generic phrasing has no reader probability
        rd.calibrate(p[keep], ok[keep])
        rd.info_.update({"held_out_services": list(D.FOLDS[i]), "human_rows": 0})
        rd.save_pretrained(d)
    log(f"trained {len(readers)} fold readers in {time.perf_counter() - t0:.0f} s")
    return [StepReader.from_pretrained(d) for d in dirs]


def crossfit_slot_readers(sgd: str, folder: Path, seed: int = 0) -> list[Any]:
    """One slot reader per fold of reader/data.py FOLDS, trained as the shipped one
    (``python -m dialfork_metrics.task3.workflow.reader.slots train``: every SGD user turn read with
    and without its asked slots) without the fold's services. Cached under ``folder/slots<i>``; the
    user turns' embeddings under benchmarks/out/sgd_track/slot_emb."""
    import dataclasses

    from dialfork_metrics.task3.workflow.reader import slots as S
    from dialfork_metrics.task3.workflow.reader.data import FOLDS

    dirs = [folder / f"slots{i}" for i in range(len(FOLDS))]
    if all((d / S.CONFIG_FILE).is_file() for d in dirs):
        return [S.SlotReader.from_pretrained(d) for d in dirs]
    from dialfork_dataset.tracks.sgd import read_sgd
    from dialfork_metrics.encoders import get_encoder

    t0 = time.perf_counter()
    enc = get_encoder("minilm", cache_dir=str(folder.parent / "slot_emb"))
    corpus = read_sgd(sgd)
    slots_of = S.sgd_slot_infos(corpus.schema)
    turns = S.sgd_user_turns(corpus)
    Xk, pairs = S.pair_features(enc, turns, slots_of)
    Xu, _ = S.pair_features(enc, [dataclasses.replace(t, asked=None) for t in turns], slots_of)
    y = np.array([s.name in turns[i].given for i, s in pairs], dtype=np.int64)
    svc = np.array([turns[i].service for i, _ in pairs])
    log(f"slot features of {len(turns)} user turns in {time.perf_counter() - t0:.0f} s")
    for fold, d in zip(FOLDS, dirs):
        tr = ~np.isin(svc, fold)
        arrays = S.SlotReader.train_arrays(np.vstack([Xk[tr], Xu[tr]]), np.concatenate([y[tr], y[tr]]), seed)
        meta = {"held_out_services": list(fold), "services": sorted(set(svc[tr])), "seed": seed}
        S.SlotReader(arrays, S._fingerprint(enc, "minilm"), enc, meta=meta).save_pretrained(d)
    log(f"trained {len(dirs)} fold slot readers in {time.perf_counter() - t0:.0f} s")
    return [S.SlotReader.from_pretrained(d) for d in dirs]


@contextlib.contextmanager
def readers_as(step: Any = "shipped", slot: Any = "shipped"):
    """Within, every consumer of the shipped step (slot) reader gets ``step`` (``slot``): a reader
    object, ``"shipped"`` (unchanged) or None (off: cosine steps; the tracker without the slot reader)."""
    from dialfork_metrics.task3.workflow.nodes import NodeAssigner
    from dialfork_metrics.task3.workflow.reader import slots as S
    from dialfork_metrics.task3.workflow.reader import steps as R

    saved = (dict(R._DEFAULT), list(S._DEFAULT), NodeAssigner._resolve_reader)
    try:
        if step is None:
            NodeAssigner._resolve_reader = lambda self: setattr(self, "reader_", None)
        elif step != "shipped":
            R._DEFAULT["r"] = step
        if slot not in (None, "shipped"):
            S._DEFAULT[:] = [slot]
        yield
    finally:
        R._DEFAULT.clear()
        R._DEFAULT.update(saved[0])
        S._DEFAULT[:] = saved[1]
        NodeAssigner._resolve_reader = saved[2]


def act_of(steps: dict[str, dict[str, str]], task: str, node: str) -> str:
    for act, n in steps.get(task, {}).items():
        if n == node:
            return act
    return "REQUEST" if "_ask_" in node else "other"


def node_hits(det: Any, test: list[dict], E: list[np.ndarray], steps: dict, hit: dict) -> None:
    """Add the node-assignment hits of the conformant test dialogues' system turns to ``hit``."""
    for r, e in zip(test, E):
        if r["edit"] is not None:
            continue
        rows = [i for i, t in enumerate(r["turns"]) if t["speaker"] == "system"]
        a = det.assigner_.assign(r["task"], e[rows], [r["turns"][i]["text"] for i in rows])
        for got, g in zip(a.best, r["system_nodes"]):
            for key in ("all", act_of(steps, r["task"], g)):
                hit[key][0] += got == g
                hit[key][1] += 1


def evaluate(
    det: Any,
    test: list[dict],
    E: list[np.ndarray],
    steps: dict,
    preds: list[int | None] | None = None,
    hit: dict | None = None,
) -> dict:
    """The figures of one fit (``preds`` and ``hit`` given: gathered over the crossfit folds)."""
    from dialfork_metrics.task3 import score_predictions

    if preds is None:
        preds = det.predict_many(test, embeddings=E)
    gold = [
        {k: r[k] for k in ("dialogue_id", "num_system_turns", "hallucination_type", "fork_turn")}
        for r in test
    ]
    sc = score_predictions({r["dialogue_id"]: p for r, p in zip(test, preds)}, gold)
    by: dict[str, list[tuple[int | None, int]]] = defaultdict(list)
    for r, p in zip(test, preds):
        by["conformant" if r["edit"] is None else r["edit"]].append((p, r["fork_turn"]))
    out: dict[str, Any] = {
        "score": sc["score"],
        "components": sc["components"],
        "mae_h": sc["mae_h"],
        "mae_c": sc["mae_c"],
        "false_alarms": float(np.mean([p is not None for p, _ in by["conformant"]])),
        "n_conformant": len(by["conformant"]),
    }
    for name, edits in EDITS.items():
        rows = [x for e in edits for x in by[e]]
        out[name] = float(np.mean([p is not None and p >= tk for p, tk in rows])) if rows else None
        out[f"{name}_exact"] = float(np.mean([p == tk for p, tk in rows])) if rows else None
        out[f"n_{name}"] = len(rows)
    if hit is None and hasattr(det, "assigner_"):
        hit = defaultdict(lambda: [0, 0])
        node_hits(det, test, E, steps, hit)
    if hit:
        out["node_accuracy"] = {k: v[0] / v[1] for k, v in sorted(hit.items())}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sgd", default=os.environ.get("DIALFORK_SGD_DIR", str(ROOT.parent / "shared" / "sgd")))
    ap.add_argument("--max-per-task", type=int, default=80)
    ap.add_argument("--logs", type=int, default=20, help="conformant fit dialogues per task of the logs fits")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--detectors", default="wf-before,wf,ss+nc")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "out" / "sgd_track"))
    ap.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "sgd_track.json"))
    ap.add_argument("--md", default=str(ROOT / "benchmarks" / "results" / "sgd_track.md"))
    ap.add_argument(
        "--reader",
        choices=("crossfit", "shipped", "none"),
        default="crossfit",
        help="the wf detectors' step reader: crossfit (default: each service's tasks are read by a reader "
        "trained without that service, reader/data.py FOLDS), shipped (trained on every SGD service: "
        "optimistic), none (cosine)",
    )
    ap.add_argument(
        "--slot-reader",
        choices=("crossfit", "shipped", "none"),
        default="crossfit",
        help="the wf detectors' slot reader: crossfit (default, the folds of --reader crossfit), shipped, "
        "none (the hand patterns)",
    )
    ap.add_argument(
        "--star", default=os.environ.get("DIALFORK_STAR_DIR", str(ROOT.parent / "shared" / "star"))
    )
    args = ap.parse_args(argv)
    command = "python benchmarks/bench_sgd_track.py" + "".join(
        " " + shlex.quote(a) for a in (argv or sys.argv[1:])
    )
    from dialfork_dataset.sources import open_source
    from dialfork_dataset.tracks.sgd import SGD_TASKS, WORKFLOWS_DIR
    from dialfork_metrics.task3 import make_detector
    from dialfork_metrics.task3.streaming._common import resolve_encoder

    t0 = time.perf_counter()
    load0 = round(os.getloadavg()[0], 2)
    track, train, test, logs = track_and_logs(args.sgd, args.seed, args.max_per_task, args.logs)
    source = open_source(f"workflow:{WORKFLOWS_DIR}")
    steps = {t.name: dict(t.steps) for t in SGD_TASKS}
    enc = resolve_encoder("minilm")
    tag = f"s{args.seed}-m{args.max_per_task}"
    E_test = embeddings(enc, test, Path(args.out) / f"test-{tag}.pkl")
    E_logs = embeddings(enc, logs, Path(args.out) / f"logs-{tag}-{args.logs}.pkl")
    log(f"track: {len(train)} conformant fit dialogues, {len(test)} test records; logs: {len(logs)}")
    service = {t.name: t.service for t in SGD_TASKS}
    from dialfork_metrics.task3.workflow.detector import WorkflowDetector
    from dialfork_metrics.task3.workflow.reader.data import FOLDS

    has_slots = "slot_reader" in WorkflowDetector().get_params()
    readers: list[Any] = []
    slot_readers: list[Any] = ["shipped"] * len(FOLDS)
    crossfit = args.reader == "crossfit" or (has_slots and args.slot_reader == "crossfit")
    if crossfit:
        missing = sorted({service[r["task"]] for r in test} - {s for f in FOLDS for s in f})
        if missing:
            raise SystemExit(f"bench_sgd_track: no crossfit fold holds service(s) {', '.join(missing)}")
    readers = [None if args.reader == "none" else "shipped"] * len(FOLDS)
    if args.reader == "crossfit":
        readers = crossfit_readers(args.sgd, args.star, Path(args.out) / "readers", seed=args.seed)
    if has_slots and args.slot_reader == "crossfit":
        slot_readers = crossfit_slot_readers(args.sgd, Path(args.out) / "readers", seed=args.seed)
    # the readers are opt-in on wf (step_reader / slot_reader, default None): a mode other than none
    # turns them on, and readers_as() then hands each fold its own
    wf_extra: dict[str, Any] = {"step_reader": None if args.reader == "none" else "auto"}
    if has_slots:
        wf_extra["slot_reader"] = None if args.slot_reader == "none" else "auto"
    results: dict[str, Any] = {
        "command": command,
        "track": {k: track.stats[k] for k in ("conformant", "forks_by_edit", "excluded") if k in track.stats},
        "logs_per_task": args.logs,
        "reader": args.reader,
        "slot_reader": args.slot_reader if has_slots else "not wired",
        "fits": {},
    }
    for name in [d.strip() for d in args.detectors.split(",") if d.strip()]:
        for fit in ("files", "logs", "logs-labelled"):
            if fit == "files" and name == "ss+nc":
                continue
            if name == "ss+nc":
                det = make_detector("ss+nc", encoder=enc)
            else:
                det = make_detector(
                    "wf", workflow=source, encoder=enc, **(BEFORE if name == "wf-before" else {}), **wf_extra
                )
            tf = time.perf_counter()
            rows = None if fit == "files" else logs if fit == "logs-labelled" else [strip(r) for r in logs]
            if name == "ss+nc" or not crossfit:
                with readers_as(None if args.reader == "none" else "shipped"):
                    det.fit(rows, embeddings=None if rows is None else E_logs)
                    res = evaluate(det, test, E_test, steps)
            else:  # one fit per fold, each with its fold's reader; figures over every fold's tasks
                preds: list[int | None] = [None] * len(test)
                hit: dict[str, list[int]] = defaultdict(lambda: [0, 0])
                for fold, rd, srd in zip(FOLDS, readers, slot_readers):
                    ix = [i for i, r in enumerate(test) if service[r["task"]] in fold]
                    if not ix:
                        continue
                    with readers_as(rd, srd):
                        det = make_detector(
                            "wf",
                            workflow=source,
                            encoder=enc,
                            **(BEFORE if name == "wf-before" else {}),
                            **wf_extra,
                        )
                        det.fit(rows, embeddings=None if rows is None else E_logs)
                        sub, E_sub = [test[i] for i in ix], [E_test[i] for i in ix]
                        for i, p in zip(ix, det.predict_many(sub, embeddings=E_sub)):
                            preds[i] = p
                        node_hits(det, sub, E_sub, steps, hit)
                res = evaluate(det, test, E_test, steps, preds=preds, hit=hit)
            res["fit_seconds"] = round(time.perf_counter() - tf, 1)
            if hasattr(det, "operating_point_"):
                res["rules_off"] = sorted(getattr(det, "rules_off_", ()))
                res["expected_false_alarms"] = {
                    t: v.get("expected_false_alarm_rate") for t, v in det.operating_point_.items()
                }
            results["fits"][f"{fit}/{name}"] = res
            log(f"{fit}/{name}: score {res['score']:.1f}, FA {res['false_alarms']:.3f}")
    results["seconds"] = round(time.perf_counter() - t0, 1)
    results["loadavg"] = [load0, round(os.getloadavg()[0], 2)]
    Path(args.json).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    Path(args.md).write_text(markdown(results), encoding="utf-8")
    log(f"wrote {args.json} and {args.md}")
    return 0


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def markdown(res: dict) -> str:
    lines = [
        "# Task 3 on the sgd track (workflows a user wrote)",
        "",
        f"Command: `{res['command']}` ({res['seconds']:.0f} s; load average {res['loadavg']}).",
        f"Logs fits: {res['logs_per_task']} conformant fit dialogues per task. Recall is at or after the fork "
        "turn; exact: at it.",
        "",
        "Step reader of the wf detectors: "
        + {
            "crossfit": "crossfit (each service's tasks are read by a reader trained without that service: "
            "the leave-services-out folds of reader/data.py, the shipped recipe; one fit per fold).",
            "shipped": "the shipped one (trained on every SGD service, the evaluated ones included).",
            "none": "none (cosine).",
        }.get(res.get("reader", "shipped"), "?")
        + " Slot reader: "
        + {
            "crossfit": "crossfit (the same folds).",
            "shipped": "the shipped one (trained on every SGD service).",
            "none": "off (the hand patterns).",
            "not wired": "not wired into the detector at this commit (hand patterns).",
        }.get(res.get("slot_reader", "not wired"), "?"),
        "",
        "| fit / detector | Score | false alarms | switches | (exact) | inserted sub-goals | (exact) | skip | repeat "
        "| node accuracy |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for key, r in res["fits"].items():
        acc = r.get("node_accuracy", {}).get("all")
        lines.append(
            f"| {key} | {r['score']:.1f} | {pct(r['false_alarms'])} | {pct(r['switch'])} | {pct(r['switch_exact'])} "
            f"| {pct(r['insert'])} | {pct(r['insert_exact'])} | {pct(r['skip'])} | {pct(r['repeat'])} | {pct(acc)} |"
        )
    acts = sorted({a for r in res["fits"].values() for a in r.get("node_accuracy", {}) if a != "all"})
    lines += [
        "",
        "Node-assignment accuracy per gold act (conformant test dialogues):",
        "",
        "| fit / detector | " + " | ".join(acts) + " |",
        "| --- | " + " | ".join("---:" for _ in acts) + " |",
    ]
    for key, r in res["fits"].items():
        if "node_accuracy" in r:
            lines.append(f"| {key} | " + " | ".join(pct(r["node_accuracy"].get(a)) for a in acts) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
