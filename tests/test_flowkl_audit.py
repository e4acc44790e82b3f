"""FlowKL at audit sizes (issue 31): the small-set estimator on answers known in advance, and what
the paper's estimator does that made the audit's table contradict itself."""

from __future__ import annotations

import numpy as np
import pytest
from flowkl_synthetic import agent_sets, dialogue_set

from dialfork_metrics.flowgraph import (
    crossfit_likelihoods,
    flowkl,
    flowkl_crossfit,
    flowkl_from_likelihoods,
    kl_shared_bandwidth,
    shared_bandwidth,
)


def test_identical_values_give_zero_and_nothing_is_negative():
    rng = np.random.default_rng(0)
    x = rng.normal(0.2, 0.03, 40)
    assert kl_shared_bandwidth(x, x) == 0.0
    assert kl_shared_bandwidth(np.full(5, 0.1), np.full(3, 0.1)) == 0.0  # no spread at all
    for seed in range(200):  # random sets of every shape: never below 0
        r = np.random.default_rng(seed)
        a = r.normal(r.uniform(0, 1), r.uniform(0.001, 0.3), r.integers(2, 40))
        b = r.normal(r.uniform(0, 1), r.uniform(0.001, 0.3), r.integers(1, 12))
        assert kl_shared_bandwidth(a, b) >= 0.0
        if b.shape[0] >= 2:
            assert flowkl_from_likelihoods(a, b, normalize=True) >= 0.0


def test_same_distribution_is_near_zero_and_grows_with_the_shift():
    rng = np.random.default_rng(1)
    ref = rng.normal(0.2, 0.02, 400)
    same = kl_shared_bandwidth(ref, rng.normal(0.2, 0.02, 400))
    shifted = [kl_shared_bandwidth(ref, rng.normal(0.2 - d, 0.02, 400)) for d in (0.01, 0.02, 0.04)]
    assert same < 0.05 and same < shifted[0] < shifted[1] < shifted[2]
    # KL of two Gaussians of equal width sigma' (sigma widened by the common kernel): d^2 / (2 sigma'^2)
    h = shared_bandwidth(ref)
    expected = 0.02**2 / (2 * (0.02**2 + h**2))
    assert shifted[1] == pytest.approx(expected, rel=0.35)


def test_the_paper_estimator_can_be_negative_and_why():
    """Only p is normalised, on a grid spanning the union: when the grid holds more of q's mass
    than of p's (here the 6-value reference gets the wider Scott kernel, whose tails leave the grid),
    sum p log(p/q) / sum p = KL(p'||q') + log(sum p / sum q) < 0 (SPEC 7's formula, kept for
    Task 1). Normalised, the same densities give a divergence >= 0; the audit's estimator too."""
    from scipy.stats import gaussian_kde

    ref = np.array([0.087, 0.125, 0.084, 0.096, 0.111, 0.085])
    tgt = np.array([0.096, 0.092, 0.092, 0.115, 0.108, 0.113, 0.112, 0.091, 0.096, 0.095, 0.116, 0.109])
    paper = flowkl_from_likelihoods(ref, tgt)
    assert paper == pytest.approx(-0.3204, abs=1e-3)
    grid = np.linspace(min(ref.min(), tgt.min()), max(ref.max(), tgt.max()), 100)
    p, q = gaussian_kde(ref)(grid), gaussian_kde(tgt)(grid)
    decomposed = np.sum(p / p.sum() * np.log((p / p.sum()) / (q / q.sum()))) + np.log(p.sum() / q.sum())
    assert paper == pytest.approx(decomposed, abs=1e-9) and np.log(p.sum() / q.sum()) < paper
    assert flowkl_from_likelihoods(ref, tgt, normalize=True) >= 0.0
    assert kl_shared_bandwidth(ref, tgt) >= 0.0


