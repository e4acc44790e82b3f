"""The ``sgd`` track of Task 3: real SGD dialogues, forked by editing them at a known turn.

A second real-text track beside ``star-human`` (:mod:`dialfork_dataset.tracks.star_human`), made the same
way from the Schema-Guided Dialogue dataset (SGD; Rastogi et al., 2020; CC BY-SA 4.0): dialogues of
one service whose user searches and then completes the service's one transaction (FindBus, then
BuyBusTicket), written by crowd workers from generated outlines, whose system turns carry gold
dialogue acts.

Workflows. Each of the ten services with exactly one transactional intent has a hand-written
workflow file in ``examples/workflows/sgd/`` (:data:`WORKFLOWS_DIR`), one task per service
(:data:`SGD_TASKS`): its search phase, then its transaction. Payment_1 (two transactional intents)
and Weather_1 (none) have no task; the stats count their dialogues (``services_without_task``).
A schema intent without required slots (Music_1's LookupSong) is reported in the stats and the
log (``schema_notes``), not guessed.

Gold steps. A system turn's gold step comes from its acts: the first act of :data:`ACT_PRIORITY`
the turn carries picks the step (:func:`step_for_turn`): ``REQUEST`` the ``ask`` step of the turn's
first requested slot, the other acts the step :attr:`SgdTask.steps` names for them.

Conformance (:data:`CONFORMANCE_RULE`, :func:`exclusion_reason`), then the edits, the split, the
records and the written folder exactly as the star-human track's (:func:`build_sgd_track`,
:func:`write_sgd_track`, :func:`ensure_sgd_track`): records with ``track`` ``"sgd"``,
``text_variant`` ``"crowd"``, ids ``sgd-<SGD split>-<SGD dialogue id>`` (SGD ids repeat across its
train, dev and test files). The manifest records the workflow folder as the corpus's workflow
source (its ``star`` key, ``workflow:<folder>``), so the workflow-aware detector finds it
(:func:`dialfork_metrics.task3.workflow.rules.workflow_for_data`).
"""

from __future__ import annotations

import gzip
import json
import logging
import os
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from ..errors import CollectedErrors
from .engine import (
    EDIT_TYPES,
    EDITS,
    MIN_TURNS,
    TRACK_FIELDS,
    HumanDialogue,
    StarHumanTrack,
    TrackSpec,
    build_track,
    check_track_settings,
    ensure_track,
    read_manifest,
    write_track,
)

log = logging.getLogger(__name__)

TRACK = "sgd"
#: The records' ``text_variant``: SGD's text was written by crowd workers.
TEXT_VARIANT = "crowd"
#: The manifest format of a written track.
MANIFEST_FORMAT = "dialfork-sgd-track-manifest/1"
#: The record file of a written track (every record, with the track's fields).
RECORDS_FILE = "sgd.jsonl"
#: The environment variable naming the SGD folder; else :data:`DEFAULT_SGD_DIR`.
SGD_ENV = "DIALFORK_SGD_DIR"
#: The SGD folder when none is given and :data:`SGD_ENV` is unset (relative to the working folder).
DEFAULT_SGD_DIR = "../shared/sgd"
#: The files an SGD folder holds.
SGD_FILES: tuple[str, ...] = ("dialogues.jsonl.gz", "schema.json")
#: The hand-written workflow files of the track (a source checkout's ``examples/workflows/sgd``).
WORKFLOWS_DIR = Path(__file__).resolve().parents[2] / "examples" / "workflows" / "sgd"
#: Which act of a system turn picks its gold step, first to last (``INFORM_COUNT`` comes with ``OFFER``).
ACT_PRIORITY: tuple[str, ...] = (
    "NOTIFY_SUCCESS",
    "NOTIFY_FAILURE",
    "CONFIRM",
    "OFFER_INTENT",
    "REQUEST",
    "OFFER",
    "INFORM_COUNT",
    "INFORM",
    "REQ_MORE",
    "GOODBYE",
)
#: The reasons a dialogue of a task's service is not conformant, in the order they are tested.
EXCLUSION_REASONS: tuple[str, ...] = (
    "other service",
    "other intent",
    "no transaction",
    "search after the transaction",
    "transaction failed",
    "no success",
    "unmapped turn",
    f"T < {MIN_TURNS}",
)

