"""Statistics added for the report: W and t next to the p-values, column-wise bootstrap CIs."""

import math

import numpy as np
import pytest

from dialfork_metrics.stats import (
    bootstrap_column_means_ci,
    bootstrap_mean_ci,
    paired_t_greater,
    paired_t_greater_test,
    wilcoxon_greater,
    wilcoxon_greater_test,
    wilcoxon_two_sided,
)


def test_wilcoxon_statistic_hand_worked():
    # |d| ranks: 0.5 -> 1, 1 -> 2, 2 -> 3, 3 -> 4; W = sum of positive ranks = 2 + 3 + 4 = 9
    w, p = wilcoxon_greater_test([1, 2, -0.5, 3])
    assert w == 9.0
    # exact null: 16 sign patterns, W >= 9 for W in {9, 10}: patterns {2,3,4} and {1,2,3,4} -> 2/16
    assert p == pytest.approx(2 / 16)
    assert p == wilcoxon_greater([1, 2, -0.5, 3])
    assert wilcoxon_greater_test([0, 0, 0]) == (0.0, 1.0)


def test_t_statistic_closed_form():
    x = np.array([0.3, 0.1, 0.5, -0.2, 0.4])
    t, p = paired_t_greater_test(x)
    assert t == pytest.approx(x.mean() / (x.std(ddof=1) / math.sqrt(x.size)))
    assert p == paired_t_greater(x)
    assert paired_t_greater_test([0.2, 0.2]) == (math.inf, 0.0)
    assert paired_t_greater_test([-0.2, -0.2]) == (-math.inf, 1.0)
    assert paired_t_greater_test([0.0, 0.0]) == (0.0, 1.0)
    with pytest.raises(ValueError, match="NaN"):
        paired_t_greater_test([0.1, float("nan")])


def test_two_sided_wilcoxon_is_symmetric():
    d = [0.3, -0.1, 0.5, 0.2, 0.4, -0.05]
    assert wilcoxon_two_sided(d) == pytest.approx(wilcoxon_two_sided([-x for x in d]))
    assert wilcoxon_two_sided([0, 0]) == 1.0


def test_column_bootstrap_equals_single_and_handles_constants():
    rng = np.random.default_rng(0)
    x = rng.normal(size=200)
    lo, hi = bootstrap_column_means_ci(np.c_[x, 2 * x, np.full(200, 0.7)], n_resamples=2000, seed=5)
    assert (lo[0], hi[0]) == pytest.approx(bootstrap_mean_ci(x, n_resamples=2000, seed=5))
    # rows are resampled jointly: the interval of 2x is exactly twice the interval of x
    assert (lo[1], hi[1]) == pytest.approx((2 * lo[0], 2 * hi[0]))
    assert lo[2] == hi[2] == 0.7
    assert lo[0] < x.mean() < hi[0]
    # batching bounds memory without changing the resamples
    lo_b, hi_b = bootstrap_column_means_ci(x, n_resamples=2000, seed=5, batch=7)
    assert (lo_b[0], hi_b[0]) == pytest.approx((lo[0], hi[0]))
    with pytest.raises(ValueError, match="at least 2"):
        bootstrap_column_means_ci([[1.0, 2.0]])
