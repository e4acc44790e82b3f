"""STAR tasks written as a workflow file, and the ``workflow`` CLI (``python -m dialfork_dataset workflow
{validate,steps,from-star}``). See :mod:`dialfork_dataset.workflow.files` and ``docs/workflows.md``."""

from __future__ import annotations

import os
import sys
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .files import FORMAT, WorkflowCorpus, validate_workflow
from .roles import derive_roles

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
    your own, and the test that the two readers agree. ``corpus``: any
    :class:`~dialfork_dataset.sources.WorkflowSource` (a STAR copy, usually).

    Args:
        corpus: The workflow source to read the tasks from.
        tasks: The task names to write, in order.
        max_scenarios: Keep at most this many scenarios per task; None (or 0) keeps all.

    Returns:
        dict[str, Any]: ``{"format", "name" ("star-" + the task names, at most 60 characters of
        them), "kb" (only when a task's KB table has fields), "tasks"}``; each task has ``name``,
        ``domain``, ``length_budget`` (the source's, at least 4), ``instructions`` (if any),
        ``start``, ``api`` (if any), ``steps`` and ``scenarios``.
    """
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
        task: dict[str, Any] = {
            "name": name,
            "domain": t.domain,
            "length_budget": max(4, int(corpus.length_budget(name))),
        }
        if t.instructions:
            task["instructions"] = t.instructions
        task["start"] = t.start_node
        if t.api is not None:
            api: dict[str, Any] = {
                "function": t.function,
                "inputs": [_file_field(f) for f in t.api.inputs],
                "outputs": [_file_field(f) for f in t.api.outputs if isinstance(f, dict) and "Name" in f],
                "required": list(t.api.required),
            }
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
        task["scenarios"] = [
            {
                "id": s.scenario_id,
                "goal": " ".join(s.user_task.split()) or "(no goal)",
                "happy": bool(s.happy),
            }
            for s in scs
        ]
        out_tasks.append(task)
    data: dict[str, Any] = {"format": FORMAT, "name": "star-" + "-".join(names)[:60]}
    if kb:
        data["kb"] = kb
    data["tasks"] = out_tasks
    return data


def dump_workflow(data: dict[str, Any], path: str | os.PathLike) -> None:
    """Write a workflow dict as YAML (atomically).

    Args:
        data: A workflow dict (e.g. from :func:`workflow_from_star`); keys keep their order.
        path: The YAML file to write (replaced atomically if it exists).
    """
    import yaml

    from ..atomic import write_text_atomic

    write_text_atomic(path, yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=120))


# --------------------------------------------------------------------------------------------- CLI


def add_cli(sub: Any) -> None:
    """Add ``workflow {validate,steps,from-star}`` to an argparse subparsers object.

    Args:
        sub: The object returned by ``ArgumentParser.add_subparsers()``; each new subcommand sets
            ``func`` (the handler, returning an exit status).
    """
    w = sub.add_parser(
        "workflow", help="workflow files: validate, show a task's steps, write STAR tasks as one"
    )
    wsub = w.add_subparsers(dest="workflow_cmd", required=True)
    p = wsub.add_parser(
        "validate",
        help="check a workflow file, or a folder of them (every file, then the files "
        "together); every problem as file:line: field: problem; warnings (a task for watching "
        "only, a source with one task) leave it valid",
    )
    p.add_argument("path", help="a workflow file (.yaml/.yml) or a folder of workflow files")
    p.set_defaults(func=_cmd_validate)
    p = wsub.add_parser("steps", help="print a task's numbered workflow as generation prompts show it")
    p.add_argument("path", help="a workflow file or a folder of workflow files")
    p.add_argument("task")
    p.add_argument("--no-templates", action="store_true")
    p.set_defaults(func=_cmd_steps)
    p = wsub.add_parser(
        "from-star", help="write STAR tasks as a workflow file (a starting point for your own)"
    )
    p.add_argument("tasks", help="comma-separated STAR task names")
    p.add_argument("out", help="YAML file to write")
    p.add_argument("--star", default=None, help="STAR folder (default: $DIALFORK_STAR_DIR)")
    p.add_argument("--max-scenarios", type=int, default=None)
    p.set_defaults(func=_cmd_from_star)


def validate_warnings(corpus: WorkflowCorpus, path: str | os.PathLike[str] | None = None) -> list[str]:
    """What ``workflow validate`` warns about a valid source besides underivable roles.

    A task for watching only (no ``scenarios`` or no ``length_budget``: the detectors, the guard and
    the tracks watch it, generation and the agent audit need both; the lines of
    :meth:`~dialfork_dataset.workflow.files.WorkflowCorpus.notes`) and a source with one task (a WIC fork
    borrows another task's workflow, so generation makes none). Neither makes the source invalid.

    Args:
        corpus: The opened source.
        path: How the source was named (the one-task line starts with it); default: ``corpus.path``.

    Returns:
        list[str]: ``"file: warning: ..."`` lines: one per note of the source (a task for watching
        only, in file order), then the one-task line when it applies; empty when there is nothing
        to say.
    """
    files = sorted({f"{t.source_file}: " for t in corpus.tasks.values()}, key=len, reverse=True)
    out = []
    for note in corpus.notes():  # "file: task ...": the file first, as the other warnings
        f = next((f for f in files if note.startswith(f)), None)
        out.append(f"{f}warning: {note.removeprefix(f)}" if f else f"warning: {note}")
    if len(corpus.tasks) == 1:
        out.append(
            f"{corpus.path if path is None else path}: warning: a source with one task: generation makes "
            "no fork that needs another task (WIC)"
        )
    return out


def _cmd_validate(a: Any) -> int:
    errors = validate_workflow(a.path)
    if not errors:  # what the detectors' and the guard's fit refuse: a step without text
        from .check import step_text_errors
        from .check import validate_workflow as check_file

        errors = check_file(a.path, [step_text_errors])
    if errors:
        for e in errors:
            print(e, file=sys.stderr)
        print(f"error: {len(errors)} problem(s) in {a.path}", file=sys.stderr)
        return 2
    c = WorkflowCorpus(a.path)
    for t in c.tasks.values():  # roles that cannot be derived: a warning, the file stays valid
        for problem in derive_roles(t).problems:
            print(f"{t.source_file}: warning: {problem}", file=sys.stderr)
    for w in validate_warnings(c, a.path):
        print(w, file=sys.stderr)
    files = f"{len(c.files)} file(s), " if Path(a.path).is_dir() else ""
    print(
        f"{a.path}: valid ({files}{len(c.tasks)} task(s), {len(c.domains)} domain(s), {len(c.scenarios)} scenario(s))"
    )
    return 0


def _cmd_steps(a: Any) -> int:
    print(WorkflowCorpus(a.path).task(a.task).render_steps(with_templates=not a.no_templates))
    return 0


def _cmd_from_star(a: Any) -> int:
    from ..sources import open_source
    from ..star import resolve_star

    corpus = open_source(f"star:{resolve_star(a.star)}")
    data = workflow_from_star(corpus, [t.strip() for t in a.tasks.split(",") if t.strip()], a.max_scenarios)
    dump_workflow(data, a.out)
    print(f"{a.out}: {len(data['tasks'])} task(s)")
    return 0


__all__ = ["add_cli", "dump_workflow", "validate_warnings", "workflow_from_star"]
