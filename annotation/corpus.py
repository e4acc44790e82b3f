"""Inputs of the annotation app: the corpus folder (generator output) and the STAR workflows."""

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
    (or, if none, below it)."""
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
                raise FileNotFoundError(f"{manifest} lists record files that are missing: {', '.join(missing)}")
            return files

    def is_records(p: Path) -> bool:
        return p.is_file() and (p.name.endswith(".jsonl") or p.name.endswith(".jsonl.gz"))

    files = sorted(p for p in root.iterdir() if is_records(p)) or sorted(p for p in root.rglob("*") if is_records(p))
    if not files:
        raise FileNotFoundError(f"corpus folder {root} holds no *.jsonl record files")
    return files


def load_corpus(corpus_dir: str | Path) -> list[dict[str, Any]]:
    """Every record of a corpus folder, validated (SPEC section 4).

    Collects every invalid record and duplicate id of every file (``file:line: dialogue_id=...:
    reason``) before raising one :class:`RecordError`.
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
    if errs:
        raise RecordError(f"{len(errs)} invalid record(s) in corpus {corpus_dir}:\n" + "\n".join(errs), errs)
    logger.info("corpus %s: %d records", corpus_dir, len(out))
    return out


# --------------------------------------------------------------------------------------------
# STAR workflow, as shown to annotators
# --------------------------------------------------------------------------------------------


@dataclass
class StepView:
    """One line of the workflow panel: a numbered step (``kind`` "step", with its STAR response
    template shown on demand), a branch ("branch": "If the outcome is ..."), or a reference to an
    earlier step ("goto": "Go back to step N")."""

    kind: str
    text: str
    number: str = ""
    template: str | None = None
    children: list[StepView] = field(default_factory=list)


@dataclass
class WorkflowView:
    task: str
    goal: str
    steps: list[StepView]
    flowchart: Path | None

    def plain_text(self) -> str:
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
        branches = [StepView("branch", f"If the outcome is \"{' '.join(str(b.text or b.label).split())}\":",
                             children=_step_views(b.steps) or [StepView("goto", "(no further step)")])
                    for b in getattr(st, "branches", None) or []]
        out.append(StepView("step", str(st.text), str(st.number), st.template or None, branches))
    return out


@lru_cache(maxsize=8)
def _descriptions(path: str, mtime_ns: int) -> dict[str, str]:
    counts: dict[str, Counter[str]] = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            s = json.loads(line)
            tasks = s.get("tasks") or []
            if len(tasks) == 1 and not s.get("multitask") and s.get("wizard_task"):
                text = re.sub(r"\s*\([^)]*https?://[^)]*\)", "", str(s["wizard_task"]))
                counts.setdefault(tasks[0], Counter())[" ".join(text.split())] += 1
    return {t: c.most_common(1)[0][0] for t, c in sorted(counts.items())}


def task_descriptions(star_dir: str | Path | None) -> dict[str, str]:
    """One-line description of every STAR task: the most common ``wizard_task`` of its
    single-task scenarios (the system role's instruction, e.g. "Help the user reserve a hotel
    room."). Empty when ``star_dir`` is ``None`` or has no ``scenarios.jsonl``."""
    if star_dir is None:
        return {}
    path = Path(star_dir) / "scenarios.jsonl"
    if not path.is_file():
        return {}
    return dict(_descriptions(str(path.resolve()), path.stat().st_mtime_ns))


def _goal_from_scenarios(star_dir: Path, task: str) -> str | None:
    return task_descriptions(star_dir).get(task)


@lru_cache(maxsize=64)
def task_workflow(star_dir: str, task: str) -> WorkflowView:
    """The annotator's view of a STAR task: one-line goal, numbered steps with nested branches
    and their response templates (from ``dialfork_dataset.star.StarCorpus``), the flowchart."""
    from dialfork_dataset.star import StarCorpus

    root = Path(star_dir)
    t = StarCorpus(root).task(task)
    steps = _step_views(t.steps())
    goal = _goal_from_scenarios(root, task) or f"Help the user with {task.replace('_', ' ')}."
    flow = getattr(t, "flowchart", None)
    flow = Path(flow) if flow else None
    if flow is not None and not flow.is_file():
        flow = None
    return WorkflowView(task, goal, steps, flow)


def system_turn_numbers(turns: list[dict[str, str]]) -> Iterator[tuple[dict[str, str], int | None]]:
    """Pairs (turn, system-turn index or None for user turns)."""
    n = 0
    for t in turns:
        if t["speaker"] == "system":
            n += 1
            yield t, n
        else:
            yield t, None
