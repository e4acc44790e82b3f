"""The learned step reader (issue 50): a tiny reader trains in seconds, saves and loads, refuses
corrupt, missing or other-encoder weights with the fix, never learns from STAR's human dialogues,
and gives probabilities in [0, 1]; the node assigner with ``reader=None`` is the assigner before."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import numpy as np
import pytest

from dialfork_metrics.task3.workflow.nodes import NodeAssigner
from dialfork_metrics.task3.workflow.reader import data as D
from dialfork_metrics.task3.workflow.reader.steps import (
    REBUILD_COMMAND,
    WEIGHTS_DIR,
    ReaderWeightsError,
    StepReader,
    encoder_fingerprint,
)

STAR = Path(os.environ.get("DIALFORK_STAR_DIR", Path(__file__).resolve().parents[2] / "shared" / "star"))


class WordHashEncoder:
    """Bag of hashed words, L2-normalised: deterministic stand-in embeddings, no model."""

    def __init__(self, dim: int = 64, salt: str = ""):
        self.dim, self.salt = dim, salt

    def _one(self, text: str) -> np.ndarray:
        v = np.zeros(self.dim)
        for w in re.findall(r"\w+", text.lower()):
            h = int.from_bytes(hashlib.blake2b((self.salt + w).encode(), digest_size=8).digest(), "little")
            v[h % self.dim] += 1.0 if (h >> 32) & 1 else -1.0
        v[0] += 1e-3
        return v / np.linalg.norm(v)

    def encode(self, texts, **_):
        return np.stack([self._one(t) for t in texts]).astype(np.float32)


STEPS = {
    "ask_city": ["Which city?", "What city are you in?"],
    "ask_day": ["Which day?", "For what day?"],
    "inform": ["It will be sunny.", "The forecast says rain."],
}
TURNS = [
    ("Tell me the city please", "ask_city"),
    ("In which city are you?", "ask_city"),
    ("What day would that be?", "ask_day"),
    ("Which day do you want?", "ask_day"),
    ("Sunny all day tomorrow.", "inform"),
    ("Expect rain later.", "inform"),
    ("Let me transfer you to billing.", None),
]


@pytest.fixture(scope="module")
def tiny():
    enc = WordHashEncoder()
    names = list(STEPS)
    flat = [(j, t) for j, n in enumerate(names) for t in STEPS[n]]
    P = enc.encode([t for _, t in flat])
    owners = np.array([j for j, _ in flat])
    E = enc.encode([t for t, _ in TURNS])
    targets = [[names.index(s)] if s else [] for _, s in TURNS]
    reader = StepReader(encoder="hash", epochs=30, lr=1e-2, batch_size=4, seed=0)
    reader.fit(
        E,
        {"weather": (P, owners, len(names))},
        ["weather"] * len(E),
        targets,
        fingerprint=encoder_fingerprint(enc),
    )
    reader.calibrate(np.array([0.2, 0.5, 0.9, 0.95]), np.array([0, 1, 1, 1]))
    return reader, enc, E, P, owners


def test_tiny_reader_trains_and_reads(tiny):
    reader, enc, E, P, owners = tiny
    pr = reader.predict_proba(E, P, owners, 3)
    assert pr.shape == (len(TURNS), 4)
    np.testing.assert_allclose(pr.sum(axis=1), 1.0, atol=1e-6)
    assert ((pr >= 0) & (pr <= 1)).all()
    names = list(STEPS) + [None]
    hits = [names[i] == s for i, (_, s) in zip(pr.argmax(axis=1), TURNS)]
    assert sum(hits) >= 5
    out = reader.read(STEPS, ["Which city is it?", "It will rain."], encoder=enc)
    assert [s for s, _ in out][:1] == ["ask_city"]
    assert all(0.0 <= p <= 1.0 for _, p in out)


def test_calibrated_probability_in_unit_interval(tiny):
    reader = tiny[0]
    c = reader.calibrated(np.array([-1.0, 0.0, 0.3, 0.97, 2.0]))
    assert ((c >= 0) & (c <= 1)).all()
    assert np.all(np.diff(reader.calibrated(np.linspace(0, 1, 11))) >= -1e-9)


def test_calibration_leaves_out_unread_turns(tiny):
    """A turn the assigner leaves unread (NaN probability) is not a calibration point: the fit of
    the rest is the same as without it (the rebuild command's held-out turns hold such turns)."""
    import copy

    a, b = copy.deepcopy(tiny[0]), copy.deepcopy(tiny[0])
    p, ok = np.array([0.2, 0.4, 0.6, 0.8, 0.9]), np.array([0, 0, 1, 1, 1])
    a.calibrate(np.append(p, np.nan), np.append(ok, 1))
    b.calibrate(p, ok)
    np.testing.assert_allclose(a.cal_x_, b.cal_x_)
    np.testing.assert_allclose(a.cal_y_, b.cal_y_)
    assert a.calibrated(np.array([0.1]))[0] == 0.0 and a.calibrated(np.array([0.95]))[0] == 1.0


def test_save_load_round_trip(tiny, tmp_path):
    reader, enc, E, P, owners = tiny
    reader.save_pretrained(tmp_path / "r")
    back = StepReader.from_pretrained(tmp_path / "r")
    np.testing.assert_allclose(
        back.predict_proba(E, P, owners, 3), reader.predict_proba(E, P, owners, 3), atol=2e-3
    )
    np.testing.assert_allclose(back.calibrated(np.array([0.6])), reader.calibrated(np.array([0.6])))
    back.check_encoder(enc)  # the same encoder passes


def _one_line(e: pytest.ExceptionInfo, name: str) -> None:
    msg = str(e.value)
    assert "\n" not in msg and name in msg and REBUILD_COMMAND in msg


def test_missing_and_corrupt_weights_refused(tiny, tmp_path):
    reader = tiny[0]
    folder = reader.save_pretrained(tmp_path / "r")
    (folder / "reader.npz").write_bytes(b"not a zip")
    with pytest.raises(ReaderWeightsError) as e:
        StepReader.from_pretrained(folder)
    _one_line(e, "reader.npz")
    # an edited file whose checksum was updated too is still refused (unreadable)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["sha256"] = hashlib.sha256(b"not a zip").hexdigest()
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ReaderWeightsError) as e:
        StepReader.from_pretrained(folder)
    _one_line(e, "reader.npz")
    (folder / "reader.npz").unlink()
    with pytest.raises(ReaderWeightsError) as e:
        StepReader.from_pretrained(folder)
    _one_line(e, "reader.npz")
    folder = reader.save_pretrained(tmp_path / "r2")
    (folder / "config.json").write_text("{")
    with pytest.raises(ReaderWeightsError) as e:
        StepReader.from_pretrained(folder)
    _one_line(e, "config.json")


