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
written as a workflow file (:func:`workflow_from_star`) reads back into the same graph and the
same numbered steps.

Mapping of a step to the STAR structure: ``id`` is the node; ``say`` its response template,
``label`` (default ``say``) its reply text, ``alternatives`` its NLU phrasings; ``kind: query`` a
query node; ``next`` the ``graph`` edge; each branch ``{outcome, text, next}`` a branch node
``outcome`` (reply ``text``, edge to ``next``) attached to the step. A scenario becomes a
:class:`WorkflowScenario`: ``goal`` and ``persona`` make the user's task, ``slots`` its values.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

from .sources import SourceError
from .star import Scenario, StarApi, StarTask, task_domain

log = logging.getLogger(__name__)

FORMAT = "dialfork-workflow/1"
SCHEMA_PATH = Path(__file__).with_name("workflow.schema.json")
#: Limits on untrusted files (ours): size in bytes and YAML nodes after alias expansion.
MAX_BYTES = 8 * 1024 * 1024
MAX_NODES = 500_000
_MAX_LISTED_ERRORS = 50


class WorkflowError(SourceError):
    """A workflow file is unreadable or invalid; ``errors`` holds every ``file:line: field: problem``."""


# --------------------------------------------------------------------------------------------- YAML with lines


def _path_str(path: Iterable[Any]) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(top level)"


_TIMESTAMP = "tag:yaml.org,2002:timestamp"
_PLAIN_TAGS = frozenset(f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "map", "seq",
                                                          "timestamp"))


