"""The blind sets and their gold (pure functions): keyed opaque ids, the detector track's rows, the
metric track's inline pairs, and the gold rows the scorer reads."""

from __future__ import annotations

import hashlib
import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from ..hidden import DEFAULT_PUBLIC_FRACTION, keyed_token
from ..taxonomy import FORK_POSITIONS

logger = logging.getLogger(__name__)


def blind_features():
    """The ``datasets.Features`` of the detector track's blind rows (the ``blind`` config).

    Returns:
        datasets.Features: ``dialogue_id`` (string), ``turns`` (list of ``{speaker, text}`` strings)
        and ``num_system_turns`` (int32); no label field.
    """
    from datasets import Features, List, Value

    return Features(
        {
            "dialogue_id": Value("string"),
            "turns": List({"speaker": Value("string"), "text": Value("string")}),
            "num_system_turns": Value("int32"),
        }
    )


def blind_pair_features():
    """The ``datasets.Features`` of the metric track's blind pairs (the ``blind_task2`` config).

    Returns:
        datasets.Features: ``pair_id``, ``reference_id`` and ``candidate_id`` (strings) and the two
        transcripts inline, ``reference`` and ``candidate`` (each a list of ``{speaker, text}``
        strings); no label field.
    """
    from datasets import Features, List, Value

    turns = List({"speaker": Value("string"), "text": Value("string")})
    return Features(
        {
            "pair_id": Value("string"),
            "reference_id": Value("string"),
            "candidate_id": Value("string"),
            "reference": turns,
            "candidate": turns,
        }
    )


def _keyed(key: bytes, kind: str, value: str, n: int = 20) -> str:
    return keyed_token(key, kind, value, n)


def _legacy_public(key: bytes, source_id: str, public_fraction: float) -> bool:
    import hmac

    h = hmac.new(key, f"subset\x00{source_id}".encode(), hashlib.sha256).digest()
    return int.from_bytes(h[:8], "big") / 2**64 < public_fraction


def make_blind(
    task3_test: Sequence[Mapping[str, Any]], key: bytes, public_fraction: float = DEFAULT_PUBLIC_FRACTION
):
    """The all-rows blind layout: every task3 test row blind, pairs between blind ids (pure function).

    This is NOT what :func:`export_hub_layout` publishes (it holds siblings, so sibling grouping
    and pair diffing solve it; ``leaderboard audit`` says so). It is kept for the scorer's
    synthetic fixtures (``leaderboard.synthetic``), whose gold rows have the published format.

    Args:
        task3_test: The task3 test records (conformant sources and their forks), each a mapping with
            at least ``dialogue_id``, ``source_id``, ``turns``, ``num_system_turns``,
            ``hallucination_type`` (None for a conformant dialogue), ``fork_position``,
            ``fork_turn`` and ``task``.
        key: The secret blind key (bytes); the opaque ids are HMAC-SHA256 tokens under it and it
            decides each source's public/private subset.
        public_fraction: The share, in (0, 1), of sources whose rows go to the ``public`` subset of
            the gold (the rest are ``private``); default
            :data:`~dialfork_dataset.hidden.DEFAULT_PUBLIC_FRACTION` (0.5).

    Returns:
        tuple: ``(blind, pairs, gold3, gold2)``, four lists of dicts sorted by id: ``blind`` rows
        ``{dialogue_id, turns, num_system_turns}`` (one per record, ``dialogue_id`` is ``"d"`` + a
        20-hex-digit token); ``pairs`` ``{pair_id, reference_id, candidate_id}`` (one per fork whose
        source is in ``task3_test``; ids only, no inline transcripts); ``gold3`` rows
        ``{dialogue_id, num_system_turns, hallucination_type, fork_position, fork_turn, task,
        subset}``; ``gold2`` rows ``{pair_id, unit_id, hallucination_type, fork_position, task,
        subset}``.

    Raises:
        RuntimeError: Two dialogue ids map to the same blind id (a broken key).
    """
    bid = {r["dialogue_id"]: "d" + _keyed(key, "dialogue", r["dialogue_id"]) for r in task3_test}
    if len(set(bid.values())) != len(bid):  # 80-bit ids: a collision means a broken key
        raise RuntimeError("blind id collision; export again with another key")
    blind = sorted(
        (
            {
                "dialogue_id": bid[r["dialogue_id"]],
                "turns": [dict(t) for t in r["turns"]],
                "num_system_turns": r["num_system_turns"],
            }
            for r in task3_test
        ),
        key=lambda x: x["dialogue_id"],
    )
    sub = {
        r["source_id"]: "public" if _legacy_public(key, r["source_id"], public_fraction) else "private"
        for r in task3_test
    }
    gold3 = sorted(
        (_gold3_row(bid[r["dialogue_id"]], r, sub[r["source_id"]]) for r in task3_test),
        key=lambda x: x["dialogue_id"],
    )
    pairs, gold2 = [], []
    for r in task3_test:
        if r["hallucination_type"] is None or r["source_id"] not in bid:
            continue
        pid = "p" + _keyed(key, "pair", r["dialogue_id"])
        pairs.append(
            {"pair_id": pid, "reference_id": bid[r["source_id"]], "candidate_id": bid[r["dialogue_id"]]}
        )
        gold2.append(_gold2_row(pid, key, r, sub[r["source_id"]]))
    pairs.sort(key=lambda x: x["pair_id"])
    gold2.sort(key=lambda x: x["pair_id"])
    return blind, pairs, gold3, gold2