CONFORMANCE_RULE = (
    "An SGD dialogue is a conformant dialogue of the sgd track's task of its service when it has one "
    "service, every frame of its turns is that service's, the active intents of its user turns (NONE "
    "aside) are only the task's transactional intent and, optionally, the service's search intent, every "
    "search turn coming before the first transaction turn (SGD_TASKS names both intents), the transaction "
    "succeeds (a system turn carries NOTIFY_SUCCESS and none NOTIFY_FAILURE), every system turn maps to a "
    "step of the task's workflow (its first act in the order NOTIFY_SUCCESS, NOTIFY_FAILURE, CONFIRM, "
    "OFFER_INTENT, REQUEST (its first slot's ask step), OFFER, INFORM_COUNT, INFORM, REQ_MORE, GOODBYE "
    "picks the step), and it has T >= 4 system turns. Turns are SGD's turns, in order, text stripped."
)


class SgdError(CollectedErrors):
    """The SGD folder or the track's workflows are missing or wrong; ``errors`` lists every problem.

    Args:
        message: The exception's text.
        errors: Every problem, one ``where: problem`` line each; defaults to ``[message]``.
    """


@dataclass(frozen=True)
class SgdTask:
    """A task of the sgd track: an SGD service's transaction and the workflow steps of its acts.

    Attributes:
        name: The task (a task of the workflow files).
        service: The SGD service.
        transaction: The service's transactional intent.
        search: The search intent whose dialogues lead to the transaction (None: none).
        steps: Act -> the step a system turn carrying it says (``REQUEST`` is the ask step of the
            requested slot, read from the workflow's ``ask:``).
    """

    name: str
    service: str
    transaction: str
    search: str | None
    steps: Mapping[str, str] = field(hash=False)


def _task(name: str, service: str, transaction: str, search: str, prefix: str, **steps: str) -> SgdTask:
    acts = {
        "OFFER": steps["offer"],
        "INFORM_COUNT": steps["offer"],
        "INFORM": f"{prefix}_inform_details",
        "OFFER_INTENT": steps["offer_intent"],
        "CONFIRM": steps["confirm"],
        "NOTIFY_SUCCESS": steps["success"],
        "NOTIFY_FAILURE": steps["failure"],
        "REQ_MORE": "anything_else",
        "GOODBYE": "goodbye",
    }
    return SgdTask(name, service, transaction, search, {a: acts[a] for a in ACT_PRIORITY if a in acts})


#: The track's tasks: the services of the SGD subset with exactly one transactional intent.
# fmt: off
SGD_TASKS: tuple[SgdTask, ...] = (
    _task(
        "banks_transfer_money", "Banks_1", "TransferMoney", "CheckBalance", "banks",
        offer="banks_offer_balance", offer_intent="banks_offer_transfer", confirm="banks_confirm_transfer",
        success="banks_transfer_succeeded", failure="banks_transfer_failed",
    ),
    _task(
        "buses_buy_bus_ticket", "Buses_1", "BuyBusTicket", "FindBus", "buses",
        offer="buses_offer_bus", offer_intent="buses_offer_purchase", confirm="buses_confirm_purchase",
        success="buses_purchase_succeeded", failure="buses_purchase_failed",
    ),
    _task(
        "calendar_add_event", "Calendar_1", "AddEvent", "GetAvailableTime", "calendar",
        offer="calendar_offer_free_time", offer_intent="calendar_offer_event", confirm="calendar_confirm_event",
        success="calendar_event_added", failure="calendar_adding_failed",
    ),
    _task(
        "hotels_reserve_hotel", "Hotels_1", "ReserveHotel", "SearchHotel", "hotels",
        offer="hotels_offer_hotel", offer_intent="hotels_offer_reservation",
        confirm="hotels_confirm_reservation", success="hotels_reservation_succeeded",
        failure="hotels_reservation_failed",
    ),
    _task(
        "media_play_movie", "Media_1", "PlayMovie", "FindMovies", "media",
        offer="media_offer_movie", offer_intent="media_offer_playing", confirm="media_confirm_playing",
        success="media_playing_started", failure="media_playing_failed",
    ),
    _task(
        "music_play_song", "Music_1", "PlaySong", "LookupSong", "music",
        offer="music_offer_song", offer_intent="music_offer_playing", confirm="music_confirm_playing",
        success="music_playing_started", failure="music_playing_failed",
    ),
    _task(
        "rentalcars_reserve_car", "RentalCars_1", "ReserveCar", "GetCarsAvailable", "rentalcars",
        offer="rentalcars_offer_car", offer_intent="rentalcars_offer_reservation",
        confirm="rentalcars_confirm_reservation", success="rentalcars_reservation_succeeded",
        failure="rentalcars_reservation_failed",
    ),
    _task(
        "dentist_book_appointment", "Services_2", "BookAppointment", "FindProvider", "dentist",
        offer="dentist_offer_dentist", offer_intent="dentist_offer_appointment",
        confirm="dentist_confirm_appointment", success="dentist_booking_succeeded",
        failure="dentist_booking_failed",
    ),
    _task(
        "doctor_book_appointment", "Services_3", "BookAppointment", "FindProvider", "doctor",
        offer="doctor_offer_doctor", offer_intent="doctor_offer_appointment",
        confirm="doctor_confirm_appointment", success="doctor_booking_succeeded",
        failure="doctor_booking_failed",
    ),
    _task(
        "trains_get_train_tickets", "Trains_1", "GetTrainTickets", "FindTrains", "trains",
        offer="trains_offer_train", offer_intent="trains_offer_tickets", confirm="trains_confirm_tickets",
        success="trains_booking_succeeded", failure="trains_booking_failed",
    ),
)
# fmt: on
_BY_NAME = {t.name: t for t in SGD_TASKS}


