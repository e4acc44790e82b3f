"""The ``star-human`` track of Task 3: STAR's human dialogues, forked by editing them at a known turn.

Detectors are otherwise measured on simulator text only. This track takes the *human* role-plays
of STAR (:meth:`~dialfork_dataset.star.StarCorpus.human_dialogues`), keeps the ones that follow their
workflow (the conformance rule, :data:`CONFORMANCE_RULE`), and makes forks by editing a conformant
dialogue at system turn ``t_k = fork_turns(T)[k-1]``: every turn before ``t_k`` is the source's,
system turn ``t_k`` differs from the source's, so the first deviating system turn is exact.

Turns. The User ``utter`` events and the Wizard ``pick_suggestion`` events with non-empty text, in
order, text stripped of surrounding white space. Consecutive turns of one speaker are kept as they
are (the record validation accepts them; none occurs in the conformant dialogues of the shared STAR
copy). Two text variants (:data:`VARIANTS`): ``picked``, a system turn's text is the suggestion the
wizard picked; ``typed``, it is the wizard's own typed draft, the last non-empty
``request_suggestions`` text after the previous system turn and before the pick (the picked text
when there is none: a *typed fallback*, counted). Both carry the pick's ``action_label`` as the
gold workflow node of the turn.

Edits (:data:`EDITS`, :data:`EDIT_TYPES`), at each ``k`` in 1..4:

* ``wic`` (WIC): from system turn ``t_k`` on, a conformant dialogue of a task of *another domain*,
  from its 2nd system turn to its end (user turns included);
* ``gr`` (GR): the same with another task of the *same domain*; a task alone in its domain gets no
  GR fork (counted in ``stats["dropped"]["gr_single_task_domain"]``);
* ``csc`` (CSC): two exchanges of another task's dialogue (its system turns 2 and 3, each with the
  user turns answering it) inserted before system turn ``t_k``; the source resumes at ``t_k``;
* ``skip`` (SSPC): system turn ``t_k`` and the user turns answering it removed (needs ``t_k < T``);
* ``repeat`` (SSPC): an earlier, answered question (a system turn before ``t_k`` whose label has the
  word ``ask`` or ``request``, e.g. ``ask_name``, ``bank_ask_pin``: STAR prefixes most labels with
  the domain, and :class:`~dialfork_dataset.star.StarTask` has no question kind) asked again at
  ``t_k`` with the user's answer, then the source resumes; none at that ``k`` when there is no such
  turn.

Donors are drawn with ``numpy.random.default_rng`` seeded by ``(seed, the fork's id)``: a task
uniformly among the eligible ones, then one of its dialogues, always of the same text variant and
the same split as the source (so no text crosses the split). A fork whose system turn ``t_k`` reads
exactly like the source's is dropped and counted.

Split: per task, the conformant dialogues are shuffled with a generator seeded by ``(seed, task)``
and the first ``floor(n * fit_fraction)`` are ``train``, the rest ``test`` (the names the Task 3
loaders use); every fork takes its source's split.

Records carry every field of :data:`~dialfork_dataset.records.RECORD_FIELDS` with its SPEC meaning
(``variant`` is the fork's variant id, here the edit kind; ``instruction`` describes the edit, since
none was injected; ``prefix_mode`` ``"reuse"``: the prefix is copied verbatim) and pass
:func:`~dialfork_dataset.records.record_errors` once the track's own fields
(:data:`TRACK_FIELDS`) are set aside: ``split``, ``track`` (``"star-human"``), ``text_variant``
(``picked``/``typed``), ``edit`` (None for a conformant dialogue), ``system_nodes`` (the gold
action label of each system turn), ``system_node_tasks`` (the task each label belongs to: a spliced
turn keeps its own task's label) and ``donor_id`` (the donor dialogue of ``wic``/``gr``/``csc``).

:func:`write_star_human_track` writes the track as a folder the toolkit reads like a Hub layout
(``data/<config>/<split>-*.parquet`` for ``conformant``, ``forked``, ``task3``, a ``README.md``
naming them, ``manifest.json``, and every record in ``star_human.jsonl``), so that
``dialfork_metrics.task3.load_examples(folder, "train"|"test")`` and the benchmark read it with
this track's own split.

Another corpus of real dialogues with gold nodes makes a track the same way: a :class:`TrackSpec`
(the track's name, files, domains and question test; :data:`STAR_HUMAN` is this track's) and its
conformant dialogues as :class:`HumanDialogue` go to :func:`build_track` and
:func:`write_track` (:mod:`dialfork_dataset.tracks.sgd` makes the ``sgd`` track so).
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..star.common import StarError, task_domain
from .engine import (
    MIN_TURNS,
    VARIANTS,
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

TRACK = "star-human"
#: The manifest format of a written track.
MANIFEST_FORMAT = "dialfork-star-human-manifest/1"
#: The record file of a written track (every record, with the track's fields).
RECORDS_FILE = "star_human.jsonl"

CONFORMANCE_RULE = (
    "A STAR human dialogue is a conformant dialogue of the star-human track when its scenario is "
    'single-task (one task, multitask false), happy is true and completion_level is "Complete" '
    "(scenarios.jsonl), every system turn is a Wizard pick_suggestion carrying an action_label (a "
    "Wizard utter turn disqualifies the dialogue), and it has T >= 4 system turns. Turns are the User "
    "utter and Wizard pick_suggestion events with non-empty text, in order; consecutive turns of one "
    "speaker are kept as they are."
)

_SKIP_WORDS = frozenset({"ask", "request"})


# ----------------------------------------------------------------------------- conformance
def _text(e: Mapping[str, Any]) -> str:
    t = e.get("text")
    return t.strip() if isinstance(t, str) else ""


def exclusion_reason(scenario: Any, events: Sequence[Mapping[str, Any]]) -> str | None:
    """Why a human dialogue is not a conformant dialogue of the track, or None when it is one.

    Args:
        scenario: Its :class:`~dialfork_dataset.star.Scenario` (``tasks``, ``multitask``, ``happy``,
            ``completion_level`` are read).
        events: Its events (compact-layout keys: ``agent``, ``action``, ``text``, ``action_label``).

    Returns:
        str | None: ``"multi-task"``, ``"not happy"``, ``"not Complete"``, ``"wizard utter"``,
        ``"unlabelled pick"`` or ``"T < 4"`` (the first that applies, in that order), else None.
    """
    if len(scenario.tasks) != 1 or scenario.multitask:
        return "multi-task"
    if not scenario.happy:
        return "not happy"
    if scenario.completion_level != "Complete":
        return "not Complete"
    n_system = 0
    for e in events:
        if e.get("agent") != "Wizard" or not _text(e):
            continue
        if e.get("action") == "utter":
            return "wizard utter"
        if e.get("action") == "pick_suggestion":
            if not (isinstance(e.get("action_label"), str) and e["action_label"].strip()):
                return "unlabelled pick"
            n_system += 1
    if n_system < MIN_TURNS:
        return f"T < {MIN_TURNS}"
    return None


def human_dialogue(
    scenario: Any, events: Sequence[Mapping[str, Any]], variant: str = "picked"
) -> HumanDialogue | None:
    """The conformant dialogue made of one STAR human dialogue, or None when it is not conformant.

    Args:
        scenario: Its :class:`~dialfork_dataset.star.Scenario`.
        events: Its events (compact-layout keys).
        variant: ``"picked"`` or ``"typed"`` (:data:`VARIANTS`).

    Returns:
        HumanDialogue | None: The dialogue, or None when :func:`exclusion_reason` gives a reason.

    Raises:
        ValueError: An unknown ``variant``.
    """
    _check_variant(variant)
    if exclusion_reason(scenario, events) is not None:
        return None
    turns: list[dict[str, str]] = []
    nodes: list[str] = []
    draft: str | None = None
    fallbacks = 0
    for e in events:
        agent, action, text = e.get("agent"), e.get("action"), _text(e)
        if agent == "Wizard" and action == "request_suggestions":
            if text:
                draft = text
        elif agent == "User" and action == "utter" and text:
            turns.append({"speaker": "user", "text": text})
        elif agent == "Wizard" and action == "pick_suggestion" and text:
            if variant == "typed":
                fallbacks += draft is None
                text = draft if draft is not None else text
            turns.append({"speaker": "system", "text": text})
            nodes.append(e["action_label"].strip())
            draft = None
    task = scenario.tasks[0]
    return HumanDialogue(
        str(scenario.scenario_id), task, task_domain(task), tuple(turns), tuple(nodes), variant, fallbacks
    )


def _check_variant(variant: str) -> None:
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(VARIANTS)}, got {variant!r}")


def _corpus(star: Any):
    from ..star.corpus import StarCorpus

    corpus = star if isinstance(star, StarCorpus) else StarCorpus(star)
    p = corpus.path
    if not (p / "dialogues.jsonl.gz").is_file() and not (p / "dialogues").is_dir():
        raise StarError(
            f"the star-human track needs STAR's human dialogues (dialogues.jsonl.gz or dialogues/): "
            f"looked for {p / 'dialogues.jsonl.gz'} and {p / 'dialogues'}/, found neither; point "
            "--star to a full STAR copy (dialfork_dataset.star.download_star)"
        )
    return corpus


def _check_tasks(corpus: Any, tasks: Iterable[str] | None) -> list[str]:
    if tasks is None:
        return list(corpus.tasks)
    if isinstance(tasks, str):
        tasks = [t.strip() for t in tasks.split(",") if t.strip()]
    tasks = list(dict.fromkeys(tasks))
    unknown = [t for t in tasks if t not in corpus.tasks]
    if unknown or not tasks:
        raise StarError(
            f"unknown STAR task(s) {', '.join(unknown) or '(none given)'}; known tasks: "
            + ", ".join(corpus.tasks)
        )
    return tasks


def _scan(corpus: Any, tasks: Sequence[str], variant: str) -> tuple[list[HumanDialogue], Counter]:
    wanted = set(tasks)
    out: list[HumanDialogue] = []
    excluded: Counter[str] = Counter()
    for d in corpus.human_dialogues():
        s = corpus.scenario(d["scenario_id"])
        if not wanted & set(s.tasks):
            continue
        reason = exclusion_reason(s, d["events"])
        if reason is not None:
            excluded[reason] += 1
            continue
        h = human_dialogue(s, d["events"], variant)
        if h is not None:
            out.append(h)
    out.sort(key=lambda h: (h.task, _id_key(h.scenario_id)))
    return out, excluded


def _id_key(scenario_id: str) -> tuple:
    return (0, int(scenario_id), "") if scenario_id.isdigit() else (1, 0, scenario_id)


def conformant_human_dialogues(
    star: Any, tasks: Iterable[str] | None = None, variant: str = "picked"
) -> list[HumanDialogue]:
    """The conformant human dialogues of STAR (:data:`CONFORMANCE_RULE`), by task then id.

    Args:
        star: A STAR folder or a :class:`~dialfork_dataset.star.StarCorpus`.
        tasks: Task names (an iterable, or a comma-separated string); None: every task.
        variant: ``"picked"`` or ``"typed"`` (:data:`VARIANTS`).

    Returns:
        list[HumanDialogue]: The dialogues, sorted by task and STAR id.

    Raises:
        StarError: The STAR copy has no human dialogues (one line saying where they were looked
            for), a task name is unknown (the message lists the known tasks), or STAR is unreadable.
        ValueError: An unknown ``variant``.
    """
    _check_variant(variant)
    corpus = _corpus(star)
    return _scan(corpus, _check_tasks(corpus, tasks), variant)[0]


def _is_question(label: str) -> bool:
    return bool(_SKIP_WORDS & set(label.split("_")))


def _star_is_question(task: str, label: str) -> bool:
    return _is_question(label)


#: The star-human track's :class:`TrackSpec`.
STAR_HUMAN = TrackSpec(
    name=TRACK,
    manifest_format=MANIFEST_FORMAT,
    records_file=RECORDS_FILE,
    domain_of=task_domain,
    is_question=_star_is_question,
    code_files=(Path(__file__), Path(__file__).with_name("engine.py")),
    card_text="STAR's human role-play dialogues (Mosig, Mehri and Kober, 2020; MIT license) that follow their "
    "workflow, and forks made by editing them at a known system turn. Written by "
    "`python -m dialfork_dataset star-human`; `manifest.json` holds the rule, the settings and the "
    "stats.",
)


def build_star_human_track(
    star: Any,
    *,
    tasks: Iterable[str] | None = None,
    variant: str = "picked",
    seed: int = 0,
    fit_fraction: float = 0.5,
) -> StarHumanTrack:
    """Build the star-human track: conformant human dialogues of STAR and their edited forks.

    Args:
        star: A STAR folder or a :class:`~dialfork_dataset.star.StarCorpus` (with its human
            dialogues: ``dialogues.jsonl.gz`` or ``dialogues/``).
        tasks: Task names (an iterable, or a comma-separated string); None: every task. Donors
            are drawn from these tasks only.
        variant: ``"picked"`` or ``"typed"`` (:data:`VARIANTS`).
        seed: A non-negative integer seeding the split and the donor draws.
        fit_fraction: The share of each task's conformant dialogues put in ``train``, in (0, 1).

    Returns:
        StarHumanTrack: The records (each with its ``split``) and the stats.

    Raises:
        StarError: The STAR copy has no human dialogues (one line saying where they were looked
            for), a task name is unknown (the message lists the known tasks), or STAR is unreadable.
        ValueError: An unknown ``variant``, a negative or non-integer ``seed``, or ``fit_fraction``
            outside (0, 1).
    """
    _check_variant(variant)
    check_track_settings(seed, fit_fraction)
    corpus = _corpus(star)
    tasks = _check_tasks(corpus, tasks)
    dialogues, excluded = _scan(corpus, tasks, variant)
    track = build_track(
        dialogues,
        spec=STAR_HUMAN,
        tasks=tasks,
        excluded=excluded,
        variant=variant,
        seed=seed,
        fit_fraction=fit_fraction,
    )
    n_records = track.stats.pop("records")
    track.stats["typed_fallbacks"] = sum(h.typed_fallbacks for h in dialogues)
    track.stats["records"] = n_records
    return track


def _settings(stats: Mapping[str, Any], star: str) -> dict[str, Any]:
    return {
        "track": TRACK,
        "star": star,
        "variant": stats["variant"],
        "seed": stats["seed"],
        "fit_fraction": stats["fit_fraction"],
        "tasks": list(stats["tasks"]),
    }


def write_star_human_track(
    track: StarHumanTrack, out: str | os.PathLike, *, star: str | os.PathLike, overwrite: bool = False
) -> Path:
    """Write the track as a folder the toolkit reads like a Hub layout.

    The folder holds ``data/<config>/<split>-00000-of-00001.parquet`` for the configs ``conformant``
    (the conformant dialogues), ``forked`` (their forks) and ``task3`` (train: conformant train
    dialogues; test: conformant test dialogues and their forks), a ``README.md`` naming them,
    ``star_human.jsonl`` (every record) and ``manifest.json`` (format, settings, the conformance
    rule, the stats, the counts). It is written in a staging folder next to ``out`` and renamed
    into place, so ``out`` holds a complete track or is left as it was.

    Args:
        track: The track (:func:`build_star_human_track`).
        out: The folder to write.
        star: The STAR path as given by the user (recorded as is, not made absolute).
        overwrite: Replace ``out`` when it holds a track written before.

    Returns:
        Path: ``out``.

    Raises:
        FileExistsError: ``out`` exists and ``overwrite`` is false, or it exists and is not a track
            folder this function wrote (no ``manifest.json`` of this track), so it is not replaced.
        RecordError: A record breaks SPEC section 4 once its track fields are set aside, or lacks
            a track field (every problem listed; nothing is written).
    """
    return write_track(
        track,
        out,
        spec=STAR_HUMAN,
        settings=_settings(track.stats, str(star)),
        rule=CONFORMANCE_RULE,
        overwrite=overwrite,
    )


def read_track_manifest(folder: str | os.PathLike) -> dict[str, Any] | None:
    """The manifest of a written track, or None when ``folder`` holds none (or another kind).

    Args:
        folder: A folder written by :func:`write_star_human_track` (or anything else).

    Returns:
        dict[str, Any] | None: The parsed ``manifest.json`` when its format is this track's.
    """
    return read_manifest(folder, STAR_HUMAN)


def ensure_star_human_track(
    star: str | os.PathLike,
    out: str | os.PathLike,
    *,
    tasks: Iterable[str] | None = None,
    variant: str = "picked",
    seed: int = 0,
    fit_fraction: float = 0.5,
) -> Path:
    """A written track at ``out``: reused when its manifest has the same settings (STAR path as
    given, variant, seed, fit fraction, tasks), else built and written (replacing a track written
    before with other settings).

    Args:
        star: The STAR folder, as given by the user.
        out: The track folder (e.g. ``<bench out>/star-human-data``).
        tasks: Task names; None: every task.
        variant: ``"picked"`` or ``"typed"``.
        seed: The track's seed.
        fit_fraction: The share of each task's conformant dialogues in ``train``.

    Returns:
        Path: ``out``.

    Raises:
        StarError: See :func:`build_star_human_track`.
        ValueError: See :func:`build_star_human_track`.
        FileExistsError: ``out`` exists and is not a track folder.
    """
    _check_variant(variant)
    corpus = _corpus(star)
    names = _check_tasks(corpus, tasks)
    out = Path(out)
    want = {
        "track": TRACK,
        "star": str(star),
        "variant": variant,
        "seed": seed,
        "fit_fraction": fit_fraction,
        "tasks": names,
    }

    def build() -> Path:
        track = build_star_human_track(
            corpus, tasks=names, variant=variant, seed=seed, fit_fraction=fit_fraction
        )
        return write_star_human_track(track, out, star=star, overwrite=True)

    return ensure_track(out, spec=STAR_HUMAN, settings=want, build=build)


__all__ = [
    "CONFORMANCE_RULE",
    "STAR_HUMAN",
    "build_star_human_track",
    "conformant_human_dialogues",
    "ensure_star_human_track",
    "exclusion_reason",
    "human_dialogue",
    "read_track_manifest",
    "write_star_human_track",
]
