"""A local STAR copy, compact or original layout (:class:`StarCorpus`): tasks, APIs, scenarios,
length budgets, knowledge bases and the human dialogues."""

from __future__ import annotations

import gzip
import json
import logging
import os
from collections import Counter, defaultdict
from collections.abc import Iterator
from functools import cached_property
from pathlib import Path
from typing import Any

from ..console import progress_disabled
from .api import StarApi
from .common import STAR_ENV, StarError, raise_collected, read_json
from .download import resolve_star
from .scenarios import Scenario, normalize_event, scenario_from_dialogue, scenario_from_row
from .task import StarTask

log = logging.getLogger(__name__)


def _dialogue_files(folder: Path) -> list[Path]:
    files = [f for f in folder.glob("*.json") if f.is_file()]
    return sorted(files, key=lambda f: (0, int(f.stem)) if f.stem.isdigit() else (1, f.stem))


class StarCorpus:
    """A local STAR copy (compact or original layout, see the module doc).

    ``path`` None means ``$DIALFORK_STAR_DIR`` (:func:`resolve_star`). Tasks and APIs are read (and
    validated, all problems collected) at construction; scenarios, the knowledge bases and the
    human dialogues are read on first use.

    Args:
        path: The STAR folder (``~`` expanded); None reads ``$DIALFORK_STAR_DIR``.

    Attributes:
        path: The resolved folder.
        layout: ``"compact"`` (``scenarios.jsonl``), ``"original"`` (``dialogues/``) or
            ``"tasks-only"`` (neither: tasks and APIs only).
        apis: API name -> :class:`StarApi`.
        tasks: Task name -> :class:`StarTask`.
        domains: Domain -> its task names (sorted by domain).

    Raises:
        StarError: ``path`` is None and ``$DIALFORK_STAR_DIR`` is unset or not a STAR copy; the
            folder does not exist or has no ``tasks/``; or an API or task file is wrong or there is
            no task folder (every problem listed).
    """

    def __init__(self, path: str | os.PathLike | None = None):
        if path is None:  # $DIALFORK_STAR_DIR, with a helpful error when unset
            path = resolve_star(None)
        self.path = Path(path).expanduser().resolve()
        if not self.path.is_dir():
            raise StarError(
                f"{self.path}: no such folder; download STAR with "
                "dialfork_dataset.star.download_star(dest) or set $" + STAR_ENV
            )
        if not (self.path / "tasks").is_dir():
            raise StarError(
                f"{self.path}: not a STAR copy (no tasks/ folder); point to the root of a STAR "
                "copy or download one with dialfork_dataset.star.download_star(dest)"
            )
        if (self.path / "scenarios.jsonl").is_file():
            self.layout = "compact"
        elif (self.path / "dialogues").is_dir():
            self.layout = "original"
        else:
            self.layout = "tasks-only"
        errors: list[str] = []
        self.apis: dict[str, StarApi] = {}
        api_dir = self.path / "apis" / "apis"
        if api_dir.is_dir():
            for f in sorted(api_dir.glob("*.json")):
                api = StarApi.load(f, errors)
                if api is not None:
                    self.apis[api.name] = api
        else:
            log.warning("%s: no apis/apis folder; tasks will have no API", self.path)
        tasks: dict[str, StarTask] = {}
        for d in sorted(p for p in (self.path / "tasks").iterdir() if p.is_dir()):
            t = StarTask.load(d, api=self.apis.get(d.name), errors=errors)
            if t is not None:
                tasks[t.name] = t
        if not tasks and not errors:
            errors.append(f"{self.path / 'tasks'}: no task folders")
        raise_collected(errors, f"STAR copy {self.path}")
        self.tasks: dict[str, StarTask] = tasks
        domains: dict[str, list[str]] = defaultdict(list)
        for name, t in tasks.items():
            domains[t.domain].append(name)
        self.domains: dict[str, list[str]] = dict(sorted(domains.items()))

    def __repr__(self) -> str:
        return f"StarCorpus({str(self.path)!r}, layout={self.layout!r}, tasks={len(self.tasks)})"

    def task(self, name: str) -> StarTask:
        """The task named ``name``.

        Args:
            name: A STAR task name (a folder of ``tasks/``).

        Returns:
            StarTask: The task.

        Raises:
            StarError: No such task (the message lists the known ones).
        """
        try:
            return self.tasks[name]
        except KeyError:
            raise StarError(
                f"unknown STAR task {name!r} in {self.path}; known tasks: " + ", ".join(self.tasks)
            ) from None

    # ---- scenarios

    @cached_property
    def scenarios(self) -> list[Scenario]:
        """All scenarios, in dialogue-id order (numeric ids numerically).

        Read on first use (then cached) from ``scenarios.jsonl`` or ``dialogues/``.

        Raises:
            StarError: The copy has tasks only, a scenario row or dialogue file is wrong, or a
                scenario id repeats (every problem listed).
        """
        errors: list[str] = []
        out: list[Scenario] = []
        if self.layout == "compact":
            from ..jsonl import JsonlError, iter_jsonl

            path = self.path / "scenarios.jsonl"
            try:
                for lineno, row in iter_jsonl(path, collect=True):
                    s = scenario_from_row(row, f"{path}:{lineno}", errors)
                    if s is not None:
                        out.append(s)
            except JsonlError as e:
                errors = e.errors + errors
        elif self.layout == "original":
            from tqdm.auto import tqdm

            files = _dialogue_files(self.path / "dialogues")
            quiet = len(files) <= 500 or progress_disabled()
            for f in tqdm(files, desc="STAR scenarios", unit="dialogue", disable=True if quiet else None):
                data = read_json(f, errors, "dialogue file")
                if data is not None:
                    s = scenario_from_dialogue(data, str(f), errors)
                    if s is not None:
                        out.append(s)
        else:
            raise StarError(
                f"{self.path}: no scenarios.jsonl and no dialogues/ folder; this STAR copy has "
                "tasks only (download the full repository with download_star)"
            )
        seen: Counter[str] = Counter(s.scenario_id for s in out)
        errors += [f"{self.path}: scenario id {i} appears {c} times" for i, c in seen.items() if c > 1]
        unknown = sorted({t for s in out for t in s.tasks} - set(self.tasks))
        if unknown:
            log.warning("%s: scenarios name tasks with no folder under tasks/: %s", self.path, unknown)
        raise_collected(errors, f"STAR scenarios of {self.path}")
        out.sort(
            key=lambda s: (0, int(s.scenario_id), "") if s.scenario_id.isdigit() else (1, 0, s.scenario_id)
        )
        return out

    @cached_property
    def _scenario_index(self) -> dict[str, Scenario]:
        return {s.scenario_id: s for s in self.scenarios}

    def scenario(self, scenario_id: str | int) -> Scenario:
        """The scenario with id ``scenario_id``.

        Args:
            scenario_id: A STAR dialogue id (int or str; compared as a string).

        Returns:
            Scenario: The scenario.

        Raises:
            StarError: No scenario has that id, or the scenarios cannot be read.
        """
        try:
            return self._scenario_index[str(scenario_id)]
        except KeyError:
            raise StarError(f"no STAR scenario with id {scenario_id!r} in {self.path}") from None

    def scenarios_for(
        self, task: str | None = None, single_task: bool = True, happy: bool | None = None
    ) -> list[Scenario]:
        """Scenarios involving ``task`` (any task when None); ``single_task`` keeps only single-task
        scenarios (one task, ``multitask`` false); ``happy`` filters on the happy flag when not None.

        Args:
            task: A task name, or None for every task.
            single_task: Keep only single-task scenarios.
            happy: Keep only scenarios whose ``happy`` flag equals it; None keeps both.

        Returns:
            list[Scenario]: The matching scenarios, in :attr:`scenarios` order.

        Raises:
            StarError: ``task`` is not a task of the copy, or the scenarios cannot be read.
        """
        if task is not None:
            self.task(task)
        return [
            s
            for s in self.scenarios
            if (task is None or task in s.tasks)
            and (not single_task or s.single_task)
            and (happy is None or s.happy == happy)
        ]

    def length_budget(self, task: str, single_task_only: bool = True) -> int:
        """SPEC 3 length budget of ``task``: the maximum ``n_user + n_system`` over the task's STAR human
        dialogues. ``single_task_only`` (default, ours): only single-task dialogues count, the
        scenarios DialFork generates from; False also counts the multi-task dialogues involving it.

        Args:
            task: A task name.
            single_task_only: Count single-task dialogues only (default True).

        Returns:
            int: The largest number of utterances (user + system) of a counted human dialogue.

        Raises:
            StarError: ``task`` is unknown, has no counted dialogue, or the scenarios cannot be read.
        """
        lengths = [s.length for s in self.scenarios_for(task, single_task=single_task_only)]
        if not lengths:
            raise StarError(
                f"task {task!r} has no {'single-task ' if single_task_only else ''}"
                f"STAR dialogue in {self.path}: no length budget"
            )
        return max(lengths)

    # ---- knowledge bases and dialogues

    @cached_property
    def dbs(self) -> dict[str, Any]:
        """Raw knowledge-base files ``apis/dbs/<name>.json`` (name -> parsed JSON).

        Read on first use (then cached); empty when the folder is absent.

        Raises:
            StarError: A knowledge-base file is unreadable or not JSON (every problem listed).
        """
        errors: list[str] = []
        out: dict[str, Any] = {}
        for f in sorted((self.path / "apis" / "dbs").glob("*.json")):
            data = read_json(f, errors, "knowledge-base file")
            if data is not None:
                out[f.stem] = data
        raise_collected(errors, f"STAR knowledge bases of {self.path}")
        return out

    def human_dialogues(self) -> Iterator[dict[str, Any]]:
        """The human dialogues as ``{scenario_id, tasks, events}``, events with the compact layout's
        keys (``agent``, ``action``, ``text``, ``action_label``, ``constraints``, ``api``, ``item``...).

        Read lazily, one dialogue at a time (``dialogues.jsonl.gz`` or ``dialogues/*.json``).

        Yields:
            dict[str, Any]: ``{"scenario_id": str, "tasks": list[str], "events": list[dict]}``, in
            file order.

        Raises:
            StarError: The copy has no human dialogues, ``dialogues.jsonl.gz`` is missing (compact
                layout), or a line / dialogue file is malformed (raised when that dialogue is
                reached).
        """
        if self.layout == "compact":
            path = self.path / "dialogues.jsonl.gz"
            if not path.is_file():
                raise StarError(f"{path}: missing (the compact layout keeps the human dialogues there)")
            with gzip.open(path, "rt", encoding="utf-8") as fh:
                for lineno, line in enumerate(fh, 1):
                    if not line.strip():
                        continue
                    try:
                        d = json.loads(line)
                    except json.JSONDecodeError as e:
                        raise StarError(f"{path}:{lineno}:{e.colno}: malformed JSON ({e.msg})") from None
                    if (
                        not isinstance(d, dict)
                        or "dialogue_id" not in d
                        or not isinstance(d.get("events"), list)
                    ):
                        raise StarError(
                            f"{path}:{lineno}: expected an object with 'dialogue_id' and 'events'"
                        )
                    yield {
                        "scenario_id": str(d["dialogue_id"]),
                        "tasks": list(d.get("tasks") or []),
                        "events": [normalize_event(e) for e in d["events"]],
                    }
        elif self.layout == "original":
            for f in _dialogue_files(self.path / "dialogues"):
                errors: list[str] = []
                data = read_json(f, errors, "dialogue file")
                s = scenario_from_dialogue(data, str(f), errors) if data is not None else None
                if s is None:
                    raise_collected(errors, str(f))
                yield {
                    "scenario_id": s.scenario_id,
                    "tasks": list(s.tasks),
                    "events": [normalize_event(e) for e in data["Events"] if isinstance(e, dict)],
                }
        else:
            raise StarError(f"{self.path}: no human dialogues (neither dialogues.jsonl.gz nor dialogues/)")

    def summary(self) -> dict[str, Any]:
        """Counts: tasks, domains, scenarios, single-task scenarios, per-task domain/count/budget.

        Returns:
            dict[str, Any]: ``{"path", "layout", "tasks", "domains", "scenarios",
            "single_task_scenarios", "per_task"}``; ``per_task[name]`` is ``{"domain",
            "single_task_scenarios", "length_budget"}`` (the budget None when the task has no
            single-task scenario).

        Raises:
            StarError: The scenarios cannot be read (e.g. a tasks-only copy).
        """
        per_task = {}
        for name, t in self.tasks.items():
            single = self.scenarios_for(name)
            per_task[name] = {
                "domain": t.domain,
                "single_task_scenarios": len(single),
                "length_budget": max((s.length for s in single), default=None),
            }
        return {
            "path": str(self.path),
            "layout": self.layout,
            "tasks": len(self.tasks),
            "domains": len(self.domains),
            "scenarios": len(self.scenarios),
            "single_task_scenarios": sum(s.single_task for s in self.scenarios),
            "per_task": per_task,
        }
