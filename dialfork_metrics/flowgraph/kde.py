"""FlowKL step 3 (SPEC section 7): KL divergence between the Gaussian KDEs of two sets of likelihoods.

* :func:`flowkl_from_likelihoods`: the paper's and sdialog's estimator (each set its own Scott
  bandwidth, a grid over the union's range, ``KL = sum p log(p/q) / sum p``). Only ``p`` is
  normalised, so it equals ``KL(p'||q') + log(sum p / sum q)`` with ``p'``, ``q'`` the normalised
  grid densities: the second term is negative whenever more of ``q``'s mass than of ``p``'s falls
  on the grid, and the value can be (slightly) negative; ``normalize=True`` removes the term.
* :func:`kl_shared_bandwidth`: the estimator the agent audit uses on small sets (ours): one
  bandwidth for both densities (Scott's rule on the reference), a grid that holds both densities'
  mass, both normalised. It is a proper discrete KL: never negative, exactly 0 for the same
  values, and a tight target set (a few dialogues of similar likelihood) is not mistaken for a
  distant one as a target bandwidth estimated from those few values would make it.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

logger = logging.getLogger("dialfork_metrics.flowgraph")


def _scott_kde(values: np.ndarray, bw_method: Any):
    from scipy.stats import gaussian_kde

    return gaussian_kde(values, bw_method=bw_method)


def flowkl_from_likelihoods(
    l_ref: Any,
    l_tgt: Any,
    *,
    grid_size: int = 100,
    density_floor: float = 1e-12,
    bw_method: Any = None,
    normalize: bool = False,
) -> float:
    """KL(p_ref || p_tgt) of the Gaussian KDEs of two sets of per-dialogue likelihoods.

    ``bw_method=None`` is scipy's Scott rule. Grid: ``grid_size`` points over the union's range;
    densities floored at ``density_floor``; ``KL = sum p log(p/q) / sum p`` (SPEC section 7, as
    sdialog). Zero-variance sets get a deterministic fallback: a Gaussian kernel of standard
    deviation ``n ** (-1/5)`` times the union's standard deviation at each value. Raises
    ``ValueError`` naming the set for fewer than 2 values, NaN/inf, or a non 1-D input.

    Negative values: only ``p`` is normalised, so the value is ``KL(p'||q') + log(sum p / sum q)``
    (``p'``, ``q'`` the densities normalised on the grid). The first term is >= 0; the second is
    negative when the grid, which spans the union's range only, holds more of ``q``'s mass than of
    ``p``'s (a narrow target inside a wide reference), so close sets can score slightly below 0.
    ``normalize=True`` normalises ``q`` too: the value is then ``KL(p'||q') >= 0``.

    Args:
        l_ref: Likelihoods ``L(D)`` of the reference set, 1-D, at least 2 finite values.
        l_tgt: Likelihoods of the target set, same requirements.
        grid_size: Points of the evaluation grid, >= 2.
        density_floor: Least density on the grid (avoids ``log 0``).
        bw_method: KDE bandwidth, as ``scipy.stats.gaussian_kde``'s ``bw_method``; None: Scott's rule.
        normalize: Normalise both densities on the grid (a proper discrete KL, never negative);
            False (default): the SPEC's and sdialog's formula above, which can be slightly negative.

    Returns:
        The divergence; 0.0 when every value of both sets is the same. Negative values are
        possible without ``normalize`` (see above).

    Raises:
        ValueError: A set is not 1-D, has fewer than 2 values, or holds NaN/inf; or
            ``grid_size < 2``.
    """
    arrays = []
    for name, v in (("reference set", l_ref), ("target set", l_tgt)):
        a = np.asarray(v, dtype=np.float64)
        if a.ndim != 1:
            raise ValueError(f"{name}: expected a 1-D array of likelihoods, got shape {a.shape}")
        if a.shape[0] < 2:
            raise ValueError(f"{name}: a density needs at least 2 dialogues, got {a.shape[0]}")
        if not np.all(np.isfinite(a)):
            raise ValueError(
                f"{name}: likelihoods contain NaN or inf (index {int(np.flatnonzero(~np.isfinite(a))[0])})"
            )
        arrays.append(a)
    if grid_size < 2:
        raise ValueError(f"grid_size must be >= 2, got {grid_size}")
    p1, p2 = arrays
    union = np.concatenate([p1, p2])
    lo, hi = float(union.min()), float(union.max())
    if hi == lo:
        return 0.0
    grid = np.linspace(lo, hi, grid_size)

    def density(a: np.ndarray) -> np.ndarray:
        if np.ptp(a) > 0:
            try:
                return _scott_kde(a, bw_method)(grid)
            except np.linalg.LinAlgError:  # near-zero variance: fall through to the fallback
                pass
        bw = a.shape[0] ** (-1.0 / 5.0) * float(np.std(union, ddof=1))
        logger.info(
            "FlowKL: a set of %d likelihoods has zero variance; Gaussian of std %.3g at %.6g",
            a.shape[0],
            bw,
            float(a.mean()),
        )
        z = (grid[:, None] - a[None, :]) / bw
        return np.exp(-0.5 * z * z).mean(axis=1) / (bw * math.sqrt(2 * math.pi))

    p = np.clip(density(p1), density_floor, None)
    q = np.clip(density(p2), density_floor, None)
    if normalize:
        p, q = p / p.sum(), q / q.sum()
    return float(np.sum(p * np.log(p / q)) / np.sum(p))


def _finite_1d(v: Any, name: str, least: int) -> np.ndarray:
    a = np.asarray(v, dtype=np.float64)
    if a.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D array of likelihoods, got shape {a.shape}")
    if a.shape[0] < least:
        raise ValueError(f"{name}: a density needs at least {least} values, got {a.shape[0]}")
    if not np.all(np.isfinite(a)):
        raise ValueError(
            f"{name}: likelihoods contain NaN or inf (index {int(np.flatnonzero(~np.isfinite(a))[0])})"
        )
    return a


def shared_bandwidth(l_ref: Any, l_tgt: Any = None) -> float:
    """The one Gaussian bandwidth :func:`kl_shared_bandwidth` gives both densities: Scott's rule on
    the reference, ``std(l_ref, ddof=1) * n_ref ** (-1/5)``; when the reference has no spread, the
    same rule on the union of both sets; 0.0 when that has none either.

    Args:
        l_ref: Reference likelihoods (1-D, at least 2 finite values).
        l_tgt: Target likelihoods, used only when the reference has no spread.

    Returns:
        float: The bandwidth (>= 0).
    """
    a = _finite_1d(l_ref, "reference set", 2)
    h = float(np.std(a, ddof=1)) * a.shape[0] ** (-0.2)
    if h > 0 or l_tgt is None:
        return h
    u = np.concatenate([a, _finite_1d(l_tgt, "target set", 1)])
    return float(np.std(u, ddof=1)) * u.shape[0] ** (-0.2) if u.shape[0] > 1 else 0.0


def kl_shared_bandwidth(
    l_ref: Any,
    l_tgt: Any,
    *,
    tgt_weights: Any = None,
    bandwidth: float | None = None,
    grid_size: int = 256,
    pad: float = 4.0,
    density_floor: float = 1e-12,
) -> float:
    """KL(p_ref || p_tgt) of two Gaussian KDEs that share one bandwidth, on a grid holding both.

    ``p_ref`` and ``p_tgt`` are Gaussian KDEs of the two sets with the same bandwidth
    (:func:`shared_bandwidth`: Scott's rule on the reference, the larger and steadier set), on
    ``grid_size`` points from ``pad`` bandwidths below the smallest value to ``pad`` above the
    largest (so each density's mass is on the grid), floored at ``density_floor`` and both
    normalised on the grid: ``KL = sum p log(p / q)``. Unlike :func:`flowkl_from_likelihoods`
    (each set its own Scott bandwidth, only ``p`` normalised), it is never negative, it is exactly 0
    when both sets hold the same values, and a small target set whose values happen to be close
    together gets the reference's smoothing, not a spike that makes the divergence explode.

    Args:
        l_ref: Reference likelihoods, 1-D, at least 2 finite values.
        l_tgt: Target likelihoods, 1-D, at least 1 finite value.
        tgt_weights: One non-negative weight per target value (e.g. ``1/K`` for the ``K``
            cross-fitted values of one dialogue); None: equal weights.
        bandwidth: The kernels' standard deviation; None: :func:`shared_bandwidth`.
        grid_size: Grid points, >= 2.
        pad: Bandwidths of grid beyond the values on each side, >= 0.
        density_floor: Least density on the grid (avoids ``log 0``).

    Returns:
        float: The divergence, >= 0; 0.0 when both sets have no spread and the same value. The
        floor bounds it by about ``log(1 / density_floor)`` (27.6 by default), reached when the two
        sets do not overlap at all.

    Raises:
        ValueError: A set is not 1-D, too small or not finite; bad weights, ``grid_size < 2``,
            ``pad < 0`` or ``bandwidth <= 0``.
    """
    a = _finite_1d(l_ref, "reference set", 2)
    b = _finite_1d(l_tgt, "target set", 1)
    if grid_size < 2:
        raise ValueError(f"grid_size must be >= 2, got {grid_size}")
    if pad < 0:
        raise ValueError(f"pad must be >= 0, got {pad}")
    w = (
        np.full(b.shape[0], 1.0 / b.shape[0])
        if tgt_weights is None
        else np.asarray(tgt_weights, dtype=np.float64)
    )
    if w.shape != b.shape or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise ValueError(f"tgt_weights: expected {b.shape[0]} non-negative finite weights, not all 0")
    w = w / w.sum()
    h = shared_bandwidth(a, b) if bandwidth is None else float(bandwidth)
    if bandwidth is not None and not h > 0:
        raise ValueError(f"bandwidth must be > 0, got {bandwidth}")
    if h == 0.0:  # every value of both sets is the same
        return 0.0
    lo = min(float(a.min()), float(b.min())) - pad * h
    hi = max(float(a.max()), float(b.max())) + pad * h
    grid = np.linspace(lo, hi, grid_size)

    def density(v: np.ndarray, weights: np.ndarray) -> np.ndarray:
        z = (grid[:, None] - v[None, :]) / h
        return (np.exp(-0.5 * z * z) * weights[None, :]).sum(axis=1)

    p = np.clip(density(a, np.full(a.shape[0], 1.0 / a.shape[0])), density_floor, None)
    q = np.clip(density(b, w), density_floor, None)
    p, q = p / p.sum(), q / q.sum()
    return max(0.0, float(np.sum(p * np.log(p / q))))
