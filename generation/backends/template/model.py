"""What the simulator knows about one task: its slots, phrasings, ask nodes and knowledge base.

:class:`TaskModel` is built once per task and process from the workflow source (STAR, or a workflow
file's own surface templates)."""

from __future__ import annotations

import re
from typing import Any

from .data import ASK_ALIASES, CAMEL_WORD, FREE_TEXT_KEYS, PERSON_SLOTS, PLACEHOLDER, SECRET_SLOTS, norm_name


def _clean_phrasing(p: str) -> str:
    return re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", p).strip()


def _plain(p: str) -> bool:
    """An NLU phrasing usable in any dialogue: no proper noun beyond the first word (they name
    hotels/people of some other dialogue), no stray markup."""
    if not p or any(c in p for c in "<>{}#*") or len(p) < 4:
        return False
    words = re.findall(r"[A-Za-z']+", p)[1:]
    return not any(w[0].isupper() and w not in ("I", "I'm", "I'll", "I've", "PIN", "ID") for w in words)


def _swap_person(p: str) -> str:
    repl = {"you": "me", "your": "my", "yours": "mine"}
    return re.sub(r"\b(you|your|yours)\b", lambda m: repl[m.group(1)], p)


class Slot:
    """One API input or knowledge-base field: its kind, categories, range and example values.

    Args:
        spec: the field as STAR (or a workflow file) gives it: ``Name`` (required) and optionally
            ``ReadableName``, ``Type`` (``Categorical``/``Integer``/``Bool``/``LongString``/...,
            mapped to ``cat``, ``int``, ``bool``, ``long`` or ``text``), ``Categories`` (a list, or
            STAR's ``combinations(...)`` string), ``Min``, ``Max`` and ``Examples``.

    Raises:
        KeyError: ``spec`` has no ``Name``.
    """

    __slots__ = ("name", "readable", "type", "categories", "min", "max", "secret", "free", "examples")

    def __init__(self, spec: dict[str, Any]):
        self.name = spec["Name"]
        self.readable = (spec.get("ReadableName") or " ".join(CAMEL_WORD.findall(self.name))).lower()
        t = (spec.get("Type") or "").lower()
        self.type = (
            "cat"
            if t.startswith("cat")
            else "int"
            if t.startswith("int")
            else "bool"
            if t.startswith("bool")
            else "long"
            if t.startswith("long")
            else "text"
        )
        cats = spec.get("Categories") or ()
        if isinstance(cats, str):  # e.g. '!list(combinations(["School", "Park", ...], 2))'
            names = re.findall(r'"([^"]+)"', cats)
            cats = (
                [f"{a} and {b}" for i, a in enumerate(names) for b in names[i + 1 :]]
                if "combinations" in cats
                else names
            )
        self.categories = tuple(str(c) for c in cats if not isinstance(c, (list, dict)))
        self.min, self.max = spec.get("Min"), spec.get("Max")
        self.secret = self.name in SECRET_SLOTS
        low = self.name.lower()
        self.free = next((k for key, k in FREE_TEXT_KEYS if key in low), "generic")
        self.examples = tuple(str(x) for x in spec.get("Examples") or ())
        """Example values (a workflow file's ``examples``) for a user whose scenario gives none."""


