"""What an attacker reads (the public configs, turn keys) and how a cheat is scored against its matched Random."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .report import ALPHA, BLIND, DETECTOR_MARGIN, METRIC_TAU_MAX, PAIRS, AttackResult

logger = logging.getLogger("leaderboard.audit")


# --------------------------------------------------------------------------- data


def _read_config(folder: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    rows: list[dict[str, Any]] = []
    for f in sorted(folder.glob("*.parquet")):
        rows.extend(pq.read_table(f).to_pylist())
    return rows


def read_public_configs(hub: Path) -> dict[str, list[dict[str, Any]]]:
    """Every labelled config of the layout (all folders under ``data/`` but the blind ones).

    Args:
        hub: The Hub layout's root folder (the one holding ``data/``).

    Returns:
        Config name (folder under ``data/``) -> its rows, read from every ``*.parquet`` file of
        the folder in name order; ``{}`` when there is no ``data/`` folder. The ``blind`` and
        ``blind_task2`` folders are left out.
    """
    out = {}
    data = hub / "data"
    for d in sorted(p for p in data.iterdir() if p.is_dir()) if data.is_dir() else []:
        if d.name in (BLIND, PAIRS):
            continue
        out[d.name] = _read_config(d)
    return out


def turns_key(turns: Sequence[Mapping[str, Any]]) -> str:
    """The key under which the lookup attacks find a dialogue: a hash of its whole turn sequence.

    Args:
        turns: The dialogue's turns (``speaker`` and ``text`` of each are hashed, in order).

    Returns:
        The SHA-256 hex digest of the sequence (``dialfork_dataset.hidden.turns_hash``).
    """
    from dialfork_dataset.hidden import turns_hash

    return turns_hash(turns)


def system_prefix_keys(turns: Sequence[Mapping[str, Any]]) -> list[str]:
    """``keys[s-1]``: a hash of the turns up to and including system turn ``s`` (s = 1..T).

    Args:
        turns: The dialogue's turns (``speaker`` and ``text`` of each).

    Returns:
        One key per system turn (16 hex characters of a running SHA-256): two dialogues share
        ``keys[s-1]`` exactly when their turns agree up to system turn ``s``.
    """
    h = hashlib.sha256()
    out = []
    for t in turns:
        h.update(f"{t['speaker']}\x1f{t['text']}\x1e".encode())
        if t["speaker"] == "system":
            out.append(h.copy().hexdigest()[:16])
    return out


def common_prefix(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common prefix of two sequences.

    Args:
        a: A sequence (e.g. the :func:`system_prefix_keys` of one dialogue).
        b: Another sequence.

    Returns:
        How many leading items are equal in both (0 when the first items differ).
    """
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


# --------------------------------------------------------------------------- scoring


class _Detector:
    """Scores detector-track predictions on the whole blind set, Random-averaged."""

    def __init__(self, gold3: Sequence[Mapping[str, Any]], draws: int, seed: int):
        self.gold = [dict(g) for g in gold3]
        self.ids = [g["dialogue_id"] for g in self.gold]
        self.T = np.array([int(g["num_system_turns"]) for g in self.gold])
        rng = np.random.default_rng(seed)
        self.draws = [rng.integers(1, self.T + 1) for _ in range(draws)]
        self.rng = np.random.default_rng(seed + 7)

    def score(self, preds: Mapping[str, int | None]) -> float:
        from dialfork_metrics.task3.scorer import score_predictions

        s = score_predictions(dict(preds), self.gold)["score"]
        return float("nan") if s is None else float(s)

    def random(self) -> float:
        return float(np.mean([self.score(dict(zip(self.ids, map(int, d)))) for d in self.draws]))

    def with_fallback(self, known: Mapping[str, int | None]) -> float:
        """Mean Score of ``known`` predictions, Random's draw for every other dialogue."""
        if not known:
            return self.random()
        out = []
        for d in self.draws:
            p = dict(zip(self.ids, map(int, d)))
            p.update(known)
            out.append(self.score(p))
        return float(np.mean(out))

    def matched(self, known: Mapping[str, int | None]) -> np.ndarray:
        """Scores of ``known``'s predictions dealt to random dialogues (abstentions as they are, turns
        as relative positions rescaled to the receiving dialogue's T), Random for the rest."""
        pos = {i: n for n, i in enumerate(self.ids)}
        rel = [None if v is None else (int(v) - 1) / max(int(self.T[pos[i]]) - 1, 1) for i, v in known.items()]
        out = []
        for d in self.draws:
            p = dict(zip(self.ids, map(int, d)))
            chosen = self.rng.choice(len(self.ids), size=len(rel), replace=False)
            for j, x in zip(chosen, rel):
                T = int(self.T[j])
                p[self.ids[j]] = None if x is None else int(np.clip(round(1 + x * (T - 1)), 1, T))
            out.append(self.score(p))
        return np.array(out)


class _Metric:
    """Scores metric-track distances on every pair (both subsets together)."""

    def __init__(self, gold2: Sequence[Mapping[str, Any]], draws: int, seed: int):
        self.gold = [{**g, "subset": "public"} for g in gold2]
        self.ids = [g["pair_id"] for g in self.gold]
        rng = np.random.default_rng(seed + 1)
        self.draws = [rng.random(len(self.ids)) for _ in range(max(1, draws // 4))]

    def tau(self, distances: Mapping[str, float]) -> float:
        from ..score import score_metric

        return float(score_metric(dict(distances), self.gold)["public"]["tau"])

    def random(self) -> float:
        return float(np.mean([self.tau(dict(zip(self.ids, d))) for d in self.draws]))

    def with_fallback(self, known: Mapping[str, float]) -> float:
        if len(known) == len(self.ids):
            return self.tau(known)
        out = []
        for d in self.draws:
            p = dict(zip(self.ids, d))
            p.update(known)
            out.append(self.tau(p))
        return float(np.mean(out))


def _detector_result(name: str, det: _Detector, known: Mapping[str, int | None], detail: str) -> AttackResult:
    """Score ``known`` (Random elsewhere) against its matched Random (see the module doc)."""
    value = det.with_fallback(known)
    control = det.matched(known) if known else np.array([value])
    margin = value - float(control.mean())
    p = float((1 + (control >= value - 1e-9).sum()) / (1 + control.size))
    fail = margin > DETECTOR_MARGIN and p < ALPHA
    return AttackResult(name, "detector", value, detail, "FAIL" if fail else "pass", margin, float(control.mean()), p)


def _metric_result(name: str, value: float, detail: str) -> AttackResult:
    return AttackResult(name, "metric", value, detail, "FAIL" if value > METRIC_TAU_MAX else "pass")


