"""The dialogue acts both agents share: the user's lines from the phrasing pools, slot answers, and the
system's bookkeeping when it says a node (:func:`enter_node`) or says goodbye."""

from __future__ import annotations

import re
from typing import Any

from ...seeds import Rng, stable_seed
from .data import FREE_TEXT_KEYS, pick_phrasing
from .model import Slot
from .sim import Sim
from .values import find_category


def user_line(data: dict[str, Any], key: str, rng: Rng, **kw: str) -> str:
    """A user utterance from the phrasing pool ``data["user"][key]``, its placeholders filled.

    Args:
        data: the template data (:func:`~generation.backends.template.data.load_template_data`).
        key: the pool's name under ``user`` (e.g. ``"greeting"``, ``"answer"``, ``"yes"``).
        rng: the turn's random stream; one draw picks the phrasing
            (:func:`~generation.backends.template.data.pick_phrasing`).
        **kw: values for the template's ``{name}`` fields; each loses its trailing periods.

    Returns:
        The chosen phrasing, as is when no ``kw`` is given, else formatted with doubled
            punctuation (``..``, ``.?``, ``.,``) tidied.
    """
    pool = data["user"][key]
    text = pool[pick_phrasing(rng, len(pool))]
    if not kw:
        return text
    text = text.format(**{k: v.rstrip(".") for k, v in kw.items()})
    return text.replace("..", ".").replace(".?", "?").replace(".,", ",")


def answer_slot(sim: Sim, node: str, slot: Slot | None, rng: Rng) -> str:
    """The user's answer to the system's ask node ``node`` for ``slot``; records it in ``sim.given``
    (when there is a slot).

    A slot the user does not know gets a line of the ``unknown`` pool (and sets
    ``sim.unknown_pending``); a
    categorical slot the user rejected earlier is answered with another category (which becomes the
    goal).

    Args:
        sim: the dialogue's simulator (goal values, given values).
        node: the ask node just said by the system.
        slot: the slot the node asks for; ``None`` when no slot matches (an invented free-text
            value is given).
        rng: the turn's random stream.

    Returns:
        The user's utterance: a bare value (long/free-text slots, sometimes without a slot), a
            yes/no line (boolean slots), or a phrasing from the ``answer`` pool around the value.
    """
    data = sim.data
    m = sim.m
    if slot is None:
        r = m.ask_readable.get(node, "details")
        v = invent_free(r, rng, data)
        return user_line(data, "answer", rng, v=v, r=r) if rng.below(2) else v
    readable = m.ask_readable.get(node) or slot.readable
    if slot.name in sim.unknown and slot.name not in sim.given:
        sim.unknown_pending = True
        sim.given[slot.name] = "?"
        return user_line(data, "unknown", rng, r=readable)
    v = sim.goal.get(slot.name, "")
    if slot.name in sim.rejected and slot.type == "cat":
        others = [c for c in slot.categories if c != v]
        if others:
            v = others[rng.below(len(others))]
            sim.goal[slot.name] = v
    sim.given[slot.name] = v
    if slot.type == "bool":
        return user_line(data, "yes" if v == "yes" else "no", rng)
    if slot.type == "long" or slot.free != "generic":
        return v
    return user_line(data, "answer", rng, v=v, r=readable)


def invent_free(readable: str, rng: Rng, data: dict[str, Any]) -> str:
    """An invented free-text value for a question about ``readable``.

    Args:
        readable: the readable name of what is asked (e.g. ``"symptoms"``).
        rng: the turn's random stream.
        data: the template data; its ``free_text`` pools are used.

    Returns:
        An entry of the ``free_text`` pool of the first :data:`FREE_TEXT_KEYS` key contained in
            ``readable``, else of the ``generic`` pool.
    """
    for key, k in FREE_TEXT_KEYS:
        if key in readable:
            return rng.choice(data["free_text"][k])
    return rng.choice(data["free_text"]["generic"])


def criteria_reply(sim: Sim, rng: Rng) -> str:
    """The user's reply to an 'I can filter by ...' message: one or two of its constraints.

    Picks a categorical, integer or boolean slot not given yet (else any categorical or integer one)
    and records its goal value in ``sim.given``.

    Args:
        sim: the dialogue's simulator.
        rng: the turn's random stream.

    Returns:
        A line of the ``criteria`` pool naming the constraint, or of the ``ack`` pool when the task
            has no such slot.
    """
    m = sim.m
    cands = [s for s in m.slots.values() if s.type in ("cat", "int", "bool") and s.name not in sim.given]
    if not cands:
        cands = [s for s in m.slots.values() if s.type in ("cat", "int")]
    if not cands:
        return user_line(sim.data, "ack", rng)
    s = cands[rng.below(len(cands))]
    v = sim.goal.get(s.name, "")
    sim.given[s.name] = v
    if s.type == "bool":
        phrase = s.readable.replace("has ", "a ") if v == "yes" else f"no {s.readable.replace('has ', '')}"
    elif s.type == "int":
        phrase = f"{s.readable} {v}"
    else:
        phrase = v
    return user_line(sim.data, "criteria", rng, v=phrase)


