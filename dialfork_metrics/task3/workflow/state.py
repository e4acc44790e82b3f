"""The dialogue state tracker and the step rules of the workflow-aware detector ``wf``.

The node assigner (:mod:`.workflow_nodes`) says which step each system turn is; similarity alone
can never say that the step came too early. This module keeps the *state* of the dialogue after
each turn (which slots are filled, and how; which steps are done), read with the step roles and
slots of :mod:`dialfork_dataset.workflow.roles`, and the rules on it:

* **skip (requires)**: an action, outcome or confirmation step said while a slot it requires is
  neither answered nor volunteered (``"outcome 'weather_inform_forecast' before slot 'location' was
  collected"``);
* **skip (closing)**: a closing step said before any outcome step;
* **repeat (slot)**: a question asked again for a slot a user already *answered*, unless the
  loop back to it was taken in this dialogue (:func:`loop_taken`: a failure outcome was said in
  between, "that day is not available", or the user said no to a question or confirmation since),
  or a step said in between resets the conversation (a dead end), or the task's conformant
  dialogues repeat it; that the graph *can* loop back is no excuse. Asked again right away, only
  when the answer carried a value (else it is a clarification): a value the tracker recognised
  (a date, weekday or clock time the patterns read), or any answer to a free-text slot
  (:data:`ANSWER_IS_VALUE`);
* **repeat (confirmation)**: a confirmation asked again after the user said yes to it, unless the
  loop was taken since (as above) or the user gave a slot value since (a changed booking is
  confirmed again).

How a slot is filled (:func:`track_state`):

* *answered*: a user turn follows a question step that collects it (the next system turn comes
  after the user's answer);
* *volunteered*: a user turn carries a value of the slot. Which slots a turn gives is read by
  :func:`volunteered_slots` and, when the caller passes one, also by ``read`` (the detector passes
  the learned slot reader, :func:`~.reader.slots.given_slots`, which also reads the system turn
  before it: a free-text value such as symptoms, a city the API does not list, is seen; on STAR's
  doctor dialogues the SGD-trained reader alone missed clock times the patterns read).
  :func:`volunteered_slots` reads one of the API's
  categories (a doctor's name, a city), or a value of the slot's type read by a pattern (weekday,
  clock time, date, number, a person's name after "my name is"). The patterns are written here
  because the slots are weekday names, clock hours and small counts: dateparser's
  ``search_dates`` reads "may", "now" and "second" as dates and costs milliseconds a turn, which a
  guard pays on every turn. This module never imports the reader (the reader imports it).

  With ``read``, a pending question's slot is *answered* only when the reader or the patterns say
  the turn gives it, or when the answer carries a value by its type (:func:`answer_has_value`);
  without it, any user turn after the question answers it.

Pure functions over node sequences and texts; no encoder (``read``, when given, brings its own).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dialfork_dataset.workflow.roles import api_slot_for, placeholders

RULES: tuple[str, ...] = ("skip-requires", "skip-closing", "repeat-slot", "repeat-confirmation")
"""The step rules, in the order a turn's reason names them."""

DEFAULT_SKIP_WEIGHT = 1.0
"""Deviation added by a skip (ours; chosen on the fit splits: benchmarks/bench_task3_tracks.py)."""
DEFAULT_CLOSING_WEIGHT = 1.0
"""Deviation added by a closing before any outcome (ours)."""

_WEEKDAYS = r"monday|tuesday|wednesday|thursday|friday|saturday|sunday|today|tomorrow|tonight|weekend"
_MONTHS = (
    r"january|february|march|april|may|june|july|august|september|october|november|december|"
    r"jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec"
)
_NUMBER_WORDS = (
    r"one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen|"
    r"twenty|thirty|forty|fifty|hundred|couple|dozen"
)
PATTERNS: Mapping[str, re.Pattern[str]] = {
    "weekday": re.compile(rf"\b({_WEEKDAYS})s?\b", re.I),
    "time": re.compile(
        r"\b\d{1,2}(:\d{2})?\s*(am|pm|a\.m\.?|p\.m\.?|o'?\s?clock)(?!\w)|\b\d{1,2}:\d{2}\b|\b(noon|midnight|"
        r"morning|afternoon|evening)\b|(?<=\bat )\d{1,2}\b(?!\s*(am|pm|a\.m|p\.m|:|o'?\s?clock))|"
        r"(?<=\baround )\d{1,2}\b(?!\s*(am|pm|a\.m|p\.m|:|o'?\s?clock))",
        re.I,
    ),
    "date": re.compile(
        rf"\b({_WEEKDAYS}|{_MONTHS})\b|\b\d{{1,2}}(st|nd|rd|th)\b|\b\d{{1,2}}[/.-]\d{{1,2}}([/.-]\d{{2,4}})?\b",
        re.I,
    ),
    "number": re.compile(rf"\b\d+\b|\b({_NUMBER_WORDS})\b", re.I),
    "name": re.compile(
        r"\b(my name is|my name's|name is|i am|i'm|this is|it's|it is|call me)\s+[A-Z][a-z]+|"
        r"^\s*[A-Z][a-z]+(\s+[A-Z][a-z]+)?[\s.!]*$"
    ),
}
"""The value patterns of :func:`volunteered_slots`, by value type (ours)."""


ANSWER_IS_VALUE = frozenset({"text"})
"""Value types whose answer to the question collecting them *is* the value, whether or not a
pattern reads it ("my car makes a grinding noise"): asking again right after such an answer is a
repeat, not a clarification, unless the answer is a question back or a "no" / "I don't know"
(:func:`answers_the_question`). A date, weekday or time answer carries a value only when the
patterns read one ("May 5th", "the 5th", "next Friday", "5 pm") or it says when in words ("as soon
as you can": :func:`answer_has_value`): on STAR's human hotel dialogues the wizard asked the day
again right after "The blog is really dope and I trust it", a clarification that counting every
answer as a date had flagged."""

