"""The backend interface shared by every generator (template, transformers, OpenAI-compatible).

The engine advances many dialogues in lockstep: at each step it collects one
:class:`TurnRequest` per active dialogue and calls :meth:`Backend.generate` once with the
whole batch. A backend returns one utterance per request, in order.

Determinism contract: the text returned for a request must depend only on that request
(its ``messages``/``state``, ``seed``, ``turn_index`` and ``role``), never on which other
requests share the batch or on the batch size. This is what makes ``replay`` forks reproduce
their parent's prefix.

Optional attributes the engine honours (a backend that lacks them gets the default):

* ``uses_messages: bool`` (default ``True``): whether the backend reads ``TurnRequest.messages``.
  The template backend sets it to ``False`` and the engine then skips building the chat
  contexts (it reads ``state``). The message layout is documented in :mod:`generation.prompts`.
* ``close()``: called once when the engine is done with the backend (free GPU memory, sockets).

An agent ends the conversation by ending its utterance with ``generation.prompts.END_TOKEN``
(``"[END]"``); the engine strips the token from the recorded text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass
class TurnRequest:
    """One utterance to generate: which dialogue, which agent, its context and seed.

    Attributes:
        dialogue_key: the dialogue's unique key (its ``dialogue_id``).
        role: the agent that speaks, ``"system"`` or ``"user"``.
        messages: that agent's chat context (empty when the backend sets ``uses_messages=False``).
        seed: the dialogue's seed (a fork's is its parent's).
        turn_index: the 0-based position of the utterance in the dialogue.
        state: the engine's :class:`~generation.engine.dialogue.Dialogue` (read by non-LLM
            backends; default ``None``).
        extra: free-form per-request data (default: empty).
    """

    dialogue_key: str
    """Unique key of the dialogue being generated (its ``dialogue_id``)."""
    role: str
    """Which agent speaks: ``"system"`` or ``"user"``."""
    messages: list[dict[str, str]]
    """That agent's chat context: ``[{"role": "system"|"user"|"assistant", "content": ...}]``.
    Instructions (role prompt, injected hallucination instruction, wrap-up) are ``system``
    messages at the place they were given; the agent's own past turns are ``assistant``."""
    seed: int
    """The dialogue's seed (a fork uses its parent's seed, so replay regenerates the prefix)."""
    turn_index: int
    """0-based position of the utterance being generated in the dialogue."""
    state: Any = None
    """Structured state for non-LLM backends (the template simulator); LLM backends ignore it."""
    extra: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Backend(Protocol):
    """What the engine needs of a backend (a structural protocol: no base class to inherit).

    Attributes:
        name: recorded as each record's ``generator`` (a model id, or ``"template"``).
    """

    name: str
    """Recorded as the record's ``generator`` (a model id, or ``"template"``)."""

    def decoding(self) -> dict[str, Any]:
        """Decoding parameters recorded in each record (temperature, top_p, top_k, max_new_tokens).

        Returns:
            A dict of decoding settings; keys outside the record's ``DECODING_FIELDS`` are ignored
                and missing ones are recorded as ``None``.
        """
        ...

    def generate(self, requests: Sequence[TurnRequest]) -> list[str]:
        """One utterance per request, in order.

        Args:
            requests: the batch, one request per active dialogue.

        Returns:
            One ``str`` per request, in the same order; the text of a request must depend only on
                that request (the determinism contract above).
        """
        ...


def decoding_errors(temperature: Any, top_p: Any, top_k: Any, max_new_tokens: Any, stop: Any) -> list[str]:
    """Every invalid decoding parameter shared by the LLM backends (SPEC 3 defaults: 1.3, 0.95, 64).

    Args:
        temperature: sampling temperature, a number >= 0.
        top_p: nucleus mass, a number in (0, 1].
        top_k: top-k cut-off, an integer >= 0 (0: no top-k filtering).
        max_new_tokens: tokens per utterance, an integer >= 1.
        stop: stop strings, a list of non-empty strings (a single string is refused).

    Returns:
        One message per invalid parameter; empty when all are valid.
    """
    errs: list[str] = []
    if not (isinstance(temperature, int | float) and temperature >= 0):
        errs.append(f"temperature must be >= 0, got {temperature!r}")
    if not (isinstance(top_p, int | float) and 0 < top_p <= 1):
        errs.append(f"top_p must be in (0, 1], got {top_p!r}")
    if not (isinstance(top_k, int) and top_k >= 0):
        errs.append(f"top_k must be an integer >= 0 (0 = no top-k filtering), got {top_k!r}")
    if not (isinstance(max_new_tokens, int) and max_new_tokens >= 1):
        errs.append(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
    if isinstance(stop, str) or not all(isinstance(s, str) and s for s in stop):
        errs.append(f"stop must be a list of non-empty strings, got {stop!r}")
    return errs
