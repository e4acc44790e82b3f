"""The slot reader: which slots a user turn gives, and their values (issue 50, the user-turn half).

Given a task's slots (:class:`SlotInfo`: name, description, value type, example values) and the
system turn before it, :class:`SlotReader` says which slots a user turn gives. It is task-agnostic:
it reads an unseen service from its slot names, descriptions and example values. One binary
decision per (slot, user turn) pair, by a small perceptron (32 hidden units) over the cosines of the
frozen packaged MiniLM's embeddings of the slot's text, the user turn and the previous system turn (and
how far each slot leads the task's other slots) and cheap cues (whether the previous system turn asked
for the slot, whether a known value of the slot, or one it shares with another slot, or a value of its
type occurs in the turn, the words of the slot's name in either turn). Its probability (held-out ECE
0.02) is the sureness a rule can gate on.

Values (:meth:`SlotReader.read`): a categorical slot's matched category (in the user turn, else in the
system turn the user answers); a boolean slot ``"True"``/``"False"``; a date, time, number or
name slot the value its type's pattern finds (:data:`~dialfork_metrics.task3.workflow.state.PATTERNS`);
else (free text: symptoms, a message) the user turn itself. A slot of a checkable type
(:data:`CHECKED_TYPES`: a categorical slot with categories, a date, time, weekday or number) with
no value in the turn is not given, whatever the classifier says.

``WorkflowDetector`` reads with it by default (``slot_reader="auto"``). A read encodes the user turn
alone: the reader holds the slot texts it has encoded and the system turns its caller has
(:meth:`SlotReader.remember`; the guard hands over each system turn's embedding), in a bounded
:class:`TextMemo`.

Training data (:func:`sgd_user_turns`): the user turns of ``../shared/sgd``; the slots a turn gives
are those of its ``INFORM`` acts, with their values. Never STAR's human dialogues (a test checks).
SGD's state also changes on a turn that accepts a system offer or confirmation ("Yes, that one");
those slots come from the system turn, which the tracker reads as an *offered* fill, so they are
not the reader's gold (``benchmarks/bench_slot_reader.py`` reports both).

Weights: ``weights/slots/`` beside this module (``config.json`` and ``weights.npz``, no pickle).
Rebuild them (seeded; about three minutes on two busy cores once MiniLM has embedded SGD's 21,000
texts, which takes 5 to 15 minutes more on a cold cache)::

    python -m dialfork_metrics.task3.workflow.reader.slots train --sgd ../shared/sgd \\
        --out dialfork_metrics/task3/workflow/reader/weights/slots

A missing or corrupt weights file, or weights made for another encoder, is refused with one line
that names the file and this command; the reader never falls back to anything else.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import math
import re
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

FORMAT = "dialfork-slot-reader/1"
"""The weights' format (``config.json``'s ``format``)."""
WEIGHTS_DIR = Path(__file__).with_name("weights") / "slots"
"""The shipped weights' folder."""
REBUILD = (
    "python -m dialfork_metrics.task3.workflow.reader.slots train --sgd ../shared/sgd "
    "--out dialfork_metrics/task3/workflow/reader/weights/slots"
)
"""The seeded command that rebuilds the shipped weights."""
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "weights.npz"
PROBE = "I would like to book a table for two at seven tomorrow evening."
"""The sentence whose embedding fingerprints the encoder the weights were made for."""
TYPES: tuple[str, ...] = ("categorical", "weekday", "time", "date", "number", "name", "boolean", "text")
"""The value types of :func:`~dialfork_dataset.workflow.roles.value_type`."""
PATTERN_TYPES: tuple[str, ...] = ("weekday", "time", "date", "number", "name")
DEFAULT_HIDDEN = 32
"""Units of the perceptron's hidden layer (ours; 32 against a logistic regression on the held-out
folds: benchmarks/results/slot_reader.md)."""
DEFAULT_THRESHOLD = 0.5
"""A slot is given when its probability reaches this (ours; the model's own calibrated cut)."""
_YES = re.compile(r"\b(yes|yeah|yep|sure|ok|okay|correct|right|great|perfect|sounds good)\b", re.I)
_NO = re.compile(r"\b(no|not|nope|without|don'?t|doesn'?t|isn'?t|wrong)\b", re.I)
_DIGIT_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
_PROPER = re.compile(r"(?<=[a-z,] )(?!I\b)[A-Z][\w'&.-]*")
"""A capitalised word inside a sentence: a name, a title, a place (a free-text value)."""
_STOP = frozenset("the a an of for in on at by is be and or with your you user's user which what".split())


class SlotReaderError(ValueError):
    """The reader's weights are missing, malformed or made for another encoder (one line, with the fix)."""


@dataclass(frozen=True)
class SlotInfo:
    """One slot of a task, as the reader sees it.

    Attributes:
        name: The slot's name (``appointment_date``).
        description: What it holds, in words (empty: the name's words are used).
        value_type: One of :data:`TYPES`.
        values: Known values (a categorical slot's categories, example values); may be empty.
    """

    name: str
    description: str = ""
    value_type: str = "text"
    values: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        """The text the encoder reads for the slot: its name's words and its description."""
        words = " ".join(w for w in re.split(r"[_\W]+", self.name) if w)
        return f"{words}: {self.description}" if self.description else words


