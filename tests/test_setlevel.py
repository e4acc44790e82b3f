"""FBD, PRD, turn pairs and the set-level controls (SPEC sections 5 and 7): closed forms,
hand-worked curves, invariants, bad inputs, and the pair encoder against a direct computation."""

from __future__ import annotations

import numpy as np
import pytest

from dialfork_metrics.pair_encoder import turn_pairs
from dialfork_metrics.setlevel import (
    _max_f1,
    fbd_from_embeddings,
    frechet_distance,
    prd_curve,
    prd_from_embeddings,
    set_turn_count_diff,
    set_word_count_diff,
)

# ---------------------------------------------------------------- Frechet


def test_fbd_equal_covariances_is_squared_mean_distance():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 6)) @ rng.normal(size=(6, 6))
    shift = np.array([1.0, -2.0, 0.5, 0.0, 3.0, -1.0])
    assert fbd_from_embeddings(X, X + shift) == pytest.approx(shift @ shift, rel=1e-9)
    assert fbd_from_embeddings(X, X) == pytest.approx(0.0, abs=1e-9)


def test_frechet_closed_forms():
    # 1-D: (m1 - m2)^2 + (s1 - s2)^2
    assert frechet_distance([1.0], [[4.0]], [3.0], [[9.0]]) == pytest.approx(4.0 + 1.0)
    # diagonal covariances: ||mu||^2 + sum (sqrt a - sqrt b)^2
    a, b = np.array([1.0, 4.0, 9.0]), np.array([4.0, 1.0, 16.0])
    mu1, mu2 = np.zeros(3), np.array([1.0, 1.0, 1.0])
    expect = 3.0 + np.sum((np.sqrt(a) - np.sqrt(b)) ** 2)
    assert frechet_distance(mu1, np.diag(a), mu2, np.diag(b)) == pytest.approx(expect)


def test_frechet_matches_sqrtm_on_non_commuting_covariances():
    from scipy.linalg import sqrtm

    rng = np.random.default_rng(1)
    A, B = rng.normal(size=(5, 5)), rng.normal(size=(5, 5))
    S1, S2 = A @ A.T + np.eye(5), B @ B.T + 0.5 * np.eye(5)
    mu1, mu2 = rng.normal(size=5), rng.normal(size=5)
    ref = float((mu1 - mu2) @ (mu1 - mu2) + np.trace(S1 + S2 - 2 * np.real(sqrtm(S1 @ S2))))
    assert frechet_distance(mu1, S1, mu2, S2) == pytest.approx(ref, rel=1e-9)


def test_fbd_singular_covariance_small_n_is_finite():
    rng = np.random.default_rng(2)
    X, Y = rng.normal(size=(5, 20)), rng.normal(size=(4, 20)) + 1
    v = fbd_from_embeddings(X, Y)
    assert np.isfinite(v) and v > 0


@pytest.mark.parametrize(
    "fn", [fbd_from_embeddings, lambda a, b: prd_from_embeddings(a, b, num_clusters=2, num_runs=1)]
)
def test_bad_embeddings(fn):
    X = np.ones((5, 3))
    with pytest.raises(ValueError, match="reference set: needs at least 2"):
        fn(X[:1], X)
    with pytest.raises(ValueError, match="target set: needs at least 2"):
        fn(X, X[:1])
    bad = X.copy()
    bad[3, 1] = np.nan
    with pytest.raises(
        ValueError, match=r"target set: embeddings contain NaN or inf \(first at row 3, column 1\)"
    ):
        fn(X, bad)
    with pytest.raises(ValueError, match="mismatched dimensions: reference set 3, target set 4"):
        fn(X, np.ones((5, 4)))
    with pytest.raises(ValueError, match="2-D"):
        fn(np.ones(5), X)


# ---------------------------------------------------------------- PRD


def test_prd_curve_hand_worked():
    # alpha(l) = min(l/2, 1/2); beta = alpha / l: max F1 = 1/2 at l = 1
    p, r = prd_curve([0.5, 0.5, 0.0], [0.0, 0.5, 0.5], num_angles=1001)
    assert _max_f1(p, r) == pytest.approx(0.5, abs=1e-9)
    p, r = prd_curve([0.2, 0.8], [0.2, 0.8], num_angles=1001)
    assert _max_f1(p, r) == pytest.approx(1.0, abs=1e-9)
    p, r = prd_curve([1.0, 0.0], [0.0, 1.0], num_angles=11)
    assert p.shape == (11,) and _max_f1(p, r) == 0.0


