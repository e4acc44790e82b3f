"""The one Kendall tau-b (dialfork_metrics.stats): scalar and row-wise, both against scipy, and the
numbers of every former copy (dialogue, stats, leaderboard score and audit) unchanged."""

import itertools
import math

import numpy as np
import pytest
from scipy.stats import kendalltau

from dialfork_metrics.dialogue import kendall_tau_order
from dialfork_metrics.stats import EXPECTED_ORDER, kendall_tau, kendall_tau_rows, ranking_tau
from leaderboard.score import kendall_tau_b_rows


def _scipy(x, y=EXPECTED_ORDER, undefined=0.0):
    with np.errstate(all="ignore"):
        t = kendalltau(np.asarray(x, float), np.asarray(y, float)).statistic
    return undefined if not math.isfinite(t) else float(t)


def _all_units():
    """Every ordering of 4 distances drawn from {0, 1, 2, 3} with repetition: all tie patterns."""
    return np.array(list(itertools.product(range(4), repeat=4)), dtype=float)


def test_known_values_and_policies():
    assert kendall_tau([4, 3, 2, 1]) == 1.0
    assert kendall_tau([1, 2, 3, 4]) == -1.0
    assert kendall_tau([4, 2, 3, 1]) == pytest.approx(2 / 3)
    assert kendall_tau([2, 2, 2, 2]) == 0.0
    assert math.isnan(kendall_tau([2, 2, 2, 2], undefined="nan"))
    assert math.isnan(kendall_tau([1, 2, 3], [5, 5, 5], undefined="nan"))  # a constant y is undefined too
    with pytest.raises(ValueError, match="undefined must be one of"):
        kendall_tau([1, 2, 3, 4], undefined="drop")
    with pytest.raises(ValueError, match="same length"):
        kendall_tau([1, 2, 3], [1, 2])


def test_scalar_equals_scipy_on_every_tie_pattern():
    for row in _all_units():
        assert kendall_tau(row) == pytest.approx(_scipy(row), abs=1e-12)
        nan_policy = kendall_tau(row, undefined="nan")
        assert (math.isnan(nan_policy) and np.all(row == row[0])) or nan_policy == pytest.approx(
            _scipy(row), abs=1e-12
        )


@pytest.mark.parametrize("undefined", ["zero", "nan"])
def test_rows_equal_scalar_and_scipy(undefined):
    D = _all_units()
    rows = kendall_tau_rows(D, undefined=undefined)
    for r, row in zip(rows, D):
        one = kendall_tau(row, undefined=undefined)
        assert (math.isnan(r) and math.isnan(one)) or r == pytest.approx(one, abs=1e-12)
    rng = np.random.default_rng(0)
    X, y = rng.integers(0, 3, size=(200, 7)).astype(float), rng.integers(0, 4, size=7).astype(float)
    got = kendall_tau_rows(X, y, undefined=undefined)
    fill = 0.0 if undefined == "zero" else math.nan
    want = np.array([_scipy(x, y, undefined=fill) for x in X])
    np.testing.assert_allclose(got, want, atol=1e-12, equal_nan=True)


def test_former_copies_keep_their_numbers():
    """Every caller's old policy, spelled out with scipy, equals what it gives now."""
    D = _all_units()
    for row in D:
        ref = _scipy(row)  # undefined -> 0, as ranking_tau / kendall_tau_order always did
        assert ranking_tau(row) == pytest.approx(ref, abs=1e-12)
        assert kendall_tau_order(row) == pytest.approx(ref, abs=1e-12)
    lb = kendall_tau_b_rows(D)  # the leaderboard counts undefined units: NaN stays NaN
    np.testing.assert_allclose(lb, [_scipy(r, undefined=math.nan) for r in D], atol=1e-12, equal_nan=True)
    # kendall_tau_order accepts any length k >= 2 against (k, ..., 1)
    assert kendall_tau_order([3, 1, 2]) == pytest.approx(_scipy([3, 1, 2], [3, 2, 1]))
    # the audit's check: a feature against a 0/1 label; a one-class label is undefined (NaN)
    x, lab = np.array([3.0, 1.0, 2.0, 5.0, 4.0]), np.array([True, False, False, True, True])
    assert kendall_tau(x, lab, undefined="nan") == pytest.approx(_scipy(x, lab))
    assert math.isnan(kendall_tau(x, np.ones(5, bool), undefined="nan"))
