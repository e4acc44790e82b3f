"""Workflow files: a workflow source without STAR (SPEC section 10; ``docs/workflows.md``).

A workflow file is YAML, checked against the JSON Schema shipped beside this module
(``workflow.schema.json``) and then for what a schema cannot say (references between steps, slots
and tables; unique ids). Every problem is reported as ``file:line: field: problem``, all of them at
once (:func:`validate_workflow`; CLI ``python -m dialfork_dataset workflow validate PATH``).

:class:`WorkflowCorpus` reads a valid file and implements
:class:`~dialfork_dataset.sources.WorkflowSource`. Its tasks are :class:`WorkflowTask`: the same
structure as a STAR task (``replies``, ``graph``, node kinds, outcome branches), but with the
branches written out instead of inferred, so :meth:`~dialfork_dataset.star.StarTask.digraph`,
:meth:`~dialfork_dataset.star.StarTask.steps` and
:meth:`~dialfork_dataset.star.StarTask.render_steps` are the STAR reader's own. A STAR task
written as a workflow file (:func:`~dialfork_dataset.workflow.export.workflow_from_star`) reads back into the same graph and the
same numbered steps.

Mapping of a step to the STAR structure: ``id`` is the node; ``say`` its response template,
``label`` (default ``say``) its reply text, ``alternatives`` its NLU phrasings; ``kind: query`` a
query node; ``next`` the ``graph`` edge; each branch ``{outcome, text, next}`` a branch node
``outcome`` (reply ``text``, edge to ``next``) attached to the step. A scenario becomes a
:class:`WorkflowScenario`: ``goal`` and ``persona`` make the user's task, ``slots`` its values.
"""

from __future__ import annotations

import logging
import os
import re
from collections import defaultdict
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from ..star import Scenario, StarApi, StarTask, task_domain
from .check import (  # noqa: F401  (re-exported: the public API of workflow files)
    FORMAT,
    MAX_BYTES,
    MAX_NODES,
    SCHEMA_PATH,
    WorkflowError,
    _raise,
    load_yaml_lines,
    workflow_files,
    workflow_schema,
)
from .check import read_workflows as _read_workflows

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------- model


@dataclass(frozen=True)
class WorkflowScenario(Scenario):
    """A scenario of a workflow file: a STAR :class:`~dialfork_dataset.star.Scenario` (``user_task`` =
    goal and persona; ``user_guide`` = the guide, then one line per slot value) plus the parts kept
    apart: ``goal``, ``persona`` and ``slot_values`` (slot -> value, what the simulated user says).

    The fields of :class:`~dialfork_dataset.star.Scenario` come first (``completion_level`` is
    ``""`` and the utterance counts are 0: a workflow file has no human dialogues).

    Attributes:
        goal: The scenario's ``goal`` as written.
        persona: The scenario's ``persona``; ``""`` when absent.
        slot_values: Slot -> value (booleans as ``"yes"``/``"no"``, everything else as text).
    """

    goal: str = ""
    persona: str = ""
    slot_values: dict[str, str] = field(default_factory=dict, hash=False)


