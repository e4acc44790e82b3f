"""``python -m dialfork_metrics.audit.demo``: audit the faithful and the derailed fake agents side by
side (the last step of ``make demo``; see docs/audit.md). Writes ``OUT/<kind>/`` (dialogues and
report of each agent), ``OUT/comparison.md`` and ``OUT/comparison.json``, and prints the comparison.
A row whose agents' 95% intervals overlap is marked as not a ranking (``ranks`` column)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .report import COLUMNS, AuditReport, cell, flowkl_notes

BETTER = {
    "completion": "higher",
    "coverage": "higher",
    "skipped": "lower",
    "repeated": "lower",
    "out_of_order": "lower",
    "alarm_rate": "lower",
    "flowkl": "lower",
    "flowscore": "lower",
}


RANKS = "yes: intervals disjoint"
NOT_A_RANKING = "no: intervals overlap"
#: Scores shown to explain an agent, never to rank agents: a repeat may be the user's doing (a
#: question asked again because the reply did not answer it, a booking declined and redone), which
#: the step mapping can only approximate (docs/audit.md).
DIAGNOSTIC = {"repeated": "no: diagnostic, not a ranking"}
RANKING_LEGEND = (
    'ranks: where the agents\' 95% intervals overlap ("no: intervals overlap"), the row is not a '
    "ranking: the data do not tell which agent is better on that score, whichever value is lower or "
    'higher; "no: diagnostic, not a ranking": a figure that explains an agent (repeated steps: a '
    "question asked again after a reply that did not answer it, or the workflow's own loops, are not "
    'counted, but what is left may still be the user\'s doing), never a ranking; "-": the score has no '
    "interval."
)


def intervals_overlap(intervals: Sequence[Sequence[float] | None]) -> bool | None:
    """Whether any two of the agents' intervals on one score overlap (closed intervals: touching
    ends overlap).

    Args:
        intervals: One ``[low, high]`` (or None: no interval) per agent.

    Returns:
        True when some two intervals overlap, False when all are pairwise disjoint, None when fewer
        than two agents have an interval (nothing to compare).

    Raises:
        ValueError: An interval is not two numbers with low <= high.
    """
    known = []
    for i, ci in enumerate(intervals):
        if ci is None:
            continue
        if len(ci) != 2 or not ci[0] <= ci[1]:
            raise ValueError(f"interval {i}: expected [low, high] with low <= high, got {list(ci)!r}")
        known.append((float(ci[0]), float(ci[1])))
    if len(known) < 2:
        return None
    return any(a[0] <= b[1] and b[0] <= a[1] for j, a in enumerate(known) for b in known[j + 1 :])


def comparison_rows(reports: Mapping[str, AuditReport]) -> list[dict[str, Any]]:
    """The comparison of the audited agents: one row per (task, score).

    Args:
        reports: Agent name -> its :class:`AuditReport` (same tasks, the first report's order).

    Returns:
        One dict per row: ``task``, ``score`` (the column key), ``label``, ``better`` ("higher" or
        "lower"), ``values`` (agent -> the figure, None without data), ``intervals`` (agent ->
        ``[low, high]`` or None), ``cells`` (agent -> the table cell) and ``ranks``: None when the
        score has no intervals to compare, False when two agents' intervals overlap (the row is
        not a ranking), True when all are disjoint; a diagnostic score (:data:`DIAGNOSTIC`) is False
        whatever its intervals, with ``diagnostic`` True.
    """
    names = list(reports)
    rows = []
    for task in [t["task"] for t in next(iter(reports.values())).tasks]:
        for key, label in COLUMNS:
            if key not in BETTER:
                continue
            figs = {n: reports[n].task(task) for n in names}
            cis = {
                n: (list(f[f"{key}_ci"]) if f.get(f"{key}_ci") and f.get(key) is not None else None)
                for n, f in figs.items()
            }
            overlap = intervals_overlap(list(cis.values()))
            rows.append(
                {
                    "task": task,
                    "score": key,
                    "label": label,
                    "better": BETTER[key],
                    "values": {n: f.get(key) for n, f in figs.items()},
                    "intervals": cis,
                    "cells": {n: cell(f, key) for n, f in figs.items()},
                    "ranks": False if key in DIAGNOSTIC else None if overlap is None else not overlap,
                    "diagnostic": key in DIAGNOSTIC,
                }
            )
    return rows


def side_by_side(reports: Mapping[str, AuditReport]) -> str:
    """One Markdown table: a row per (task, score), a column per agent, and a ``ranks`` column
    that marks the rows whose intervals overlap as not a ranking (:func:`comparison_rows`).

    Args:
        reports: Agent name -> its :class:`AuditReport`.

    Returns:
        The table, the ranking legend and the FlowKL notes, as Markdown.
    """
    names = list(reports)
    lines = [
        "| task | score | better | " + " | ".join(names) + " | ranks |",
        "| --- | --- | --- |" + " --- |" * (len(names) + 1),
    ]
    for r in comparison_rows(reports):
        ranks = (
            DIAGNOSTIC[r["score"]]
            if r.get("diagnostic")
            else "-"
            if r["ranks"] is None
            else RANKS
            if r["ranks"]
            else NOT_A_RANKING
        )
        lines.append(
            f"| {r['task']} | {r['label']} | {r['better']} | "
            + " | ".join(r["cells"][n] for n in names)
            + f" | {ranks} |"
        )
    notes = [f"{n}: {line}" for n in names for line in flowkl_notes(reports[n].tasks)[1:]]
    return "\n".join(lines + ["", RANKING_LEGEND, "", flowkl_notes([])[0], *notes]) + "\n"


def comparison_json(reports: Mapping[str, AuditReport]) -> str:
    """The comparison as JSON: ``{"agents": [...], "legend": ..., "rows": comparison_rows(...)}``.

    Args:
        reports: Agent name -> its :class:`AuditReport`.

    Returns:
        The JSON text (indented).
    """
    return json.dumps(
        {"agents": list(reports), "legend": RANKING_LEGEND, "rows": comparison_rows(reports)},
        indent=2,
        ensure_ascii=False,
    )


def build_parser() -> argparse.ArgumentParser:
    """The demo's argument parser.

    Returns:
        argparse.ArgumentParser: The parser.
    """
    from dialfork_dataset.console import plain_text

    ap = argparse.ArgumentParser(
        prog="python -m dialfork_metrics.audit.demo", description=plain_text(__doc__.split("\n\n")[0])
    )
    ap.add_argument(
        "--star",
        default=os.environ.get("DIALFORK_STAR_DIR"),
        help="STAR folder (default: $DIALFORK_STAR_DIR)",
    )
    ap.add_argument(
        "--reference", required=True, help="corpus folder or exported Hub folder with conformant dialogues"
    )
    ap.add_argument("--tasks", required=True, help="comma-separated task names")
    ap.add_argument(
        "--per-task",
        type=int,
        default=6,
        help="scenarios audited per task and agent (default 6; FlowKL needs at least 5)",
    )
    ap.add_argument("--out", required=True, help="output folder (one sub-folder per agent, comparison.md)")
    return ap


def main(argv: list[str] | None = None) -> int:
    """Audit the faithful and the derailed fake agent and write their comparison.

    Writes each agent's report under ``--out/faithful`` and ``--out/derailed``, then
    ``comparison.md`` and ``comparison.json``, and prints the table.

    Args:
        argv: The arguments (see :func:`build_parser`); None reads ``sys.argv``.

    Returns:
        0 on success; 2 when the reference is unusable or the audit fails (the error is printed).

    Raises:
        AuditError: Never escapes: an unusable reference is raised as one inside and caught with
            the audit's own errors, to be printed.
    """
    a = build_parser().parse_args(argv)
    from dialfork_dataset.jsonl import write_text_atomic

    from .core import audit_agent
    from .fakes import serve_fake_agent
    from .store import AuditError

    tasks = [t for t in a.tasks.split(",") if t]
    reports = {}
    try:
        from dialfork_dataset.hub import DataSourceError, resolve_data

        try:
            resolve_data(a.reference, accept=("corpus", "layout"), option="--reference")
        except DataSourceError as e:
            raise AuditError(str(e)) from None
        for kind in ("faithful", "derailed"):
            with serve_fake_agent(kind, star=a.star) as fa:
                reports[kind] = audit_agent(
                    fa.url,
                    fa.model,
                    tasks,
                    a.reference,
                    star=a.star,
                    per_task=a.per_task,
                    out=Path(a.out) / kind,
                    show_progress=False,
                )
    except AuditError as e:
        print("error: " + " ".join(str(e).split()), file=sys.stderr)
        return 2
    table = side_by_side(reports)
    write_text_atomic(
        Path(a.out) / "comparison.md", "# Agent audit: faithful vs derailed fake agent\n\n" + table
    )
    write_text_atomic(Path(a.out) / "comparison.json", comparison_json(reports))
    print(table)
    from .__main__ import FLOWKL_MIN_AUDITED, flowkl_too_few

    if a.per_task < FLOWKL_MIN_AUDITED:  # the table shows FlowKL n/a: say why
        print(flowkl_too_few(a.per_task))
    print(f"audit reports: {a.out}/faithful/report.html, {a.out}/derailed/report.html")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
