"""One dialogue being generated, and the lockstep loop that advances many at once (SPEC section 3).

:func:`run_dialogues` sends one batch of :class:`~generation.backends.base.TurnRequest` per step (one
per active dialogue) to the backend, injects a fork's instruction before its system turn t_k (and a
compound fork's later ones before theirs), gives the wrap-up instruction at the length budget and
cuts a dialogue ``cut_after`` turns later.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dialfork_dataset.forks import system_turn_to_position
from dialfork_dataset.taxonomy import display_name

from .. import prompts
from ..backends.base import Backend, TurnRequest
from ..variants import Variant

logger = logging.getLogger("generation")


@dataclass
class ForkSpec:
    """One injection of a fork: which hallucination, at which system turn, with which instruction.

    Attributes:
        htype: the hallucination type (``"CSC"``, ``"GR"``, ``"SSPC"`` or ``"WIC"``).
        k: the fork position, 1..4.
        turn: t_k, the 1-based system turn before which the instruction is injected.
        variant: the drawn :class:`~generation.variants.Variant`.
        instruction: the rendered instruction text (:meth:`Variant.render_instruction`).
        substitute_task: WIC's substitute task name; ``None`` for the other types.
    """

    htype: str
    k: int
    turn: int
    """t_k: the system turn (1-based) before which the instruction is injected."""
    variant: Variant
    instruction: str
    substitute_task: str | None = None


@dataclass(eq=False)
class Dialogue:
    """One dialogue being generated; passed to the backend as ``TurnRequest.state``.

    Backends read ``task``/``scenario``/``turns``/``fork``/``injected``/``wrapped`` and may keep
    private per-dialogue data in ``scratch`` (the template backend keeps its simulator there).

    Attributes:
        key: the dialogue id (``<task>-<scenario id>`` for D+, ``<D+ key>-<type>-k<k>`` for a
            single fork).
        task: the workflow (a task object of the source, e.g. ``StarTask``).
        scenario: the source scenario being role-played.
        seed: the dialogue's seed (:func:`generation.seeds.dialogue_seed`; forks reuse D+'s).
        budget: the length budget in turns; at it the wrap-up instruction is given.
        cut: the turn count at which the dialogue is cut (``budget + cut_after``).
        fork: the injection in force (``None`` for a conformant dialogue).
        substitute: WIC's substitute task object (``None`` otherwise).
        reference: for a fork, its conformant parent D+.
        turns: the turns so far, each ``{"speaker": "user"|"system", "text": ...}``.
        n_system: the number of system turns so far.
        injected: whether the fork's instruction has been injected.
        wrapped: whether the wrap-up instruction has been given.
        done: whether the dialogue has ended.
        end_reason: why it ended (``"user closed"``, ``"system closed"``, ``"cut"``), empty while
            running.
        prefix_len: the number of turns copied from D+ (``reuse`` mode or a replay fallback).
        replay_fallback: whether a replayed prefix ended early and D+'s prefix was copied instead.
        reword_rate: ``reword`` mode: the share of prefix turns realised with another surface form.
        pending: compound forks: the injections still to come.
        applied: compound forks: the injections already superseded.
        substitutes: compound forks: WIC substitute task name to task object.
        system_messages: the system agent's chat context (message-based backends), else ``None``.
        user_messages: the user agent's chat context (message-based backends), else ``None``.
        scratch: the backend's private per-dialogue data.
    """

    key: str
    task: Any  # StarTask
    scenario: Any  # Scenario
    seed: int
    budget: int
    cut: int
    fork: ForkSpec | None = None
    substitute: Any = None  # StarTask of WIC's substitute workflow
    reference: Dialogue | None = None
    """For a fork: its conformant parent (turns and backend scratch)."""
    turns: list[dict[str, str]] = field(default_factory=list)
    n_system: int = 0
    injected: bool = False
    wrapped: bool = False
    done: bool = False
    end_reason: str = ""
    prefix_len: int = 0
    """Number of turns copied from D+ (``reuse`` mode)."""
    replay_fallback: bool = False
    reword_rate: float = 0.0
    """``reword`` mode: the share of prefix turns the backend realises with another surface form."""
    pending: list[ForkSpec] = field(default_factory=list)
    """Compound forks: the injections still to come (``fork`` is the one in force)."""
    applied: list[ForkSpec] = field(default_factory=list)
    """Compound forks: the injections already superseded by a later one."""
    substitutes: dict[str, Any] = field(default_factory=dict)
    """Compound forks: WIC substitute task name -> task, for injections after the first."""
    system_messages: list[dict[str, str]] | None = None
    user_messages: list[dict[str, str]] | None = None
    scratch: dict[str, Any] = field(default_factory=dict)

    @property
    def first_fork(self) -> ForkSpec | None:
        """The earliest injection (the only one of a single fork)."""
        return self.applied[0] if self.applied else self.fork

    @property
    def next_role(self) -> str:
        """``"user"`` when the number of turns so far is even (the user speaks first), else ``"system"``."""
        return "user" if len(self.turns) % 2 == 0 else "system"


def service_name(task: Any) -> str:
    """The task's name as a reader says it (``bank_balance`` -> ``bank balance``).

    Args:
        task: any object with a ``name`` string (a workflow task).

    Returns:
        ``task.name`` with underscores replaced by spaces.
    """
    return task.name.replace("_", " ")


def init_messages(d: Dialogue) -> None:
    """Start both agents' chat contexts: the role prompts and the user's opening cue.

    Sets ``d.system_messages`` to the rendered ``system_agent`` prompt and ``d.user_messages`` to the
    ``user_agent`` prompt followed by the ``user_opening`` cue (replacing any earlier context).

    Args:
        d: the dialogue; its ``task`` and ``scenario`` fill in the prompts.

    Raises:
        PromptError: a prompt template or one of its placeholder values is missing
            (:func:`generation.prompts.render`).
    """
    sc = d.scenario
    sys_prompt = prompts.render(
        "system_agent",
        service=service_name(d.task),
        wizard_task=sc.wizard_task,
        workflow=d.task.render_steps(with_templates=True),
    )
    user_prompt = prompts.render(
        "user_agent", user_task=sc.user_task, user_guide=prompts.user_guide_block(sc.user_guide)
    )
    d.system_messages = [{"role": "system", "content": sys_prompt}]
    d.user_messages = [
        {"role": "system", "content": user_prompt},
        {"role": "user", "content": prompts.render("user_opening")},
    ]


def injection_message(fork: ForkSpec) -> dict[str, str]:
    """The system message that injects ``fork``'s hallucination instruction.

    Args:
        fork: the injection (its type and rendered instruction fill the ``injection`` prompt).

    Returns:
        A chat message ``{"role": "system", "content": ...}``.

    Raises:
        PromptError: the ``injection`` prompt template is missing or has an unknown placeholder.
    """
    return {
        "role": "system",
        "content": prompts.render(
            "injection",
            type_name=display_name(fork.htype),
            type_code=fork.htype,
            instruction=fork.instruction,
        ),
    }


def _add_to_contexts(d: Dialogue, speaker: str, text: str) -> None:
    """A turn said by ``speaker``: its own past turn (``assistant``), what the other agent heard (``user``)."""
    own, other = (
        (d.system_messages, d.user_messages) if speaker == "system" else (d.user_messages, d.system_messages)
    )
    own.append({"role": "assistant", "content": text})
    other.append({"role": "user", "content": text})


def start_messages(d: Dialogue) -> None:
    """:func:`init_messages`, then the turns ``d`` already holds (a prefix copied from D+).

    Args:
        d: the dialogue; each of its turns is added to both agents' contexts (the speaker's own as
            ``assistant``, the other's as ``user``).

    Raises:
        PromptError: a prompt template or one of its placeholder values is missing.
    """
    init_messages(d)
    for tu in d.turns:
        _add_to_contexts(d, tu["speaker"], tu["text"])


def _append_turn(d: Dialogue, speaker: str, text: str, uses_messages: bool) -> None:
    d.turns.append({"speaker": speaker, "text": text})
    if speaker == "system":
        d.n_system += 1
    if uses_messages:
        _add_to_contexts(d, speaker, text)


def run_dialogues(
    dialogues: list[Dialogue],
    backend: Backend,
    uses_messages: bool | None = None,
    on_step: Callable[[int], None] | None = None,
) -> None:
    """Advance ``dialogues`` in lockstep until each ends (closing token or hard cut).

    Each step sends one :class:`~generation.backends.base.TurnRequest` per active dialogue in one
    ``backend.generate`` call. The dialogues are changed in place (``turns``, ``n_system``,
    ``done``, ``end_reason``, ...); a replayed fork that ends before its fork turn falls back to
    D+'s prefix and goes on.

    Args:
        dialogues: the dialogues to advance; those already ``done`` are left alone.
        backend: the backend that writes every turn.
        uses_messages: whether to keep chat contexts (role prompts, injections, wrap-up) for the
            backend; ``None`` (default) reads ``backend.uses_messages`` (``True`` when absent).
        on_step: called after each ``backend.generate`` call with the number of utterances it
            wrote (a progress bar's per-turn update); ``None`` (default): nothing is called.

    Raises:
        RuntimeError: the backend returned a different number of utterances than requests, or an
            utterance that is not a ``str``.
    """
    if uses_messages is None:
        uses_messages = getattr(backend, "uses_messages", True)
    end = prompts.END_TOKEN
    for d in dialogues:
        if uses_messages and d.system_messages is None:
            start_messages(d)  # reuse mode: with the copied prefix
    active = [d for d in dialogues if not d.done]
    wrap = prompts.render("wrap_up") if uses_messages else ""
    while active:
        reqs: list[TurnRequest] = []
        for d in active:
            n = len(d.turns)
            if n >= d.budget and not d.wrapped:
                d.wrapped = True
                if uses_messages:
                    d.system_messages.append({"role": "system", "content": wrap})
                    d.user_messages.append({"role": "system", "content": wrap})
            role = "user" if n % 2 == 0 else "system"
            if role == "system" and d.fork is not None and not d.injected and d.n_system + 1 == d.fork.turn:
                d.injected = True
                if uses_messages:
                    d.system_messages.append(injection_message(d.fork))
            elif role == "system" and d.injected and d.pending and d.n_system + 1 == d.pending[0].turn:
                d.applied.append(d.fork)  # a compound fork's next injection
                d.fork = d.pending.pop(0)
                if d.fork.substitute_task:
                    d.substitute = d.substitutes[d.fork.substitute_task]
                if uses_messages:
                    d.system_messages.append(injection_message(d.fork))
            msgs = (
                (list(d.system_messages) if role == "system" else list(d.user_messages))
                if uses_messages
                else []
            )
            reqs.append(TurnRequest(d.key, role, msgs, d.seed, n, d))
        texts = backend.generate(reqs)
        if len(texts) != len(reqs):
            raise RuntimeError(
                f"backend {backend.name!r} returned {len(texts)} utterances for {len(reqs)} requests"
            )
        if on_step is not None:
            on_step(len(reqs))
        still: list[Dialogue] = []
        for d, req, text in zip(active, reqs, texts):
            if text.__class__ is not str:
                raise RuntimeError(
                    f"backend {backend.name!r} returned a {type(text).__name__} for {d.key} "
                    f"turn {req.turn_index}"
                )
            closing = end in text
            if closing:
                text = text.replace(end, "")
            text = text.strip()
            if not text:
                text = "..." if not closing else ("Goodbye." if req.role == "system" else "Bye.")
            if uses_messages:
                _append_turn(d, req.role, text, True)
            else:
                d.turns.append({"speaker": req.role, "text": text})
                if req.role == "system":
                    d.n_system += 1
            if closing:
                d.done, d.end_reason = True, f"{req.role} closed"
            elif len(d.turns) >= d.cut:
                d.done, d.end_reason = True, "cut"
            if d.done and d.fork is not None and not d.injected:
                _fallback_to_reuse(d, uses_messages)
            if not d.done:
                still.append(d)
        active = still


def _fallback_to_reuse(d: Dialogue, uses_messages: bool) -> None:
    """A replayed fork ended before its fork turn (an LLM drifted): copy D+'s prefix instead."""
    logger.warning(
        "%s: replayed prefix ended before system turn %d; falling back to D+'s prefix", d.key, d.fork.turn
    )
    ref = d.reference
    cut = system_turn_to_position(ref.turns, d.fork.turn)
    d.turns = [dict(t) for t in ref.turns[:cut]]
    d.n_system = sum(1 for t in d.turns if t["speaker"] == "system")
    d.done, d.wrapped, d.end_reason, d.replay_fallback, d.prefix_len = False, False, "", True, cut
    d.scratch = {}
    if uses_messages:
        start_messages(d)


#: The number of turns before system turn t (1-based): :func:`dialfork_dataset.forks.system_turn_to_position`.
prefix_positions = system_turn_to_position

__all__ = [
    "Dialogue",
    "ForkSpec",
    "init_messages",
    "injection_message",
    "prefix_positions",
    "run_dialogues",
    "service_name",
    "start_messages",
]
