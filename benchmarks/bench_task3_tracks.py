"""Task 3 detectors on three tracks: the template test split and STAR's human text (picked, typed).

Issue 39, items 2 and 4. Tracks (same tasks everywhere):

* ``template``: the test split (conformant dialogues + forks) of a template corpus generated here
  (``python -m generation --backend template --prefix-mode reword``);
* ``human-picked`` / ``human-typed``: the test split of the star-human track
  (``dialfork_dataset.tracks.star_human.build_star_human_track``, variant ``picked`` / ``typed``, seed 0).

Fits:

* ``no-human``: every detector fitted on the template train split's conformant dialogues (``wf``
  also reads the workflow, STAR's task files; ``wf-sup`` also the template train forks), evaluated
  on all three tracks;
* ``human``: fitted on the star-human ``picked`` train split (conformant; ``wf-sup`` with its
  forks), evaluated on the two human tracks.

Each detector is built from its registry entry (``DetectorSpec.build_from``: the encoder, and the
workflow where the entry needs one); one that cannot be built (an import or option error) is skipped
with a note. A detector whose entry needs ``forks`` (``wf-sup``, supervised,
:mod:`dialfork_metrics.task3.supervised.detector`) is trained on labelled forks, so it is always
evaluated on tasks held out of its training: the tasks are split in two halves, it is fitted on one
half and predicts the other, both ways.

Per (fit, track, detector):

* at the detector's own operating point (5% false alarms on its fit dialogues): Score (SPEC 8), the
  false-alarm rate on the track's conformant dialogues, and per type the recall at t_k (first alarm
  exactly at t_k), the recall at or after t_k, and the median delay (first alarm - t_k over the forks
  whose first alarm is at or after t_k);
* threshold-free: every detector gives each system turn a score, larger = more deviant, as its
  excess over its own task's threshold (``wf``: ``turn_deviations``; IT: ``log(theta / s_t)``, SS:
  ``s_t - theta`` with ``s_t`` the streaming statistic of ``streaming.turn_scores``, a system turn
  taking the largest excess of its positions); one threshold is read off the track's conformant
  dialogues (their largest turn score) so that at most 1% (5%) of them alarm, and the recall of a
  type is the share of its forks whose first turn above that threshold is at or after t_k.

Star-human SSPC is reported as two rows (``SSPC-skip``, ``SSPC-repeat``). Item 2: node assignment
accuracy against STAR's action labels on the held-out human turns (test split, picked and typed) and
the share of other tasks' turns rejected. Latency: p50/p95 per-turn wall time of a streaming update
(``wf`` and ``ss+nc``) including encoding the turn's text (a warm model, no embedding cache).

Stages keep their results in ``--out`` (JSON, fitted detectors, the embedding cache); a rerun reuses
them (``--redo STAGE`` recomputes one). Usage::

    python benchmarks/bench_task3_tracks.py [--star ../shared/star] [--tasks ...] [--per-task 12]
        [--detectors it,ss+nc,wf,wf-sup] [--out benchmarks/out/task3_tracks]
        [--json benchmarks/results/task3_tracks.json] [--md benchmarks/results/task3_tracks.md]
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import os
import platform
import re
import shlex
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

DEFAULT_TASKS = (
    "weather,doctor_schedule,apartment_schedule,bank_balance,ride_book,trivia,hotel_book,restaurant_book"
)
TRACKS = ("template", "human-picked", "human-typed")
FITS = {"no-human": TRACKS, "human": ("human-picked", "human-typed")}
RATES = (0.01, 0.05)
#: Row order of the paper's four types, star-human SSPC split by its edit (a type registered at run
#: time follows them).
WHAT = ("question", "outcome", "greeting/closing", "other")
"""What a star-human SSPC edit skipped or repeated, by the step's role (dialfork_dataset.workflow.roles)."""
TYPE_ORDER = (
    "WIC",
    "GR",
    "CSC",
    "SSPC",
    "SSPC-skip",
    *(f"SSPC-skip/{w}" for w in WHAT),
    "SSPC-repeat",
    *(f"SSPC-repeat/{w}" for w in WHAT),
)
#: ``wf`` before the dialogue state (its role-free rules only), run beside it for the before/after table.
BEFORE = "wf-before"
#: Benchmark-only variants of a registered detector: name -> (registered name, constructor options).
#: ``wf-patterns``: the slot patterns alone, without the learned slot reader (``wf``'s default); ``wf+step``:
#: the learned step reader turned on as well (issue 50; the shipped readers never saw STAR's human dialogues).
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    BEFORE: ("wf", {"state_rules": False}),
    "wf-patterns": ("wf", {"slot_reader": None}),  # the slot patterns alone (the default before 2026-12-05)
    "wf+step": ("wf", {"step_reader": "auto"}),  # both readers (the slot reader is the default)
}


def code_state() -> dict[str, Any]:
    """The commit the run started from and the library files that differed from it (uncommitted work)."""

    def git(*a: str) -> str:
        try:
            return subprocess.run(
                ["git", *a], cwd=ROOT, capture_output=True, text=True, check=True
            ).stdout.rstrip("\n")
        except (OSError, subprocess.CalledProcessError):
            return ""

    dirty = [
        line[3:]
        for line in git(
            "status",
            "--porcelain",
            "--",
            "dialfork_metrics/task3",
            "dialfork_metrics/encoders",
            "dialfork_dataset",
            "generation",
        ).splitlines()
        if line.strip()
    ]
    return {"commit": git("rev-parse", "--short", "HEAD").strip() or None, "uncommitted": dirty}


