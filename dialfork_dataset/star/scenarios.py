"""STAR scenarios: the role-play instructions of a dialogue and the length of its human dialogue,
read from either layout (``scenarios.jsonl`` rows or original ``dialogues/<id>.json`` files)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .common import StarError, task_domain


@dataclass(frozen=True)
class Scenario:
    """The role-play instructions of one STAR dialogue and the length of its human dialogue.

    Attributes:
        scenario_id: The STAR ``DialogueID``, as a string.
        tasks: The task(s) of the scenario (one for a single-task scenario).
        domains: The domain(s), duplicates dropped; a null domain is filled from the task name.
        happy: STAR's ``Happy`` flag (the scenario follows the happy path).
        multitask: STAR's ``MultiTask`` flag.
        completion_level: STAR's ``CompletionLevel`` of the human dialogue.
        user_task: The user's role-play instruction (``Scenario.UserTask``).
        wizard_task: The system's role-play instruction (``Scenario.WizardTask``).
        user_guide: The texts of the ``UserGuide`` instructions, in order.
        n_user_utterances: User utterances of the human dialogue.
        n_system_utterances: System (wizard) utterances of the human dialogue.
    """

    scenario_id: str
    tasks: tuple[str, ...]
    domains: tuple[str, ...]
    happy: bool
    multitask: bool
    completion_level: str
    user_task: str
    wizard_task: str
    user_guide: tuple[str, ...]
    n_user_utterances: int
    n_system_utterances: int

    @property
    def length(self) -> int:
        """Turns of the human dialogue, both speakers."""
        return self.n_user_utterances + self.n_system_utterances

    @property
    def single_task(self) -> bool:
        """True when the scenario has one task and is not flagged multi-task."""
        return len(self.tasks) == 1 and not self.multitask

    @property
    def task(self) -> str:
        """The scenario's task; raises :class:`StarError` for a multi-task scenario.

        Raises:
            StarError: The scenario has more than one task (or none).
        """
        if len(self.tasks) != 1:
            raise StarError(
                f"scenario {self.scenario_id} has {len(self.tasks)} tasks {list(self.tasks)}; "
                "use .tasks for multi-task scenarios"
            )
        return self.tasks[0]

    def to_dict(self) -> dict[str, Any]:
        """The scenario as a JSON-ready dict.

        Returns:
            dict[str, Any]: Every field, tuples as lists (the compact layout's keys, except
            ``scenario_id`` for ``dialogue_id``).
        """
        return {
            "scenario_id": self.scenario_id,
            "tasks": list(self.tasks),
            "domains": list(self.domains),
            "happy": self.happy,
            "multitask": self.multitask,
            "completion_level": self.completion_level,
            "user_task": self.user_task,
            "wizard_task": self.wizard_task,
            "user_guide": list(self.user_guide),
            "n_user_utterances": self.n_user_utterances,
            "n_system_utterances": self.n_system_utterances,
        }


def _fill_domains(domains: Iterable[Any], tasks: tuple[str, ...]) -> tuple[str, ...]:
    """STAR stores ``null`` as the domain of some trivia dialogues: fill it from the task name."""
    out = []
    for d in domains:
        if d is None:
            if len(tasks) != 1:
                continue
            d = task_domain(tasks[0])
        if d not in out:
            out.append(d)
    return tuple(out)


_SCENARIO_TYPES: dict[str, type | tuple[type, ...]] = {
    "tasks": list,
    "domains": list,
    "happy": bool,
    "multitask": bool,
    "completion_level": str,
    "user_task": str,
    "wizard_task": str,
    "user_guide": list,
    "n_user_utterances": int,
    "n_system_utterances": int,
}


def scenario_from_row(row: Any, where: str, errors: list[str]) -> Scenario | None:
    """A :class:`Scenario` from one line of ``scenarios.jsonl``; problems go to ``errors``.

    Args:
        row: The parsed line: an object with ``dialogue_id`` (int or str), ``tasks``,
            ``domains``, ``happy``, ``multitask``, ``completion_level``, ``user_task``,
            ``wizard_task``, ``user_guide``, ``n_user_utterances`` and ``n_system_utterances``.
        where: Where the row comes from (e.g. ``"scenarios.jsonl:12"``), prefixed to each problem.
        errors: A list to which one ``"where: problem; problem"`` line is appended when the row is
            wrong (not an object, a missing key, a value of the wrong type).

    Returns:
        Scenario | None: The scenario, or None when the row is wrong (then ``errors`` grew).
    """
    if not isinstance(row, dict):
        errors.append(f"{where}: expected a JSON object, got {type(row).__name__}")
        return None
    bad = []
    if not isinstance(row.get("dialogue_id"), (int, str)) or isinstance(row.get("dialogue_id"), bool):
        bad.append("'dialogue_id' missing or not an int/str")
    for key, typ in _SCENARIO_TYPES.items():
        if key not in row:
            bad.append(f"missing key {key!r}")
        elif not isinstance(row[key], typ) or (typ is int and isinstance(row[key], bool)):
            bad.append(f"{key!r} should be {typ.__name__}, got {type(row[key]).__name__}")
    if not bad and not all(isinstance(t, str) for t in row["tasks"]):
        bad.append("'tasks' should be a list of strings")
    if bad:
        errors.append(f"{where}: " + "; ".join(bad))
        return None
    tasks = tuple(row["tasks"])
    return Scenario(
        scenario_id=str(row["dialogue_id"]),
        tasks=tasks,
        domains=_fill_domains(row["domains"], tasks),
        happy=row["happy"],
        multitask=row["multitask"],
        completion_level=row["completion_level"],
        user_task=row["user_task"],
        wizard_task=row["wizard_task"],
        user_guide=tuple(str(g) for g in row["user_guide"]),
        n_user_utterances=row["n_user_utterances"],
        n_system_utterances=row["n_system_utterances"],
    )


def _camel_to_snake(key: str) -> str:
    if key == "APIName":
        return "api"
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", key).lower()


def normalize_event(event: dict[str, Any]) -> dict[str, Any]:
    """An original-layout event (``Agent``, ``Action``, ``Text``, ``ActionLabel``, ``APIName``...) with
    the compact layout's keys (``agent``, ``action``, ``text``, ``action_label``, ``api``...).
    ``text`` is always present (None when the event has none). Already-normalised events pass through.

    Args:
        event: One event of a dialogue file's ``Events`` (or an already-normalised one).

    Returns:
        dict[str, Any]: A new dict with snake_case keys (``APIName`` becomes ``api``), values
        unchanged, and ``text`` set.
    """
    out = {_camel_to_snake(k): v for k, v in event.items()}
    out.setdefault("text", None)
    return out


def count_utterances(events: Iterable[dict[str, Any]]) -> tuple[int, int]:
    """(user, system) utterances of a STAR dialogue: ``User/utter`` events, and ``Wizard`` events that
    sent a message (``utter``, or ``pick_suggestion`` of a response template). These are the counts of
    ``n_user_utterances`` / ``n_system_utterances`` in the compact layout (identical on all 6,652).

    Args:
        events: Normalised events (:func:`normalize_event`: keys ``agent`` and ``action``).

    Returns:
        tuple[int, int]: ``(n_user_utterances, n_system_utterances)``.
    """
    n_user = n_sys = 0
    for e in events:
        if e.get("agent") == "User" and e.get("action") == "utter":
            n_user += 1
        elif e.get("agent") == "Wizard" and e.get("action") in ("utter", "pick_suggestion"):
            n_sys += 1
    return n_user, n_sys


def scenario_from_dialogue(dialogue: Any, where: str, errors: list[str]) -> Scenario | None:
    """A :class:`Scenario` from one original-layout dialogue file (``dialogues/<id>.json``).

    Mapping: ``scenario_id`` = ``DialogueID``; ``tasks`` = ``Scenario.Tasks`` when present, else the
    ``Task`` of each ``Scenario.WizardCapabilities`` entry (order kept, duplicates dropped);
    ``domains`` = ``Scenario.Domains``; ``happy``/``multitask`` = ``Scenario.Happy``/``MultiTask``;
    ``completion_level`` = ``CompletionLevel``; ``user_task``/``wizard_task`` = ``Scenario.UserTask``/
    ``WizardTask``; ``user_guide`` = the texts of the ``UserGuide``/``instruct`` events in order;
    lengths by :func:`count_utterances`.

    Args:
        dialogue: The parsed dialogue file.
        where: Where it comes from (e.g. its path), prefixed to each problem.
        errors: A list to which one ``"where: problem; problem"`` line is appended when the file is
            wrong (not an object; missing ``DialogueID``, ``Scenario``, ``Events`` or
            ``CompletionLevel``; a ``Scenario`` key of the wrong type; no task).

    Returns:
        Scenario | None: The scenario, or None when the file is wrong (then ``errors`` grew).
    """
    if not isinstance(dialogue, dict):
        errors.append(f"{where}: expected a JSON object, got {type(dialogue).__name__}")
        return None
    sc = dialogue.get("Scenario")
    events = dialogue.get("Events")
    bad = []
    if "DialogueID" not in dialogue:
        bad.append("missing key 'DialogueID'")
    if not isinstance(sc, dict):
        bad.append("missing or non-object 'Scenario'")
    if not isinstance(events, list):
        bad.append("missing or non-list 'Events'")
    if bad:
        errors.append(f"{where}: " + "; ".join(bad))
        return None
    if isinstance(sc.get("Tasks"), list):
        tasks_raw = sc["Tasks"]
    else:
        tasks_raw = [c.get("Task") for c in sc.get("WizardCapabilities") or [] if isinstance(c, dict)]
    tasks: list[str] = []
    for t in tasks_raw:
        if isinstance(t, str) and t not in tasks:
            tasks.append(t)
    for key, typ in (
        ("Domains", list),
        ("Happy", bool),
        ("MultiTask", bool),
        ("UserTask", str),
        ("WizardTask", str),
    ):
        if not isinstance(sc.get(key), typ):
            bad.append(f"Scenario.{key} missing or not a {typ.__name__}")
    if not tasks:
        bad.append("no task: Scenario.Tasks and Scenario.WizardCapabilities[].Task are both empty")
    if not isinstance(dialogue.get("CompletionLevel"), str):
        bad.append("'CompletionLevel' missing or not a string")
    if bad:
        errors.append(f"{where}: " + "; ".join(bad))
        return None
    norm = [normalize_event(e) for e in events if isinstance(e, dict)]
    n_user, n_sys = count_utterances(norm)
    guide = tuple(
        e["text"]
        for e in norm
        if e.get("agent") == "UserGuide" and e.get("action") == "instruct" and e["text"] is not None
    )
    tasks_t = tuple(tasks)
    return Scenario(
        scenario_id=str(dialogue["DialogueID"]),
        tasks=tasks_t,
        domains=_fill_domains(sc["Domains"], tasks_t),
        happy=sc["Happy"],
        multitask=sc["MultiTask"],
        completion_level=dialogue["CompletionLevel"],
        user_task=sc["UserTask"],
        wizard_task=sc["WizardTask"],
        user_guide=guide,
        n_user_utterances=n_user,
        n_system_utterances=n_sys,
    )