_WHEN = re.compile(
    r"\b(soon|asap|earliest|latest|whenever|anytime|any time|later|early|next|week|weeks|month|months|"
    r"morning|afternoon|evening|night|noon|midnight|weekend|holiday|holidays|birthday|day|days|"
    r"hour|hours|o'?clock|am|pm)\b",
    re.IGNORECASE,
)
"""Words that say *when* without a date the patterns read ("as soon as you can", "the day after
my birthday"): a date, weekday or time answer with one carries a value."""


def answer_has_value(text: str, value_type: str, seen: bool) -> bool:
    """Whether a user's answer to a question gives the slot a value (not a clarification).

    Args:
        text: The user turn.
        value_type: The slot's value type (:data:`~dialfork_dataset.workflow.roles.VALUE_TYPES`).
        seen: Whether the patterns (or the reader) read a value of the slot in it.

    Returns:
        bool: ``seen``; else, for an answer (:func:`answers_the_question`), True for a free-text
        slot (:data:`ANSWER_IS_VALUE`) and, for a date, weekday or time slot, when it has a word
        that says when (:data:`_WHEN`).

    Example:
        >>> answer_has_value("as soon as you can", "date", False)
        True
        >>> answer_has_value("The blog is really dope and I trust it", "date", False)
        False
        >>> answer_has_value("It makes a grinding noise", "text", False)
        True
    """
    if seen:
        return True
    if not answers_the_question(text):
        return False
    if value_type in ANSWER_IS_VALUE:
        return True
    return value_type in ("date", "weekday", "time") and bool(_WHEN.search(text))


_NO = re.compile(
    r"^\W*(no|nope|nah|not\b|none|neither|never|don'?t|do not|doesn'?t|cancel|actually|wrong|incorrect|"
    r"that'?s not|that is not|change|i'?d rather not|rather not)\b",
    re.I,
)
_YES = re.compile(
    r"^\W*(yes|yeah|yea|yep|yup|sure|ok|okay|correct|right|that'?s right|that is right|please do|"
    r"go ahead|sounds good|perfect|great|absolutely|definitely|of course|confirm|do it|book it|exactly)\b",
    re.I,
)
_UNSURE = re.compile(r"\b(i don'?t know|not sure|no idea|what do you mean|pardon|sorry\?|say again)\b", re.I)


def answer_polarity(text: str) -> str | None:
    """Whether a user turn says yes or no (its first words), else None.

    Args:
        text: The user turn.

    Returns:
        str | None: ``"yes"``, ``"no"`` or None.

    Example:
        >>> answer_polarity("Yes please"), answer_polarity("No, make it Tuesday"), answer_polarity("Monday")
        ('yes', 'no', None)
        >>> answer_polarity("Actually, can we change the time?")
        'no'
    """
    if _NO.search(text):
        return "no"
    if _YES.search(text):
        return "yes"
    return None


def answers_the_question(text: str) -> bool:
    """Whether a user turn is an answer (not a question back, a "no" or an "I don't know").

    Args:
        text: The user turn.

    Returns:
        bool: True for an answer.

    Example:
        >>> answers_the_question("It makes a grinding noise"), answers_the_question("What do you mean?")
        (True, False)
    """
    t = text.strip()
    return bool(t) and not t.endswith("?") and not _UNSURE.search(t) and answer_polarity(t) != "no"


_GENERIC_NAME_WORDS = frozenset(
    {
        "inn",
        "hotel",
        "apartments",
        "apartment",
        "restaurant",
        "house",
        "cafe",
        "grill",
        "bar",
        "city",
        "suites",
    }
)


def _norm(text: str) -> str:
    return " " + re.sub(r"[^a-z0-9]+", " ", text.lower()).strip() + " "


def _without(text: str, types: Sequence[str]) -> str:
    """``text`` with the spans of the given value types' patterns blanked out."""
    for t in types:
        text = PATTERNS[t].sub(lambda m: " " * len(m.group(0)), text)
    return text


def _value_forms(value: str) -> list[str]:
    """The forms of a categorical value a user may type: as written, without a title, its last word."""
    v = _norm(value).strip()
    out = [v]
    parts = v.split()
    if len(parts) >= 2 and parts[0] in ("dr", "mr", "mrs", "ms", "the"):
        parts = parts[1:]
        out.append(" ".join(parts))
    if len(parts) >= 2 and parts[-1] in _GENERIC_NAME_WORDS:
        out.append(" ".join(parts[:-1]))
    if len(parts) >= 2 and all(p[0].isalpha() for p in parts):
        out.append("".join(p[0] for p in parts))  # initials: "new york city" -> "nyc"
    return [f" {x} " for x in out if len(x) >= 2]


def volunteered_slots(text: str, roles: Any) -> dict[str, str]:
    """The slots whose value a user turn carries (see the module doc), slot -> the value seen.

    Args:
        text: The user turn's text.
        roles: The task's :class:`~dialfork_dataset.workflow.roles.TaskRoles`.

    Returns:
        dict[str, str]: Slot -> the matched text.

    Example:
        >>> from dialfork_dataset.workflow.roles import StepRole, TaskRoles
        >>> tr = TaskRoles("weather", {}, {"location": "City", "day": "Day"},
        ...                {"location": ("Chicago", "New York City"), "day": ("Monday",)},
        ...                {"location": "categorical", "day": "weekday"})
        >>> volunteered_slots("What's the weather in new york city on Monday?", tr)
        {'location': 'new york city', 'day': 'monday'}
    """
    out: dict[str, str] = {}
    low = _norm(text)
    for slot, typ in roles.value_types.items():
        found = None
        for v in roles.values.get(slot, ()):
            for form in _value_forms(v):
                if form in low:
                    found = form.strip()
                    break
            if found:
                break
        if found is None and typ in PATTERNS and typ != "categorical":
            # a count is not the hour of a clock time or the day of a date
            hay = _without(text, ("time", "date")) if typ == "number" else text
            m = PATTERNS[typ].search(hay)
            if m:
                found = m.group(0).strip()
        if found is not None:
            out[slot] = found
    return out


