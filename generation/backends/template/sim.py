"""The per-dialogue simulator state and its walk over the task graph."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ...seeds import Rng, stable_seed
from .data import (
    DYNAMIC_PLACEHOLDERS,
    NEGATIVE_BRANCHES,
    PERSON_SLOTS,
    PLACEHOLDER,
    POSITIVE_BRANCHES,
    pick_phrasing,
)
from .model import TaskModel
from .values import cached_goal, placeholder_value

if TYPE_CHECKING:
    from .planners import Hal

class Sim:
    """Per-dialogue simulator state (kept in ``Dialogue.scratch['sim']``).

    Args:
        m: the task's model (:class:`~generation.backends.template.model.TaskModel`).
        scenario: the scenario role-played (its ``happy``, ``user_task``, ``user_guide`` and, for a
            workflow file, ``slot_values``).
        seed: the dialogue seed (goal values, knowledge-base facts and the off-topic turn derive
            from it).
        data: the template data (used unless ``m`` carries its own).
        goal_seed_salt: added to ``seed`` for the goal values (default 0; the WIC substitute
            task's simulator uses 1).
    """

    __slots__ = ("m", "data", "goal", "unknown", "given", "kb", "prev", "answer", "trace", "visits",
                 "after_query", "loop", "unknown_pending", "n_more", "n_no_confirm", "trip_i", "trip_route",
                 "trivia_i", "trivia_n", "trivia_known", "chat_at", "hal", "scenario_happy", "rejected",
                 "user_task", "name", "seed")

    def __init__(self, m: TaskModel, scenario: Any, seed: int, data: dict[str, Any], goal_seed_salt: int = 0):
        self.m = m
        self.data = getattr(m, "data", data)
        self.seed = seed
        self.scenario_happy = bool(scenario.happy)
        self.user_task = scenario.user_task or ""
        goal, unknown = cached_goal(m, self.user_task, seed + goal_seed_salt, data)
        self.goal, self.unknown = dict(goal), unknown
        values = getattr(scenario, "slot_values", None)  # a workflow scenario's own values win
        if values:
            self.goal.update({k: v for k, v in values.items() if k in m.slots})
        self.given: dict[str, str] = {}
        self.kb: dict[str, str] = {}
        self.prev: str | None = None
        self.answer: str | None = None
        self.trace: list[str] = []
        self.visits: dict[str, int] = {}
        self.after_query: str | None = None
        self.loop: str | None = None
        self.unknown_pending = False
        self.n_more = 0
        self.n_no_confirm = 0
        self.trip_i = 0
        self.trip_route: tuple[list[str], list[str]] | None = None
        self.trivia_i = 0
        self.trivia_n = 0
        self.trivia_known: set[int] = set()
        r = Rng(seed, 77)
        self.chat_at = (3 + r.below(4)) if (scenario.user_guide and r.below(3) == 0) else -1
        self.hal: Hal | None = None
        self.rejected: set[str] = set()
        person = next((p for p in PERSON_SLOTS if p in self.goal), None)
        self.name = self.goal.get(person, "") if person else ""

    # ---- values
    def value(self, ph: str, rng: Rng, alt: bool = False) -> str:
        """The value of placeholder ``ph``.

        A knowledge-base fact is drawn once per dialogue (seeded by the dialogue seed and the
        placeholder, not the turn) and then reused; dynamic placeholders (trivia questions, trip
        instructions) are drawn from ``rng`` each time.

        Args:
            ph: the placeholder name (without braces).
            rng: the turn's random stream.
            alt: the alternative value (GR's steered outcome) instead of the goal's.

        Returns:
            The value as text.
        """
        if ph in DYNAMIC_PLACEHOLDERS:
            return placeholder_value(self, ph, rng, alt)
        key = ph + ("#alt" if alt else "")
        v = self.kb.get(key)
        if v is None:
            # a knowledge-base fact: seeded by (dialogue, placeholder), not by turn, so that it is the
            # same whenever (and in whichever fork) it is said
            v = placeholder_value(self, ph, Rng(self.seed, zlib.crc32(key.encode())), alt)
            self.kb[key] = v
        return v

    def fill(self, text: str, rng: Rng, alt: bool = False) -> str:
        """``text`` with every ``{placeholder}`` (and ``{placeholder:...}``) replaced by :meth:`value`.

        Args:
            text: a template.
            rng: the turn's random stream.
            alt: fill in alternative values (GR).

        Returns:
            The filled text.
        """
        return PLACEHOLDER.sub(lambda mm: self.value(mm.group(1), rng, alt), text)

    def realise(self, node: str, rng: Rng, alt: bool = False, avoid: str | None = None) -> str:
        """What the system says for ``node``: one of its phrasings, placeholders filled.

        Args:
            node: a node of the task graph.
            rng: the turn's random stream (picks the phrasing).
            alt: fill in alternative values (GR).
            avoid: a text to avoid: when the pick equals it, the first other phrasing that differs
                is said instead (if any).

        Returns:
            The utterance; for a node without phrasing, its name as a sentence
                (``"ask_name"`` -> ``"Ask name."``).
        """
        m = self.m
        phr = m.phr.get(node)
        if not phr:
            return node.replace("_", " ").capitalize() + "."
        text = phr[pick_phrasing(rng, len(phr))] if len(phr) > 1 else phr[0]
        if m.has_ph.get(node):
            text = self.fill(text, rng, alt).replace("the The ", "The ")
        if avoid is not None and text == avoid:
            for p in phr:
                cand = self.fill(p, rng, alt) if m.has_ph.get(node) else p
                if cand != avoid:
                    return cand
        return text

    # ---- graph walk
    def resolve(self, n: str | None, rng_seed: int) -> str | None:
        """Follow query and branch nodes from ``n`` to the next node the system says (at most 20 hops).

        Args:
            n: a node, or ``None``.
            rng_seed: keys the outcome of query nodes (:meth:`kb_outcome`).

        Returns:
            The first node that is neither a query nor a branch, or ``None`` where the graph ends.
        """
        m = self.m
        guard = 0
        while n is not None and m.kinds.get(n) in ("query", "branch") and guard < 20:
            guard += 1
            if m.kinds[n] == "query":
                kids = m.children.get(n)
                q = n
                if kids:
                    b = self.kb_outcome(q, kids, rng_seed)
                    n = m.graph.get(b)
                else:
                    n = m.graph.get(q)
                self.after_query = n if n is not None else self.after_query
            else:
                n = m.graph.get(n)
        return n

    def kb_outcome(self, q: str, kids: Sequence[str], rng_seed: int) -> str:
        """The branch a knowledge-base query ``q`` takes.

        Args:
            q: the query node.
            kids: its branches.
            rng_seed: keys the outcome together with the task, the query and the values given.

        Returns:
            The first branch when ``kids`` lacks a positive or negative one; the positive branch in a
                happy scenario; otherwise positive for two thirds of the hash values, else negative.
        """
        pos = next((k for k in kids if k in POSITIVE_BRANCHES), None)
        neg = next((k for k in kids if k in NEGATIVE_BRANCHES), None)
        if pos is None or neg is None:
            return kids[0]
        if self.scenario_happy:
            return pos
        req = "|".join(f"{k}={v}" for k, v in sorted(self.given.items()))
        return pos if stable_seed(self.m.name, q, req, rng_seed) % 3 else neg

    def transition(self, seed: int) -> str | None:
        """The next node after ``prev`` given the user's ``answer``.

        Args:
            seed: the dialogue seed (query outcomes, :meth:`resolve`).

        Returns:
            The start node first; then the branch the answer selects, or the graph's successor,
                through queries and branches; a loop node again, or ``anything_else``/goodbye where the
                graph ends or a node was said 6 times; ``None`` after goodbye.
        """
        m, prev, ans = self.m, self.prev, self.answer
        if prev is None:
            return m.start
        if prev == m.anything_else or (m.bye and prev == m.bye):
            return m.bye if prev != m.bye else None
        nxt = None
        kids = m.children.get(prev)
        took_branch = False
        if kids:
            if ans in kids:
                b = ans
            elif ans == "no" and "done" in kids:
                b = "done"
            elif ans == "yes" and "yes" not in kids and self.after_query:
                b = None
                nxt = self.after_query
                took_branch = True
            elif not set(kids) & {"yes", "no", "done", "correct", "incorrect", "noanswer"} and self.unknown_pending:
                b = kids[0]
                self.unknown_pending = False
            else:
                b = None
            if b is not None:
                took_branch = True
                if prev in m.loops:
                    self.loop = prev
                nxt = m.graph.get(b)
                if nxt is None and b in ("yes",) and prev in m.loops:
                    nxt = prev
        if not took_branch:
            nxt = m.graph.get(prev)
        nxt = self.resolve(nxt, seed)
        if nxt is None:
            if self.loop is not None and prev != self.loop and self.visits.get(self.loop, 0) < 8:
                nxt = self.loop
            else:
                nxt = m.anything_else or m.bye
        if nxt is not None and self.visits.get(nxt, 0) >= 6:
            nxt = m.anything_else or m.bye
        return nxt


__all__ = ["Sim"]
