"""The known cheats: verbatim lookup, sibling grouping, pair diffing, correlations, regeneration."""

from __future__ import annotations

import hashlib
import logging
import os
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .report import AttackResult
from .scoring import (
    _Detector,
    _detector_result,
    _Metric,
    _metric_result,
    common_prefix,
    system_prefix_keys,
    turns_key,
)

logger = logging.getLogger("leaderboard.leakcheck")


# --------------------------------------------------------------------------- attacks


def _label_index(rows: Sequence[Mapping[str, Any]]) -> dict[str, tuple[int | None, int | None]]:
    """``turns hash -> (fork_turn or None, fork_position or None)`` of labelled rows (first wins)."""
    idx: dict[str, tuple[int | None, int | None]] = {}
    for r in rows:
        if "turns" not in r or "hallucination_type" not in r:
            continue
        h = r.get("hallucination_type")
        idx.setdefault(
            turns_key(r["turns"]), (None, None) if h is None else (r.get("fork_turn"), r.get("fork_position"))
        )
    return idx


def lookup_attack(
    name: str,
    labelled: Sequence[Mapping[str, Any]],
    blind: Sequence[Mapping[str, Any]],
    pairs: Sequence[Mapping[str, Any]],
    det: _Detector,
    met: _Metric | None,
    source: str,
) -> list[AttackResult]:
    """Label every blind dialogue / metric candidate whose exact turn sequence is in ``labelled``.

    Args:
        name: The attack's name in the report.
        labelled: Rows with ``turns`` and ``hallucination_type`` (and ``fork_turn``,
            ``fork_position`` for forks): the public configs, or regenerated records.
        blind: The blind rows (``dialogue_id``, ``turns``, ``num_system_turns``).
        pairs: The metric-track pairs (``pair_id``, ``candidate`` turns); may be empty.
        det: The run's detector-track scorer (Random draws over the gold).
        met: The run's metric-track scorer, or None when the track is not audited.
        source: What ``labelled`` is, for the result's detail (e.g. "3 public config(s)").

    Returns:
        The detector-track result (blind dialogues found get their label: no prediction for a
        conformant one, the fork turn capped at T for a fork; Random elsewhere) and, with
        ``met`` and ``pairs``, the metric-track result (a found candidate's distance is
        ``5 - fork_position``; Random elsewhere).
    """
    idx = _label_index(labelled)
    known: dict[str, int | None] = {}
    for b in blind:
        hit = idx.get(turns_key(b["turns"]))
        if hit is not None:
            known[b["dialogue_id"]] = None if hit[0] is None else min(int(hit[0]), int(b["num_system_turns"]))
    out = [_detector_result(name, det, known, f"{len(known)}/{len(blind)} blind dialogues found in {source}")]
    if met is not None and pairs:
        dist = {}
        for p in pairs:
            hit = idx.get(turns_key(p["candidate"]))
            if hit is not None and hit[1] is not None:
                dist[p["pair_id"]] = 5.0 - float(hit[1])
        out.append(
            _metric_result(
                name,
                met.with_fallback(dist),
                f"{len(dist)}/{len(pairs)} metric-track candidates found in {source}",
            )
        )
    return out


#: What :func:`sibling_predictions` predicts for a blind dialogue that shares its opening with no
#: other: ``"conformant"`` (it is its own group's D+: called conformant, what a cheater does) or
#: ``"abstain"`` (no guess: the audit's Random fallback).
SINGLETON_RULES = ("conformant", "abstain")


def _system_texts(turns: Sequence[Mapping[str, Any]]) -> list[str]:
    return [t["text"] for t in turns if t["speaker"] == "system"]


def _first_difference(a: Sequence[str], b: Sequence[str]) -> int:
    """1-based index of the first system turn where ``a`` differs from ``b`` (``a`` longer or equal
    throughout: the turn after the shared ones)."""
    return common_prefix(a, b) + 1