@dataclass(frozen=True)
class SlotFill:
    """How one slot was filled.

    Attributes:
        slot: The slot.
        how: ``"answered"``, ``"volunteered"`` or ``"offered"`` (the user's turn after a system
            turn that offered a value for it: :attr:`~dialfork_dataset.workflow.roles.StepRole.offers`).
        turn: The 0-based index of the user turn that filled it.
        value: The text that filled it (the value seen, or the whole answer).
    """

    slot: str
    how: str
    turn: int
    value: str


@dataclass
class DialogueState:
    """The state of a dialogue after some turns (:func:`track_state`).

    Attributes:
        filled: slot -> :class:`SlotFill` (the latest).
        done: Steps said so far whose requirements were met (a question: once answered).
        said: Steps said so far, in order (None: off-workflow).
        pending: Slots asked by the last system turn and not answered yet.
        outcome_said: An outcome or confirmation step was said.
        last_outcome: The 0-based system turn of the latest such step, or None.
        answered_by: slot -> the system turn (0-based) whose question a user answered.
        valued: Slots whose answer carried a value (one the tracker recognised, or any answer to a
            slot of :data:`ANSWER_IS_VALUE`): asking again right away is then a repeat, not a
            clarification.
        declined: System turns (0-based) whose question or confirmation the user answered no.
        confirmed: Confirmation step -> the system turn (0-based) the user said yes to.
        updated: The system turn (0-based) after which a user turn last gave a slot value, or None.
        system_text: The text of the last system turn, or None: what a slot reader reads a user
            turn's answer against (a guard session keeps it between turns).
        asked_too: Open slots of the other questions the last system turn asked ("Where from, and
            where to?"): a slot reader is told they were asked; what it reads fills them as
            volunteered (never *answered*: asking one later is no repeat of this turn).
    """

    filled: dict[str, SlotFill] = field(default_factory=dict)
    done: list[str] = field(default_factory=list)
    said: list[str | None] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    pending_node: str | None = None
    outcome_said: bool = False
    last_outcome: int | None = None
    answered_by: dict[str, int] = field(default_factory=dict)
    valued: list[str] = field(default_factory=list)
    declined: list[int] = field(default_factory=list)
    confirmed: dict[str, int] = field(default_factory=dict)
    updated: int | None = None
    system_text: str | None = None
    asked_too: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form (the guard keeps it between turns).

        Returns:
            dict[str, Any]: The fields.
        """
        return {
            "filled": {s: [f.how, f.turn, f.value] for s, f in self.filled.items()},
            "done": list(self.done),
            "said": list(self.said),
            "pending": list(self.pending),
            "pending_node": self.pending_node,
            "outcome_said": self.outcome_said,
            "last_outcome": self.last_outcome,
            "answered_by": dict(self.answered_by),
            "valued": list(self.valued),
            "declined": list(self.declined),
            "confirmed": dict(self.confirmed),
            "updated": self.updated,
            "system_text": self.system_text,
            "asked_too": list(self.asked_too),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> DialogueState:
        """The inverse of :meth:`to_dict` (None: a new dialogue).

        Args:
            d: A dict of :meth:`to_dict`, or None.

        Returns:
            DialogueState: The state.
        """
        if not d:
            return cls()
        return cls(
            filled={s: SlotFill(s, v[0], int(v[1]), str(v[2])) for s, v in (d.get("filled") or {}).items()},
            done=list(d.get("done") or []),
            said=list(d.get("said") or []),
            pending=list(d.get("pending") or []),
            pending_node=d.get("pending_node"),
            outcome_said=bool(d.get("outcome_said")),
            last_outcome=d.get("last_outcome"),
            answered_by={k: int(v) for k, v in (d.get("answered_by") or {}).items()},
            valued=list(d.get("valued") or []),
            declined=[int(x) for x in d.get("declined") or []],
            confirmed={k: int(v) for k, v in (d.get("confirmed") or {}).items()},
            updated=d.get("updated"),
            system_text=d.get("system_text"),
            asked_too=list(d.get("asked_too") or []),
        )


@dataclass(frozen=True)
class StepVerdict:
    """What the step rules say of one system turn.

    Attributes:
        rule: The rule that fired (:data:`RULES`), or None.
        node: The turn's step.
        role: The role the rule read (``outcome``, ``closing``, ``question``...).
        slot: The slot missing (skip) or asked again (repeat), or None.
        expected: The step that should have come first (the question collecting the slot, or an
            outcome before a closing), or None.
        message: One line: ``"outcome 'weather_inform_forecast' before slot 'location' was collected
            (expected step 'weather_ask_location')"``.
    """

    rule: str | None
    node: str | None = None
    role: str | None = None
    slot: str | None = None
    expected: str | None = None
    message: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form.

        Returns:
            dict[str, Any]: The fields.
        """
        return {
            "rule": self.rule,
            "node": self.node,
            "role": self.role,
            "slot": self.slot,
            "expected": self.expected,
            "message": self.message,
        }


NO_VERDICT = StepVerdict(None)
OUTCOME_LIKE = frozenset({"outcome", "confirmation"})
"""Roles after which a closing is no skip: a result, or an offer the user may decline."""


def _primary(role: Any) -> str:
    for r in ("outcome", "action", "confirmation", "question", "closing", "greeting", "inform", "fallback"):
        if r in role.roles:
            return r
    return "step"


def loop_taken(said: Sequence[str | None], declined: Sequence[int], i: int, j: int, structure: Any) -> bool:
    """Whether the dialogue took a branch back between system turns ``i`` and ``j`` (0-based).

    A question or confirmation said again may be the workflow's loop (the day was not available:
    ask another; the user said no: ask what to change) only when the loop's branch was *taken*: a
    failure outcome step (``structure.failures``) or a dead end (``structure.resets``: the
    conversation may start over) was said after turn ``i``, or the user said no to a system turn
    from ``i`` on. That the graph can loop back to the step is not enough.

    Args:
        said: The steps said so far (None: off-workflow).
        declined: System turns the user answered no.
        i: The earlier turn (its answer included).
        j: The turn said again.
        structure: The task's :class:`~.rules.WorkflowStructure` (``failures``, ``resets``).

    Returns:
        bool: True when the loop was taken.

    Example:
        >>> from types import SimpleNamespace
        >>> st = SimpleNamespace(failures=frozenset({"day_unavailable"}), resets=frozenset())
        >>> loop_taken(["ask_day", "ask_time", "ask_day"], [], 0, 2, st)
        False
        >>> loop_taken(["ask_day", "day_unavailable", "ask_day"], [], 0, 2, st)
        True
        >>> loop_taken(["confirm", "ask_day"], [0], 0, 1, st)
        True
    """
    stops = getattr(structure, "failures", frozenset()) | getattr(structure, "resets", frozenset())
    return any(m in stops for m in said[i + 1 : j] if m is not None) or any(i <= k < j for k in declined)