@dataclass(frozen=True)
class UserTurn:
    """A user turn to read, with what the reader may know of its context.

    Attributes:
        text: The user turn.
        prev_system: The system turn before it ("" at the start).
        asked: The slots the previous system turn asked for, when known (None: unknown).
        service: The task or service (for grouping; not read by the model).
        given: Gold: slot -> value (training and evaluation only).
        dialogue_id: Where the turn comes from (``"sgd:<id>"``).
        turn: Its 0-based index in the dialogue.
        changed: Slots whose value SGD's dialogue state set or changed after the turn (a wider gold:
            it also holds slots taken from a system offer or confirmation).
    """

    text: str
    prev_system: str = ""
    asked: tuple[str, ...] | None = None
    service: str = ""
    given: Mapping[str, str] = field(default_factory=dict)
    dialogue_id: str = ""
    turn: int = 0
    changed: tuple[str, ...] = ()


# ----------------------------------------------------------------------------- SGD data
def _sgd_value_type(slot: Mapping[str, Any]) -> str:
    from dialfork_dataset.workflow.roles import value_type

    vals = list(slot.get("possible_values") or ())
    if {str(v).lower() for v in vals} == {"true", "false"}:
        return "boolean"
    typ = "Categorical" if slot.get("is_categorical") and vals else "String"
    return value_type(slot["name"], {"Name": slot["name"], "Type": typ, "Categories": vals})


def sgd_slot_infos(schema: Mapping[str, Mapping[str, Any]]) -> dict[str, list[SlotInfo]]:
    """Service -> the slots a user may give (those of its intents' required and optional slots).

    Args:
        schema: Service name -> its SGD schema (:attr:`~dialfork_dataset.tracks.sgd.SgdCorpus.schema`).

    Returns:
        dict[str, list[SlotInfo]]: The slots, in schema order, with descriptions, value types and
        categories.
    """
    out: dict[str, list[SlotInfo]] = {}
    for service, sch in schema.items():
        informable: set[str] = set()
        for i in sch.get("intents", ()):
            informable |= set(i.get("required_slots") or ()) | set(i.get("optional_slots") or ())
        out[service] = [
            SlotInfo(
                s["name"],
                str(s.get("description") or ""),
                _sgd_value_type(s),
                tuple(str(v) for v in s.get("possible_values") or ()),
            )
            for s in sch.get("slots", ())
            if s["name"] in informable
        ]
    return out


def sgd_user_turns(sgd: str | Any = None, services: Iterable[str] | None = None) -> list[UserTurn]:
    """The user turns of an SGD folder, each with its previous system turn, the slots that turn
    asked for (its ``REQUEST`` acts) and the gold slots given (its ``INFORM`` acts, with values).

    Args:
        sgd: The SGD folder (``../shared/sgd``) or an opened
            :class:`~dialfork_dataset.tracks.sgd.SgdCorpus`; None: the default folder.
        services: Keep only dialogues of these services (None: all).

    Returns:
        list[UserTurn]: In file order; ``dialogue_id`` is ``"sgd:<SGD id>"``.

    Raises:
        SgdError: The folder is missing or malformed.
    """
    from dialfork_dataset.tracks.sgd import read_sgd

    corpus = sgd if hasattr(sgd, "dialogues") else read_sgd(sgd)
    keep = set(services) if services is not None else None
    out: list[UserTurn] = []
    for d in corpus.dialogues():
        svcs = d.get("services") or []
        if len(svcs) != 1 or (keep is not None and svcs[0] not in keep):
            continue
        prev_text, asked, state = "", (), {}
        for i, t in enumerate(d["turns"]):
            frames = [f for f in t.get("frames", ()) if f.get("service") == svcs[0]]
            acts = [a for f in frames for a in f.get("actions", ())]
            text = str(t.get("utterance") or "").strip()
            if t.get("speaker") == "SYSTEM":
                prev_text = text
                asked = tuple(dict.fromkeys(a["slot"] for a in acts if a.get("act") == "REQUEST"))
                continue
            given: dict[str, str] = {}
            for a in acts:
                if a.get("act") == "INFORM" and a.get("slot"):
                    vals = [str(v) for v in a.get("values") or ()]
                    low = text.lower()
                    given[a["slot"]] = next((v for v in vals if v.lower() in low), vals[0] if vals else "")
            new = {k: v for f in frames for k, v in ((f.get("state") or {}).get("slot_values") or {}).items()}
            changed = tuple(k for k, v in new.items() if state.get(k) != v)
            state = new
            out.append(
                UserTurn(text, prev_text, asked, svcs[0], given, f"sgd:{d['dialogue_id']}", i, changed)
            )
            prev_text, asked = "", ()
    return out


# ----------------------------------------------------------------------------- cues
def _norm(text: str) -> str:
    return " " + re.sub(r"[^a-z0-9]+", " ", text.lower()).strip() + " "


def _find_value(text: str, slot: SlotInfo) -> str | None:
    """The known value of ``slot`` that ``text`` names (longest form first), or None."""
    from dialfork_metrics.task3.workflow.state import _value_forms

    if slot.value_type == "boolean":
        return None
    low = _norm(text)
    best: tuple[int, str] | None = None
    for v in slot.values:
        forms = _value_forms(v)
        if v.strip().isdigit() and int(v) < len(_DIGIT_WORDS):  # "1" is also "one" (and too short a form)
            forms = [f" {v.strip()} ", f" {_DIGIT_WORDS[int(v)]} "]
        for form in forms:
            if form in low and (best is None or len(form) > best[0]):
                best = (len(form), v)
    return best[1] if best else None