# ----------------------------------------------------------------------------- reading SGD
def resolve_sgd(path: str | os.PathLike | None = None) -> Path:
    """The SGD folder: ``path``, else ``$DIALFORK_SGD_DIR``, else :data:`DEFAULT_SGD_DIR`.

    Args:
        path: The folder as the user gave it, or None.

    Returns:
        Path: The folder (not checked; :func:`read_sgd` checks it).
    """
    return Path(path if path is not None else (os.environ.get(SGD_ENV) or DEFAULT_SGD_DIR)).expanduser()


@dataclass
class SgdCorpus:
    """An SGD folder: its schema and its dialogues (read on demand).

    Attributes:
        path: The folder.
        schema: Service name -> its schema (``intents`` with ``required_slots``, ``slots``...).
    """

    path: Path
    schema: dict[str, dict[str, Any]]

    def dialogues(self) -> Iterator[dict[str, Any]]:
        """The dialogues of ``dialogues.jsonl.gz``, in file order.

        Yields:
            dict[str, Any]: One SGD dialogue (``dialogue_id``, ``services``, ``turns``, ``split``).

        Raises:
            SgdError: A line is not a JSON object with ``dialogue_id`` and ``turns`` (every bad line
                named as ``file:line``), or the file is unreadable.
        """
        f = self.path / "dialogues.jsonl.gz"
        errors: list[str] = []
        try:
            with gzip.open(f, "rt", encoding="utf-8") as fh:
                for i, line in enumerate(fh, 1):
                    if not line.strip():
                        continue
                    try:
                        d = json.loads(line)
                    except ValueError as e:
                        errors.append(f"{f}:{i}: bad JSON ({e})")
                        continue
                    if (
                        not isinstance(d, dict)
                        or not isinstance(d.get("turns"), list)
                        or "dialogue_id" not in d
                    ):
                        errors.append(f"{f}:{i}: not an SGD dialogue (an object with dialogue_id and turns)")
                        continue
                    yield d
        except (OSError, EOFError) as e:
            raise SgdError(
                f"{f}: unreadable ({e}); a gzip file of SGD dialogues, one JSON object a line"
            ) from None
        SgdError.raise_if(errors, str(f))

    @cached_property
    def transactional(self) -> dict[str, list[str]]:
        """Service -> its transactional intents (schema order)."""
        return {
            s: [i["name"] for i in sch.get("intents", ()) if i.get("is_transactional")]
            for s, sch in self.schema.items()
        }

    def schema_notes(self) -> list[str]:
        """The schema's intents without required slots, one line each (reported, not guessed).

        Returns:
            list[str]: ``"schema.json: Music_1: intent LookupSong has no required slots ..."`` lines.
        """
        return [
            f"{self.path / 'schema.json'}: {s}: intent {i['name']} has no required slots (its optional "
            f"slots: {', '.join(i.get('optional_slots') or ()) or 'none'}); a search that asks nothing"
            for s, sch in self.schema.items()
            for i in sch.get("intents", ())
            if not i.get("required_slots")
        ]


