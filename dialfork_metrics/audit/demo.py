"""``python -m dialfork_metrics.audit.demo``: audit the faithful and the derailed fake agents side by
side (the last step of ``make demo``; see docs/audit.md). Writes ``OUT/<kind>/`` (dialogues and
report of each agent) and ``OUT/comparison.md``, and prints the comparison."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from .report import COLUMNS, AuditReport, cell, flowkl_notes

BETTER = {"completion": "higher", "coverage": "higher", "skipped": "lower", "repeated": "lower",
          "out_of_order": "lower", "alarm_rate": "lower", "flowkl": "lower", "flowscore": "lower"}


def side_by_side(reports: Mapping[str, AuditReport]) -> str:
    """One Markdown table: a row per (task, score), a column per agent."""
    names = list(reports)
    lines = ["| task | score | better | " + " | ".join(names) + " |", "| --- | --- | --- |" + " --- |" * len(names)]
    tasks = [t["task"] for t in next(iter(reports.values())).tasks]
    for task in tasks:
        for key, label in COLUMNS:
            if key not in BETTER:
                continue
            vals = [cell(reports[n].task(task), key) for n in names]
            lines.append(f"| {task} | {label} | {BETTER[key]} | " + " | ".join(vals) + " |")
    notes = [f"{n}: {line}" for n in names for line in flowkl_notes(reports[n].tasks)[1:]]
    return "\n".join(lines + ["", flowkl_notes([])[0], *notes]) + "\n"


def build_parser() -> argparse.ArgumentParser:
    """The demo's argument parser.

    Returns:
        argparse.ArgumentParser: The parser.
    """
    from dialfork_dataset.console import plain_text

    ap = argparse.ArgumentParser(prog="python -m dialfork_metrics.audit.demo",
                                 description=plain_text(__doc__.split("\n\n")[0]))
    ap.add_argument("--star", default=os.environ.get("DIALFORK_STAR_DIR"),
                    help="STAR folder (default: $DIALFORK_STAR_DIR)")
    ap.add_argument("--reference", required=True, help="corpus folder or exported Hub folder with conformant dialogues")
    ap.add_argument("--tasks", required=True, help="comma-separated task names")
    ap.add_argument("--per-task", type=int, default=6,
                    help="scenarios audited per task and agent (default 6; FlowKL needs at least 5)")
    ap.add_argument("--out", required=True, help="output folder (one sub-folder per agent, comparison.md)")
    return ap


def main(argv: list[str] | None = None) -> int:
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
                reports[kind] = audit_agent(fa.url, fa.model, tasks, a.reference, star=a.star, per_task=a.per_task,
                                            out=Path(a.out) / kind, show_progress=False)
    except AuditError as e:
        print("error: " + " ".join(str(e).split()), file=sys.stderr)
        return 2
    table = side_by_side(reports)
    write_text_atomic(Path(a.out) / "comparison.md", "# Agent audit: faithful vs derailed fake agent\n\n" + table)
    print(table)
    print(f"audit reports: {a.out}/faithful/report.html, {a.out}/derailed/report.html")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
