"""Reading and checking workflow files (:mod:`dialfork_dataset.workflow.files`): YAML with the line of every
value, the shipped JSON Schema, and the checks a schema cannot express (references between steps,
slots and tables; unique ids); :mod:`dialfork_dataset.workflow.files` adds the checks that build the tasks
(a ``requires:`` slot that some step collects). Every problem is ``file:line: field: problem``, all of
them at once.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..errors import SourceError

FORMAT = "dialfork-workflow/1"
SCHEMA_PATH = Path(__file__).with_name("workflow.schema.json")
#: Limits on untrusted files (ours): size in bytes and YAML nodes after alias expansion.
MAX_BYTES = 8 * 1024 * 1024
MAX_NODES = 500_000
_MAX_LISTED_ERRORS = 50
#: A further check of a schema-valid file: ``(data, file, lines) -> problems`` (``file:line: field: problem``).
FileCheck = Callable[[dict[str, Any], Path, dict[tuple, int]], list[str]]


class WorkflowError(SourceError):
    """A workflow file is unreadable or invalid; ``errors`` holds every ``file:line: field: problem``.

    Args:
        message: The exception's text.
        errors: Every problem, one ``file:line: field: problem`` line each; defaults to
            ``[message]``.
    """


# --------------------------------------------------------------------------------------------- YAML with lines


def _path_str(path: Iterable[Any]) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(top level)"


_TIMESTAMP = "tag:yaml.org,2002:timestamp"
_PLAIN_TAGS = frozenset(
    f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "map", "seq", "timestamp")
)


def load_yaml_lines(path: str | os.PathLike) -> tuple[Any, dict[tuple, int]]:
    """Parse a YAML file with PyYAML's safe loader, keeping the line of every value.

    Returns ``(data, lines)``: ``lines`` maps a path (tuple of keys and indices) to its 1-based line.
    Raises :class:`WorkflowError` (with ``file:line``) for unreadable or malformed YAML, a file over
    :data:`MAX_BYTES`, non-string keys, duplicate keys, or more than :data:`MAX_NODES` nodes after
    expanding aliases (the "billion laughs").

    Unsupported tags (``!!python/...``, custom tags) and merge keys (``<<``) are refused too; dates
    are kept as text.

    Args:
        path: The YAML file.

    Returns:
        tuple[Any, dict[tuple, int]]: ``(data, lines)``: the parsed value (plain dicts, lists and
        scalars) and path -> 1-based line.

    Raises:
        WorkflowError: The file is missing, unreadable, over :data:`MAX_BYTES`, empty or malformed
            YAML; or it has more than :data:`MAX_NODES` nodes, an unsupported tag, a merge key, a
            non-string or duplicate key, or a bad value (every problem of the last kinds listed).
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
            raise WorkflowError(
                f"{p}: more than {MAX_NODES} YAML nodes (aliases expanded); refusing the file"
            )
        lines.setdefault(where, node.start_mark.line + 1)
        if node.tag not in _PLAIN_TAGS:  # !!python/..., !custom...: never constructed
            errors.append(
                f"{p}:{node.start_mark.line + 1}: {_path_str(where)}: unsupported YAML tag {node.tag!r}"
            )
            return None
        if node.tag == _TIMESTAMP:  # a date is text here (3 March, 2024-03-03 alike)
            return str(node.value)
        if isinstance(node, yaml.MappingNode):
            out: dict[str, Any] = {}
            for k, v in node.value:
                if k.tag == "tag:yaml.org,2002:merge":
                    errors.append(
                        f"{p}:{k.start_mark.line + 1}: {_path_str(where)}: merge keys (<<) are not supported"
                    )
                    continue
                key = constructor.construct_object(k) if isinstance(k, yaml.ScalarNode) else None
                if not isinstance(key, str):
                    errors.append(
                        f"{p}:{k.start_mark.line + 1}: {_path_str(where)}: keys must be strings, got "
                        f"{type(key).__name__}"
                    )
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
    what = "workflow folder" if path.is_dir() else "workflow file"
    WorkflowError.raise_if(errors, f"{what} {path}", _MAX_LISTED_ERRORS)


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
        out.append(
            at(best.absolute_path, best.message if len(best.message) < 300 else best.message[:297] + "...")
        )
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
                    errs.append(
                        at(("kb", tname, "rows", r, k), f"no field {k!r} in table {tname!r}; fields: {names}")
                    )
    task_names: dict[str, int] = {}
    scenario_ids: dict[str, tuple] = {}
    for ti, t in enumerate(data["tasks"]):
        tp = ("tasks", ti)
        if t["name"] in task_names:
            errs.append(
                at(
                    (*tp, "name"),
                    f"duplicate task name {t['name']!r} (first at tasks[{task_names[t['name']]}])",
                )
            )
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
                    errs.append(
                        at((*tp, "api", "required", i), f"{r!r} is not an input slot; slots: {sorted(slots)}")
                    )
            if api.get("kb") is not None and api["kb"] not in kb:
                errs.append(
                    at(
                        (*tp, "api", "kb"),
                        f"no knowledge-base table {api['kb']!r} under 'kb'; tables: {sorted(kb)}",
                    )
                )
        steps = t["steps"]
        ids: dict[str, int] = {}
        for si, s in enumerate(steps):
            if s["id"] in ids:
                errs.append(
                    at(
                        (*tp, "steps", si, "id"),
                        f"duplicate step id {s['id']!r} (first at steps[{ids[s['id']]}])",
                    )
                )
            ids.setdefault(s["id"], si)
        outcomes: dict[str, tuple[int, int, dict[str, Any]]] = {}
        for si, s in enumerate(steps):
            for bi, b in enumerate(s.get("branches") or []):
                o = b["outcome"]
                bp = (*tp, "steps", si, "branches", bi)
                if o in ids:
                    errs.append(
                        at(
                            (*bp, "outcome"),
                            f"outcome {o!r} is also a step id; give the outcome its own name",
                        )
                    )
                if o in outcomes:
                    psi, pbi, prev = outcomes[o]
                    for key in ("next", "text"):
                        if b.get(key) != prev.get(key):
                            errs.append(
                                at(
                                    (*bp, key),
                                    f"outcome {o!r} has {key} {b.get(key)!r} here but {prev.get(key)!r} at "
                                    f"steps[{psi}].branches[{pbi}]; an outcome label leads to one place",
                                )
                            )
                else:
                    outcomes[o] = (si, bi, b)
        known = set(ids) | set(outcomes)
        for si, s in enumerate(steps):
            sp = (*tp, "steps", si)
            if s.get("next") is not None and s["next"] not in known:
                errs.append(at((*sp, "next"), f"no step or outcome {s['next']!r} in task {t['name']!r}"))
            for bi, b in enumerate(s.get("branches") or []):
                if b.get("next") is not None and b["next"] not in known:
                    errs.append(
                        at(
                            (*sp, "branches", bi, "next"),
                            f"no step or outcome {b['next']!r} in task {t['name']!r}",
                        )
                    )
            kind = s.get("kind", "action")
            if kind == "query" and "say" in s:
                errs.append(
                    at(
                        (*sp, "say"),
                        "a query step is an API call, not said; use 'label' for its flowchart text",
                    )
                )
            if kind == "query" and "ask" in s:
                errs.append(at((*sp, "ask"), "a query step asks nothing; put 'ask' on the action that asks"))
            if "ask" in s and s["ask"] not in slots:
                errs.append(
                    at(
                        (*sp, "ask"),
                        f"{s['ask']!r} is not an input slot of the task's api; slots: {sorted(slots)}"
                        if api is not None
                        else f"{s['ask']!r}: the task has no 'api' with input slots",
                    )
                )
        if t.get("start") is not None and t["start"] not in ids:
            errs.append(at((*tp, "start"), f"no step {t['start']!r} in task {t['name']!r}"))
        for ci, sc in enumerate(t.get("scenarios") or ()):
            cp = (*tp, "scenarios", ci)
            if sc["id"] in scenario_ids:
                errs.append(
                    at(
                        (*cp, "id"),
                        f"duplicate scenario id {sc['id']!r} (first at {_path_str(scenario_ids[sc['id']])})",
                    )
                )
            scenario_ids.setdefault(sc["id"], cp)
            for k, v in (sc.get("slots") or {}).items():
                if k not in slots:
                    errs.append(
                        at(
                            (*cp, "slots", k),
                            f"{k!r} is not an input slot of task {t['name']!r}; slots: {sorted(slots)}",
                        )
                    )
                    continue
                cats = slots[k].get("categories")
                if cats and v not in cats and str(v) not in map(str, cats):
                    errs.append(at((*cp, "slots", k), f"{v!r} is not one of the slot's categories {cats}"))
    return errs