def declined_turns(turns: Sequence[Mapping[str, str]], nodes: Sequence[str | None], roles: Any) -> list[bool]:
    """Whether the user said no to each system turn (what :attr:`DialogueState.declined` holds).

    A system turn at a step with a role (``roles``) is declined when a user turn after it, before
    the next system turn, says no (:func:`answer_polarity`); the role-free repeat rule
    (:func:`~.rules.repeat_flags`) reads it as the state tracker does.

    Args:
        turns: The dialogue's ``{"speaker", "text"}`` turns.
        nodes: The assigned step of each system turn.
        roles: The task's roles (None: nothing is declined).

    Returns:
        list[bool]: One per system turn.
    """
    out: list[bool] = []
    for t in turns:
        if t["speaker"] == "system":
            out.append(False)
        elif out and roles is not None:
            k = len(out) - 1
            node = nodes[k] if k < len(nodes) else None
            if roles.role_of(node) is not None and answer_polarity(t["text"]) == "no":
                out[k] = True
    return out


SlotRead = Callable[[str, Any, "str | None", Sequence[str]], Mapping[str, str]]
"""A slot reader as the tracker calls it: ``read(text, roles, prev_system, pending)`` -> slot ->
value (``functools.partial(given_slots, reader)`` of :mod:`~.reader.slots`)."""


def observe_user(
    state: DialogueState,
    text: str,
    turn: int,
    roles: Any,
    read: SlotRead | None = None,
    prev_system: str | None = None,
) -> DialogueState:
    """Update ``state`` with a user turn (answers the pending question; volunteers values).

    Args:
        state: The state (changed in place and returned).
        text: The user turn's text.
        turn: Its 0-based index in the dialogue.
        roles: The task's :class:`~dialfork_dataset.workflow.roles.TaskRoles`.
        read: The slot reader, ``read(text, roles, prev_system, pending)`` -> slot -> value, read
            on top of :func:`volunteered_slots` (the hand patterns: a weekday, a clock time, an API
            category are read by both); None: the patterns alone, and every pending slot is answered.
        prev_system: The system turn before it (None: :attr:`DialogueState.system_text`).

    Returns:
        DialogueState: ``state``.

    Example:
        >>> from dialfork_dataset.workflow.roles import StepRole, TaskRoles
        >>> tr = TaskRoles("car", {}, {"problem": "Problem"}, {}, {"problem": "text"})
        >>> st = DialogueState(pending=["problem"])
        >>> sorted(observe_user(st, "Hi, the brakes squeal", 1, tr, read=lambda *a: {}).filled)
        ['problem']
        >>> st = DialogueState(pending=["problem"])
        >>> sorted(observe_user(st, "What do you mean?", 1, tr, read=lambda *a: {}).filled)
        []
    """
    prev = prev_system if prev_system is not None else state.system_text
    seen = volunteered_slots(text, roles)
    if read is not None:  # the reader adds what the patterns miss; where both read a slot, its value
        asked = list(state.pending) + [x for x in state.asked_too if x not in state.pending]
        seen.update(read(text, roles, prev, asked))
    state.asked_too = []
    # the value of a slot already given, said again for another slot (the account number given
    # again when asked for the PIN), gives nothing new: not a value of the pending slot
    taken = {f.value: f.slot for f in state.filled.values() if isinstance(f.value, str)}
    again = [v for v in (*seen.values(), text.strip()) if v in taken and taken[v] not in state.pending]
    seen = {s: v for s, v in seen.items() if taken.get(v, s) == s}
    rest = text
    for v in again:
        rest = rest.replace(v, " ")
    only_again = bool(again) and len(re.findall(r"[^\W_]+", rest)) <= 2  # "It's 153531981." again
    k = len(state.said) - 1
    last = roles.role_of(state.said[-1]) if state.said else None
    polarity = answer_polarity(text) if last is not None else None
    if polarity == "no" and k >= 0 and k not in state.declined:
        state.declined.append(k)
    if polarity == "yes" and last is not None and "confirmation" in last.roles:
        state.confirmed[last.node] = k
    gave = any(s not in state.filled or state.filled[s].value != v for s, v in seen.items())
    for s in state.pending:
        valued = not only_again and answer_has_value(text, roles.value_types.get(s, "text"), s in seen)
        if read is not None and not valued:
            continue  # the reader says the turn does not give it: the question is still open
        state.filled[s] = SlotFill(s, "answered", turn, seen.get(s, text))
        state.answered_by[s] = k
        gave = gave or valued
        if valued and s not in state.valued:
            state.valued.append(s)
        elif not valued and s in state.valued:
            state.valued.remove(s)
    if gave:
        state.updated = k
    if state.pending_node is not None and state.pending_node not in state.done:
        state.done.append(state.pending_node)
    for s, v in seen.items():
        if s not in state.filled:
            state.filled[s] = SlotFill(s, "volunteered", turn, v)
    for s in getattr(last, "offers", ()):  # the user takes (or answers) the system's offer
        if s not in state.filled:
            state.filled[s] = SlotFill(s, "offered", turn, text)
    state.pending = []
    state.pending_node = None
    return state