def _pattern_hit(text: str, typ: str) -> str | None:
    from dialfork_metrics.task3.workflow.state import PATTERNS, _without

    if typ not in PATTERNS or not text:
        return None
    hay = _without(text, ("time", "date")) if typ == "number" else text
    m = PATTERNS[typ].search(hay)
    return m.group(0).strip() if m else None


def _content_words(text: str) -> set[str]:
    """The text's words but stop words, cut to five letters ("directed" and "director" meet)."""
    return {w[:5] for w in _norm(text).split() if w not in _STOP and len(w) > 1}


def _overlap(words: set[str], text: str) -> float:
    return len(words & _content_words(text)) / len(words) if words else 0.0


N_CUES = 21 + len(TYPES)
N_SIMS = 5
"""The cosine columns: three cosines and two leads over the task's other slots."""


N_FEATURES = N_SIMS + 1 + N_CUES
"""Columns of :func:`pair_features`."""


def _best_other(x: np.ndarray) -> np.ndarray:
    """For each entry, the largest of the others (0 for a single entry)."""
    if len(x) < 2:
        return np.zeros_like(x)
    top = np.argsort(x)[::-1]
    out = np.full_like(x, x[top[0]])
    out[top[0]] = x[top[1]]
    return out


def _cues(
    turn: UserTurn,
    slot: SlotInfo,
    user_hits: Mapping[str, bool],
    prev_hits: Mapping[str, bool],
    found: Mapping[str, str | None],
) -> list[float]:
    """The hand cues of one (turn, slot) pair; ``found``: each slot of the task -> its known value in
    the user turn (a value two slots share, "savings", goes to the one asked)."""
    typ = slot.value_type if slot.value_type in TYPES else "text"
    asked_known = turn.asked is not None
    asked = asked_known and slot.name in (turn.asked or ())
    other_asked = asked_known and bool(turn.asked) and not asked
    words = _content_words(slot.name.replace("_", " "))
    mine = found.get(slot.name)
    sharing = [
        n
        for n, v in found.items()
        if n != slot.name and mine is not None and v is not None and _norm(v) == _norm(mine)
    ]
    return [
        float(asked),
        float(asked_known),
        float(other_asked),
        float(mine is not None),
        float(bool(sharing)),
        float(any(n in (turn.asked or ()) for n in sharing)),
        float(_find_value(turn.prev_system, slot) is not None),
        float(user_hits.get(typ, False)),
        float(prev_hits.get(typ, False)),
        *(float(user_hits.get(t, False)) for t in PATTERN_TYPES),
        _overlap(words, turn.text),
        _overlap(words, turn.prev_system),
        math.log1p(len(turn.text.split())),
        float(bool(turn.prev_system)),
        float(bool(_YES.search(turn.text))),
        float(bool(_NO.search(turn.text))),
        float(bool(_PROPER.search(turn.text))),
        *(float(typ == t) for t in TYPES),
    ]


# ----------------------------------------------------------------------------- features
def _encode(encoder: Any, texts: Sequence[str], memo: TextMemo | None = None) -> dict[str, np.ndarray]:
    """Each distinct non-blank text's embedding: from ``memo`` where it has it, the rest in one
    encoder call."""
    uniq = [t for t in dict.fromkeys(texts) if t.strip()]
    held = {t: memo.get(t) for t in uniq} if memo is not None else {}
    out = {t: v for t, v in held.items() if v is not None}
    new = [t for t in uniq if t not in out]
    if new:
        out.update(zip(new, np.asarray(encoder.encode(new), dtype=np.float32)))
    return out


class TextMemo:
    """Embeddings the reader holds itself, least recently used dropped past ``max_texts``: the slot
    texts (constants of a workflow, encoded once) and the system turns the caller already encoded
    (:meth:`SlotReader.remember`), so that reading a user turn encodes that turn alone. Safe to share
    between threads (one lock around each lookup and insertion).

    Args:
        max_texts: The most texts held.
    """

    def __init__(self, max_texts: int = 4096):
        self.max_texts = int(max_texts)
        self._rows: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, key: object) -> bool:
        return key in self._rows

    def __iter__(self):
        with self._lock:
            return iter(list(self._rows))

    def get(self, key: str) -> np.ndarray | None:
        """``key``'s embedding (it becomes the most recently used), or None.

        Args:
            key: The text.

        Returns:
            np.ndarray | None: The float32 embedding.
        """
        with self._lock:
            value = self._rows.get(key)
            if value is not None:
                self._rows.move_to_end(key)
            return value

    def put(self, key: str, value: np.ndarray) -> None:
        """Hold ``key``'s embedding (float32), dropping the least recently used past the bound.

        Args:
            key: The text.
            value: Its embedding.
        """
        row = np.asarray(value, dtype=np.float32)
        with self._lock:
            self._rows[key] = row
            self._rows.move_to_end(key)
            while len(self._rows) > self.max_texts:
                self._rows.popitem(last=False)