def _has_text(*texts: Any) -> bool:
    """Whether any of ``texts`` is a non-blank string (a ``{placeholder}`` is spelled out as its name)."""
    return any(isinstance(t, str) and t.strip() for t in texts)


def step_text_problem(task: str, node: str, kind: str = "file") -> str:
    """The problem of an action step that has no text to recognise it by (what ``workflow validate``
    reports and what the detectors' fit refuses, in the same words).

    Args:
        task: The task's name.
        node: The step's id.
        kind: ``"file"`` (a workflow file: the fields to add) or ``"star"`` (a STAR task: where its
            texts come from).

    Returns:
        str: One line naming the task, the step and the fields that would give it a text.
    """
    if kind == "star":
        return (
            f"task {task!r}, node {node!r}: no text to recognise the step by (STAR: responses.json[{node!r}], "
            f"replies[{node!r}] and the intent {node!r} of wizard_nlu_training_data.md are empty; a workflow "
            "file: give the step a `say`, `label` or `alternatives`)"
        )
    return (
        f"task {task!r}, step {node!r}: no text to recognise the step by: give it a `say`, `label` or "
        "`alternatives` (the detectors and the guard cannot fit a step they cannot recognise), or make it "
        "`kind: query` if it is an API call"
    )


def step_text_errors(data: dict[str, Any], path: Path, lines: dict[tuple, int]) -> list[str]:
    """The action steps of a schema-valid workflow file that have no ``say``, ``label`` or
    ``alternatives``, each at its ``file:line`` (a :data:`FileCheck`).

    Such a file opens (a generation backend that writes its own turns can use it), but the fit of
    the detectors and the guard refuses it (:func:`textless_steps`, which they call): ``workflow
    validate`` runs this check so that a file it passes is one they fit.

    Args:
        data: The parsed file.
        path: The file.
        lines: The line of every value (:func:`load_yaml_lines`).

    Returns:
        list[str]: One ``file:line: field: problem`` per step without text.
    """
    at = _Where(path, lines)
    errs = []
    for ti, t in enumerate(data.get("tasks") or ()):
        for si, s in enumerate(t.get("steps") or ()):
            if s.get("kind", "action") == "action" and not _has_text(
                s.get("say"), s.get("label"), *(s.get("alternatives") or ())
            ):
                errs.append(
                    at(("tasks", ti, "steps", si, "id"), step_text_problem(t["name"], s["id"], "file"))
                )
    return errs


