"""FlowKL step 3 (SPEC section 7): KL divergence between the Gaussian KDEs of two sets of likelihoods."""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

logger = logging.getLogger("dialfork_metrics.flowgraph")


def _scott_kde(values: np.ndarray, bw_method: Any):
    from scipy.stats import gaussian_kde

    return gaussian_kde(values, bw_method=bw_method)


def flowkl_from_likelihoods(l_ref: Any, l_tgt: Any, *, grid_size: int = 100, density_floor: float = 1e-12,
                            bw_method: Any = None) -> float:
    """KL(p_ref || p_tgt) of the Gaussian KDEs of two sets of per-dialogue likelihoods.

    ``bw_method=None`` is scipy's Scott rule. Grid: ``grid_size`` points over the union's range;
    densities floored at ``density_floor``; ``KL = sum p log(p/q) / sum p``. Zero-variance sets
    get a deterministic fallback: a Gaussian kernel of standard deviation ``n ** (-1/5)`` times
    the union's standard deviation at each value. Raises ``ValueError`` naming the set
    for fewer than 2 values, NaN/inf, or a non 1-D input.

    Args:
        l_ref: Likelihoods ``L(D)`` of the reference set, 1-D, at least 2 finite values.
        l_tgt: Likelihoods of the target set, same requirements.
        grid_size: Points of the evaluation grid, >= 2.
        density_floor: Least density on the grid (avoids ``log 0``).
        bw_method: KDE bandwidth, as ``scipy.stats.gaussian_kde``'s ``bw_method``; None: Scott's rule.

    Returns:
        The divergence, a float >= 0 up to the grid's discretisation; 0.0 when every value of
        both sets is the same.

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
            raise ValueError(f"{name}: likelihoods contain NaN or inf (index {int(np.flatnonzero(~np.isfinite(a))[0])})")
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
        logger.info("FlowKL: a set of %d likelihoods has zero variance; Gaussian of std %.3g at %.6g",
                    a.shape[0], bw, float(a.mean()))
        z = (grid[:, None] - a[None, :]) / bw
        return np.exp(-0.5 * z * z).mean(axis=1) / (bw * math.sqrt(2 * math.pi))

    p = np.clip(density(p1), density_floor, None)
    q = np.clip(density(p2), density_floor, None)
    return float(np.sum(p * np.log(p / q)) / np.sum(p))


