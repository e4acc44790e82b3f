"""What an attacker reads (the public configs, turn keys) and how a cheat is scored against its matched Random."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .report import ALPHA, BLIND, DETECTOR_MARGIN, METRIC_TAU_MAX, PAIRS, AttackResult

logger = logging.getLogger("leaderboard.leakcheck")


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


class VectorScorer:
    """The Task 3 Score (SPEC 8) of many candidate predictions on the same labelled rows,
    vectorised: the audit scores thousands (matched Random draws, rule and threshold searches), all
    valid by construction, so the submission checks of ``score_predictions`` are skipped; the
    arithmetic is ``score_from_stats``'s.

    Args:
        rows: Labelled rows (``dialogue_id``, ``num_system_turns``, ``hallucination_type``,
            ``fork_turn``); both conformant dialogues and forks.
    """

    def __init__(self, rows: Sequence[Mapping[str, Any]]):
        self.ids = [r["dialogue_id"] for r in rows]
        self.T = np.asarray([int(r["num_system_turns"]) for r in rows], dtype=float)
        self.fork = np.asarray([r["hallucination_type"] is not None for r in rows])
        self.tk = np.asarray([float(r.get("fork_turn") or 0) for r in rows])
        self.ok = bool(self.fork.any() and (~self.fork).any())
        self.mae_h_ref = float(np.mean(np.abs(self.T - self.tk)[self.fork])) if self.ok else 0.0
        self.mae_c_ref = float(np.mean(self.T[~self.fork])) if self.ok else 0.0

    def score(self, pred: np.ndarray) -> float:
        """The Score of ``pred`` (one system turn per row, 0 for "no deviation").

        Args:
            pred: Predictions aligned with the rows.

        Returns:
            The Score (0-100); NaN without both kinds of dialogue (no reference MAEs).
        """
        from dialfork_metrics.task3.scorer import score_from_stats

        if not self.ok:
            return float("nan")
        flag = pred > 0
        fh, fc = flag & self.fork, flag & ~self.fork
        mae_h = float(np.mean(np.abs(pred - self.tk)[fh])) if fh.any() else None
        mae_c = float(np.mean(np.abs(self.T + 1 - pred)[fc])) if fc.any() else None
        return score_from_stats(
            mae_h,
            float(fh.sum() / self.fork.sum()),
            mae_c,
            float(fc.sum() / (~self.fork).sum()),
            self.mae_h_ref,
            self.mae_c_ref,
        )

    def score_dict(self, preds: Mapping[str, int | None]) -> float:
        """The Score of ``{dialogue_id: turn or None}`` (every row's id present).

        Args:
            preds: A predicted system turn per dialogue id; None or 0 means "no deviation". An id of
                the rows that is missing raises ``KeyError``.

        Returns:
            The Score (0-100), as :meth:`score`; NaN without both kinds of dialogue.
        """
        return self.score(np.asarray([float(preds[i] or 0) for i in self.ids]))


class _Detector:
    """Scores detector-track predictions on the whole blind set, Random-averaged."""

    def __init__(self, gold3: Sequence[Mapping[str, Any]], draws: int, seed: int):
        self.gold = [dict(g) for g in gold3]
        self.ids = [g["dialogue_id"] for g in self.gold]
        self.T = np.array([int(g["num_system_turns"]) for g in self.gold])
        rng = np.random.default_rng(seed)
        self.draws = [rng.integers(1, self.T + 1) for _ in range(draws)]
        self.rng = np.random.default_rng(seed + 7)
        self._vec = VectorScorer(self.gold)

    def score(self, preds: Mapping[str, int | None]) -> float:
        """The Score of predictions for every gold dialogue (valid by construction)."""
        return self._vec.score_dict(preds)

    def _known(self, known: Mapping[str, int | None]) -> tuple[np.ndarray, list[int | None]]:
        pos = {i: n for n, i in enumerate(self.ids)}
        return np.asarray([pos[i] for i in known], dtype=int), list(known.values())

    def random(self) -> float:
        return float(np.mean([self._vec.score(d.astype(float)) for d in self.draws]))

    def with_fallback(self, known: Mapping[str, int | None]) -> float:
        """Mean Score of ``known`` predictions, Random's draw for every other dialogue."""
        if not known:
            return self.random()
        idx, vals = self._known(known)
        val = np.asarray([float(v or 0) for v in vals])
        out = []
        for d in self.draws:
            p = d.astype(float)
            p[idx] = val
            out.append(self._vec.score(p))
        return float(np.mean(out))

    def matched(self, known: Mapping[str, int | None]) -> np.ndarray:
        """Scores of ``known``'s predictions dealt to random dialogues (abstentions as they are, turns
        as relative positions rescaled to the receiving dialogue's T), Random for the rest."""
        idx, vals = self._known(known)
        rel = np.asarray(
            [np.nan if v is None else (int(v) - 1) / max(int(self.T[j]) - 1, 1) for j, v in zip(idx, vals)],
            dtype=float,
        )
        out = []
        for d in self.draws:
            p = d.astype(float)
            chosen = self.rng.choice(len(self.ids), size=len(rel), replace=False)
            T = self.T[chosen]
            p[chosen] = np.where(
                np.isnan(rel), 0.0, np.clip(np.round(1 + np.nan_to_num(rel) * (T - 1)), 1, T)
            )
            out.append(self._vec.score(p))
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
    return AttackResult(
        name, "detector", value, detail, "FAIL" if fail else "pass", margin, float(control.mean()), p
    )


def _metric_result(name: str, value: float, detail: str) -> AttackResult:
    return AttackResult(name, "metric", value, detail, "FAIL" if value > METRIC_TAU_MAX else "pass")