def test_prd_disjoint_is_one_and_self_is_zero():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 4))
    Y = rng.normal(size=(50, 4)) + 100.0
    assert prd_from_embeddings(X, Y, num_clusters=5, num_runs=2, n_init=2) == pytest.approx(1.0)
    assert prd_from_embeddings(X, X, num_clusters=5, num_runs=2, n_init=2) == pytest.approx(0.0, abs=1e-9)
    a = prd_from_embeddings(X, X[::-1] + 0.3, num_clusters=5, num_runs=3, seed=7, n_init=2)
    b = prd_from_embeddings(X, X[::-1] + 0.3, num_clusters=5, num_runs=3, seed=7, n_init=2)
    assert a == b and 0.0 <= a <= 1.0


def test_prd_bad_parameters():
    X = np.arange(12.0).reshape(6, 2)
    with pytest.raises(ValueError, match="num_clusters=20 exceeds the 12 embeddings"):
        prd_from_embeddings(X, X)
    with pytest.raises(ValueError, match="kmeans must be"):
        prd_from_embeddings(X, X, num_clusters=2, kmeans="other")
    with pytest.raises(ValueError, match="num_angles"):
        prd_curve([1.0], [1.0], num_angles=2)


# ---------------------------------------------------------------- pairs and controls

DLG = [
    {"speaker": "user", "text": "hi"},
    {"speaker": "system", "text": "hello"},
    {"speaker": "user", "text": "book"},
    {"speaker": "system", "text": "done"},
    {"speaker": "system", "text": "bye"},
]


def test_turn_pairs():
    assert turn_pairs(DLG, "system_user") == [("hello", "book")]
    assert turn_pairs(DLG, "user_system") == [("hi", "hello"), ("book", "done")]
    assert turn_pairs(DLG, "sliding") == [
        ("hi", "hello"),
        ("hello", "book"),
        ("book", "done"),
        ("done", "bye"),
    ]
    with pytest.raises(ValueError, match="unknown pairing"):
        turn_pairs(DLG, "other")


def test_set_controls():
    ref = [["a b", "c"], ["d", "e f g", "h"]]  # 2.5 turns, 4 words on average
    tgt = [["a", "b", "c", "d"], ["x y z w v", "u"]]  # 3 turns, 5 words
    assert set_turn_count_diff(ref, tgt) == pytest.approx(0.5)
    assert set_word_count_diff(ref, tgt) == pytest.approx(1.0)
    assert set_turn_count_diff(ref, ref) == 0.0
    with pytest.raises(ValueError, match="target set: empty set"):
        set_turn_count_diff(ref, [])
    with pytest.raises(ValueError, match="target set dialogue 1: turn 0 is empty"):
        set_word_count_diff(ref, [["a"], [" "]])


# ---------------------------------------------------------------- with the packaged encoder


@pytest.fixture(scope="module")
def encoder():
    from dialfork_metrics.encoders import Encoder

    return Encoder("minilm")


def test_pair_encoder_matches_direct_cls(encoder):
    import torch
    from transformers import AutoModel, AutoTokenizer

    from dialfork_metrics.pair_encoder import PairEncoder

    a = ["What is your name?", "Hello there, I would like to book a table for four people tonight.", "Bye"]
    b = ["Mark.", "Sure, at what time?", "Goodbye and have a nice day"]
    pe = PairEncoder(encoder, batch_size=2)
    got = pe.encode_pairs(a, b)
    tok = AutoTokenizer.from_pretrained(encoder.name)
    model = AutoModel.from_pretrained(encoder.name).eval()
    with torch.no_grad():
        ref = (
            model(**tok(a, b, padding=True, truncation=True, return_tensors="pt"))
            .last_hidden_state[:, 0]
            .numpy()
        )
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
    assert len(pe._cache) == 3
    again = pe.encode_pairs(a[:1] * 2, b[:1] * 2)
    np.testing.assert_array_equal(again[0], got[0])
    assert len(pe._cache) == 3
    with pytest.raises(ValueError, match="pair 0: both texts must be non-empty"):
        pe.encode_pairs([""], ["x"])


def test_pair_key_is_unambiguous():
    from dialfork_metrics.pair_encoder import _pair_key

    assert _pair_key("ab", "c") != _pair_key("a", "bc")
    assert _pair_key("a", "b") == _pair_key("a", "b") and len(_pair_key("a", "b")) == 32