def read_sgd(path: str | os.PathLike | None = None) -> SgdCorpus:
    """Open an SGD folder (``dialogues.jsonl.gz`` and ``schema.json``, as in ``../shared/sgd``).

    Args:
        path: The folder; None: ``$DIALFORK_SGD_DIR``, else :data:`DEFAULT_SGD_DIR`.

    Returns:
        SgdCorpus: The folder with its parsed schema.

    Raises:
        SgdError: The folder or one of its files is missing (one line naming what is missing and
            where it was looked for), or ``schema.json`` is not a list of service schemas.
    """
    p = resolve_sgd(path)
    if not p.is_dir():
        raise SgdError(
            f"no SGD folder at {p}: give --sgd PATH (or set ${SGD_ENV}) to a folder holding "
            f"{' and '.join(SGD_FILES)} (e.g. ../shared/sgd)"
        )
    missing = [n for n in SGD_FILES if not (p / n).is_file()]
    if missing:
        raise SgdError(
            f"the SGD folder {p} lacks {' and '.join(missing)} (looked for "
            f"{', '.join(str(p / n) for n in missing)}); an SGD folder holds {' and '.join(SGD_FILES)}"
        )
    f = p / "schema.json"
    try:
        data = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise SgdError(
            f"{f}: unreadable or not JSON ({e}); SGD's schema.json is a list of services"
        ) from None
    if not isinstance(data, list) or not all(isinstance(s, dict) and "service_name" in s for s in data):
        raise SgdError(f"{f}: not a list of SGD service schemas (objects with service_name and intents)")
    corpus = SgdCorpus(p, {s["service_name"]: s for s in data})
    for note in corpus.schema_notes():
        log.info("%s", note)
    return corpus


# ----------------------------------------------------------------------------- acts -> steps
def turn_act(actions: Sequence[Mapping[str, Any]]) -> str | None:
    """The act of a system turn that picks its step: the first of :data:`ACT_PRIORITY` it carries.

    Args:
        actions: The turn's actions (``{"act", "slot", "values"}``).

    Returns:
        str | None: The act, or None when the turn carries none of :data:`ACT_PRIORITY`.

    Example:
        >>> turn_act([{"act": "OFFER", "slot": "title"}, {"act": "INFORM_COUNT", "slot": "count"}])
        'OFFER'
        >>> turn_act([{"act": "INFORM"}, {"act": "NOTIFY_SUCCESS"}])
        'NOTIFY_SUCCESS'
    """
    acts = {a.get("act") for a in actions}
    return next((a for a in ACT_PRIORITY if a in acts), None)


def step_for_turn(
    actions: Sequence[Mapping[str, Any]], task: SgdTask, asks: Mapping[str, str]
) -> tuple[str | None, str | None]:
    """The workflow step a system turn says, from its gold acts.

    Args:
        actions: The turn's actions (``{"act", "slot", "values"}``).
        task: The dialogue's :class:`SgdTask`.
        asks: Slot -> the task's step that asks for it (the workflow's ``ask:``).

    Returns:
        tuple[str | None, str | None]: ``(step, act)``: the act that picked it (:func:`turn_act`)
        and its step; the step is None when the act has none (a ``REQUEST`` of a slot no step asks
        for), both are None when the turn carries no act of :data:`ACT_PRIORITY`.

    Example:
        >>> t = _BY_NAME["buses_buy_bus_ticket"]
        >>> step_for_turn([{"act": "REQUEST", "slot": "travelers"}], t, {"travelers": "buses_ask_travelers"})
        ('buses_ask_travelers', 'REQUEST')
    """
    act = turn_act(actions)
    if act is None:
        return None, None
    if act == "REQUEST":
        slot = next(a.get("slot") for a in actions if a.get("act") == "REQUEST")
        return asks.get(slot), act
    return task.steps.get(act), act


def _frame(turn: Mapping[str, Any]) -> Mapping[str, Any]:
    frames = turn.get("frames") or [{}]
    return frames[0] if isinstance(frames[0], Mapping) else {}


def exclusion_reason(dialogue: Mapping[str, Any], task: SgdTask, asks: Mapping[str, str]) -> str | None:
    """Why an SGD dialogue is not a conformant dialogue of ``task`` (:data:`CONFORMANCE_RULE`), or None.

    Args:
        dialogue: An SGD dialogue (``services``, ``turns`` with ``speaker``, ``frames``).
        task: The task of its service.
        asks: Slot -> the task's step that asks for it.

    Returns:
        str | None: The first reason of :data:`EXCLUSION_REASONS` that applies, else None.
    """
    turns = dialogue.get("turns") or []
    if list(dialogue.get("services") or ()) != [task.service] or any(
        len(t.get("frames") or ()) != 1 or _frame(t).get("service") != task.service for t in turns
    ):
        return "other service"
    intents = [
        _frame(t).get("state", {}).get("active_intent")
        for t in turns
        if t.get("speaker") == "USER" and _frame(t).get("state", {}).get("active_intent") != "NONE"
    ]
    if any(i not in (task.transaction, task.search) for i in intents):
        return "other intent"
    if task.transaction not in intents:
        return "no transaction"
    if task.search in intents[intents.index(task.transaction) :]:
        return "search after the transaction"
    system = [t for t in turns if t.get("speaker") == "SYSTEM"]
    acts = [{a.get("act") for a in _frame(t).get("actions") or ()} for t in system]
    if any("NOTIFY_FAILURE" in a for a in acts):
        return "transaction failed"
    if not any("NOTIFY_SUCCESS" in a for a in acts):
        return "no success"
    if any(step_for_turn(_frame(t).get("actions") or (), task, asks)[0] is None for t in system):
        return "unmapped turn"
    if len(system) < MIN_TURNS:
        return f"T < {MIN_TURNS}"
    return None