def _star_field(f: dict[str, Any], rows: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A field of the file as a STAR API/KB field (``Name``, ``Type``, ``ReadableName``, ...)."""
    out: dict[str, Any] = {"Name": f["name"], "Type": f["type"]}
    if f.get("readable"):
        out["ReadableName"] = f["readable"]
    cats = f.get("categories")
    if not cats and f["type"] == "Categorical" and rows:
        cats = list(dict.fromkeys(r[f["name"]] for r in rows if f["name"] in r))
    if cats:
        out["Categories"] = list(cats)
    for k in ("min", "max"):
        if k in f:
            out[k.capitalize()] = f[k]
    if f.get("examples"):
        out["Examples"] = [str(x) for x in f["examples"]]
    return out


@dataclass
class WorkflowTask(StarTask):
    """A task of a workflow file (see the module doc); STAR's structure with explicit branches.

    The fields of :class:`~dialfork_dataset.star.StarTask` come first (``flowchart`` is None).
    :class:`WorkflowCorpus` builds these from the file.

    Attributes:
        explicit_kinds: Node -> ``action`` | ``query`` | ``branch``, as written (``kinds``).
        explicit_branch_parents: Branch node -> the step(s) it is an outcome of, as written
            (``branch_parents``).
        asks: Ask step -> the API input slot it asks for.
        request: The user's request as a verb phrase, or None.
        description: What the system agent is told about the task; ``""`` when absent.
        budget: The task's length budget in turns (both speakers); None when the file gives none
            (a file for watching only).
        user_acts: Surface templates of the user's acts, replacing the template backend's defaults.
        curated_phrasings: The template backend uses the alternatives as they are.
        source_file: The workflow file.
        step_paths: Node -> where it is defined, for error messages.
        descriptions: Node -> the step's own plain-language text.
        declared_roles: Step -> its roles as the file's ``role:`` declares them (a single role
            becomes a one-item list); steps without ``role:`` are absent (their roles are derived,
            :func:`~dialfork_dataset.workflow.roles.derive_roles`).
        declared_collects: Step -> the slots its ``collects:`` declares (with its ``ask:`` slot
            first when it has both); steps without ``collects:`` are absent.
        declared_requires: Step -> the slots its ``requires:`` declares (``[]``: none); steps
            without ``requires:`` are absent.
        declared_slots: Slot -> what the task's ``slots:`` declares of it: ``type`` (a value type of
            :data:`~dialfork_dataset.workflow.roles.VALUE_TYPES`), ``description`` and ``examples`` (as text); slots
            without a declaration are absent (their type is guessed from the name).
    """

    explicit_kinds: dict[str, str] = field(default_factory=dict)
    explicit_branch_parents: dict[str, list[str]] = field(default_factory=dict)
    asks: dict[str, str] = field(default_factory=dict)
    """ask step -> the API input slot it asks for."""
    request: str | None = None
    """The user's request as a verb phrase (template backend: "Can you {request}?")."""
    description: str = ""
    budget: int | None = 0
    user_acts: dict[str, list[str]] = field(default_factory=dict)
    """Surface templates of the user's acts (template backend), replacing its defaults."""
    curated_phrasings: bool = True
    """Alternatives are written for this task: the template backend uses them as they are."""
    source_file: Path | None = None
    step_paths: dict[str, str] = field(default_factory=dict)
    """node -> where it is defined (``file:line: tasks[i].steps[j]``), for error messages."""
    descriptions: dict[str, str] = field(default_factory=dict)
    """node -> the step's own plain-language text (``description``), replacing the one from its name."""
    declared_roles: dict[str, list[str]] = field(default_factory=dict)
    """step -> its roles from ``role:`` (read by :func:`~dialfork_dataset.workflow.roles.derive_roles`)."""
    declared_collects: dict[str, list[str]] = field(default_factory=dict)
    """step -> the slots from ``collects:`` (plus its ``ask:`` slot)."""
    declared_requires: dict[str, list[str]] = field(default_factory=dict)
    """step -> the slots from ``requires:``."""
    declared_slots: dict[str, dict[str, Any]] = field(default_factory=dict)
    """slot -> ``{"type", "description", "examples"}`` from the task's ``slots:`` (read by ``derive_roles``)."""

    def describe(self, node: str) -> str:
        """The step's own ``description`` if it has one, else the text from its name and kind.

        Args:
            node: A node of the workflow.

        Returns:
            str: The plain-language text of the step.
        """
        return self.descriptions.get(node) or super().describe(node)

    @cached_property
    def kinds(self) -> dict[str, str]:
        return dict(self.explicit_kinds)

    @cached_property
    def branch_parents(self) -> dict[str, list[str]]:
        return {b: list(ps) for b, ps in self.explicit_branch_parents.items()}

    def missing(self, feature: str, dbs: dict[str, Any] | None = None) -> list[str]:
        """The fields of ``feature`` this task lacks, named by where they go in the file.

        Args:
            feature: ``"surface_templates"`` (a ``say`` for every reachable action step),
                ``"api"`` (the task's ``api``) or ``"kb"`` (the API's ``kb`` table in ``dbs``).
            dbs: The knowledge-base tables available (name -> schema); used by ``"kb"``.

        Returns:
            list[str]: One line per missing field (e.g. ``"file:12: tasks[0].steps[3].say
            (surface template of step 'x')"``); empty when complete.

        Raises:
            ValueError: ``feature`` is not one of the three.
        """
        if feature == "surface_templates":
            return [
                f"{self.step_paths.get(n, n)}.say (surface template of step {n!r})"
                for n in _reachable_actions(self)
                if not self.template(n)
            ]
        if feature == "api":
            return [] if self.api is not None else [f"tasks[{self.name}].api"]
        if feature == "kb":
            if self.api is None or not self.api.db:
                return [f"tasks[{self.name}].api.kb (the knowledge-base table the API reads)"]
            return [] if dbs is not None and self.api.db in dbs else [f"kb.{self.api.db}"]
        raise ValueError(f"unknown feature {feature!r}; known: surface_templates, api, kb")


