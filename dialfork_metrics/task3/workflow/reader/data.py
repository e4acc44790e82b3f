"""The labelled reading set of system turns: one schema for SGD dialogues, STAR's workflow texts and
STAR's human dialogues (issue 50, item 1).

Every row is a :class:`ReadingTurn`: where it comes from (corpus, task and service, dialogue and turn
index), its text, and what it says: the gold step of its task's workflow (None when no step says it),
that step's roles (:func:`~dialfork_dataset.workflow.roles.derive_roles`), its dialogue acts and their
slots.

* **SGD** (:func:`sgd_turns`): every system turn of the twelve services of ``../shared/sgd``. A turn
  of a service with a workflow file (``examples/workflows/sgd``) has its step from its gold acts
  (:func:`~dialfork_dataset.tracks.sgd.step_for_turn`, the sgd track's rule); a turn of the two
  services without one (Payment_1, Weather_1) keeps its acts and slots, step None.
* **STAR's workflow texts** (:func:`star_workflow_turns`): each response template and each example
  phrasing (``wizard_nlu_training_data.md``) of a step is a labelled example of that step. The
  same for the SGD workflow files' ``say`` and ``alternatives`` (:func:`file_phrasings`).
* **STAR's human dialogues** (:func:`star_human_turns`, picked or typed): evaluation only. The
  default reader never learns from them (:func:`default_training_turns` refuses them).

Evaluation leaves whole SGD services out (:data:`FOLDS`: five folds of two services each; the two
``Services_*`` services share a domain and a fold).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

logger = logging.getLogger("dialfork_metrics.task3.workflow.reader.data")

HUMAN_CORPUS = "star-human"
"""The corpus name of STAR's human dialogues (evaluation only)."""

FOLDS: tuple[tuple[str, ...], ...] = (
    ("Banks_1", "Buses_1"),
    ("Calendar_1", "Hotels_1"),
    ("Media_1", "Music_1"),
    ("RentalCars_1", "Trains_1"),
    ("Services_2", "Services_3"),
)
"""Leave-services-out folds of the SGD services with a workflow file (each fold's services are held out
together; the two ``Services_*`` share the domain ``services``)."""


@dataclass(frozen=True)
class ReadingTurn:
    """One labelled system turn (or workflow phrasing).

    Attributes:
        corpus: ``"sgd"``, ``"sgd-workflow"`` (a workflow file's phrasing), ``"star-workflow"`` (a
            STAR template or example phrasing) or ``"star-human"`` (evaluation only).
        task: The workflow task (None: an SGD service without a workflow file).
        service: The SGD service (None for STAR).
        dialogue_id: The dialogue (None for a phrasing).
        turn: The turn's index in its dialogue (a phrasing: its index among its step's texts).
        text: The text.
        step: The gold step of the task's workflow (None: no step says it).
        roles: The gold step's roles (empty when unknown).
        act: The act that picked the step (SGD; STAR: the action label), or None.
        acts: Every act of the turn (SGD), else ``(act,)`` or ``()``.
        slots: The slots of those acts (SGD), else the step's placeholders.
        conformant: The dialogue is a conformant dialogue of its track.
        variant: STAR human turns: ``"picked"`` or ``"typed"``; else None.
    """

    corpus: str
    task: str | None
    service: str | None
    dialogue_id: str | None
    turn: int
    text: str
    step: str | None
    roles: tuple[str, ...] = ()
    act: str | None = None
    acts: tuple[str, ...] = ()
    slots: tuple[str, ...] = ()
    conformant: bool = False
    variant: str | None = None


def _roles_of(task: Any) -> dict[str, tuple[str, ...]]:
    from dialfork_dataset.workflow.roles import ROLES, derive_roles

    try:
        r = derive_roles(task)
    except Exception as e:  # a task whose roles cannot be derived: rows without roles
        logger.warning("task %r: no step roles (%s)", getattr(task, "name", task), e)
        return {}
    return {n: tuple(x for x in ROLES if x in s.roles) for n, s in r.steps.items()}


