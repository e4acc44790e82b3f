"""Reading a streamed (SSE) chat completion answered by the guard proxy."""

from __future__ import annotations

import json
from typing import Any


def read_completion(body: str) -> tuple[dict[str, Any], str]:
    """``(dialfork, text)`` of an SSE chat completion body: the ``dialfork`` object of the last data
    chunk before ``[DONE]`` and the reply text assembled from choice 0's deltas. Raises
    ``ValueError`` when the stream is not one the guard completed (no ``[DONE]``, no verdict chunk,
    an error event).

    Args:
        body: The whole response body (``data:`` lines).

    Returns:
        The verdict object and the reply text.

    Raises:
        ValueError: The stream does not end with ``[DONE]``, or the chunk before it is an error,
            has choices, or has no ``dialfork`` object (a chunk that is not JSON also raises
            ``json.JSONDecodeError``, a ``ValueError``).
    """
    events = [ln[5:].strip() for ln in body.splitlines() if ln.startswith("data:")]
    if len(events) < 2 or events[-1] != "[DONE]":
        raise ValueError("the stream did not end with [DONE]")
    tail = json.loads(events[-2])
    if "error" in tail or tail.get("choices") != [] or "dialfork" not in tail:
        raise ValueError(f"the stream has no verdict chunk before [DONE]: {events[-2][:200]}")
    text = ""
    for e in events[:-2]:
        for ch in json.loads(e).get("choices") or []:
            if ch.get("index", 0) == 0:
                text += (ch.get("delta") or {}).get("content") or ""
    return tail["dialfork"], text