def test_pair_encoder_disk_cache_and_memo(encoder, tmp_path):
    from dialfork_metrics.encoders import Encoder
    from dialfork_metrics.pair_encoder import PairEncoder, pair_encoder_for

    a, b = ["Which day?", "Hello, I need a doctor."], ["Tomorrow.", "Which doctor?"]
    first = PairEncoder(encoder, cache_dir=tmp_path)
    x = first.encode_pairs(a, b)
    assert first.stats["encoded"] == 2 and first.stats["disk_hits"] == 0
    # a new encoder of the same model, same cache folder: read from disk, no model load
    fresh = Encoder(encoder.name, cache_dir=tmp_path)
    again = PairEncoder(fresh)  # inherits the encoder's cache_dir
    y = again.encode_pairs(b[:1] + a, a[:1] + b)  # one new pair, two cached ones
    assert again.stats["disk_hits"] == 2 and again.stats["encoded"] == 1
    np.testing.assert_array_equal(y[1:], x)
    cold = Encoder(encoder.name, cache_dir=tmp_path)
    z = PairEncoder(cold).encode_pairs(a, b)
    np.testing.assert_array_equal(z, x)
    assert cold._model is None  # all hits: the model was never loaded
    # a different truncation length is a different cache key
    short = PairEncoder(Encoder(encoder.name, cache_dir=tmp_path), max_length=8)
    short.encode_pairs(a, b)
    assert short.stats["disk_hits"] == 0 and short.stats["encoded"] == 2
    assert PairEncoder(encoder, cache_dir=False).cache_dir is None
    with pytest.raises(ValueError, match="max_length must be"):
        PairEncoder(encoder, max_length=1)
    # one pair encoder per encoder object: repeated fbd() calls reuse the reference pairs
    assert pair_encoder_for(encoder) is pair_encoder_for(encoder)
    assert pair_encoder_for(encoder, batch_size=8) is not pair_encoder_for(encoder)
    assert pair_encoder_for(first) is first


def test_fbd_prd_on_dialogues(encoder):
    from dialfork_metrics import fbd, prd

    ref = [
        ["Hi, weather in Paris?", "Which day?", "Tomorrow.", "Sunny tomorrow.", "Thanks!", "Bye."],
        ["Forecast for Rome?", "For which day?", "Today.", "Rainy today.", "Ok.", "Goodbye."],
        ["Rain in Oslo?", "Which day would you like?", "Friday.", "No rain on Friday.", "Great.", "Bye!"],
    ]
    tgt = [
        ["Hi, weather in Paris?", "Want to try co-living?", "What?", "It's great.", "No.", "Sign up!"],
        ["Forecast for Rome?", "Join our loyalty plan?", "No.", "Are you sure?", "Yes.", "Ok."],
        ["Rain in Oslo?", "What is your name?", "Ann.", "Is your name Ann?", "Yes.", "Ann, right?"],
    ]
    det = fbd(ref, tgt, encoder, return_details=True)
    assert det["n_ref"] == 6 and det["n_tgt"] == 6 and det["pairing"] == "system_user" and det["fbd"] > 0
    assert fbd(ref, ref, encoder) == pytest.approx(0.0, abs=1e-6)
    sd = fbd(ref, tgt, encoder, compat="sdialog", return_details=True)
    assert sd["pairing"] == "sliding" and sd["n_ref"] == 15
    with pytest.raises(ValueError, match="compat='sdialog' pairs every turn"):
        fbd(ref, tgt, encoder, compat="sdialog", pairing="system_user")
    with pytest.raises(ValueError, match="target set: needs at least 2"):
        fbd(ref, [tgt[0][:3]], encoder)  # one (system, user) pair
    v = prd(ref, tgt, encoder, pairing="sliding", num_clusters=3, num_runs=2)
    assert 0.0 <= v <= 1.0
    assert prd(ref, ref, encoder, pairing="sliding", num_clusters=3, num_runs=2) == pytest.approx(
        0.0, abs=1e-9
    )


def test_pair_encoder_memory_is_bounded_and_its_bar_counts_pairs(encoder, monkeypatch):
    import tqdm.auto

    from dialfork_metrics.pair_encoder import PairEncoder

    bars = []

    class Recorder(tqdm.auto.tqdm):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            if kw.get("desc") == "pair embeddings":
                bars.append(self)

    monkeypatch.setattr(tqdm.auto, "tqdm", Recorder)
    a = [f"Which day would you like, option {i}?" for i in range(7)]
    b = [f"Tuesday number {i}." for i in range(7)]
    full = PairEncoder(encoder, batch_size=2, cache_dir=False, show_progress=True).encode_pairs(a, b)
    assert (
        len(bars) == 1 and bars[0].total == 7 and bars[0].n == 7 and bars[0].unit == "pair"
    )  # not 4 batches
    cap = 3 * (384 * 4 + 300)
    pe = PairEncoder(encoder, batch_size=2, cache_dir=False, memory_cache_bytes=cap)
    got = pe.encode_pairs(a, b)
    np.testing.assert_array_equal(got, full)  # same batches (sorted by length), same numbers
    assert 0 < len(pe._cache) <= 3 and pe._cache.nbytes <= cap
    again = pe.encode_pairs(a[-1:], b[-1:])  # the most recent pair is still cached
    assert pe.stats["encoded"] == 7 and pe.stats["memory_hits"] == 1
    np.testing.assert_array_equal(again[0], full[-1])