def _reachable_actions(task: StarTask) -> list[str]:
    out: list[str] = []

    def walk(steps: list[Any]) -> None:
        for s in steps:
            if s.goto is None and task.kinds.get(s.node) == "action":
                out.append(s.node)
            for b in s.branches:
                walk(b.steps)

    walk(task.steps())
    return out


def _build_task(
    t: dict[str, Any], ti: int, kb: dict[str, Any], path: Path, lines: dict[tuple, int]
) -> WorkflowTask:
    replies: dict[str, str] = {}
    responses: dict[str, str] = {}
    graph: dict[str, str] = {}
    nlu: dict[str, list[str]] = {}
    kinds: dict[str, str] = {}
    parents: dict[str, list[str]] = {}
    asks: dict[str, str] = {}
    step_paths: dict[str, str] = {}
    descriptions: dict[str, str] = {}
    roles: dict[str, list[str]] = {}
    collects: dict[str, list[str]] = {}
    requires: dict[str, list[str]] = {}
    for si, s in enumerate(t["steps"]):
        n = s["id"]
        step_paths[n] = f"{path}:{lines.get(('tasks', ti, 'steps', si), 1)}: tasks[{ti}].steps[{si}]"
        kind = s.get("kind", "action")
        kinds[n] = kind
        if "say" in s and kind == "action":
            responses[n] = s["say"]
        label = s["label"] if "label" in s else s.get("say")
        if label is not None:
            replies[n] = label
        if s.get("alternatives"):
            nlu[n] = list(s["alternatives"])
        if s.get("next") is not None:
            graph[n] = s["next"]
        if "ask" in s:
            asks[n] = s["ask"]
        if s.get("description"):
            descriptions[n] = " ".join(s["description"].split()).rstrip(".")
        if s.get("role") is not None:
            roles[n] = [s["role"]] if isinstance(s["role"], str) else list(s["role"])
        if s.get("collects") is not None:  # the ask slot counts as collected too
            collects[n] = list(dict.fromkeys([*([s["ask"]] if "ask" in s else []), *s["collects"]]))
        if s.get("requires") is not None:
            requires[n] = list(s["requires"])
    for s in t["steps"]:
        for b in s.get("branches") or []:
            o = b["outcome"]
            if o not in kinds:
                kinds[o] = "branch"
                if b.get("text") is not None:
                    replies[o] = b["text"]
                if b.get("next") is not None:
                    graph[o] = b["next"]
            parents.setdefault(o, []).append(s["id"])
    api = None
    if t.get("api") is not None:
        a = t["api"]
        table = kb.get(a.get("kb")) if a.get("kb") else None
        rows = (table or {}).get("rows")
        api = StarApi(
            name=t["name"],
            function=a["function"],
            db=a.get("kb") or "",
            inputs=[_star_field(f, rows) for f in a["inputs"]],
            outputs=[_star_field(f, rows) for f in a.get("outputs") or []],
            required=list(a.get("required") or []),
        )
    return WorkflowTask(
        name=t["name"],
        domain=t.get("domain") or task_domain(t["name"]),
        function=api.function if api else t["name"],
        replies=replies,
        graph=graph,
        responses=responses,
        nlu=nlu,
        instructions=t.get("instructions"),
        flowchart=None,
        api=api,
        start_node=t.get("start") or t["steps"][0]["id"],
        explicit_kinds=kinds,
        explicit_branch_parents=parents,
        asks=asks,
        request=t.get("request"),
        description=t.get("description") or "",
        budget=int(t["length_budget"]) if t.get("length_budget") is not None else None,
        user_acts={k: list(v) for k, v in (t.get("user_acts") or {}).items()},
        source_file=path,
        step_paths=step_paths,
        descriptions=descriptions,
        declared_roles=roles,
        declared_collects=collects,
        declared_requires=requires,
        declared_slots={
            name: {
                **({"type": d["type"]} if d.get("type") else {}),
                **({"description": str(d["description"])} if d.get("description") else {}),
                "examples": [
                    ("yes" if v else "no") if isinstance(v, bool) else str(v) for v in d.get("examples") or ()
                ],
            }
            for name, d in (t.get("slots") or {}).items()
        },
    )


