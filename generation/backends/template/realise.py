"""Saying a fork's hallucination plan: the system's hallucinated turns and the user's reactions."""

from __future__ import annotations

from typing import Any

from ...prompts import END_TOKEN
from ...seeds import Rng, stable_seed
from .acts import answer_slot, criteria_reply, enter_node, goodbye, invent_free, user_line
from .sim import Sim


def item_and_alternative(sim: Sim, rng: Rng) -> tuple[str, str]:
    s = sim.m.identity
    if s is None:
        return "your request", "a different option"
    v = sim.given.get(s.name) or sim.goal.get(s.name) or ""
    if s.type == "int":
        if not v.isdigit():
            return "your request", "a different option"
        return f"number {v}", f"number {int(v) + 1 + stable_seed(v, sim.m.name) % 9}"
    if not v:
        return "your request", "a different option"
    others = [c for c in s.categories if c != v] or ["a different option"]
    return v, others[stable_seed(v, sim.m.name) % len(others)]


def variant_line(sim: Sim, template: str, rng: Rng) -> str:
    item, alt = item_and_alternative(sim, rng)
    return template.format(name=sim.name or "there", item=item, alt=alt, service=sim.m.service, domain=sim.m.domain,
                           other_service=(sim.hal.sub.m.service if sim.hal and sim.hal.sub else sim.m.service))



def hal_system_turn(sim: Sim, d: Any, rng: Rng, backend: Any) -> str:
    hal = sim.hal
    m = sim.m
    if hal.pos >= len(hal.body):
        # closing: anything_else, then goodbye after the user's reply
        hal.closing += 1
        if hal.closing == 1 and m.anything_else and hal.ask_more:
            sim.prev = m.anything_else
            sim.trace.append(m.anything_else)
            return sim.realise(m.anything_else, rng)
        sim.trace.append(m.bye or "bye")
        return goodbye(sim, rng) + " " + END_TOKEN
    kind, node = hal.body[hal.pos]
    first = hal.pos == 0
    hal.pos += 1
    if kind == "sub":
        sub = hal.sub
        sub.prev = node
        enter_node(sub, node, rng)
        text = sub.realise(node, rng)
        if first and hal.lines:
            bridge = variant_line(sim, hal.lines[rng.below(len(hal.lines))], rng)
            text = f"{bridge} {text}".strip()
        sim.trace.append(f"{sub.m.name}:{node}")
        return text
    if kind == "line":
        sim.trace.append(f"{hal.htype}:line")
        sim.prev = None
        return variant_line(sim, hal.lines[rng.below(len(hal.lines))], rng)
    sim.prev = node
    sim.trace.append(node)
    enter_node(sim, node, rng)
    return sim.realise(node, rng, alt=(kind == "own_alt"))


def hal_user_turn(sim: Sim, d: Any, rng: Rng) -> str:
    hal = sim.hal
    m, data = sim.m, sim.data
    kind, node = hal.body[hal.pos - 1]
    if kind == "sub":
        sub = hal.sub
        r = rng.below(20)
        first = hal.pos == 1
        if node in sub.m.ask_slot and r < (8 if first else 12):
            slot = sub.m.ask_slot[node]
            v = sub.goal.get(slot.name, "") if slot is not None else invent_free(sub.m.ask_readable[node], rng, data)
            return user_line(data, "wic_answer", rng, v=v)
        if not first and r < 15:
            return user_line(data, "ack", rng)
        return user_line(data, "confused", rng, p=m.request)
    if kind == "line":  # the planner says how the user answers its type's lines
        if hal.line_reply is not None:
            return hal.line_reply(sim, hal, rng)
        return user_line(data, "aux_generic", rng)
    # an own-task node (SSPC, GR, CSC)
    prefix = ""
    if node == m.outcome and hal.missing:
        miss = hal.missing.pop(0)
        return user_line(data, "missing", rng, r=m.ask_readable.get(miss, "details"))
    if node in m.is_search_more:
        return prefix + user_line(data, "more_no", rng)
    kids = m.children.get(node) or ()
    if "yes" in kids or "done" in kids or node in m.confirms:
        return prefix + user_line(data, "yes", rng)
    slot = m.ask_slot.get(node)
    if slot is not None and slot.name in sim.given and sim.given[slot.name] != "?":
        v = sim.given[slot.name]
        if slot.type == "long" or slot.free != "generic":
            v = v[:1].lower() + v[1:]
        return prefix + user_line(data, "repeat_given", rng, v=v)
    if hal.chaotic and rng.below(3) == 0:
        return user_line(data, "chaotic", rng)
    if node in m.ask_slot:
        return prefix + answer_slot(sim, node, slot, rng)
    if node == m.start:
        return prefix + user_line(data, "request", rng, p=m.request)
    if "search_criteria" in node or node.endswith("request_optional"):
        return prefix + criteria_reply(sim, rng)
    return prefix + user_line(data, "ack", rng)


__all__ = ["hal_system_turn", "hal_user_turn", "item_and_alternative", "variant_line"]
