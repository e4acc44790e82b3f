"""The per-dialogue simulator state (:class:`Sim`, with a fork's plan :class:`Hal`), its walk over the
task graph, and the placeholder values it fills in (:func:`placeholder_value`).

The bottom of the template backend's graph above :mod:`.data`, :mod:`.model` and :mod:`.values`:
the acts, turns, planners and realisation import it, and it imports none of them."""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Sequence
from typing import Any

from ...seeds import Rng, stable_seed
from .data import (
    DYNAMIC_PLACEHOLDERS,
    NEGATIVE_BRANCHES,
    PERSON_SLOTS,
    PH_ALIASES,
    PLACEHOLDER,
    POSITIVE_BRANCHES,
    norm_name,
    pick_phrasing,
)
from .model import TaskModel
from .values import cached_goal

Body = list[tuple[str, Any]]


class Hal:
    """A fork's hallucination plan (built at system turn t_k).

    The planner fills :attr:`body` and may set the other fields; :mod:`.realise` then says the body
    step by step (``pos``), then the closing (``closing`` counts its turns).

    Args:
        htype: the hallucination type (a registered type code, :mod:`dialfork_dataset.taxonomy`).
        variant: the fork's :class:`~generation.variants.Variant`; its ``template`` gives
            ``lines`` and ``user_replies``.
        spec: the engine's :class:`~generation.engine.dialogue.ForkSpec` this plan realises
            (default ``None``).
    """

    __slots__ = (
        "htype",
        "variant",
        "body",
        "pos",
        "sub",
        "missing",
        "lines",
        "replies",
        "closing",
        "ask_more",
        "spec",
        "line_reply",
        "chaotic",
    )

    def __init__(self, htype: str, variant: Any, spec: Any = None):
        self.spec = spec
        """The engine's ForkSpec this plan realises (a compound fork's next injection replaces it)."""
        self.htype = htype
        self.variant = variant
        self.body: Body = []
        self.pos = 0
        self.sub: Sim | None = None
        self.missing: list[str] = []
        self.lines: tuple[str, ...] = tuple(variant.template.get("lines", ()) or ())
        self.replies: tuple[str, ...] = tuple(variant.template.get("user_replies", ()) or ())
        self.closing = 0
        self.ask_more = True
        """Whether the closing starts with ``anything_else`` (as D+'s did) or goes straight to goodbye."""
        self.line_reply: Callable[[Sim, Hal, Rng], str] | None = None
        """The user's reply to a ``("line", None)`` step (default: the generic ``aux_generic`` pool)."""
        self.chaotic = False
        """Whether the user now and then protests at steps said out of order."""


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

    __slots__ = (
        "m",
        "data",
        "goal",
        "unknown",
        "given",
        "kb",
        "prev",
        "answer",
        "trace",
        "visits",
        "after_query",
        "loop",
        "unknown_pending",
        "n_more",
        "n_no_confirm",
        "trip_i",
        "trip_route",
        "trivia_i",
        "trivia_n",
        "trivia_known",
        "chat_at",
        "hal",
        "scenario_happy",
        "rejected",
        "user_task",
        "name",
        "seed",
    )

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
        if not alt:  # what the user has said wins over a fact drawn before (a corrected doctor, a city)
            slot = slot_of(self.m, ph)
            if slot is not None and self.given.get(slot.name):
                return self.given[slot.name]
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
            elif (
                not set(kids) & {"yes", "no", "done", "correct", "incorrect", "noanswer"}
                and self.unknown_pending
            ):
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


