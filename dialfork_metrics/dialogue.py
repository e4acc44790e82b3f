"""Task 2 at the dialogue level: distances between a reference and a candidate dialogue.

Every function accepts a dialogue as a list of turn strings, a list of ``{speaker, text}`` dicts
or a record (a dict with ``turns``; see :mod:`dialfork_dataset.turns`), and has a batched form
(``batched=True``: ``ref`` and ``cand`` are equal-length lists of dialogues, the result is an
array). Batched calls encode every unique text of all dialogues in one encoder pass, then do the
math over all pairs at once (:mod:`dialfork_metrics.distances`).

:func:`score_pairs` computes several methods for many pairs with one encoding;
:func:`score_quartets` runs Task 2 on quartets (a conformant source and its four forks) and
:func:`kendall_tau_order` scores one unit as in SPEC section 6.

Methods (SPEC section 7): ``flowscore``, ``flowdtw``, ``mean_turn``, ``full_dialog`` (encoder
based) and the controls ``turn_count_diff`` (|turns(D) - turns(D')|, both speakers),
``word_count_diff`` (|words(D) - words(D')|, whitespace-separated words over all turns; ours),
``shared_prefix`` (minus the number of opening turns whose speaker and text are identical).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from dialfork_dataset.turns import as_turns

from . import registry
from .registry import NameView

#: The registry's encoder-based pair metrics (live views of :mod:`dialfork_metrics.registry`).
EMBEDDING_METHODS = NameView(
    lambda: registry.names("pair", inputs=("similarity", "turn_embeddings", "transcripts"))
)
#: The registry's pair controls :func:`score_pairs` computes (length, prefix; not the seeded Random).
CONTROL_METHODS = NameView(lambda: registry.names("pair", inputs=("turns",), control=True))
#: Every pair metric :func:`score_pairs` computes (all but the benchmark's seeded Random).
ALL_METHODS = NameView(
    lambda: registry.names("pair", inputs=("similarity", "turn_embeddings", "transcripts", "turns"))
)


# ---------------------------------------------------------------------------- inputs
def _label(dialogue: Any, role: str, i: int | None) -> str:
    base = role if i is None else f"{role} {i}"
    if isinstance(dialogue, Mapping) and "dialogue_id" in dialogue:
        return f"{base} ({dialogue['dialogue_id']!r})"
    return base


def _pairs(ref: Any, cand: Any, batched: bool) -> tuple[list, list, list[str], list[str]]:
    if batched:
        for what, x in (("references", ref), ("candidates", cand)):
            if isinstance(x, str | Mapping) or not isinstance(x, Iterable):
                raise ValueError(f"batched=True: {what} must be a list of dialogues, got {type(x).__name__}")
        # any iterable of dialogues: lists, a datasets.Dataset (rows), a Column such as ds["turns"]
        refs, cands = list(ref), list(cand)
        if len(refs) != len(cands):
            raise ValueError(
                f"batched=True: {len(refs)} references but {len(cands)} candidates (one per pair)"
            )
        return (
            refs,
            cands,
            [_label(d, "reference", i) for i, d in enumerate(refs)],
            [_label(d, "candidate", i) for i, d in enumerate(cands)],
        )
    for what, x in (("reference", ref), ("candidate", cand)):
        if isinstance(x, Sequence) and not isinstance(x, str) and len(x) and isinstance(x[0], list | tuple):
            raise ValueError(f"{what} looks like a list of dialogues: pass batched=True to score many pairs")
    return [ref], [cand], [_label(ref, "reference", None)], [_label(cand, "candidate", None)]


def _out(values: np.ndarray, batched: bool):
    return values if batched else float(values[0])


# ---------------------------------------------------------------------------- core
def score_pairs(
    references: Sequence[Any],
    candidates: Sequence[Any],
    methods: Sequence[str] | None = None,
    encoder: Any = "minilm",
) -> dict[str, np.ndarray]:
    """Several Task 2 distances for many (reference, candidate) pairs.

    Turns of all dialogues are encoded in one pass (transcripts too, once, when ``full_dialog``
    is asked), then the math runs over all pairs at once.

    Args:
        references: The reference dialogues (records, lists of turns or of turn strings).
        candidates: The candidate dialogues, one per reference, in the same order.
        methods: Registered Task 2 method names; None: all of them.
        encoder: An alias, a model path/id or an :class:`~dialfork_metrics.encoders.Encoder`
            (shared instances are reused across calls, so their cache persists).

    Returns:
        dict[str, np.ndarray]: ``{method: (n_pairs,) array}``.

    Raises:
        ValueError: The two lists differ in length, a dialogue is malformed (named), or a method
            is unknown.
    """
    refs, cands, rnames, cnames = _pairs(references, candidates, batched=True)
    return _score(refs, cands, rnames, cnames, methods, encoder)


def _score(
    refs: list, cands: list, rnames: list[str], cnames: list[str], methods: Sequence[str] | None, encoder: Any
) -> dict[str, np.ndarray]:
    known = tuple(ALL_METHODS)
    methods = list(known if methods is None else methods)
    unknown = [m for m in methods if m not in known]
    if unknown:
        raise ValueError(
            f"unknown Task 2 method(s) {unknown}; available: {', '.join(known)} (register one with "
            "dialfork_metrics.registry.register)"
        )
    names = rnames + cnames
    turns = [as_turns(d, names[i]) for i, d in enumerate(refs + cands)]  # validates everything first
    K = len(refs)
    if K == 0:
        return {m: np.zeros(0) for m in methods}
    specs = [registry.get(m) for m in methods]
    by_input = {i: [s for s in specs if s.input == i] for i in registry.PAIR_INPUTS}
    pair_names = [f"{rnames[k]} vs {cnames[k]}" for k in range(K)]
    out: dict[str, np.ndarray] = {}
    if any(s.input in ("similarity", "turn_embeddings", "transcripts") for s in specs):
        from .encoders import get_encoder

        enc = get_encoder(encoder)
    if by_input["similarity"] or by_input["turn_embeddings"]:
        from .distances import task2_embedding_scores

        E = [_unit64(e) for e in enc.encode_dialogues(turns, names=names)]
        out.update(
            task2_embedding_scores(
                E[:K],
                E[K:],
                pair_names,
                [s.name for s in by_input["similarity"] + by_input["turn_embeddings"]],
            )
        )
    if by_input["transcripts"]:
        T = _unit64(enc.encode_transcripts(turns, names=names))
        for s in by_input["transcripts"]:
            out[s.name] = s.core_fn()(T[:K], T[K:])
    for s in by_input["turns"]:
        out[s.name] = s.core_fn()(turns[:K], turns[K:])
    for m in methods:
        v = np.asarray(out[m], dtype=np.float64)
        if v.shape != (K,):
            raise ValueError(
                f"Task 2 metric {m!r}: its core returned shape {v.shape} for {K} pairs (expected ({K},); "
                "see dialfork_metrics.registry.PAIR_INPUTS)"
            )
        out[m] = v
    return {m: out[m] for m in methods}


def _unit64(E: np.ndarray) -> np.ndarray:
    # re-normalise float32 encoder rows in float64 so that identical turns have cosine 1 exactly;
    # with the embedding-level functions' row norm, bit for bit (FlowDTW breaks exact ties)
    from .distances import _row_norms

    E = E.astype(np.float64)
    return E / _row_norms(E)


def _word_count(turns: list[dict[str, str]]) -> int:
    return sum(len(t["text"].split()) for t in turns)


def _shared_prefix_len(a: list[dict[str, str]], b: list[dict[str, str]]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x["speaker"] != y["speaker"] or x["text"] != y["text"]:
            break
        n += 1
    return n


def turn_count_diffs(
    refs: Sequence[list[dict[str, str]]], cands: Sequence[list[dict[str, str]]]
) -> np.ndarray:
    """|turns(D) - turns(D')| for many pairs of validated turn lists (the registry's core).

    Args:
        refs: Reference dialogues as ``{speaker, text}`` lists.
        cands: Candidate dialogues, one per reference.

    Returns:
        A ``(K,)`` float64 array.
    """
    return np.array([abs(len(a) - len(b)) for a, b in zip(refs, cands)], dtype=np.float64)


def word_count_diffs(
    refs: Sequence[list[dict[str, str]]], cands: Sequence[list[dict[str, str]]]
) -> np.ndarray:
    """|words(D) - words(D')| (whitespace-separated, all turns) for many pairs (the registry's core).

    Args:
        refs: Reference dialogues as ``{speaker, text}`` lists.
        cands: Candidate dialogues, one per reference.

    Returns:
        A ``(K,)`` float64 array.
    """
    return np.array([abs(_word_count(a) - _word_count(b)) for a, b in zip(refs, cands)], dtype=np.float64)


def shared_prefixes(
    refs: Sequence[list[dict[str, str]]], cands: Sequence[list[dict[str, str]]]
) -> np.ndarray:
    """Minus the number of opening turns shared verbatim, for many pairs (the registry's core).

    Args:
        refs: Reference dialogues as ``{speaker, text}`` lists.
        cands: Candidate dialogues, one per reference.

    Returns:
        A ``(K,)`` float64 array (<= 0).
    """
    return np.array([-_shared_prefix_len(a, b) for a, b in zip(refs, cands)], dtype=np.float64)


def _one(method: str, ref: Any, cand: Any, encoder: Any, batched: bool):
    refs, cands, rnames, cnames = _pairs(ref, cand, batched)
    return _out(_score(refs, cands, rnames, cnames, [method], encoder)[method], batched)


# ---------------------------------------------------------------------------- public one-method API
def flowscore(ref: Any, cand: Any, encoder: Any = "minilm", *, batched: bool = False):
    """FlowScore distance 1 - F (SPEC section 7) between ``ref`` and ``cand``.

    S = E E'^T over unit turn embeddings; P = mean_j max_i S_ij, R = mean_i max_j S_ij; F is their
    harmonic mean with P and R clipped at 0, so the distance lies in [0, 1].

    Args:
        ref: The reference dialogue D: a list of turn strings (speakers alternate, user first), a
            list of ``{"speaker", "text"}`` dicts, or a DialFork record. With ``batched=True``, a
            list (or any iterable, e.g. a ``datasets`` column) of such dialogues.
        cand: The candidate dialogue D', in the same forms (one per reference when batched).
        encoder: An encoder alias (``"minilm"``, ``"d2f"``, ...), a local folder, a Hub id or an
            ``dialfork_metrics.Encoder``; one shared model per name and options.
        batched: Score many pairs at once: one encoder pass over the unique turns, batched math.

    Returns:
        The distance in [0, 1] as a ``float``; with ``batched=True`` a ``(n_pairs,)`` float64 array.

    Raises:
        ValueError: A dialogue is empty, has an empty turn or an unknown speaker (the message names
            the pair and the dialogue id), a single call is given lists of dialogues (pass
            ``batched=True``), or batched inputs differ in length.

    Example:
        >>> round(flowscore(["hi", "your name?"], ["hi", "your name?"]), 4)  # the packaged MiniLM
        0.0
    """
    return _one("flowscore", ref, cand, encoder, batched)


def flowdtw(ref: Any, cand: Any, encoder: Any = "minilm", *, batched: bool = False):
    """FlowDTW distance Gamma(n, m) / L (SPEC section 7): dynamic time warping over turn
    embeddings with cost 1 - cosine, divided by the length of the optimal path.

    Args:
        ref: The reference dialogue D: a list of turn strings (speakers alternate, user first), a
            list of ``{"speaker", "text"}`` dicts, or a DialFork record. With ``batched=True``, a
            list (or any iterable, e.g. a ``datasets`` column) of such dialogues.
        cand: The candidate dialogue D', in the same forms (one per reference when batched).
        encoder: An encoder alias (``"minilm"``, ``"d2f"``, ...), a local folder, a Hub id or an
            ``dialfork_metrics.Encoder``; one shared model per name and options.
        batched: Score many pairs at once: one encoder pass over the unique turns, batched math.

    Returns:
        The distance (>= 0) as a ``float``; with ``batched=True`` a ``(n_pairs,)`` float64 array.

    Raises:
        ValueError: A dialogue is empty, has an empty turn or an unknown speaker (the message names
            the pair and the dialogue id), a single call is given lists of dialogues (pass
            ``batched=True``), or batched inputs differ in length.

    Example:
        >>> round(flowdtw(["hi", "your name?"], ["hi", "your name?"]), 4)  # the packaged MiniLM
        0.0
    """
    return _one("flowdtw", ref, cand, encoder, batched)


def mean_turn(ref: Any, cand: Any, encoder: Any = "minilm", *, batched: bool = False):
    """Mean-turn distance 1 - cos(mean turn embedding, mean turn embedding').

    Args:
        ref: The reference dialogue D: a list of turn strings (speakers alternate, user first), a
            list of ``{"speaker", "text"}`` dicts, or a DialFork record. With ``batched=True``, a
            list (or any iterable, e.g. a ``datasets`` column) of such dialogues.
        cand: The candidate dialogue D', in the same forms (one per reference when batched).
        encoder: An encoder alias (``"minilm"``, ``"d2f"``, ...), a local folder, a Hub id or an
            ``dialfork_metrics.Encoder``; one shared model per name and options.
        batched: Score many pairs at once: one encoder pass over the unique turns, batched math.

    Returns:
        The distance in [0, 2] as a ``float``; with ``batched=True`` a ``(n_pairs,)`` float64 array.

    Raises:
        ValueError: A dialogue is empty, has an empty turn or an unknown speaker (the message names
            the pair and the dialogue id), a single call is given lists of dialogues (pass
            ``batched=True``), or batched inputs differ in length.
    """
    return _one("mean_turn", ref, cand, encoder, batched)


def full_dialog(ref: Any, cand: Any, encoder: Any = "minilm", *, batched: bool = False):
    """Full-dialog distance 1 - cos(phi(D), phi(D')), phi encoding the transcript
    ``"user: ...\\nsystem: ..."`` once (truncated at the encoder's ``max_seq_length``).

    Args:
        ref: The reference dialogue D: a list of turn strings (speakers alternate, user first), a
            list of ``{"speaker", "text"}`` dicts, or a DialFork record. With ``batched=True``, a
            list (or any iterable, e.g. a ``datasets`` column) of such dialogues.
        cand: The candidate dialogue D', in the same forms (one per reference when batched).
        encoder: An encoder alias (``"minilm"``, ``"d2f"``, ...), a local folder, a Hub id or an
            ``dialfork_metrics.Encoder``; one shared model per name and options.
        batched: Score many pairs at once: one encoder pass over the unique turns, batched math.

    Returns:
        The distance in [0, 2] as a ``float``; with ``batched=True`` a ``(n_pairs,)`` float64 array.

    Raises:
        ValueError: A dialogue is empty, has an empty turn or an unknown speaker (the message names
            the pair and the dialogue id), a single call is given lists of dialogues (pass
            ``batched=True``), or batched inputs differ in length.

    Example:
        >>> round(full_dialog(["hi", "your name?"], ["hi", "your name?"]), 4)  # the packaged MiniLM
        0.0
    """
    return _one("full_dialog", ref, cand, encoder, batched)


def turn_count_diff(ref: Any, cand: Any, *, batched: bool = False):
    """Turn-count control: |number of turns of D - number of turns of D'| (both speakers).

    Args:
        ref: The reference dialogue D: a list of turn strings (speakers alternate, user first), a
            list of ``{"speaker", "text"}`` dicts, or a DialFork record. With ``batched=True``, a
            list (or any iterable) of such dialogues.
        cand: The candidate dialogue D', in the same forms (one per reference when batched).
        batched: Score many pairs at once.

    Returns:
        The absolute difference as a ``float``; with ``batched=True`` a ``(n_pairs,)`` float64 array.

    Raises:
        ValueError: A dialogue is empty, has an empty turn or an unknown speaker (the message names
            the pair and the dialogue id), a single call is given lists of dialogues (pass
            ``batched=True``), or batched inputs differ in length.

    Example:
        >>> turn_count_diff(["hi", "your name?"], ["hello", "what is your name?", "bye"])
        1.0
        >>> turn_count_diff([["hi", "ok"]], [["hi", "ok"]], batched=True)
        array([0.])
    """
    return _one("turn_count_diff", ref, cand, None, batched)


def word_count_diff(ref: Any, cand: Any, *, batched: bool = False):
    """Word-count control: |words of D - words of D'|, counting whitespace-separated words
    over all turns (ours).

    Args:
        ref: The reference dialogue D: a list of turn strings (speakers alternate, user first), a
            list of ``{"speaker", "text"}`` dicts, or a DialFork record. With ``batched=True``, a
            list (or any iterable) of such dialogues.
        cand: The candidate dialogue D', in the same forms (one per reference when batched).
        batched: Score many pairs at once.

    Returns:
        The absolute difference as a ``float``; with ``batched=True`` a ``(n_pairs,)`` float64 array.

    Raises:
        ValueError: A dialogue is empty, has an empty turn or an unknown speaker (the message names
            the pair and the dialogue id), a single call is given lists of dialogues (pass
            ``batched=True``), or batched inputs differ in length.

    Example:
        >>> word_count_diff(["hi", "your name?"], ["hello", "what is your name?"])
        2.0
    """
    return _one("word_count_diff", ref, cand, None, batched)


def shared_prefix(ref: Any, cand: Any, *, batched: bool = False):
    """Shared-prefix control: minus the number of opening turns shared verbatim (same speaker
    and identical text). A longer shared opening means a smaller distance.

    Args:
        ref: The reference dialogue D: a list of turn strings (speakers alternate, user first), a
            list of ``{"speaker", "text"}`` dicts, or a DialFork record. With ``batched=True``, a
            list (or any iterable) of such dialogues.
        cand: The candidate dialogue D', in the same forms (one per reference when batched).
        batched: Score many pairs at once.

    Returns:
        Minus the shared prefix length (<= 0) as a ``float``; with ``batched=True`` a ``(n_pairs,)`` float64 array.

    Raises:
        ValueError: A dialogue is empty, has an empty turn or an unknown speaker (the message names
            the pair and the dialogue id), a single call is given lists of dialogues (pass
            ``batched=True``), or batched inputs differ in length.
    """
    return _one("shared_prefix", ref, cand, None, batched)


# ---------------------------------------------------------------------------- Task 2 units
def kendall_tau_order(distances: Sequence[float]) -> float:
    """Kendall's tau-b between (d_1..d_k) and (k, ..., 2, 1) (SPEC section 6); 0 when undefined
    (all distances equal): :func:`dialfork_metrics.stats.kendall_tau` with ``undefined="zero"``.

    Args:
        distances: One distance per fork position, the earliest fork first (at least 2).

    Returns:
        tau in [-1, 1]: 1 when the earlier a fork, the farther it is from its source.

    Raises:
        ValueError: Fewer than 2 distances, not 1-D, or NaN/inf among them.

    Example:
        >>> kendall_tau_order([0.1, 0.2, 0.3, 0.4])  # the later the fork, the farther: reversed
        -1.0
        >>> kendall_tau_order([0.4, 0.3, 0.2, 0.1])  # the earlier the fork, the farther
        1.0
    """
    from .stats import kendall_tau

    d = np.asarray(distances, dtype=np.float64)
    if d.ndim != 1 or d.size < 2:
        raise ValueError(f"need at least 2 distances (one per fork position), got {d.tolist()}")
    if not np.isfinite(d).all():
        raise ValueError(f"distances contain NaN or inf: {d.tolist()}")
    return kendall_tau(d, np.arange(d.size, 0, -1), undefined="zero")


def score_quartets(
    quartets: Sequence[Mapping[str, Any]],
    methods: Sequence[str] | None = None,
    encoder: Any = "minilm",
) -> list[dict[str, Any]]:
    """Task 2 over units ``{"source": record, "type": h, "forks": {1: rec, 2: rec, 3: rec, 4: rec}}``
    (``dialfork_dataset.views.task2_quartets``): one encoder pass over all dialogues, then every
    method for all (source, fork) pairs.

    Args:
        quartets: The units: a source record, its hallucination type and its forks by position.
        methods: Registered Task 2 method names; None: all of them.
        encoder: An alias, a model path/id or an encoder object.

    Returns:
        One row per unit: ``{"source_id", "type", "distances": {method: [d_1..d_4]},
        "tau": {method: tau}}`` (a metric whose registry ``direction`` is ``"higher"``, a
        similarity, is ranked on its negated values).

    Raises:
        ValueError: A unit is not ``{"source", "type", "forks"}``, has fewer than 2 forks, a
            dialogue is malformed, or a method is unknown.
    """
    methods = list(ALL_METHODS if methods is None else methods)
    refs, cands, keys = [], [], []
    for u, q in enumerate(quartets):
        if not isinstance(q, Mapping) or "source" not in q or "forks" not in q:
            raise ValueError(f"unit {u}: expected {{'source', 'type', 'forks'}}, got {type(q).__name__}")
        forks = q["forks"]
        ks = sorted(forks)
        if len(ks) < 2:
            raise ValueError(f"unit {u}: needs at least 2 forks to rank, got {ks}")
        for k in ks:
            refs.append(q["source"])
            cands.append(forks[k])
            keys.append((u, k))
    scores = score_pairs(refs, cands, methods, encoder)
    # a similarity (higher is closer) ranks the forks the other way round
    sign = {m: -1.0 if registry.get(m).direction == "higher" else 1.0 for m in methods}
    rows: list[dict[str, Any]] = []
    for q in quartets:
        src = q["source"]
        rows.append(
            {
                "source_id": src.get("dialogue_id") if isinstance(src, Mapping) else None,
                "type": q.get("type"),
                "distances": {m: [] for m in methods},
            }
        )
    for i, (u, _k) in enumerate(keys):
        for m in methods:
            rows[u]["distances"][m].append(float(scores[m][i]))
    for r in rows:
        r["tau"] = {m: kendall_tau_order([sign[m] * d for d in r["distances"][m]]) for m in methods}
    return rows


__all__ = [
    "ALL_METHODS",
    "CONTROL_METHODS",
    "EMBEDDING_METHODS",
    "flowdtw",
    "flowscore",
    "full_dialog",
    "kendall_tau_order",
    "mean_turn",
    "score_pairs",
    "score_quartets",
    "shared_prefix",
    "shared_prefixes",
    "turn_count_diff",
    "turn_count_diffs",
    "word_count_diff",
    "word_count_diffs",
]
