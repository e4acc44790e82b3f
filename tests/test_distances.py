"""Embedding-level Task 2 distances (SPEC section 7): closed forms, hand-worked examples, invariants."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dialfork_metrics import distances as D
from dialfork_metrics import (
    flowdtw_batch_from_embeddings,
    flowdtw_from_embeddings,
    flowscore_batch_from_embeddings,
    flowscore_from_embeddings,
    mean_turn_distance,
)

E1, E2, E3 = np.eye(3)
R2 = 1 / math.sqrt(2)


def unit(rng, n, d=8):
    X = rng.normal(size=(n, d))
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def reference_dtw(C: np.ndarray) -> tuple[float, int]:
    """Independent DTW: full Gamma table, then backtracking from (n, m) with the SPEC tie-break
    (diagonal, then (i-1, j), then (i, j-1)); returns (Gamma(n, m), cells on the path)."""
    n, m = C.shape
    G = np.full((n + 1, m + 1), np.inf)
    G[0, 0] = 0.0
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            G[i, j] = C[i - 1, j - 1] + min(G[i - 1, j - 1], G[i - 1, j], G[i, j - 1])
    i, j, cells = n, m, 0
    while (i, j) != (0, 0):
        cells += 1
        best = min(G[i - 1, j - 1], G[i - 1, j], G[i, j - 1])
        if G[i - 1, j - 1] == best:
            i, j = i - 1, j - 1
        elif G[i - 1, j] == best:
            i -= 1
        else:
            j -= 1
    return float(G[n, m]), cells


# ------------------------------------------------------------------ known answers
def test_identical_inputs_give_zero():
    E = unit(np.random.default_rng(0), 7)
    assert flowscore_from_embeddings(E, E) == pytest.approx(0.0, abs=1e-12)
    assert flowdtw_from_embeddings(E, E) == pytest.approx(0.0, abs=1e-12)
    assert mean_turn_distance(E, E) == pytest.approx(0.0, abs=1e-12)


def test_flowscore_hand_worked_2x3():
    # ref = [e1, e2], cand = [e1, (e1+e2)/sqrt2, -e1]
    # S = [[1, 1/sqrt2, -1],
    #      [0, 1/sqrt2,  0]]
    # P = mean over cand columns of the column max = (1 + 1/sqrt2 + 0) / 3 = a/3, a = 1 + 1/sqrt2
    # R = mean over ref rows of the row max       = (1 + 1/sqrt2) / 2     = a/2
    # F = 2PR/(P+R) = (a^2/3) / (5a/6) = 2a/5  ->  FlowScore = 1 - 2(1 + 1/sqrt2)/5 = 0.3171573
    ref = np.array([E1, E2])
    cand = np.array([E1, (E1 + E2) * R2, -E1])
    expected = 1 - 2 * (1 + R2) / 5
    assert flowscore_from_embeddings(ref, cand) == pytest.approx(expected, abs=1e-12)
    assert expected == pytest.approx(0.3171573, abs=1e-7)
    # FlowScore is symmetric: P and R swap
    assert flowscore_from_embeddings(cand, ref) == pytest.approx(expected, abs=1e-12)


def test_flowdtw_hand_worked_2x3_path_length():
    # same pair; costs c = 1 - S with s = 1 - 1/sqrt2:
    #   C = [[0, s, 2],
    #        [1, s, 1]]
    # Gamma(1,1)=0 (L1)  Gamma(1,2)=s (L2, from the left)  Gamma(1,3)=2+s (L3)
    # Gamma(2,1)=1 (L2)  Gamma(2,2)=s+min(0, s, 1)=s (diagonal, L2)
    # Gamma(2,3)=1+min(diag Gamma(1,2)=s, up 2+s, left Gamma(2,2)=s) = 1+s (tie -> diagonal, L3)
    # FlowDTW = (1 + s) / 3 = 0.4309644
    ref = np.array([E1, E2])
    cand = np.array([E1, (E1 + E2) * R2, -E1])
    s = 1 - R2
    assert D.flowdtw_path_length(ref, cand) == (pytest.approx(1 + s, abs=1e-12), 3)
    assert flowdtw_from_embeddings(ref, cand) == pytest.approx((1 + s) / 3, abs=1e-12)


def test_flowdtw_diagonal_path_length_is_n():
    rng = np.random.default_rng(1)
    E = unit(rng, 5)
    _, L = D.flowdtw_path_length(E, E)
    assert L == 5


def test_order_flowscore_invariant_flowdtw_not():
    # ref = [e1, e2], cand = [e2, e1]: every turn has an exact match -> FlowScore 0;
    # DTW costs C = [[1, 0], [0, 1]]: Gamma(1,1)=1, Gamma(1,2)=1, Gamma(2,1)=1,
    # Gamma(2,2)=1+min(1,1,1) -> three-way tie, diagonal wins, L=2 -> FlowDTW = 2/2 = 1
    # (through (1,2) the path would have L=3 and give 2/3: the tie-break matters).
    ref = np.array([E1, E2])
    cand = np.array([E2, E1])
    assert flowscore_from_embeddings(ref, cand) == pytest.approx(0.0, abs=1e-12)
    assert flowdtw_from_embeddings(ref, cand) == pytest.approx(1.0, abs=1e-12)
    rng = np.random.default_rng(2)
    A, B = unit(rng, 6), unit(rng, 9)
    perm = rng.permutation(9)
    assert flowscore_from_embeddings(A, B[perm]) == pytest.approx(flowscore_from_embeddings(A, B), abs=1e-12)
    assert flowscore_from_embeddings(A[::-1], B) == pytest.approx(flowscore_from_embeddings(A, B), abs=1e-12)
    assert flowdtw_from_embeddings(A, A[::-1]) > 0.1


def test_dtw_tie_break_up_before_left():
    # C (4 x 3):        Gamma / L:
    #   [1, 0, 2]       (1,1)=1/1 (1,2)=1/2 (1,3)=3/3
    #   [0, 0, 2]       (2,1)=1/2 (2,2)=1/2 diag (2,3)=2+min(1,3,1)=3/3 diag
    #   [0, 2, 1]       (3,1)=1/3 (3,2)=2+min(1,1,1)=3/3 diag (3,3)=1+min(1,3,3)=2/3 diag
    #   [0, 1, 1]       (4,1)=1/4 (4,2)=1+min(1,3,1)=2/4 diag
    # (4,3) = 1 + min(diag (3,2)=3, up (3,3)=2, left (4,2)=2): up and left tie at 2;
    # (i-1, j) wins -> L = 3 + 1 = 4, FlowDTW = 3/4 (the left predecessor would give L = 5, 3/5).
    C = np.array([[1, 0, 2], [0, 0, 2], [0, 2, 1], [0, 1, 1]], dtype=np.float64)
    g, L = D._dtw_core(1.0 - C, 4, 3)
    assert (g, L) == (3.0, 4)
    assert reference_dtw(C) == (3.0, 4)


def test_dtw_kernel_matches_reference_with_many_ties():
    rng = np.random.default_rng(3)
    for _ in range(300):
        n, m = rng.integers(1, 7, size=2)
        C = rng.integers(0, 3, size=(n, m)).astype(np.float64)  # small integers: many ties
        g, L = D._dtw_core(1.0 - C, n, m)
        assert (g, L) == reference_dtw(C)


def test_mean_turn_closed_form():
    # means e1 and (e1+e2)/2: cos = (1/2) / (sqrt2/2) = 1/sqrt2
    assert mean_turn_distance(np.array([E1]), np.array([E1, E2])) == pytest.approx(1 - R2, abs=1e-12)


def test_rows_are_normalised():
    ref = np.array([E1, E2]) * 3.0
    cand = np.array([E1, (E1 + E2)]) * 0.5
    assert flowscore_from_embeddings(ref, cand) == pytest.approx(
        flowscore_from_embeddings(np.array([E1, E2]), np.array([E1, (E1 + E2) * R2])), abs=1e-12
    )


# ------------------------------------------------------------------ batched
def test_negative_cosines_with_padding_are_masked_with_minus_inf():
    # pair 0: ref = [e1, x] with x = -0.6 e1 + 0.8 e2, cand = [e1]: S = [[1], [-0.6]],
    # P = 1, R = (1 - 0.6)/2 = 0.2, F = 2*0.2/1.2 = 1/3 -> distance 2/3. Padded to 3x3 by pair 1;
    # zero padding would make x's best match 0 (R = 0.5, F = 2/3) and give distance 1/3.
    x = -0.6 * E1 + 0.8 * E2
    pair0 = (np.array([E1, x]), np.array([E1]))
    pair1 = (np.array([E1, E2, E3]), np.array([E3, E2, E1]))
    fs = flowscore_batch_from_embeddings([pair0, pair1])
    assert fs[0] == pytest.approx(2 / 3, abs=1e-12)
    assert fs[1] == pytest.approx(0.0, abs=1e-12)
    assert flowscore_from_embeddings(*pair0) == pytest.approx(2 / 3, abs=1e-12)
    # all-negative rows of different lengths
    ref = np.array([E1, E2])
    cand = -np.array([E1, E2, E3 * 0 + (E1 + E2) * R2])
    single = flowscore_from_embeddings(ref, cand)
    batch = flowscore_batch_from_embeddings(
        [(ref, cand), (unit(np.random.default_rng(0), 6, 3), np.array([E1]))]
    )
    assert batch[0] == pytest.approx(single, abs=1e-12)
    # FlowDTW: 1x1 with S = [[-1]] costs 2 on a path of one cell, padded or not
    dtw = flowdtw_batch_from_embeddings([(np.array([E1]), np.array([-E1])), pair1])
    assert dtw[0] == pytest.approx(2.0, abs=1e-12)


# ------------------------------------------------------------------ clipping (SPEC section 7)
def test_opposite_dialogues_are_at_distance_one_not_zero():
    # cand = -A[:2]: every cosine of a candidate turn with its best reference turn is negative
    # (P < 0); without clipping P + R < 0 and 2PR/(P+R) > 1 reported distance 0 ("identical").
    # seed 78: R < 0 < P with P + R < 0, where the unclipped harmonic mean exceeds 1 (the old
    # result was exactly 0.0); A_pos: every cosine is negative (P, R < 0; the old result was 1.45)
    A = unit(np.random.default_rng(78), 5, 3)
    S = A @ -A[:2].T
    P, R = S.max(axis=0).mean(), S.max(axis=1).mean()
    assert min(P, R) < 0 < max(P, R) and P + R < 0
    assert flowscore_from_embeddings(A, -A[:2]) == 1.0
    assert flowscore_from_embeddings(-A[:2], A) == 1.0
    A_pos = np.abs(unit(np.random.default_rng(0), 5, 3))
    assert flowscore_from_embeddings(A_pos, -A_pos[:2]) == 1.0
    assert flowscore_from_embeddings(np.array([E1]), np.array([-E1])) == 1.0
    fs = flowscore_batch_from_embeddings([(A, -A[:2]), (np.array([E1]), np.array([-E1])), (A, A)])
    np.testing.assert_array_equal(fs[:2], [1.0, 1.0])
    assert fs[2] == pytest.approx(0.0, abs=1e-12)
    both = D.task2_embedding_scores([A, np.array([E1])], [-A[:2], np.array([-E1])], methods=("flowscore",))
    np.testing.assert_array_equal(both["flowscore"], [1.0, 1.0])


def test_flowscore_clips_p_and_r_at_zero_hand_worked():
    # ref = [e1], cand = [e2, -e1]: S = [[0, -1]]; P = (0 - 1)/2 = -0.5 -> clipped to 0, R = 0:
    # F = 0, distance 1.
    assert flowscore_from_embeddings(np.array([E1]), np.array([E2, -E1])) == 1.0
    # ref = [e1], cand = [e1, -e1, -e1, -e1]: P = (1 - 3)/4 = -0.5 < 0 < R = 1. Unclipped,
    # F = 2PR/(P+R) = -2 and the distance would be 3; clipped, F = 0 and the distance is 1.
    ref, cand = np.array([E1]), np.array([E1, -E1, -E1, -E1])
    S = ref @ cand.T
    assert S.max(axis=0).mean() == -0.5 and S.max(axis=1).mean() == 1.0
    assert flowscore_from_embeddings(ref, cand) == 1.0
    assert flowscore_batch_from_embeddings([(ref, cand)])[0] == 1.0


@pytest.mark.parametrize("seed", range(5))
def test_flowscore_distance_is_in_unit_interval(seed):
    rng = np.random.default_rng(seed)
    pairs = [(unit(rng, rng.integers(1, 6), 3), unit(rng, rng.integers(1, 6), 3)) for _ in range(200)]
    fs = flowscore_batch_from_embeddings(pairs)
    assert ((fs >= 0) & (fs <= 1)).all()
    np.testing.assert_allclose(fs, [flowscore_from_embeddings(a, b) for a, b in pairs], atol=1e-12)


@pytest.mark.parametrize("block_cells", [None, 40])
def test_batched_equals_single(monkeypatch, block_cells):
    if block_cells is not None:  # force many small padded blocks
        monkeypatch.setattr(D, "BLOCK_CELLS", block_cells)
    rng = np.random.default_rng(4)
    pairs = [(unit(rng, rng.integers(1, 12)), unit(rng, rng.integers(1, 12))) for _ in range(60)]
    fs = flowscore_batch_from_embeddings(pairs)
    dtw = flowdtw_batch_from_embeddings(pairs)
    assert fs.shape == dtw.shape == (60,)
    np.testing.assert_allclose(fs, [flowscore_from_embeddings(a, b) for a, b in pairs], atol=1e-12)
    np.testing.assert_allclose(dtw, [flowdtw_from_embeddings(a, b) for a, b in pairs], atol=1e-12)
    both = D.task2_embedding_scores([p[0] for p in pairs], [p[1] for p in pairs])
    np.testing.assert_allclose(both["flowscore"], fs, atol=1e-12)
    np.testing.assert_allclose(both["flowdtw"], dtw, atol=1e-12)
    np.testing.assert_allclose(both["mean_turn"], [mean_turn_distance(a, b) for a, b in pairs], atol=1e-12)


def test_batched_empty_list():
    assert flowscore_batch_from_embeddings([]).shape == (0,)
    assert flowdtw_batch_from_embeddings([]).shape == (0,)


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize("fn", [flowscore_from_embeddings, flowdtw_from_embeddings, mean_turn_distance])
def test_bad_inputs_raise(fn):
    good = np.array([E1, E2])
    with pytest.raises(ValueError, match="reference: empty dialogue"):
        fn(np.zeros((0, 3)), good)
    with pytest.raises(ValueError, match="candidate: empty dialogue"):
        fn(good, np.zeros((0, 3)))
    with pytest.raises(ValueError, match="dimensions differ: reference 3, candidate 4"):
        fn(good, np.eye(4))
    nan = good.copy()
    nan[1, 0] = np.nan
    with pytest.raises(ValueError, match="candidate: turn 1 embedding contains NaN"):
        fn(good, nan)
    with pytest.raises(ValueError, match="NaN or inf"):
        fn(np.full((2, 3), np.inf), good)
    with pytest.raises(ValueError, match="turn 0 embedding is all zeros"):
        fn(np.zeros((1, 3)), good)
    with pytest.raises(ValueError, match="must be 2-D"):
        fn(E1, good)
    with pytest.raises(ValueError, match="numeric"):
        fn([["a", "b", "c"]], good)
    with pytest.raises(ValueError, match="dialogue 'x': reference: empty"):
        fn(np.zeros((0, 3)), good, where="dialogue 'x'")


def test_batched_bad_inputs_name_the_pair():
    good = (np.array([E1, E2]), np.array([E1]))
    bad = (np.array([E1]), np.full((2, 3), np.nan))
    with pytest.raises(ValueError, match="pair 1: candidate: turn 0 embedding contains NaN"):
        flowscore_batch_from_embeddings([good, bad])
    with pytest.raises(ValueError, match="pair 1: embedding dimension 4 differs"):
        flowdtw_batch_from_embeddings([good, (np.eye(4), np.eye(4))])
    with pytest.raises(ValueError, match="u1: reference: empty"):
        flowdtw_batch_from_embeddings([good, (np.zeros((0, 3)), np.eye(3))], names=["u0", "u1"])
    with pytest.raises(ValueError, match="expected a"):
        flowscore_batch_from_embeddings([good, (np.eye(3),)])
    with pytest.raises(ValueError, match="list of"):
        flowscore_batch_from_embeddings(np.eye(3))


def test_cosine_distance_errors():
    assert D.cosine_distance(E1, -E1) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="zero norm"):
        D.cosine_distance(E1, np.zeros(3))
    with pytest.raises(ValueError, match="differ"):
        D.cosine_distance(E1, np.ones(4))