def textless_steps(task: Any) -> list[str]:
    """The action steps of a built task (a workflow file's or STAR's) with no text at all: no template,
    reply label or NLU phrasing that is not blank. The check a fit runs (``node_texts``) and
    ``workflow validate`` runs on the file (:func:`step_text_problem`).

    Args:
        task: A task with ``kinds``, ``template(node)``, ``replies`` and ``nlu``.

    Returns:
        list[str]: The steps without text, in the task's order.
    """
    return [
        n
        for n, k in task.kinds.items()
        if k == "action" and not _has_text(task.template(n), task.replies.get(n), *(task.nlu.get(n) or ()))
    ]


def workflow_files(folder: str | os.PathLike) -> list[Path]:
    """The workflow files of a folder: its ``*.yaml`` and ``*.yml`` files (not sub-folders), sorted by name.

    Args:
        folder: A folder.

    Returns:
        list[Path]: The files, sorted by name (empty when there are none).
    """
    folder = Path(folder)
    return sorted(
        (p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in (".yaml", ".yml")),
        key=lambda p: p.name,
    )


def read_workflows(
    path: str | os.PathLike, checks: Sequence[FileCheck] = ()
) -> tuple[list[tuple[Path, Any, dict[tuple, int]]], list[str]]:
    """Read and check a workflow file, or every workflow file of a folder (one source).

    A folder's files are checked one by one, then together: task names and scenario ids are unique
    across the folder, and a knowledge-base table that two files define is defined alike.
    :func:`dialfork_dataset.workflow.files.read_workflows` adds the checks that build the tasks (a
    ``requires:`` slot that no step collects).

    Args:
        path: A workflow file or a folder of them.
        checks: Further checks of each schema-valid file, run with the reference checks
            (``(data, file, lines) -> problems``).

    Returns:
        tuple: ``([(file, data, lines), ...], problems)``; the problems of every file, each as
        ``file:line: field: problem`` (empty when all are valid).
    """
    p = Path(path)
    if not p.is_dir():
        data, lines, errs = _read_checked(p, checks)
        return [(p, data, lines)], errs
    files = workflow_files(p)
    if not files:
        return [], [
            f"{p}: no workflow files (*.yaml, *.yml) in this folder; give a workflow file or a folder "
            "that holds some"
        ]
    read = [(f, *_read_checked(f, checks)) for f in files]
    errors = [e for _, _, _, errs in read for e in errs]
    loaded = [(f, data, lines) for f, data, lines, _ in read]
    if not errors:
        errors = _cross_file_errors(loaded)
    return loaded, errors