def sgd_dialogue(
    dialogue: Mapping[str, Any], task: SgdTask, asks: Mapping[str, str], domain: str
) -> HumanDialogue | None:
    """The conformant dialogue made of one SGD dialogue, or None when it is not conformant.

    Args:
        dialogue: An SGD dialogue (with its ``split``).
        task: The task of its service.
        asks: Slot -> the task's step that asks for it.
        domain: The task's domain.

    Returns:
        HumanDialogue | None: The dialogue (``scenario_id`` ``<SGD split>-<SGD id>``, ``variant``
        ``"crowd"``, ``id_prefix`` ``"sgd"``), or None when :func:`exclusion_reason` gives a reason.
    """
    if exclusion_reason(dialogue, task, asks) is not None:
        return None
    turns, nodes = [], []
    for t in dialogue["turns"]:
        speaker = "system" if t["speaker"] == "SYSTEM" else "user"
        turns.append({"speaker": speaker, "text": str(t.get("utterance") or "").strip()})
        if speaker == "system":
            nodes.append(step_for_turn(_frame(t).get("actions") or (), task, asks)[0])
    sid = f"{dialogue.get('split') or 'sgd'}-{dialogue['dialogue_id']}"
    return HumanDialogue(sid, task.name, domain, tuple(turns), tuple(nodes), TEXT_VARIANT, 0, TRACK)


# ----------------------------------------------------------------------------- the track
def _workflows(workflows: str | os.PathLike | None) -> Any:
    from ..workflow.files import WorkflowCorpus

    p = Path(workflows) if workflows is not None else WORKFLOWS_DIR
    if not p.exists():
        raise SgdError(
            f"no workflow files of the sgd track at {p}: pass workflows= (--workflows) the folder of "
            "examples/workflows/sgd of a DialFork source checkout"
        )
    return WorkflowCorpus(p)


def _check_tasks(tasks: Iterable[str] | str | None) -> list[SgdTask]:
    if tasks is None:
        return list(SGD_TASKS)
    if isinstance(tasks, str):
        tasks = [t.strip() for t in tasks.split(",") if t.strip()]
    names = list(dict.fromkeys(tasks))
    unknown = [t for t in names if t not in _BY_NAME]
    if unknown or not names:
        raise SgdError(
            f"unknown sgd task(s) {', '.join(unknown) or '(none given)'}; known tasks: " + ", ".join(_BY_NAME)
        )
    return [_BY_NAME[t] for t in names]


def _asks(wf: Any, tasks: Sequence[SgdTask]) -> dict[str, dict[str, str]]:
    """Task -> slot -> its ask step; checks that the workflows hold every task and act step."""
    errors: list[str] = []
    out: dict[str, dict[str, str]] = {}
    for t in tasks:
        if t.name not in wf.tasks:
            errors.append(f"{wf.path}: no task {t.name!r} (tasks: {', '.join(wf.tasks)})")
            continue
        wt = wf.tasks[t.name]
        for act, step in t.steps.items():
            if wt.kinds.get(step) != "action":
                errors.append(
                    f"{wt.source_file}: task {t.name!r} has no action step {step!r}, the step of SGD act {act}"
                )
        out[t.name] = {slot: step for step, slot in wt.asks.items()}
    SgdError.raise_if(errors, f"the sgd track's workflows ({wf.path})")
    return out


def _spec(wf: Any) -> TrackSpec:
    from ..workflow.roles import derive_roles

    questions = {n: set(derive_roles(t).with_role("question")) for n, t in wf.tasks.items()}
    return TrackSpec(
        name=TRACK,
        manifest_format=MANIFEST_FORMAT,
        records_file=RECORDS_FILE,
        domain_of=lambda task: wf.tasks[task].domain,
        is_question=lambda task, node: node in questions.get(task, ()),
        code_files=(Path(__file__), Path(__file__).with_name("engine.py")),
        card_text="Dialogues of the Schema-Guided Dialogue dataset (Rastogi et al., 2020; CC BY-SA 4.0) "
        "that follow the workflow of their service's transaction, and forks made by editing them at a "
        "known system turn. Written by `python -m dialfork_dataset sgd-track`; `manifest.json` holds the "
        "rule, the settings and the stats.",
    )


