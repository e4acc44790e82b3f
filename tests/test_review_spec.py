"""Independent SPEC-conformance checks (review): hand-worked known answers for the places where
the code and the project's spec (docs/spec.md) could disagree, and the boundary errors the SPEC asks for."""

from __future__ import annotations

import math

import numpy as np
import pytest

from corpus_factory import make_dialogue, make_records
from dialfork_dataset import load_records
from dialfork_dataset.forks import fork_turns, position_to_system_turn
from dialfork_dataset.taxonomy import forks_per_source
from dialfork_metrics import distances as D
from dialfork_metrics.dialogue import score_pairs
from dialfork_metrics.stats import (
    bootstrap_mean_ci,
    fisher_combine,
    holm,
    paired_t_greater,
    ranking_tau,
    wilcoxon_greater,
)
from dialfork_metrics.task3 import score_from_components, score_predictions
from dialfork_metrics.task3.streaming import StreamingDetector

E1, E2, E3 = np.eye(3)


# ------------------------------------------------------------------ SPEC 1 / 4: records and splits
def test_fork_turns_spec_example_and_round_half_even():
    assert fork_turns(6) == (1, 3, 4, 5)  # round(1.5) = 2, round(4.5) = 4
    assert fork_turns(10) == (1, 3, 6, 9)  # round(2.5) = 2, round(7.5) = 8
    assert fork_turns(4) == (1, 2, 3, 4)


def test_conformant_record_with_fewer_than_4_system_turns_is_rejected():
    # SPEC 1: a conformant dialogue is kept only if T >= 4. A corpus holding one with T = 3 (and
    # therefore no forks) must not load silently: it would enter the floor(n/2) split.
    recs = make_records(tasks=("weather",), per_task=1, T=6)
    short = dict(
        recs[0],
        dialogue_id="weather-short",
        source_id="weather-short",
        scenario_id="99",
        num_system_turns=3,
        turns=make_dialogue(3, "", None, "short"),
    )
    with pytest.raises(ValueError, match=r"weather-short.*T=3.*at least 4|weather-short.*T >= 4"):
        load_records([*recs, short])


def test_duplicate_fork_unit_is_rejected():
    # two different records claiming to be the same fork (source, type, k): Task 2 quartets would
    # silently keep only one of them.
    recs = make_records(tasks=("weather",), per_task=1, T=6)
    fork = next(r for r in recs if r["hallucination_type"] == "GR" and r["fork_position"] == 2)
    dup = dict(fork, dialogue_id=fork["dialogue_id"] + "-again")
    with pytest.raises(ValueError, match=r"-again.*same source, type and fork position"):
        load_records([*recs, dup])


def test_fork_domain_must_match_its_source():
    recs = make_records(tasks=("weather",), per_task=1, T=6)
    fork = next(r for r in recs if r["hallucination_type"] == "CSC")
    fork["domain"] = "bank"
    with pytest.raises(ValueError, match=r"domain 'bank' differs from its source"):
        load_records(recs)


def test_task3_split_floor_half_and_all_16_forks():
    from dialfork_dataset.builder import all_config_rows

    recs = make_records(tasks=("weather",), per_task=7, T=6)
    rows = all_config_rows(load_records(recs))
    assert len(rows["task3"]["train"]) == 3  # floor(7/2), conformant only
    assert all(r["hallucination_type"] is None for r in rows["task3"]["train"])
    assert len(rows["task3"]["test"]) == 4 + 4 * forks_per_source()  # ceil(7/2) sources and all their forks


# ------------------------------------------------------------------ SPEC 7: distances
def test_flowscore_P_over_candidate_R_over_reference_and_minus_inf_padding():
    # ref = [e1], cand = [-e1, e2]: S = [[-1, 0]]; P = mean_j max_i S_ij = (-1 + 0)/2 = -1/2,
    # R = mean_i max_j S_ij = 0; F = 2PR/(P+R) = 0 -> FlowScore 1. Padded to a longer pair (a
    # zero-padded block would let padding win column maxima), the batched form agrees.
    ref, cand = np.array([E1]), np.array([-E1, E2])
    assert D.flowscore_from_embeddings(ref, cand) == pytest.approx(1.0)
    big_ref = np.array([E1, E2, E3, (E1 + E2) / math.sqrt(2)])
    out = D.flowscore_batch_from_embeddings([(ref, cand), (big_ref, np.array([E3, E1, E2]))])
    assert out[0] == pytest.approx(1.0)