def observe_system(
    state: DialogueState,
    node: str | None,
    roles: Any,
    structure: Any = None,
    repeatable: frozenset[str] | set[str] = frozenset(),
    requires: Mapping[str, Sequence[str]] | None = None,
    text: str | None = None,
    also: Sequence[str] = (),
) -> tuple[DialogueState, StepVerdict]:
    """Update ``state`` with a system turn at ``node`` and judge it with the step rules.

    Args:
        state: The state (changed in place and returned).
        node: The turn's assigned step (None: off-workflow; no rule, no state change but ``said``).
        roles: The task's :class:`~dialfork_dataset.workflow.roles.TaskRoles`.
        structure: The task's :class:`~.workflow_rules.WorkflowStructure` (``leads_to``,
            ``resets``), for the repeat rule's loops; None: no repeat rule.
        repeatable: Steps the task's conformant dialogues ask more than once (no repeat).
        requires: node -> the slots the skip rule enforces (None: the roles' ``requires``; a
            detector passes the ones it keeps, :func:`enforced_requirements`).
        text: The turn's text (kept as :attr:`DialogueState.system_text`, what a slot reader reads
            the next user turn against); None: forgotten.
        also: Other question steps the turn asks too (:attr:`~.nodes.NodeAssignment.also`): their
            slots not yet filled are :attr:`DialogueState.asked_too`, so a slot reader is told they
            were asked. A detector passes them only with a slot reader.

    Returns:
        ``(state, verdict)``: the new state and the :class:`StepVerdict` of the turn.
    """
    j = len(state.said)
    state.said.append(node)
    state.system_text = text
    role = roles.role_of(node)
    if role is None:
        return state, NO_VERDICT
    verdict = NO_VERDICT
    prim = _primary(role)
    if role.roles & {"action", "outcome", "confirmation"}:
        need = role.requires if requires is None else requires.get(node, ())
        missing = [s for s in need if s not in state.filled]
        if missing:
            s = missing[0]
            asker = next((n for n, r in roles.steps.items() if s in r.collects), None)
            verdict = StepVerdict(
                "skip-requires",
                node,
                prim,
                s,
                asker,
                f"{prim} {node!r} before slot {s!r} was collected"
                + (f" (expected step {asker!r})" if asker else ""),
            )
    if (
        verdict.rule is None
        and "closing" in role.roles
        and not state.outcome_said
        and any(roles.with_role(r) for r in OUTCOME_LIKE)
    ):
        if any(n is not None and roles.role_of(n) is not None for n in state.said[:-1]):
            expected = next(iter(roles.with_role("outcome")), None)
            verdict = StepVerdict(
                "skip-closing",
                node,
                "closing",
                None,
                expected,
                f"closing {node!r} before any outcome"
                + (f" (expected e.g. {expected!r})" if expected else ""),
            )
    if verdict.rule is None and "question" in role.roles and structure is not None and node not in repeatable:
        for s in role.collects:
            i = state.answered_by.get(s)
            if i is None or state.filled.get(s) is None or state.filled[s].how != "answered":
                continue
            between = [m for m in state.said[i + 1 : j] if m is not None]
            if (not between or all(m == node for m in between)) and s not in state.valued:
                continue  # an immediate re-ask of an answer without a value is a clarification
            if loop_taken(state.said, state.declined, i, j, structure):
                continue
            verdict = StepVerdict(
                "repeat-slot",
                node,
                "question",
                s,
                None,
                f"question {node!r} asks again for slot {s!r}, answered at system turn {i + 1}",
            )
            break
    if (
        verdict.rule is None
        and "confirmation" in role.roles
        and structure is not None
        and node not in repeatable
        and node in state.confirmed
    ):
        i = state.confirmed[node]
        if not loop_taken(state.said, state.declined, i, j, structure) and not (
            state.updated is not None and state.updated > i
        ):
            verdict = StepVerdict(
                "repeat-confirmation",
                node,
                "confirmation",
                None,
                None,
                f"confirmation {node!r} asked again after the user said yes at system turn {i + 1}",
            )
    if role.roles & OUTCOME_LIKE:
        state.outcome_said = True
        state.last_outcome = j
    if "question" in role.roles:
        state.pending = list(role.collects)
        state.pending_node = node
    else:
        state.pending, state.pending_node = [], None
        if verdict.rule is None and node not in state.done:
            state.done.append(node)
    state.asked_too = []
    for n in also:  # the turn's other questions ("Where from, and where to?"): their open slots
        other = roles.steps.get(n)
        if other is not None and "question" in other.roles:
            state.asked_too += [
                x
                for x in other.collects
                if x not in state.pending and x not in state.filled and x not in state.asked_too
            ]
    return state, verdict


def track_state(
    turns: Sequence[Mapping[str, str]],
    nodes: Sequence[str | None],
    roles: Any,
    structure: Any = None,
    repeatable: frozenset[str] | set[str] = frozenset(),
    requires: Mapping[str, Sequence[str]] | None = None,
    read: SlotRead | None = None,
    also: Sequence[Sequence[str]] | None = None,
) -> tuple[list[DialogueState], list[StepVerdict]]:
    """Track a whole dialogue: the state *before* each system turn and each system turn's verdict.

    Args:
        turns: ``{"speaker", "text"}`` turns.
        nodes: The assigned step of each system turn, in order (None: off-workflow).
        roles: The task's :class:`~dialfork_dataset.workflow.roles.TaskRoles`.
        structure: The task's workflow structure (the repeat rule's loops), or None.
        repeatable: Steps never flagged as repeats.
        requires: As in :func:`observe_system`.
        read: The slot reader (:func:`observe_user`); None: the hand patterns.
        also: Per system turn, the other question steps it asks (:func:`observe_system`); used
            only with ``read``.

    Returns:
        ``(states, verdicts)``: one snapshot (a copy) and one :class:`StepVerdict` per system turn.
    """
    _, states, verdicts = run_state(turns, nodes, roles, structure, repeatable, requires, read, also)
    return states, verdicts


