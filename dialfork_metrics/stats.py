"""Statistics of the paper's evaluation (SPEC sections 5, 6 and 9), as pure functions.

Everything here delegates to scipy / statsmodels; what is written by hand is only the glue
that those libraries do not offer:

* :func:`kendall_tau` and :func:`kendall_tau_rows`: the project's one Kendall tau-b, scalar
  (``scipy.stats.kendalltau``) and vectorised over the rows of a matrix (the same number, tested
  against scipy); :func:`ranking_tau` is the scalar one on a unit's distances against the
  expected order (4, 3, 2, 1);
* the undefined case: tau-b is 0/0 when either argument has all its values tied (a constant
  input: a method giving the four forks equal distances). The ``undefined=`` parameter chooses
  what is returned then: ``"zero"`` (the paper's and SPEC 5's convention for a unit's tau: no
  ranking information counts as chance; the default) or ``"nan"`` (for callers that count or
  drop undefined units: the leaderboard's scorer reports ``undefined_units``, the audit's
  correlation check prints NaN for a constant feature). No other policy exists in the project;
* :func:`unit_permutation_pvalue`: the exact permutation test of one unit's tau against
  chance, enumerating the 4! = 24 orderings (scipy's ``permutation_test`` would sample or
  enumerate the same set, but over a generic statistic; enumerating the 24 is exact and
  vectorised here);
* :func:`fisher_combine` (``scipy.stats.combine_pvalues``), :func:`holm` (the values of
  ``statsmodels.stats.multitest.multipletests``, computed here), :func:`wilcoxon_greater`
  (``scipy.stats.wilcoxon``), :func:`paired_t_greater` (``scipy.stats.ttest_1samp``) and
  :func:`bootstrap_mean_ci` (``scipy.stats.bootstrap``, seeded);
* :func:`wilcoxon_greater_test` / :func:`paired_t_greater_test`: the same tests with their
  statistics (W, t) for Table 7; :func:`wilcoxon_two_sided` (Task 1's method comparisons);
  :func:`bootstrap_column_means_ci`: CIs of many means at once, units resampled jointly
  (``scipy.stats.bootstrap`` with ``axis=0``, batched).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

EXPECTED_ORDER = (4, 3, 2, 1)

#: What :func:`kendall_tau` and :func:`kendall_tau_rows` return where tau is undefined.
UNDEFINED_POLICIES = ("zero", "nan")


def _undefined_value(undefined: str) -> float:
    if undefined not in UNDEFINED_POLICIES:
        raise ValueError(f"undefined must be one of {UNDEFINED_POLICIES}, got {undefined!r}")
    return 0.0 if undefined == "zero" else math.nan


def kendall_tau(x: Sequence[float], y: Sequence[float] = EXPECTED_ORDER, *, undefined: str = "zero") -> float:
    """Kendall's tau-b between ``x`` and ``y`` (``scipy.stats.kendalltau``, variant ``"b"``).

    Args:
        x: A 1-d sequence of at least 2 numbers.
        y: A 1-d sequence of the same length; by default the expected order of a unit's four
            distances, (4, 3, 2, 1).
        undefined: the value where tau-b is undefined, i.e. ``x`` or ``y`` has all its values
            tied: ``"zero"`` (0.0, SPEC 5's convention; default) or ``"nan"``.

    Returns:
        tau-b in [-1, 1], or the ``undefined`` value (0.0 or nan).

    Raises:
        ValueError: ``x`` and ``y`` are not 1-d of the same length >= 2, or ``undefined`` is
            neither ``"zero"`` nor ``"nan"``.

    >>> kendall_tau([0.9, 0.7, 0.5, 0.1])
    1.0
    >>> kendall_tau([1, 1, 1, 1]), kendall_tau([1, 1, 1, 1], undefined="nan")
    (0.0, nan)
    """
    from scipy.stats import kendalltau

    fallback = _undefined_value(undefined)
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if a.shape != b.shape or a.ndim != 1 or a.size < 2:
        raise ValueError(
            f"Kendall tau needs two 1-d sequences of the same length >= 2, got shapes {a.shape} and {b.shape}"
        )
    if np.all(a == a[0]) or np.all(b == b[0]):
        return fallback
    tau = kendalltau(a, b).statistic
    return float(tau) if math.isfinite(tau) else fallback


def kendall_tau_rows(
    d: Sequence[Sequence[float]], target: Sequence[float] = EXPECTED_ORDER, *, undefined: str = "zero"
) -> np.ndarray:
    """:func:`kendall_tau` of each row of ``d`` (n, m) against ``target`` (m,), vectorised.

    The same number as ``scipy.stats.kendalltau(row, target).statistic`` (ties included; tested),
    written out over the m(m-1)/2 pairs because scipy's per-call overhead makes thousands of
    4-element units slow. ``undefined``: as in :func:`kendall_tau`, per row.

    Args:
        d: The rows, shape ``(n, m)``.
        target: The reference order, shape ``(m,)`` (default ``(4, 3, 2, 1)``).
        undefined: ``"zero"`` or ``"nan"``: the value of a row where tau-b is undefined.

    Returns:
        tau-b of each row, shape ``(n,)``, float64.

    Raises:
        ValueError: ``d`` is not of shape ``(n, m)`` with ``m = len(target)``, or ``undefined``
            is neither ``"zero"`` nor ``"nan"``.
    """
    fallback = _undefined_value(undefined)
    d = np.asarray(d, dtype=float)
    y = np.asarray(target, dtype=float)
    if d.ndim != 2 or y.ndim != 1 or d.shape[1] != y.shape[0]:
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
        return np.where(denom > 0, s / np.where(denom > 0, denom, 1.0), fallback)


def ranking_tau(distances: Sequence[float], expected: Sequence[float] = EXPECTED_ORDER) -> float:
    """Kendall tau-b between ``distances`` (d_1..d_k) and ``expected``; undefined -> 0.0
    (:func:`kendall_tau` with ``undefined="zero"``, after checking the distances).

    Args:
        distances: One distance per fork position, k = 1..4 (earlier forks should be further).
        expected: The expected order (default ``(4, 3, 2, 1)``).

    Returns:
        tau-b in [-1, 1]; 0.0 when undefined (e.g. all distances equal).

    Raises:
        ValueError: ``distances`` does not have one value per position of ``expected``, or holds
            NaN/inf.

    Example:
        >>> ranking_tau([0.9, 0.7, 0.5, 0.1])
        1.0
        >>> ranking_tau([1, 1, 1, 1])
        0.0
    """
    d = np.asarray(distances, dtype=float)
    if d.shape != (len(expected),):
        raise ValueError(f"expected {len(expected)} distances (one per fork position), got shape {d.shape}")
    if not np.all(np.isfinite(d)):
        raise ValueError(f"distances must be finite, got {d.tolist()}")
    return kendall_tau(d, expected, undefined="zero")


def exact_recovery(distances: Sequence[float]) -> bool:
    """Whether the predicted order is exactly right: d_1 > d_2 > d_3 > d_4 (strict).

    Args:
        distances: The distances of the forks, the earliest fork first.

    Returns:
        True when they strictly decrease.
    """
    d = np.asarray(distances, dtype=float)
    return bool(np.all(d[:-1] > d[1:]))


def unit_permutation_pvalue(distances: Sequence[float]) -> float:
    """One-sided exact permutation p-value of a unit's tau: P(tau(perm(d)) >= tau(d)).

    Under the null the fork positions are exchangeable, so every ordering of the observed
    distances is equally likely; with 4 positions there are 24 orderings, enumerated exactly
    (ties in ``d`` are kept as ties, so an all-equal unit gets p = 1).

    Args:
        distances: The unit's distances, the earliest fork first.

    Returns:
        The p-value in (0, 1].
    """
    d = list(map(float, distances))
    obs = ranking_tau(d)
    taus = [ranking_tau([d[i] for i in perm]) for perm in itertools.permutations(range(len(d)))]
    return float(np.mean(np.asarray(taus) >= obs - 1e-12))


def _finite(x: Sequence[float], what: str) -> np.ndarray:
    a = np.asarray(x, dtype=float)
    if not np.all(np.isfinite(a)):
        raise ValueError(
            f"{what}: {int(np.sum(~np.isfinite(a)))} value(s) are NaN or inf; every unit needs a finite value"
        )
    return a


def _pvalues(pvalues: Sequence[float], what: str) -> np.ndarray:
    p = np.asarray(pvalues, dtype=float)
    bad = ~((p >= 0.0) & (p <= 1.0))  # also catches NaN
    if np.any(bad):
        raise ValueError(f"{what}: p-values must lie in [0, 1], got {p[bad][:5].tolist()}")
    return p


def fisher_combine(pvalues: Sequence[float]) -> float:
    """Fisher's combined p-value (``scipy.stats.combine_pvalues(method="fisher")``).

    Args:
        pvalues: Independent p-values in [0, 1] (zeros are clipped to 1e-300).

    Returns:
        The combined p-value.

    Raises:
        ValueError: No p-values, or one outside [0, 1] (NaN included).
    """
    from scipy.stats import combine_pvalues

    p = _pvalues(pvalues, "fisher_combine")
    if p.size == 0:
        raise ValueError("fisher_combine: no p-values")
    return float(combine_pvalues(np.clip(p, 1e-300, 1.0), method="fisher").pvalue)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values, input order: the values of ``statsmodels``'
    ``multipletests(method="holm")``, computed here because that function runs ``gc.collect()`` on
    every call (a quarter of a second in a process holding torch; the benchmark makes dozens).

    Args:
        pvalues: The p-values in [0, 1].

    Returns:
        The adjusted p-values, in the order given (empty for none).
    """
    p = _pvalues(pvalues, "holm")
    if p.size == 0:
        return []
    order = np.argsort(p)
    adjusted = np.minimum(np.maximum.accumulate(p[order] * np.arange(p.size, 0, -1)), 1.0)
    out = np.empty_like(adjusted)
    out[order] = adjusted
    return [float(x) for x in out]


def wilcoxon_greater(diff: Sequence[float]) -> float:
    """One-sided Wilcoxon signed-rank p-value that the paired differences are > 0.

    Zero differences are dropped (``zero_method="wilcox"``, the classical test); if every
    difference is zero there is no evidence either way and p = 1.0 (scipy would return NaN).

    Args:
        diff: The paired differences (NaN/inf refused).

    Returns:
        The p-value.

    Raises:
        ValueError: The differences hold NaN or inf, or there are none.
    """
    from scipy.stats import wilcoxon

    x = _finite(diff, "wilcoxon_greater")
    if x.size == 0:
        raise ValueError("wilcoxon_greater: no paired differences")
    if np.all(x == 0):
        return 1.0
    return float(wilcoxon(x, alternative="greater", zero_method="wilcox").pvalue)


def paired_t_greater(diff: Sequence[float]) -> float:
    """One-sided paired t-test p-value (mean difference > 0); constant differences -> 0 or 1.

    Args:
        diff: The paired differences (NaN/inf refused).

    Returns:
        The p-value.

    Raises:
        ValueError: The differences hold NaN or inf, or there are fewer than 2.
    """
    from scipy.stats import ttest_1samp

    x = _finite(diff, "paired_t_greater")
    if x.size < 2:
        raise ValueError("paired_t_greater: need at least 2 paired differences")
    if np.all(x == x[0]):
        return 0.0 if x[0] > 0 else 1.0
    return float(ttest_1samp(x, 0.0, alternative="greater").pvalue)


def bootstrap_mean_ci(
    diff: Sequence[float], n_resamples: int = 10_000, seed: int = 0, confidence: float = 0.95
) -> tuple[float, float]:
    """Paired bootstrap percentile CI of the mean difference (``scipy.stats.bootstrap``, seeded).

    Args:
        diff: The paired differences (NaN/inf refused).
        n_resamples: Bootstrap resamples.
        seed: Seed of the resampling.
        confidence: The interval's confidence level.

    Returns:
        ``(low, high)``; constant differences give the degenerate ``(c, c)``.

    Raises:
        ValueError: The differences hold NaN or inf, or there are fewer than 2.
    """
    from scipy.stats import bootstrap

    x = _finite(diff, "bootstrap_mean_ci")
    if x.size < 2:
        raise ValueError("bootstrap_mean_ci: need at least 2 paired differences")
    if np.all(x == x[0]):
        return float(x[0]), float(x[0])
    res = bootstrap(
        (x,),
        np.mean,
        n_resamples=n_resamples,
        confidence_level=confidence,
        method="percentile",
        rng=np.random.default_rng(seed),
        vectorized=True,
    )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def wilcoxon_greater_test(diff: Sequence[float]) -> tuple[float, float]:
    """``(W, p)``: the one-sided Wilcoxon signed-rank statistic (sum of the ranks of the positive
    differences, zeros dropped, as ``scipy.stats.wilcoxon`` reports it) and its p-value
    (:func:`wilcoxon_greater`).

    Args:
        diff: The paired differences (NaN/inf refused).

    Returns:
        ``(W, p)``; all-zero differences give ``(0.0, 1.0)``.

    Raises:
        ValueError: The differences hold NaN or inf, or there are none.
    """
    from scipy.stats import wilcoxon

    x = _finite(diff, "wilcoxon_greater_test")
    if x.size == 0:
        raise ValueError("wilcoxon_greater_test: no paired differences")
    if np.all(x == 0):
        return 0.0, 1.0
    res = wilcoxon(x, alternative="greater", zero_method="wilcox")
    return float(res.statistic), float(res.pvalue)


def paired_t_greater_test(diff: Sequence[float]) -> tuple[float, float]:
    """``(t, p)``: the one-sample t statistic of the paired differences against 0 and its
    one-sided p-value (:func:`paired_t_greater`).

    Args:
        diff: The paired differences (NaN/inf refused).

    Returns:
        ``(t, p)``. Constant differences have no variance: ``t`` is then +inf, -inf or 0 (by the
        sign of the constant) and p is 0, 1 or 1.

    Raises:
        ValueError: The differences hold NaN or inf, or there are fewer than 2.
    """
    from scipy.stats import ttest_1samp

    x = _finite(diff, "paired_t_greater_test")
    if x.size < 2:
        raise ValueError("paired_t_greater_test: need at least 2 paired differences")
    if np.all(x == x[0]):
        return (math.inf, 0.0) if x[0] > 0 else ((-math.inf, 1.0) if x[0] < 0 else (0.0, 1.0))
    res = ttest_1samp(x, 0.0, alternative="greater")
    return float(res.statistic), float(res.pvalue)


def wilcoxon_two_sided(diff: Sequence[float]) -> float:
    """Two-sided Wilcoxon signed-rank p-value of paired differences (zeros dropped).

    Args:
        diff: The paired differences (NaN/inf refused).

    Returns:
        The p-value; 1.0 when every difference is zero.

    Raises:
        ValueError: The differences hold NaN or inf, or there are none.
    """
    from scipy.stats import wilcoxon

    x = _finite(diff, "wilcoxon_two_sided")
    if x.size == 0:
        raise ValueError("wilcoxon_two_sided: no paired differences")
    if np.all(x == 0):
        return 1.0
    return float(wilcoxon(x, zero_method="wilcox").pvalue)


def bootstrap_column_means_ci(
    X: np.ndarray | Sequence[Sequence[float]],
    n_resamples: int = 10_000,
    seed: int = 0,
    confidence: float = 0.95,
    batch: int = 500,
) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap CIs of the mean of each column of ``X``, the rows (units) resampled
    jointly: ``scipy.stats.bootstrap`` with ``axis=0``, seeded, in batches of ``batch``
    resamples to bound memory. With one column this is :func:`bootstrap_mean_ci` (same seed,
    same resamples, same interval).

    Args:
        X: ``(n_units, m)`` values (a 1-D array is one column).
        n_resamples: Bootstrap resamples.
        seed: Seed of the resampling.
        confidence: The intervals' confidence level.
        batch: Resamples per batch.

    Returns:
        ``(low, high)``, each of shape ``(m,)``; a constant column gets ``[c, c]``.

    Raises:
        ValueError: ``X`` is not a matrix, holds NaN or inf, or has fewer than 2 rows.
    """
    from scipy.stats import bootstrap

    A = np.asarray(X, dtype=float)
    if A.ndim == 1:
        A = A[:, None]
    if A.ndim != 2:
        raise ValueError(f"bootstrap_column_means_ci: expected a (n_units, m) matrix, got shape {A.shape}")
    A = _finite(A, "bootstrap_column_means_ci")
    if A.shape[0] < 2:
        raise ValueError("bootstrap_column_means_ci: need at least 2 units (rows)")
    const = np.all(A == A[0], axis=0)
    lo, hi = A[0].copy(), A[0].copy()
    var = np.flatnonzero(~const)
    if var.size:
        res = bootstrap(
            (A[:, var],),
            np.mean,
            n_resamples=n_resamples,
            confidence_level=confidence,
            method="percentile",
            rng=np.random.default_rng(seed),
            vectorized=True,
            axis=0,
            batch=batch,
        )
        lo[var] = res.confidence_interval.low
        hi[var] = res.confidence_interval.high
    return lo, hi