def load_yaml_lines(path: str | os.PathLike) -> tuple[Any, dict[tuple, int]]:
    """Parse a YAML file with PyYAML's safe loader, keeping the line of every value.

    Returns ``(data, lines)``: ``lines`` maps a path (tuple of keys and indices) to its 1-based line.
    Raises :class:`WorkflowError` (with ``file:line``) for unreadable or malformed YAML, a file over
    :data:`MAX_BYTES`, non-string keys, duplicate keys, or more than :data:`MAX_NODES` nodes after
    expanding aliases (the "billion laughs").
    """
    import yaml

    p = Path(path)
    try:
        size = p.stat().st_size
        if size > MAX_BYTES:
            raise WorkflowError(f"{p}: {size} bytes, over the {MAX_BYTES}-byte limit of a workflow file")
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise WorkflowError(f"{p}: no such workflow file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise WorkflowError(f"{p}: unreadable workflow file ({e})") from None
    try:
        root = yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = f":{mark.line + 1}" if mark is not None else ""
        raise WorkflowError(f"{p}{line}: malformed YAML ({e.problem or e.context})") from None
    except yaml.YAMLError as e:
        raise WorkflowError(f"{p}: malformed YAML ({e})") from None
    if root is None:
        raise WorkflowError(f"{p}: empty file; a workflow file starts with 'format: {FORMAT}'")
    constructor = yaml.constructor.SafeConstructor()
    lines: dict[tuple, int] = {}
    errors: list[str] = []
    count = [0]

    def build(node: Any, where: tuple) -> Any:
        count[0] += 1
        if count[0] > MAX_NODES:
            raise WorkflowError(f"{p}: more than {MAX_NODES} YAML nodes (aliases expanded); refusing the file")
        lines.setdefault(where, node.start_mark.line + 1)
        if node.tag not in _PLAIN_TAGS:  # !!python/..., !custom...: never constructed
            errors.append(f"{p}:{node.start_mark.line + 1}: {_path_str(where)}: unsupported YAML tag {node.tag!r}")
            return None
        if node.tag == _TIMESTAMP:  # a date is text here (3 March, 2024-03-03 alike)
            return str(node.value)
        if isinstance(node, yaml.MappingNode):
            out: dict[str, Any] = {}
            for k, v in node.value:
                if k.tag == "tag:yaml.org,2002:merge":
                    errors.append(f"{p}:{k.start_mark.line + 1}: {_path_str(where)}: merge keys (<<) are not supported")
                    continue
                key = constructor.construct_object(k) if isinstance(k, yaml.ScalarNode) else None
                if not isinstance(key, str):
                    errors.append(f"{p}:{k.start_mark.line + 1}: {_path_str(where)}: keys must be strings, got "
                                  f"{type(key).__name__}")
                    continue
                if key in out:
                    errors.append(f"{p}:{k.start_mark.line + 1}: {_path_str((*where, key))}: duplicate key")
                    continue
                out[key] = build(v, (*where, key))
            return out
        if isinstance(node, yaml.SequenceNode):
            return [build(v, (*where, i)) for i, v in enumerate(node.value)]
        try:
            return constructor.construct_object(node)
        except yaml.YAMLError as e:
            errors.append(f"{p}:{node.start_mark.line + 1}: {_path_str(where)}: bad value ({e})")
            return None

    data = build(root, ())
    if errors:
        _raise(errors, p)
    return data, lines


def _raise(errors: list[str], path: Path) -> None:
    shown = errors[:_MAX_LISTED_ERRORS]
    more = f"\n... and {len(errors) - len(shown)} more" if len(errors) > len(shown) else ""
    raise WorkflowError(f"{len(errors)} problem(s) in workflow file {path}:\n" + "\n".join(shown) + more, errors)


# --------------------------------------------------------------------------------------------- validation


@lru_cache(maxsize=1)
def workflow_schema() -> dict[str, Any]:
    """The shipped JSON Schema of workflow files."""
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


class _Where:
    def __init__(self, path: Path, lines: dict[tuple, int]):
        self.path, self.lines = path, lines

    def __call__(self, where: Iterable[Any], message: str) -> str:
        w = tuple(where)
        probe = w
        while probe and probe not in self.lines:
            probe = probe[:-1]
        return f"{self.path}:{self.lines.get(probe, 1)}: {_path_str(w)}: {message}"


def _schema_errors(data: Any, at: _Where) -> list[str]:
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(workflow_schema())
    out = []
    for e in sorted(validator.iter_errors(data), key=lambda e: (list(map(str, e.absolute_path)), e.message)):
        best = e
        if e.context:  # oneOf/anyOf: the deepest sub-error says the most
            best = max(e.context, key=lambda c: len(c.absolute_path))
        if best.validator == "additionalProperties" and isinstance(best.instance, dict):
            import difflib

            known = list(best.schema.get("properties") or {})
            for k in best.instance:
                if k not in known:
                    near = difflib.get_close_matches(k, known, n=1)
                    hint = f" (did you mean {near[0]!r}?)" if near else f"; known fields: {', '.join(known)}"
                    out.append(at((*best.absolute_path, k), f"unknown field {k!r}{hint}"))
            continue
        out.append(at(best.absolute_path, best.message if len(best.message) < 300 else best.message[:297] + "..."))
    return out


def _semantic_errors(data: dict[str, Any], at: _Where) -> list[str]:
    """What the schema cannot say: references, unique ids, values in their categories."""
    errs: list[str] = []
    kb = data.get("kb") or {}
    for tname, table in kb.items():
        names = [f["name"] for f in table["fields"]]
        for i, n in enumerate(names):
            if n in names[:i]:
                errs.append(at(("kb", tname, "fields", i, "name"), f"duplicate field {n!r}"))
        for r, row in enumerate(table.get("rows") or []):
            for k in row:
                if k not in names:
                    errs.append(at(("kb", tname, "rows", r, k), f"no field {k!r} in table {tname!r}; fields: {names}"))
    task_names: dict[str, int] = {}
    scenario_ids: dict[str, tuple] = {}
    for ti, t in enumerate(data["tasks"]):
        tp = ("tasks", ti)
        if t["name"] in task_names:
            errs.append(at((*tp, "name"), f"duplicate task name {t['name']!r} (first at tasks[{task_names[t['name']]}])"))
        task_names.setdefault(t["name"], ti)
        api = t.get("api")
        slots: dict[str, dict[str, Any]] = {}
        if api is not None:
            for i, f in enumerate(api["inputs"]):
                if f["name"] in slots:
                    errs.append(at((*tp, "api", "inputs", i, "name"), f"duplicate input slot {f['name']!r}"))
                slots.setdefault(f["name"], f)
            for i, r in enumerate(api.get("required") or []):
                if r not in slots:
                    errs.append(at((*tp, "api", "required", i), f"{r!r} is not an input slot; slots: {sorted(slots)}"))
            if api.get("kb") is not None and api["kb"] not in kb:
                errs.append(at((*tp, "api", "kb"), f"no knowledge-base table {api['kb']!r} under 'kb'; tables: {sorted(kb)}"))
        steps = t["steps"]
        ids: dict[str, int] = {}
        for si, s in enumerate(steps):
            if s["id"] in ids:
                errs.append(at((*tp, "steps", si, "id"), f"duplicate step id {s['id']!r} (first at steps[{ids[s['id']]}])"))
            ids.setdefault(s["id"], si)
        outcomes: dict[str, tuple[int, int, dict[str, Any]]] = {}
        for si, s in enumerate(steps):
            for bi, b in enumerate(s.get("branches") or []):
                o = b["outcome"]
                bp = (*tp, "steps", si, "branches", bi)
                if o in ids:
                    errs.append(at((*bp, "outcome"), f"outcome {o!r} is also a step id; give the outcome its own name"))
                if o in outcomes:
                    psi, pbi, prev = outcomes[o]
                    for key in ("next", "text"):
                        if b.get(key) != prev.get(key):
                            errs.append(at((*bp, key), f"outcome {o!r} has {key} {b.get(key)!r} here but {prev.get(key)!r} at "
                                                        f"steps[{psi}].branches[{pbi}]; an outcome label leads to one place"))
                else:
                    outcomes[o] = (si, bi, b)
        known = set(ids) | set(outcomes)
        for si, s in enumerate(steps):
            sp = (*tp, "steps", si)
            if s.get("next") is not None and s["next"] not in known:
                errs.append(at((*sp, "next"), f"no step or outcome {s['next']!r} in task {t['name']!r}"))
            for bi, b in enumerate(s.get("branches") or []):
                if b.get("next") is not None and b["next"] not in known:
                    errs.append(at((*sp, "branches", bi, "next"), f"no step or outcome {b['next']!r} in task {t['name']!r}"))
            kind = s.get("kind", "action")
            if kind == "query" and "say" in s:
                errs.append(at((*sp, "say"), "a query step is an API call, not said; use 'label' for its flowchart text"))
            if kind == "query" and "ask" in s:
                errs.append(at((*sp, "ask"), "a query step asks nothing; put 'ask' on the action that asks"))
            if "ask" in s and s["ask"] not in slots:
                errs.append(at((*sp, "ask"), f"{s['ask']!r} is not an input slot of the task's api; slots: {sorted(slots)}"
                               if api is not None else f"{s['ask']!r}: the task has no 'api' with input slots"))
        if t.get("start") is not None and t["start"] not in ids:
            errs.append(at((*tp, "start"), f"no step {t['start']!r} in task {t['name']!r}"))
        for ci, sc in enumerate(t["scenarios"]):
            cp = (*tp, "scenarios", ci)
            if sc["id"] in scenario_ids:
                errs.append(at((*cp, "id"), f"duplicate scenario id {sc['id']!r} (first at {_path_str(scenario_ids[sc['id']])})"))
            scenario_ids.setdefault(sc["id"], cp)
            for k, v in (sc.get("slots") or {}).items():
                if k not in slots:
                    errs.append(at((*cp, "slots", k), f"{k!r} is not an input slot of task {t['name']!r}; slots: {sorted(slots)}"))
                    continue
                cats = slots[k].get("categories")
                if cats and v not in cats and str(v) not in map(str, cats):
                    errs.append(at((*cp, "slots", k), f"{v!r} is not one of the slot's categories {cats}"))
    return errs


def validate_workflow(path: str | os.PathLike) -> list[str]:
    """Every problem of a workflow file as ``file:line: field: problem`` ([] when valid)."""
    return _read_checked(Path(path))[2]


def _read_checked(p: Path) -> tuple[Any, dict[tuple, int], list[str]]:
    try:
        data, lines = load_yaml_lines(p)
    except WorkflowError as e:
        return None, {}, e.errors
    at = _Where(p, lines)
    errs = _schema_errors(data, at)
    if errs:  # references are checked on a well-formed file only
        return data, lines, errs
    return data, lines, _semantic_errors(data, at)


# --------------------------------------------------------------------------------------------- model


@dataclass(frozen=True)
class WorkflowScenario(Scenario):
    """A scenario of a workflow file: a STAR :class:`~dialfork_dataset.star.Scenario` (``user_task`` =
    goal and persona; ``user_guide`` = the guide, then one line per slot value) plus the parts kept
    apart: ``goal``, ``persona`` and ``slot_values`` (slot -> value, what the simulated user says)."""

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
    """A task of a workflow file (see the module doc); STAR's structure with explicit branches."""

    explicit_kinds: dict[str, str] = field(default_factory=dict)
    explicit_branch_parents: dict[str, list[str]] = field(default_factory=dict)
    asks: dict[str, str] = field(default_factory=dict)
    """ask step -> the API input slot it asks for."""
    request: str | None = None
    """The user's request as a verb phrase (template backend: "Can you {request}?")."""
    description: str = ""
    budget: int = 0
    user_acts: dict[str, list[str]] = field(default_factory=dict)
    """Surface templates of the user's acts (template backend), replacing its defaults."""
    curated_phrasings: bool = True
    """Alternatives are written for this task: the template backend uses them as they are."""
    source_file: Path | None = None
    step_paths: dict[str, str] = field(default_factory=dict)
    """node -> where it is defined (``file:line: tasks[i].steps[j]``), for error messages."""
    descriptions: dict[str, str] = field(default_factory=dict)
    """node -> the step's own plain-language text (``description``), replacing the one from its name."""

    def describe(self, node: str) -> str:
        return self.descriptions.get(node) or super().describe(node)

    @cached_property
    def kinds(self) -> dict[str, str]:
        return dict(self.explicit_kinds)

    @cached_property
    def branch_parents(self) -> dict[str, list[str]]:
        return {b: list(ps) for b, ps in self.explicit_branch_parents.items()}

    def missing(self, feature: str, dbs: dict[str, Any] | None = None) -> list[str]:
        if feature == "surface_templates":
            return [f"{self.step_paths.get(n, n)}.say (surface template of step {n!r})"
                    for n in _reachable_actions(self) if not self.template(n)]
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


def _build_task(t: dict[str, Any], ti: int, kb: dict[str, Any], path: Path,
                lines: dict[tuple, int]) -> WorkflowTask:
    replies: dict[str, str] = {}
    responses: dict[str, str] = {}
    graph: dict[str, str] = {}
    nlu: dict[str, list[str]] = {}
    kinds: dict[str, str] = {}
    parents: dict[str, list[str]] = {}
    asks: dict[str, str] = {}
    step_paths: dict[str, str] = {}
    descriptions: dict[str, str] = {}
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
        api = StarApi(name=t["name"], function=a["function"], db=a.get("kb") or "",
                      inputs=[_star_field(f, rows) for f in a["inputs"]],
                      outputs=[_star_field(f, rows) for f in a.get("outputs") or []],
                      required=list(a.get("required") or []))
    return WorkflowTask(
        name=t["name"], domain=t.get("domain") or task_domain(t["name"]),
        function=api.function if api else t["name"], replies=replies, graph=graph, responses=responses, nlu=nlu,
        instructions=t.get("instructions"), flowchart=None, api=api, start_node=t.get("start") or t["steps"][0]["id"],
        explicit_kinds=kinds, explicit_branch_parents=parents, asks=asks, request=t.get("request"),
        description=t.get("description") or "", budget=int(t["length_budget"]),
        user_acts={k: list(v) for k, v in (t.get("user_acts") or {}).items()}, source_file=path,
        step_paths=step_paths, descriptions=descriptions)


def _readable(task: WorkflowTask, slot: str) -> str:
    for f in task.api.inputs if task.api else ():
        if f["Name"] == slot and f.get("ReadableName"):
            return str(f["ReadableName"]).lower()
    return " ".join(re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+", slot)).lower()


def _build_scenario(sc: dict[str, Any], task: WorkflowTask) -> WorkflowScenario:
    slots = {k: (("yes" if v else "no") if isinstance(v, bool) else str(v)) for k, v in (sc.get("slots") or {}).items()}
    persona = (sc.get("persona") or "").strip()
    user_task = " ".join(x for x in (sc["goal"].strip(), persona) if x)
    guide = tuple(sc.get("guide") or ()) + tuple(f"Your {_readable(task, k)} is {v}." for k, v in slots.items())
    return WorkflowScenario(
        scenario_id=str(sc["id"]), tasks=(task.name,), domains=(task.domain,), happy=bool(sc.get("happy", True)),
        multitask=False, completion_level="", user_task=user_task,
        wizard_task=task.description or f"Help the user {task.request or task.name.replace('_', ' ')}.",
        user_guide=guide, n_user_utterances=0, n_system_utterances=0,
        goal=sc["goal"].strip(), persona=persona, slot_values=slots)


class WorkflowCorpus:
    """A workflow file as a :class:`~dialfork_dataset.sources.WorkflowSource`.

    The file is validated at construction; :class:`WorkflowError` lists every problem.
    """

    layout = "workflow"

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path).expanduser().resolve()
        data, lines, errors = _read_checked(self.path)
        if errors:
            _raise(errors, self.path)
        self.data = data
        self.name: str = data.get("name") or self.path.stem
        kb = data.get("kb") or {}
        self.tasks: dict[str, WorkflowTask] = {}
        self._scenarios: list[WorkflowScenario] = []
        for ti, t in enumerate(data["tasks"]):
            task = _build_task(t, ti, kb, self.path, lines)
            self.tasks[task.name] = task
            self._scenarios += [_build_scenario(sc, task) for sc in t["scenarios"]]
        domains: dict[str, list[str]] = defaultdict(list)
        for name, t in self.tasks.items():
            domains[t.domain].append(name)
        self.domains: dict[str, list[str]] = dict(sorted(domains.items()))
        self._dbs = {name: [_star_field(f, table.get("rows")) for f in table["fields"]] for name, table in kb.items()}

    def __repr__(self) -> str:
        return f"WorkflowCorpus({str(self.path)!r}, tasks={len(self.tasks)})"

    @property
    def dbs(self) -> dict[str, Any]:
        """KB table -> its schema as STAR's ``apis/dbs`` files have it (``Name``, ``Type``, ``Categories``...)."""
        return self._dbs

    @property
    def scenarios(self) -> list[WorkflowScenario]:
        return list(self._scenarios)

    def task(self, name: str) -> WorkflowTask:
        try:
            return self.tasks[name]
        except KeyError:
            raise WorkflowError(f"unknown task {name!r} in {self.path}; tasks: {', '.join(self.tasks)}") from None

    def scenario(self, scenario_id: str | int) -> WorkflowScenario:
        for s in self._scenarios:
            if s.scenario_id == str(scenario_id):
                return s
        raise WorkflowError(f"no scenario with id {scenario_id!r} in {self.path}")

    def scenarios_for(self, task: str | None = None, single_task: bool = True,
                      happy: bool | None = None) -> list[WorkflowScenario]:
        if task is not None:
            self.task(task)
        return [s for s in self._scenarios if (task is None or task in s.tasks)
                and (happy is None or s.happy == happy)]

    def length_budget(self, task: str, single_task_only: bool = True) -> int:
        return self.task(task).budget

    def summary(self) -> dict[str, Any]:
        return {
            "path": str(self.path), "layout": self.layout, "tasks": len(self.tasks), "domains": len(self.domains),
            "scenarios": len(self._scenarios), "single_task_scenarios": len(self._scenarios),
            "per_task": {n: {"domain": t.domain, "single_task_scenarios": len(self.scenarios_for(n)),
                             "length_budget": t.budget} for n, t in self.tasks.items()},
        }


# --------------------------------------------------------------------------------------------- STAR -> workflow file


_FILE_TYPES = ("Categorical", "Integer", "Boolean", "ShortString", "LongString")


def _file_field(f: dict[str, Any]) -> dict[str, Any]:
    t = str(f.get("Type") or "ShortString")
    t = "Categorical" if t.startswith("Categorical") else t if t in _FILE_TYPES else "ShortString"
    out: dict[str, Any] = {"name": f["Name"], "type": t}
    if f.get("ReadableName"):
        out["readable"] = f["ReadableName"]
    cats = f.get("Categories")
    if isinstance(cats, list) and cats and all(isinstance(c, (str, int, float, bool)) for c in cats):
        out["categories"] = list(cats)
    for k in ("Min", "Max"):
        if isinstance(f.get(k), int):
            out[k.lower()] = f[k]
    return out


def workflow_from_star(corpus: Any, tasks: Iterable[str], max_scenarios: int | None = None) -> dict[str, Any]:
    """STAR tasks written as a workflow file (a dict to dump as YAML): the same nodes, edges,
    outcome branches, templates and phrasings, the API and its KB table, and the task's
    single-task scenarios (``goal`` = STAR's ``user_task``). A starting point for a workflow of
    your own, and the test that the two readers agree."""
    names = list(tasks)
    out_tasks = []
    kb: dict[str, Any] = {}
    for name in names:
        t = corpus.task(name)
        kids: dict[str, list[str]] = defaultdict(list)
        for b, ps in t.branch_parents.items():
            for p in ps:
                kids[p].append(b)
        steps = []
        for n, kind in t.kinds.items():
            if kind == "branch":
                continue
            s: dict[str, Any] = {"id": n}
            if kind == "query":
                s["kind"] = "query"
            say = t.template(n)
            if say:
                s["say"] = say
            reply = t.replies.get(n)
            if reply != say:
                s["label"] = reply
            alts = [a for a in t.nlu.get(n, ()) if a.strip()]
            if alts and kind == "action":
                s["alternatives"] = alts
            if n in t.graph:
                s["next"] = t.graph[n]
            bs = []
            for b in kids.get(n, ()):
                br: dict[str, Any] = {"outcome": b}
                if b in t.replies:
                    br["text"] = t.replies[b]
                if b in t.graph:
                    br["next"] = t.graph[b]
                bs.append(br)
            if bs:
                s["branches"] = bs
            steps.append(s)
        task: dict[str, Any] = {"name": name, "domain": t.domain, "length_budget": max(4, int(corpus.length_budget(name)))}
        if t.instructions:
            task["instructions"] = t.instructions
        task["start"] = t.start_node
        if t.api is not None:
            api: dict[str, Any] = {"function": t.function,
                                   "inputs": [_file_field(f) for f in t.api.inputs],
                                   "outputs": [_file_field(f) for f in t.api.outputs if isinstance(f, dict) and "Name" in f],
                                   "required": list(t.api.required)}
            db = corpus.dbs.get(t.api.db)
            if isinstance(db, list):
                fields = [_file_field(f) for f in db if isinstance(f, dict) and "Name" in f]
                fields = list({f["name"]: f for f in fields}.values())
                if fields:
                    kb[t.api.db] = {"fields": fields}
                    api["kb"] = t.api.db
            task["api"] = api
        task["steps"] = steps
        scs = corpus.scenarios_for(name)[:max_scenarios] if max_scenarios else corpus.scenarios_for(name)
        task["scenarios"] = [{"id": s.scenario_id, "goal": " ".join(s.user_task.split()) or "(no goal)",
                              "happy": bool(s.happy)} for s in scs]
        out_tasks.append(task)
    data: dict[str, Any] = {"format": FORMAT, "name": "star-" + "-".join(names)[:60]}
    if kb:
        data["kb"] = kb
    data["tasks"] = out_tasks
    return data


def dump_workflow(data: dict[str, Any], path: str | os.PathLike) -> None:
    """Write a workflow dict as YAML (atomically)."""
    import yaml

    from .jsonl import write_text_atomic

    write_text_atomic(path, yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=120))