def _requires_errors(data: dict[str, Any], path: Path, lines: dict[tuple, int]) -> list[str]:
    """A step's ``requires:`` slot that no step collects (``collects:``, ``ask:`` or the derived rule of
    :mod:`dialfork_dataset.workflow.roles`), one line per slot, at the line of the step's ``requires``;
    a task's ``slots:`` entry that no step collects or requires, at its line."""
    todo = [
        (ti, t)
        for ti, t in enumerate(data["tasks"])
        if t.get("slots") or any("requires" in s for s in t["steps"])
    ]
    if not todo:
        return []
    from .roles import derive_roles, undeclared_requirements

    errs: list[str] = []
    kb = data.get("kb") or {}
    for ti, t in todo:
        task = _build_task(t, ti, kb, path, lines)
        task.step_paths = {
            s["id"]: f"{path}:{lines.get(('tasks', ti, 'steps', si, 'requires'), 1)}: tasks[{ti}].steps[{si}]"
            for si, s in enumerate(t["steps"])
            if "requires" in s
        }
        errs += undeclared_requirements(task)
        if t.get("slots"):
            tr = derive_roles(task)
            known = {s for r in tr.steps.values() for s in (*r.collects, *r.requires)}
            for name in t["slots"]:
                if name not in known:
                    line = lines.get(("tasks", ti, "slots", name), lines.get(("tasks", ti, "slots"), 1))
                    errs.append(
                        f"{path}:{line}: tasks[{ti}].slots.{name}: slot {name!r} is collected or required by no "
                        f"step of task {t['name']!r} (slots: {sorted(known) or 'none'}); name it in a step's "
                        f"'ask:', 'collects:' or 'requires:', or remove it"
                    )
    return errs


def read_workflows(path: str | os.PathLike) -> tuple[list[tuple[Path, Any, dict[tuple, int]]], list[str]]:
    """Read and check a workflow file, or every workflow file of a folder (one source).

    :func:`dialfork_dataset.workflow.check.read_workflows` (YAML, schema, references; a folder's files
    together) with the checks that build the tasks: a step's ``requires:`` slot that no step collects
    (by ``collects:``, ``ask:`` or the rule of :func:`dialfork_dataset.workflow.roles.derive_roles`) is a problem
    of its file, reported with the file's other problems.

    Args:
        path: A workflow file or a folder of them.

    Returns:
        tuple: ``([(file, data, lines), ...], problems)``; the problems of every file, each as
        ``file:line: field: problem`` (empty when all are valid).
    """
    return _read_workflows(path, checks=(_requires_errors,))


def validate_workflow(path: str | os.PathLike) -> list[str]:
    """Every problem of a workflow file, or of a folder of them, as ``file:line: field: problem``
    ([] when valid).

    Problems are reported, never raised: an unreadable or malformed file gives its YAML problems;
    a file that breaks the JSON Schema gives the schema problems only (references, and each
    ``requires:`` slot, are checked on a well-formed file). A folder's files are all checked before
    anything is reported (:func:`read_workflows`).

    Args:
        path: The workflow file, or a folder of workflow files (``*.yaml``, ``*.yml``).

    Returns:
        list[str]: The problems; empty when the file (every file) is valid.
    """
    return read_workflows(path)[1]


