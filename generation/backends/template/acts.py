"""The dialogue acts both agents share: the user's lines from the phrasing pools, slot answers, and the
system's bookkeeping when it says a node (:func:`enter_node`) or says goodbye."""

from __future__ import annotations

import re
from typing import Any

from ...seeds import Rng, stable_seed
from .data import FREE_TEXT_KEYS, pick_phrasing
from .model import Slot
from .sim import Sim


def user_line(data: dict[str, Any], key: str, rng: Rng, **kw: str) -> str:
    pool = data["user"][key]
    text = pool[pick_phrasing(rng, len(pool))]
    if not kw:
        return text
    text = text.format(**{k: v.rstrip(".") for k, v in kw.items()})
    return text.replace("..", ".").replace(".?", "?").replace(".,", ",")


def answer_slot(sim: Sim, node: str, slot: Slot | None, rng: Rng) -> str:
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
    for key, k in FREE_TEXT_KEYS:
        if key in readable:
            return rng.choice(data["free_text"][k])
    return rng.choice(data["free_text"]["generic"])


def criteria_reply(sim: Sim, rng: Rng) -> str:
    """The user's reply to an 'I can filter by ...' message: one or two of its constraints."""
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




def enter_node(sim: Sim, node: str, rng: Rng) -> None:
    """Bookkeeping when the system says ``node`` (trip step, trivia question counters)."""
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
    m = sim.m
    if m.bye:
        return sim.realise(m.bye, rng)
    return "Thank you and goodbye."


__all__ = ["answer_slot", "criteria_reply", "enter_node", "goodbye", "invent_free", "user_line"]