# --------------------------------------------------------------------------------------------- CLI


def add_cli(sub: Any) -> None:
    """Add ``workflow {validate,steps,from-star}`` to an argparse subparsers object."""
    w = sub.add_parser("workflow", help="workflow files: validate, show a task's steps, write STAR tasks as one")
    wsub = w.add_subparsers(dest="workflow_cmd", required=True)
    p = wsub.add_parser("validate", help="check a workflow file; every problem as file:line: field: problem")
    p.add_argument("path")
    p.set_defaults(func=_cmd_validate)
    p = wsub.add_parser("steps", help="print a task's numbered workflow as generation prompts show it")
    p.add_argument("path")
    p.add_argument("task")
    p.add_argument("--no-templates", action="store_true")
    p.set_defaults(func=_cmd_steps)
    p = wsub.add_parser("from-star", help="write STAR tasks as a workflow file (a starting point for your own)")
    p.add_argument("tasks", help="comma-separated STAR task names")
    p.add_argument("out", help="YAML file to write")
    p.add_argument("--star", default=None, help="STAR folder (default: $DIALFORK_STAR_DIR)")
    p.add_argument("--max-scenarios", type=int, default=None)
    p.set_defaults(func=_cmd_from_star)


def _cmd_validate(a: Any) -> int:
    errors = validate_workflow(a.path)
    if errors:
        for e in errors:
            print(e, file=sys.stderr)
        print(f"error: {len(errors)} problem(s) in {a.path}", file=sys.stderr)
        return 2
    c = WorkflowCorpus(a.path)
    print(f"{a.path}: valid ({len(c.tasks)} task(s), {len(c.domains)} domain(s), {len(c.scenarios)} scenario(s))")
    return 0


def _cmd_steps(a: Any) -> int:
    print(WorkflowCorpus(a.path).task(a.task).render_steps(with_templates=not a.no_templates))
    return 0


def _cmd_from_star(a: Any) -> int:
    from .star import StarCorpus, resolve_star

    corpus = StarCorpus(resolve_star(a.star))
    data = workflow_from_star(corpus, [t.strip() for t in a.tasks.split(",") if t.strip()], a.max_scenarios)
    dump_workflow(data, a.out)
    print(f"{a.out}: {len(data['tasks'])} task(s)")
    return 0


__all__ = ["FORMAT", "SCHEMA_PATH", "WorkflowCorpus", "WorkflowError", "WorkflowScenario", "WorkflowTask",
           "dump_workflow", "load_yaml_lines", "validate_workflow", "workflow_from_star", "workflow_schema"]