def pair_features(
    encoder: Any,
    turns: Sequence[UserTurn],
    slots_of: Mapping[str, Sequence[SlotInfo]] | Sequence[Sequence[SlotInfo]],
    memo: TextMemo | None = None,
) -> tuple[np.ndarray, list[tuple[int, SlotInfo]]]:
    """The feature rows of every (turn, slot) pair.

    Args:
        encoder: An object with ``encode(texts) -> (n, d)`` L2-normalised rows (the packaged MiniLM).
        turns: The user turns.
        slots_of: Service -> its slots (read by each turn's ``service``), or one slot list per turn.
        memo: Embeddings held beside the encoder's cache (:class:`TextMemo`): read first; the slot
            texts encoded here are put in it.

    Returns:
        ``(X, pairs)``: float32 rows of :data:`N_FEATURES` (the cosines of the slot ``s``, the user
        turn ``u`` and the previous system turn ``p``: ``s.u``, ``s.p``, ``u.p``; the leads of ``s.u``
        and ``s.p`` over the task's other slots; the log count of the task's slots of the same type;
        the cues) and the ``(turn index, slot)`` of each row.
    """
    per_turn = [
        list(slots_of[i]) if not isinstance(slots_of, Mapping) else list(slots_of.get(t.service, ()))
        for i, t in enumerate(turns)
    ]
    slot_texts = [s.text for ss in per_turn for s in ss]
    emb = _encode(encoder, [t.text for t in turns] + [t.prev_system for t in turns] + slot_texts, memo)
    if memo is not None:
        for t in dict.fromkeys(slot_texts):
            if t in emb and t not in memo:
                memo.put(t, emb[t])
    dim = len(next(iter(emb.values()))) if emb else 1
    zero = np.zeros(dim, dtype=np.float32)
    pairs: list[tuple[int, SlotInfo]] = []
    rows: list[np.ndarray] = []
    for i, (t, ss) in enumerate(zip(turns, per_turn)):
        if not ss:
            continue
        u = emb.get(t.text, zero)
        p = emb.get(t.prev_system, zero)
        uh = {typ: _pattern_hit(t.text, typ) is not None for typ in PATTERN_TYPES}
        ph = {typ: _pattern_hit(t.prev_system, typ) is not None for typ in PATTERN_TYPES}
        S = np.stack([emb.get(s.text, zero) for s in ss])
        found = {s.name: _find_value(t.text, s) for s in ss}
        cues = np.array([_cues(t, s, uh, ph, found) for s in ss], dtype=np.float32)
        su, sp = S @ u, S @ p
        sims = np.stack(
            [
                su,
                sp,
                np.full(len(ss), float(u @ p), dtype=np.float32),
                su - _best_other(su),
                sp - _best_other(sp),
            ],
            axis=1,
        )
        types = [s.value_type for s in ss]
        same = np.array([[math.log(types.count(typ))] for typ in types], dtype=np.float32)
        rows.append(np.hstack([sims, same, cues]).astype(np.float32))
        pairs.extend((i, s) for s in ss)
    X = np.vstack(rows) if rows else np.zeros((0, N_FEATURES), dtype=np.float32)
    return X, pairs


def training_rows(
    encoder: Any, turns: Sequence[UserTurn], slots_of: Mapping[str, Sequence[SlotInfo]]
) -> tuple[np.ndarray, np.ndarray]:
    """The training rows of :meth:`SlotReader.fit`: every turn with its asked slots, then without.

    Args:
        encoder: The encoder.
        turns: Labelled user turns.
        slots_of: Service -> its slots.

    Returns:
        ``(X, y)``: feature rows and 0/1 labels.
    """
    import dataclasses

    Xk, pairs = pair_features(encoder, turns, slots_of)
    blind = [dataclasses.replace(t, asked=None) for t in turns]
    Xu, _ = pair_features(encoder, blind, slots_of)
    y = np.array([s.name in turns[i].given for i, s in pairs], dtype=np.int64)
    return np.vstack([Xk, Xu]), np.concatenate([y, y])


#: Value types whose value can be checked in the text: a turn the classifier says gives such a slot
#: gives it only when its value is there (a category, a date, a time, a weekday, a number). On
#: STAR's template doctor dialogues the classifier alone read "Sorry, I got distracted for a
#: second." after "What doctor would you like to see?" as giving the doctor.
CHECKED_TYPES = frozenset({"categorical", "weekday", "time", "date", "number"})


def _value_for(turn: UserTurn, slot: SlotInfo) -> str | None:
    """The value a turn gives for a slot the classifier says it gives (see the module doc); None
    when the slot's type is checkable (:data:`CHECKED_TYPES`) and no value of it is in the turn."""
    v = _find_value(turn.text, slot)
    if v is not None:
        return v
    if slot.value_type == "boolean":
        return "False" if _NO.search(turn.text) else "True"
    hit = _pattern_hit(turn.text, slot.value_type)
    if hit is not None:
        return hit
    v = _find_value(turn.prev_system, slot)
    if v is not None:
        return v
    if slot.value_type in CHECKED_TYPES and (slot.values or slot.value_type != "categorical"):
        return None
    return turn.text.strip()