def sgd_turns(
    sgd: str | os.PathLike | None = None, workflows: str | os.PathLike | None = None
) -> list[ReadingTurn]:
    """Every system turn of the SGD folder, with its gold step where its service has a workflow file.

    Args:
        sgd: The SGD folder (None: ``$DIALFORK_SGD_DIR``, else ``../shared/sgd``).
        workflows: The folder of the sgd track's workflow files (None: ``examples/workflows/sgd``).

    Returns:
        list[ReadingTurn]: In file order, ``corpus="sgd"``.

    Raises:
        SgdError: The SGD folder or the workflow files are missing or malformed.
    """
    from dialfork_dataset.tracks import sgd as S

    corpus = S.read_sgd(sgd)
    wf = S._workflows(workflows)
    tasks = {t.service: t for t in S.SGD_TASKS}
    asks = S._asks(wf, list(S.SGD_TASKS))
    roles = {t.name: _roles_of(wf.tasks[t.name]) for t in S.SGD_TASKS}
    out: list[ReadingTurn] = []
    for d in corpus.dialogues():
        services = list(d.get("services") or ())
        conf = len(services) == 1 and services[0] in tasks
        conf = conf and S.exclusion_reason(d, tasks[services[0]], asks[tasks[services[0]].name]) is None
        did = f"{d.get('split') or 'sgd'}-{d['dialogue_id']}"
        for i, t in enumerate(d["turns"]):
            if t.get("speaker") != "SYSTEM":
                continue
            frames = [f for f in t.get("frames") or () if isinstance(f, dict)]
            service = frames[0].get("service") if frames else None
            actions = [a for f in frames for a in f.get("actions") or ()]
            task = tasks.get(service)
            step, act = (None, S.turn_act(actions))
            if task is not None and len(frames) == 1:
                step, act = S.step_for_turn(actions, task, asks[task.name])
            out.append(
                ReadingTurn(
                    corpus="sgd",
                    task=task.name if task is not None else None,
                    service=service,
                    dialogue_id=did,
                    turn=i,
                    text=" ".join(str(t.get("utterance") or "").split()),
                    step=step,
                    roles=roles.get(task.name, {}).get(step, ()) if task is not None and step else (),
                    act=act,
                    acts=tuple(dict.fromkeys(str(a.get("act")) for a in actions)),
                    slots=tuple(dict.fromkeys(str(a.get("slot")) for a in actions if a.get("slot"))),
                    conformant=bool(conf),
                )
            )
    return out


def _phrasings(source: Any, corpus: str, service_of: dict[str, str] | None = None) -> list[ReadingTurn]:
    from ..nodes import node_texts

    out: list[ReadingTurn] = []
    for name, task in source.tasks.items():
        roles = _roles_of(task)
        for step, texts in node_texts(task).items():
            for j, text in enumerate(texts):
                out.append(
                    ReadingTurn(
                        corpus=corpus,
                        task=name,
                        service=(service_of or {}).get(name),
                        dialogue_id=None,
                        turn=j,
                        text=text,
                        step=step,
                        roles=roles.get(step, ()),
                    )
                )
    return out


def star_workflow_turns(star: Any) -> list[ReadingTurn]:
    """STAR's workflow texts as labelled examples: each template, reply label and example phrasing of
    a step (:func:`~dialfork_metrics.task3.workflow.nodes.node_texts`) says that step.

    Args:
        star: A STAR folder or a :class:`~dialfork_dataset.star.StarCorpus`.

    Returns:
        list[ReadingTurn]: ``corpus="star-workflow"``, no dialogue.
    """
    from dialfork_dataset.star import StarCorpus

    source = star if isinstance(star, StarCorpus) else StarCorpus(star)
    return _phrasings(source, "star-workflow")


def file_phrasings(workflows: str | os.PathLike | None = None) -> list[ReadingTurn]:
    """The SGD workflow files' own texts (``say``, ``label``, ``alternatives``) as labelled examples.

    Args:
        workflows: The folder of the sgd track's workflow files (None: ``examples/workflows/sgd``).

    Returns:
        list[ReadingTurn]: ``corpus="sgd-workflow"``, no dialogue.
    """
    from dialfork_dataset.tracks import sgd as S

    return _phrasings(S._workflows(workflows), "sgd-workflow", {t.name: t.service for t in S.SGD_TASKS})