def test_flowdtw_boundary_row_and_column_are_infinite():
    # n = 1, m = 3: the only path is (1,1) -> (1,2) -> (1,3): L = 3, Gamma = sum of the costs.
    ref = np.array([E1])
    cand = np.array([E1, E2, -E1])  # costs 0, 1, 2
    assert D.flowdtw_path_length(ref, cand) == (pytest.approx(3.0), 3)
    assert D.flowdtw_from_embeddings(ref, cand) == pytest.approx(1.0)


def test_batched_names_must_match_pairs():
    pair = (np.array([E1]), np.array([E2]))
    with pytest.raises(ValueError, match="names"):
        D.flowscore_batch_from_embeddings([pair, pair], names=["only one"])


def test_mean_turn_zero_mean_error_names_the_pair():
    # ref turns e1 and -e1 average to 0: Mean-turn is undefined and the error names the dialogue
    refs = [np.array([E1, E2]), np.array([E1, -E1])]
    cands = [np.array([E2]), np.array([E2])]
    with pytest.raises(ValueError, match=r"reference 1 \('bad-dialogue'\)"):
        D.task2_embedding_scores(refs, cands, names=["reference 0", "reference 1 ('bad-dialogue')"])


class _FixedModel:
    """A stand-in sentence encoder: each text maps to a fixed vector (no model download)."""

    max_seq_length = 512
    VEC = {"hello": E1, "olleh": -E1, "steps": E2}

    def encode(self, texts, **_):
        return np.stack([self.VEC[t] for t in texts]).astype(np.float32)


def test_dialogue_level_mean_turn_error_names_the_dialogue():
    from dialfork_metrics.encoders import Encoder

    enc = Encoder("fixed", model=_FixedModel())
    ref = {
        "dialogue_id": "zero-mean",
        "turns": [{"speaker": "user", "text": "hello"}, {"speaker": "system", "text": "olleh"}],
    }
    cand = ["hello", "steps"]
    with pytest.raises(ValueError, match="zero-mean"):
        score_pairs([ref], [cand], ["mean_turn"], encoder=enc)
    # FlowScore / FlowDTW are defined for the same pair
    r = score_pairs([ref], [cand], ["flowscore", "flowdtw"], encoder=enc)
    # S = [[1, 0], [-1, 0]]: P = (1 + 0)/2, R = (1 + 0)/2 -> F = 1/2
    assert r["flowscore"][0] == pytest.approx(0.5)


def test_shared_prefix_counts_opening_turns_verbatim():
    a = ["hi", "hello, how can I help?", "weather please", "which city?"]
    b = ["hi", "hello, how can I help?", "weather please", "Which city?"]
    assert score_pairs([a], [b], ["shared_prefix"])["shared_prefix"][0] == -3.0
    assert score_pairs([a], [a], ["shared_prefix"])["shared_prefix"][0] == -4.0


# ------------------------------------------------------------------ SPEC 8: Task 3
def test_flag_at_user_turn_maps_to_latest_system_turn_before_it():
    turns = [
        {"speaker": "user"},
        {"speaker": "user"},
        {"speaker": "system"},
        {"speaker": "user"},
        {"speaker": "system"},
    ]
    assert [position_to_system_turn(turns, p) for p in range(5)] == [1, 1, 1, 1, 2]


GOLD = [
    {"dialogue_id": "c", "num_system_turns": 5, "hallucination_type": None, "fork_turn": None},
    {"dialogue_id": "f", "num_system_turns": 6, "hallucination_type": "GR", "fork_turn": 2},
]


def test_score_hand_worked_with_T_plus_1():
    # fork: |4 - 2| = 2, ref |6 - 2| = 4 -> a1 = 1/2; conformant flagged at 5: |(5+1) - 5| = 1,
    # ref T = 5 -> a2 = 4/5; a3 = 1, a4 = 0 -> floored at 1e-12
    r = score_predictions({"c": 5, "f": 4}, GOLD)
    assert r["mae_c"] == 1 and r["mae_c_ref"] == 5 and r["mae_h_ref"] == 4
    expected = 100 * math.exp(0.35 * math.log(0.5) + 0.35 * math.log(0.8) + 0.15 * math.log(1e-12))
    assert r["score"] == pytest.approx(expected)
    # no flagged fork: a1 = 0 (floored); no flagged conformant: a2 = 1
    r = score_predictions({"c": None, "f": None}, GOLD)
    assert r["components"]["a1"] == 0.0 and r["components"]["a2"] == 1.0