def _encoder_id(encoder: Any, name: Any) -> str:
    from dialfork_metrics.encoders.names import portable_encoder_id

    if isinstance(name, str):
        return portable_encoder_id(name)
    mid = getattr(encoder, "model_id", None)
    if isinstance(mid, str):
        return portable_encoder_id(mid)
    return f"object:{type(encoder).__module__}.{type(encoder).__qualname__}"


def _fingerprint(encoder: Any, name: Any) -> dict[str, Any]:
    probe = np.asarray(encoder.encode([PROBE]), dtype=np.float64)[0]
    return {
        "encoder": _encoder_id(encoder, name),
        "dim": int(probe.shape[0]),
        "probe": probe[:16].round(5).tolist(),
    }


# ----------------------------------------------------------------------------- the reader
class SlotReader:
    """Which slots a user turn gives, and their values (see the module doc).

    The model is a one-hidden-layer perceptron (ReLU, logistic output) over the standardised
    :func:`pair_features`, kept as plain arrays (``weights.npz``, no pickle).

    Args:
        arrays: ``mean``, ``scale``, ``w1``, ``b1``, ``w2``, ``b2``.
        fingerprint: The encoder the weights were made for (``encoder``, ``dim``, ``probe``).
        encoder: The encoder object (None: loaded from ``fingerprint`` on first use).
        threshold: A slot is given at or above this probability.
        meta: What made the weights (sources, dialogue ids' digest, counts, seed).
    """

    ARRAYS = ("mean", "scale", "w1", "b1", "w2", "b2")

    def __init__(
        self,
        arrays: Mapping[str, np.ndarray],
        fingerprint: Mapping[str, Any],
        encoder: Any = None,
        threshold: float = DEFAULT_THRESHOLD,
        meta: Mapping[str, Any] | None = None,
    ):
        self.arrays = {k: np.asarray(arrays[k], dtype=np.float64) for k in self.ARRAYS}
        self.fingerprint = dict(fingerprint)
        self._encoder = encoder
        self.threshold = float(threshold)
        self.meta = dict(meta or {})
        self.memo = TextMemo()

    def remember(self, text: str, embedding: np.ndarray) -> None:
        """Hold a text's embedding that the caller computed with this reader's encoder (a system
        turn the guard just encoded), so that reading the user turn that answers it does not
        encode it again.

        Args:
            text: The text.
            embedding: Its L2-normalised embedding, shape ``(dim,)``.

        Raises:
            ValueError: ``embedding`` is not a vector of the reader's dimension.
        """
        e = np.asarray(embedding, dtype=np.float32).reshape(-1)
        if e.shape[0] != int(self.fingerprint.get("dim", e.shape[0])):
            raise ValueError(
                f"embedding of dimension {e.shape[0]} for a slot reader made for dimension "
                f"{self.fingerprint.get('dim')} ({self.fingerprint.get('encoder')})"
            )
        if text.strip():
            self.memo.put(text, e)

    def __repr__(self) -> str:
        return f"SlotReader(encoder={self.fingerprint.get('encoder')!r}, hidden={self.arrays['b1'].size})"

    @property
    def encoder(self) -> Any:
        """The encoder (the fingerprint's, loaded on first use)."""
        if self._encoder is None:
            from dialfork_metrics.encoders import get_encoder

            self._encoder = get_encoder(_hub_to_alias(self.fingerprint["encoder"]))
        return self._encoder

    # ------------------------------------------------------------------ training
    @staticmethod
    def train_arrays(
        X: np.ndarray, y: np.ndarray, seed: int = 0, hidden: int = DEFAULT_HIDDEN
    ) -> dict[str, np.ndarray]:
        """Fit the perceptron on feature rows (the benchmark's folds call this on cached features).

        Args:
            X: Rows of :func:`pair_features`.
            y: 1 where the turn gives the slot.
            seed: The initialisation's and the early-stopping split's seed.
            hidden: Units of the hidden layer.

        Returns:
            dict[str, np.ndarray]: The arrays of :attr:`ARRAYS`.

        Raises:
            ValueError: No rows, or one class only.
        """
        from sklearn.neural_network import MLPClassifier

        y = np.asarray(y, dtype=np.int64)
        if len(y) == 0 or len(set(y.tolist())) < 2:
            raise ValueError(
                f"cannot train a slot reader on {len(y)} (turn, slot) pairs with labels {set(y.tolist())}"
            )
        mean = X.mean(axis=0, dtype=np.float64)
        scale = X.std(axis=0, dtype=np.float64)
        scale[scale < 1e-6] = 1.0
        clf = MLPClassifier(
            hidden_layer_sizes=(hidden,),
            alpha=1e-3,
            early_stopping=len(y) >= 200,
            random_state=seed,
            max_iter=300,
        )
        import warnings

        from sklearn.exceptions import ConvergenceWarning

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)  # early stopping or max_iter ends it
            clf.fit((X - mean) / scale, y)
        return {
            "mean": mean,
            "scale": scale,
            "w1": clf.coefs_[0],
            "b1": clf.intercepts_[0],
            "w2": clf.coefs_[1][:, 0],
            "b2": clf.intercepts_[1],
        }

    @classmethod
    def fit(
        cls,
        turns: Sequence[UserTurn],
        slots_of: Mapping[str, Sequence[SlotInfo]],
        encoder: Any = "minilm",
        seed: int = 0,
        hidden: int = DEFAULT_HIDDEN,
        meta: Mapping[str, Any] | None = None,
    ) -> SlotReader:
        """Train a reader on labelled user turns.

        Every turn is read twice: with the slots its system turn asked for (as the tracker knows
        them) and without (``asked=None``: the reader reads the question from the text).

        Args:
            turns: User turns with gold ``given`` and ``service`` (:func:`sgd_user_turns`).
            slots_of: Service -> its slots (:func:`sgd_slot_infos`).
            encoder: An encoder name (``"minilm"``) or an object with ``encode``.
            seed: The seed.
            hidden: Units of the hidden layer.
            meta: Extra provenance stored with the weights.

        Returns:
            SlotReader: The trained reader.

        Raises:
            ValueError: No (turn, slot) pair, or only one class among them.
        """
        from dialfork_metrics.encoders import get_encoder

        enc = get_encoder(encoder)
        X, y = training_rows(enc, turns, slots_of)
        ids = sorted({t.dialogue_id for t in turns})
        info = {
            "sources": sorted({t.dialogue_id.split(":", 1)[0] for t in turns}),
            "services": sorted({t.service for t in turns}),
            "n_turns": len(turns),
            "n_pairs": int(len(y)),
            "n_given": int(y.sum()),
            "dialogue_ids_sha256": hashlib.sha256("\n".join(ids).encode()).hexdigest(),
            "seed": seed,
            "hidden": hidden,
            **dict(meta or {}),
        }
        arrays = cls.train_arrays(X, y, seed, hidden)
        return cls(arrays, _fingerprint(enc, encoder), enc, meta=info)

    # ------------------------------------------------------------------ reading
    def proba(self, X: np.ndarray) -> np.ndarray:
        """The probability of each feature row (a pair's slot is given).

        Args:
            X: Rows of :func:`pair_features`.

        Returns:
            np.ndarray: One probability per row.

        Raises:
            SlotReaderError: The rows do not have the weights' width.
        """
        a = self.arrays
        if X.shape[1] != a["mean"].size:
            raise SlotReaderError(
                f"the slot reader's weights expect {a['mean'].size} features, not {X.shape[1]}: "
                f"rebuild them: {REBUILD}"
            )
        h = np.maximum(((X - a["mean"]) / a["scale"]) @ a["w1"] + a["b1"], 0.0)
        z = h @ a["w2"] + a["b2"][0]
        return 1.0 / (1.0 + np.exp(-np.clip(z, -50, 50)))

    def scores_batch(
        self, turns: Sequence[UserTurn], slots: Sequence[SlotInfo] | Sequence[Sequence[SlotInfo]]
    ) -> list[dict[str, float]]:
        """The probability that each turn gives each slot.

        Args:
            turns: The user turns.
            slots: One slot list for all turns, or one per turn.

        Returns:
            list[dict[str, float]]: Per turn, slot -> probability.
        """
        per = (
            [list(slots)] * len(turns)
            if not slots or isinstance(slots[0], SlotInfo)
            else [list(s) for s in slots]
        )
        X, pairs = pair_features(self.encoder, turns, per, self.memo)
        p = self.proba(X) if len(pairs) else np.zeros(0)
        out: list[dict[str, float]] = [{} for _ in turns]
        for (i, s), q in zip(pairs, p):
            out[i][s.name] = float(q)
        return out

    def read_batch(
        self, turns: Sequence[UserTurn], slots: Sequence[SlotInfo] | Sequence[Sequence[SlotInfo]]
    ) -> list[dict[str, str]]:
        """:meth:`read` for many turns at once (one encoder call).

        Args:
            turns: The user turns (:class:`UserTurn`: text, previous system turn, asked slots).
            slots: One slot list for all turns, or one per turn.

        Returns:
            list[dict[str, str]]: Per turn, slot -> value, for the slots given.
        """
        per = (
            [list(slots)] * len(turns)
            if not slots or isinstance(slots[0], SlotInfo)
            else [list(s) for s in slots]
        )
        out = []
        for t, ss, sc in zip(turns, per, self.scores_batch(turns, per)):
            by = {s.name: s for s in ss}
            vals = {n: _value_for(t, by[n]) for n, q in sc.items() if q >= self.threshold}
            out.append({n: v for n, v in vals.items() if v is not None})
        return out

    def read(
        self,
        text: str,
        slots: Sequence[SlotInfo],
        prev_system: str | None = None,
        asked: Sequence[str] | None = None,
    ) -> dict[str, str]:
        """The slots one user turn gives, with their values.

        Args:
            text: The user turn.
            slots: The task's slots.
            prev_system: The system turn before it (None: none).
            asked: The slots that system turn asked for, when the caller knows them (None: unknown;
                the reader then reads the question from ``prev_system``'s text).

        Returns:
            dict[str, str]: Slot -> value.

        Example:
            >>> r = SlotReader.from_pretrained()  # doctest: +SKIP
            >>> r.read("Next Friday, please.", [SlotInfo("date", "Day of the appointment", "date")],
            ...        "What day would you like?")  # doctest: +SKIP
            {'date': 'Friday'}
        """
        turn = UserTurn(text, prev_system or "", None if asked is None else tuple(asked))
        return self.read_batch([turn], list(slots))[0]

    # ------------------------------------------------------------------ saving
    def save_pretrained(self, folder: str | Path) -> Path:
        """Write ``config.json`` and ``weights.npz`` (no pickle) into ``folder``, atomically.

        Args:
            folder: The folder (created).

        Returns:
            Path: The folder.
        """
        import io

        from dialfork_dataset.atomic import write_bytes_atomic, write_json_atomic

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        buf = io.BytesIO()
        np.savez_compressed(
            buf,
            **{k: v.astype(np.float32) for k, v in self.arrays.items()},
        )
        data = buf.getvalue()
        write_bytes_atomic(folder / WEIGHTS_FILE, data)
        config = {
            "format": FORMAT,
            "weights": WEIGHTS_FILE,
            "weights_sha256": hashlib.sha256(data).hexdigest(),
            "fingerprint": self.fingerprint,
            "threshold": self.threshold,
            "n_features": int(self.arrays["mean"].size),
            "hidden": int(self.arrays["b1"].size),
            "rebuild": REBUILD,
            "training": self.meta,
        }
        write_json_atomic(folder / CONFIG_FILE, config)
        return folder

    @classmethod
    def from_pretrained(
        cls, folder_or_id: str | Path | None = None, encoder: Any = None, check: bool = True
    ) -> SlotReader:
        """Load a reader from a folder of :meth:`save_pretrained`, or from a Hub model id.

        Args:
            folder_or_id: A local folder, or a Hub id (``owner/name``, fetched by huggingface_hub);
                None: the shipped weights (:data:`WEIGHTS_DIR`).
            encoder: The encoder to read with (None: the one the weights name).
            check: Check that the encoder gives the fingerprint's embedding (a probe sentence).

        Returns:
            SlotReader: The reader.

        Raises:
            SlotReaderError: A missing, malformed or tampered file, or weights made for another
                encoder; one line naming the file and the rebuild command.
        """
        folder = _resolve_folder(folder_or_id)
        cfg_path = folder / CONFIG_FILE
        fix = f"rebuild them: {REBUILD}"
        try:
            cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise SlotReaderError(f"{cfg_path}: no slot reader weights here; {fix}") from None
        except (OSError, ValueError) as e:
            raise SlotReaderError(f"{cfg_path}: unreadable or not JSON ({e}); {fix}") from None
        if not isinstance(cfg, dict) or cfg.get("format") != FORMAT:
            raise SlotReaderError(f"{cfg_path}: not a slot reader config (format {FORMAT!r}); {fix}")
        w_path = folder / str(cfg.get("weights") or WEIGHTS_FILE)
        try:
            data = w_path.read_bytes()
        except OSError as e:
            raise SlotReaderError(f"{w_path}: missing or unreadable ({e.strerror or e}); {fix}") from None
        if hashlib.sha256(data).hexdigest() != cfg.get("weights_sha256"):
            raise SlotReaderError(f"{w_path}: corrupt (its sha256 differs from {cfg_path}'s); {fix}")
        try:
            import io

            with np.load(io.BytesIO(data), allow_pickle=False) as z:
                arrays = {k: np.asarray(z[k]) for k in cls.ARRAYS}
        except (OSError, ValueError, KeyError) as e:
            raise SlotReaderError(f"{w_path}: malformed ({e}); {fix}") from None
        n, h = int(cfg.get("n_features", -1)), int(cfg.get("hidden", -1))
        shapes = {"mean": (n,), "scale": (n,), "w1": (n, h), "b1": (h,), "w2": (h,), "b2": (1,)}
        if (
            n != N_FEATURES
            or any(arrays[k].shape != v for k, v in shapes.items())
            or not all(np.isfinite(a).all() for a in arrays.values())
        ):
            raise SlotReaderError(
                f"{w_path}: malformed (not {N_FEATURES} features by {h} hidden units, finite); {fix}"
            )
        fp = cfg.get("fingerprint") or {}
        reader = cls(
            arrays,
            fp,
            encoder,
            float(cfg.get("threshold", DEFAULT_THRESHOLD)),
            cfg.get("training"),
        )
        if check:
            enc = reader.encoder
            got = _fingerprint(enc, encoder if encoder is not None else _hub_to_alias(fp.get("encoder", "")))
            probe = np.asarray(fp.get("probe") or [], dtype=np.float64)
            same = (
                got["dim"] == fp.get("dim")
                and probe.shape == (min(16, got["dim"]),)
                and np.allclose(np.asarray(got["probe"]), probe, atol=2e-3)
            )
            if not same:
                raise SlotReaderError(
                    f"{cfg_path}: these weights were made for encoder {fp.get('encoder')!r} "
                    f"(dim {fp.get('dim')}), not {got['encoder']!r} (dim {got['dim']}); use that encoder or {fix}"
                )
        return reader

    def push_to_hub(
        self, repo_id: str, token: str | None = None, private: bool = False, api: Any = None
    ) -> str:
        """Upload the reader's folder to a Hub model repository (thin: huggingface_hub's upload_folder).

        Args:
            repo_id: ``owner/name``.
            token: A Hub token (None: huggingface_hub's login).
            private: Create the repository private.
            api: An ``HfApi`` (tests pass a mock).

        Returns:
            str: The repository id.
        """
        import tempfile

        if api is None:
            from huggingface_hub import HfApi

            api = HfApi(token=token)
        with tempfile.TemporaryDirectory() as tmp:
            self.save_pretrained(tmp)
            api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
            api.upload_folder(folder_path=tmp, repo_id=repo_id, repo_type="model")
        return repo_id