def run_state(
    turns: Sequence[Mapping[str, str]],
    nodes: Sequence[str | None],
    roles: Any,
    structure: Any = None,
    repeatable: frozenset[str] | set[str] = frozenset(),
    requires: Mapping[str, Sequence[str]] | None = None,
    read: SlotRead | None = None,
    also: Sequence[Sequence[str]] | None = None,
) -> tuple[DialogueState, list[DialogueState], list[StepVerdict]]:
    """:func:`track_state` plus the state after the last turn (what the audit's step coverage reads).

    Each user turn is read against the system turn before it (:func:`observe_user`'s
    ``prev_system``: the state keeps the last system turn's text).

    Args:
        turns: ``{"speaker", "text"}`` turns.
        nodes: The assigned step of each system turn.
        roles: The task's roles.
        structure: The task's workflow structure, or None.
        repeatable: Steps never flagged as repeats.
        requires: As in :func:`observe_system`.
        read: The slot reader (:func:`observe_user`); None: the hand patterns.
        also: Per system turn, the other question steps it asks (used only with ``read``).

    Returns:
        ``(final, states, verdicts)``.
    """
    state = DialogueState()
    states: list[DialogueState] = []
    verdicts: list[StepVerdict] = []
    k = 0
    for i, t in enumerate(turns):
        if t["speaker"] == "system":
            states.append(DialogueState.from_dict(state.to_dict()))
            node = nodes[k] if k < len(nodes) else None
            more = also[k] if read is not None and also is not None and k < len(also) else ()
            state, v = observe_system(
                state, node, roles, structure, repeatable, requires, t.get("text"), more
            )
            verdicts.append(v)
            k += 1
        else:
            observe_user(state, t["text"], i, roles, read)
    return state, states, verdicts


def rule_flags(verdicts: Sequence[StepVerdict]) -> dict[str, np.ndarray]:
    """0/1 arrays per rule of :data:`RULES` over a dialogue's system turns.

    Args:
        verdicts: One verdict per system turn.

    Returns:
        dict[str, np.ndarray]: rule -> int64 flags.

    Example:
        >>> rule_flags([NO_VERDICT, StepVerdict("skip-closing")])["skip-closing"].tolist()
        [0, 1]
    """
    return {r: np.array([int(v.rule == r) for v in verdicts], dtype=np.int64) for r in RULES}


def tracker_accuracy(
    dialogues: Sequence[Mapping[str, Any]], roles_of: Mapping[str, Any], gold_queries: Sequence[Sequence[Any]]
) -> dict[str, Any]:
    """How often the tracked slots at each query match STAR's gold query constraints.

    Args:
        dialogues: Records with ``task``, ``turns`` and ``system_nodes`` (the nodes tracked with).
        roles_of: task -> :class:`~dialfork_dataset.workflow.roles.TaskRoles`.
        gold_queries: Per dialogue, ``(turn_index, {api_slot: value})`` pairs: the wizard's query
            events and the index of the first turn after them.

    Returns:
        dict[str, Any]: ``n_queries``, ``n_slots`` (gold constraint slots a tracked slot maps to),
        ``filled`` (share of those the tracker had filled at the query), ``value_match`` (share
        whose tracked value contains the gold value, case-insensitively), ``by_how``
        (answered/volunteered counts among the filled).
    """
    n_q = n_s = n_f = n_v = 0
    how: dict[str, int] = {"answered": 0, "volunteered": 0}
    for d, queries in zip(dialogues, gold_queries):
        roles = roles_of.get(d["task"])
        if roles is None:
            continue
        inv = {a: s for s, a in roles.api_slots.items() if a}
        for turn_index, constraints in queries:
            sub = [t for t in d["turns"][:turn_index]]
            k = sum(t["speaker"] == "system" for t in sub)
            states, _ = track_state(
                sub + [{"speaker": "system", "text": ""}], list(d["system_nodes"][:k]), roles
            )
            st = states[-1]
            n_q += 1
            for a, val in constraints.items():
                s = inv.get(a)
                if s is None:
                    continue
                n_s += 1
                f = st.filled.get(s)
                if f is None:
                    continue
                n_f += 1
                how[f.how] = how.get(f.how, 0) + 1
                if _norm(str(val)).strip() and _norm(str(val)).strip() in _norm(f.value):
                    n_v += 1
    return {
        "n_queries": n_q,
        "n_slots": n_s,
        "filled": n_f / n_s if n_s else float("nan"),
        "value_match": n_v / n_s if n_s else float("nan"),
        "by_how": how,
    }


SKIP_SLOTS: tuple[str, ...] = ("template", "required", "all")
"""Which of a step's required slots the skip rule enforces (:func:`enforced_requirements`)."""
DEFAULT_SKIP_SLOTS = "template"
"""Default of :func:`enforced_requirements` (ours, chosen on the fit splits: on STAR's human-picked
fit split with gold step labels, ``all`` alarms on 64% of the conformant dialogues, ``required``
on 7%, ``template`` on 4%; benchmarks/bench_task3_tracks.py reports what each costs)."""
DEFAULT_REQUIRE_SUPPORT = 0.9
"""A required slot stays enforced for a step when the conformant fit dialogues had it filled at
least this share of the times they said the step (ours; :func:`prune_requirements`)."""
DEFAULT_RULE_MIN_PROB = 0.5
"""With the learned step reader (:mod:`.reader.steps`), the least calibrated probability of a
system turn's step, and of every system turn's before it, for the dialogue-state rules to judge it
(ours; :func:`sure_steps`). The reader's probability is calibrated (held-out ECE 0.008 on SGD
services it never learned: benchmarks/results/reader.md), so 0.5 is the point where its step is
more likely right than wrong: a rule judged on a turn below it, or on a state built on one, is more
likely a misread than a deviation. It replaces the cosine cut below, which was a stand-in for
that probability; bench_task3_tracks / bench_sgd_track measure it."""
DEFAULT_RULE_MIN_SIMILARITY = 0.75
"""Without a step reader (``reader=None``: cosine only), the least similarity of the judged system turn and of every system turn before it to their
assigned steps for the dialogue-state rules to judge it (ours). Chosen on the star-human picked *fit*
split (``wf`` fitted on the template train split, no human dialogue; benchmarks/bench_task3_tracks.py
stages): 0.7 / 0.75 / 0.8 / 0.9 give recall at 1% false alarms 18.6 / 38.0 / 37.7 / 43.0%, at 5%
54.0 / 64.0 / 63.6 / 63.5%, SSPC-skip at 5% 12.9 / 14.7 / 13.3 / 11.8%. Without the gate (0.0) the
human-typed track's recall at 5% false alarms falls from 45.7% to 1.5%: a question the assigner
misses leaves its slot unfilled and every later outcome looks like a skip."""
DEFAULT_RULE_MIN_MARGIN = 0.1
"""... or the least lead of a turn's step over the task's next best step (ours; see
:func:`confident_steps`). A turn full of slot values matches no phrasing closely (MiniLM puts two
forecasts that differ in their values at about 0.6) but still leads the other steps. Chosen on the
same fit split: a margin of 0.1 / 0.2 / none gives recall at 1% false alarms 38.3 / 38.0 / 38.0%
and SSPC-skip at 5% 14.8 / 14.7 / 14.7% (false alarms at the operating point 6.8% for all)."""


