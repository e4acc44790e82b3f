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