def star_human_turns(star: Any, variant: str = "picked") -> list[ReadingTurn]:
    """The system turns of STAR's conformant human dialogues (the star-human track's), for evaluation.

    Args:
        star: A STAR folder or a :class:`~dialfork_dataset.star.StarCorpus`.
        variant: ``"picked"`` (the wizard's picked text) or ``"typed"`` (its typed draft).

    Returns:
        list[ReadingTurn]: ``corpus="star-human"``, step = the pick's action label.
    """
    from dialfork_dataset.star import StarCorpus
    from dialfork_dataset.tracks.star_human import conformant_human_dialogues

    source = star if isinstance(star, StarCorpus) else StarCorpus(star)
    roles = {t: _roles_of(source.tasks[t]) for t in source.tasks}
    out = []
    for h in conformant_human_dialogues(source, variant=variant):
        for k, pos in enumerate(h.system_positions()):
            step = h.system_nodes[k]
            out.append(
                ReadingTurn(
                    corpus=HUMAN_CORPUS,
                    task=h.task,
                    service=None,
                    dialogue_id=h.dialogue_id,
                    turn=pos,
                    text=" ".join(h.turns[pos]["text"].split()),
                    step=step,
                    roles=roles.get(h.task, {}).get(step, ()),
                    act=step,
                    acts=(step,),
                    conformant=True,
                    variant=variant,
                )
            )
    return out


def default_training_turns(
    sgd: Sequence[ReadingTurn], star: Sequence[ReadingTurn], exclude_services: Iterable[str] = ()
) -> list[ReadingTurn]:
    """The default reader's training rows: SGD turns of the services with a workflow file (those in
    ``exclude_services`` left out) and STAR's workflow texts; never a human dialogue.

    Args:
        sgd: :func:`sgd_turns` (rows of other corpora are refused).
        star: :func:`star_workflow_turns` (and optionally :func:`file_phrasings`).
        exclude_services: SGD services to hold out (their dialogues and their files' phrasings).

    Returns:
        list[ReadingTurn]: The rows.

    Raises:
        ValueError: A STAR human dialogue's turn was given (the default never learns from them).
    """
    human = [r for r in (*sgd, *star) if r.corpus == HUMAN_CORPUS]
    if human:
        raise ValueError(
            f"default_training_turns: {len(human)} turn(s) of STAR's human dialogues given (e.g. "
            f"{human[0].dialogue_id}); the default reader never learns from them (a held-out test)"
        )
    drop = set(exclude_services)
    keep = [r for r in sgd if r.task is not None and r.service not in drop]
    keep += [r for r in star if r.service not in drop or r.service is None]
    return keep


def embed(
    texts: Sequence[str], encoder: Any = "minilm", cache_dir: str | os.PathLike | None = None
) -> np.ndarray:
    """Encode texts (unit rows, float32) with the encoder's embedding cache: a folder given here (or
    ``$DIALFORK_EMBEDDING_CACHE``) keeps them on disk, so a re-run encodes nothing new.

    Args:
        texts: The texts.
        encoder: An encoder alias/path or an object with ``encode``.
        cache_dir: A folder for the on-disk cache (None: the encoder's default).

    Returns:
        np.ndarray: Shape ``(len(texts), d)``.
    """
    from dialfork_metrics.encoders import get_encoder

    if isinstance(encoder, str):
        enc = get_encoder(encoder, cache_dir=str(Path(cache_dir))) if cache_dir else get_encoder(encoder)
    else:
        enc = encoder
    if not len(texts):
        return np.zeros((0, int(getattr(enc, "dim", 384))), dtype=np.float32)
    E = np.asarray(enc.encode(list(texts)), dtype=np.float32)
    n = np.linalg.norm(E, axis=1, keepdims=True)
    return E / np.where(n > 0, n, 1.0)


__all__ = [
    "FOLDS",
    "HUMAN_CORPUS",
    "ReadingTurn",
    "default_training_turns",
    "embed",
    "file_phrasings",
    "sgd_turns",
    "star_human_turns",
    "star_workflow_turns",
]
