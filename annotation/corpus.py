"""Inputs of the annotation app: the corpus folder (generator output) and the workflows of its tasks
(a :class:`~dialfork_dataset.sources.WorkflowSource`: a STAR copy or a workflow file)."""

from __future__ import annotations

import json
import logging
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from dialfork_dataset.jsonl import read_jsonl
from dialfork_dataset.records import RecordError, normalize_record, record_errors

logger = logging.getLogger(__name__)


def iter_corpus_files(corpus_dir: str | Path) -> list[Path]:
    """The record files of a corpus folder: those listed in the generator's ``manifest.json``
    (``files``) when there is one, else every ``*.jsonl`` / ``*.jsonl.gz`` directly in the folder
    (or, if none, below it).

    Args:
        corpus_dir: The corpus folder (the generator's ``--out`` folder).

    Returns:
        The record files, sorted by name. A manifest whose ``files`` is not a non-empty object
        (or that is not valid JSON) is ignored.

    Raises:
        FileNotFoundError: ``corpus_dir`` is not a folder, the manifest lists a file that is
            missing, or no record file is found.
    """
    root = Path(corpus_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"corpus folder {root} not found (pass the generator's --out folder)")
    manifest = root / "manifest.json"
    if manifest.is_file():
        try:
            listed = json.loads(manifest.read_text(encoding="utf-8")).get("files")
        except (json.JSONDecodeError, AttributeError):
            listed = None
        if isinstance(listed, dict) and listed:
            files = [root / name for name in sorted(listed)]
            missing = [str(f) for f in files if not f.is_file()]
            if missing:
                raise FileNotFoundError(
                    f"{manifest} lists record files that are missing: {', '.join(missing)}"
                )
            return files

    def is_records(p: Path) -> bool:
        return p.is_file() and (p.name.endswith(".jsonl") or p.name.endswith(".jsonl.gz"))

    files = sorted(p for p in root.iterdir() if is_records(p)) or sorted(
        p for p in root.rglob("*") if is_records(p)
    )
    if not files:
        raise FileNotFoundError(f"corpus folder {root} holds no *.jsonl record files")
    return files


def load_corpus(corpus_dir: str | Path) -> list[dict[str, Any]]:
    """Every record of a corpus folder, validated (SPEC section 4).

    Collects every invalid record and duplicate id of every file (``file:line: dialogue_id=...:
    reason``) before raising one :class:`RecordError`.

    Args:
        corpus_dir: The generator's output folder: the files its ``manifest.json`` lists, else
            every ``*.jsonl`` / ``*.jsonl.gz`` directly in it (or, if none, below it).

    Returns:
        The records, normalized (``dialfork_dataset.records.normalize_record``), in file and
        line order.

    Raises:
        FileNotFoundError: The folder does not exist, holds no record file, or its manifest
            lists a missing file.
        JsonlError: A record file cannot be read or parsed as JSON Lines.
        RecordError: A record is invalid or a ``dialogue_id`` repeats (every problem listed).
    """
    errs: list[str] = []
    out: list[dict[str, Any]] = []
    seen: dict[str, str] = {}
    for path in iter_corpus_files(corpus_dir):
        rows = read_jsonl(path)
        for i, r in enumerate(rows, 1):
            bad = record_errors(r)
            did = r.get("dialogue_id") if isinstance(r, dict) else None
            if bad:
                errs.extend(f"{path}:{i}: dialogue_id={did!r}: {e}" for e in bad)
                continue
            if did in seen:
                errs.append(f"{path}:{i}: dialogue_id={did!r}: duplicate id (first in {seen[did]})")
                continue
            seen[did] = f"{path}:{i}"
            out.append(normalize_record(r))
    RecordError.raise_if(errs, f"corpus {corpus_dir}")
    logger.info("corpus %s: %d records", corpus_dir, len(out))
    return out


# --------------------------------------------------------------------------------------------
# The workflow of a task (any WorkflowSource), as shown to annotators
# --------------------------------------------------------------------------------------------


@dataclass
class StepView:
    """One line of the workflow panel: a numbered step (``kind`` "step", with its STAR response
    template shown on demand), a branch ("branch": "If the outcome is ..."), or a reference to an
    earlier step ("goto": "Go back to step N").

    Attributes:
        kind: ``"step"``, ``"branch"`` or ``"goto"``.
        text: The line's text.
        number: The step's number as shown (e.g. ``"3"``); empty for branches and gotos.
        template: The step's response template, or None when it has none (and for branches and
            gotos).
        children: The lines nested under it: a step's branches, a branch's steps.
    """

    kind: str
    text: str
    number: str = ""
    template: str | None = None
    children: list[StepView] = field(default_factory=list)


@dataclass
class WorkflowView:
    """The annotator's view of one task's workflow (built by :func:`task_workflow`).

    Attributes:
        task: The task's name.
        goal: One-line goal (the task's description, else "Help the user with TASK.").
        steps: The top-level lines of the workflow (:class:`StepView` trees).
        flowchart: Path of the task's flowchart image, or None when it has none.
    """

    task: str
    goal: str
    steps: list[StepView]
    flowchart: Path | None

    def plain_text(self) -> str:
        """The workflow as plain text: the goal, then one line per step, branch and goto, indented by
        two spaces per nesting level (steps as ``"N. text"``).

        Returns:
            The lines joined by newlines.
        """
        lines = [self.goal]

        def walk(steps: list[StepView], depth: int) -> None:
            for s in steps:
                lines.append("  " * depth + (f"{s.number}. {s.text}" if s.kind == "step" else s.text))
                walk(s.children, depth + 1)

        walk(self.steps, 0)
        return "\n".join(lines)