def star_default() -> str:
    env = os.environ.get("DIALFORK_STAR_DIR")
    return env if env else str(ROOT.parent / "shared" / "star")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def write_json(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------- data
def type_key(r: dict) -> str | None:
    """The row a dialogue is reported under: its type; star-human SSPC split by its edit."""
    h = r.get("hallucination_type")
    if h == "SSPC" and r.get("edit") in ("skip", "repeat"):
        return f"SSPC-{r['edit']}"
    return h


def load_tracks(
    args: argparse.Namespace, out: Path
) -> tuple[dict[str, list[dict]], dict[str, list[dict]], dict]:
    """(tracks: name -> test records, fit sets: fit -> train records (conformant + forks), info)."""
    from dialfork_dataset.tracks.star_human import build_star_human_track
    from dialfork_metrics.task3 import load_examples

    tpl = out / "template"
    if not (tpl / "manifest.json").is_file():
        cmd = [
            sys.executable,
            "-m",
            "generation",
            "--backend",
            "template",
            "--star",
            args.star,
            "--out",
            str(tpl),
            "--tasks",
            ",".join(args.tasks),
            "--per-task",
            str(args.per_task),
            "--seed",
            str(args.seed),
            "--prefix-mode",
            "reword",
            "--no-progress",
            "-q",
        ]
        log("generating the template corpus: " + " ".join(shlex.quote(c) for c in cmd))
        subprocess.run(cmd, check=True, cwd=ROOT)
    train_conf = load_examples(tpl, "train")
    test = load_examples(tpl, "test")
    train_ids = {r["dialogue_id"] for r in train_conf}
    raw = []
    for f in sorted(tpl.glob("*.jsonl")):
        raw.extend(json.loads(line) for line in f.read_text(encoding="utf-8").splitlines() if line.strip())
    train_forks = [
        {
            k: r.get(k)
            for k in (
                "dialogue_id",
                "turns",
                "num_system_turns",
                "hallucination_type",
                "fork_position",
                "fork_turn",
                "task",
            )
        }
        for r in raw
        if r["hallucination_type"] is not None and r.get("source_id") in train_ids
    ]
    tracks = {"template": test}
    fits = {"no-human": train_conf + train_forks}
    info: dict[str, Any] = {
        "template": {"train_conformant": len(train_conf), "train_forks": len(train_forks)}
    }
    for variant in ("picked", "typed"):
        tr = build_star_human_track(args.star, tasks=args.tasks, variant=variant, seed=args.seed)
        tracks[f"human-{variant}"] = tr.split("test")
        mark_what(tracks[f"human-{variant}"], args.star)
        info[f"human-{variant}"] = {
            "stats_forks": tr.stats["forks_by_edit"],
            "split": tr.stats["split"],
            "dropped": {k: v for k, v in tr.stats["dropped"].items()},
        }
        if variant == "picked":
            fits["human"] = tr.split("train")
    for name, rows in tracks.items():
        info.setdefault(name, {})["test_counts"] = count_rows(rows)
    info["fit_counts"] = {f: count_rows(rows) for f, rows in fits.items()}
    return tracks, fits, info


def what_of(roles: Any, node: str | None) -> str:
    """The :data:`WHAT` class of a step: question, outcome, greeting/closing or other."""
    r = roles.role_of(node) if roles is not None else None
    if r is None:
        return "other"
    if "outcome" in r.roles:
        return "outcome"
    if "question" in r.roles:
        return "question"
    if r.roles & {"greeting", "closing"}:
        return "greeting/closing"
    return "other"


def mark_what(rows: list[dict], star: str) -> None:
    """Set ``_what`` on the star-human SSPC forks: the role class of the step skipped (the source's
    system turn t_k) or repeated (the fork's system turn t_k)."""
    from dialfork_dataset.star import StarCorpus
    from dialfork_dataset.workflow.roles import derive_roles

    corpus = StarCorpus(star)
    roles = {t: derive_roles(corpus.task(t)) for t in sorted({r["task"] for r in rows})}
    src = {r["dialogue_id"]: r for r in rows if r.get("hallucination_type") is None}
    for r in rows:
        if r.get("edit") not in ("skip", "repeat"):
            continue
        tk = int(r["fork_turn"])
        nodes = (
            r["system_nodes"]
            if r["edit"] == "repeat"
            else (src.get(r.get("source_id")) or {}).get("system_nodes")
        )
        node = nodes[tk - 1] if nodes and len(nodes) >= tk else None
        r["_what"] = what_of(roles[r["task"]], node)


def count_rows(rows: list[dict]) -> dict[str, int]:
    c: dict[str, int] = defaultdict(int)
    for r in rows:
        c[type_key(r) or "conformant"] += 1
    return dict(c)


def conformant(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r.get("hallucination_type") is None]


def forks(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r.get("hallucination_type") is not None]


def embed(enc: Any, rows: list[dict]) -> list[np.ndarray]:
    return enc.encode_dialogues([r["turns"] for r in rows])


# ---------------------------------------------------------------------------------------- detectors
def spec_of(name: str) -> Any:
    """The registry entry of a detector (of the registered detector a :data:`VARIANTS` name varies)."""
    from dialfork_metrics.task3 import registry as detector_registry

    return detector_registry.get(VARIANTS.get(name, (name, {}))[0])


def make(name: str, args: argparse.Namespace, enc: Any, workflow: Any):
    """An unfitted detector, given the encoder and the workflow where its registry entry needs them."""
    options = VARIANTS.get(name, (name, {}))[1]
    return spec_of(name).build_from({"encoder": enc, "workflow": workflow}, **options)


def fit_detector(det: Any, name: str, rows: list[dict], embs: list[np.ndarray]) -> Any:
    """Fit on conformant rows (a detector that needs ``forks``: conformant + forks, however its ``fit``
    takes them)."""
    if "forks" not in spec_of(name).needs:
        idx = [i for i, r in enumerate(rows) if r.get("hallucination_type") is None]
        return det.fit([rows[i] for i in idx], embeddings=[embs[i] for i in idx])
    params = inspect.signature(det.fit).parameters
    if "forks" in params:
        ci = [i for i, r in enumerate(rows) if r.get("hallucination_type") is None]
        fi = [i for i, r in enumerate(rows) if r.get("hallucination_type") is not None]
        kw: dict[str, Any] = {"forks": [rows[i] for i in fi]}
        if "embeddings" in params:
            kw["embeddings"] = [embs[i] for i in ci]
        if "fork_embeddings" in params:
            kw["fork_embeddings"] = [embs[i] for i in fi]
        return det.fit([rows[i] for i in ci], **kw)
    if "embeddings" in params:
        return det.fit(rows, embeddings=embs)
    return det.fit(rows)


def turn_excess(det: Any, name: str, rows: list[dict], embs: list[np.ndarray]) -> list[list[float]]:
    """Per dialogue, per system turn: the excess over the detector's threshold of its task (alarm: > 0)."""
    if "workflow" in spec_of(name).needs:  # workflow-aware: its own per-turn deviations
        return [np.asarray(d, dtype=float).tolist() for d in det.turn_deviations(rows, embeddings=embs)]
    from dialfork_metrics.task3.streaming.decision import system_turn_index, turn_scores

    probs = det.turn_probabilities(rows, embeddings=embs)
    out = []
    for r, p in zip(rows, probs):
        m = det.for_task(r.get("task"))
        sys_idx = system_turn_index(r["turns"])
        s = turn_scores(p, m.method, sys_idx, m.position_weight_)
        with np.errstate(divide="ignore"):
            ex = (np.log(m.threshold_) - np.log(s)) if m.method == "it" else (s - m.threshold_)
        T = int(sum(t["speaker"] == "system" for t in r["turns"]))
        per = np.full(max(T, 1), -np.inf)
        for j, e in zip(sys_idx.tolist(), ex.tolist()):
            if not math.isnan(e):
                per[j - 1] = max(per[j - 1], e)
        out.append(per[:T].tolist() if T else [])
    return out


def first_above(xs: list[float], thr: float) -> int | None:
    for j, x in enumerate(xs, 1):
        if x > thr:
            return j
    return None


def task_halves(tasks: list[str]) -> list[list[str]]:
    ts = sorted(tasks)
    return [ts[0::2], ts[1::2]]


def run_fit_stage(
    name: str,
    fit: str,
    args: argparse.Namespace,
    enc: Any,
    workflow: Any,
    fits: dict[str, list[dict]],
    tracks: dict[str, list[dict]],
    out: Path,
) -> dict:
    """Fit ``name`` on ``fit``'s rows and score every track of the fit; kept in ``out/stages``."""
    path = out / "stages" / f"{fit}__{name}.json"
    cached = read_json(path)
    if cached is not None and not args.redo_stage(f"{fit}__{name}"):
        log(f"stage {fit}/{name}: reused {path}")
        return cached
    t0 = time.perf_counter()
    rows = fits[fit]
    embs = embed(enc, rows)
    # a detector fitted on forks (wf-sup): fitted per half of the tasks, predicting the other half
    on_forks = "forks" in spec_of(name).needs
    groups = (
        [(sorted(set(args.tasks)), sorted(set(args.tasks)))]
        if not on_forks
        else [(h, o) for h, o in zip(task_halves(args.tasks), task_halves(args.tasks)[::-1])]
    )
    result: dict[str, Any] = {
        "detector": name,
        "fit": fit,
        "tracks": {},
        "fit_seconds": 0.0,
        "models": [],
        "code": args.code,
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "loadavg_start": round(os.getloadavg()[0], 2),
    }
    per_track: dict[str, dict[str, Any]] = {t: {"excess": {}, "pred": {}} for t in FITS[fit]}
    for train_tasks, eval_tasks in groups:
        sel = [i for i, r in enumerate(rows) if r["task"] in train_tasks]
        det = make(name, args, enc, workflow)
        tf = time.perf_counter()
        fit_detector(det, name, [rows[i] for i in sel], [embs[i] for i in sel])
        result["fit_seconds"] += time.perf_counter() - tf
        tag = f"{fit}__{name}" + ("__" + "-".join(t[:4] for t in train_tasks) if on_forks else "")
        if spec_of(name).can_save:
            try:
                det.save(out / "models" / tag)
                result["models"].append(
                    {
                        "path": str((out / "models" / tag).relative_to(out)),
                        "train_tasks": train_tasks,
                        "eval_tasks": eval_tasks,
                    }
                )
            except Exception as e:  # a detector that cannot be saved is still scored
                log(f"  {tag}: not saved ({type(e).__name__}: {e})")
        for tname in FITS[fit]:
            trows = [r for r in tracks[tname] if r["task"] in eval_tasks]
            temb = embed(enc, trows)
            ex = turn_excess(det, name, trows, temb)
            preds = det.predict_many(trows, embeddings=temb)
            for r, e, p in zip(trows, ex, preds):
                per_track[tname]["excess"][r["dialogue_id"]] = e
                per_track[tname]["pred"][r["dialogue_id"]] = None if p is None else int(p)
    # consistency: the operating point's first alarm is the first turn with excess > 0
    for tname, d in per_track.items():
        mism = sum(first_above(d["excess"][k], 0.0) != d["pred"][k] for k in d["pred"])
        d["excess_vs_predict_mismatch"] = mism
        if mism:
            log(
                f"  {fit}/{name}/{tname}: {mism} dialogue(s) whose first excess > 0 differs from predict_many"
            )
    result["tracks"] = per_track
    result["seconds"] = time.perf_counter() - t0
    result["loadavg_end"] = round(os.getloadavg()[0], 2)
    write_json(path, result)
    log(f"stage {fit}/{name}: {result['seconds']:.0f} s")
    return result


# ---------------------------------------------------------------------------------------- metrics
def metrics(rows: list[dict], stage_track: dict) -> dict:
    from dialfork_metrics.task3 import score_predictions

    ids = [r["dialogue_id"] for r in rows if r["dialogue_id"] in stage_track["pred"]]
    byid = {r["dialogue_id"]: r for r in rows}
    rows = [byid[i] for i in ids]
    preds = {i: stage_track["pred"][i] for i in ids}
    gold = [
        {
            "dialogue_id": r["dialogue_id"],
            "num_system_turns": r["num_system_turns"],
            "hallucination_type": r["hallucination_type"],
            "fork_turn": r["fork_turn"],
        }
        for r in rows
    ]
    sc = score_predictions(preds, gold)
    conf = conformant(rows)
    fk = forks(rows)
    out: dict[str, Any] = {
        "score": sc["score"],
        "false_alarms": sc["cov_c"],
        "n_conformant": len(conf),
        "n_forks": len(fk),
        "mae_h": sc["mae_h"],
        "mae_c": sc["mae_c"],
        "cov_h": sc["cov_h"],
        "by_type": {},
    }
    # threshold-free: thresholds read off the conformant dialogues' largest turn score
    maxes = np.asarray([max(stage_track["excess"][r["dialogue_id"]], default=-np.inf) for r in conf])
    thr: dict[float, float] = {}
    for a in RATES:
        k = int(math.floor(a * len(maxes) + 1e-9))  # at most k conformant dialogues alarm
        srt = np.sort(maxes)[::-1]
        thr[a] = float(srt[k]) if k < len(srt) else -np.inf
        out[f"fa_at_{a}"] = float(np.mean(maxes > thr[a])) if len(maxes) else None
        out[f"threshold_at_{a}"] = thr[a]
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in fk:
        groups[type_key(r)].append(r)
        if r.get("_what"):
            groups[f"{type_key(r)}/{r['_what']}"].append(r)
    groups["all"] = fk
    for h, rs in groups.items():
        exact = after = 0
        delays = []
        for r in rs:
            p = preds[r["dialogue_id"]]
            tk = int(r["fork_turn"])
            if p is not None and p == tk:
                exact += 1
            if p is not None and p >= tk:
                after += 1
                delays.append(p - tk)
        row = {
            "n": len(rs),
            "recall_exact": exact / len(rs),
            "recall_at_or_after": after / len(rs),
            "median_delay": float(np.median(delays)) if delays else None,
            "premature": sum(
                preds[r["dialogue_id"]] is not None and preds[r["dialogue_id"]] < int(r["fork_turn"])
                for r in rs
            )
            / len(rs),
        }
        for a in RATES:
            hit = 0
            for r in rs:
                j = first_above(stage_track["excess"][r["dialogue_id"]], thr[a])
                hit += j is not None and j >= int(r["fork_turn"])
            row[f"recall_at_{a}"] = hit / len(rs)
        out["by_type"][h] = row
    return out


# ---------------------------------------------------------------------------------------- tracker
def _constraint_value(v: Any) -> str:
    """``'api.is_equal_to("Dr. Johnson")'`` / ``'"Alexis"'`` -> the bare value."""
    m = re.search(r"is_equal_to\((.*)\)", str(v))
    v = m.group(1) if m else str(v)
    return v.strip().strip('"').strip("'")


def gold_queries(star: str, ids: set[str]) -> dict[str, list[tuple[int, dict[str, str]]]]:
    """STAR's query events of the human dialogues ``ids`` (``star-<id>``): per dialogue, the number
    of turns (User utter and Wizard pick_suggestion with text) before each query and its constraints
    ``{api input: value}`` (``api.is_equal_to`` values only; range constraints left out)."""
    from dialfork_dataset.star import StarCorpus

    out: dict[str, list[tuple[int, dict[str, str]]]] = {}
    for d in StarCorpus(star).human_dialogues():
        did = f"star-{d['scenario_id']}"
        if did not in ids:
            continue
        n, qs = 0, []
        for e in d["events"]:
            text = (e.get("text") or "").strip()
            if (e.get("agent"), e.get("action")) in (
                ("User", "utter"),
                ("Wizard", "pick_suggestion"),
            ) and text:
                n += 1
            elif e.get("agent") == "Wizard" and e.get("action") == "query":
                cons = {}
                for c in e.get("constraints") or []:
                    for k, v in (c or {}).items():
                        if k != "RequestType" and ("is_equal_to" in str(v) or not str(v).startswith("api.")):
                            cons[k] = _constraint_value(v)
                if cons:
                    qs.append((n, cons))
        out[did] = qs
    return out


def tracker_stage(args: argparse.Namespace, tracks: dict[str, list[dict]]) -> dict:
    """The state tracker's accuracy at STAR's query events (held-out conformant human-picked
    dialogues, gold step labels): the share of the query's constraint slots the tracker had filled,
    and the share whose tracked text holds the gold value; per task and overall."""
    from dialfork_dataset.star import StarCorpus
    from dialfork_dataset.workflow.roles import derive_roles
    from dialfork_metrics.task3.workflow.state import tracker_accuracy

    corpus = StarCorpus(args.star)
    conf = [r for r in tracks["human-picked"] if r.get("hallucination_type") is None]
    gq = gold_queries(args.star, {r["dialogue_id"] for r in conf})
    roles = {t: derive_roles(corpus.task(t)) for t in args.tasks}
    out: dict[str, Any] = {"per_task": {}}
    for t in [*args.tasks, None]:
        rows = [r for r in conf if t is None or r["task"] == t]
        acc = tracker_accuracy(rows, roles, [gq.get(r["dialogue_id"], []) for r in rows])
        if t is None:
            out["all"] = acc
        else:
            out["per_task"][t] = acc
    return out


# ---------------------------------------------------------------------------------------- nodes
def node_stage(
    args: argparse.Namespace, enc: Any, workflow: Any, fits: dict, tracks: dict, out: Path
) -> dict:
    path = out / "stages" / "nodes.json"
    cached = read_json(path)
    if cached is not None and not args.redo_stage("nodes"):
        log(f"stage nodes: reused {path}")
        return cached
    from dialfork_metrics.task3.workflow.nodes import NodeAssigner

    t0 = time.perf_counter()
    human_train = conformant(fits["human"])
    assigners = {
        "workflow only": NodeAssigner(enc).fit(workflow),
        "workflow + human fit split": NodeAssigner(enc).fit(workflow, dialogues=human_train),
    }
    res: dict[str, Any] = {}
    for aname, na in assigners.items():
        generic = set(na.generic_)
        task_nodes = {t: set(na.task_nodes(t)) for t in args.tasks}
        for tname in ("human-picked", "human-typed"):
            conf = conformant(tracks[tname])
            E = embed(enc, conf)
            n = ok = rejected = unknown = 0
            n_ng = ok_ng = 0
            other_n = other_rej = 0
            for r, e in zip(conf, E):
                sys_rows = [k for k, t in enumerate(r["turns"]) if t["speaker"] == "system"]
                gold = list(r["system_nodes"])
                a = na.assign(r["task"], e[sys_rows])
                for g, p in zip(gold, a.nodes):
                    if g is None:
                        continue
                    n += 1
                    ok += p == g
                    rejected += p is None
                    unknown += g not in task_nodes[r["task"]]
                    if g not in generic:
                        n_ng += 1
                        ok_ng += p == g
                for other in args.tasks:
                    if other == r["task"]:
                        continue
                    keep = [
                        i
                        for i, g in enumerate(gold)
                        if g is not None and g not in generic and g not in task_nodes[other]
                    ]
                    if not keep:
                        continue
                    b = na.assign(other, e[[sys_rows[i] for i in keep]])
                    other_n += len(keep)
                    other_rej += sum(x is None for x in b.nodes)
            res[f"{aname}|{tname}"] = {
                "assigner": aname,
                "track": tname,
                "system_turns": n,
                "accuracy": ok / n if n else None,
                "rejected_own": rejected / n if n else None,
                "gold_not_in_workflow": unknown / n if n else None,
                "non_generic_turns": n_ng,
                "accuracy_non_generic": ok_ng / n_ng if n_ng else None,
                "other_task_turns": other_n,
                "other_task_rejected": other_rej / other_n if other_n else None,
                "min_similarity": na.min_similarity,
                "reject_margin": na.reject_margin,
            }
    res["seconds"] = time.perf_counter() - t0
    write_json(path, res)
    log(f"stage nodes: {res['seconds']:.0f} s")
    return res


# ---------------------------------------------------------------------------------------- latency
def latency_configs(spec: str) -> list[tuple[str, int]]:
    """``"torch:2,torch:1,onnx:1"`` -> [(runtime, threads)]; threads 0: the machine's cores."""
    out = []
    for part in spec.split(","):
        rt, _, th = part.strip().partition(":")
        out.append((rt, int(th or 0) or (os.cpu_count() or 1)))
    return out


def time_stream(det: Any, fast: Any, dialogues: list[dict], n_turns: int) -> dict:
    """Per-turn wall time of encoding a turn's text and feeding it to a fresh stream per dialogue."""
    times: list[float] = []
    sys_times: list[float] = []
    enc_times: list[float] = []
    load_before = os.getloadavg()[0]
    for r in dialogues:
        if len(times) >= n_turns:
            break
        stream = det.start(r["task"])
        for t in r["turns"][: n_turns - len(times)]:
            t0 = time.perf_counter()
            e = fast.encode([t["text"]])[0]
            t1 = time.perf_counter()
            stream.update(t, embedding=e)
            dt = (time.perf_counter() - t0) * 1000
            times.append(dt)
            enc_times.append((t1 - t0) * 1000)
            if t["speaker"] == "system":
                sys_times.append(dt)
    upd = np.subtract(times, enc_times)
    return {
        "turns": len(times),
        "p50_ms": float(np.percentile(times, 50)),
        "p95_ms": float(np.percentile(times, 95)),
        "max_ms": float(max(times)),
        "system_turns": len(sys_times),
        "system_p95_ms": float(np.percentile(sys_times, 95)) if sys_times else None,
        "encode_p50_ms": float(np.percentile(enc_times, 50)),
        "encode_p95_ms": float(np.percentile(enc_times, 95)),
        "update_p50_ms": float(np.percentile(upd, 50)),
        "update_p95_ms": float(np.percentile(upd, 95)),
        "loadavg_before": round(load_before, 2),
        "loadavg_after": round(os.getloadavg()[0], 2),
    }


def latency_stage(args: argparse.Namespace, enc: Any, tracks: dict, stages: dict, out: Path) -> dict:
    """Streaming latency of ``wf`` and ``ss+nc`` (fitted without human dialogues) per encoder runtime
    and thread count: a warm model, no embedding cache, the human-picked test dialogues' turns in order."""
    path = out / "stages" / "latency.json"
    cached = read_json(path)
    if cached is not None and "configs" in cached and not args.redo_stage("latency"):
        log(f"stage latency: reused {path}")
        return cached
    import torch

    from dialfork_metrics.encoders import Encoder
    from dialfork_metrics.task3 import load_detector

    dialogues = tracks["human-picked"]
    res: dict[str, Any] = {"nproc": os.cpu_count(), "configs": {}}
    default_threads = torch.get_num_threads()
    for rt, th in latency_configs(args.latency_configs):
        torch.set_num_threads(th)
        key = f"{rt}, {th} thread{'s' if th > 1 else ''}"
        fast = (
            Encoder("minilm", model=enc.model, memory_cache_bytes=0, show_progress=False)
            if rt == "torch"
            else Encoder("minilm", memory_cache_bytes=0, show_progress=False, runtime=rt)
        )
        for _ in range(5):
            fast.encode(["warm-up turn for the timing"])
        res["configs"][key] = {}
        for name in ("wf", "ss+nc"):
            st = stages.get(("no-human", name))
            if not st or not st.get("models"):
                continue
            det = load_detector(out / st["models"][0]["path"], encoder=fast)
            v = res["configs"][key][name] = time_stream(det, fast, dialogues, args.latency_turns)
            log(
                f"latency {key} {name}: p50 {v['p50_ms']:.1f} ms, p95 {v['p95_ms']:.1f} ms "
                f"(encoding p95 {v['encode_p95_ms']:.1f} ms; load {v['loadavg_before']})"
            )
    torch.set_num_threads(default_threads)
    write_json(path, res)
    return res


# ---------------------------------------------------------------------------------------- report
def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def num(x: float | None, d: int = 1) -> str:
    return "-" if x is None else f"{x:.{d}f}"


def tables(results: dict) -> list[str]:
    lines: list[str] = []
    for fit, tr in FITS.items():
        for tname in tr:
            block = results["metrics"].get(fit, {}).get(tname)
            if not block:
                continue
            lines += [f"### fit {fit} / track {tname}", ""]
            any_m = next(iter(block.values()))
            types = [h for h in TYPE_ORDER if h in any_m["by_type"]]
            types += [h for h in any_m["by_type"] if h not in TYPE_ORDER and h != "all"] + [
                "all"
            ]  # a registered type
            lines.append(
                f"{any_m['n_conformant']} conformant dialogues, {any_m['n_forks']} forks "
                + "("
                + ", ".join(f"{h} {any_m['by_type'][h]['n']}" for h in types if h != "all")
                + ")."
            )
            lines.append("")
            lines.append(
                "| detector | Score | false alarms % | type | recall @1% FA | recall @5% FA "
                "| recall at t_k % | recall >= t_k % | premature % | median delay |"
            )
            lines.append("| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
            for det, m in block.items():
                for i, h in enumerate(types):
                    b = m["by_type"][h]
                    head = (
                        f"| {det} | {num(m['score'])} | {pct(m['false_alarms'])} |" if i == 0 else "| | | |"
                    )
                    lines.append(
                        f"{head} {h} | {pct(b['recall_at_0.01'])} | {pct(b['recall_at_0.05'])} | "
                        f"{pct(b['recall_exact'])} | {pct(b['recall_at_or_after'])} | {pct(b['premature'])} | "
                        f"{num(b['median_delay'])} |"
                    )
            fa = ", ".join(f"{d}: {pct(m['fa_at_0.01'])} / {pct(m['fa_at_0.05'])}" for d, m in block.items())
            lines += ["", f"Conformant dialogues alarming at the 1% / 5% thresholds (ties): {fa}.", ""]
    return lines


def summary_table(results: dict) -> list[str]:
    """One row per (fit, track, detector): the operating point and the threshold-free recalls."""
    lines = [
        "| fit | track | detector | Score | FA % | recall @1% FA | recall @5% FA | WIC @5% | GR @5% | CSC @5% "
        "| SSPC @5% (skip / repeat) | median delay |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for fit, tr in FITS.items():
        for tname in tr:
            for det, m in results["metrics"].get(fit, {}).get(tname, {}).items():
                bt = m["by_type"]

                def r5(h: str, bt: dict = bt) -> str:
                    return pct(bt[h]["recall_at_0.05"]) if h in bt else "-"

                sspc = r5("SSPC") if "SSPC" in bt else f"{r5('SSPC-skip')} / {r5('SSPC-repeat')}"
                lines.append(
                    f"| {fit} | {tname} | {det} | {num(m['score'])} | {pct(m['false_alarms'])} | "
                    f"{pct(bt['all']['recall_at_0.01'])} | {pct(bt['all']['recall_at_0.05'])} | {r5('WIC')} | "
                    f"{r5('GR')} | {r5('CSC')} | {sspc} | {num(bt['all']['median_delay'])} |"
                )
    return lines


def targets(results: dict) -> list[dict]:
    m = results["metrics"].get("no-human", {})
    lat = results.get("latency", {}).get("configs", {})

    def g(track: str, *keys: str) -> Any:
        x: Any = m.get(track, {}).get("wf")
        for k in keys:
            if x is None:
                return None
            x = x.get(k)
        return x

    rows = []

    def add(what: str, value: Any, ok: bool | None, shown: str) -> None:
        rows.append({"target": what, "value": value, "met": ok, "shown": shown})

    for t in ("human-picked", "human-typed"):
        v = g(t, "false_alarms")
        add(f"false alarms <= 5% on {t} conformant", v, None if v is None else v <= 0.05, pct(v) + "%")
    for t in TRACKS:
        for h, bar in (("WIC", 0.9), ("CSC", 0.7)):
            v = g(t, "by_type", h, "recall_at_0.05")
            add(
                f"{h} recall >= {int(bar * 100)}% at 5% FA ({t})",
                v,
                None if v is None else v >= bar,
                pct(v) + "%",
            )
        sspc = [k for k in ("SSPC", "SSPC-skip", "SSPC-repeat") if g(t, "by_type", k) is not None]
        for k in sspc:
            v = g(t, "by_type", k, "recall_at_0.05")
            add(f"{k} recall at 5% FA ({t}; aim >= 40%)", v, None if v is None else v >= 0.4, pct(v) + "%")
    for edit, bar in (("skip", 0.5), ("repeat", 0.6)):
        whats = ("question", "outcome") if edit == "skip" else WHAT
        n = hit = 0
        for w in whats:
            b = g("human-picked", "by_type", f"SSPC-{edit}/{w}")
            if b:
                n += b["n"]
                hit += b["recall_at_0.05"] * b["n"]
        v = hit / n if n else None
        what = "a question or outcome step" if edit == "skip" else "a step"
        add(
            f"human-picked {edit} of {what}: recall >= {int(bar * 100)}% at 5% FA (issue 43)",
            v,
            None if v is None else v >= bar,
            pct(v) + "%",
        )
    v = g("template", "by_type", "SSPC", "recall_at_0.05")
    add("template SSPC recall >= 60% at 5% FA (issue 43)", v, None if v is None else v >= 0.6, pct(v) + "%")
    for t, bar in (("human-picked", 70), ("template", 80)):
        v = g(t, "score")
        add(f"Score >= {bar} on {t}", v, None if v is None else v >= bar, num(v))
    v = g("template", "by_type", "all", "recall_at_0.01")
    add("recall at 1% FA >= 0.6 on template test", v, None if v is None else v >= 0.6, num(v, 3))
    for key, dets in lat.items():
        v = dets.get("wf", {}).get("p95_ms")
        add(
            f"p95 per-turn latency <= 100 ms (streaming wf, encoding included; {key})",
            v,
            None if v is None else v <= 100,
            num(v) + " ms",
        )
    return rows


def tracker_lines(tr: dict | None) -> list[str]:
    """The state tracker's section of the report (:func:`tracker_stage`)."""
    if not tr:
        return []
    lines = [
        "## Dialogue state tracker against STAR's query constraints (held-out human-picked dialogues)",
        "",
        "| task | queries | constraint slots | filled at the query % | gold value in the tracked text % "
        "| answered / volunteered |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for t, a in [*tr["per_task"].items(), ("all", tr["all"])]:
        how = a.get("by_how", {})
        lines.append(
            f"| {t} | {a['n_queries']} | {a['n_slots']} | {pct(a['filled'])} | {pct(a['value_match'])} | "
            f"{how.get('answered', 0)} / {how.get('volunteered', 0)} |"
        )
    lines += [
        "",
        "Tracked with the gold step labels (STAR's action labels), so this measures the tracker, not the "
        "node assigner. Constraint slots: the query's `is_equal_to` constraints whose API input a "
        "question step's slot maps to (dialfork_dataset.workflow.roles, rule 4); filled: the tracker had the slot "
        "answered or volunteered before the query; gold value in the tracked text: the constraint's value "
        "appears in the user text that filled it.",
        "",
    ]
    return lines


def write_md(results: dict, path: Path) -> None:
    r = results
    lines = [
        "# Task 3 detectors on three tracks (issue 39, items 2 and 4)",
        "",
        "Written by `benchmarks/bench_task3_tracks.py`. Command:",
        "",
        "```",
        r["command"],
        "```",
        "",
        f"Machine: {r['machine']['nproc']} CPU cores (nproc), shared with other jobs; load average (1 min) "
        f"{r['machine']['loadavg_start']} at the start and {r['machine']['loadavg_end']} at the end of the invocation "
        "that assembled this report, and per stage: "
        + ", ".join(
            f"{k} {v[0]}-{v[1]} ({r['stage_seconds'].get(k, 0):.0f} s)"
            for k, v in r.get("stage_loadavg", {}).items()
        )
        + f"; Python {r['machine']['python']}; encoder {r['encoder']}. "
        f"Tasks: {', '.join(r['tasks'])}.",
        "",
        f"Code: commit {r['code']['commit']}"
        + (
            f", with uncommitted changes in {', '.join(r['code']['uncommitted'])}"
            if r["code"]["uncommitted"]
            else ""
        )
        + " (at the start of the invocation that assembled this report).",
        "",
    ]
    codes = {json.dumps(c, sort_keys=True) for c in r.get("stage_code", {}).values()}
    if codes != {json.dumps(r["code"], sort_keys=True)}:
        lines += [
            "Code of each stage (at the start of the process that ran it; a stage reused from an earlier "
            "invocation keeps its own; `null`: not recorded):",
            "",
        ]
        lines += [
            f"* {k}: commit {c['commit']}, uncommitted {', '.join(c['uncommitted']) or 'none'}"
            if c
            else f"* {k}: null"
            for k, c in r.get("stage_code", {}).items()
        ]
        lines.append("")
    if r.get("notes"):
        lines += ["Notes:", ""] + [f"* {n}" for n in r["notes"]] + [""]
    lines += [
        "## Targets (default `wf`, fitted without human dialogues)",
        "",
        "| target | value | met |",
        "| --- | ---: | --- |",
    ]
    for t in r["targets"]:
        lines.append(
            f"| {t['target']} | {t['shown']} | {'-' if t['met'] is None else ('met' if t['met'] else 'not met')} |"
        )
    lines += ["", "## Summary", ""] + summary_table(r)
    lines += [
        "",
        "## Columns",
        "",
        "* Score, false alarms: at the detector's own operating point (5% false alarms on its fit "
        "dialogues); false alarms = share of the track's conformant dialogues with an alarm.",
        "* recall @1% / @5% FA: threshold-free; one threshold on the per-turn excess score read off the "
        "track's own conformant dialogues so that at most 1% (5%) of them alarm; recall = share of the "
        "type's forks whose first turn above it is at or after t_k (an alarm before t_k is a miss).",
        "* recall at t_k / >= t_k, premature, median delay: at the operating point; first alarm exactly at "
        "t_k / at or after t_k / before t_k; delay = first alarm - t_k (system turns) over the forks "
        "caught at or after t_k.",
        "* `wf-sup` is always scored on tasks held out of its training (two halves of the tasks, both ways).",
        "* Summary: FA = false alarms at the operating point; recall @x% FA over all forks and per type "
        "(threshold-free, as above); median delay over all forks caught at or after t_k.",
        "",
    ]
    lines += tables(r)
    lines += [
        "## Node assignment against STAR's action labels (held-out human turns)",
        "",
        "| assigner | track | system turns | accuracy % | accuracy on labels the workflow has % "
        "| non-generic accuracy % | own turns rejected % | label not a workflow node % | other tasks' turns "
        "| other tasks' turns rejected % |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for v in r["nodes"].values():
        if not isinstance(v, dict):
            continue
        unk = v["gold_not_in_workflow"]
        known = None if v["accuracy"] is None or unk is None or unk >= 1 else v["accuracy"] / (1 - unk)
        lines.append(
            f"| {v['assigner']} | {v['track']} | {v['system_turns']} | {pct(v['accuracy'])} | {pct(known)} | "
            f"{pct(v['accuracy_non_generic'])} | {pct(v['rejected_own'])} | {pct(v['gold_not_in_workflow'])} | "
            f"{v['other_task_turns']} | {pct(v['other_task_rejected'])} |"
        )
    lines += [
        "",
        "Accuracy: share of the held-out conformant dialogues' system turns (test split) assigned their "
        "STAR action label; on labels the workflow has: among the turns whose label is a node of the task's "
        "workflow (a label the workflow lacks can never be matched). ",
        "",
        "Other tasks' turns: every system turn of a held-out conformant human dialogue assigned under each "
        "other task of the run, leaving out generic nodes and nodes whose name the other task also has; "
        "rejected = assigned to no node.",
        "",
    ]
    lines += tracker_lines(r.get("tracker"))
    lines += [
        "## Latency (streaming, one turn: encode its text + update)",
        "",
        "| encoder runtime | detector | turns | p50 ms | p95 ms | system-turn p95 ms | max ms "
        "| encoding alone p50 / p95 ms | update alone p50 / p95 ms | load average before / after |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for key, dets in r["latency"].get("configs", {}).items():
        for name, v in dets.items():
            lines.append(
                f"| {key} | {name} | {v['turns']} | {num(v['p50_ms'])} | {num(v['p95_ms'])} | "
                f"{num(v['system_p95_ms'])} | {num(v['max_ms'])} | {num(v['encode_p50_ms'])} / "
                f"{num(v['encode_p95_ms'])} | {num(v['update_p50_ms'])} / {num(v['update_p95_ms'])} | "
                f"{num(v['loadavg_before'], 2)} / {num(v['loadavg_after'], 2)} |"
            )
    lines += [
        "",
        f"nproc {r['latency'].get('nproc')}; the turns of the human-picked test dialogues in order, a "
        "fresh stream per dialogue; the detectors fitted without human dialogues; the load average is the "
        "whole machine's (other jobs included).",
        "",
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines), encoding="utf-8")


# ---------------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--star", default=star_default(), help="STAR folder (default ../shared/star or $DIALFORK_STAR_DIR)"
    )
    ap.add_argument(
        "--tasks", default=DEFAULT_TASKS, help="comma-separated tasks (template and human tracks)"
    )
    ap.add_argument(
        "--per-task", type=int, default=12, help="template corpus: scenarios per task (default 12)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--detectors", default="it,ss+nc,wf,wf-sup")
    ap.add_argument(
        "--out",
        default=str(ROOT / "benchmarks" / "out" / "task3_tracks"),
        help="working folder: the template corpus, stage results, fitted detectors, embedding cache",
    )
    ap.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "task3_tracks.json"))
    ap.add_argument("--md", default=str(ROOT / "benchmarks" / "results" / "task3_tracks.md"))
    ap.add_argument("--latency-turns", type=int, default=300)
    ap.add_argument(
        "--latency-configs",
        default="torch:0,torch:1,onnx:1",
        help="encoder runtime:threads to time (threads 0: all cores; default torch:0,torch:1,onnx:1)",
    )
    ap.add_argument(
        "--redo",
        default="",
        help="comma-separated stages to recompute (e.g. nodes,latency,no-human__wf; all)",
    )
    args = ap.parse_args(argv)
    args.tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    redo = {s.strip() for s in args.redo.split(",") if s.strip()}
    args.redo_stage = lambda s: "all" in redo or s in redo
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    load_start = round(os.getloadavg()[0], 2)
    code = args.code = (
        code_state()
    )  # the library is imported below: this is the code every stage of this run uses
    shown_argv = [a for a in (sys.argv[1:] if argv is None else argv)]
    command = "python benchmarks/bench_task3_tracks.py" + "".join(" " + shlex.quote(a) for a in shown_argv)

    from dialfork_dataset.star import StarCorpus
    from dialfork_metrics.encoders import Encoder

    enc = Encoder("minilm", cache_dir=out / "cache", show_progress=False)
    workflow = StarCorpus(args.star)
    tracks, fits, info = load_tracks(args, out)
    log("tracks: " + "; ".join(f"{k}: {info[k]['test_counts']}" for k in tracks))
    notes: list[str] = []
    dets = [d.strip() for d in args.detectors.split(",") if d.strip()]
    usable = []
    for d in dets:
        try:
            make(d, args, enc, workflow)
            usable.append(d)
        except (ValueError, ImportError, TypeError) as e:
            notes.append(
                f"`{d}` skipped: building it from its registry entry failed ({type(e).__name__}: {e})."
            )
            log(notes[-1])
    if not any(r.get("hallucination_type") == "GR" for r in tracks["human-picked"]):
        notes.append(
            "The star-human tracks have no GR forks: GR needs another task of the same domain among "
            "the run's tasks (SPEC 8)."
        )
    stages: dict[tuple[str, str], dict] = {}
    for fit in FITS:
        for d in usable:
            try:
                stages[(fit, d)] = run_fit_stage(d, fit, args, enc, workflow, fits, tracks, out)
            except Exception as e:  # noqa: BLE001 - one detector failing must not lose the others
                notes.append(f"`{d}` fit `{fit}` failed: {type(e).__name__}: {e}")
                log(notes[-1])
    nodes = node_stage(args, enc, workflow, fits, tracks, out)
    tracker = tracker_stage(args, tracks)
    lat = latency_stage(args, enc, tracks, stages, out)
    met: dict[str, dict[str, dict[str, Any]]] = {}
    for (fit, d), st in stages.items():
        for tname, tr in st["tracks"].items():
            met.setdefault(fit, {}).setdefault(tname, {})[d] = metrics(tracks[tname], tr)
    # order detectors as requested
    for fit in met:
        for tname in met[fit]:
            met[fit][tname] = {d: met[fit][tname][d] for d in usable if d in met[fit][tname]}
    results = {
        "command": command,
        "tasks": args.tasks,
        "per_task": args.per_task,
        "seed": args.seed,
        "encoder": "minilm",
        "detectors": usable,
        "notes": notes,
        "data": info,
        "code": code,
        "machine": {
            "nproc": os.cpu_count(),
            "loadavg_start": load_start,
            "loadavg_end": round(os.getloadavg()[0], 2),
            "python": platform.python_version(),
        },
        "stage_seconds": {f"{f}/{d}": round(s.get("seconds", 0.0), 1) for (f, d), s in stages.items()},
        "fit_seconds": {f"{f}/{d}": round(s.get("fit_seconds", 0.0), 1) for (f, d), s in stages.items()},
        "stage_code": {f"{f}/{d}": s.get("code") for (f, d), s in stages.items()},
        "stage_loadavg": {
            f"{f}/{d}": [s.get("loadavg_start"), s.get("loadavg_end")] for (f, d), s in stages.items()
        },
        "consistency_mismatches": {
            f"{f}/{d}/{t}": v["excess_vs_predict_mismatch"]
            for (f, d), s in stages.items()
            for t, v in s["tracks"].items()
        },
        "metrics": met,
        "nodes": nodes,
        "tracker": tracker,
        "latency": lat,
    }
    results["targets"] = targets(results)
    write_json(Path(args.json), results)
    write_md(results, Path(args.md))
    log(f"wrote {args.json} and {args.md}")
    print("\n".join(tables(results)))
    for t in results["targets"]:
        print(
            f"{t['target']}: {t['shown']} ({'-' if t['met'] is None else ('met' if t['met'] else 'NOT met')})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
