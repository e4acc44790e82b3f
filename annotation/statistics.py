"""The statistics of the study's analyses: thin, checked wrappers over well-kept libraries
(``scipy.stats``: Kendall tau_b, Spearman, Wilcoxon, Fisher exact, bootstrap; ``statsmodels``:
Wilson intervals; ``krippendorff``: alpha; ``irrCAC``: Gwet's AC1). Used by
:mod:`annotation.analysis`, which re-exports them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

#: Bootstrap resamples of every interval (paper, Appendix N).
N_BOOT = 10_000


def _f(x: Any) -> float | None:
    """JSON-safe float (NaN -> None)."""
    if x is None:
        return None
    x = float(x)
    return None if math.isnan(x) else x


def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> float:
    """Kendall's tau_b (scipy); NaN when undefined (fewer than 2 items or a constant variable).

    Args:
        x: The first variable, one value per item.
        y: The second variable, same length as ``x``.

    Returns:
        tau_b in [-1, 1] (``scipy.stats.kendalltau(variant="b")``), or NaN when ``x`` has fewer
        than two values or either variable is constant.
    """
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 2 or np.all(x == x[0]) or np.all(y == y[0]):
        return float("nan")
    return float(stats.kendalltau(x, y, variant="b").statistic)


def wilson(count: int, n: int, alpha: float = 0.05) -> tuple[float | None, float | None]:
    """Wilson score interval (statsmodels ``proportion_confint(method="wilson")``).

    Args:
        count: Number of successes (0 <= count <= n).
        n: Number of trials.
        alpha: One minus the confidence level (0.05: a 95% interval).

    Returns:
        ``(low, high)`` bounds of the proportion, both in [0, 1]; ``(None, None)`` when
        ``n <= 0``.
    """
    if n <= 0:
        return None, None
    from statsmodels.stats.proportion import proportion_confint

    lo, hi = proportion_confint(int(count), int(n), alpha=alpha, method="wilson")
    return float(lo), float(hi)


def rate(count: int, n: int) -> dict[str, Any]:
    """A proportion with its 95% Wilson interval, as the analyses report it.

    Args:
        count: Number of successes.
        n: Number of trials.

    Returns:
        ``{"count", "n", "rate": count / n (None when n is 0), "ci_low", "ci_high": Wilson bounds
        from :func:`wilson` (None when n <= 0)}``.
    """
    lo, hi = wilson(count, n)
    return {"count": int(count), "n": int(n), "rate": (count / n) if n else None, "ci_low": lo, "ci_high": hi}


def bootstrap_ci(
    data: Sequence[np.ndarray] | np.ndarray,
    statistic,
    n_boot: int = N_BOOT,
    seed: int = 0,
    level: float = 0.95,
    paired: bool = True,
    vectorized: bool = True,
) -> tuple[float | None, float | None]:
    """Percentile bootstrap interval (``scipy.stats.bootstrap``, seeded ``numpy`` generator).

    ``data`` is one array or a tuple of same-length arrays resampled together (``paired``).

    Args:
        data: One array of observations, or a tuple of same-length arrays (e.g. ``(x, y)``).
            Anything that is not a tuple is taken as one array.
        statistic: Function of the array(s) with an ``axis`` keyword (``vectorized``), e.g.
            ``lambda x, axis=-1: x.mean(axis=axis)``.
        n_boot: Bootstrap resamples (default :data:`N_BOOT`, 10,000).
        seed: Seed of the ``numpy`` random generator.
        level: Confidence level (default 0.95).
        paired: Resample the arrays of a tuple together, by observation (default True); has no
            effect on a single array.
        vectorized: Whether ``statistic`` takes the ``axis`` keyword (default True).

    Returns:
        ``(low, high)`` percentile bounds (None for a NaN bound); ``(None, None)`` when there are
        fewer than two observations.
    """
    arrays = (
        (np.asarray(data, float),)
        if isinstance(data, np.ndarray) or not isinstance(data, tuple)
        else tuple(np.asarray(a, float) for a in data)
    )
    if len(arrays[0]) < 2:
        return None, None
    res = stats.bootstrap(
        arrays,
        statistic,
        n_resamples=n_boot,
        confidence_level=level,
        method="percentile",
        paired=paired and len(arrays) > 1,
        vectorized=vectorized,
        rng=np.random.default_rng(seed),
    )
    lo, hi = res.confidence_interval
    return _f(lo), _f(hi)


def _mean(x, axis=-1):
    return np.mean(x, axis=axis)


def wilcoxon_greater(values: Sequence[float]) -> float | None:
    """One-sided Wilcoxon signed-rank p-value against 0 (alternative: greater).

    ``scipy.stats.wilcoxon`` with its exact null distribution when there are no zeros or tied
    absolute values and n <= 50, else the normal approximation with tie correction (ours: scipy's
    "auto" would run a slow permutation test for small tied samples).

    Args:
        values: The sample (e.g. one tau_b per unit); NaN values are dropped.

    Returns:
        The one-sided p-value, or None when no value is left or all values are 0.
    """
    v = np.asarray(values, float)
    v = v[~np.isnan(v)]
    if len(v) == 0 or np.all(v == 0):
        return None
    a = np.abs(v)
    exact = len(v) <= 50 and not np.any(v == 0) and len(np.unique(a)) == len(a)
    return float(stats.wilcoxon(v, alternative="greater", method="exact" if exact else "asymptotic").pvalue)


def fisher_greater(c1: int, n1: int, c2: int, n2: int) -> float | None:
    """One-sided Fisher exact test that rate 1 (c1/n1) exceeds rate 2 (c2/n2).

    Args:
        c1: Successes of the first group.
        n1: Trials of the first group.
        c2: Successes of the second group.
        n2: Trials of the second group.

    Returns:
        The p-value of ``scipy.stats.fisher_exact`` (alternative: greater) on the 2x2 table, or
        None when either group has no trials.
    """
    if n1 == 0 or n2 == 0:
        return None
    return float(stats.fisher_exact([[c1, n1 - c1], [c2, n2 - c2]], alternative="greater").pvalue)


def _gwet_ac1_counts(table: np.ndarray) -> tuple[float, float, float]:
    """Gwet's AC1 for several raters from a subjects x categories count table (Gwet 2008):
    pa = mean over subjects with >= 2 ratings of sum_k r_ik (r_ik - 1) / (r_i (r_i - 1));
    pi_k = mean over subjects of r_ik / r_i; pe = sum_k pi_k (1 - pi_k) / (q - 1).
    Used when irrCAC is not installed or cannot take the table (a single subject: its standard error
    divides by n - 1); checked against irrCAC in the tests."""
    r = table.sum(axis=1)
    keep = r >= 2
    q = table.shape[1]
    if q < 2:  # one category: chance agreement is certain, AC1 undefined
        return float("nan"), 1.0, 1.0
    pa = float(np.mean((table[keep] * (table[keep] - 1)).sum(axis=1) / (r[keep] * (r[keep] - 1))))
    pi = np.mean(table[r > 0] / r[r > 0, None], axis=0)
    pe = float((pi * (1 - pi)).sum() / (q - 1))
    return (pa - pe) / (1 - pe) if pe < 1 else float("nan"), pa, pe


def gwet_ac1(ratings: Sequence[Sequence[Any]], categories: Sequence[Any]) -> dict[str, Any]:
    """Gwet's AC1 and raw (pairwise) agreement of categorical ratings.

    Uses ``irrCAC`` when installed and at least two subjects have two ratings, else the same
    statistic from Gwet's (2008) formula: irrCAC computes the coefficient's standard error with it,
    which divides by zero for a single subject (the coefficient itself is defined).

    Args:
        ratings: One list per subject: the ratings it received, any number >= 1; subjects with
            fewer than two ratings do not count for agreement.
        categories: Every category a rating can take (also those nobody chose: they enter the
            chance agreement).

    Returns:
        ``{"ac1": Gwet's AC1, "raw": raw pairwise agreement, "n_subjects": subjects with at least
        two ratings}``; ``ac1`` and ``raw`` are None when no subject has two ratings, and ``ac1`` is
        None when the statistic is undefined (a single category).
    """
    subj = [list(r) for r in ratings if len(r) >= 2]
    if not subj:
        return {"ac1": None, "raw": None, "n_subjects": 0}
    cats = list(categories)
    try:
        from irrCAC.raw import CAC
    except ImportError:
        CAC = None
    if CAC is not None and len(subj) >= 2 and len(cats) >= 2:
        width = max(len(r) for r in subj)
        frame = pd.DataFrame(
            [r + [None] * (width - len(r)) for r in subj], columns=[f"rater{i}" for i in range(width)]
        )
        res = CAC(frame, categories=cats).gwet()["est"]
        ac1, pa = float(res["coefficient_value"]), float(res["pa"])
    else:  # irrCAC missing or not applicable: the same statistic from the formula above
        table = np.array([[r.count(c) for c in cats] for r in subj], float)
        ac1, pa, _ = _gwet_ac1_counts(table)
    return {"ac1": _f(ac1), "raw": _f(pa), "n_subjects": len(subj)}


def krippendorff_interval(ratings: Sequence[Sequence[float]]) -> dict[str, Any]:
    """Krippendorff's alpha (interval) of per-subject numeric ratings (``krippendorff`` package).

    Args:
        ratings: One list per subject of the numeric ratings it received; None and NaN entries
            are dropped, and subjects left with fewer than two ratings do not count.

    Returns:
        ``{"alpha": Krippendorff's interval alpha, "n_subjects": subjects counted}``; ``alpha`` is
        None when no subject has two ratings or all ratings are equal (alpha undefined).
    """
    subj = [
        [float(v) for v in r if v is not None and not (isinstance(v, float) and math.isnan(v))]
        for r in ratings
    ]
    subj = [r for r in subj if len(r) >= 2]
    if not subj:
        return {"alpha": None, "n_subjects": 0}
    width = max(len(r) for r in subj)
    data = np.full((width, len(subj)), np.nan)
    for j, r in enumerate(subj):
        data[: len(r), j] = r
    values = np.concatenate([np.asarray(r) for r in subj])
    if np.all(values == values[0]):
        return {"alpha": None, "n_subjects": len(subj)}  # no variation: alpha undefined
    import krippendorff

    a = krippendorff.alpha(reliability_data=data, level_of_measurement="interval")
    return {"alpha": _f(a), "n_subjects": len(subj)}


def spearman_rho(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    """Spearman's rho along ``axis`` (Pearson correlation of ``scipy.stats.rankdata`` average ranks),
    vectorized for the bootstrap; equals ``scipy.stats.spearmanr`` on 1-D input.

    Args:
        x: The first variable (any shape).
        y: The second variable, same shape as ``x``.
        axis: The axis along which the items lie (default -1, the last).

    Returns:
        rho in [-1, 1] for each slice along ``axis`` (a 0-d array for 1-D input); NaN where a
        variable is constant.
    """
    rx = stats.rankdata(x, axis=axis)
    ry = stats.rankdata(y, axis=axis)
    rx = rx - rx.mean(axis=axis, keepdims=True)
    ry = ry - ry.mean(axis=axis, keepdims=True)
    den = np.sqrt((rx * rx).sum(axis=axis) * (ry * ry).sum(axis=axis))
    with np.errstate(invalid="ignore", divide="ignore"):
        return (rx * ry).sum(axis=axis) / den
