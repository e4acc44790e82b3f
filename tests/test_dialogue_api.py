"""Task 2 at the dialogue level: input forms, batched == single, controls, quartets, bad input."""

from __future__ import annotations

import numpy as np
import pytest

import dialfork_metrics as dm
from dialfork_metrics import dialogue as DLG
from dialfork_metrics.encoders import get_encoder

REF = [
    "Hi, I want to book a doctor appointment.",
    "Sure. What is your name?",
    "Mark Smith.",
    "Which doctor would you like to see?",
    "Dr. Morgan, please.",
    "You are booked for Monday at 10.",
]
FORK = REF[:3] + [
    "Would you like to try our co-living apartments instead?",
    "No, a doctor!",
    "They come with a gym and a rooftop.",
]


def as_dicts(turns):
    return [{"speaker": "user" if i % 2 == 0 else "system", "text": t} for i, t in enumerate(turns)]


@pytest.fixture(scope="module")
def enc():
    e = get_encoder("minilm")  # shared with the other test modules: loaded once per session
    e.model  # noqa: B018
    return e


METHODS = ["flowscore", "flowdtw", "mean_turn", "full_dialog"]


@pytest.mark.parametrize("name", METHODS)
def test_identical_dialogues_give_zero(enc, name):
    fn = getattr(dm, name)
    assert fn(REF, REF, encoder=enc) == pytest.approx(0.0, abs=1e-7)
    assert fn(REF, FORK, encoder=enc) > 0.05


def test_input_forms_agree(enc):
    record = {"dialogue_id": "doctor-1", "turns": as_dicts(FORK)}
    for name in METHODS:
        fn = getattr(dm, name)
        base = fn(REF, FORK, encoder=enc)
        assert fn(as_dicts(REF), record, encoder=enc) == pytest.approx(base, abs=1e-12)


def test_turn_order(enc):
    shuffled = REF[::-1]
    assert dm.flowscore(REF, shuffled, encoder=enc) == pytest.approx(0.0, abs=1e-7)
    assert dm.flowdtw(REF, shuffled, encoder=enc) > 0.1


def test_matches_embedding_level(enc):
    Er, Ec = enc.encode(REF), enc.encode(FORK)
    assert dm.flowscore(REF, FORK, encoder=enc) == pytest.approx(
        dm.flowscore_from_embeddings(Er, Ec), abs=1e-9
    )
    assert dm.flowdtw(REF, FORK, encoder=enc) == pytest.approx(dm.flowdtw_from_embeddings(Er, Ec), abs=1e-9)
    assert dm.mean_turn(REF, FORK, encoder=enc) == pytest.approx(dm.mean_turn_distance(Er, Ec), abs=1e-9)
    T = enc.encode_transcripts([REF, FORK]).astype(np.float64)
    assert dm.full_dialog(REF, FORK, encoder=enc) == pytest.approx(1 - T[0] @ T[1], abs=1e-6)


def test_batched_equals_single_and_one_encoder_pass(enc):
    refs = [REF, REF, FORK, REF[:2]]
    cands = [FORK, REF, REF[::-1], FORK[:5]]
    fresh = dm.Encoder(enc.name, model=enc.model)
    res = DLG.score_pairs(refs, cands, encoder=fresh)
    n_unique_turns = len({t for d in refs + cands for t in d})
    n_unique_transcripts = len({"\n".join(d) for d in refs + cands})
    assert fresh.stats["encoded"] == n_unique_turns + n_unique_transcripts
    assert set(res) == set(DLG.ALL_METHODS)
    from dialfork_metrics import registry

    # every registered metric with a public function (a plug-in may register a core alone: score_pairs,
    # above, is then its one way in)
    public = [n for n in DLG.ALL_METHODS if registry.get(n, "pair").fn is not None]
    assert set(METHODS) <= set(public)
    for name in public:
        fn = registry.get(name, "pair").fn_callable()
        kw = {"encoder": enc} if name in METHODS else {}
        batched = fn(refs, cands, batched=True, **kw)
        assert isinstance(batched, np.ndarray) and batched.shape == (4,)
        # `fresh` encoded every text in one pass, `enc` (shared with the other test modules) in
        # whatever batches earlier tests formed: a text's embedding depends on its batch's padded
        # shape by ~1e-7 (the root cause of the flaky atol=1e-9), so distances agree to rtol 1e-5
        np.testing.assert_allclose(batched, res[name], rtol=1e-5, atol=1e-6)
        # the same encoder: cache hits, identical embeddings; only the distance code path differs
        np.testing.assert_allclose(batched, [fn(r, c, **kw) for r, c in zip(refs, cands)], rtol=0, atol=1e-9)


def test_controls_hand_worked():
    a = ["one two three", "four", "five six"]  # 6 words, 3 turns
    b = ["one two three", "four", "seven", "eight nine ten eleven"]  # 3+1+1+4 = 9 words, 4 turns
    assert dm.turn_count_diff(a, b) == 1.0
    assert dm.word_count_diff(a, b) == 3.0
    assert dm.shared_prefix(a, b) == -2.0
    assert dm.shared_prefix(a, a) == -3.0
    assert dm.turn_count_diff(a, a) == 0.0 and dm.word_count_diff(a, a) == 0.0
    # verbatim: same text but another speaker breaks the shared prefix
    c = [{"speaker": "system", "text": "one two three"}, {"speaker": "system", "text": "four"}]
    assert dm.shared_prefix(a, c) == 0.0
    assert dm.shared_prefix(a, ["one two three", "four "]) == -1.0  # a trailing space differs