def _readable(task: WorkflowTask, slot: str) -> str:
    for f in task.api.inputs if task.api else ():
        if f["Name"] == slot and f.get("ReadableName"):
            return str(f["ReadableName"]).lower()
    return " ".join(re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+", slot)).lower()


def _build_scenario(sc: dict[str, Any], task: WorkflowTask) -> WorkflowScenario:
    slots = {
        k: (("yes" if v else "no") if isinstance(v, bool) else str(v))
        for k, v in (sc.get("slots") or {}).items()
    }
    persona = (sc.get("persona") or "").strip()
    user_task = " ".join(x for x in (sc["goal"].strip(), persona) if x)
    guide = tuple(sc.get("guide") or ()) + tuple(
        f"Your {_readable(task, k)} is {v}." for k, v in slots.items()
    )
    return WorkflowScenario(
        scenario_id=str(sc["id"]),
        tasks=(task.name,),
        domains=(task.domain,),
        happy=bool(sc.get("happy", True)),
        multitask=False,
        completion_level="",
        user_task=user_task,
        wizard_task=task.description or f"Help the user {task.request or task.name.replace('_', ' ')}.",
        user_guide=guide,
        n_user_utterances=0,
        n_system_utterances=0,
        goal=sc["goal"].strip(),
        persona=persona,
        slot_values=slots,
    )


class WorkflowCorpus:
    """A workflow file, or a folder of workflow files, as a :class:`~dialfork_dataset.sources.WorkflowSource`.

    The file (every ``*.yaml``/``*.yml`` file of the folder, in name order) is validated at
    construction; :class:`WorkflowError` lists every problem of every file. A folder is one source:
    the union of its files' tasks, scenarios and knowledge-base tables (task names and scenario ids
    unique across the files).

    Args:
        path: The workflow file or folder (``~`` expanded).

    Attributes:
        path: The resolved file or folder.
        files: The workflow files read, in order (``[path]`` for a file).
        data: The parsed file (a folder: its first file's).
        name: The file's ``name``, else the file's stem (a folder: the folder's name).
        tasks: Task name -> :class:`WorkflowTask`.
        domains: Domain -> its task names (sorted by domain).

    Raises:
        WorkflowError: A file is unreadable or invalid, the folder holds no workflow file, or its
            files clash (every ``file:line: field: problem``).
    """

    layout = "workflow"

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path).expanduser().resolve()
        loaded, errors = read_workflows(self.path)
        if errors:
            _raise(errors, self.path)
        self.files: list[Path] = [f for f, _, _ in loaded]
        self.data = loaded[0][1]
        self.name: str = self.path.name if self.path.is_dir() else (self.data.get("name") or self.path.stem)
        self.tasks: dict[str, WorkflowTask] = {}
        self._scenarios: list[WorkflowScenario] = []
        self._dbs: dict[str, Any] = {}
        for f, data, lines in loaded:
            kb = data.get("kb") or {}
            for ti, t in enumerate(data["tasks"]):
                task = _build_task(t, ti, kb, f, lines)
                self.tasks[task.name] = task
                self._scenarios += [_build_scenario(sc, task) for sc in t.get("scenarios") or ()]
            for name, table in kb.items():
                self._dbs.setdefault(name, [_star_field(fd, table.get("rows")) for fd in table["fields"]])
        domains: dict[str, list[str]] = defaultdict(list)
        for name, t in self.tasks.items():
            domains[t.domain].append(name)
        self.domains: dict[str, list[str]] = dict(sorted(domains.items()))

    def __repr__(self) -> str:
        return f"WorkflowCorpus({str(self.path)!r}, tasks={len(self.tasks)})"

    @property
    def dbs(self) -> dict[str, Any]:
        """KB table -> its schema as STAR's ``apis/dbs`` files have it (``Name``, ``Type``, ``Categories``...)."""
        return self._dbs

    @property
    def scenarios(self) -> list[WorkflowScenario]:
        """Every scenario of the file, in file order (a new list)."""
        return list(self._scenarios)

    def task(self, name: str) -> WorkflowTask:
        """The task named ``name``.

        Args:
            name: A task name of the file.

        Returns:
            WorkflowTask: The task.

        Raises:
            WorkflowError: No such task (the message lists the tasks).
        """
        try:
            return self.tasks[name]
        except KeyError:
            raise WorkflowError(
                f"unknown task {name!r} in {self.path}; tasks: {', '.join(self.tasks)}"
            ) from None

    def scenario(self, scenario_id: str | int) -> WorkflowScenario:
        """The scenario with id ``scenario_id`` (compared as a string).

        Args:
            scenario_id: A scenario id of the file.

        Returns:
            WorkflowScenario: The scenario.

        Raises:
            WorkflowError: No scenario has that id.
        """
        for s in self._scenarios:
            if s.scenario_id == str(scenario_id):
                return s
        raise WorkflowError(f"no scenario with id {scenario_id!r} in {self.path}")

    def scenarios_for(
        self, task: str | None = None, single_task: bool = True, happy: bool | None = None
    ) -> list[WorkflowScenario]:
        """The scenarios of ``task`` (every scenario of a workflow file is single-task).

        Args:
            task: A task name; None for every task.
            single_task: Accepted for the :class:`~dialfork_dataset.sources.WorkflowSource`
                protocol; has no effect.
            happy: Keep scenarios with this ``happy`` flag; None keeps both.

        Returns:
            list[WorkflowScenario]: The matching scenarios, in file order.

        Raises:
            WorkflowError: ``task`` is not a task of the file.
        """
        if task is not None:
            self.task(task)
        return [
            s
            for s in self._scenarios
            if (task is None or task in s.tasks) and (happy is None or s.happy == happy)
        ]

    def length_budget(self, task: str, single_task_only: bool = True) -> int:
        """The task's ``length_budget`` from the file.

        Args:
            task: A task name.
            single_task_only: Accepted for compatibility with
                :meth:`~dialfork_dataset.star.StarCorpus.length_budget`; has no effect.

        Returns:
            int: The budget, in turns (both speakers).

        Raises:
            WorkflowError: ``task`` is not a task of the file, or its file gives it no
                ``length_budget`` (a file for watching only; the message says where to add one).
        """
        t = self.task(task)
        if t.budget is None:
            raise WorkflowError(
                f"{t.step_paths.get(t.start_node, t.source_file)}: task {task!r} has no length_budget (a "
                "file for watching only); add 'length_budget:' and 'scenarios:' to the task to generate or "
                "audit dialogues of it"
            )
        return t.budget

    def watch_only_tasks(self) -> list[str]:
        """The tasks that can be watched but not generated: no scenario or no ``length_budget``.

        A workflow file for watching only (docs/workflows.md) gives steps alone; the detectors, the
        guard and the sgd track read it, generation and the agent audit need scenarios and a budget.

        Returns:
            list[str]: The task names, in file order.
        """
        have = {s.tasks[0] for s in self._scenarios}
        return [n for n, t in self.tasks.items() if n not in have or t.budget is None]

    def notes(self) -> list[str]:
        """Warnings about a valid source: one line per task for watching only.

        Returns:
            list[str]: ``"file: task 'x' has no scenarios and no length_budget: ..."`` lines (empty
            when every task can be generated).
        """
        have = {s.tasks[0] for s in self._scenarios}
        out = []
        for n in self.watch_only_tasks():
            t = self.tasks[n]
            missing = [
                x for x, ok in (("scenarios", n in have), ("length_budget", t.budget is not None)) if not ok
            ]
            out.append(
                f"{t.source_file}: task {n!r} has no {' and no '.join(missing)}: it can be watched (detectors, "
                "guard, tracks), not generated or audited; add them to generate"
            )
        return out

    def summary(self) -> dict[str, Any]:
        """Counts, in the form of :meth:`~dialfork_dataset.star.StarCorpus.summary`.

        Returns:
            dict[str, Any]: ``{"path", "layout" ("workflow"), "tasks", "domains", "scenarios",
            "single_task_scenarios", "per_task"}``; ``per_task[name]`` is ``{"domain",
            "single_task_scenarios", "length_budget"}``.
        """
        return {
            "path": str(self.path),
            "layout": self.layout,
            "tasks": len(self.tasks),
            "domains": len(self.domains),
            "scenarios": len(self._scenarios),
            "single_task_scenarios": len(self._scenarios),
            "per_task": {
                n: {
                    "domain": t.domain,
                    "single_task_scenarios": len(self.scenarios_for(n)),
                    "length_budget": t.budget,
                }
                for n, t in self.tasks.items()
            },
        }


__all__ = [
    "FORMAT",
    "SCHEMA_PATH",
    "WorkflowCorpus",
    "WorkflowError",
    "WorkflowScenario",
    "WorkflowTask",
    "load_yaml_lines",
    "read_workflows",
    "validate_workflow",
    "workflow_files",
    "workflow_schema",
]