def _gold3_row(blind_id: str, r: Mapping[str, Any], subset: str) -> dict[str, Any]:
    return {
        "dialogue_id": blind_id,
        "num_system_turns": r["num_system_turns"],
        "hallucination_type": r["hallucination_type"],
        "fork_position": r["fork_position"],
        "fork_turn": r["fork_turn"],
        "task": r["task"],
        "subset": subset,
    }


def _gold2_row(pair_id: str, key: bytes, r: Mapping[str, Any], subset: str) -> dict[str, Any]:
    return {
        "pair_id": pair_id,
        "unit_id": "u" + _keyed(key, "unit", f"{r['source_id']}\x00{r['hallucination_type']}"),
        "hallucination_type": r["hallucination_type"],
        "fork_position": r["fork_position"],
        "task": r["task"],
        "subset": subset,
    }


def make_hidden_blind(detector: Sequence[Mapping[str, Any]], metric: Sequence[Mapping[str, Any]], key: bytes):
    """The published blind layout from :func:`dialfork_dataset.hidden.draw_hidden_tracks` rows (pure).

    ``detector``: one record per detector source (with ``subset``); ``metric``: whole families of
    the metric sources (with ``subset``). Returns ``(blind, pairs, gold3, gold2)``: blind rows
    ``{dialogue_id, turns, num_system_turns}``; pairs ``{pair_id, reference_id, candidate_id,
    reference, candidate}`` (the two transcripts inline) for every complete (source, type) unit.

    Args:
        detector: The detector track's records (one per detector source, conformant or a fork), each
            a record mapping plus its ``subset`` (``"public"`` or ``"private"``).
        metric: The metric track's records: whole families (a conformant source and its forks), each
            with its ``subset``. A (source, type) unit that lacks one of
            :data:`~dialfork_dataset.taxonomy.FORK_POSITIONS` is left out with a warning.
        key: The secret blind key (bytes); ids are HMAC-SHA256 tokens under it.

    Returns:
        tuple: ``(blind, pairs, gold3, gold2)``, four lists of dicts sorted by id: ``blind`` rows
        ``{dialogue_id, turns, num_system_turns}`` (the detector records only); ``pairs``
        ``{pair_id, reference_id, candidate_id, reference, candidate}``; ``gold3`` rows
        ``{dialogue_id, num_system_turns, hallucination_type, fork_position, fork_turn, task,
        subset}`` (one per blind row); ``gold2`` rows ``{pair_id, unit_id, hallucination_type,
        fork_position, task, subset}`` (one per pair).

    Raises:
        RuntimeError: Two dialogue ids map to the same blind id (a broken key).
    """
    ids = [r["dialogue_id"] for r in detector] + [r["dialogue_id"] for r in metric]
    bid = {i: "d" + _keyed(key, "dialogue", i) for i in ids}
    if len(set(bid.values())) != len(set(ids)):
        raise RuntimeError("blind id collision; export again with another key")
    blind = sorted(
        (
            {
                "dialogue_id": bid[r["dialogue_id"]],
                "turns": [dict(t) for t in r["turns"]],
                "num_system_turns": r["num_system_turns"],
            }
            for r in detector
        ),
        key=lambda x: x["dialogue_id"],
    )
    gold3 = sorted(
        (_gold3_row(bid[r["dialogue_id"]], r, r["subset"]) for r in detector), key=lambda x: x["dialogue_id"]
    )
    sources = {r["dialogue_id"]: r for r in metric if r["hallucination_type"] is None}
    units: dict[tuple[str, str], dict[int, Mapping[str, Any]]] = defaultdict(dict)
    for r in metric:
        if r["hallucination_type"] is not None and r["source_id"] in sources:
            units[(r["source_id"], r["hallucination_type"])][r["fork_position"]] = r
    pairs, gold2 = [], []
    for (sid, _h), forks in sorted(units.items()):
        if tuple(sorted(forks)) != FORK_POSITIONS:
            logger.warning("metric track: unit (%s, %s) lacks fork positions; left out", sid, _h)
            continue
        ref = sources[sid]
        for _k, r in sorted(forks.items()):
            pid = "p" + _keyed(key, "pair", r["dialogue_id"])
            pairs.append(
                {
                    "pair_id": pid,
                    "reference_id": bid[sid],
                    "candidate_id": bid[r["dialogue_id"]],
                    "reference": [dict(t) for t in ref["turns"]],
                    "candidate": [dict(t) for t in r["turns"]],
                }
            )
            gold2.append(_gold2_row(pid, key, r, r["subset"]))
    pairs.sort(key=lambda x: x["pair_id"])
    gold2.sort(key=lambda x: x["pair_id"])
    return blind, pairs, gold3, gold2