def _hub_to_alias(encoder_id: str) -> str:
    from dialfork_metrics.encoders.names import ENCODER_ALIASES

    for alias, hub in ENCODER_ALIASES.items():
        if hub == encoder_id:
            return alias
    return encoder_id


def _resolve_folder(folder_or_id: str | Path | None) -> Path:
    if folder_or_id is None:
        return WEIGHTS_DIR
    p = Path(folder_or_id).expanduser()
    if p.exists() or not re.match(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$", str(folder_or_id)):
        return p
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(str(folder_or_id), allow_patterns=[CONFIG_FILE, WEIGHTS_FILE]))
    except Exception as e:  # noqa: BLE001 - the Hub's errors are many; one line says which
        raise SlotReaderError(
            f"{folder_or_id}: no slot reader on the Hub or offline ({type(e).__name__}); pass a local "
            f"folder, or rebuild the weights: {REBUILD}"
        ) from None


# ----------------------------------------------------------------------------- the tracker's entry
_DEFAULT: list[SlotReader] = []


def default_slot_reader() -> SlotReader:
    """The shipped reader (:data:`WEIGHTS_DIR`), loaded once per process.

    Returns:
        SlotReader: The reader, on the packaged MiniLM.

    Raises:
        SlotReaderError: The shipped weights are missing or corrupt (one line with the rebuild command).
    """
    if not _DEFAULT:
        _DEFAULT.append(SlotReader.from_pretrained())
    return _DEFAULT[0]