def placeholder_value(sim: Sim, ph: str, rng: Rng, alt: bool) -> str:
    """The value the system fills in for placeholder ``ph`` of a template.

    Trivia questions/answers and trip instructions follow the simulator's counters; otherwise the
    value the user has given for the matching slot (for a slot the workflow asks the user for, never
    the user's goal: the system knows only what it was told; a slot no step asks is the scenario's
    knowledge-base answer, the goal's); with ``alt``, another category of the identity slot (GR);
    else a knowledge-base value drawn from the field's schema, and generic fallbacks (names, ids,
    plates, statuses, ...).

    Args:
        sim: the dialogue's simulator.
        ph: the placeholder name (without braces).
        rng: the random stream to draw from.
        alt: steer the identity slot to another value (every other placeholder keeps its value).

    Returns:
        The value as text.
    """
    m = sim.m
    data = sim.data
    n = norm_name(ph)
    if ph == "question":
        qs = data["trivia_questions"]
        return qs[(sim.trivia_i - 1) % len(qs)]
    if ph == "answer":
        return trivia_answer(sim, sim.trivia_i)
    if ph in ("simple_instruction", "detailed_instruction"):
        route = sim.trip_route or ([], [])
        steps = route[0] if ph == "simple_instruction" else (route[1] or route[0])
        if not steps:
            return "Head straight on."
        i = min(max(sim.trip_i - 1, 0), len(steps) - 1)
        step = steps[i].strip()
        return step if step.endswith((".", "!", "?")) else step + "."
    if n.startswith("has") and len(n) > 3:
        thing = ph[4:].replace("_", " ")
        val = sim.goal.get("Has" + "".join(w.capitalize() for w in thing.split()))
        yes = (val == "yes") if val is not None else bool(rng.below(2))
        return (
            f"has {'an' if thing[:1] in 'aeiou' else 'a'} {thing}"
            if yes
            else f"does not have {'an' if thing[:1] in 'aeiou' else 'a'} {thing}"
        )
    if ph == "message" or ph == "instructions":
        pool = data["messages"].get(m.name) or data["messages"]["default"]
        return pool[rng.below(len(pool))]
    slot = slot_of(m, ph)
    alias = PH_ALIASES.get(ph)
    if alias is not None and not (getattr(m, "own_slot_names", False) and slot_of(m, ph, use_alias=False)):
        n = norm_name(alias)  # STAR's name for the knowledge-base field
    if slot is not None:
        asked = any(a is slot for a in m.ask_slot.values())
        # a value the system asks the user for is known once said, never read off the user's goal; a
        # slot no step asks (the weather the scenario's knowledge base gives) is the KB's answer
        v = sim.given.get(slot.name) or ("" if asked else sim.goal.get(slot.name, ""))
        if alt and slot is m.identity and slot.categories:
            others = [c for c in slot.categories if c != v]
            if others:
                return others[rng.below(len(others))]
        if v:
            return v
    if alt:  # only the goal's identity slot is steered (GR); every other fact stays as in D+
        return sim.value(ph, rng, False)
    f = m.db_fields.get(n) or next(
        (f for k, f in m.db_fields.items() if k.startswith(n) or k.endswith(n)), None
    )
    if f is not None:
        if f.type == "cat" and f.categories:
            cats = f.categories
            return str(cats[rng.below(len(cats))])
        if f.type == "int":
            lo = f.min if isinstance(f.min, int) else 1
            hi = f.max if isinstance(f.max, int) else lo + 99
            return str(lo + rng.below(max(hi - lo + 1, 1)))
        if f.type == "bool":
            return "yes" if rng.below(2) else "no"
    if n.endswith("name"):
        return rng.choice(data["names"])
    if "plate" in n:
        return f"{chr(65 + rng.below(26))}{chr(65 + rng.below(26))} {100 + rng.below(900)}"
    if n.endswith("id") or "number" in n:
        return str(1000 + rng.below(9000))
    if "status" in n:
        return rng.choice(("on its way", "arriving in 5 minutes", "waiting at the pick-up point"))
    if "instruction" in n:
        return rng.choice(
            (
                "take the medicine twice a day after meals",
                "rest for a week and drink plenty of water",
                "take one pill every morning for ten days",
            )
        )
    if "outcome" in n or "result" in n:
        return rng.choice(("the door is now unlocked", "access granted", "the lock is open"))
    return rng.choice(("the requested one", "as requested", "the one you asked for"))


def slot_of(m: TaskModel, ph: str, use_alias: bool = True) -> Any:
    """The task slot a placeholder stands for, or None.

    STAR's placeholders go through the alias table (:data:`~.data.PH_ALIASES`: ``size`` ->
    ``FloorSquareMeters``). A workflow file's own slot names win (``m.own_slot_names``): its
    ``{size}`` is its ``size`` slot when it has one, and goes through the alias only when it has none.

    Args:
        m: the task's model (its slots and domain).
        ph: the placeholder name (without braces).
        use_alias: also try the alias (default True); False: the placeholder's own name only.

    Returns:
        The slot, or None.
    """
    alias = PH_ALIASES.get(ph)
    names = [norm_name(ph)] if (getattr(m, "own_slot_names", False) or not use_alias or alias is None) else []
    if use_alias and alias is not None:
        names.append(norm_name(alias))
    for n in dict.fromkeys(names):
        stripped = n[len(m.domain) :] if n.startswith(m.domain) and len(n) > len(m.domain) else n
        for s in m.slots.values():
            sn = norm_name(s.name)
            if (
                sn in (n, n + "hour", stripped)
                or (n.endswith("name") and sn == "name" and s.type == "cat")
                or (n.endswith("id") and sn == "id")
            ):
                return s
        if n == "time":
            hit = next(
                (
                    m.slots[k]
                    for k in ("Time", "StartTimeHour", "ArrivalTime", "DepartureTime")
                    if k in m.slots
                ),
                None,
            )
            if hit is not None:
                return hit
    return None


def trivia_answer(sim: Sim, i: int) -> str:
    """The answer to trivia question ``i`` from the task's ``Answer`` knowledge-base field.

    Args:
        sim: the dialogue's simulator (its task's raw KB schema).
        i: the 1-based question number (wraps around the answer list).

    Returns:
        The answer without its ``(n)`` prefix, or ``"I don't know"`` when the KB has no answers.
    """
    ans = None
    for f in sim.m.db_raw:
        if isinstance(f, dict) and f.get("Name") == "Answer":
            ans = f.get("Categories") or []
    if not ans:
        return "I don't know"
    a = str(ans[(i - 1) % len(ans)])
    return re.sub(r"^\(\d+\)\s*", "", a)


__all__ = ["Body", "Hal", "Sim", "placeholder_value", "slot_of", "trivia_answer"]