def sure_steps(prob: np.ndarray, min_prob: float = DEFAULT_RULE_MIN_PROB) -> np.ndarray:
    """Whether each turn's step is sure by the step reader's calibrated probability.

    A turn the reader does not read (NaN: the assigner kept a generic phrasing without a role, a
    thanks or a filler, which no rule judges) is sure: it must not mute the rules for the rest of
    the dialogue.

    Args:
        prob: The calibrated probability of each turn's step (``NodeAssignment.prob``).
        min_prob: Sure at or above this.

    Returns:
        np.ndarray: bool per turn.

    Example:
        >>> sure_steps(np.array([0.9, 0.3, np.nan]), 0.5).tolist()
        [True, False, True]
    """
    prob = np.asarray(prob, dtype=np.float64)
    return np.isnan(prob) | (prob >= min_prob)


def confident_steps(
    best: np.ndarray, second: np.ndarray, min_similarity: float, min_margin: float
) -> np.ndarray:
    """Whether each turn's best step is sure: similar enough, or far ahead of the next best step
    (the gate without a step reader; with one, :func:`sure_steps`).

    Args:
        best: Similarity of each turn to its best own step (``NodeAssignment.own_similarity``).
        second: To its second best own step (``NodeAssignment.second_similarity``; ``-inf``: none).
        min_similarity: Sure at or above this best similarity.
        min_margin: Sure when the best step leads the second best by at least this.

    Returns:
        np.ndarray: bool per turn.

    Example:
        >>> confident_steps(np.array([0.9, 0.66, 0.6]), np.array([0.8, 0.3, 0.55]), 0.75, 0.25).tolist()
        [True, True, False]
    """
    best = np.asarray(best, dtype=np.float64)
    second = np.asarray(second, dtype=np.float64)
    return (best >= min_similarity) | (best - second >= min_margin)


RECOGNISABLE = frozenset({"categorical", "weekday", "time", "date", "number", "name"})
"""Value types a tracker can see volunteered (a free-text slot may be given in any words)."""


def enforced_requirements(
    roles: Any, task: Any, mode: str = DEFAULT_SKIP_SLOTS
) -> dict[str, tuple[str, ...]]:
    """The slots the skip rule enforces per step, before the fit prunes them.

    A workflow file's declared ``requires:`` are always enforced as written. Otherwise, of the
    slots a step requires (:func:`~dialfork_dataset.workflow.roles.derive_roles`):

    * ``"all"``: every one;
    * ``"required"``: those a tracker can see volunteered (:data:`RECOGNISABLE` value types) that
      the task's API lists as required (all, when the API lists none);
    * ``"template"`` (default): of those, the ones the step's own text names by a placeholder
      (``{day:s}`` in ``weather_inform_forecast``): the result is *about* them.

    Args:
        roles: The task's :class:`~dialfork_dataset.workflow.roles.TaskRoles`.
        task: The workflow task (templates, ``api``).
        mode: One of :data:`SKIP_SLOTS`.

    Returns:
        dict[str, tuple[str, ...]]: node -> enforced slots (steps without any left out).

    Raises:
        ValueError: An unknown ``mode``.
    """
    if mode not in SKIP_SLOTS:
        raise ValueError(f"skip_slots must be one of {SKIP_SLOTS}, got {mode!r}")
    api = getattr(task, "api", None)
    required = set(getattr(api, "required", None) or ())
    inputs = list(getattr(api, "inputs", None) or ())
    out: dict[str, tuple[str, ...]] = {}
    for node, r in roles.steps.items():
        req = tuple(r.requires)
        if not r.declared and mode != "all":
            req = tuple(
                s
                for s in req
                if roles.value_types.get(s) in RECOGNISABLE
                and (not required or roles.api_slots.get(s) in required)
            )
            if mode == "template":
                ph = set(placeholders(task, node))
                named = {api_slot_for(p, inputs) for p in ph} if inputs else set()
                # the placeholder is the slot itself, or fills the same API input
                req = tuple(s for s in req if s in ph or (roles.api_slots.get(s) or None) in named - {None})
        if req:
            out[node] = req
    return out


def prune_requirements(
    requires: Mapping[str, Sequence[str]],
    tracked: Sequence[tuple[Sequence[DialogueState], Sequence[str | None]]],
    support: float = DEFAULT_REQUIRE_SUPPORT,
    min_count: int = 3,
    declared: frozenset[str] | set[str] = frozenset(),
) -> dict[str, tuple[str, ...]]:
    """Drop the requirements the conformant fit dialogues do not keep.

    For each step and each slot it requires, the share of the step's turns in ``tracked`` at which
    the slot was filled; below ``support`` (with at least ``min_count`` turns) the slot is no
    longer enforced for that step: the task's own conformant agents say the step without it (STAR's
    wizards give the weather "here" without asking for a city). Declared steps are kept as written.

    Args:
        requires: node -> slots (:func:`enforced_requirements`).
        tracked: Per fit dialogue, the states before each system turn and the nodes of those turns.
        support: The least share of turns with the slot filled.
        min_count: Fewest turns of a step for the share to be read.
        declared: Steps whose requirements a workflow file declared (never pruned).

    Returns:
        dict[str, tuple[str, ...]]: node -> the slots kept.

    Example:
        >>> st = [DialogueState(), DialogueState()]
        >>> prune_requirements({"inform": ("city",)}, [(st[:1], ["inform"])] * 3)
        {}
    """
    seen: dict[tuple[str, str], list[int]] = {}
    for states, nodes in tracked:
        for st, n in zip(states, nodes):
            for s in requires.get(n, ()) if n is not None else ():
                c = seen.setdefault((n, s), [0, 0])
                c[0] += 1
                c[1] += s in st.filled
    out: dict[str, tuple[str, ...]] = {}
    for n, slots in requires.items():
        keep = tuple(
            s
            for s in slots
            if n in declared
            or seen.get((n, s), [0, 0])[0] < min_count
            or seen[(n, s)][1] / seen[(n, s)][0] >= support
        )
        if keep:
            out[n] = keep
    return out


