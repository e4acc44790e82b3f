"""Blind scoring against the hidden gold: the only module of ``leaderboard`` that reads gold.

* Detector track (Task 3): every number comes from ``dialfork_metrics.task3.scorer.score_predictions``
  (one code path: the leaderboard never re-implements the Score), called once per subset.
* Metric track (Task 2): Kendall's tau-b per unit (conformant source x type) between the
  submitted distances (d_1..d_4) of the unit's four forks and (4, 3, 2, 1); an undefined tau
  (all four distances equal) counts as 0; averaged per type and over the four type means
  (SPEC sections 5-6).

The blind set is split into a ``public`` and a ``private`` part by the gold's ``subset``
column (a source and its forks share a part). Every function returns aggregates only: no
per-dialogue label, fork turn, task or subset membership leaves this module, and error
messages about the gold never quote gold rows.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

SUBSETS = ("public", "private")
TYPES = ("WIC", "SSPC", "GR", "CSC")
#: Keys of ``score_predictions``' result copied into a leaderboard result (all aggregates).
DETECTOR_KEYS = ("score", "components", "weights", "mae_h", "mae_h_by_type", "cov_h", "cov_h_by_type",
                 "mae_c", "cov_c", "mae_h_ref", "mae_c_ref", "counts")


class GoldError(ValueError):
    """The gold folder is unusable (a maintainer problem). Messages never quote gold rows."""


def load_gold(gold_dir: str | os.PathLike) -> dict[str, Any]:
    """The gold of the blind sets through ``dialfork_dataset.load_gold`` (task3, task2, manifest)."""
    from dialfork_dataset.hub import load_gold as _load

    gold = _load(Path(gold_dir))
    if not gold.get("manifest", {}).get("revision"):
        raise GoldError(f"{gold_dir}: gold_manifest.json has no 'revision'; re-export the gold")
    return gold


def check_gold_revision(blind_dir: str | os.PathLike, gold: Mapping[str, Any]) -> None:
    """Refuse a gold whose revision is not the one the layout's card records (``gold_revision``).

    A layout without a card (e.g. the synthetic fixtures) is not checked; a card without the
    field, or with another revision, is refused: scoring a blind set against the labels of
    another release (or half of an interrupted export) would give meaningless numbers.
    """
    from dialfork_dataset.hub import read_card_gold_revision

    recorded = read_card_gold_revision(blind_dir)
    if recorded is None:
        logger.debug("%s has no dataset card; gold revision not checked", blind_dir)
        return
    actual = gold.get("manifest", {}).get("revision")
    if not recorded:
        raise GoldError(f"{blind_dir}/README.md records no gold_revision: re-export the layout with this toolkit")
    if recorded != actual:
        raise GoldError(f"the gold's revision {str(actual)[:12]} does not match the revision {recorded[:12]} recorded "
                        f"in {blind_dir}/README.md: --gold and --blind come from different exports (or an export "
                        "was interrupted; rerun it)")


def split_subsets(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    out: dict[str, list[Mapping[str, Any]]] = {s: [] for s in SUBSETS}
    bad = 0
    for r in rows:
        s = r.get("subset")
        if s not in out:
            bad += 1
            continue
        out[s].append(r)
    if bad:
        raise GoldError(f"{bad} gold row(s) have a 'subset' other than 'public'/'private'; re-export the gold")
    return out


# --------------------------------------------------------------------------- Task 3


def score_detector(predictions: Mapping[str, int | None], gold3: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``{"public": scores, "private": scores}`` for validated predictions ``{dialogue_id: turn|None}``.

    ``scores`` holds the aggregate fields of ``score_predictions`` (:data:`DETECTOR_KEYS`) for
    that subset, or None when the subset is empty. Raises ``ValueError`` when the prediction
    ids do not match the gold ids (the validated blind set must be the gold's blind set); the
    scorer's own messages are not passed on, since they are written against the gold.
    """
    from dialfork_metrics.task3.scorer import PredictionError, score_predictions

    by_subset = split_subsets(gold3)
    gold_ids = {r["dialogue_id"] for r in gold3}
    if gold_ids != set(predictions):
        extra = len(set(predictions) - gold_ids)
        missing = len(gold_ids - set(predictions))
        raise ValueError(f"the predictions do not cover the gold's blind set ({missing} gold ids without a prediction, "
                         f"{extra} predictions for ids outside it): was the submission validated against the blind "
                         "set of this gold release?")
    out: dict[str, Any] = {}
    for s in SUBSETS:
        rows = by_subset[s]
        if not rows:
            out[s] = None
            continue
        preds = {r["dialogue_id"]: predictions[r["dialogue_id"]] for r in rows}
        try:
            res = score_predictions(preds, rows)
        except PredictionError as e:
            # Validation against the blind set should make this impossible; do not echo the
            # scorer's messages (they are written against the gold), only their number.
            raise ValueError(f"the Task 3 scorer rejected {len(e.errors)} prediction(s) that passed validation; "
                             "check that --blind and --gold come from the same export") from None
        out[s] = {k: res[k] for k in DETECTOR_KEYS}
    return out