def _pool_value(pool: list[str], text: str, readable: str) -> tuple[bool, str | None]:
    """Whether ``text`` is a line of ``pool`` (its ``{r}`` the readable slot name), and the ``{v}``
    it holds (None when the line has no ``{v}``). Bare ``"{v}"`` lines are left out."""
    for p in sorted((p for p in pool if p.strip() != "{v}"), key=len, reverse=True):
        pat = (
            re.escape(p)
            .replace(re.escape("{r}"), re.escape(readable))
            .replace(re.escape("{v}"), "(?P<v>.+?)")
        )
        mm = re.fullmatch(pat, text, re.I)
        if mm:
            return True, (mm.group("v").strip() if "v" in mm.groupdict() else None)
    return False, None


def read_answer(sim: Sim, node: str | None, text: str) -> str | None:
    """The system's reading of the user's reply to ask node ``node``: the slot value it states,
    recorded in ``sim.given`` (so the templates the system says later, e.g. a forecast's
    ``{day}`` and ``{city}``, fill in what the user asked for). The inverse of
    :func:`answer_slot`: a categorical slot's value is the category the reply names, another
    slot's the ``{v}`` of the ``answer`` pool line the reply is, else the whole reply.

    Args:
        sim: the dialogue's simulator (its model's ask nodes and slots, its phrasing pools).
        node: the node the system said last (None, or a node asking no slot: nothing is read).
        text: the user's reply.

    Returns:
        The value recorded, or None when nothing was read: ``node`` asks no slot, the reply is
        off-topic chat or says the value is not known, or it names none of a categorical slot's
        categories.
    """
    slot = sim.m.ask_slot.get(node) if node is not None else None
    t = " ".join(str(text).split())
    if slot is None or not t:
        return None
    users = sim.data["user"]
    readable = sim.m.ask_readable.get(node) or slot.readable
    for key in ("chit_chat", "unknown"):
        if _pool_value(list(users.get(key, ())), t, readable)[0]:
            return None
    if slot.type == "bool":
        low = t.lower()
        v = (
            "yes"
            if any(low == y.lower() for y in users["yes"])
            else "no"
            if any(low == n.lower() for n in users["no"])
            else None
        )
    elif slot.type == "cat" and slot.categories:
        v = find_category(slot.categories, t)
    else:
        found, v = _pool_value(list(users["answer"]), t, readable)
        if not found:
            v = t
    if v:
        sim.given[slot.name] = v
    return v or None


def enter_node(sim: Sim, node: str, rng: Rng) -> None:
    """Bookkeeping when the system says ``node`` (trip step, trivia question counters).

    Updates ``sim`` in place: at a trivia question, the question number, count and the questions
    the user knows; at a trip step, the route (chosen once) and the step counter.

    Args:
        sim: the dialogue's simulator.
        node: the node the system is saying.
        rng: the turn's random stream (not drawn from: the counters are deterministic).
    """
    m = sim.m
    kids = m.children.get(node) or ()
    if "correct" in kids:
        if sim.trivia_i == 0:
            q = sim.goal.get("QuestionNum")
            sim.trivia_i = int(q) if q and q.isdigit() else 1
            mm = re.search(r"play (\d+) questions", sim.user_task)
            sim.trivia_n = int(mm.group(1)) if mm else 3
            sim.trivia_known = {int(x) for x in re.findall(r"\((\d+)\)", sim.user_task)}
        else:
            sim.trivia_i += 1
    if "done" in kids and "yes" in kids:
        if sim.trip_route is None:
            mode = (sim.goal.get("TravelMode") or "").replace(" ", "")
            routes = m.routes.get(mode) or next(iter(m.routes.values()), [([], [])])
            sim.trip_route = routes[stable_seed(sim.user_task) % len(routes)]
        sim.trip_i += 1


def goodbye(sim: Sim, rng: Rng) -> str:
    """The system's goodbye.

    Args:
        sim: the dialogue's simulator.
        rng: the turn's random stream (picks the phrasing).

    Returns:
        The task's goodbye node said (:meth:`Sim.realise`), or ``"Thank you and goodbye."`` when the
            task has none. The closing token is not added.
    """
    m = sim.m
    if m.bye:
        return sim.realise(m.bye, rng)
    return "Thank you and goodbye."


__all__ = [
    "answer_slot",
    "criteria_reply",
    "enter_node",
    "goodbye",
    "invent_free",
    "read_answer",
    "user_line",
]
