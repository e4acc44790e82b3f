"""The check the engine runs on each generated conformant dialogue D+ (issue 39, item 5).

An LLM agent asked to follow a workflow may not: it skips steps, answers another task, invents a
step. Such a D+ is no conformant reference, and its forks are no controlled deviations from one.
With ``--check-conformance NAME`` (on by default for LLM backends) the engine maps each D+'s system
turns to workflow steps with the named check and writes the result into the D+ *and each of its
forks* (record field ``conformance``, :data:`~dialfork_dataset.records.CONFORMANCE_FIELDS`), and the
manifest counts checked and flagged D+ per task. The Hub export flags them in the card and
``--require-conformant`` drops them (with their forks).

Checks are plugins found by name in the ``dialfork.conformance`` entry point group, so that this
package imports none of them (the toolkit's own, ``workflow-nodes``, lives in
:mod:`dialfork_metrics.task3.workflow.conformance`, which builds on ``generation.api``). A check is a class
with this protocol (:class:`ConformanceCheck`)::

    check = Check()                      # defaults
    check.fit(source, tasks)             # the workflow source, the tasks to be checked -> self
    check.check_many([(task, [system turn, ...]), ...]) -> [dict, ...]

each dict holding :data:`~dialfork_dataset.records.CONFORMANCE_FIELDS`. Register another with, in
its distribution's metadata::

    [options.entry_points]
    dialfork.conformance =
        my-check = my_package.module:MyCheck
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from importlib.metadata import distributions
from typing import Any, Protocol

from dialfork_dataset.jsonl import dumps
from dialfork_dataset.records import CONFORMANCE_FIELDS, conformance_errors

from .errors import GenerationError

logger = logging.getLogger("generation.conformance")

ENTRY_POINT_GROUP = "dialfork.conformance"
"""The entry point group where checks are found by name."""
DEFAULT_CHECK = "workflow-nodes"
"""The check LLM backends run by default (:mod:`dialfork_metrics.task3.workflow.conformance`)."""


class ConformanceCheck(Protocol):
    """What the engine calls (see the module's docstring).

    A check is made with no arguments, then fitted, then asked about many dialogues at once.

    Attributes:
        name: The check's name, as recorded in each result's ``check`` field.
    """

    name: str

    def fit(self, source: Any, tasks: Sequence[str] | None = None) -> ConformanceCheck:
        """Read the source's workflows (every task) for the tasks to check.

        Args:
            source: The workflow source the dialogues were generated from.
            tasks: The tasks whose dialogues will be checked; None: every task of the source.

        Returns:
            The fitted check itself.
        """

    def check_many(self, dialogues: Sequence[tuple[str, Sequence[str]]]) -> list[dict[str, Any]]:
        """One result (:data:`CONFORMANCE_FIELDS`) per ``(task, system turns)``.

        Args:
            dialogues: ``(task, system turns)`` pairs: the task's name and the dialogue's system turns
                in order.

        Returns:
            One dict per dialogue, in input order, holding every field of
            :data:`~dialfork_dataset.records.CONFORMANCE_FIELDS`.
        """


def _entry_points() -> dict[str, Any]:
    # every distribution's entries, not only the first of each name that ``entry_points()`` keeps:
    # a stale ``*.egg-info`` of the project on the path must not hide the installed metadata
    eps: dict[str, Any] = {}
    for dist in distributions():
        for ep in dist.entry_points:
            if ep.group == ENTRY_POINT_GROUP:
                eps.setdefault(ep.name, ep)
    return eps


def available_checks() -> list[str]:
    """The names of the installed checks.

    Returns:
        list[str]: Sorted names of the ``dialfork.conformance`` entry points.
    """
    return sorted(_entry_points())


def load_check(name: str) -> type:
    """The check class registered under ``name``.

    Args:
        name: An entry point name of the ``dialfork.conformance`` group.

    Returns:
        type: The class (not instantiated).

    Raises:
        GenerationError: No check of that name is installed (the installed ones named), or it does
            not load.
    """
    ep = _entry_points().get(name)
    if ep is None:
        have = available_checks()
        raise GenerationError(
            f"--check-conformance {name}: no such check is installed (installed: {', '.join(have) or 'none'}); "
            "the toolkit's own is workflow-nodes, registered when the package is installed (`pip install -e .`)",
            [f"unknown conformance check {name!r}"],
        )
    try:
        return ep.load()
    except Exception as e:  # an import error in a plugin: say which
        raise GenerationError(
            f"--check-conformance {name}: {ep.value} does not load ({type(e).__name__}: {e})",
            [f"conformance check {name!r} does not load"],
        ) from e


def result_errors(result: Any, num_system_turns: int | None = None) -> list[str]:
    """What is wrong with one check result (empty when it is well formed).

    Args:
        result: A check's result for one dialogue.
        num_system_turns: The dialogue's T (turn numbers must lie in 1..T).

    Returns:
        list[str]: One message per problem.
    """
    if isinstance(result, Mapping):  # a check may return more than the record keeps
        result = {k: result[k] for k in CONFORMANCE_FIELDS if k in result}
    return conformance_errors(result, num_system_turns)


def apply_check(check: Any, units: Sequence[Any]) -> None:
    """Check the kept D+ of ``units`` in one batch and write each result into the unit's records.

    Each unit's record lines (D+ first, then its forks) get the D+'s result as ``conformance``; the
    unit's ``conformant`` attribute is set for the shard marker (the manifest's counts).

    Args:
        check: A fitted check (:class:`ConformanceCheck`).
        units: :class:`~generation.engine.units.UnitResult` objects; dropped ones are left alone.

    Raises:
        GenerationError: The check returned a malformed result or a wrong number of them.
    """
    kept = [u for u in units if u.kept and u.lines]
    if not kept:
        return
    heads = [json.loads(u.lines[0]) for u in kept]
    results = check.check_many(
        [(h["task"], [t["text"] for t in h["turns"] if t["speaker"] == "system"]) for h in heads]
    )
    if len(results) != len(kept):
        raise GenerationError(
            f"conformance check {getattr(check, 'name', check)!r}: {len(results)} results for "
            f"{len(kept)} dialogues",
            ["conformance check: wrong number of results"],
        )
    for u, h, res in zip(kept, heads, results):
        T = sum(1 for t in h["turns"] if t["speaker"] == "system")
        errs = result_errors(res, T)
        if errs:
            raise GenerationError(
                f"conformance check {getattr(check, 'name', check)!r} on {h['dialogue_id']}: "
                + "; ".join(errs),
                errs,
            )
        res = {k: res[k] for k in CONFORMANCE_FIELDS}
        lines = []
        for line in u.lines:
            rec = json.loads(line)
            rec["conformance"] = res
            lines.append(dumps(rec))
        u.lines = lines
        u.conformant = bool(res["conformant"])


__all__ = [
    "DEFAULT_CHECK",
    "ENTRY_POINT_GROUP",
    "ConformanceCheck",
    "apply_check",
    "available_checks",
    "load_check",
    "result_errors",
]