def _cross_file_errors(loaded: list[tuple[Path, Any, dict[tuple, int]]]) -> list[str]:
    """Task names and scenario ids unique across the files; shared KB tables alike."""
    errs: list[str] = []
    tasks: dict[str, str] = {}
    scenarios: dict[str, str] = {}
    tables: dict[str, tuple[str, Any]] = {}
    for f, data, lines in loaded:
        at = _Where(f, lines)
        for name, table in (data.get("kb") or {}).items():
            if name in tables and tables[name][1] != table:
                errs.append(
                    at(("kb", name), f"table {name!r} is also defined, differently, in {tables[name][0]}")
                )
            tables.setdefault(name, (str(f), table))
        for ti, t in enumerate(data["tasks"]):
            if t["name"] in tasks:
                errs.append(
                    at(
                        ("tasks", ti, "name"),
                        f"duplicate task name {t['name']!r} (also in {tasks[t['name']]})",
                    )
                )
            tasks.setdefault(t["name"], str(f))
            for ci, sc in enumerate(t.get("scenarios") or ()):
                if sc["id"] in scenarios and scenarios[sc["id"]] != str(f):
                    errs.append(
                        at(
                            ("tasks", ti, "scenarios", ci, "id"),
                            f"duplicate scenario id {sc['id']!r} (also in {scenarios[sc['id']]})",
                        )
                    )
                scenarios.setdefault(sc["id"], str(f))
    return errs


def validate_workflow(path: str | os.PathLike, checks: Sequence[FileCheck] = ()) -> list[str]:
    """Every problem of a workflow file, or of a folder of them, as ``file:line: field: problem``
    ([] when valid).

    Problems are reported, never raised: an unreadable or malformed file gives its YAML problems;
    a file that breaks the JSON Schema gives the schema problems only (references are checked on a
    well-formed file). A folder's files are all checked before anything is reported
    (:func:`read_workflows`).

    Args:
        path: The workflow file, or a folder of workflow files (``*.yaml``, ``*.yml``).
        checks: Further checks of each schema-valid file (:func:`read_workflows`).

    Returns:
        list[str]: The problems; empty when the file (every file) is valid.
    """
    return read_workflows(path, checks)[1]


def _read_checked(p: Path, checks: Sequence[FileCheck] = ()) -> tuple[Any, dict[tuple, int], list[str]]:
    try:
        data, lines = load_yaml_lines(p)
    except WorkflowError as e:
        return None, {}, e.errors
    at = _Where(p, lines)
    errs = _schema_errors(data, at)
    if errs:  # references are checked on a well-formed file only
        return data, lines, errs
    return data, lines, _semantic_errors(data, at) + [e for check in checks for e in check(data, p, lines)]


__all__ = [
    "FORMAT",
    "MAX_BYTES",
    "MAX_NODES",
    "SCHEMA_PATH",
    "WorkflowError",
    "load_yaml_lines",
    "read_workflows",
    "step_text_errors",
    "step_text_problem",
    "textless_steps",
    "validate_workflow",
    "workflow_files",
    "workflow_schema",
]
