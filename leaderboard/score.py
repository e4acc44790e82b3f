"""Blind scoring against the hidden gold: the only module of ``leaderboard`` that reads gold.

* Detector track (Task 3): every number comes from ``dialfork_metrics.task3.scorer.score_predictions``
  (one code path: the leaderboard never re-implements the Score), called once per subset.
* Metric track (Task 2): Kendall's tau-b per unit (conformant source x type) between the
  submitted distances (d_1..d_4) of the unit's four forks and (4, 3, 2, 1); an undefined tau
  (all four distances equal) counts as 0; averaged per type and over the type means (every type of the release)
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

from dialfork_dataset import taxonomy
from dialfork_dataset.taxonomy import FORK_POSITIONS
from dialfork_metrics.stats import kendall_tau_rows

logger = logging.getLogger(__name__)

SUBSETS = ("public", "private")
#: Keys of ``score_predictions``' result copied into a leaderboard result (all aggregates).
DETECTOR_KEYS = (
    "score",
    "components",
    "weights",
    "mae_h",
    "mae_h_by_type",
    "cov_h",
    "cov_h_by_type",
    "mae_c",
    "cov_c",
    "mae_h_ref",
    "mae_c_ref",
    "counts",
)


class GoldError(ValueError):
    """The gold folder is unusable (a maintainer problem). Messages never quote gold rows."""


def load_gold(gold_dir: str | os.PathLike) -> dict[str, Any]:
    """The gold of the blind sets through ``dialfork_dataset.load_gold`` (task3, task2, manifest).

    Args:
        gold_dir: The gold folder.

    Returns:
        ``{"task3": rows, "task2": rows, "manifest": gold_manifest.json}``, as loaded.

    Raises:
        GoldError: The manifest has no ``revision``.
    """
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

    Args:
        blind_dir: The Hub layout folder (its ``README.md`` is the card).
        gold: The gold, as returned by :func:`load_gold`.

    Raises:
        GoldError: The card records no ``gold_revision``, or another revision than the gold's
            manifest.
    """
    from dialfork_dataset.hub import read_card_gold_revision

    recorded = read_card_gold_revision(blind_dir)
    if recorded is None:
        logger.debug("%s has no dataset card; gold revision not checked", blind_dir)
        return
    actual = gold.get("manifest", {}).get("revision")
    if not recorded:
        raise GoldError(
            f"{blind_dir}/README.md records no gold_revision: re-export the layout with this toolkit"
        )
    if recorded != actual:
        raise GoldError(
            f"the gold's revision {str(actual)[:12]} does not match the revision {recorded[:12]} recorded "
            f"in {blind_dir}/README.md: --gold and --blind come from different exports (or an export "
            "was interrupted; rerun it)"
        )


