"""The ``template`` simulated user of the audit: the template backend's user, driven by what the
audited agent actually says.

The template backend's user (:func:`generation.backends.template.user_turn`) reacts to the
workflow node the system said last (``Sim.prev``). In the audit the system is someone else's
agent, so each agent turn is first mapped to the nearest workflow step: the cosine similarity of
the turn's embedding to the embeddings of every step's surface forms (STAR's response template
and its phrasings from ``wizard_nlu_training_data.md``, ``{placeholders}`` spelled out), the best
step winning when its similarity reaches ``min_similarity`` (ours, default 0.35; below it the turn
is "off-workflow" and the user only acknowledges). The user then answers exactly as the
simulator's user would: the scenario's slot values, STAR's user guide, a polite close.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

DEFAULT_MIN_SIMILARITY = 0.35
"""Nearest-step similarity below which an agent turn maps to no workflow step (ours)."""

_PH = re.compile(r"\{(\w+)(?::[^}]*)?\}")


@dataclass
class StepMatch:
    """The workflow step an agent turn was mapped to.

    Attributes:
        node: The step's name; None when no step is similar enough (off-workflow).
        similarity: The similarity to the nearest step.
    """

    node: str | None
    similarity: float


class StepMatcher:
    """Nearest workflow step of an utterance, per task (surface forms encoded once).

    Args:
        model: The task's workflow model (``TemplateBackend.model(task)``): its steps' surface
            forms (``phr``) are encoded with ``{placeholders}`` spelled out.
        encoder: An object with ``encode(texts)`` returning one (unit-norm) embedding per text,
            the same encoder that embeds the utterances given to :meth:`match`.
        min_similarity: Least cosine similarity for a match; below it the utterance maps to no
            step (off-workflow).

    Raises:
        ValueError: The workflow has no step with a non-empty surface form.
    """

    def __init__(self, model: Any, encoder: Any, min_similarity: float = DEFAULT_MIN_SIMILARITY):
        self.model = model
        self.min_similarity = float(min_similarity)
        forms, owners = [], []
        for node, phr in model.phr.items():
            for p in phr:
                text = _PH.sub(lambda mm: mm.group(1).replace("_", " "), p).strip()
                if text:
                    forms.append(text)
                    owners.append(node)
        if not forms:
            raise ValueError(f"task {model.name!r}: the workflow has no step with a surface form to match")
        self.owners = owners
        self.E = np.asarray(encoder.encode(forms), dtype=np.float64)

    def match(self, embedding: np.ndarray) -> StepMatch:
        """The nearest workflow step of one utterance.

        Args:
            embedding: The utterance's embedding, shape ``(dim,)``, from the matcher's encoder.

        Returns:
            A ``StepMatch``: ``node`` the best step's name (None when its similarity is below
            ``min_similarity``) and ``similarity`` the best dot product (the cosine similarity for
            unit-norm embeddings).
        """
        s = self.E @ np.asarray(embedding, dtype=np.float64).reshape(-1)
        i = int(np.argmax(s))
        sim = float(s[i])
        return StepMatch(self.owners[i] if sim >= self.min_similarity else None, sim)


class AssignerStepMatcher:
    """:class:`StepMatcher`'s interface over the toolkit's node assigner
    (:class:`~dialfork_metrics.task3.workflow.nodes.NodeAssigner`): a turn maps to the step of its
    task's workflow it says, or to none when another task's workflow fits it better, it says nothing
    the workflow says, or it asks nothing while the step is a question (issue 39: the audit, the
    detectors and the guard read turns the same way).

    Args:
        assigner: A fitted ``NodeAssigner`` (all tasks of the audit's source: the rivals).
        task: The audited task.
        model: The task's workflow model (``TemplateBackend.model(task)``), kept for the users.
    """

    def __init__(self, assigner: Any, task: str, model: Any):
        self.assigner = assigner
        self.task = task
        self.model = model
        assigner.task_nodes(task)

    @property
    def min_similarity(self) -> float:
        """The assigner's own-workflow floor."""
        return float(self.assigner.min_similarity)

    def match(self, embedding: np.ndarray, text: str | None = None) -> StepMatch:
        """The step one utterance says (None: off-workflow).

        Args:
            embedding: The utterance's embedding, shape ``(dim,)``.
            text: Its text, when known (a statement is then not taken for a question step).

        Returns:
            A ``StepMatch``: ``node`` (None when rejected) and ``similarity`` (to the best own step).
        """
        a = self.assigner.assign(
            self.task,
            np.asarray(embedding, dtype=np.float64).reshape(1, -1),
            texts=None if text is None else [text],
        )
        return StepMatch(a.nodes[0], float(a.own_similarity[0]))


class TemplateUser:
    """One simulated user per dialogue (the template simulator's ``Sim`` plus the step matcher).

    Args:
        backend: A :class:`~generation.backends.template.TemplateBackend` bound to the workflow
            source.
        task: The task being audited (a task object of the source).
        scenario: The scenario the user plays (its slot values and user guide).
        seed: The dialogue's seed (the user's phrasing draws).
        matcher: The task's :class:`StepMatcher`.
        dialogue: The :class:`generation.engine.Dialogue` being built (the user reads its turns).
    """

    def __init__(
        self, backend: Any, task: Any, scenario: Any, seed: int, matcher: StepMatcher, dialogue: Any
    ):
        from generation.api import Sim

        self.backend = backend
        self.m = backend.model(task)
        self.sim = Sim(self.m, scenario, seed, backend.data)
        self.matcher = matcher
        self.d = dialogue
        self.seed = seed
        self.steps: list[str | None] = []
        """The workflow step each agent turn was mapped to (None: off-workflow)."""
        self.similarities: list[float] = []

    def say(self, turn_index: int) -> str:
        """The user's next turn, as the template simulator's user would say it.

        Args:
            turn_index: The 0-based index of the turn in the dialogue (seeds its draws).

        Returns:
            The user's utterance (it may contain the ``[END]`` token to close the dialogue).
        """
        from generation.api import Rng, user_turn

        return user_turn(self.sim, self.d, Rng(self.seed, turn_index))

    def hear(self, text: str, embedding: np.ndarray, turn_index: int) -> StepMatch:
        """Map the agent's turn to a workflow step and update the simulator as if it had said it.

        Args:
            text: The agent's turn (unused by the template user; kept for the users' common
                interface).
            embedding: The turn's embedding, shape ``(dim,)``.
            turn_index: The 0-based index of the turn in the dialogue.

        Returns:
            The turn's ``StepMatch`` (also appended to :attr:`steps` and :attr:`similarities`).
        """
        from generation.api import GENERIC_NODES, Rng, enter_node

        mt = (
            self.matcher.match(embedding, text)
            if isinstance(self.matcher, AssignerStepMatcher)
            else self.matcher.match(embedding)
        )
        self.steps.append(mt.node)
        self.similarities.append(mt.similarity)
        sim = self.sim
        if mt.node is None:
            sim.prev = None
        elif mt.node == "out_of_scope" and sim.answer == "chat":
            sim.trace.append("out_of_scope")  # the pending question stays pending
        else:
            sim.prev = mt.node
            sim.visits[mt.node] = sim.visits.get(mt.node, 0) + 1
            sim.trace.append(mt.node)
            if mt.node not in GENERIC_NODES:
                enter_node(sim, mt.node, Rng(self.seed, turn_index))
        sim.answer = None
        return mt

    def is_goodbye(self, node: str | None) -> bool:
        """Whether a matched step closes the dialogue.

        Args:
            node: A step name from :meth:`hear` (None: off-workflow).

        Returns:
            True for the workflow's goodbye step or any step whose name contains ``bye``.
        """
        return node is not None and (node == self.m.bye or "bye" in node)


def step_coverage(steps: list[str | None], model: Any, done: Any = None) -> dict[str, Any]:
    """Step coverage of one dialogue against the task's happy path (ours, documented in docs/audit.md).

    ``required``: the happy path's content steps (no greeting, "anything else", goodbye);
    ``visited``/``skipped``: required steps the agent did / did not say; ``repeated``: agent turns
    saying a content step already said, except what the workflow itself makes the agent say again:
    an immediate re-ask (the same step as the agent's previous turn: a clarification after a reply
    that did not answer), a step of a loop the workflow took (after a step with a branch back to an
    earlier step, e.g. a booking the user rejected sends the agent back to its first question: the
    steps from that question to the rejected one may be said again) and STAR's own loop steps;
    ``out_of_order``: descents in the happy-path order of the first visits; ``off_workflow``: turns
    mapped to no step; ``coverage``: visited / required.

    Args:
        steps: The workflow step of each agent turn, in order (None: off-workflow), as
            :attr:`TemplateUser.steps`.
        model: The task's workflow model (``TemplateBackend.model(task)``).
        done: The steps the dialogue state says were done (a question answered, an outcome said
            once the slots it requires were filled: :func:`~dialfork_metrics.task3.workflow.state.run_state`);
            a step said but not done counts as skipped. None: every step said counts.

    Returns:
        A dict with ``required`` (int), ``visited`` (int), ``skipped`` (list of step names, in
        happy-path order), ``repeated`` (int), ``out_of_order`` (int), ``off_workflow`` (int),
        ``coverage`` (float in [0, 1]; 1.0 when nothing is required) and ``reached_outcome``
        (bool: the workflow's outcome step was said).
    """
    from generation.api import GENERIC_NODES

    skip = {model.start, model.anything_else, model.bye, *GENERIC_NODES}
    required = [n for n in dict.fromkeys(model.happy_trace) if n not in skip and "bye" not in n]
    order = {n: i for i, n in enumerate(required)}
    seen: set[str] = set()
    firsts: list[str] = []
    repeated = 0
    backs = _loop_backs(model)
    last: dict[str, int] = {}  # step -> index of its latest turn
    prev: str | None = None
    for i, n in enumerate(steps):
        if n is None or n in skip or "bye" in n:
            prev = n
            continue
        if n in seen:
            looped = any(
                last.get(p, -1) >= last[n] and n in body for p, body in backs.items()
            )  # a loop-back step was said since n was (or n is one): the workflow went round its loop
            if n != prev and not looped and n not in model.loops and n not in model.is_search_more:
                repeated += 1
        else:
            seen.add(n)
            if n in order:
                firsts.append(n)
        last[n] = i
        prev = n
    if done is not None:
        seen &= set(done) | {n for n in seen if n not in order}
    visited = [n for n in required if n in seen]
    out_of_order = sum(1 for a, b in zip(firsts, firsts[1:]) if order[b] < order[a])
    return {
        "required": len(required),
        "visited": len(visited),
        "skipped": [n for n in required if n not in seen],
        "repeated": repeated,
        "out_of_order": out_of_order,
        "off_workflow": sum(1 for n in steps if n is None),
        "coverage": len(visited) / len(required) if required else 1.0,
        "reached_outcome": model.outcome is not None and model.outcome in seen,
    }


def _loop_backs(model: Any) -> dict[str, set[str]]:
    """``{step: loop body}`` of the workflow's backward branches: a step whose branch leads (through
    queries and branches) back to an earlier step of the happy path, and the happy-path steps from that
    earlier step to it (doctor_schedule: ``doctor_inform_booking_available``, whose ``no`` goes back to
    ``doctor_ask_doctor_name``, has the body from that question to the offer)."""
    trace = list(dict.fromkeys(model.happy_trace))
    pos = {n: i for i, n in enumerate(trace)}
    kinds = getattr(model, "kinds", None) or {}
    graph = getattr(model, "graph", None) or {}
    out: dict[str, set[str]] = {}
    for p, branches in (getattr(model, "children", None) or {}).items():
        if p not in pos:
            continue
        for b in branches:
            t, hops = graph.get(b), 0
            while t is not None and kinds.get(t) in ("query", "branch") and hops < 20:
                t, hops = graph.get(t), hops + 1
            if t in pos and pos[t] <= pos[p]:
                out.setdefault(p, set()).update(trace[pos[t] : pos[p] + 1])
    return out


class UserError(RuntimeError):
    """The LLM user's server failed (after its retries) or gave an empty reply."""


class LLMUser:
    """The ``openai:URL`` simulated user: an LLM behind an OpenAI-compatible server with the
    generator's user prompt (``generation/prompts/user_agent.txt``: STAR's user task and user
    guide; the wrap-up message at the length budget). Agent turns are still mapped to workflow steps
    (for step coverage).

    Args:
        client: The user's client (``chat_one``).
        model: The task's workflow model (its goodbye step).
        matcher: The task's :class:`StepMatcher` (or :class:`AssignerStepMatcher`).
        dialogue: The :class:`generation.engine.Dialogue` being built (its user messages).
        seed: The dialogue's seed (the user's requests use ``seed + 1``).
        sampling: The user's sampling parameters.
    """

    def __init__(
        self,
        client: Any,
        model: Any,
        matcher: StepMatcher,
        dialogue: Any,
        seed: int,
        sampling: dict[str, Any],
    ):
        self.client = client
        self.m = model
        self.matcher = matcher
        self.d = dialogue
        self.seed = seed
        self.sampling = sampling
        self.messages = list(dialogue.user_messages)
        self.wrapped = False
        self.steps: list[str | None] = []
        self.similarities: list[float] = []

    def say(self, turn_index: int) -> str:
        """The user's next turn, from the LLM (the wrap-up message is added once the budget is reached).

        Args:
            turn_index: The 0-based index of the turn in the dialogue.

        Returns:
            The user's utterance (it may contain the ``[END]`` token to close the dialogue).

        Raises:
            UserError: The server failed (after its retries) or the reply is empty.
        """
        from generation.api import END_TOKEN, EndpointError, render_prompt

        if self.d.wrapped and not self.wrapped:
            self.wrapped = True
            self.messages.append({"role": "system", "content": render_prompt("wrap_up")})
        try:
            rep = self.client.chat_one(self.messages, (self.seed + 1) % (2**31), None, **self.sampling)
        except EndpointError as e:
            raise UserError(f"simulated user: {e}") from None
        text = (rep.text or "").strip()
        if not text.replace(END_TOKEN, "").strip():
            raise UserError(f"simulated user: empty reply at turn {turn_index}")
        self.messages.append({"role": "assistant", "content": text.replace(END_TOKEN, "").strip()})
        return text

    def hear(self, text: str, embedding: np.ndarray, turn_index: int) -> StepMatch:
        """Map the agent's turn to a workflow step and add it to the user's history.

        Args:
            text: The agent's turn.
            embedding: The turn's embedding, shape ``(dim,)``.
            turn_index: The 0-based index of the turn in the dialogue (unused; kept for the users'
                common interface).

        Returns:
            The turn's ``StepMatch`` (also appended to ``steps`` and ``similarities``).
        """
        mt = (
            self.matcher.match(embedding, text)
            if isinstance(self.matcher, AssignerStepMatcher)
            else self.matcher.match(embedding)
        )
        self.steps.append(mt.node)
        self.similarities.append(mt.similarity)
        self.messages.append({"role": "user", "content": text})
        return mt

    def is_goodbye(self, node: str | None) -> bool:
        """Whether a matched step closes the dialogue.

        Args:
            node: A step name from :meth:`hear` (None: off-workflow).

        Returns:
            True for the workflow's goodbye step or any step whose name contains ``bye``.
        """
        return node is not None and (node == self.m.bye or "bye" in node)