# --------------------------------------------------------------------------- Task 2


def kendall_tau_b_rows(d: np.ndarray, target: Sequence[float] = (4, 3, 2, 1)) -> np.ndarray:
    """Kendall's tau-b between each row of ``d`` (n, m) and ``target`` (m,), vectorised.

    Same number as ``scipy.stats.kendalltau(row, target).statistic`` (variant 'b'), NaN where
    it is undefined (a row or the target with all values tied). Written out because scipy's
    per-call overhead (~0.2 ms) makes thousands of 4-element units slow; tests check equality
    with scipy and with ``dialfork_metrics.stats.ranking_tau`` (the library's per-unit
    definition, undefined -> 0), ties included.
    """
    d = np.asarray(d, dtype=float)
    y = np.asarray(target, dtype=float)
    if d.ndim != 2 or d.shape[1] != y.shape[0]:
        raise ValueError(f"d must have shape (n, {y.shape[0]}), got {d.shape}")
    i, j = np.triu_indices(y.shape[0], k=1)
    sx = np.sign(d[:, j] - d[:, i])  # (n, pairs)
    sy = np.sign(y[j] - y[i])  # (pairs,)
    s = (sx * sy).sum(axis=1)
    n0 = i.shape[0]
    tx = (sx == 0).sum(axis=1)
    ty = int((sy == 0).sum())
    denom = np.sqrt((n0 - tx) * float(n0 - ty))
    with np.errstate(invalid="ignore", divide="ignore"):
        tau = np.where(denom > 0, s / np.where(denom > 0, denom, 1.0), np.nan)
    return tau


def _units(rows: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[str], list[list[str]]]:
    """(unit ids, types, pair ids ordered k=1..4) of the gold Task 2 rows."""
    units: dict[str, dict[int, str]] = {}
    types: dict[str, str] = {}
    bad = 0
    for r in rows:
        u = r["unit_id"]
        k = r["fork_position"]
        units.setdefault(u, {})
        if k in units[u] or k not in (1, 2, 3, 4):
            bad += 1
        units[u][k] = r["pair_id"]
        if types.setdefault(u, r["hallucination_type"]) != r["hallucination_type"]:
            bad += 1
    incomplete = sum(1 for u in units.values() if sorted(u) != [1, 2, 3, 4])
    if bad or incomplete:
        raise GoldError(f"Task 2 gold is malformed: {incomplete} unit(s) without exactly fork positions 1..4, "
                        f"{bad} inconsistent row(s); re-export the gold")
    ids = list(units)
    return ids, [types[u] for u in ids], [[units[u][k] for k in (1, 2, 3, 4)] for u in ids]


def score_metric(distances: Mapping[str, float], gold2: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``{"public": scores, "private": scores}`` for validated distances ``{pair_id: d}``.

    ``scores``: ``tau`` (mean of the per-type means, the paper's Avg.), ``tau_by_type``,
    ``exact_recovery`` (share of units whose order is exactly (4,3,2,1), i.e. tau = 1),
    ``undefined_units`` (all four distances equal; counted as tau 0) and ``counts``.
    """
    gold_ids = {r["pair_id"] for r in gold2}
    if gold_ids != set(distances):
        raise ValueError("the distances do not cover the gold's Task 2 pairs: was the submission validated against "
                         "the blind set of this gold release?")
    out: dict[str, Any] = {}
    for s, rows in split_subsets(gold2).items():
        if not rows:
            out[s] = None
            continue
        _, types, pairs = _units(rows)
        d = np.array([[distances[p] for p in ps] for ps in pairs], dtype=float)
        tau = kendall_tau_b_rows(d)
        undefined = np.isnan(tau)
        tau = np.where(undefined, 0.0, tau)
        t = np.array(types)
        by_type: dict[str, float] = {}
        units_by_type: dict[str, int] = {}
        exact_by_type: dict[str, float] = {}
        for h in TYPES:
            m = t == h
            if m.any():
                by_type[h] = float(tau[m].mean())
                units_by_type[h] = int(m.sum())
                exact_by_type[h] = float((tau[m] >= 1.0 - 1e-12).mean())
        out[s] = {
            "tau": float(np.mean(list(by_type.values()))) if by_type else None,
            "tau_by_type": by_type,
            "exact_recovery": float((tau >= 1.0 - 1e-12).mean()),
            "exact_recovery_by_type": exact_by_type,
            "undefined_units": int(undefined.sum()),
            "counts": {"units": int(tau.shape[0]), "pairs": int(tau.shape[0] * 4), "units_by_type": units_by_type},
        }
    return out
