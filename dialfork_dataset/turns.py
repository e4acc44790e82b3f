"""Normalise the dialogue inputs every API accepts: a list of turn strings, a list of
``{"speaker", "text"}`` dicts, a record (dict with ``turns``) or a :class:`DialogueRecord`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def _describe(dialogue: Any, where: str | None) -> str:
    if where:
        return where
    if isinstance(dialogue, Mapping) and "dialogue_id" in dialogue:
        return f"dialogue {dialogue['dialogue_id']!r}"
    return "dialogue"


def as_turns(dialogue: Any, where: str | None = None, allow_empty: bool = False) -> list[dict[str, str]]:
    """Any accepted dialogue input as ``[{"speaker", "text"}, ...]``.

    Plain strings get alternating speakers starting with ``user`` (STAR dialogues open with the
    user) unless they already look like ``"system: ..."``/``"user: ..."``.

    Args:
        dialogue: A list of turn strings, a list of ``{"speaker", "text"}`` dicts, or a record.
        where: A name for the dialogue in error messages (default: its ``dialogue_id``).
        allow_empty: Accept a dialogue without turns.

    Returns:
        A new list of ``{"speaker", "text"}`` dicts.

    Raises:
        ValueError: An empty dialogue, a non-string or empty turn text, or an unknown speaker (the
            message names the dialogue and the turn).
    """
    name = _describe(dialogue, where)
    turns: Any = dialogue
    if hasattr(dialogue, "turns") and not isinstance(dialogue, Mapping):
        turns = [{"speaker": t.speaker, "text": t.text} for t in dialogue.turns]
    elif isinstance(dialogue, Mapping):
        if "turns" not in dialogue:
            raise ValueError(f"{name}: a record must have a 'turns' field")
        turns = dialogue["turns"]
    if isinstance(turns, str) or not isinstance(turns, Sequence):
        raise ValueError(f"{name}: expected a list of turns, got {type(turns).__name__}")
    if len(turns) == 0 and not allow_empty:
        raise ValueError(f"{name}: empty dialogue (no turns)")
    out: list[dict[str, str]] = []
    for i, t in enumerate(turns):
        if isinstance(t, str):
            sp = "user" if i % 2 == 0 else "system"
            text = t
        elif isinstance(t, Mapping):
            sp, text = t.get("speaker"), t.get("text")
        else:
            raise ValueError(
                f"{name}: turn {i} must be a string or a {{speaker, text}} dict, got {type(t).__name__}"
            )
        if sp not in ("user", "system"):
            raise ValueError(f"{name}: turn {i} has unknown speaker {sp!r} (expected 'user' or 'system')")
        if not isinstance(text, str):
            raise ValueError(f"{name}: turn {i} text must be a string, got {type(text).__name__}")
        if not text.strip():
            raise ValueError(f"{name}: turn {i} is empty")
        out.append({"speaker": sp, "text": text})
    return out


def turn_texts(dialogue: Any, where: str | None = None) -> list[str]:
    """The turn texts of any accepted dialogue input (validated as in ``as_turns``).

    Args:
        dialogue: A list of turn strings, ``{"speaker", "text"}`` dicts, or a record.
        where: A name for the dialogue in error messages.

    Returns:
        The texts, in order.

    Raises:
        ValueError: As ``as_turns``.
    """
    return [t["text"] for t in as_turns(dialogue, where)]


def transcript(dialogue: Any, where: str | None = None) -> str:
    """The transcript ``"user: ...\\nsystem: ..."`` (the Full-dialog input of SPEC section 7).

    Args:
        dialogue: A list of turn strings, ``{"speaker", "text"}`` dicts, or a record.
        where: A name for the dialogue in error messages.

    Returns:
        One string, one line per turn.

    Raises:
        ValueError: As ``as_turns``.
    """
    return "\n".join(f"{t['speaker']}: {t['text']}" for t in as_turns(dialogue, where))