def sibling_predictions(
    blind: Sequence[Mapping[str, Any]], min_shared: int = 1, singletons: str = "conformant"
) -> dict[str, int | None]:
    """The sibling cheat: group blind dialogues by their opening (the turns up to system turn
    ``min_shared``: the opening user and system turns); in each group take the member whose system
    turns share most with the others' (the sum, over the others, of the system turns equal from the
    start) as D+ and call it conformant, and flag every other member at its first system turn that
    differs from D+'s (capped at its length). D+ and its latest forks share equally much (each
    latest fork shares with every other member what D+ does); such a tie goes to the larger id,
    as before: a guess, the Score punishing a cheat that flags nothing far more than one wrong flag.

    Args:
        blind: The blind rows (``dialogue_id``, ``turns``, ``num_system_turns``).
        min_shared: System turns two dialogues must share from the start to be grouped (>= 1).
        singletons: What a dialogue alone in its group gets (:data:`SINGLETON_RULES`):
            ``"conformant"`` (None: it is its own D+) or ``"abstain"`` (absent: no guess).

    Returns:
        ``{dialogue_id: None (called conformant) or the predicted system turn}``; with
        ``singletons="abstain"`` only the dialogues in groups of two or more.

    Raises:
        ValueError: ``min_shared`` is below 1 or ``singletons`` is not a rule of
            :data:`SINGLETON_RULES`.
    """
    if min_shared < 1:
        raise ValueError(f"sibling_predictions: min_shared must be >= 1, got {min_shared}")
    if singletons not in SINGLETON_RULES:
        raise ValueError(
            f"sibling_predictions: singletons must be one of {SINGLETON_RULES}, got {singletons!r}"
        )
    keys = {b["dialogue_id"]: system_prefix_keys(b["turns"]) for b in blind}
    texts = {b["dialogue_id"]: _system_texts(b["turns"]) for b in blind}
    T = {b["dialogue_id"]: int(b["num_system_turns"]) for b in blind}
    buckets: dict[str, list[str]] = defaultdict(list)
    for did, k in keys.items():
        # a dialogue shorter than the opening is a group of its own
        buckets[k[min_shared - 1] if len(k) >= min_shared else "\x00" + did].append(did)
    known: dict[str, int | None] = {}
    for members in buckets.values():
        if len(members) < 2:
            if singletons == "conformant":
                known[members[0]] = None
            continue
        shared = {(a, b): common_prefix(texts[a], texts[b]) for a in members for b in members if a != b}
        dplus = max(members, key=lambda a: (sum(shared[(a, b)] for b in members if b != a), a))
        known[dplus] = None
        for a in members:
            if a != dplus:
                known[a] = max(1, min(_first_difference(texts[a], texts[dplus]), T[a]))
    return known


def sibling_attack(blind: Sequence[Mapping[str, Any]], det: _Detector) -> AttackResult:
    """The sibling cheat scored: :func:`sibling_predictions` under each rule of
    :data:`SINGLETON_RULES`, the one that beats its matched Random by most reported (a cheater
    submits the better one).

    Args:
        blind: The blind rows (``dialogue_id``, ``turns``, ``num_system_turns``).
        det: The run's detector-track scorer.

    Returns:
        The detector-track result, its detail naming the groups found and the singleton rule.
    """
    best = None
    start = det.rng.bit_generator.state  # every rule meets the same matched draws
    for rule in SINGLETON_RULES:
        det.rng.bit_generator.state = start
        known = sibling_predictions(blind, singletons=rule)
        res = _detector_result("sibling grouping (blind set)", det, known, "")
        if best is None or (res.margin, -res.p_value) > (best[1].margin, -best[1].p_value):
            best = (rule, res, known, det.rng.bit_generator.state)
    rule, res, known, after = best
    det.rng.bit_generator.state = after  # later attacks draw as after one sibling attack
    grouped = sum(1 for v in sibling_predictions(blind, singletons="abstain"))
    flagged = sum(v is not None for v in known.values())
    res.detail = (
        f"{grouped}/{len(blind)} blind dialogues share an opening with another ({flagged} flagged); "
        + (
            "a dialogue alone in its group called conformant"
            if rule == "conformant"
            else "Random's guess for a dialogue alone in its group"
        )
    )
    return res