def slots_from_roles(roles: Any, descriptions: Mapping[str, str] | None = None) -> list[SlotInfo]:
    """The reader's slots of a task's :class:`~dialfork_dataset.workflow.roles.TaskRoles`.

    Args:
        roles: The task's roles (``value_types``, ``values``, ``descriptions``).
        descriptions: Slot -> a description in words (None: the roles' own, from the workflow file's
            ``slots:`` or the API inputs' readable names; a slot without one is read by its name).

    Returns:
        list[SlotInfo]: One per slot of ``roles.value_types``.
    """
    desc = descriptions if descriptions is not None else dict(getattr(roles, "descriptions", None) or {})
    return [
        SlotInfo(s, str(desc.get(s) or ""), t if t in TYPES else "text", tuple(roles.values.get(s, ())))
        for s, t in roles.value_types.items()
    ]


def given_slots(
    reader: SlotReader,
    text: str,
    roles: Any,
    prev_system_text: str | None = None,
    asked: Sequence[str] | None = None,
) -> dict[str, str]:
    """The slots a user turn gives: a drop-in for :func:`~dialfork_metrics.task3.workflow.state.volunteered_slots`.

    In :func:`~dialfork_metrics.task3.workflow.state.observe_user`, ``seen = given_slots(reader, text,
    roles, prev_system_text, asked=state.pending)`` replaces ``volunteered_slots(text, roles)``, and a
    pending slot is *answered* only when it is in ``seen`` (the reader read the question too).

    Args:
        reader: A :class:`SlotReader`.
        text: The user turn.
        roles: The task's :class:`~dialfork_dataset.workflow.roles.TaskRoles`.
        prev_system_text: The system turn before it (None: none).
        asked: The slots that turn asked for (the tracker's ``state.pending``), or None.

    Returns:
        dict[str, str]: Slot -> value (the same shape as ``volunteered_slots``).
    """
    return reader.read(text, slots_from_roles(roles), prev_system_text, asked)