def test_a_tight_target_no_longer_reads_as_far():
    """The issue's cause: three alike dialogues inside the reference's range. With their own Scott
    bandwidth their density is a spike and KL explodes; with the reference's bandwidth it stays small,
    below a target outside the range."""
    rng = np.random.default_rng(2)
    ref = rng.normal(0.11, 0.012, 16)
    tight_inside = np.array([0.122, 0.125, 0.133])
    spread_outside = np.array([0.06, 0.075, 0.09])
    assert flowkl_from_likelihoods(ref, tight_inside) > flowkl_from_likelihoods(ref, spread_outside)
    assert kl_shared_bandwidth(ref, tight_inside) < kl_shared_bandwidth(ref, spread_outside)


def test_crossfit_ranks_a_faithful_agent_before_a_derailed_one_on_a_known_flow():
    for seed in range(3):
        ref, faithful, derailed = agent_sets(n_ref=30, n_tgt=8, seed=seed)
        f = flowkl_crossfit(
            ref[0], faithful[0], ref_embeddings=ref[1], tgt_embeddings=faithful[1], n_boot=200
        )
        d = flowkl_crossfit(
            ref[0], derailed[0], ref_embeddings=ref[1], tgt_embeddings=derailed[1], n_boot=200
        )
        assert 0.0 <= f["flowkl"] < d["flowkl"], (seed, f, d)
        assert f["ci_low"] <= f["ci_high"] and d["ci_low"] <= d["ci_high"]
        assert f["ci_high"] < d["ci_low"], (seed, f, d)
        assert (f["n_ref"], f["n_tgt"], f["folds"], f["note"]) == (30, 8, 5, None)


def test_crossfit_likelihoods_are_out_of_sample():
    """A reference dialogue scored by a graph fitted on it looks likelier than a new conformant one:
    in-sample reference likelihoods sit above new draws; cross-fitted ones do not."""
    ref = dialogue_set(30, seed=5)
    new = dialogue_set(30, seed=6)
    lik = crossfit_likelihoods(ref[0], new[0], ref_embeddings=ref[1], tgt_embeddings=new[1])
    assert lik["likelihoods_ref"].shape == (30,) and lik["likelihoods_tgt"].shape == (5, 30)
    details = flowkl(
        ref[0],
        new[0],
        ref_embeddings=ref[1],
        tgt_embeddings=new[1],
        use_only_known_edges=False,
        return_details=True,
    )
    gap_in = details["likelihoods_ref"].mean() - details["likelihoods_tgt"].mean()
    gap_cross = lik["likelihoods_ref"].mean() - lik["likelihoods_tgt"].mean()
    assert abs(gap_cross) < gap_in


def test_crossfit_refuses_small_sets_and_bad_options():
    ref, faithful, _ = agent_sets(n_ref=12, n_tgt=4, seed=0)
    out = flowkl_crossfit(ref[0], faithful[0], ref_embeddings=ref[1], tgt_embeddings=faithful[1])
    assert out["flowkl"] is None and out["ci_low"] is None
    assert out["note"] == "not estimated: 4 target dialogues, fewer than 5"
    small = flowkl_crossfit(ref[0][:6], faithful[0], ref_embeddings=ref[1][:6], tgt_embeddings=faithful[1])
    assert (
        small["note"]
        == "not estimated: 6 reference dialogues, fewer than 10 and 4 target dialogues, fewer than 5"
    )
    with pytest.raises(ValueError, match="n_boot"):
        flowkl_crossfit(ref[0], faithful[0], n_boot=-1)
    with pytest.raises(ValueError, match="confidence"):
        flowkl_crossfit(ref[0], faithful[0], confidence=1.5)
    with pytest.raises(ValueError, match="folds"):
        crossfit_likelihoods(ref[0], faithful[0], folds=1, ref_embeddings=ref[1], tgt_embeddings=faithful[1])
    with pytest.raises(ValueError, match="target set"):
        kl_shared_bandwidth([0.1, 0.2], [])


def test_crossfit_is_deterministic():
    ref, faithful, _ = agent_sets(n_ref=20, n_tgt=6, seed=3)
    a = flowkl_crossfit(
        ref[0], faithful[0], ref_embeddings=ref[1], tgt_embeddings=faithful[1], n_boot=50, seed=7
    )
    b = flowkl_crossfit(
        ref[0], faithful[0], ref_embeddings=ref[1], tgt_embeddings=faithful[1], n_boot=50, seed=7
    )
    assert a == b