def pair_diff_distances(pairs: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Two diffing cheats per pair: minus the shared prefix (system turns), minus identical turns.

    Args:
        pairs: The metric-track pairs (``pair_id``, ``reference`` and ``candidate`` turns).

    Returns:
        ``{"shared prefix": {pair_id: -system turns shared from the start}, "identical turns":
        {pair_id: -turns with the same text at the same index}}``.
    """
    prefix, same = {}, {}
    for p in pairs:
        ka, kb = system_prefix_keys(p["reference"]), system_prefix_keys(p["candidate"])
        prefix[p["pair_id"]] = -float(common_prefix(ka, kb))
        same[p["pair_id"]] = -float(
            sum(1 for x, y in zip(p["reference"], p["candidate"]) if x["text"] == y["text"])
        )
    return {"shared prefix": prefix, "identical turns": same}


#: The correlation cheat's bins hold at least this many training dialogues (fewer bins otherwise),
#: so that a tiny blind set does not let chance pass for a leak.
MIN_PER_BIN = 8


def _binned_predictions(
    x: np.ndarray, T: np.ndarray, conf: np.ndarray, rel: np.ndarray, folds: int = 5, bins: int = 4
) -> list[int | None]:
    """Cross-fitted predictions from one feature: per quantile bin of the training folds (at most
    ``bins``, each with at least :data:`MIN_PER_BIN` dialogues), call the bin conformant when most
    of its dialogues are, else flag at the bin's median relative fork turn."""
    n = len(x)
    order = np.argsort(np.argsort(x, kind="stable"), kind="stable")
    fold = order % folds
    preds: list[int | None] = [None] * n
    for f in range(folds):
        tr, te = fold != f, fold == f
        if not tr.any() or not te.any():
            continue
        nb = min(bins, int(tr.sum()) // MIN_PER_BIN)
        edges = np.unique(np.quantile(x[tr], np.linspace(0, 1, nb + 1)[1:-1])) if nb > 1 else np.array([])
        b_tr, b_te = np.searchsorted(edges, x[tr], side="right"), np.searchsorted(edges, x[te], side="right")
        conf_tr, rel_tr = conf[tr], rel[tr]
        glob_c = conf_tr.mean()
        glob_r = float(np.median(rel_tr[~conf_tr])) if (~conf_tr).any() else 0.5
        for i, bi in zip(np.flatnonzero(te), b_te):
            m = b_tr == bi
            c = conf_tr[m].mean() if m.any() else glob_c
            forks = m & ~conf_tr
            r = float(np.median(rel_tr[forks])) if forks.any() else glob_r
            preds[i] = None if c > 0.5 else int(np.clip(round(1 + r * (T[i] - 1)), 1, T[i]))
    return preds


def _id_value(s: str) -> float:
    try:
        return float(int(s.lstrip("dpu")[:12], 16))
    except ValueError:
        return float(int(hashlib.sha256(s.encode()).hexdigest()[:12], 16))


def _chars(turns: Sequence[Mapping[str, Any]]) -> int:
    return sum(len(t["text"]) for t in turns)


def correlation_attacks(
    blind: Sequence[Mapping[str, Any]],
    gold3: Sequence[Mapping[str, Any]],
    pairs: Sequence[Mapping[str, Any]],
    det: _Detector,
    met: _Metric | None,
) -> list[AttackResult]:
    """The correlation cheats: does an id, the row order or a length give the label away?

    Detector track: for each feature (id, row order, length in system turns, length in
    characters) a binned predictor, 5-fold cross-fitted on the gold; the feature whose result
    beats its matched Random by most is reported. Metric track: each feature of a pair (pair id,
    row order, turn-count difference, character-length difference, candidate length), with
    either sign, used as the distance; the best tau is reported.

    Args:
        blind: The blind rows (``dialogue_id``, ``turns``, ``num_system_turns``).
        gold3: The gold's Task 3 rows (``dialogue_id``, ``hallucination_type``, ``fork_turn``).
        pairs: The metric-track pairs (``pair_id``, ``reference``, ``candidate``); may be empty.
        det: The run's detector-track scorer.
        met: The run's metric-track scorer, or None when the track is not audited.

    Returns:
        At most two results: the detector track's (when some blind dialogue is in the gold) and
        the metric track's (with ``met`` and ``pairs``), each naming its best feature.
    """
    from dialfork_metrics.stats import kendall_tau

    g = {r["dialogue_id"]: r for r in gold3}
    rows = [b for b in blind if b["dialogue_id"] in g]
    out = []
    if rows:
        T = np.array([int(b["num_system_turns"]) for b in rows])
        conf = np.array([g[b["dialogue_id"]]["hallucination_type"] is None for b in rows])
        rel = np.array(
            [
                0.0
                if c
                else (int(g[b["dialogue_id"]]["fork_turn"]) - 1) / max(int(b["num_system_turns"]) - 1, 1)
                for b, c in zip(rows, conf)
            ]
        )
        feats = {
            "id": np.array([_id_value(b["dialogue_id"]) for b in rows]),
            "row order": np.arange(len(rows), dtype=float),
            "length (system turns)": T.astype(float),
            "length (characters)": np.array([_chars(b["turns"]) for b in rows], dtype=float),
        }
        best = None
        for fname, x in feats.items():
            preds = dict(zip((b["dialogue_id"] for b in rows), _binned_predictions(x, T, conf, rel)))
            res = _detector_result("correlations (ids, order, lengths)", det, preds, "")
            tau = kendall_tau(x, conf, undefined="nan") if len(rows) >= 2 else float("nan")
            if best is None or (res.margin, -res.p_value) > (best[1].margin, -best[1].p_value):
                best = (fname, res, tau)
        fname, res, tau = best
        res.detail = (
            f"best feature: {fname} (Kendall tau with 'is conformant' {tau:+.3f}); binned predictor, "
            "5-fold cross-fitted on the gold"
        )
        out.append(res)
    if met is not None and pairs:
        feats2: dict[str, dict[str, float]] = {
            "pair id": {p["pair_id"]: _id_value(p["pair_id"]) for p in pairs},
            "row order": {p["pair_id"]: float(i) for i, p in enumerate(pairs)},
            "turn-count diff": {
                p["pair_id"]: float(abs(len(p["candidate"]) - len(p["reference"]))) for p in pairs
            },
            "length diff (characters)": {
                p["pair_id"]: float(abs(_chars(p["candidate"]) - _chars(p["reference"]))) for p in pairs
            },
            "candidate length": {p["pair_id"]: float(len(p["candidate"])) for p in pairs},
        }
        best2 = None
        for fname, d in feats2.items():
            for sign in (1.0, -1.0):
                t = met.tau({k: sign * v for k, v in d.items()})
                if best2 is None or t > best2[1]:
                    best2 = (f"{'-' if sign < 0 else '+'}{fname}", t)
        out.append(
            _metric_result(
                "correlations (ids, order, lengths)",
                best2[1],
                f"best feature: {best2[0]} as the distance (either sign tried)",
            )
        )
    return out


def regenerate(
    star: str | os.PathLike,
    tasks: Sequence[str],
    seeds: Sequence[int],
    prefix_modes: Sequence[str],
    per_task: int,
    workdir: Path,
) -> tuple[list[dict[str, Any]], list[str]]:
    """Template corpora of the public code for each (seed, prefix mode) over the first ``per_task``
    single-task scenarios of each task; returns (records, notes).

    Args:
        star: The STAR folder the generator reads.
        tasks: The tasks to regenerate; those not in the STAR copy are skipped.
        seeds: The generator seeds to try.
        prefix_modes: The prefix modes to try; modes this code version does not know are skipped
            (with a note).
        per_task: Single-task scenarios per task (the first ones, as a plan picks them).
        workdir: A folder for the generated corpora (one subfolder per seed and mode).

    Returns:
        ``(records, notes)``: every regenerated record (not validated) and notes on what was
        not tried.
    """
    from dialfork_dataset.builder import load_records
    from generation import GenerationConfig, generate_corpus
    from generation.engine import load_corpus

    try:  # where the prefix modes live depends on the code version
        from dialfork_dataset.records import PREFIX_MODES
    except ImportError:
        from generation.engine import PREFIX_MODES

    corpus = load_corpus(str(star))
    notes = []
    tasks = [t for t in tasks if t in corpus.tasks]
    scen = [sc for t in sorted(tasks) for sc in corpus.scenarios_for(task=t, single_task=True)[:per_task]]
    records: list[dict[str, Any]] = []
    modes = [m for m in prefix_modes if m in PREFIX_MODES]
    for m in sorted(set(prefix_modes) - set(modes)):
        notes.append(f"regeneration: prefix mode {m!r} is not in this code version; not tried")
    for seed in seeds:
        for mode in modes:
            out = workdir / f"seed{seed}-{mode}"
            generate_corpus(
                GenerationConfig(
                    star=str(star), out=str(out), tasks=tuple(sorted(tasks)), seed=seed, prefix_mode=mode
                ),
                scenarios=scen,
                corpus=corpus,
                progress=False,
            )
            records += load_records(out, validate=False)
    return records, notes
