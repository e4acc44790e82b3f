"""Streaming Task 3 detectors (IT, SS, +NC), the N-gram LM, baselines and the registry, on small
synthetic embeddings (no model needed)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dialfork_dataset.forks import fork_turns
from dialfork_metrics.task3 import (
    FirstTurnBaseline,
    LastTurnBaseline,
    NgramLM,
    NotFittedError,
    RandomTurnBaseline,
    StreamingDetector,
    load_detector,
    make_detector,
    score_predictions,
)
from dialfork_metrics.task3.streaming import (
    alarms,
    calibrate_threshold,
    calibration_statistic,
    max_calibration_alarms,
    position_offsets,
    surprisal_jumps,
    system_turn_index,
    turn_scores,
)

D = 24
_rng = np.random.default_rng(1234)


def _units(n: int) -> np.ndarray:
    x = _rng.normal(size=(n, D))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


N_STEPS = 8
SYS, USR, OFF = _units(N_STEPS), _units(N_STEPS), _units(6)


def _noisy(proto: np.ndarray, rng: np.random.Generator, noise: float = 0.08) -> np.ndarray:
    v = proto + noise * rng.normal(size=D) / np.sqrt(D)
    return v / np.linalg.norm(v)


def _steps(rng: np.random.Generator) -> list[int]:
    """A walk over the workflow: next step (p=.7), skip one (p=.2) or repeat (p=.1)."""
    i, out = 0, [0]
    while i < N_STEPS - 1:
        u = rng.random()
        i = min(N_STEPS - 1, i + 1 if u < 0.7 else i + 2 if u < 0.9 else i)
        out.append(i)
    return out


def make_dialogue(rng: np.random.Generator, name: str, fork_at: int | None = None, fork_k: int | None = None):
    """(record, embeddings): user turn i asks for step i, system turn i performs it; from system
    turn ``fork_at`` (or the fork turn t_k of position ``fork_k``) on, system turns are
    off-workflow prototypes."""
    steps = _steps(rng)
    if fork_k is not None:
        fork_at = fork_turns(len(steps))[fork_k - 1]
    turns, emb = [], []
    for k, s in enumerate(steps, start=1):
        turns.append({"speaker": "user", "text": f"user asks for step {s}"})
        emb.append(_noisy(USR[s], rng))
        off = fork_at is not None and k >= fork_at
        turns.append({"speaker": "system", "text": f"system {'off' if off else 'does'} step {s}"})
        emb.append(_noisy(OFF[rng.integers(len(OFF))] if off else SYS[s], rng))
    T = len(steps)
    rec = {
        "dialogue_id": name,
        "turns": turns,
        "num_system_turns": T,
        "hallucination_type": None if fork_at is None else "SSPC",
        "fork_turn": fork_at,
    }
    return rec, np.stack(emb)


def corpus(seed: int, n_conf: int, n_fork: int = 0):
    rng = np.random.default_rng(seed)
    recs, embs = [], []
    for i in range(n_conf):
        r, e = make_dialogue(rng, f"c{seed}-{i}")
        recs.append(r)
        embs.append(e)
    for i in range(n_fork):
        r, e = make_dialogue(rng, f"f{seed}-{i}", fork_k=1 + i % 4)
        recs.append(r)
        embs.append(e)
    return recs, embs


TRAIN, TRAIN_E = corpus(0, 80)
TEST, TEST_E = corpus(1, 30, 60)
NAMES = ("it", "ss", "it+nc", "ss+nc")


@pytest.fixture(scope="module")
def fitted():
    # the synthetic prototypes are separated at the paper's clustering threshold; the rest is the preset's
    # the paper's percentile rule (80 train dialogues leave the default upper-bound rule no train alarm)
    # and the paper's single threshold (position_weight 0: an alarm at the fork turn itself; the packaged
    # weight, chosen for the full corpus, delays it; its own tests are under "position weight" below)
    return {
        n: make_detector(
            n, encoder=None, distance_threshold=0.55, threshold_rule="percentile", position_weight=0.0
        ).fit(TRAIN, embeddings=TRAIN_E)
        for n in NAMES
    }


# -- N-gram LM -----------------------------------------------------------------------------------
def test_ngram_hand_worked():
    lm = NgramLM(order=2, vocab_size=3).fit([[0, 1], [0, 2]])
    S = lm.start
    assert lm.prob((S,), 0) == pytest.approx((2 + 1) / (2 + 3))
    assert lm.prob((0,), 1) == pytest.approx((1 + 1) / (2 + 3))
    assert lm.prob((0,), 0) == pytest.approx(1 / 5)
    assert lm.prob((1,), 2) == pytest.approx(1 / 3)  # unseen context: 1/V
    np.testing.assert_allclose(lm.sequence_probs([0, 2]), [3 / 5, 2 / 5])
    back = NgramLM(order=2, vocab_size=3, backoff=True).fit([[0, 1], [0, 2]])
    assert back.prob((1,), 0) == pytest.approx((2 + 1) / (4 + 3))  # backs off to the unigram
    assert lm.context_of([]) == (S,) and lm.context_of([2, 1]) == (1,)
    assert NgramLM(order=1, vocab_size=3).fit([[0, 0, 1]]).prob((), 0) == pytest.approx(3 / 6)


@given(
    st.lists(st.lists(st.integers(0, 4), min_size=1, max_size=8), min_size=1, max_size=6),
    st.integers(1, 4),
    st.lists(st.integers(0, 4), max_size=5),
    st.booleans(),
)
@settings(max_examples=40, deadline=None)
def test_ngram_is_a_distribution(seqs, order, history, backoff):
    lm = NgramLM(order, 5, backoff=backoff).fit(seqs)
    ctx = lm.context_of(history)
    assert sum(lm.prob(ctx, v) for v in range(5)) == pytest.approx(1.0)
    again = NgramLM.from_arrays(order, 5, lm.to_arrays(), backoff=backoff)
    assert again.ngram_counts == lm.ngram_counts and again.context_counts == lm.context_counts


def test_ngram_bad_order():
    with pytest.raises(ValueError, match="N-gram order"):
        NgramLM(0, 3)
    with pytest.raises(ValueError, match=r"'order' parameter of StreamingDetector .*\[1, inf\).* Got 0 "):
        make_detector("it", order=0, encoder=None).fit(TRAIN, embeddings=TRAIN_E)


# -- decision functions ----------------------------------------------------------------------------
def test_decision_functions():
    p = np.array([0.5, 0.25, 0.5, 0.01])
    np.testing.assert_allclose(surprisal_jumps(p)[1:], [np.log(2), -np.log(2), np.log(50)])
    assert alarms(p, "it", 0.2).tolist() == [False, False, False, True]
    assert alarms(p, "ss", 1.0).tolist() == [False, False, False, True]
    assert calibration_statistic(p, "it") == 0.01
    assert calibration_statistic(p, "ss") == pytest.approx(np.log(50))
    x = np.arange(1, 101, dtype=float)
    assert calibrate_threshold(x, "it") == pytest.approx(5.95)  # numpy 'linear': 1 + 0.05 * 99
    assert calibrate_threshold(x, "ss") == pytest.approx(95.05)


# -- detectors ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_calibration_false_alarm_rate_on_train(fitted, name):
    det = fitted[name]
    preds = det.predict_many(TRAIN, embeddings=TRAIN_E)
    rate = np.mean([p is not None for p in preds])
    assert rate == pytest.approx(det.train_false_alarm_rate_)
    assert rate <= 0.05 + 1 / len(TRAIN)  # linear interpolation: at most q + (1-q)/n below the percentile
    assert det.n_train_ == len(TRAIN) and det.vocab_size >= 2 * N_STEPS - 2


@pytest.mark.parametrize("name", NAMES)
def test_streaming_beats_trivial_baselines_on_synthetic_forks(fitted, name):
    gold = [
        {k: r[k] for k in ("dialogue_id", "num_system_turns", "hallucination_type", "fork_turn")}
        for r in TEST
    ]
    preds = fitted[name].predict_many(TEST, embeddings=TEST_E)
    r = score_predictions({g["dialogue_id"]: p for g, p in zip(gold, preds)}, gold)
    base = [
        score_predictions({g["dialogue_id"]: b.predict(t) for g, t in zip(gold, TEST)}, gold)["score"]
        for b in (FirstTurnBaseline(), LastTurnBaseline(), RandomTurnBaseline(seed=3))
    ]
    assert r["score"] > max(base) + 20, (r, base)
    assert r["cov_h"] > (0.9 if name.startswith("it") else 0.6) and r["mae_h"] < 1.0


def _stream_outputs(det, rec, emb):
    s = det.start()
    return [s.update(t, e) for t, e in zip(rec["turns"], emb)], s


@given(st.integers(0, 10_000), st.integers(1, 9), st.sampled_from(NAMES))
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_streaming_never_revises_earlier_flags(fitted, seed, fork_at, name):
    det = fitted[name]
    rng = np.random.default_rng(seed)
    rec, emb = make_dialogue(rng, f"h{seed}", fork_at=fork_at if seed % 3 else None)
    full, stream = _stream_outputs(det, rec, emb)
    n = len(rec["turns"])
    for m in range(1, n + 1):
        prefix = {"dialogue_id": rec["dialogue_id"], "turns": rec["turns"][:m]}
        part, pstream = _stream_outputs(det, prefix, emb[:m])
        assert part == full[:m]
        assert pstream.p == stream.p[:m]
        first = next((x for x in full[:m] if x is not None), None)
        assert pstream.flag == first
    assert det.predict(rec, embeddings=emb) == stream.flag
    assert det.predict_many([rec], embeddings=[emb]) == [stream.flag]
    # an alarm is always a system turn already seen (never ahead)
    for pos, out in enumerate(full):
        if out is not None:
            assert 1 <= out <= max(1, sum(t["speaker"] == "system" for t in rec["turns"][: pos + 1]))


def test_flag_at_user_turn_maps_to_previous_system_turn(fitted):
    det = fitted["it"]
    rng = np.random.default_rng(7)
    rec, emb = make_dialogue(rng, "u")
    emb = emb.copy()
    emb[4] = _noisy(OFF[0], rng)  # the third user turn (position 4) goes off-workflow
    s = det.start()
    outs = [s.update(t, e) for t, e in zip(rec["turns"], emb)]
    assert outs[4] == 2  # position 4 is a user turn after system turn 2
    rec2 = {"turns": [{"speaker": "user", "text": "x"}, {"speaker": "system", "text": "y"}]}
    s = det.start()
    assert s.update(rec2["turns"][0], _noisy(OFF[1], rng)) == 1  # no system turn yet -> 1


def test_save_load_roundtrip(fitted, tmp_path):
    for name in NAMES:
        det = fitted[name]
        path = det.save(tmp_path / name)
        assert sorted(p.name for p in path.iterdir()) == ["arrays.npz", "config.json"]
        cfg = json.loads((path / "config.json").read_text())
        assert cfg["detector"] == name and cfg["threshold"] == det.threshold_
        with np.load(path / "arrays.npz", allow_pickle=False) as z:
            assert "centroids_user" in z.files
        back = load_detector(path)
        assert back.name == name and back.threshold_ == det.threshold_
        assert back.predict_many(TEST, embeddings=TEST_E) == det.predict_many(TEST, embeddings=TEST_E)
        for a, b in zip(
            back.turn_probabilities(TEST[:5], TEST_E[:5]), det.turn_probabilities(TEST[:5], TEST_E[:5])
        ):
            np.testing.assert_array_equal(a, b)
    for b in (FirstTurnBaseline(), RandomTurnBaseline(seed=5)):
        back = load_detector(b.save(tmp_path / b.name))
        assert back.predict_many(TEST) == b.predict_many(TEST)


def test_bad_input():
    det = make_detector("it", encoder=None)
    with pytest.raises(ValueError, match="at least one"):
        det.fit([])
    one = [{"dialogue_id": "short", "turns": [{"speaker": "user", "text": "hi"}]}]
    with pytest.raises(ValueError, match="'short'.*at least two turns"):
        det.fit(one, embeddings=[np.ones((1, D))])
    with pytest.raises(NotFittedError, match="not fitted"):
        det.predict(TRAIN[0], embeddings=TRAIN_E[0])
    with pytest.raises(NotFittedError):
        det.start()
    with pytest.raises(ValueError, match="no encoder"):
        det.fit(TRAIN)
    with pytest.raises(ValueError, match="unknown Task 3 detector"):
        make_detector("xyz")
    with pytest.raises(ValueError, match="3 arrays for 2"):
        det.fit(TRAIN[:2], embeddings=TRAIN_E[:3])


def test_wrong_embedding_dimension(fitted):
    with pytest.raises(ValueError, match="dimension 5"):
        fitted["it"].predict(TEST[0], embeddings=np.ones((len(TEST[0]["turns"]), 5)))
    s = fitted["it"].start()
    with pytest.raises(ValueError, match="bare string"):
        s.update("hello", np.ones(D) / np.sqrt(D))


def test_trivial_baselines():
    recs = TEST[:20]
    assert FirstTurnBaseline().predict_many(recs) == [1] * 20
    assert LastTurnBaseline().predict_many(recs) == [r["num_system_turns"] for r in recs]
    rnd = RandomTurnBaseline(seed=0)
    p = rnd.predict_many(recs)
    assert all(1 <= x <= r["num_system_turns"] for x, r in zip(p, recs))
    assert p == rnd.predict_many(recs) and p[::-1] == rnd.predict_many(recs[::-1])  # order-independent
    assert p != RandomTurnBaseline(seed=1).predict_many(recs)
    assert FirstTurnBaseline().fit(TRAIN) is not None
    with pytest.raises(ValueError, match="no system turn"):
        FirstTurnBaseline().predict({"turns": [{"speaker": "user", "text": "hi"}]})


def test_cross_fit_calibration_is_leave_one_out_with_n_folds(fitted):
    train, emb = TRAIN[:12], TRAIN_E[:12]
    det = StreamingDetector(
        "it", encoder=None, calibration="cross_fit", calibration_folds=12, cross_fit_nodes="fixed"
    ).fit(train, embeddings=emb)
    assert make_detector("it", encoder=None, preset="paper").settings()["calibration"] == "in_sample"
    assert det.calibration == det.calibration_ == "cross_fit"
    turns = [r["turns"] for r in train]
    nodes, _ = det._assign_many(turns, [np.asarray(e, dtype=np.float64) for e in emb])
    for i in (0, 5, 11):
        lm = NgramLM(det.order_, det.vocab_size).fit([n for j, n in enumerate(nodes) if j != i])
        assert det.calibration_stats_[i] == pytest.approx(
            calibration_statistic(
                lm.sequence_probs(nodes[i]), "it", system_turn_index(turns[i]), det.position_weight_
            )
        )
    with pytest.raises(ValueError, match="'calibration' parameter of StreamingDetector must be a str among"):
        StreamingDetector("it", calibration="bogus").fit(TRAIN, embeddings=TRAIN_E)


@pytest.mark.parametrize("name", NAMES)
def test_threshold_on_an_order_statistic_compares_identically(name):
    # n = 21: the 5th and 95th percentiles (linear) fall exactly on order statistics 1 and 19
    det = make_detector(name, encoder=None).fit(TRAIN[:21], embeddings=TRAIN_E[:21])
    assert det.threshold_ in set(det.calibration_stats_.tolist())
    preds = det.predict_many(TRAIN[:21], embeddings=TRAIN_E[:21])
    assert np.mean([p is not None for p in preds]) == det.train_false_alarm_rate_ <= 1 / 21 + 1e-12


# -- threshold rules and out-of-fold nodes ------------------------------------------------------------
def test_threshold_rules_known_answers():
    # conformal: floor(a (n + 1)) - 1 calibration alarms
    assert max_calibration_alarms(99, 0.05, "conformal") == 4
    assert max_calibration_alarms(18, 0.05, "conformal") == -1  # too few for any alarm
    # upper bound: m = 0 qualifies from n = 59 on at 5% and 95% (1 - 0.05 ** (1 / n) <= 0.05)
    assert max_calibration_alarms(59, 0.05, "upper_bound") == 0
    assert max_calibration_alarms(58, 0.05, "upper_bound") is None
    assert max_calibration_alarms(10_000, 0.05, "upper_bound") < max_calibration_alarms(
        10_000, 0.05, "conformal"
    )
    assert max_calibration_alarms(50, 0.05) is None
    stats = np.arange(1.0, 10.0)  # n = 9, a = 0.2: one calibration alarm
    assert calibrate_threshold(stats, "it", 0.2, rule="conformal") == 2.0
    assert calibrate_threshold(stats, "ss", 0.2, rule="conformal") == 8.0
    assert calibrate_threshold(stats, "it", 0.05, rule="conformal") == -np.inf
    assert calibrate_threshold(stats, "ss", 0.05, rule="conformal") == np.inf
    # ties never add alarms
    assert calibrate_threshold(np.ones(100), "it", 0.2, rule="conformal") == 1.0
    # n < 59: upper_bound falls back to conformal, and to the percentile below 1/a - 1 dialogues
    assert calibrate_threshold(stats, "it", 0.2, rule="upper_bound") == 2.0
    assert calibrate_threshold(stats, "it", 0.05, rule="upper_bound") == calibrate_threshold(
        stats, "it", 0.05
    )
    with pytest.raises(ValueError, match="unknown threshold rule"):
        calibrate_threshold(stats, "it", 0.2, rule="bogus")


def test_conformal_rule_false_alarm_rate_is_k_over_n_plus_1():
    # uniform statistics: a new dialogue alarms (IT: below the threshold) with probability = the
    # threshold; over calibration sets its mean is E[U_(k)] = k / (n + 1) <= a
    rng = np.random.default_rng(0)
    n, a = 39, 0.1
    k = max_calibration_alarms(n, a, "conformal") + 1
    thr = [calibrate_threshold(rng.random(n), "it", a, rule="conformal") for _ in range(4000)]
    assert k / (n + 1) <= a
    assert np.mean(thr) == pytest.approx(k / (n + 1), abs=0.005)


def test_default_rule_and_presets():
    assert make_detector("it", encoder=None).resolved_settings()[0]["threshold_rule"] == "upper_bound"
    assert (
        make_detector("it", encoder=None, preset="paper").resolved_settings()[0]["threshold_rule"]
        == "percentile"
    )
    assert make_detector("it", encoder=None).cross_fit_nodes == "restrict"
    with pytest.raises(
        ValueError, match="'threshold_rule' parameter of StreamingDetector must be a str among"
    ):
        make_detector("it", encoder=None, threshold_rule="bogus").resolved_settings()
    with pytest.raises(
        ValueError, match="'cross_fit_nodes' parameter of StreamingDetector must be a str among"
    ):
        make_detector("it", encoder=None, cross_fit_nodes="bogus").resolved_settings()
    det = make_detector("ss+nc", encoder=None, distance_threshold=0.55).fit(TRAIN, embeddings=TRAIN_E)
    m = max_calibration_alarms(len(TRAIN), det.false_alarm_rate, "upper_bound")
    # the rule bounds the calibration dialogues that alarm (SS: statistic above the threshold);
    # train_false_alarm_rate is in-sample and differs from it whenever calibration is cross_fit
    k = int(np.sum(np.asarray(det.calibration_stats_) > det.threshold_))
    assert m is not None and k <= m


@pytest.mark.parametrize("name", ("it", "ss+nc"))
def test_cross_fit_recluster_is_a_detector_fitted_on_the_other_folds(name):
    train, emb = TRAIN[:20], TRAIN_E[:20]
    det = make_detector(
        name,
        encoder=None,
        calibration="cross_fit",
        calibration_folds=4,
        cross_fit_nodes="recluster",
        distance_threshold=0.55,
        order=3,
        backoff=True,
    ).fit(train, embeddings=emb)
    from dialfork_metrics.task3.streaming import calibration_fold_ids

    fold = calibration_fold_ids(20, 4, 0)
    for f in range(4):
        rest = [i for i in range(20) if fold[i] != f]
        ref = make_detector(
            name, encoder=None, calibration="in_sample", distance_threshold=0.55, order=3, backoff=True
        ).fit([train[i] for i in rest], embeddings=[emb[i] for i in rest])
        held = [i for i in range(20) if fold[i] == f]
        st, _ = ref.dialogue_statistics([train[i] for i in held], [emb[i] for i in held])
        np.testing.assert_allclose(det.calibration_stats_[held], st, rtol=1e-12)


def test_cross_fit_restrict_drops_a_node_only_the_fold_has():
    # one train dialogue says something no other does: with the split's nodes it has a node of its
    # own; out of fold (restrict) that node is gone and the utterance joins another one
    train, emb = [dict(r) for r in TRAIN[:20]], [np.array(e) for e in TRAIN_E[:20]]
    emb[3][1] = OFF[0]
    # position_weight 0: the statistic is min_t p_t, so dialogue 3's is its lone utterance's
    det = {
        m: make_detector(
            "it+nc",
            encoder=None,
            calibration="cross_fit",
            calibration_folds=20,
            cross_fit_nodes=m,
            distance_threshold=0.55,
            order=2,
            position_weight=0.0,
        ).fit(train, embeddings=emb)
        for m in ("fixed", "restrict")
    }
    assert det["fixed"].vocab_size == det["restrict"].vocab_size
    # the lone utterance is certain of its own node (confidence ~1) but not of its out-of-fold one
    assert det["restrict"].calibration_stats_[3] < det["fixed"].calibration_stats_[3]
    others = [i for i in range(20) if i != 3]
    np.testing.assert_allclose(
        det["restrict"].calibration_stats_[others], det["fixed"].calibration_stats_[others], rtol=0.2
    )


# -- position weight ------------------------------------------------------------------------------------
def test_position_weight_closed_forms():
    p = np.array([0.5, 0.25, 0.5, 0.01])
    j = np.array([1, 1, 2, 4])  # the system turn of each position
    assert system_turn_index(
        [{"speaker": s} for s in ("user", "system", "system", "user", "system")]
    ).tolist() == [1, 1, 2, 2, 3]
    np.testing.assert_allclose(position_offsets(j, 1.0, 4), np.log(j))
    # gamma = 0 is the paper's rule exactly, with or without the system turns
    assert turn_scores(p, "it").tolist() == p.tolist()
    assert turn_scores(p, "it", j, 0.0).tolist() == p.tolist()
    np.testing.assert_array_equal(turn_scores(p, "ss", j, 0.0), surprisal_jumps(p))
    # IT: p_t / j^gamma; SS: Delta_t + gamma log j
    np.testing.assert_allclose(turn_scores(p, "it", j, 1.0), p / j)
    np.testing.assert_allclose(turn_scores(p, "it", j, 0.5), p / np.sqrt(j))
    np.testing.assert_allclose(turn_scores(p, "ss", j, 2.0)[1:], surprisal_jumps(p)[1:] + 2 * np.log(j[1:]))
    assert turn_scores(p, "ss", j, 2.0)[0] == -np.inf
    # an early drop needs more evidence: at threshold 0.2, p = 0.25 at system turn 1 does not alarm
    # and neither does p = 0.01 ... unless the weight is large enough to lift the bar at turn 4
    assert alarms(p, "it", 0.0026, j, 0.0).tolist() == [False] * 4
    assert alarms(p, "it", 0.0026, j, 1.0).tolist() == [False, False, False, True]  # 0.01 / 4 < 0.0026
    assert calibration_statistic(p, "it", j, 1.0) == pytest.approx(0.0025)
    assert calibration_statistic(p, "ss", j, 1.0) == pytest.approx(np.log(50) + np.log(4))
    with pytest.raises(ValueError, match="system turn index"):
        turn_scores(p, "it", None, 1.0)
    with pytest.raises(ValueError, match="system turn index"):
        calibration_statistic(p, "it", j[:2], 1.0)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("gamma", [0.5, 1.0])
def test_position_weight_streaming_equals_offline_rule(name, gamma):
    """The streaming step and the offline rule (turn_scores over whole dialogues) take the same
    decisions, bit for bit: the selection's held-out rows are the detector's predictions."""
    from dialfork_metrics.task3.selection import first_alarms

    det = make_detector(
        name, encoder=None, distance_threshold=0.55, threshold_rule="percentile", position_weight=gamma
    ).fit(TRAIN, embeddings=TRAIN_E)
    assert det.position_weight == det.position_weight_ == gamma and det.settings()["position_weight"] == gamma
    ps = det.turn_probabilities(TEST, TEST_E)
    sys_turns = [system_turn_index(r["turns"]) for r in TEST]
    assert det.predict_many(TEST, embeddings=TEST_E) == first_alarms(
        ps, sys_turns, det.method, det.threshold_, gamma
    )
    # the train false-alarm rate is the one of the weighted statistic the threshold was read from
    preds = det.predict_many(TRAIN, embeddings=TRAIN_E)
    assert np.mean([p is not None for p in preds]) == pytest.approx(det.train_false_alarm_rate_)
    stats, _ = det.dialogue_statistics(TEST, TEST_E)
    flagged = stats < det.threshold_ if det.method == "it" else stats > det.threshold_
    assert flagged.tolist() == [p is not None for p in det.predict_many(TEST, embeddings=TEST_E)]


def test_position_weight_moves_false_alarms_later():
    """On conformant dialogues at one false-alarm budget, a positive weight can only move the alarms
    that remain towards later system turns on average (the calibration is on the weighted statistic)."""
    kw = {
        "encoder": None,
        "distance_threshold": 0.55,
        "threshold_rule": "percentile",
        "false_alarm_rate": 0.3,
    }
    conf = [(r, e) for r, e in zip(TEST, TEST_E) if r.get("hallucination_type") is None]
    late = {}
    for gamma in (0.0, 2.0):
        det = make_detector("it", position_weight=gamma, **kw).fit(TRAIN, embeddings=TRAIN_E)
        preds = [p for p in det.predict_many([r for r, _ in conf], [e for _, e in conf]) if p is not None]
        late[gamma] = np.mean(preds) if preds else np.nan
    assert not np.isnan(late[0.0])
    assert np.isnan(late[2.0]) or late[2.0] >= late[0.0]


def test_position_weight_saved_validated_and_old_files_load_as_zero(tmp_path):
    det = make_detector("ss+nc", encoder=None, distance_threshold=0.55, position_weight=1.0).fit(
        TRAIN, embeddings=TRAIN_E
    )
    path = det.save(tmp_path / "d")
    back = load_detector(path)
    assert back.position_weight == 1.0 and back.threshold_ == det.threshold_
    assert back.predict_many(TEST, embeddings=TEST_E) == det.predict_many(TEST, embeddings=TEST_E)
    cfg = json.loads((path / "config.json").read_text())
    del cfg["position_weight"]  # a folder saved before the setting existed ran the single threshold
    (path / "config.json").write_text(json.dumps(cfg))
    assert load_detector(path).position_weight_ == 0.0
    # (scikit-learn's Interval takes a bool as the number it is, so True is not among them)
    for bad in (-1.0, float("nan"), float("inf"), "1"):
        with pytest.raises(
            ValueError, match=f"'position_weight' parameter of StreamingDetector .* Got {bad!r} "
        ):
            make_detector("it", encoder=None, position_weight=bad).fit(TRAIN, embeddings=TRAIN_E)
    assert make_detector("it", encoder=None, preset="paper").settings()["position_weight"] == 0.0