def state_flags(
    turns: Sequence[Mapping[str, str]],
    nodes: Sequence[str | None],
    roles: Any,
    structure: Any = None,
    repeatable: frozenset[str] | set[str] = frozenset(),
    requires: Mapping[str, Sequence[str]] | None = None,
    read: SlotRead | None = None,
    also: Sequence[Sequence[str]] | None = None,
) -> tuple[dict[str, np.ndarray], list[StepVerdict]]:
    """The step-rule flags of a dialogue's system turns, from its tracked state.

    Args:
        turns: The dialogue's turns.
        nodes: The assigned step of each system turn.
        roles: The task's roles.
        structure: Its workflow structure (None: no repeat rule).
        repeatable: Steps never flagged as repeats.
        requires: The enforced requirements (None: the roles' own).
        read: The slot reader (:func:`observe_user`); None: the hand patterns.
        also: Per system turn, the other question steps it asks (used only with ``read``).

    Returns:
        ``(flags, verdicts)``: rule -> 0/1 per system turn (:func:`rule_flags`), and the verdicts.
    """
    _, verdicts = track_state(turns, nodes, roles, structure, repeatable, requires, read, also)
    return rule_flags(verdicts), verdicts


def state_dict_errors(d: Any, n_system: int) -> list[str]:
    """What is wrong with a :meth:`DialogueState.to_dict` dict that came from outside (a saved
    guard session), one line each; empty when it is well formed.

    Args:
        d: The dict.
        n_system: The system turns the session has seen (``said`` must hold as many).

    Returns:
        list[str]: The problems.

    Example:
        >>> state_dict_errors({"said": ["a"], "filled": {"x": ["told", 0, "v"]}}, 1)
        ["dialogue.filled['x'] must be [how ('answered'|'volunteered'|'offered'), user turn index, value]"]
    """
    if not isinstance(d, Mapping):
        return ["dialogue must be the dialogue state (an object)"]
    errs = []
    said = d.get("said", [])
    if not isinstance(said, list) or any(x is not None and not isinstance(x, str) for x in said):
        errs.append("dialogue.said must list step names (or null)")
    elif len(said) != n_system:
        errs.append(f"dialogue.said holds {len(said)} steps for {n_system} system turns")
    filled = d.get("filled", {})
    if not isinstance(filled, Mapping):
        errs.append("dialogue.filled must map slots to [how, turn, value]")
    else:
        for k, v in filled.items():
            if not (
                isinstance(v, list | tuple)
                and len(v) == 3
                and v[0] in ("answered", "volunteered", "offered")
                and isinstance(v[1], int)
                and not isinstance(v[1], bool)
                and isinstance(v[2], str)
            ):
                errs.append(
                    f"dialogue.filled[{k!r}] must be [how ('answered'|'volunteered'|'offered'), user turn index, value]"
                )
    for key in ("done", "pending", "valued", "asked_too"):
        v = d.get(key, [])
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            errs.append(f"dialogue.{key} must be a list of strings")
    dec = d.get("declined", [])
    if not isinstance(dec, list) or any(isinstance(x, bool) or not isinstance(x, int) for x in dec):
        errs.append("dialogue.declined must list system turn indices")
    conf = d.get("confirmed", {})
    if not isinstance(conf, Mapping) or any(
        isinstance(x, bool) or not isinstance(x, int) for x in conf.values()
    ):
        errs.append("dialogue.confirmed must map confirmation steps to system turn indices")
    up = d.get("updated")
    if up is not None and (isinstance(up, bool) or not isinstance(up, int)):
        errs.append("dialogue.updated must be a system turn index or null")
    ab = d.get("answered_by", {})
    if not isinstance(ab, Mapping) or any(isinstance(x, bool) or not isinstance(x, int) for x in ab.values()):
        errs.append("dialogue.answered_by must map slots to system turn indices")
    for key in ("pending_node",):
        if d.get(key) is not None and not isinstance(d.get(key), str):
            errs.append(f"dialogue.{key} must be a step name or null")
    if d.get("system_text") is not None and not isinstance(d.get("system_text"), str):
        errs.append("dialogue.system_text must be the last system turn's text or null")
    lo = d.get("last_outcome")
    if lo is not None and (isinstance(lo, bool) or not isinstance(lo, int)):
        errs.append("dialogue.last_outcome must be a system turn index or null")
    return errs


__all__ = [
    "ANSWER_IS_VALUE",
    "answer_has_value",
    "DEFAULT_CLOSING_WEIGHT",
    "DEFAULT_REQUIRE_SUPPORT",
    "answer_polarity",
    "answers_the_question",
    "declined_turns",
    "loop_taken",
    "DEFAULT_RULE_MIN_MARGIN",
    "DEFAULT_RULE_MIN_PROB",
    "sure_steps",
    "DEFAULT_RULE_MIN_SIMILARITY",
    "confident_steps",
    "DEFAULT_SKIP_SLOTS",
    "RECOGNISABLE",
    "SKIP_SLOTS",
    "SlotRead",
    "enforced_requirements",
    "prune_requirements",
    "state_dict_errors",
    "state_flags",
    "DEFAULT_SKIP_WEIGHT",
    "NO_VERDICT",
    "PATTERNS",
    "RULES",
    "DialogueState",
    "SlotFill",
    "StepVerdict",
    "observe_system",
    "observe_user",
    "rule_flags",
    "run_state",
    "track_state",
    "tracker_accuracy",
    "volunteered_slots",
]