def _step_views(steps: Any) -> list[StepView]:
    out = []
    for st in steps or []:
        if getattr(st, "goto", None) is not None:
            out.append(StepView("goto", f"{st.text}."))
            continue
        branches = [
            StepView(
                "branch",
                f'If the outcome is "{" ".join(str(b.text or b.label).split())}":',
                children=_step_views(b.steps) or [StepView("goto", "(no further step)")],
            )
            for b in getattr(st, "branches", None) or []
        ]
        out.append(StepView("step", str(st.text), str(st.number), st.template or None, branches))
    return out


def _stamp(spec: str) -> int:
    """What changes when a source's files change: its kind's ``stamp`` (a workflow file's mtime, the
    latest of a folder of workflow files, a STAR copy's ``scenarios.jsonl``; see
    :class:`dialfork_dataset.sources.SourceKind`)."""
    from dialfork_dataset import sources as source_kinds
    from dialfork_dataset.sources import parse_source_spec

    kind, path = parse_source_spec(spec)
    return source_kinds.get(kind).stamp(path)


@lru_cache(maxsize=4)
def _open_source(spec: str, stamp: int) -> Any:
    from dialfork_dataset.sources import open_source

    return open_source(spec)


def workflow_source(spec: str | Path) -> Any:
    """The :class:`~dialfork_dataset.sources.WorkflowSource` named by ``spec`` (``star:PATH``,
    ``workflow:PATH``, a STAR folder or a workflow file; :func:`dialfork_dataset.sources.open_source`),
    read once and kept while its files do not change.

    Args:
        spec: The source spec (a string or a path).

    Returns:
        The opened source (``StarCorpus`` or ``WorkflowCorpus``), cached per spec and file
        modification time (at most four kept).

    Raises:
        SourceError: The spec has a kind prefix but no path (from ``parse_source_spec``).
    """
    spec = str(spec)
    return _open_source(spec, _stamp(spec))


def _description(wizard_task: str) -> str:
    return " ".join(re.sub(r"\s*\([^)]*https?://[^)]*\)", "", str(wizard_task)).split())


def task_descriptions(source: str | Path | None) -> dict[str, str]:
    """One-line description of every task of a workflow source: the most common ``wizard_task`` of
    its single-task scenarios (the system role's instruction, e.g. "Help the user reserve a hotel
    room."). Empty when ``source`` is ``None`` or has no scenarios (a STAR copy with tasks only).

    Args:
        source: A workflow source spec (see :func:`workflow_source`), or None.

    Returns:
        Task name -> description (URLs in parentheses removed, whitespace collapsed), sorted by
        task. A source that cannot be read gives ``{}`` with a warning logged, not an error.
    """
    if source is None:
        return {}
    from dialfork_dataset.errors import CollectedErrors

    try:
        scenarios = workflow_source(source).scenarios
    except (CollectedErrors, FileNotFoundError) as e:
        logger.warning("task descriptions unavailable from %s: %s", source, str(e).splitlines()[0])
        return {}
    counts: dict[str, Counter[str]] = {}
    for s in scenarios:
        if s.single_task and s.wizard_task:
            counts.setdefault(s.tasks[0], Counter())[_description(s.wizard_task)] += 1
    return {t: c.most_common(1)[0][0] for t, c in sorted(counts.items())}


@lru_cache(maxsize=64)
def _task_workflow(spec: str, stamp: int, task: str) -> WorkflowView:
    source = _open_source(spec, stamp)
    t = source.task(task)
    steps = _step_views(t.steps())
    goal = task_descriptions(spec).get(task) or f"Help the user with {task.replace('_', ' ')}."
    flow = getattr(t, "flowchart", None)
    flow = Path(flow) if flow else None
    if flow is not None and not flow.is_file():
        flow = None
    return WorkflowView(task, goal, steps, flow)


def task_workflow(source: str | Path, task: str) -> WorkflowView:
    """The annotator's view of a task of a workflow source (a STAR copy or a workflow file, see
    :func:`workflow_source`): one-line goal, numbered steps with nested branches and their response
    templates (:meth:`~dialfork_dataset.sources.WorkflowTask.steps`), the flowchart if any.

    Args:
        source: A workflow source spec (see :func:`workflow_source`).
        task: The task's name in that source.

    Returns:
        A ``WorkflowView`` with ``task``, ``goal`` (the task's description, else "Help the user
        with TASK."), ``steps`` (:class:`StepView` trees) and ``flowchart`` (the path of an
        existing flowchart image, or None). Cached while the source's files do not change.

    Raises:
        StarError: ``task`` is not a task of a STAR copy (or the copy cannot be read).
        WorkflowError: ``task`` is not a task of a workflow file (or the file is invalid).
    """
    spec = str(source)
    return _task_workflow(spec, _stamp(spec), task)


def system_turn_numbers(turns: list[dict[str, str]]) -> Iterator[tuple[dict[str, str], int | None]]:
    """Pairs (turn, system-turn index or None for user turns).

    Args:
        turns: The dialogue's turns, each with a ``speaker`` (``"system"`` or ``"user"``).

    Yields:
        ``(turn, n)``: the turn and its 1-based number among the system turns, or None for a user
        turn.
    """
    n = 0
    for t in turns:
        if t["speaker"] == "system":
            n += 1
            yield t, n
        else:
            yield t, None