# ----------------------------------------------------------------------------- CLI
def _main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m dialfork_metrics.task3.workflow.reader.slots",
        description="Train the slot reader on SGD's user turns (never on STAR's human dialogues).",
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    tr = sub.add_parser("train", help="train on every service of an SGD folder and save the weights")
    tr.add_argument(
        "--sgd", default=None, help="the SGD folder (default: $DIALFORK_SGD_DIR or ../shared/sgd)"
    )
    tr.add_argument("--out", default=str(WEIGHTS_DIR), help="the weights folder (default: the shipped one)")
    tr.add_argument("--encoder", default="minilm")
    tr.add_argument("--seed", type=int, default=0)
    tr.add_argument("--hidden", type=int, default=DEFAULT_HIDDEN)
    args = ap.parse_args(argv)
    from dialfork_dataset.tracks.sgd import SgdError, read_sgd

    t0 = time.perf_counter()
    try:
        corpus = read_sgd(args.sgd)
    except SgdError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    turns = sgd_user_turns(corpus)
    reader = SlotReader.fit(turns, sgd_slot_infos(corpus.schema), args.encoder, args.seed, args.hidden)
    folder = reader.save_pretrained(args.out)
    size = sum(f.stat().st_size for f in folder.iterdir())
    print(
        f"wrote {folder} ({size / 1024:.0f} KiB) from {reader.meta['n_turns']} SGD user turns, "
        f"{reader.meta['n_pairs']} (turn, slot) pairs, in {time.perf_counter() - t0:.0f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