def test_kendall_tau_order():
    assert DLG.kendall_tau_order([4, 3, 2, 1]) == pytest.approx(1.0)
    assert DLG.kendall_tau_order([1, 2, 3, 4]) == pytest.approx(-1.0)
    assert DLG.kendall_tau_order([2, 2, 2, 2]) == 0.0  # undefined -> 0 (SPEC 5)
    with pytest.raises(ValueError, match="NaN"):
        DLG.kendall_tau_order([1, np.nan, 2, 3])


def test_score_quartets_on_spliced_forks(enc):
    # fork k keeps the first p_k = 2k turns of the source and then diverges:
    # the shared-prefix control ranks them perfectly: d_k = -2k, so d_1 > d_2 > d_3 > d_4, tau = 1
    source = REF + ["Thanks!", "Bye."]
    src = {"dialogue_id": "doctor-1", "turns": as_dicts(source)}
    tail = ["Do you want a loyalty card?", "No.", "Please rate us.", "Fine.", "One more survey?", "No!", "Ok"]
    forks = {
        k: {"dialogue_id": f"doctor-1-GR-k{k}", "turns": as_dicts(source[: 2 * k] + tail[: 9 - 2 * k])}
        for k in (1, 2, 3, 4)
    }
    rows = DLG.score_quartets([{"source": src, "type": "GR", "forks": forks}], encoder=enc)
    assert len(rows) == 1 and rows[0]["source_id"] == "doctor-1" and rows[0]["type"] == "GR"
    assert rows[0]["distances"]["shared_prefix"] == [-2.0, -4.0, -6.0, -8.0]
    assert rows[0]["tau"]["shared_prefix"] == pytest.approx(1.0)
    assert all(len(v) == 4 for v in rows[0]["distances"].values())
    with pytest.raises(ValueError, match="unit 0"):
        DLG.score_quartets([{"source": src}])


# ------------------------------------------------------------------ bad input
def test_bad_inputs(enc):
    with pytest.raises(ValueError, match="reference: empty dialogue"):
        dm.flowscore([], REF, encoder=enc)
    with pytest.raises(ValueError, match="candidate: turn 1 is empty"):
        dm.flowdtw(REF, ["ok", "   "], encoder=enc)
    with pytest.raises(ValueError, match="turn 0 must be a string"):
        dm.mean_turn([3], REF, encoder=enc)
    with pytest.raises(ValueError, match="turn 0 text must be a string"):
        dm.full_dialog([{"speaker": "user", "text": None}], REF, encoder=enc)
    with pytest.raises(ValueError, match="unknown speaker 'bot'"):
        dm.turn_count_diff([{"speaker": "bot", "text": "hi"}], REF)
    with pytest.raises(ValueError, match=r"candidate 1 \('f-2'\): turn 0 is empty"):
        dm.flowscore([REF, REF], [REF, {"dialogue_id": "f-2", "turns": [""]}], encoder=enc, batched=True)
    with pytest.raises(ValueError, match="2 references but 1 candidates"):
        dm.flowscore([REF, REF], [REF], encoder=enc, batched=True)
    with pytest.raises(ValueError, match="pass batched=True"):
        dm.flowscore([REF, REF], [REF, FORK], encoder=enc)
    with pytest.raises(ValueError, match="must be a list of dialogues"):
        dm.word_count_diff("text", "text", batched=True)
    with pytest.raises(ValueError, match="unknown encoder 'nope'"):
        dm.flowscore(REF, REF, encoder="nope")
    with pytest.raises(ValueError, match="unknown Task 2 method"):
        DLG.score_pairs([REF], [REF], ["bleu"])


def test_datasets_rows_and_columns(enc):
    import datasets

    from dialfork_dataset.records import record_features

    feats = datasets.Features({"dialogue_id": datasets.Value("string"), "turns": record_features()["turns"]})
    ds = datasets.Dataset.from_list(
        [{"dialogue_id": "a", "turns": as_dicts(REF)}, {"dialogue_id": "b", "turns": as_dicts(FORK)}],
        features=feats,
    )
    expected = dm.flowscore([REF, REF], [REF, FORK], encoder=enc, batched=True)
    refs = datasets.Dataset.from_list([{"dialogue_id": "a", "turns": as_dicts(REF)}] * 2, features=feats)
    np.testing.assert_allclose(dm.flowscore(refs, ds, encoder=enc, batched=True), expected, atol=1e-12)
    np.testing.assert_allclose(
        dm.flowscore(refs["turns"], ds["turns"], encoder=enc, batched=True), expected, atol=1e-12
    )
    assert dm.flowdtw(ds[0], ds[1], encoder=enc) == pytest.approx(
        dm.flowdtw(REF, FORK, encoder=enc), abs=1e-12
    )
