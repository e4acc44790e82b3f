"""Step roles and slots of a workflow: what each step does to the dialogue state.

A workflow graph says which step may follow which; it does not say that ``weather_inform_forecast``
needs the city. This module derives, for every step of a task, its *roles* (a turn may realise
several steps, and a step several roles: ``meeting_inform_unavailable_ask_different_time`` informs
an outcome and asks a question) and its *slots*: the slots a question step **collects** and the
slots an action, outcome or confirmation step **requires**. The state tracker and the step rules of
the workflow-aware detector (:mod:`dialfork_metrics.task3.workflow.state`) read it.

The rule (SPEC-level, ours; docs/spec.md "Step roles and slots" states it and
docs/step_roles.md lists what it gives on every STAR task):

1. A step's own declaration wins: a workflow file's ``role:``, ``collects:`` and ``requires:``
   (and ``ask:``, which names the one slot a question collects).
2. Roles, from the node's kind and the words of its id:

   * ``query`` nodes are **action** steps (an API call);
   * the start node is the **greeting**;
   * ``anything_else`` and ids with ``bye``/``goodbye`` are **closing** steps;
   * ``out_of_scope`` is the **fallback**;
   * ids with ``confirm`` are **confirmation** steps;
   * ids with ``ask``, or ``request`` not after ``inform``/``provide``, are **question** steps;
   * an action the graph reaches from a query through branch nodes only (``available``,
     ``query_success``...), or whose id says a result (:data:`OUTCOME_WORDS`: ``nothing_found``,
     ``succeeded``, ``unavailable``...), is an **outcome** step (so is one that also asks:
     ``*_inform_answer_correct_ask_next``);
   * any other id with ``inform`` or ``provide`` is an **inform** step (``*_inform_search_criteria``:
     information that is not a result);
   * a step none of these reaches has no role: the task's roles are *incomplete*
     (:attr:`TaskRoles.problems` names it) and a detector keeps its role-free rules for the task.

3. Slots. A question collects the slot its ``ask:`` names, else the words of its id after
   ``ask``/``request`` (``weather_ask_location`` -> ``location``; ``ask_name`` -> ``name``). A step
   whose text is nothing but placeholders (STAR's ``trivia_ask_question``: ``"{question:s}"``) says
   data, whatever its id: an outcome that collects nothing (:func:`says_only_values`). An
   action, outcome or confirmation step requires the slots collected by the question steps that
   *dominate* it in the graph from the start (every path to it passes them: networkx's
   ``immediate_dominators``); a step the graph does not reach (STAR's ``*_nothing_found``) requires
   what every query of the task requires.
5. Offers. An outcome or inform step whose own text names, by a placeholder, a slot that a
   question step collects and that the step does not require *offers* it: the system proposes a
   value ("I found 3 buses; one leaves at {leaving_time}"), and the user's next turn takes the
   offer, which fills the slot as if asked (SGD's offered slots; ``offers`` of :class:`StepRole`).
6. Each slot is matched to the API input it fills (:func:`api_slot_for`), so that its values (the
   API's categories and type) let a tracker see a user volunteer it, and so that STAR's query
   constraints can grade a tracker.
7. A slot's value type (:data:`VALUE_TYPES`: how a tracker recognises its value) is the one a
   workflow file declares (the task's ``slots:``, ``plate_number: {type: text, examples: [AB12 CDE]}``);
   only a slot without a declared type has it guessed from its name and API input
   (:func:`value_type`: ``plate_number`` would be a number).

Pure functions and frozen dataclasses; ``networkx`` is imported where used.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: Every role a step may have.
ROLES: tuple[str, ...] = (
    "greeting",
    "question",
    "confirmation",
    "action",
    "outcome",
    "inform",
    "closing",
    "fallback",
)
#: The value types of a slot (rule 7): how a tracker recognises a value of it in a user turn.
VALUE_TYPES: tuple[str, ...] = ("categorical", "weekday", "time", "date", "number", "name", "boolean", "text")
#: Roles whose step needs the slots collected before it (the skip rule checks them).
REQUIRING_ROLES: frozenset[str] = frozenset({"action", "outcome", "confirmation"})
#: Words of a step id that say it reports a result (rule 2, ours).
OUTCOME_WORDS: frozenset[str] = frozenset(
    {
        "nothing",
        "found",
        "succeeded",
        "successful",
        "successfully",
        "failed",
        "unavailable",
        "available",
        "outcome",
        "result",
        "results",
        "submitted",
        "confirmed",
        "done",
        "status",
        "forecast",
        "balance",
        "instructions",
        "details",
        "correct",
        "incorrect",
        "answer",
        "authenticate",
        "cannot",
    }
)
_QUESTION_WORDS = frozenset({"ask", "request"})
_INFORM_WORDS = frozenset({"inform", "provide"})
#: Slot words and the API input words they are said with (rule 4; ours).
SLOT_SYNONYMS: Mapping[str, tuple[str, ...]] = {
    "location": ("city", "location"),
    "departure": ("departure", "pickup", "from", "start", "origin"),
    "destination": ("destination", "arrival", "dropoff", "to"),
    "size": ("size", "people", "guests", "party", "number"),
    "hotel": ("hotel",),
    "restaurant": ("restaurant",),
    "apartment": ("apartment", "housing"),
    "doctor": ("doctor",),
    "bedrooms": ("rooms", "bedrooms"),
    "number": ("number", "num"),
    "date": ("date", "day"),
    "from": ("from", "start", "check", "in"),
    "to": ("to", "end", "check", "out"),
    "time": ("time", "hour"),
    "pin": ("pin",),
    "dob": ("date", "birth"),
    "symptoms": ("symptoms",),
}
#: API input words that say the slot is the *user's own* name (``ask_name``).
_PERSON_WORDS = frozenset({"patient", "renter", "full", "customer", "user", "guest", "person", "requester"})


def _words(name: str) -> list[str]:
    """The lower-case words of a snake_case or CamelCase name."""
    parts = re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+", name.replace("-", "_"))
    return [p.lower() for p in parts if p]


@dataclass(frozen=True)
class StepRole:
    """What one step does to the dialogue state.

    Attributes:
        node: The step (workflow node).
        roles: Its roles (subset of :data:`ROLES`; empty: none could be derived).
        collects: Slots a question step collects.
        requires: Slots that must be filled before the step is said.
        declared: The roles or slots came from the workflow file, not rule 2/3.
        offers: Slots an outcome or inform step proposes a value for (rule 5): the user's next
            turn takes the offer, which fills them (SGD's offered slots: "One leaves at 8:40 am").
        mentions: The slots its own text names by a placeholder (:func:`placeholders`).
    """

    node: str
    roles: frozenset[str]
    collects: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()
    declared: bool = False
    offers: tuple[str, ...] = ()
    mentions: tuple[str, ...] = ()

    def has(self, role: str) -> bool:
        """Whether the step has ``role``.

        Args:
            role: A role of :data:`ROLES`.

        Returns:
            bool: True when it does.
        """
        return role in self.roles


@dataclass(frozen=True)
class TaskRoles:
    """Roles and slots of every action/query step of one task (:func:`derive_roles`).

    Attributes:
        task: The task's name.
        steps: node -> :class:`StepRole`.
        api_slots: slot -> the API input name it fills (None: no API input matches).
        values: slot -> the values a user may give for it (the API input's categories).
        value_types: slot -> ``"categorical"``, ``"weekday"``, ``"time"``, ``"date"``, ``"number"``,
            ``"name"``, ``"boolean"`` or ``"text"`` (:data:`VALUE_TYPES`: how a tracker recognises a
            volunteered value); declared by a workflow file's ``slots:`` (rule 7), else guessed.
        problems: One line per step whose role could not be derived (empty: complete).
        examples: slot -> example values (the file's ``slots:`` examples, else the API input's
            ``Examples``): what a slot reader may be shown.
        declared_types: The slots whose value type a workflow file declared (not guessed).
        descriptions: slot -> what it holds in words (the file's ``slots:`` description, else the
            API input's ``ReadableName``; absent: none): what a slot reader reads beside the name.
    """

    task: str
    steps: Mapping[str, StepRole]
    api_slots: Mapping[str, str | None] = field(default_factory=dict)
    values: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    value_types: Mapping[str, str] = field(default_factory=dict)
    problems: tuple[str, ...] = ()
    examples: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    declared_types: frozenset[str] = frozenset()
    descriptions: Mapping[str, str] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        """Every step has a role, and the task has a question and an outcome step."""
        return not self.problems

    @property
    def slots(self) -> list[str]:
        """Every slot a question step collects, in step order."""
        return list(dict.fromkeys(s for r in self.steps.values() for s in r.collects))

    def role_of(self, node: str | None) -> StepRole | None:
        """The :class:`StepRole` of ``node`` (None: unknown node or None).

        Args:
            node: A node or None.

        Returns:
            StepRole | None: Its roles and slots.
        """
        return self.steps.get(node) if node is not None else None

    def with_role(self, role: str) -> list[str]:
        """The steps that have ``role``, in step order.

        Args:
            role: A role of :data:`ROLES`.

        Returns:
            list[str]: The nodes.
        """
        return [n for n, r in self.steps.items() if role in r.roles]

    def to_rows(self) -> list[dict[str, Any]]:
        """One JSON-safe row per step (what the docs table and ``describe`` print).

        Returns:
            list[dict[str, Any]]: ``node``, ``roles``, ``collects``, ``requires``, ``declared``.
        """
        return [
            {
                "node": r.node,
                "roles": [x for x in ROLES if x in r.roles],
                "collects": list(r.collects),
                "requires": list(r.requires),
                "declared": r.declared,
            }
            for r in self.steps.values()
        ]


def step_roles_from_name(node: str, kind: str, start: str) -> set[str]:
    """Rule 2 without the graph: the roles a step's kind and id words give.

    Args:
        node: The step's id.
        kind: Its kind (``action``, ``query``, ``branch``).
        start: The task's start node.

    Returns:
        set[str]: The roles (``outcome`` only from :data:`OUTCOME_WORDS`; the graph adds more).

    Example:
        >>> sorted(step_roles_from_name("weather_ask_day", "action", "hello"))
        ['question']
        >>> sorted(step_roles_from_name("trivia_inform_answer_correct_ask_next", "action", "hello"))
        ['outcome', 'question']
        >>> sorted(step_roles_from_name("ride_ask_confirm_booking", "action", "hello"))
        ['confirmation']
        >>> sorted(step_roles_from_name("weather_bye", "action", "hello"))
        ['closing']
    """
    if kind == "query":
        return {"action"}
    words = set(_words(node))
    if node == start:
        return {"greeting"}
    if node == "anything_else" or words & {"bye", "goodbye"}:
        return {"closing"}
    if node == "out_of_scope" or {"out", "scope"} <= words:
        return {"fallback"}
    roles: set[str] = set()
    seq = _words(node)
    # "request" after an inform/provide word names a thing, not a question
    # (hotel_inform_service_request_successful)
    asks_ = "ask" in words or ("request" in words and not set(seq[: seq.index("request")]) & _INFORM_WORDS)
    if "confirm" in words:
        roles.add("confirmation")
    elif asks_:
        roles.add("question")
    if words & OUTCOME_WORDS and not ("question" in roles and not words & _INFORM_WORDS):
        roles.add("outcome")
    if not roles and words & _INFORM_WORDS:
        roles.add("inform")
    return roles


def slot_from_name(node: str) -> str | None:
    """Rule 3's slot of a question step without ``ask:``: the id's words after ``ask``/``request``.

    Args:
        node: The step's id.

    Returns:
        str | None: The slot (``"location"``), or None when the id names none.

    Example:
        >>> slot_from_name("weather_ask_location"), slot_from_name("ask_name")
        ('location', 'name')
        >>> slot_from_name("meeting_inform_unavailable_ask_different_time")
        'different_time'
    """
    words = _words(node)
    idx = [
        i
        for i, w in enumerate(words)
        if w == "ask" or (w == "request" and not set(words[:i]) & _INFORM_WORDS)
    ]
    if not idx:
        return None
    rest = [w for w in words[idx[0] + 1 :] if w != "confirm"]
    return "_".join(rest) or None


def api_slot_for(slot: str, inputs: Sequence[Mapping[str, Any]]) -> str | None:
    """Rule 4: the API input a slot fills, by the words they share (with :data:`SLOT_SYNONYMS`).

    Each input scores the number of the slot's words (and their synonyms) found among the words of
    its ``Name`` and ``ReadableName``; the best input wins, ties broken by the fewest extra words. The
    bare slot ``name`` (``ask_name``: the user's own name) prefers an input naming a person
    (``PatientName``, ``RenterName``, ``FullName``).

    Args:
        slot: The slot (``"start_time"``).
        inputs: The API's inputs (``{"Name", "ReadableName", ...}``).

    Returns:
        str | None: The input's ``Name``, or None when no input shares a word.

    Example:
        >>> api_slot_for("start_time", [{"Name": "Day"}, {"Name": "StartTimeHour"}])
        'StartTimeHour'
        >>> api_slot_for("name", [{"Name": "Name", "ReadableName": "Doctor Name"}, {"Name": "PatientName"}])
        'PatientName'
        >>> api_slot_for("location", [{"Name": "City"}, {"Name": "Day"}])
        'City'
    """
    sw = _words(slot)
    if not sw:
        return None
    best: tuple[float, int, str] | None = None
    for inp in inputs:
        name = str(inp.get("Name") or "")
        iw = set(_words(name)) | set(_words(str(inp.get("ReadableName") or "")))
        if not iw:
            continue
        score = 0.0
        for w in sw:
            if w in iw:
                score += 1.0
            elif set(SLOT_SYNONYMS.get(w, ())) & iw:
                score += 0.75
        if sw == ["name"]:
            if iw & _PERSON_WORDS:
                score += 0.5
            elif len(iw) > 1:
                score -= 0.5
        if score <= 0 or (len(sw) > 1 and score <= len(sw) / 2):
            continue
        key = (score, -len(iw - set(sw)), name)
        if best is None or key[:2] > best[:2]:
            best = key
    return best[2] if best else None


def value_type(slot: str, inp: Mapping[str, Any] | None) -> str:
    """How a tracker recognises a value of ``slot`` in a user turn, guessed (rule 4; a workflow file's
    declared ``type:`` wins over it, rule 7).

    Args:
        slot: The slot.
        inp: Its API input (None: none matched).

    Returns:
        str: ``categorical``, ``weekday``, ``time``, ``date``, ``number``, ``name``, ``boolean`` or
        ``text``.

    Example:
        >>> value_type("day", {"Name": "Day", "Type": "Categorical", "Categories": ["Monday"]})
        'weekday'
        >>> value_type("size", None)
        'number'
    """
    words = set(_words(slot)) | (set(_words(str(inp.get("Name") or ""))) if inp else set())
    typ = str((inp or {}).get("Type") or "")
    if words & {"time", "hour"}:
        return "time"
    if "day" in words:
        return "weekday"
    if words & {"date", "dob", "birth"}:
        return "date"
    if typ == "Boolean":
        return "boolean"
    if typ == "Integer" or words & {"number", "size", "guests", "people", "count", "num"}:
        return "number"
    if typ in ("Categorical", "CategoricalMultiple") and (inp or {}).get("Categories"):
        return "categorical"
    if "name" in words:
        return "name"
    return "text"


def placeholders(task: Any, node: str) -> list[str]:
    """The slots a step's own text names by a placeholder (``{day:s}`` -> ``day``), in order.

    Args:
        task: A workflow task (``template(node)``, ``replies``).
        node: The step.

    Returns:
        list[str]: The placeholder names of its template and its reply label, without repeats.

    Example:
        >>> class T:
        ...     replies = {"offer": "I found {count} buses"}
        ...     def template(self, node): return "One leaves at {leaving_time:s} for {fare}."
        >>> placeholders(T(), "offer")
        ['leaving_time', 'fare', 'count']
    """
    texts = _step_texts(task, node)
    return list(dict.fromkeys(m for t in texts for m in re.findall(r"\{(\w+)", t)))


def _step_texts(task: Any, node: str) -> tuple[str, str]:
    """A step's template text and its reply label (``""`` where the task has none)."""
    template = getattr(task, "template", None)
    return (
        (template(node) if callable(template) else None) or "",
        (getattr(task, "replies", None) or {}).get(node) or "",
    )


def says_only_values(task: Any, node: str) -> bool:
    """Whether a step's text is nothing but placeholders: its words are data read from the API.

    STAR's ``trivia_ask_question`` says ``"{question:s}"``: a different question each time, asked
    by the system rather than collected from the user, so its id's ``ask`` is no question step
    (it collects no slot, and saying it again is the game's next round, not a repeat).

    Args:
        task: A workflow task (``template(node)``, ``replies``).
        node: The step.

    Returns:
        bool: True when the template (else the reply) has a placeholder and no other word.

    Example:
        >>> class T:
        ...     replies = {"ask_question": "{question:s}", "ask_day": "Which day, {name}?"}
        ...     def template(self, node): return None
        >>> says_only_values(T(), "ask_question"), says_only_values(T(), "ask_day")
        (True, False)
    """
    template, reply = _step_texts(task, node)
    text = template or reply
    return bool(re.search(r"\{\w+", text)) and not re.search(r"\w", re.sub(r"\{[^}]*\}", " ", text))


def _declared(task: Any, node: str) -> tuple[str | None, list[str] | None, list[str] | None]:
    role = (getattr(task, "declared_roles", None) or {}).get(node)
    collects = (getattr(task, "declared_collects", None) or {}).get(node)
    requires = (getattr(task, "declared_requires", None) or {}).get(node)
    ask = (getattr(task, "asks", None) or {}).get(node)
    if collects is None and ask:
        collects = [ask]
    return (
        role,
        (list(collects) if collects is not None else None),
        (list(requires) if requires is not None else None),
    )


def derive_roles(task: Any) -> TaskRoles:
    """The roles and slots of every action and query step of a workflow task (the module's rule).

    Args:
        task: A workflow task (``name``, ``kinds``, ``digraph()``, ``start_node``; optionally
            ``api``, ``asks`` and the workflow file's ``declared_roles`` / ``declared_collects`` /
            ``declared_requires`` / ``declared_slots``).

    Returns:
        TaskRoles: Every step's roles and slots, the slots' API inputs and values, and the problems
        (a step without a role, a task without a question or outcome step).
    """
    import networkx as nx

    g = task.digraph()
    kinds = dict(task.kinds)
    start = getattr(task, "start_node", "hello")
    nodes = [n for n, k in kinds.items() if k in ("action", "query")]
    queries = [n for n in nodes if kinds[n] == "query"]
    # actions reached from a query through branch nodes only
    after_query: set[str] = set()
    for q in queries:
        frontier, seen = [q], {q}
        while frontier:
            cur = frontier.pop()
            for nxt in g.successors(cur):
                if nxt in seen:
                    continue
                seen.add(nxt)
                if kinds.get(nxt) == "branch":
                    frontier.append(nxt)
                elif kinds.get(nxt) == "action":
                    after_query.add(nxt)
    roles: dict[str, set[str]] = {}
    collects: dict[str, list[str]] = {}
    declared: dict[str, bool] = {}
    for n in nodes:
        d_role, d_col, _ = _declared(task, n)
        r = (
            set(d_role)
            if isinstance(d_role, list | tuple | set | frozenset)
            else ({d_role} if d_role else set())
        )
        declared[n] = bool(r)
        if not r:
            r = step_roles_from_name(n, kinds[n], start)
            if n in after_query and not r & {"closing", "fallback", "greeting", "confirmation"}:
                r.discard("inform")
                r.add("outcome")
        roles[n] = r
        if d_col is not None:
            collects[n] = d_col
            declared[n] = True
            if d_col:
                roles[n].add("question")
        elif "question" in r and says_only_values(task, n):
            r.discard("question")  # it says a value (STAR's trivia question): no slot is collected
            r.add("outcome")
            collects[n] = []
        elif "question" in r:
            s = slot_from_name(n)
            collects[n] = [s] if s else []
        else:
            collects[n] = []
    # requires: slots of the question steps that dominate the step
    reach = set(nx.descendants(g, start)) | {start} if start in g else set()
    dom = nx.immediate_dominators(g, start) if start in g else {}

    def dominators(n: str) -> list[str]:
        out, cur = [], n
        while cur in dom and dom[cur] != cur:
            cur = dom[cur]
            out.append(cur)
        return out[::-1]

    requires: dict[str, list[str]] = {}
    for n in nodes:
        if n in reach:
            requires[n] = [s for m in dominators(n) if m in collects for s in collects[m]]
    q_req = [set(requires.get(q, ())) for q in queries if q in requires]
    common = sorted(set.intersection(*q_req)) if q_req else []
    order = {s: i for i, s in enumerate(s for n in nodes for s in collects.get(n, ()))}
    collected = set(order)
    steps: dict[str, StepRole] = {}
    problems: list[str] = []
    for n in nodes:
        _, _, d_req = _declared(task, n)
        r = roles[n]
        if d_req is not None:
            req = list(d_req)
            declared[n] = True
        elif r & REQUIRING_ROLES:
            req = requires.get(n, sorted(common, key=lambda s: order.get(s, 0)))
        else:
            req = []
        req = [s for s in dict.fromkeys(req) if s not in collects.get(n, ())]
        named = tuple(placeholders(task, n))
        offers = (
            tuple(s for s in named if s in collected and s not in req)
            if r & {"outcome", "inform"} and "question" not in r
            else ()
        )
        steps[n] = StepRole(
            n, frozenset(r), tuple(collects.get(n, ())), tuple(req), declared[n], offers, named
        )
        if not r:
            problems.append(
                f"task {task.name!r}: step {n!r}: no role can be derived from its id (add 'role:' to the "
                "step in a workflow file, or name it with ask/confirm/inform/bye)"
            )
    if not any("question" in r.roles for r in steps.values()):
        problems.append(f"task {task.name!r}: no question step (no step collects a slot)")
    if not any("outcome" in r.roles for r in steps.values()):
        problems.append(f"task {task.name!r}: no outcome step (no step reports a result)")
    inputs = list(getattr(getattr(task, "api", None), "inputs", None) or [])
    by_name = {str(i.get("Name")): i for i in inputs}
    api_slots: dict[str, str | None] = {}
    values: dict[str, tuple[str, ...]] = {}
    types: dict[str, str] = {}
    examples: dict[str, tuple[str, ...]] = {}
    descriptions: dict[str, str] = {}
    decl = dict(getattr(task, "declared_slots", None) or {})
    slots = list(dict.fromkeys(s for r in steps.values() for s in (*r.collects, *r.requires)))
    for s in slots:
        a = s if s in by_name else api_slot_for(s, inputs)
        api_slots[s] = a
        inp = by_name.get(a) if a else None
        d = decl.get(s) or {}
        values[s] = tuple(str(v) for v in (inp or {}).get("Categories") or ())
        examples[s] = tuple(str(v) for v in d.get("examples") or (inp or {}).get("Examples") or ())
        types[s] = d.get("type") or value_type(s, inp)  # rule 7: a declared type wins
        said = str(d.get("description") or (inp or {}).get("ReadableName") or "").strip()
        if said:
            descriptions[s] = said
        if types[s] == "categorical" and not values[s]:
            values[s] = examples[s]  # a declared categorical slot's examples are its values
    return TaskRoles(
        task.name,
        steps,
        api_slots,
        values,
        types,
        tuple(problems),
        examples,
        frozenset(s for s in slots if (decl.get(s) or {}).get("type")),
        descriptions,
    )


#: Roles any workflow's step may play: a turn playing one of them is no evidence of another workflow.
SHARED_ROLES: frozenset[str] = frozenset({"greeting", "closing", "fallback", "confirmation"})
#: What a question asks for, by the words of its slot (ours): two workflows that ask for a place, a
#: date, a time or a count share that step ("Where are you going?" is a ride's step and a flight's).
SLOT_CONCEPTS: Mapping[str, frozenset[str]] = {
    "place": frozenset(
        {
            "city",
            "location",
            "destination",
            "departure",
            "origin",
            "from",
            "to",
            "address",
            "pickup",
            "dropoff",
            "where",
            "area",
            "place",
        }
    ),
    "date": frozenset({"date", "day", "weekday", "dates"}),
    "time": frozenset({"time", "hour", "clock"}),
    "count": frozenset(
        {
            "number",
            "count",
            "size",
            "guests",
            "people",
            "travelers",
            "travellers",
            "adults",
            "tickets",
            "seats",
            "party",
            "num",
            "days",
            "nights",
        }
    ),
    "name": frozenset({"name"}),
}
_TYPE_CONCEPTS = {"weekday": "date", "date": "date", "time": "time", "number": "count", "name": "name"}


def slot_concept(slot: str, value_type_: str = "text") -> str:
    """What a question for ``slot`` asks for, across workflows (:data:`SLOT_CONCEPTS`, ours).

    Args:
        slot: The slot's name.
        value_type_: Its value type (:func:`value_type`), which decides first.

    Returns:
        str: ``place``, ``date``, ``time``, ``count``, ``name``, else the slot's last word.

    Example:
        >>> slot_concept("to_location"), slot_concept("pickup_time", "time"), slot_concept("cuisine")
        ('place', 'time', 'cuisine')
    """
    if value_type_ in _TYPE_CONCEPTS:
        return _TYPE_CONCEPTS[value_type_]
    words = _words(slot)
    for concept, vocab in SLOT_CONCEPTS.items():
        if set(words) & vocab:
            return concept
    return words[-1] if words else slot


def step_signatures(roles: TaskRoles) -> dict[str, frozenset[tuple[str, str]]]:
    """What each step of a task could share with a step of another workflow.

    A step that greets, closes, falls back or asks for confirmation is shared by role alone; a
    question is shared by what it asks for (:func:`slot_concept`), a question that collects no
    slot ("Shall I book it for you?") with every other such question; an inform step (an answer
    about the item at hand, not a result) by each slot its text names (``{phone_number}``: the
    doctor's and the hotel's phone number are told alike); an action or outcome step (an offer of
    the workflow's own items, a booking made) is its workflow's own: sharing "Your reservation is
    made" across workflows cost STAR's typed-draft track a third of its caught task switches.
    Two workflows whose steps share a signature are not each other's rivals on those steps (the
    workflow-aware detector's rejection rule).

    Args:
        roles: A task's roles (:func:`derive_roles`).

    Returns:
        dict[str, frozenset[tuple[str, str]]]: node -> its signatures.

    Example:
        >>> r = TaskRoles("t", {"ask_city": StepRole("ask_city", frozenset({"question"}), ("city",)),
        ...                     "bye": StepRole("bye", frozenset({"closing"}))})
        >>> sorted(step_signatures(r)["ask_city"]), sorted(step_signatures(r)["bye"])
        ([('question', 'place')], [('closing', '')])
    """
    out: dict[str, frozenset[tuple[str, str]]] = {}
    for node, step in roles.steps.items():
        sig = {(r, "") for r in step.roles & SHARED_ROLES}
        if "question" in step.roles:
            sig |= {("question", slot_concept(s, roles.value_types.get(s, "text"))) for s in step.collects}
            if not step.collects:
                sig.add(("question", ""))
        if step.roles == {"inform"}:
            sig |= {("inform", s) for s in step.mentions}
        out[node] = frozenset(sig)
    return out


def undeclared_requirements(task: Any) -> list[str]:
    """Slots a workflow file's ``requires:`` names that no step collects, one line each.

    Args:
        task: A workflow task (``declared_requires``, ``step_paths``).

    Returns:
        list[str]: ``"file:line: tasks[i].steps[j].requires: slot 'x' is collected by no step ..."``.
    """
    tr = derive_roles(task)
    collected = {s for r in tr.steps.values() for s in r.collects}
    paths = getattr(task, "step_paths", None) or {}
    out = []
    for n, req in (getattr(task, "declared_requires", None) or {}).items():
        for s in req:
            if s not in collected:
                out.append(
                    f"{paths.get(n, n)}.requires: slot {s!r} of step {n!r} is collected by no step of task "
                    f"{task.name!r} (collected: {sorted(collected) or 'none'}); add 'collects: [{s}]' or "
                    f"'ask: {s}' to the step that asks for it"
                )
    return out


def roles_table(tasks: Iterable[Any]) -> str:
    """A markdown table of the derived roles and slots of ``tasks`` (docs/step_roles.md).

    Args:
        tasks: Workflow tasks.

    Returns:
        str: One section per task: step, roles, collects, requires; then the slots' API inputs.
    """
    lines: list[str] = []
    for t in tasks:
        tr = derive_roles(t)
        lines += [f"### {tr.task}", "", "| step | roles | collects | requires |", "| --- | --- | --- | --- |"]
        for row in tr.to_rows():
            lines.append(
                f"| `{row['node']}` | {', '.join(row['roles']) or '**none**'} | {', '.join(row['collects'])} | "
                f"{', '.join(row['requires'])} |"
            )
        lines.append("")
        if tr.api_slots:
            lines.append(
                "Slots -> API input (value type): "
                + "; ".join(f"`{s}` -> {a or '-'} ({tr.value_types.get(s)})" for s, a in tr.api_slots.items())
            )
            lines.append("")
        for p in tr.problems:
            lines.append(f"Problem: {p}")
        if tr.problems:
            lines.append("")
    return "\n".join(lines)


__all__ = [
    "says_only_values",
    "OUTCOME_WORDS",
    "REQUIRING_ROLES",
    "ROLES",
    "SHARED_ROLES",
    "SLOT_CONCEPTS",
    "SLOT_SYNONYMS",
    "VALUE_TYPES",
    "StepRole",
    "TaskRoles",
    "api_slot_for",
    "derive_roles",
    "placeholders",
    "roles_table",
    "slot_concept",
    "slot_from_name",
    "step_roles_from_name",
    "step_signatures",
    "undeclared_requirements",
    "value_type",
]
