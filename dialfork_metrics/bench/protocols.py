"""Reference protocols of Tasks 1 and 2 (issue 38): the paper's same-source protocol and the
cross-reference protocol, in which no turn of the reference is shared with the forks.

* ``same-source`` (the paper's, the default): each fork is compared with its own conformant
  source D+ (Task 2); each fork set with the task's whole conformant set, which holds the forks'
  own sources (Task 1). Every fork copies (or rewords) D+'s turns before t_k, so a distance that
  counts shared opening turns (the Shared-prefix control) ranks the forks without looking at the
  flow.
* ``cross``: Task 2 compares each fork with ``n_references`` conformant dialogues of the same
  task from *other* sources (other scenarios), drawn with a seeded :class:`numpy.random.Generator`
  per source; a fork's distance is the mean over those references, the same references for the
  four forks of a unit. Task 1 splits each task's sources in two seeded halves: the reference set
  is the conformant dialogues of one half, the fork sets hold the forks of the other half only.

A Task 2 unit whose task has no conformant dialogue from another source (a task with a single
source) is skipped under ``cross`` with a reason in the report's skipped list, like any unit
that cannot be built; with fewer other sources than ``n_references`` all of them are used (each
unit row records its ``references``). A Task 1 task whose halves leave fewer than two reference
dialogues or a fork position without forks is skipped the same way.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from dialfork_dataset.taxonomy import FORK_POSITIONS

from .common import BenchError, _unit_rng

logger = logging.getLogger(__name__)

#: The reference protocols, the paper's first (the default).
TASK2_PROTOCOLS: tuple[str, ...] = ("same-source", "cross")
#: Conformant references per source under the cross protocol (their distances are averaged).
DEFAULT_N_REFERENCES = 3
#: How each protocol is named in the reports.
PROTOCOL_LABELS: dict[str, str] = {"same-source": "same-source (paper)", "cross": "cross-reference"}


def parse_task2_protocol(value: str) -> tuple[str, ...]:
    """The protocols of ``--task2-protocol``: ``same-source``, ``cross`` or ``both``.

    Args:
        value: The option's value (case and surrounding spaces ignored; ``_`` reads as ``-``).

    Returns:
        The protocols to run, in :data:`TASK2_PROTOCOLS` order (``both``: the two).

    Raises:
        BenchError: Any other value.
    """
    v = str(value).strip().lower().replace("_", "-")
    if v == "both":
        return TASK2_PROTOCOLS
    if v in TASK2_PROTOCOLS:
        return (v,)
    raise BenchError(
        f"--task2-protocol {value!r}: expected one of same-source, cross, both "
        "(same-source is the paper's protocol; cross compares each fork with conformant "
        "dialogues of other scenarios)"
    )


def _source_key(r: Mapping[str, Any]) -> str:
    return str(r.get("source_id") or r["dialogue_id"])


def cross_references(
    conformant: Sequence[Mapping[str, Any]], n_references: int = DEFAULT_N_REFERENCES, seed: int = 0
) -> dict[str, list[Mapping[str, Any]]]:
    """The cross-protocol references of each conformant source: up to ``n_references`` conformant
    dialogues of the same task from other sources (and other scenarios when records name one).

    Each source draws its references with its own seeded generator (``seed`` and the source id),
    without replacement, from the other sources of its task sorted by source id; the draw depends
    neither on the other sources' draws nor on the order of the records.

    Args:
        conformant: Conformant records (``dialogue_id``, ``task``; optional ``source_id`` and
            ``scenario_id``).
        n_references: References per source (at most; fewer when the task has fewer other sources).
        seed: Seed of the draws.

    Returns:
        Source id -> its references (records, by source id), an empty list when the task has no
        other source.

    Raises:
        BenchError: ``n_references`` is not a positive integer.
    """
    if isinstance(n_references, bool) or not isinstance(n_references, int) or n_references < 1:
        raise BenchError(
            f"n_references must be an integer >= 1 (conformant references per fork under the cross "
            f"protocol), got {n_references!r}"
        )
    by_task: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for r in conformant:
        by_task[r["task"]].append(r)
    out: dict[str, list[Mapping[str, Any]]] = {}
    for recs in by_task.values():
        for r in recs:
            sid, scen = _source_key(r), r.get("scenario_id")
            pool = sorted(
                (o for o in recs if _source_key(o) != sid and (scen is None or o.get("scenario_id") != scen)),
                key=lambda o: (_source_key(o), o["dialogue_id"]),
            )
            if len(pool) <= n_references:
                out[sid] = list(pool)
                continue
            idx = _unit_rng(seed, "task2-cross", sid).choice(len(pool), size=n_references, replace=False)
            out[sid] = [pool[i] for i in sorted(int(i) for i in idx)]
    return out


def task1_cross_units(
    units: Mapping[tuple[str, str], Mapping[Any, list]],
    seed: int = 0,
    min_reference: int = 2,
    skipped: list[str] | None = None,
) -> dict[tuple[str, str], dict[Any, list]]:
    """Task 1 units under the cross protocol: per task, its sources split in two seeded halves;
    the reference set is the conformant dialogues of the first half, each fork set keeps the forks
    of the second half only, so no reference dialogue is the source of a fork.

    Args:
        units: The same-source units of :func:`dialfork_dataset.views.task1_sets`
            (``{(task, type): {"reference": [...], 1: [...], ..., 4: [...]}}``).
        seed: Seed of the split (one generator per task, shared by its four types).
        min_reference: Fewest reference dialogues a task needs.
        skipped: A list that receives one message per unit that cannot be built; None: only logged.

    Returns:
        The cross units, same layout, each with ``reference_sources`` and ``fork_sources`` (the
        two halves' source ids).
    """
    halves: dict[str, tuple[set[str], set[str]]] = {}
    out: dict[tuple[str, str], dict[Any, list]] = {}
    for (task, h), unit in sorted(units.items()):
        if task not in halves:
            sources = sorted({_source_key(r) for r in unit["reference"]})
            order = _unit_rng(seed, "task1-cross", task).permutation(len(sources))
            cut = (len(sources) + 1) // 2
            halves[task] = ({sources[i] for i in order[:cut]}, {sources[i] for i in order[cut:]})
        ref_src, fork_src = halves[task]
        ref = [r for r in unit["reference"] if _source_key(r) in ref_src]
        forks = {k: [r for r in unit[k] if _source_key(r) in fork_src] for k in FORK_POSITIONS}
        missing = [k for k in FORK_POSITIONS if not forks[k]]
        why = (
            f"{len(ref)} reference dialogue(s) < {min_reference}"
            if len(ref) < min_reference
            else f"no forks at position(s) {missing} among the held-out half's sources"
            if missing
            else None
        )
        if why:
            msg = f"Task 1 unit ({task}, {h}) under the cross protocol: {why} (the task has too few sources to split)"
            logger.warning("skipped %s", msg)
            if skipped is not None:
                skipped.append(msg)
            continue
        out[(task, h)] = {
            "reference": ref,
            **forks,
            "reference_sources": sorted(ref_src),
            "fork_sources": sorted(fork_src),
        }
    return out


__all__ = [
    "DEFAULT_N_REFERENCES",
    "PROTOCOL_LABELS",
    "TASK2_PROTOCOLS",
    "cross_references",
    "parse_task2_protocol",
    "task1_cross_units",
]