def _id_key(h: HumanDialogue) -> tuple:
    return (
        h.task,
        [(0, int(x), "") if x.isdigit() else (1, 0, x) for x in h.scenario_id.replace("-", "_").split("_")],
    )


def _scan(corpus: SgdCorpus, tasks: Sequence[SgdTask], wf: Any) -> tuple[list[HumanDialogue], dict[str, Any]]:
    asks = _asks(wf, tasks)
    by_service = {t.service: t for t in tasks}
    out: list[HumanDialogue] = []
    excluded: dict[str, Counter] = {t.name: Counter() for t in tasks}
    acts: Counter[str] = Counter()
    carried: Counter[str] = Counter()
    others: Counter[str] = Counter()
    n_seen = 0
    for d in corpus.dialogues():
        services = list(d.get("services") or ())
        task = by_service.get(services[0]) if len(services) == 1 else None
        if task is None:
            others[",".join(services) or "(none)"] += 1
            continue
        n_seen += 1
        reason = exclusion_reason(d, task, asks[task.name])
        if reason is not None:
            excluded[task.name][reason] += 1
            continue
        h = sgd_dialogue(d, task, asks[task.name], wf.tasks[task.name].domain)
        out.append(h)
        for t in d["turns"]:
            if t["speaker"] == "SYSTEM":
                a = _frame(t).get("actions") or ()
                acts[turn_act(a)] += 1
                carried.update({x.get("act") for x in a})
    out.sort(key=_id_key)
    n_turns = sum(acts.values())
    share = {a: round(acts[a] / n_turns, 4) if n_turns else 0.0 for a in ACT_PRIORITY}
    carrying = {a: round(carried[a] / n_turns, 4) if n_turns else 0.0 for a in sorted(carried)}
    info = {
        "dialogues_of_the_services": n_seen,
        "excluded_per_task": {t: dict(sorted(c.items())) for t, c in excluded.items()},
        "excluded": dict(sorted(sum(excluded.values(), Counter()).items())),
        "act_share": {"system_turns": n_turns, "picking_the_step": share, "carried": carrying},
        "other_services": dict(sorted(others.items())),
    }
    return out, info


def _cap(dialogues: list[HumanDialogue], cap: int | None, seed: int) -> list[HumanDialogue]:
    if cap is None:
        return dialogues
    from .engine import _rng

    by_task: dict[str, list[HumanDialogue]] = defaultdict(list)
    for h in dialogues:
        by_task[h.task].append(h)
    keep: set[str] = set()
    for task, hs in by_task.items():
        if len(hs) <= cap:
            keep.update(h.dialogue_id for h in hs)
        else:
            keep.update(
                hs[i].dialogue_id for i in _rng(seed, f"cap|{task}").choice(len(hs), cap, replace=False)
            )
    return [h for h in dialogues if h.dialogue_id in keep]


def _check_cap(cap: Any) -> None:
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
        raise ValueError(f"max_dialogues_per_task must be None or an integer >= 1, got {cap!r}")


def conformant_sgd_dialogues(
    sgd: str | os.PathLike | SgdCorpus | None = None,
    *,
    tasks: Iterable[str] | str | None = None,
    workflows: str | os.PathLike | None = None,
) -> list[HumanDialogue]:
    """The conformant dialogues of the sgd track (:data:`CONFORMANCE_RULE`), by task then id.

    Args:
        sgd: The SGD folder or an :class:`SgdCorpus`; None: :func:`resolve_sgd`'s.
        tasks: Task names (:data:`SGD_TASKS`; an iterable or a comma-separated string); None: all.
        workflows: The folder of the track's workflow files; None: :data:`WORKFLOWS_DIR`.

    Returns:
        list[HumanDialogue]: The dialogues, their ``system_nodes`` the gold steps.

    Raises:
        SgdError: The SGD folder or a file of it is missing or malformed, a task is unknown, or the
            workflows lack a task or the step of an act.
    """
    corpus = sgd if isinstance(sgd, SgdCorpus) else read_sgd(sgd)
    return _scan(corpus, _check_tasks(tasks), _workflows(workflows))[0]


