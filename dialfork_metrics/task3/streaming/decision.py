"""The streaming detectors' pure decision rules (SPEC section 8): the surprisal, the per-turn alarms,
the per-dialogue calibration statistic and the threshold read off it (the operating point).

Functions over arrays only; :class:`~dialfork_metrics.task3.streaming.StreamingDetector` and the
settings selection call them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

METHODS: tuple[str, ...] = ("it", "ss")
DEFAULT_FALSE_ALARM_RATE = 0.05
#: how the threshold is read off the calibration statistics (:func:`calibrate_threshold`)
THRESHOLD_RULES: tuple[str, ...] = ("percentile", "conformal", "upper_bound")
#: the rule of the ``selected`` preset (the ``paper`` preset uses ``"percentile"``)
DEFAULT_THRESHOLD_RULE = "upper_bound"
#: confidence of the ``upper_bound`` rule
DEFAULT_CONFIDENCE = 0.95


def surprisal(p: np.ndarray) -> np.ndarray:
    """``s_t = -log p_t`` (natural log; ``math.log`` per element, bit-identical to the streaming
    loop, so a threshold that equals a train statistic compares the same way in both).

    Args:
        p: The per-turn probabilities ``p_t`` of one dialogue, each in ``(0, 1]``.

    Returns:
        float64 array of the same length.
    """
    return np.asarray([-math.log(x) for x in np.asarray(p, dtype=np.float64).tolist()], dtype=np.float64)


def surprisal_jumps(p: np.ndarray) -> np.ndarray:
    """``Delta_t = s_t - s_{t-1}`` for ``t >= 2``; position 0 is ``-inf`` (no jump into the first turn).

    Args:
        p: The per-turn probabilities ``p_t`` of one dialogue.

    Returns:
        float64 array of the same length.
    """
    s = surprisal(p)
    d = np.full(s.shape, -np.inf)
    d[1:] = s[1:] - s[:-1]
    return d


def system_turn_index(turns: Sequence[Mapping[str, str]]) -> np.ndarray:
    """Per turn position, its system turn index (a user turn -> the latest system turn before it,
    or 1), as :func:`dialfork_dataset.forks.position_to_system_turn`.

    Args:
        turns: The dialogue's turns (``{"speaker", ...}``).

    Returns:
        int64 array of length ``len(turns)``, each value ``>= 1``.
    """
    return np.maximum(np.cumsum([t["speaker"] == "system" for t in turns]), 1)


def position_offsets(
    sys_turns: np.ndarray | Sequence[int] | None, position_weight: float, n: int
) -> np.ndarray:
    """``gamma * log j_t`` per turn position, ``j_t`` the position's system turn index (``>= 1``):
    the amount by which the position weight (ours) lowers the evidence an alarm at system turn
    ``j`` needs. ``math.log`` per element, as the streaming loop computes it, so the offline and
    streaming decisions agree bit for bit.

    Args:
        sys_turns: Per turn position, its system turn index
            (:func:`system_turn_index`); may be ``None`` when
            ``position_weight`` is 0.
        position_weight: ``gamma >= 0``; 0 gives zeros (the paper's single threshold).
        n: The number of turn positions.

    Returns:
        float64 array of length ``n``.

    Raises:
        ValueError: ``position_weight`` is not 0 and ``sys_turns`` is missing or of another length.
    """
    if not position_weight:
        return np.zeros(n)
    if sys_turns is None or len(sys_turns) != n:
        raise ValueError(
            f"position_weight={position_weight!r} needs the system turn index of each of the {n} turns, "
            f"got {None if sys_turns is None else len(sys_turns)}"
        )
    j = np.maximum(np.asarray(sys_turns, dtype=np.int64), 1)
    uniq, inv = np.unique(j, return_inverse=True)
    return np.asarray([float(position_weight) * math.log(int(u)) for u in uniq.tolist()], dtype=np.float64)[
        inv
    ]


def turn_scores(
    p: np.ndarray,
    method: str,
    sys_turns: np.ndarray | Sequence[int] | None = None,
    position_weight: float = 0.0,
) -> np.ndarray:
    """Per turn, the statistic compared with the threshold.

    * IT: ``p_t * exp(-gamma log j_t) = p_t / j_t^gamma``; an alarm when it falls *below* the
      threshold, so at system turn ``j`` the threshold on ``p_t`` is ``theta * j^gamma``;
    * SS: ``Delta_t + gamma log j_t``; an alarm when it rises *above* the threshold (position 0,
      which has no jump, is ``-inf``).

    ``gamma = position_weight`` (ours; 0, the paper's rule, returns ``p`` and
    :func:`surprisal_jumps` exactly) makes an early alarm need stronger evidence than a late one.
    A false alarm at system turn ``j`` of a conformant dialogue of ``T`` system turns interrupts
    the ``T + 1 - j`` turns left (the distance MAE_c charges, SPEC 8), so under one false-alarm
    budget a positive weight moves the alarms a conformant dialogue still raises later, where they
    cost less; a fork is caught at its fork turn whenever its evidence clears the raised bar.

    Args:
        p: The per-turn probabilities ``p_t`` of one dialogue.
        method: ``"it"`` or ``"ss"``.
        sys_turns: Per turn position, its system turn index (needed when ``position_weight`` > 0).
        position_weight: ``gamma >= 0``.

    Returns:
        float64 array of the same length as ``p``.

    Raises:
        ValueError: An unknown ``method``, or ``sys_turns`` missing for a positive weight.
    """
    p = np.asarray(p, dtype=np.float64)
    off = position_offsets(sys_turns, position_weight, len(p))
    if method == "it":
        if not position_weight:
            return p
        uniq, inv = np.unique(off, return_inverse=True)
        return p * np.asarray([math.exp(-o) for o in uniq.tolist()], dtype=np.float64)[inv]
    if method == "ss":
        d = surprisal_jumps(p)
        return d + off if position_weight else d
    raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")


def alarms(
    p: np.ndarray,
    method: str,
    threshold: float,
    sys_turns: np.ndarray | Sequence[int] | None = None,
    position_weight: float = 0.0,
) -> np.ndarray:
    """Boolean alarm per turn position: IT ``p_t / j_t^gamma < threshold``; SS
    ``Delta_t + gamma log j_t > threshold`` (:func:`turn_scores`; ``gamma = 0``: the paper's
    ``p_t < threshold`` and ``Delta_t > threshold``).

    Args:
        p: The per-turn probabilities ``p_t`` of one dialogue.
        method: ``"it"`` or ``"ss"``.
        threshold: The calibrated threshold.
        sys_turns: Per turn position, its system turn index (needed when ``position_weight`` > 0).
        position_weight: ``gamma >= 0``.

    Returns:
        Boolean array of the same length as ``p``.

    Raises:
        ValueError: An unknown ``method``, or ``sys_turns`` missing for a positive weight.
    """
    s = turn_scores(p, method, sys_turns, position_weight)
    return s < threshold if method == "it" else s > threshold


def calibration_statistic(
    p: np.ndarray,
    method: str,
    sys_turns: np.ndarray | Sequence[int] | None = None,
    position_weight: float = 0.0,
) -> float:
    """Per-dialogue statistic the threshold is calibrated on: the extreme of :func:`turn_scores`,
    IT ``min_t p_t / j_t^gamma``, SS ``max_t (Delta_t + gamma log j_t)`` (``gamma = 0``: the
    paper's ``min_t p_t`` and ``max_t Delta_t``).

    Args:
        p: The per-turn probabilities ``p_t`` of one dialogue (non-empty).
        method: ``"it"`` or ``"ss"``.
        sys_turns: Per turn position, its system turn index (needed when ``position_weight`` > 0).
        position_weight: ``gamma >= 0``.

    Returns:
        The statistic; a dialogue alarms somewhere exactly when it crosses the threshold.

    Raises:
        ValueError: An unknown ``method``, SS on a dialogue of fewer than two turns, or
            ``sys_turns`` missing for a positive weight.
    """
    p = np.asarray(p, dtype=np.float64)
    if method == "ss" and len(p) < 2:
        raise ValueError("SS needs dialogues of at least two turns (Delta_t starts at the second turn)")
    s = turn_scores(p, method, sys_turns, position_weight)
    return float(s.min()) if method == "it" else float(s[1:].max())


def max_calibration_alarms(
    n: int, false_alarm_rate: float, rule: str = "percentile", confidence: float = DEFAULT_CONFIDENCE
) -> int | None:
    """How many of ``n`` calibration dialogues a threshold may let alarm under ``rule`` (``None``
    for ``"percentile"``, which interpolates instead of counting):

    * ``"conformal"``: ``floor(a (n + 1)) - 1``, the split-conformal quantile: a new exchangeable
      conformant dialogue alarms with probability at most ``a`` (``-1``: ``n < 1/a - 1`` is too
      few dialogues for any alarm);
    * ``"upper_bound"``: the largest ``m`` whose one-sided Clopper-Pearson upper bound at
      ``confidence`` on the false-alarm rate, ``Beta.ppf(confidence, m + 1, n - m)``, is at most
      ``a``: the false-alarm rate is at most ``a`` with that confidence. ``None`` when even
      ``m = 0`` does not qualify (fewer than ``log(1 - confidence) / log(1 - a)`` dialogues, 59 at
      5% and 95%); the caller then falls back to ``"conformal"``.

    Args:
        n: Number of calibration dialogues.
        false_alarm_rate: The operating point ``a``.
        rule: ``"percentile"``, ``"conformal"`` or ``"upper_bound"``.
        confidence: The confidence of ``"upper_bound"``.

    Returns:
        The number of calibration dialogues allowed to alarm, or ``None`` (see above).

    Raises:
        ValueError: An unknown ``rule``.
    """
    if rule == "percentile":
        return None
    if rule == "conformal":
        return int(math.floor(false_alarm_rate * (n + 1) + 1e-9)) - 1
    if rule == "upper_bound":
        from scipy.stats import beta

        m = np.arange(n)
        ok = np.flatnonzero(beta.ppf(confidence, m + 1, n - m) <= false_alarm_rate)
        return int(ok.max()) if ok.size else None
    raise ValueError(f"unknown threshold rule {rule!r}; expected one of {THRESHOLD_RULES}")


def calibrate_threshold(
    stats: Sequence[float],
    method: str,
    false_alarm_rate: float = DEFAULT_FALSE_ALARM_RATE,
    percentile_method: str = "linear",
    rule: str = "percentile",
    confidence: float = DEFAULT_CONFIDENCE,
) -> float:
    """The alarm threshold for the calibration statistics ``stats`` at operating point ``a``.

    ``rule="percentile"`` (the paper's): IT the ``100*a``-th percentile of ``min p_t``, SS the
    ``100*(1-a)``-th of ``max Delta_t`` (``numpy.percentile(..., method=percentile_method)``).
    ``"conformal"`` and ``"upper_bound"`` (ours) put the threshold at an order statistic so that at
    most :func:`max_calibration_alarms` of the calibration dialogues alarm (IT alarms strictly
    below, SS strictly above the threshold; ties never add alarms); no alarm allowed gives
    ``-inf`` (IT) or ``+inf`` (SS): the detector never fires. ``"upper_bound"`` on too few
    dialogues for the bound falls back to ``"conformal"``, and below ``1/a - 1`` dialogues (19 at
    5%), where the conformal rule would never fire, to ``"percentile"``.

    Args:
        stats: The calibration statistic of each calibration dialogue
            (:func:`calibration_statistic`).
        method: ``"it"`` or ``"ss"``.
        false_alarm_rate: The operating point ``a``.
        percentile_method: ``numpy.percentile``'s method for ``rule="percentile"``.
        rule: ``"percentile"``, ``"conformal"`` or ``"upper_bound"``.
        confidence: The confidence of ``"upper_bound"``.

    Returns:
        The threshold (``-inf``/``+inf`` when no alarm is allowed).

    Raises:
        ValueError: No statistics, an unknown ``method`` or an unknown ``rule``.
    """
    stats = np.asarray(stats, dtype=np.float64)
    if stats.size == 0:
        raise ValueError("cannot calibrate a threshold on no dialogues")
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")
    m = max_calibration_alarms(stats.size, false_alarm_rate, rule, confidence)
    if m is None and rule == "upper_bound":  # too few dialogues for the bound: conformal, then percentile
        m = max_calibration_alarms(stats.size, false_alarm_rate, "conformal")
        if m < 0:
            m = None
    if m is None:
        q = 100.0 * false_alarm_rate if method == "it" else 100.0 * (1.0 - false_alarm_rate)
        return float(np.percentile(stats, q, method=percentile_method))
    if m < 0:
        return -math.inf if method == "it" else math.inf
    ordered = np.sort(stats) if method == "it" else -np.sort(-stats)
    return float(ordered[min(m, stats.size - 1)])


def calibration_fold_ids(n: int, folds: int, seed: int = 0) -> np.ndarray:
    """The ``cross_fit`` fold of each of ``n`` train dialogues: ``min(folds, n)`` folds dealt
    round-robin over a permutation seeded by ``seed``.

    Args:
        n: Number of train dialogues.
        folds: Requested number of folds.
        seed: Seed of the permutation.

    Returns:
        int64 array of length ``n``: each dialogue's fold, ``0..min(folds, n) - 1``.

    Raises:
        ValueError: Fewer than two folds are possible (``n < 2`` or ``folds < 2``).
    """
    k = min(int(folds), n)
    if k < 2:
        raise ValueError("calibration='cross_fit' needs at least two train dialogues")
    fold = np.empty(n, dtype=np.int64)
    fold[np.random.default_rng(seed).permutation(n)] = np.arange(n) % k
    return fold
