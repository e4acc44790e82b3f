"""A shared tester for Task 2 (pair-level) metrics: every entry point gives the same numbers.

:class:`PairMetricTester` checks one registered metric (:mod:`dialfork_metrics.registry`):

* its public function on one pair == the same function batched == ``score_pairs`` == ``score_pairs``
  with every other metric in the same call (shared passes change nothing) == its ``evaluate``
  module, when it has one (``compute`` and ``add_batch`` + ``compute`` alike);
* turn strings, ``{speaker, text}`` dicts and records give the same values;
* a bad row is named in the error (its index and dialogue id).

:class:`BagOfWords` is a deterministic encoder (hashed word vectors), so no model is loaded.
``tests/test_pair_metrics.py`` runs the tester over every registered pair metric; a new metric is
tested by registering it.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from dialfork_metrics import registry
from dialfork_metrics.dialogue import score_pairs

REF = [
    "Hi, I want to book a doctor appointment.",
    "Sure. What is your name?",
    "Mark Smith.",
    "Which doctor would you like to see?",
    "Dr. Morgan, please.",
    "You are booked for Monday at 10.",
]
FORKS = [
    REF[:3]
    + ["Would you like to try our co-living apartments instead?", "No, a doctor!", "They have a gym."],
    REF[:1] + ["Our rooftop bar opens at six.", "What?"],
    REF[:5] + ["You are booked for Friday at 9.", "Thanks.", "Bye."],
    REF[::-1],
]
PAIRS = [(REF, REF)] + [(REF, f) for f in FORKS] + [(FORKS[0], FORKS[2])]


def as_dicts(turns: list[str]) -> list[dict[str, str]]:
    """Turn strings as ``{speaker, text}`` dicts (speakers alternate, user first)."""
    return [{"speaker": "user" if i % 2 == 0 else "system", "text": t} for i, t in enumerate(turns)]


def _word_vector(word: str, dim: int) -> np.ndarray:
    seed = int.from_bytes(hashlib.sha256(word.lower().strip(".,?!").encode()).digest()[:8], "little")
    return np.random.default_rng(seed).standard_normal(dim)


class BagOfWords:
    """A deterministic encoder: the unit sum of hashed word vectors, float32; the same vector for a
    text in any batch. Turns, dialogues and transcripts, as :class:`dialfork_metrics.Encoder`."""

    name = "bag-of-words"

    def __init__(self, dim: int = 16):
        self.dim = dim

    def encode(self, texts):
        E = np.stack([sum(_word_vector(w, self.dim) for w in t.split()) for t in texts])
        return (E / np.linalg.norm(E, axis=1, keepdims=True)).astype(np.float32)

    def encode_dialogues(self, dialogues, names=None):
        from dialfork_dataset.turns import turn_texts

        return [self.encode(turn_texts(d, names[i] if names else None)) for i, d in enumerate(dialogues)]

    def encode_transcripts(self, dialogues, names=None):
        from dialfork_dataset.turns import as_turns

        turns = [as_turns(d, names[i] if names else None) for i, d in enumerate(dialogues)]
        return self.encode(["\n".join(f"{t['speaker']}: {t['text']}" for t in d) for d in turns])


class PairMetricTester:
    """Checks one registered pair metric through every entry point.

    Args:
        name: The metric's registry name.
        encoder: The encoder of encoder-based metrics (default: a :class:`BagOfWords`).
        atol: Tolerance between entry points (they share the arithmetic: 1e-12 by default).
    """

    def __init__(self, name: str, encoder=None, atol: float = 1e-12):
        self.spec = registry.get(name, "pair")
        self.name = name
        self.encoder = encoder if encoder is not None else BagOfWords()
        self.atol = atol
        self.uses_encoder = "encoder" in self.spec.needs

    def _kw(self) -> dict:
        return {"encoder": self.encoder} if self.uses_encoder else {}

    def scores(self, refs, cands, methods=None) -> np.ndarray:
        """``score_pairs`` for this metric (or within ``methods``)."""
        return score_pairs(refs, cands, methods or [self.name], self.encoder)[self.name]

    def check_entry_points(self) -> np.ndarray:
        """Single pair == batched == ``score_pairs`` == ``score_pairs`` with all methods; finite."""
        refs, cands = [p[0] for p in PAIRS], [p[1] for p in PAIRS]
        base = self.scores(refs, cands)
        assert base.shape == (len(PAIRS),) and base.dtype == np.float64 and np.isfinite(base).all()
        np.testing.assert_allclose(
            self.scores(
                refs,
                cands,
                list(
                    registry.names("pair", inputs=("similarity", "turn_embeddings", "transcripts", "turns"))
                ),
            ),
            base,
            rtol=0,
            atol=self.atol,
        )
        if self.spec.fn is not None:
            fn = self.spec.fn_callable()
            single = [fn(r, c, **self._kw()) for r, c in PAIRS]
            assert all(isinstance(v, float) for v in single)
            np.testing.assert_allclose(single, base, rtol=0, atol=self.atol)
            np.testing.assert_allclose(
                fn(refs, cands, batched=True, **self._kw()), base, rtol=0, atol=self.atol
            )
        # the same pair scores the same in any batch (order, neighbours)
        np.testing.assert_allclose(self.scores(refs[::-1], cands[::-1])[::-1], base, rtol=0, atol=self.atol)
        return base

    def check_input_forms(self) -> None:
        """Turn strings == ``{speaker, text}`` dicts == records (with a ``dialogue_id``)."""
        refs, cands = [p[0] for p in PAIRS], [p[1] for p in PAIRS]
        base = self.scores(refs, cands)
        dicts = self.scores([as_dicts(r) for r in refs], [as_dicts(c) for c in cands])
        records = self.scores(
            [{"dialogue_id": f"r{i}", "turns": as_dicts(r)} for i, r in enumerate(refs)],
            [{"dialogue_id": f"c{i}", "turns": as_dicts(c)} for i, c in enumerate(cands)],
        )
        np.testing.assert_allclose(dicts, base, rtol=0, atol=self.atol)
        np.testing.assert_allclose(records, base, rtol=0, atol=self.atol)

    def check_bad_row_named(self) -> None:
        """An empty turn in candidate 2 (a record ``bad-one``) fails, naming the row and the id."""
        cands = [as_dicts(p[1]) for p in PAIRS]
        cands[2] = {"dialogue_id": "bad-one", "turns": as_dicts(["Hello.", ""])}
        refs = [p[0] for p in PAIRS]
        with pytest.raises(ValueError, match=r"candidate 2 \('bad-one'\)"):
            self.scores(refs, cands)
        if self.spec.fn is not None:
            with pytest.raises(ValueError, match=r"candidate 2 \('bad-one'\)"):
                self.spec.fn_callable()(refs, cands, batched=True, **self._kw())

    def check_evaluate_module(self) -> None:
        """The metric's ``evaluate`` module: ``compute`` == ``score_pairs``, per pair and mean;
        ``add_batch`` twice then ``compute`` == one ``compute``."""
        import dialfork_metrics

        module = dialfork_metrics.load(self.spec.module, encoder=self.encoder)
        refs, cands = [p[0] for p in PAIRS], [p[1] for p in PAIRS]
        base = self.scores(refs, cands)
        out = module.compute(predictions=cands, references=refs)
        np.testing.assert_allclose(out["scores"], base, rtol=0, atol=self.atol)
        assert out[self.spec.module] == pytest.approx(float(base.mean()), abs=1e-12)
        module.add_batch(predictions=cands[:3], references=refs[:3])
        module.add_batch(predictions=cands[3:], references=refs[3:])
        np.testing.assert_allclose(module.compute()["scores"], base, rtol=0, atol=self.atol)
