import math

import numpy as np
import pytest
from scipy import stats as ss

from dialfork_metrics.stats import (
    bootstrap_mean_ci,
    exact_recovery,
    fisher_combine,
    holm,
    paired_t_greater,
    ranking_tau,
    unit_permutation_pvalue,
    wilcoxon_greater,
)


def test_ranking_tau_known_values():
    assert ranking_tau([0.9, 0.7, 0.5, 0.1]) == 1.0
    assert ranking_tau([1, 2, 3, 4]) == -1.0
    assert ranking_tau([5, 5, 5, 5]) == 0.0  # undefined counts as 0 (SPEC 5)
    # one discordant pair of 6 (positions 3,4 swapped): (5 - 1) / 6
    assert ranking_tau([4, 3, 1, 2]) == pytest.approx(4 / 6)
    # tau-b with ties in d: d = (2, 2, 1, 1): concordant 4, discordant 0, ties in x 2, none in y
    # tau_b = 4 / sqrt((6 - 2) * 6)
    assert ranking_tau([2, 2, 1, 1]) == pytest.approx(4 / math.sqrt(4 * 6))
    with pytest.raises(ValueError):
        ranking_tau([1, 2, 3])
    with pytest.raises(ValueError):
        ranking_tau([1, 2, float("nan"), 4])


def test_exact_recovery():
    assert (
        exact_recovery([4, 3, 2, 1]) and not exact_recovery([4, 3, 3, 1]) and not exact_recovery([1, 2, 3, 4])
    )


def test_permutation_pvalue_exact():
    # only the identity ordering reaches tau = 1 among 24
    assert unit_permutation_pvalue([4, 3, 2, 1]) == pytest.approx(1 / 24)
    assert unit_permutation_pvalue([1, 2, 3, 4]) == 1.0
    assert unit_permutation_pvalue([7, 7, 7, 7]) == 1.0
    # tau = 4/6 (one adjacent swap) is reached by the identity and the 3 adjacent swaps: 4/24
    assert unit_permutation_pvalue([4, 3, 1, 2]) == pytest.approx(4 / 24)


def test_fisher_matches_closed_form():
    p = [0.01, 0.2, 0.5]
    x = -2 * sum(math.log(v) for v in p)
    assert fisher_combine(p) == pytest.approx(ss.chi2.sf(x, 2 * len(p)))
    with pytest.raises(ValueError):
        fisher_combine([])


def test_holm_hand_worked():
    # sorted 0.005*4=0.02, 0.01*3=0.03, 0.03*2=0.06, 0.04*1=0.04 -> monotone 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert holm([]) == []


def test_wilcoxon_and_t_match_scipy():
    rng = np.random.default_rng(0)
    d = rng.normal(0.3, 1, 40)
    assert wilcoxon_greater(d) == pytest.approx(ss.wilcoxon(d, alternative="greater").pvalue)
    assert paired_t_greater(d) == pytest.approx(
        ss.ttest_rel(d, np.zeros_like(d), alternative="greater").pvalue
    )
    assert wilcoxon_greater(np.zeros(5)) == 1.0
    assert paired_t_greater([0.2, 0.2, 0.2]) == 0.0


def test_bootstrap_deterministic_and_covering():
    rng = np.random.default_rng(1)
    d = rng.normal(1.0, 0.5, 200)
    a = bootstrap_mean_ci(d, n_resamples=2000, seed=7)
    b = bootstrap_mean_ci(d, n_resamples=2000, seed=7)
    assert a == b
    assert a[0] < d.mean() < a[1]
    # close to the normal-theory interval
    se = d.std(ddof=1) / math.sqrt(d.size)
    assert a[0] == pytest.approx(d.mean() - 1.96 * se, abs=0.03)
    assert bootstrap_mean_ci([0.5, 0.5, 0.5]) == (0.5, 0.5)


def test_holm_equals_statsmodels():
    """holm() computes Holm's step-down adjustment itself (statsmodels runs gc.collect() on every
    call): the same values as multipletests(method="holm"), ties, ones and zeros included."""
    from statsmodels.stats.multitest import multipletests

    rng = np.random.default_rng(0)
    cases = [[0.01], [0.04, 0.01, 0.03], [0.2, 0.2, 0.2, 0.001], [0.0, 1.0, 0.5, 0.5], [0.9, 0.8, 0.95]]
    cases += [rng.uniform(0, 1, n).round(3).tolist() for n in (2, 5, 17, 40)]
    cases += [(rng.uniform(0, 0.05, 12)).tolist()]
    for p in cases:
        assert holm(p) == pytest.approx(multipletests(p, method="holm")[1].tolist(), abs=1e-15), p
    assert holm([]) == []