def test_other_encoder_refused(tiny, tmp_path):
    reader = tiny[0]
    folder = reader.save_pretrained(tmp_path / "r")
    back = StepReader.from_pretrained(folder)
    with pytest.raises(ReaderWeightsError) as e:
        back.check_encoder(WordHashEncoder(salt="other"))
    _one_line(e, "reader.npz")
    assert not back.matches(WordHashEncoder(salt="other"))


class _Task:
    name = "weather"
    kinds = {n: "action" for n in STEPS}
    replies: dict = {}
    nlu = {n: v[1:] for n, v in STEPS.items()}

    def template(self, n):
        return STEPS[n][0]


def test_node_assigner_reader_none_is_cosine_and_reader_gives_prob(tiny):
    reader, enc = tiny[0], tiny[1]
    turns = ["Which city is it?", "For which day?", "Sunny today."]
    plain = NodeAssigner(enc, 0.0).fit({"weather": _Task()})
    before = plain.assign_texts("weather", turns)
    assert np.isnan(before.prob).all() and len(before.prob) == 3
    withr = NodeAssigner(enc, 0.0, reader=reader).fit({"weather": _Task()})
    after = withr.assign_texts("weather", turns)
    assert ((after.prob >= 0) & (after.prob <= 1)).all()
    np.testing.assert_allclose(after.own_similarity, before.own_similarity)
    assert all(n is None or n in STEPS for n in after.nodes)
    # a copy with examples keeps the reader
    assert withr.with_examples([]).reader_ is reader
    # an explicit reader for another encoder is refused with the fix
    with pytest.raises(ReaderWeightsError):
        NodeAssigner(WordHashEncoder(salt="other"), 0.0, reader=reader).fit({"weather": _Task()})


def test_default_training_refuses_human_turns():
    human = D.ReadingTurn("star-human", "weather", None, "star-1", 1, "Hi there", "hello")
    with pytest.raises(ValueError, match="human"):
        D.default_training_turns([], [human])


@pytest.mark.skipif(not (STAR / "tasks").is_dir(), reason="STAR not at hand")
def test_star_workflow_texts_never_read_human_dialogues(monkeypatch):
    from dialfork_dataset.star import StarCorpus

    def boom(self):
        raise AssertionError("the reader's training data read STAR's human dialogues")

    monkeypatch.setattr(StarCorpus, "human_dialogues", boom)
    rows = D.star_workflow_turns(StarCorpus(STAR))
    assert rows and {r.corpus for r in rows} == {"star-workflow"}
    assert all(r.dialogue_id is None for r in rows)
    train = D.default_training_turns([], rows)
    assert len(train) == len(rows)


def test_shipped_weights_small_and_loadable():
    size = sum(f.stat().st_size for f in WEIGHTS_DIR.iterdir() if f.is_file())
    assert size <= 10 * 2**20
    r = StepReader.from_pretrained(WEIGHTS_DIR)
    cfg = json.loads((WEIGHTS_DIR / "config.json").read_text())
    assert cfg["info"]["human_rows"] == 0 and cfg["encoder"] == "minilm"
    assert r.W_.shape == (cfg["dim"], cfg["dim"]) and r.fingerprint_ is not None
