"""A conformant turn: the user's (:func:`user_turn`) and the system's (:func:`system_turn`).

Once a fork's hallucination plan is in force the user reacts to it (:mod:`.realise`)."""

from __future__ import annotations

from typing import Any

from ...prompts import END_TOKEN
from ...seeds import Rng
from .acts import answer_slot, criteria_reply, enter_node, goodbye, user_line
from .data import BAD_OUTCOME, GENERIC_NODES
from .realise import hal_user_turn
from .sim import Sim, trivia_answer


def user_turn(sim: Sim, d: Any, rng: Rng) -> str:
    """The user's next turn: a reply to the system's last node (``sim.prev``).

    Greets first, states the request at the start node, answers questions, yes/no and trivia
    questions, sometimes chats off-topic once, closes at ``anything_else``, says a wrap-up line at
    the budget, and reacts to a fork's plan once it is in force (:func:`.realise.hal_user_turn`).
    Sets ``sim.answer`` (what the system's next transition follows).

    Args:
        sim: the dialogue's simulator.
        d: the engine's :class:`~generation.engine.dialogue.Dialogue` (its ``wrapped`` and
            ``turns`` are read).
        rng: the turn's random stream.

    Returns:
        The utterance; after the wrap-up it ends with :data:`~generation.prompts.END_TOKEN`.
    """
    m, data = sim.m, sim.data
    sim.answer = None
    if d.wrapped:
        return user_line(data, "wrap", rng) + " " + END_TOKEN
    n_turns = len(d.turns)
    if n_turns == 0:
        return user_line(data, "greeting", rng)
    prev = sim.prev
    if sim.hal is not None and sim.hal.closing == 0 and sim.hal.pos > 0:
        return hal_user_turn(sim, d, rng)
    if n_turns == sim.chat_at and prev not in (m.start, m.anything_else):
        sim.answer = "chat"
        return user_line(data, "chit_chat", rng)
    if prev == m.start:
        return user_line(data, "request", rng, p=sim.m.request)
    if prev == m.anything_else:
        sim.answer = "close"
        return user_line(data, "close", rng)
    if prev in m.is_search_more:
        if sim.n_more == 0 and not sim.scenario_happy and rng.below(3) == 0:
            sim.n_more += 1
            sim.answer = "yes"
            return user_line(data, "more_yes", rng)
        sim.answer = "no"
        return user_line(data, "more_no", rng)
    kids = m.children.get(prev) or ()
    if "correct" in kids:  # trivia question
        known = sim.trivia_i in sim.trivia_known
        r = rng.below(4)
        if known or r < 2:
            sim.answer = "correct"
            return trivia_answer(sim, sim.trivia_i).capitalize() + "."
        if r == 2:
            sim.answer = "noanswer"
            return "I don't know."
        sim.answer = "incorrect"
        return trivia_answer(sim, sim.trivia_i + 3).capitalize() + "?"
    if "done" in kids and "yes" not in kids:  # trivia: continue playing?
        if sim.trivia_n > 1:
            sim.trivia_n -= 1
            sim.answer = "yes"
            return user_line(data, "yes", rng)
        sim.answer = "no"
        return user_line(data, "more_no", rng)
    if "done" in kids:  # trip step
        route = sim.trip_route or ([], [])
        if sim.trip_i >= len(route[0]):
            sim.answer = "done"
            return user_line(data, "trip_done", rng)
        if rng.below(4) == 0:
            sim.answer = "no"
            return user_line(data, "trip_no", rng)
        sim.answer = "yes"
        return user_line(data, "trip_yes", rng)
    if "yes" in kids:
        if prev in ("meeting_inform_unavailable_ask_different_time",) or "different" in prev:
            if sim.n_no_confirm == 0:
                sim.n_no_confirm += 1
                sim.answer = "yes"
                if m.identity is not None:
                    sim.rejected.add("StartTimeHour" if "StartTimeHour" in m.slots else m.identity.name)
                return user_line(data, "yes", rng)
            sim.answer = "no"
            return user_line(data, "no", rng)
        if not sim.scenario_happy and sim.n_no_confirm == 0 and rng.below(3) == 0:
            sim.n_no_confirm += 1
            sim.answer = "no"
            if m.identity is not None:
                sim.rejected.add(m.identity.name)
            return user_line(data, "no", rng)
        sim.answer = "yes"
        return user_line(data, "yes", rng)
    if prev in m.ask_slot:
        return answer_slot(sim, prev, m.ask_slot[prev], rng)
    if prev in m.confirms:
        sim.answer = "yes"
        return user_line(data, "yes", rng)
    if prev == "out_of_scope":
        return user_line(data, "request", rng, p=m.request)
    if (
        prev is not None
        and "search_criteria" in prev
        or (prev is not None and prev.endswith("request_optional"))
    ):
        return criteria_reply(sim, rng)
    return user_line(data, "ack_bad" if prev is not None and BAD_OUTCOME.search(prev) else "ack", rng)


def system_turn(sim: Sim, d: Any, rng: Rng, seed: int) -> str:
    """The system's next conformant turn: the next node of the task graph, said.

    After an off-topic user turn it says the ``out_of_scope`` reply and repeats its pending
    question; after the wrap-up, or when the graph has no next node, it says goodbye. The node is
    recorded in ``sim.trace``.

    Args:
        sim: the dialogue's simulator.
        d: the engine's :class:`~generation.engine.dialogue.Dialogue` (its ``wrapped`` is read).
        rng: the turn's random stream (picks phrasings and values).
        seed: the dialogue seed; it keys the outcome of query nodes
            (:meth:`Sim.transition`).

    Returns:
        The utterance; a goodbye ends with :data:`~generation.prompts.END_TOKEN`.
    """
    m = sim.m
    if d.wrapped:
        sim.trace.append(m.bye or "bye")
        return goodbye(sim, rng) + " " + END_TOKEN
    if sim.answer == "chat":
        sim.answer = None
        sim.trace.append("out_of_scope")
        # the out-of-scope reply, then the pending question again
        text = sim.realise("out_of_scope", rng) if "out_of_scope" in m.phr else "Sorry?"
        if sim.prev is not None and sim.prev in m.phr and sim.prev not in GENERIC_NODES:
            if not text.endswith((".", "?", "!")):
                text += "."
            text += " " + sim.realise(sim.prev, rng)
        return text
    node = sim.transition(seed)
    if node is None:
        sim.trace.append("bye")
        return goodbye(sim, rng) + " " + END_TOKEN
    sim.prev = node
    sim.visits[node] = sim.visits.get(node, 0) + 1
    sim.trace.append(node)
    enter_node(sim, node, rng)
    text = sim.realise(node, rng)
    if node == m.bye or "bye" in node:
        return text + " " + END_TOKEN
    return text


__all__ = ["system_turn", "user_turn"]