def test_numpy_integer_predictions_score_like_ints():
    r = score_predictions({"c": np.int64(5), "f": np.int32(4)}, GOLD)
    assert r == score_predictions({"c": 5, "f": 4}, GOLD)
    with pytest.raises(ValueError, match="boolean"):
        score_predictions({"c": np.bool_(True), "f": 4}, GOLD)


def test_score_from_components_rejects_nan():
    with pytest.raises(ValueError, match="a2"):
        score_from_components((0.5, float("nan"), 1.0, 1.0))


def test_streaming_fit_refuses_forked_dialogues():
    rng = np.random.default_rng(0)
    conf = {"dialogue_id": "c0", "hallucination_type": None, "turns": ["hi", "hello"]}
    fork = {"dialogue_id": "c0-GR-k1", "hallucination_type": "GR", "turns": ["hi", "buy a house"]}
    emb = [rng.normal(size=(2, 4)), rng.normal(size=(2, 4))]
    with pytest.raises(ValueError, match=r"c0-GR-k1.*conformant"):
        StreamingDetector("it", encoder=None).fit([conf, fork], embeddings=emb)


# ------------------------------------------------------------------ SPEC 5, 6, 9: statistics
def test_ranking_tau_known_values():
    assert ranking_tau([4, 3, 2, 1]) == 1.0
    assert ranking_tau([1, 2, 3, 4]) == -1.0
    assert ranking_tau([0.5, 0.5, 0.5, 0.5]) == 0.0
    # one swap of four: (6 - 2*1)/6 = 2/3
    assert ranking_tau([4, 2, 3, 1]) == pytest.approx(2 / 3)


@pytest.mark.parametrize("fn", [wilcoxon_greater, paired_t_greater, bootstrap_mean_ci])
def test_statistics_refuse_nan_differences(fn):
    with pytest.raises(ValueError, match="NaN"):
        fn([0.5, float("nan"), 1.0, 0.25])


def test_p_value_combiners_refuse_values_outside_0_1():
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        fisher_combine([0.2, float("nan")])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        holm([0.2, 1.5])


def test_batched_flowdtw_equals_single_exactly_with_repeated_turns():
    # Repeated turns (scaled copies of 4 prototypes) create exact ties in Gamma; the batched kernel
    # must normalise rows bit-for-bit like the single-pair path, else a 1-ulp difference flips a
    # tie and changes L (before the fix, case 138 gave 0.3282 single vs 0.3556 batched: L 13 vs 12).
    rng = np.random.default_rng(0)
    for _ in range(300):
        base = rng.normal(size=(4, 16))
        n, m = rng.integers(2, 15, size=2)
        A = base[rng.integers(0, 4, size=n)] * rng.uniform(0.5, 2)
        B = base[rng.integers(0, 4, size=m)] * rng.uniform(0.5, 2)
        single = D.flowdtw_from_embeddings(A, B)
        others = [
            (rng.normal(size=(rng.integers(1, 20), 16)), rng.normal(size=(rng.integers(1, 20), 16)))
            for _ in range(5)
        ]
        assert D.flowdtw_batch_from_embeddings([(A, B), *others])[0] == single


def test_dialogue_level_flowdtw_equals_embedding_level_exactly():
    # the dialogue API and the embedding-level function normalise rows identically, so FlowDTW's
    # exact-tie breaking (repeated turns) gives the same path and L in both
    from dialfork_metrics.dialogue import flowdtw
    from dialfork_metrics.encoders import Encoder

    # (before the fix, this seed gave 17 of 100 pairs differing: 16 in the last bits, one flipped tie)
    rng = np.random.default_rng(1)
    vocab = [f"t{i}" for i in range(4)]
    vec = {t: rng.normal(size=384) for t in vocab}

    class Model:
        max_seq_length = 512

        def encode(self, texts, **_):
            return np.stack([vec[t] for t in texts]).astype(np.float32)

    enc = Encoder("fixed-random", model=Model())
    for _ in range(100):
        a = [vocab[i] for i in rng.integers(0, 4, size=rng.integers(2, 12))]
        b = [vocab[i] for i in rng.integers(0, 4, size=rng.integers(2, 12))]
        Ea, Eb = enc.encode(a), enc.encode(b)
        assert flowdtw(a, b, encoder=enc) == D.flowdtw_from_embeddings(Ea, Eb)