def split_subsets(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """Gold rows split by their ``subset`` column.

    Args:
        rows: Gold rows of Task 2 or Task 3.

    Returns:
        ``{"public": rows, "private": rows}``, each in input order (possibly empty).

    Raises:
        GoldError: A row's ``subset`` is neither ``"public"`` nor ``"private"``.
    """
    out: dict[str, list[Mapping[str, Any]]] = {s: [] for s in SUBSETS}
    bad = 0
    for r in rows:
        s = r.get("subset")
        if s not in out:
            bad += 1
            continue
        out[s].append(r)
    if bad:
        raise GoldError(
            f"{bad} gold row(s) have a 'subset' other than 'public'/'private'; re-export the gold"
        )
    return out


# --------------------------------------------------------------------------- Task 3


def score_detector(
    predictions: Mapping[str, int | None], gold3: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """Score validated detector-track predictions on the public and the private part.

    Args:
        predictions: ``{dialogue_id: system turn or None}``, already validated against the blind set.
        gold3: The gold's Task 3 rows (with their ``subset``).

    Returns:
        ``{"public": scores, "private": scores}``; ``scores`` holds the aggregate fields of
        ``score_predictions`` (``DETECTOR_KEYS``) for that part, or None when the part is empty.

    Raises:
        ValueError: The prediction ids do not match the gold ids (the validated blind set must be
            the gold's blind set); the scorer's own messages are not passed on, since they are
            written against the gold.
    """
    from dialfork_metrics.task3.scorer import PredictionError, score_predictions

    by_subset = split_subsets(gold3)
    gold_ids = {r["dialogue_id"] for r in gold3}
    if gold_ids != set(predictions):
        extra = len(set(predictions) - gold_ids)
        missing = len(gold_ids - set(predictions))
        raise ValueError(
            f"the predictions do not cover the gold's blind set ({missing} gold ids without a prediction, "
            f"{extra} predictions for ids outside it): was the submission validated against the blind "
            "set of this gold release?"
        )
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
            raise ValueError(
                f"the Task 3 scorer rejected {len(e.errors)} prediction(s) that passed validation; "
                "check that --blind and --gold come from the same export"
            ) from None
        out[s] = {k: res[k] for k in DETECTOR_KEYS}
    return out


# --------------------------------------------------------------------------- Task 2


def kendall_tau_b_rows(d: np.ndarray, target: Sequence[float] = (4, 3, 2, 1)) -> np.ndarray:
    """Kendall's tau-b between each row of ``d`` (n, m) and ``target`` (m,), NaN where it is
    undefined (a row or the target with all values tied), so that the scorer can count those
    units: :func:`dialfork_metrics.stats.kendall_tau_rows` with ``undefined="nan"`` (tested
    against ``scipy.stats.kendalltau`` and ``dialfork_metrics.stats.ranking_tau``, ties included).

    Args:
        d: Distances, shape ``(n, m)``: one row per unit (the metric track: the distances
            d_1..d_4 of a unit's four forks).
        target: The reference ranking, length ``m`` (default ``(4, 3, 2, 1)``: the earliest
            fork is the farthest).

    Returns:
        Shape ``(n,)``: tau-b of each row, in [-1, 1], NaN where undefined.
    """
    return kendall_tau_rows(d, target, undefined="nan")


def _units(rows: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[str], list[list[str]]]:
    """(unit ids, types, pair ids ordered k=1..4) of the gold Task 2 rows."""
    units: dict[str, dict[int, str]] = {}
    types: dict[str, str] = {}
    bad = 0
    for r in rows:
        u = r["unit_id"]
        k = r["fork_position"]
        units.setdefault(u, {})
        if k in units[u] or k not in FORK_POSITIONS:
            bad += 1
        units[u][k] = r["pair_id"]
        if types.setdefault(u, r["hallucination_type"]) != r["hallucination_type"]:
            bad += 1
    incomplete = sum(1 for u in units.values() if tuple(sorted(u)) != FORK_POSITIONS)
    if bad or incomplete:
        raise GoldError(
            f"Task 2 gold is malformed: {incomplete} unit(s) without exactly fork positions 1..4, "
            f"{bad} inconsistent row(s); re-export the gold"
        )
    ids = list(units)
    return ids, [types[u] for u in ids], [[units[u][k] for k in FORK_POSITIONS] for u in ids]


def score_metric(distances: Mapping[str, float], gold2: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Score validated metric-track distances on the public and the private part.

    Args:
        distances: ``{pair_id: distance}``, already validated against the blind set.
        gold2: The gold's Task 2 rows (unit, type, fork position, subset per pair).

    Returns:
        ``{"public": scores, "private": scores}``; ``scores``: ``tau`` (mean of the per-type means,
        the paper's Avg.), ``tau_by_type``, ``exact_recovery`` (share of units whose order is exactly
        (4,3,2,1), i.e. tau = 1), ``undefined_units`` (all four distances equal; counted as tau 0)
        and ``counts``; None for an empty part.

    Raises:
        ValueError: The pair ids do not match the gold's Task 2 pairs.
    """
    gold_ids = {r["pair_id"] for r in gold2}
    if gold_ids != set(distances):
        raise ValueError(
            "the distances do not cover the gold's Task 2 pairs: was the submission validated against "
            "the blind set of this gold release?"
        )
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
        for h in taxonomy.names():
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
            "counts": {
                "units": int(tau.shape[0]),
                "pairs": int(tau.shape[0] * 4),
                "units_by_type": units_by_type,
            },
        }
    return out


# --------------------------------------------------------------------------- bootstrap intervals

#: Resamples, level and seed of the intervals stored with a result (named in its configuration).
CI_RESAMPLES = 1000
CI_LEVEL = 0.95
CI_SEED = 0


def _bootstrap_ci(
    strata: Sequence[np.ndarray], statistic, n_resamples: int, level: float, seed: int
) -> list[float] | None:
    """Percentile interval of ``statistic`` under a stratified bootstrap: each stratum's rows are
    resampled with replacement on their own (``scipy.stats.bootstrap`` over one index array per
    stratum), so every resample keeps the design's mix (e.g. forked vs conformant dialogues).
    ``statistic`` takes one resampled index array per stratum (shape ``(..., n_i)``)."""
    from scipy.stats import bootstrap

    if n_resamples <= 0 or any(len(x) < 2 for x in strata):
        return None
    idx = tuple(np.arange(len(x), dtype=np.intp) for x in strata)
    res = bootstrap(
        idx,
        statistic,
        paired=False,
        vectorized=True,
        n_resamples=n_resamples,
        confidence_level=level,
        method="percentile",
        batch=100,
        random_state=np.random.default_rng(seed),
    )
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return [lo, hi] if np.isfinite(lo) and np.isfinite(hi) else None


def _detector_strata(
    predictions: Mapping[str, int | None], rows: Sequence[Mapping[str, Any]]
) -> tuple[np.ndarray, np.ndarray]:
    """Per forked and per conformant dialogue, ``(flagged, error of the flag, error of the
    reference predictor)`` as arrays of shape ``(3, n)`` (the quantities ``score_predictions``
    averages: always-last for forks, always-first for conformant dialogues)."""
    fork: list[tuple[float, float, float]] = []
    conf: list[tuple[float, float, float]] = []
    for r in rows:
        p = predictions[r["dialogue_id"]]
        T = int(r["num_system_turns"])
        if r.get("hallucination_type") is not None:
            tk = int(r["fork_turn"])
            fork.append((p is not None, 0.0 if p is None else abs(int(p) - tk), T - tk))
        else:
            conf.append((p is not None, 0.0 if p is None else T + 1 - int(p), T))
    return np.asarray(fork, dtype=float).reshape(-1, 3).T, np.asarray(conf, dtype=float).reshape(-1, 3).T


def _resampled_sums(cols: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Column sums of ``cols`` (``(k, n)``) over each resample of row indices ``idx``
    (``(..., n)``): counts per row (``bincount``) times the columns, one BLAS product."""
    n = cols.shape[1]
    flat = idx.reshape(-1, idx.shape[-1])
    b = flat.shape[0]
    offset = (np.arange(b, dtype=np.intp) * n)[:, None]  # one bincount for the whole batch
    counts = np.bincount((flat + offset).ravel(), minlength=b * n).reshape(b, n)
    return (counts @ cols.T).reshape(*idx.shape[:-1], cols.shape[0])


def detector_score_statistic(
    fork_sums: np.ndarray, n_fork: int, conf_sums: np.ndarray, n_conf: int
) -> np.ndarray:
    """The Score of SPEC section 8 from the sums of the :func:`_detector_strata` columns
    (``(..., 3)``: flagged, error of the flagged, error of the reference predictor) over the
    forked and the conformant dialogues, vectorised over leading axes; equal to
    ``score_predictions(...)["score"]`` on the original rows.

    Args:
        fork_sums: Column sums over the forked dialogues, shape ``(..., 3)``.
        n_fork: Number of forked dialogues.
        conf_sums: Column sums over the conformant dialogues, shape ``(..., 3)``.
        n_conf: Number of conformant dialogues.

    Returns:
        The Score (0-100), one per leading index.
    """
    from dialfork_metrics.task3.scorer import COMPONENT_FLOOR, SCORE_WEIGHTS

    def part(sums, n, none_value):
        n_flag, err, ref = sums[..., 0], sums[..., 1], sums[..., 2]
        with np.errstate(invalid="ignore", divide="ignore"):
            mae = err / n_flag
        ref_mean = ref / n
        regular = np.maximum(0.0, 1.0 - mae / np.where(ref_mean > 0, ref_mean, 1.0))
        comp = np.where(ref_mean > 0, regular, np.where(mae == 0, 1.0, 0.0))  # degenerate reference
        return np.where(n_flag == 0, none_value, comp), n_flag / n

    a1, cov_h = part(fork_sums, n_fork, 0.0)
    a2, cov_c = part(conf_sums, n_conf, 1.0)
    logs = sum(
        w * np.log(np.maximum(x, COMPONENT_FLOOR)) for w, x in zip(SCORE_WEIGHTS, (a1, a2, cov_h, 1 - cov_c))
    )
    return 100.0 * np.exp(logs)


def detector_score_ci(
    predictions: Mapping[str, int | None],
    gold3: Sequence[Mapping[str, Any]],
    *,
    n_resamples: int = CI_RESAMPLES,
    level: float = CI_LEVEL,
    seed: int = CI_SEED,
) -> dict[str, list[float] | None]:
    """``{subset: [low, high] or None}``: percentile bootstrap interval of the Score, resampling
    the subset's forked and conformant dialogues separately (an aggregate: nothing per
    dialogue leaves this function). None when a subset has fewer than 2 of either kind.

    Args:
        predictions: A predicted system turn per dialogue id (None: no deviation).
        gold3: The Task 3 gold rows.
        n_resamples: Bootstrap resamples (default 1000; 0 or fewer gives None).
        level: Confidence level (default 0.95).
        seed: Seed of the bootstrap generator (default 0).

    Returns:
        The interval of each subset (``"public"``, ``"private"``); None also for an empty
        subset or a bound that is not finite.

    Raises:
        GoldError: A gold row has an unknown subset (from :func:`split_subsets`).
    """
    out: dict[str, list[float] | None] = {}
    for s, rows in split_subsets(gold3).items():
        fork, conf = _detector_strata(predictions, rows)

        def stat(i_f, i_c, axis=-1, fork=fork, conf=conf):
            return detector_score_statistic(
                _resampled_sums(fork, i_f), fork.shape[1], _resampled_sums(conf, i_c), conf.shape[1]
            )

        out[s] = _bootstrap_ci([fork[0], conf[0]], stat, n_resamples, level, seed) if rows else None
    return out


def metric_tau_ci(
    distances: Mapping[str, float],
    gold2: Sequence[Mapping[str, Any]],
    *,
    n_resamples: int = CI_RESAMPLES,
    level: float = CI_LEVEL,
    seed: int = CI_SEED,
) -> dict[str, list[float] | None]:
    """``{subset: [low, high] or None}``: percentile bootstrap interval of the Avg. tau (mean of
    the per-type means), resampling each type's units separately.

    Args:
        distances: The submitted distance per pair id.
        gold2: The Task 2 gold rows.
        n_resamples: Bootstrap resamples (default 1000; 0 or fewer gives None).
        level: Confidence level (default 0.95).
        seed: Seed of the bootstrap generator (default 0).

    Returns:
        The interval of each subset (``"public"``, ``"private"``); None for an empty subset, a
        type with fewer than 2 units, or a bound that is not finite. An undefined tau counts
        as 0.

    Raises:
        GoldError: A gold row has an unknown subset (from :func:`split_subsets`).
    """
    out: dict[str, list[float] | None] = {}
    for s, rows in split_subsets(gold2).items():
        if not rows:
            out[s] = None
            continue
        _, types, pairs = _units(rows)
        d = np.array([[distances[p] for p in ps] for ps in pairs], dtype=float)
        tau = np.nan_to_num(kendall_tau_b_rows(d), nan=0.0)  # undefined counts as 0, as in score_metric
        t = np.array(types)
        by_type = [tau[t == h] for h in taxonomy.names() if (t == h).any()]

        def stat(*idx, axis=-1, by_type=by_type):
            return np.mean(
                [_resampled_sums(x[None, :], i)[..., 0] / x.shape[0] for x, i in zip(by_type, idx)], axis=0
            )

        out[s] = _bootstrap_ci(by_type, stat, n_resamples, level, seed)
    return out
