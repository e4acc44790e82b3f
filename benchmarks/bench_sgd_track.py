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
folder). Writes benchmarks/results/sgd_track.{json,md}; embeddings are cached in
benchmarks/out/sgd_track.
"""

from __future__ import annotations

import argparse
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


def embeddings(enc: Any, rows: list[dict], cache: Path) -> list[np.ndarray]:
    if cache.is_file():
        return pickle.loads(cache.read_bytes())
    E = [np.asarray(e, dtype=np.float32) for e in enc.encode_dialogues([r["turns"] for r in rows])]
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_bytes(pickle.dumps(E))
    return E


def act_of(steps: dict[str, dict[str, str]], task: str, node: str) -> str:
    for act, n in steps.get(task, {}).items():
        if n == node:
            return act
    return "REQUEST" if "_ask_" in node else "other"


def evaluate(det: Any, test: list[dict], E: list[np.ndarray], steps: dict) -> dict:
    from dialfork_metrics.task3 import score_predictions

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
    if hasattr(det, "assigner_"):
        hit: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for r, e in zip(test, E):
            if r["edit"] is not None:
                continue
            rows = [i for i, t in enumerate(r["turns"]) if t["speaker"] == "system"]
            a = det.assigner_.assign(r["task"], e[rows], [r["turns"][i]["text"] for i in rows])
            for got, g in zip(a.best, r["system_nodes"]):
                for key in ("all", act_of(steps, r["task"], g)):
                    hit[key][0] += got == g
                    hit[key][1] += 1
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
    args = ap.parse_args(argv)
    command = "python benchmarks/bench_sgd_track.py" + "".join(
        " " + shlex.quote(a) for a in (argv or sys.argv[1:])
    )
    from dialfork_dataset.sources import open_source
    from dialfork_dataset.tracks.sgd import SGD_TASKS, WORKFLOWS_DIR, build_sgd_track
    from dialfork_metrics.task3 import make_detector
    from dialfork_metrics.task3.streaming._common import resolve_encoder

    t0 = time.perf_counter()
    load0 = round(os.getloadavg()[0], 2)
    track = build_sgd_track(args.sgd, seed=args.seed, max_dialogues_per_task=args.max_per_task)
    source = open_source(f"workflow:{WORKFLOWS_DIR}")
    steps = {t.name: dict(t.steps) for t in SGD_TASKS}
    enc = resolve_encoder("minilm")
    train = [r for r in track.split("train") if r["edit"] is None]
    test = track.split("test")
    by_task: dict[str, list[dict]] = defaultdict(list)
    for r in train:
        by_task[r["task"]].append(r)
    logs = [r for t in sorted(by_task) for r in by_task[t][: args.logs]]
    tag = f"s{args.seed}-m{args.max_per_task}"
    E_test = embeddings(enc, test, Path(args.out) / f"test-{tag}.pkl")
    E_logs = embeddings(enc, logs, Path(args.out) / f"logs-{tag}-{args.logs}.pkl")
    log(f"track: {len(train)} conformant fit dialogues, {len(test)} test records; logs: {len(logs)}")
    results: dict[str, Any] = {
        "command": command,
        "track": {k: track.stats[k] for k in ("conformant", "forks_by_edit", "excluded") if k in track.stats},
        "logs_per_task": args.logs,
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
                    "wf", workflow=source, encoder=enc, **(BEFORE if name == "wf-before" else {})
                )
            tf = time.perf_counter()
            if fit == "files":
                det.fit(None)
            else:
                rows = logs if fit == "logs-labelled" else [strip(r) for r in logs]
                det.fit(rows, embeddings=E_logs)
            res = evaluate(det, test, E_test, steps)
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