class TaskModel:
    """Everything the simulator needs about one task, precomputed once per process.

    Args:
        task: the workflow task (graph, node kinds, branch parents, replies, NLU phrasings, API).
        dbs: the source's knowledge-base schemas by name (the task's API database, else its domain).
        data: the template data (a workflow file's own user acts override its ``user`` pools).
    """

    def __init__(self, task: Any, dbs: dict[str, Any], data: dict[str, Any]):
        self.task = task
        self.name = task.name
        self.domain = task.domain
        self.graph: dict[str, str] = dict(task.graph)
        self.kinds: dict[str, str] = dict(task.kinds)
        self.children: dict[str, list[str]] = {}
        for b, ps in task.branch_parents.items():
            for p in ps:
                self.children.setdefault(p, []).append(b)
        self.start = task.start_node
        #: A workflow file's task (its own slot names win over STAR's placeholder aliases).
        self.own_slot_names = bool(getattr(task, "curated_phrasings", False))
        acts = getattr(task, "user_acts", None)  # a workflow file's own surface templates of user acts
        self.data = {**data, "user": {**data["user"], **acts}} if acts else data
        api = task.api
        self.slots: dict[str, Slot] = {s["Name"]: Slot(s) for s in (api.inputs if api else [])}
        if not any(p in self.slots for p in PERSON_SLOTS) and "ask_name" in task.replies:
            # the workflow asks for the user's name but the API has no such input: simulate one
            self.slots["UserName"] = Slot({"Name": "UserName", "Type": "ShortString", "ReadableName": "Name"})
        self.db_fields: dict[str, Slot] = {}
        db = (dbs.get(api.db) if api and api.db else None) or dbs.get(task.domain)
        if isinstance(db, list):
            for f in db:
                if isinstance(f, dict) and "Name" in f:
                    self.db_fields.setdefault(norm_name(f["Name"]), Slot(f))
        self.db_raw = db if isinstance(db, list) else []
        # phrasings
        self.phr: dict[str, tuple[str, ...]] = {}
        self.has_ph: dict[str, bool] = {}
        for n, k in self.kinds.items():
            if k != "action":
                continue
            tpl = task.template(n) or task.replies.get(n) or ""
            tpl = tpl.replace("\n", " ").replace("  ", " ").strip()
            if not tpl:
                continue
            ph = bool(PLACEHOLDER.search(tpl))
            if getattr(task, "curated_phrasings", False):  # written for the task (workflow file): as they are
                self.phr[n] = (tpl,) + tuple(
                    dict.fromkeys(a.strip() for a in task.nlu.get(n, ()) if a.strip() != tpl)
                )
                self.has_ph[n] = ph or any(PLACEHOLDER.search(a) for a in self.phr[n])
                continue
            alts = (
                () if ph else tuple(x for x in (_clean_phrasing(p) for p in task.nlu.get(n, ())) if _plain(x))
            )
            alts = tuple(a[:1].upper() + a[1:] for a in alts)
            if "bye" in n:
                alts = tuple(a for a in alts if re.search(r"bye|good day|take care", a, re.I))
            elif n == task.start_node:
                alts = tuple(a for a in alts if "want" not in a.lower())
            self.phr[n] = (tpl,) + tuple(dict.fromkeys(a for a in alts if a != tpl))
            self.has_ph[n] = ph
        self.anything_else = "anything_else" if "anything_else" in self.phr else None
        self.confirms = {
            n for n, ph in self.phr.items() if "confirm" in n.split("_") and ph[0].rstrip().endswith("?")
        }
        byes = [n for n in self.phr if "bye" in n]
        no_target = self.graph.get("no")
        self.bye = (
            no_target if no_target and "bye" in no_target else (sorted(byes, key=len)[0] if byes else None)
        )
        # ask nodes -> slots
        self.ask_slot: dict[str, Slot | None] = {}
        self.ask_readable: dict[str, str] = {}
        person = next((self.slots[p] for p in PERSON_SLOTS if p in self.slots), None)
        for n in self.phr:
            words = n.split("_")
            if (
                "ask" not in words
                or "confirm" in words
                or set(self.children.get(n, ())) & {"yes", "no", "done"}
            ):
                continue
            i = words.index("ask")
            key = "_".join(words[i + 1 :])
            self.ask_readable[n] = key.replace("_", " ") or "details"
            slot = None
            for cand in ASK_ALIASES.get(key, ()):
                if cand == "PERSON":
                    slot = person or self.slots.get("Name")
                elif cand in self.slots:
                    slot = self.slots[cand]
                if slot is not None:
                    break
            if slot is None and key:
                toks = set(key.split("_"))
                best = max(
                    self.slots.values(), default=None, key=lambda s: len(toks & set(s.readable.split()))
                )
                if best is not None and toks & set(best.readable.split()):
                    slot = best
            self.ask_slot[n] = slot
        for n, name in (getattr(task, "asks", None) or {}).items():  # explicit (workflow file: ``ask``)
            if n in self.phr and name in self.slots:
                self.ask_slot[n] = self.slots[name]
                self.ask_readable[n] = self.slots[name].readable
        # request phrase from the out_of_scope reply ("I am only able to tell you the weather.")
        oos = task.replies.get("out_of_scope", "")
        m = re.search(r"only able to (.+?)\.?$", oos)
        self.request = _swap_person(m.group(1)) if m else f"help me with {self.name.replace('_', ' ')}"
        if getattr(task, "request", None):
            self.request = task.request
        self.service = self.name.replace("_", " ")
        self.is_search_more = {
            n
            for n, ks in self.children.items()
            if set(ks) >= {"yes", "no"} and "bye" in (self.graph.get("no") or "")
        }
        self.loops = {n for n, ks in self.children.items() if "yes" in ks and self.graph.get("yes") == n}
        self.other_asks = tuple(n for n in task.other_nodes() if n in self.ask_slot and n in self.phr)
        # the slot that identifies what the user wants (GR steers it elsewhere): a categorical slot,
        # else a numeric id (a flight, a ride, a question number)
        self.identity = next(
            (s for s in self.slots.values() if s.type == "cat" and s.name in ("Name", "City", "Day")),
            next(
                (s for s in self.slots.values() if s.type == "cat"),
                next(
                    (
                        s
                        for s in self.slots.values()
                        if s.type == "int" and (s.name == "id" or "Num" in s.name)
                    ),
                    None,
                ),
            ),
        )
        # trip routes (apis/dbs/trip.json): simple steps and their detailed versions per travel mode
        self.routes: dict[str, list[tuple[list[str], list[str]]]] = {}
        for f in self.db_raw:
            if (
                isinstance(f, dict)
                and str(f.get("Name", "")).endswith("Instructions")
                and not str(f.get("Name")).startswith("Detailed")
            ):
                mode = str(f["Name"])[: -len("Instructions")]
                rs = []
                for r in f.get("Categories") or []:
                    if isinstance(r, list):
                        simple = [x for x in r if not x.startswith("#")]
                        detailed = [x[1:] for x in r if x.startswith("#")]
                        rs.append((simple, detailed))
                if rs:
                    self.routes[mode] = rs
        self.happy_trace: tuple[str, ...] = ()
        self.outcome: str | None = None

    def is_ask(self, n: str) -> bool:
        """Whether node ``n`` asks the user for a slot.

        Args:
            n: a node name.

        Returns:
            ``True`` when ``n`` is one of the task's ask nodes.
        """
        return n in self.ask_slot


__all__ = ["Slot", "TaskModel"]
