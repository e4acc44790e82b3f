"""The user's goal values: read from the scenario text, invented where it gives none.

The values the system fills into its templates (knowledge-base facts, trivia, trip instructions)
follow the simulator's state: :func:`~generation.backends.template.sim.placeholder_value`."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ...seeds import Rng
from .data import PERSON_SLOTS
from .model import Slot, TaskModel


def find_category(cats: Sequence[str], text: str) -> str | None:
    """The category mentioned first in ``text`` (whole words, case-insensitive), if any.

    Args:
        cats: The slot's categories.
        text: A scenario text or a user's reply.

    Returns:
        The category found earliest (the longer one at a tie), or None.
    """
    best: tuple[int, str] | None = None
    low = text.lower()
    for c in cats:
        cl = c.lower()
        i = low.find(cl)
        while i >= 0:
            before = low[i - 1] if i > 0 else " "
            after = low[i + len(cl)] if i + len(cl) < len(low) else " "
            if not before.isalnum() and not after.isalnum():
                if best is None or i < best[0] or (i == best[0] and len(c) > len(best[1])):
                    best = (i, c)
                break
            i = low.find(cl, i + 1)
    return best[1] if best else None


_GOAL_CACHE: dict[tuple[int, str, int], tuple[dict[str, str], frozenset[str]]] = {}


def cached_goal(
    m: TaskModel, text: str, seed: int, data: dict[str, Any]
) -> tuple[dict[str, str], frozenset[str]]:
    """Goal values of (task, scenario text, seed); the 17 dialogues of a scenario share them.

    Cached per (task model, text, seed); the cache is emptied when it exceeds 4096 entries.

    Args:
        m: the task's model (its slots).
        text: the scenario's ``user_task`` text, where goal values are read from.
        seed: the seed of the values the text does not give.
        data: the template data (free-text pools).

    Returns:
        ``(goal, unknown)``: slot name -> value (the same dict object on a cache hit: copy it
            before changing it), and the slots the user does not know (e.g. a forgotten PIN).
    """
    key = (id(m), text, seed)
    hit = _GOAL_CACHE.get(key)
    if hit is None:
        if len(_GOAL_CACHE) > 4096:
            _GOAL_CACHE.clear()
        goal, unknown = _goal_values(m, text, seed, data)
        hit = _GOAL_CACHE[key] = (goal, frozenset(unknown))
    return hit


def _goal_values(m: TaskModel, text: str, seed: int, data: dict[str, Any]) -> tuple[dict[str, str], set[str]]:
    rng = Rng(seed, 11)
    goal: dict[str, str] = {}
    unknown: set[str] = set()
    forgot = bool(
        re.search(r"forg|don't remember|do not remember|can't remember|cannot remember", text, re.I)
    )
    names = re.findall(
        r"(?:You are|Your are|You \(|[Yy]our name is|I am) ?([A-Z][a-z]+(?: [A-Z][a-z]+)?)", text
    )
    for s in m.slots.values():
        v: str | None = None
        if s.type == "cat" and s.categories:
            if s.name == "ApplicationFeePaid" or set(c.lower() for c in s.categories) <= {"yes", "no"}:
                v = "No" if re.search(r"not (yet )?paid|haven't paid", text, re.I) else s.categories[0]
            else:
                v = find_category(s.categories, text)
                if s.name == "ArrivalCity" and v is not None and goal.get("DepartureCity") == v:
                    v = None
                if s.name.startswith("End") and v is not None and goal.get("Start" + s.name[3:]) == v:
                    v = None
                if v is None and s.name.startswith("End") and goal.get("Start" + s.name[3:]) in s.categories:
                    i = s.categories.index(goal["Start" + s.name[3:]])
                    v = s.categories[(i + 1 + rng.below(2)) % len(s.categories)]
            if v is None:
                pool = [c for c in s.categories if c not in goal.values()] or list(s.categories)
                v = pool[rng.below(len(pool))]
        elif s.name in PERSON_SLOTS or (s.name == "Name" and s.type == "text"):
            if s.name in ("HostName",) and m.name == "party_rsvp":
                mm = re.search(r"host(?:ed)? (?:is |by )?([A-Z][a-z]+)", text)
                v = mm.group(1) if mm else data["names"][rng.below(len(data["names"]))]
            elif names:
                v = names[0]
            else:
                v = data["names"][rng.below(len(data["names"]))]
            if s.name == "FullName" and " " not in v:
                v = f"{v} {data['surnames'][rng.below(len(data['surnames']))]}"
        else:
            v = _text_value(s, text, rng, data)
            if v is None:
                if s.secret and forgot:
                    unknown.add(s.name)
                v = rng.choice(s.examples) if s.examples else _invent(s, rng, data, goal)
        goal[s.name] = v
    return goal, unknown


_DIGITS = {"PIN": 4, "AccountNumber": 9, "Code": 6, "id": 3, "RoomNumber": 3}

#: Slots whose value the scenario text states in a fixed phrase: the value is the pattern's group 1.
_SLOT_PATTERNS: dict[str, str] = {
    "id": r"\b(?:id|ID|Id)(?: is)? (\d+)",
    "SecurityAnswer1": r"maiden name is (\w+)",
    "SecurityAnswer2": r"pet (?:is|was)(?: called| named)? (\w+)",
    "DateOfBirth": r"(?:date of birth is|born on) ([\d/.\-]+|\w+ \d+(?:st|nd|rd|th)?,? \d{4})",
    "QuestionNum": r"question (\d+)",
    "NumberGuests": r"(\d+) (?:guests|people|persons|friends)",
    "PartySize": r"(\d+) (?:guests|people|persons|friends)",
}


def _text_value(s: Slot, text: str, rng: Rng, data: dict[str, Any]) -> str | None:
    r = re.escape(s.readable)
    if s.name in ("DepartureLocation", "ArrivalLocation"):
        mm = re.search(r"from '?([^'.,]+?)'? to '?([^'.,]+?)'?(?: at|[.,]| by|$)", text)
        if mm:
            return mm.group(1 if s.name.startswith("Departure") else 2).strip()
        return None
    pattern = _SLOT_PATTERNS.get(s.name)
    if pattern is not None:
        mm = re.search(pattern, text)
        return mm.group(1) if mm else None
    if s.type == "long" or s.free != "generic":
        mm = re.search(r"(?:request|reason|message) is:? '?([^'\n]+?)'?(?:\.$|\.\s|$)", text)
        return mm.group(1).strip() if mm else None
    mm = re.search(
        rf"{r}(?: number)? (?:is|:) ?'?([A-Za-z0-9][\w /.-]*?)'?(?:[.,;]\s|[.,;]?$| and )", text, re.I
    )
    if mm:
        return mm.group(1).strip()
    if s.name in _DIGITS:
        mm = re.search(rf"{re.escape(s.name)}\D{{0,12}}(\d+)", text, re.I)
        if mm:
            return mm.group(1)
    return None


def _invent(s: Slot, rng: Rng, data: dict[str, Any], goal: dict[str, str]) -> str:
    n = s.name
    if n in _DIGITS:
        k = _DIGITS[n]
        return str(10 ** (k - 1) + rng.below(9 * 10 ** (k - 1)))
    if s.type == "int":
        lo = s.min if isinstance(s.min, int) else 1
        hi = s.max if isinstance(s.max, int) else max(lo + 9, 10)
        if n in ("NumberGuests", "PartySize"):
            lo, hi = 2, 8
        return str(lo + rng.below(max(hi - lo + 1, 1)))
    if s.type == "bool":
        return "yes" if rng.below(2) else "no"
    if n == "DateOfBirth":
        return f"{1 + rng.below(28):02d}/{1 + rng.below(12):02d}/{1950 + rng.below(50)}"
    if n == "SecurityAnswer1":
        return rng.choice(data["maiden_names"])
    if n == "SecurityAnswer2":
        return rng.choice(data["pets"])
    if "Color" in n:
        used = set(goal.values())
        pool = [c for c in data["colours"] if c not in used] or data["colours"]
        return rng.choice(pool)
    if "Manufacturer" in n:
        return rng.choice(data["manufacturers"])
    if "Location" in n:
        used = set(goal.values())
        pool = [p for p in data["places"] if p not in used] or data["places"]
        return rng.choice(pool)
    free = data["free_text"].get(s.free) or data["free_text"]["generic"]
    return rng.choice(free)


__all__ = ["cached_goal", "find_category"]