def build_sgd_track(
    sgd: str | os.PathLike | SgdCorpus | None = None,
    *,
    tasks: Iterable[str] | str | None = None,
    seed: int = 0,
    fit_fraction: float = 0.5,
    max_dialogues_per_task: int | None = None,
    workflows: str | os.PathLike | None = None,
) -> StarHumanTrack:
    """Build the sgd track: conformant SGD dialogues and their edited forks.

    As :func:`~dialfork_dataset.tracks.star_human.build_star_human_track` (same edits, split, records and
    stats), plus the stats ``max_dialogues_per_task``, ``conformant_before_cap`` (task -> n),
    ``excluded_per_task`` (task -> reason -> n), ``dialogues_of_the_services``, ``act_share`` (of the
    conformant dialogues' system turns: by the act that picked the step, and by the acts carried),
    ``services_without_task`` (service -> its transactional intents and dialogues: no task),
    ``other_services`` (dialogues of services outside the chosen tasks) and ``schema_notes``.

    Args:
        sgd: The SGD folder or an :class:`SgdCorpus`; None: :func:`resolve_sgd`'s.
        tasks: Task names (:data:`SGD_TASKS`; an iterable or a comma-separated string); None: all.
            Donors are drawn from these tasks only.
        seed: A non-negative integer seeding the cap, the split and the donor draws.
        fit_fraction: The share of each task's conformant dialogues put in ``train``, in (0, 1).
        max_dialogues_per_task: Keep at most this many conformant dialogues per task (a sample
            seeded by ``(seed, task)``); None: all.
        workflows: The folder of the track's workflow files; None: :data:`WORKFLOWS_DIR`.

    Returns:
        StarHumanTrack: The records (each with its ``split``) and the stats.

    Raises:
        SgdError: The SGD folder or a file of it is missing or malformed, a task is unknown, or the
            workflows lack a task or the step of an act.
        ValueError: A negative or non-integer ``seed``, ``fit_fraction`` outside (0, 1), or a bad
            ``max_dialogues_per_task``.
    """
    check_track_settings(seed, fit_fraction)
    _check_cap(max_dialogues_per_task)
    corpus = sgd if isinstance(sgd, SgdCorpus) else read_sgd(sgd)
    chosen = _check_tasks(tasks)
    wf = _workflows(workflows)
    dialogues, info = _scan(corpus, chosen, wf)
    before = Counter(h.task for h in dialogues)
    dialogues = _cap(dialogues, max_dialogues_per_task, seed)
    track = build_track(
        dialogues,
        spec=_spec(wf),
        tasks=[t.name for t in chosen],
        excluded=info["excluded"],
        variant=TEXT_VARIANT,
        seed=seed,
        fit_fraction=fit_fraction,
    )
    n_records = track.stats.pop("records")
    no_task = {
        s: {
            "transactional_intents": ints,
            "reason": f"{len(ints)} transactional intents: no single transaction to follow"
            if ints
            else "no transactional intent",
            "dialogues": info["other_services"].get(s, 0),
        }
        for s, ints in corpus.transactional.items()
        if len(ints) != 1
    }
    track.stats.update(
        {
            "max_dialogues_per_task": max_dialogues_per_task,
            "conformant_before_cap": {t.name: before[t.name] for t in chosen},
            "dialogues_of_the_services": info["dialogues_of_the_services"],
            "excluded_per_task": info["excluded_per_task"],
            "act_share": info["act_share"],
            "services_without_task": no_task,
            "other_services": info["other_services"],
            "schema_notes": corpus.schema_notes(),
            "records": n_records,
        }
    )
    return track


def _settings(sgd: str | os.PathLike, workflows: str | os.PathLike | None, stats: Mapping[str, Any]) -> dict:
    wdir = Path(workflows if workflows is not None else WORKFLOWS_DIR).resolve()
    return {
        "track": TRACK,
        "sgd": str(sgd),
        "workflows": str(wdir),
        "star": f"workflow:{wdir}",  # the workflow source the wf detector reads (workflow_for_data)
        "seed": stats["seed"],
        "fit_fraction": stats["fit_fraction"],
        "tasks": list(stats["tasks"]),
        "max_dialogues_per_task": stats.get("max_dialogues_per_task"),
    }


def write_sgd_track(
    track: StarHumanTrack,
    out: str | os.PathLike,
    *,
    sgd: str | os.PathLike,
    workflows: str | os.PathLike | None = None,
    overwrite: bool = False,
) -> Path:
    """Write the sgd track as a folder the toolkit reads like a Hub layout.

    The star-human track's folder (:func:`~dialfork_dataset.tracks.star_human.write_star_human_track`):
    ``data/<config>/<split>-*.parquet`` for ``conformant``, ``forked`` and ``task3``, ``README.md``,
    ``sgd.jsonl`` (every record) and ``manifest.json`` (format, settings, the conformance rule, the
    stats, the counts). The settings name the workflow folder twice: ``workflows`` and ``star``
    (``workflow:<folder>``, what the workflow-aware detector reads), so
    ``dialfork_metrics.task3.load_examples(out, "train"|"test")`` and the benchmark read it.

    Args:
        track: The track (:func:`build_sgd_track`).
        out: The folder to write.
        sgd: The SGD path as given by the user (recorded as is).
        workflows: The workflow folder the track was built with; None: :data:`WORKFLOWS_DIR`.
        overwrite: Replace ``out`` when it holds an sgd track written before.

    Returns:
        Path: ``out``.

    Raises:
        FileExistsError: ``out`` exists and ``overwrite`` is false, or it exists and is not an sgd
            track folder (not replaced).
        RecordError: A record breaks SPEC section 4 once its track fields are set aside, or lacks a
            track field (every problem listed; nothing is written).
    """
    wf = _workflows(workflows)
    return write_track(
        track,
        out,
        spec=_spec(wf),
        settings=_settings(sgd, workflows, track.stats),
        rule=CONFORMANCE_RULE,
        overwrite=overwrite,
    )


def read_sgd_manifest(folder: str | os.PathLike) -> dict[str, Any] | None:
    """The manifest of a written sgd track, or None when ``folder`` holds none (or another kind).

    Args:
        folder: A folder written by :func:`write_sgd_track` (or anything else).

    Returns:
        dict[str, Any] | None: The parsed ``manifest.json`` when its format is this track's.
    """
    return read_manifest(folder, _MANIFEST_ONLY)


def ensure_sgd_track(
    sgd: str | os.PathLike | None,
    out: str | os.PathLike,
    *,
    tasks: Iterable[str] | str | None = None,
    seed: int = 0,
    fit_fraction: float = 0.5,
    max_dialogues_per_task: int | None = None,
    workflows: str | os.PathLike | None = None,
) -> Path:
    """A written sgd track at ``out``: reused when its manifest has the same settings (SGD path as
    given, workflow folder, seed, fit fraction, tasks, cap), else built and written.

    Args:
        sgd: The SGD folder as given by the user; None: :func:`resolve_sgd`'s.
        out: The track folder (e.g. ``<bench out>/sgd-data``).
        tasks: Task names; None: every task of :data:`SGD_TASKS`.
        seed: The track's seed.
        fit_fraction: The share of each task's conformant dialogues in ``train``.
        max_dialogues_per_task: The cap per task; None: all.
        workflows: The workflow folder; None: :data:`WORKFLOWS_DIR`.

    Returns:
        Path: ``out``.

    Raises:
        SgdError: See :func:`build_sgd_track`.
        ValueError: See :func:`build_sgd_track`.
        FileExistsError: ``out`` exists and is not an sgd track folder.
    """
    check_track_settings(seed, fit_fraction)
    _check_cap(max_dialogues_per_task)
    sgd = str(sgd) if sgd is not None else str(resolve_sgd(None))
    names = [t.name for t in _check_tasks(tasks)]
    want = _settings(
        sgd,
        workflows,
        {
            "seed": seed,
            "fit_fraction": fit_fraction,
            "tasks": names,
            "max_dialogues_per_task": max_dialogues_per_task,
        },
    )

    def build() -> Path:
        track = build_sgd_track(
            sgd,
            tasks=names,
            seed=seed,
            fit_fraction=fit_fraction,
            max_dialogues_per_task=max_dialogues_per_task,
            workflows=workflows,
        )
        return write_sgd_track(track, out, sgd=sgd, workflows=workflows, overwrite=True)

    return ensure_track(out, spec=_MANIFEST_ONLY, settings=want, build=build)


#: The track's manifest identity (name, format, files) for reading a folder without its workflows.
_MANIFEST_ONLY = TrackSpec(
    name=TRACK,
    manifest_format=MANIFEST_FORMAT,
    records_file=RECORDS_FILE,
    domain_of=str,
    is_question=lambda task, node: False,
    code_files=(),
    card_text="",
)


__all__ = [
    "ACT_PRIORITY",
    "CONFORMANCE_RULE",
    "EDITS",
    "EDIT_TYPES",
    "EXCLUSION_REASONS",
    "SGD_TASKS",
    "TRACK_FIELDS",
    "WORKFLOWS_DIR",
    "SgdCorpus",
    "SgdError",
    "SgdTask",
    "build_sgd_track",
    "conformant_sgd_dialogues",
    "ensure_sgd_track",
    "exclusion_reason",
    "read_sgd",
    "read_sgd_manifest",
    "resolve_sgd",
    "sgd_dialogue",
    "step_for_turn",
    "turn_act",
    "write_sgd_track",
]
