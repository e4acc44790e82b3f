"""Reports of the benchmark: Markdown tables in the paper's layout, CSV, JSON and PNG plots.

Every file is written atomically (:mod:`dialfork_dataset.atomic`), so an interrupted run never
leaves a half-written report. Modules: :mod:`.markdown` (the tables), :mod:`.figures` (the PNG
plots), :mod:`.writer` (:func:`write_reports`, which writes them all); every name is re-exported here.
"""

from __future__ import annotations

from .figures import (
    plot_distance_by_k_panels,
    plot_task3_summary,
    plot_task3_tradeoff,
    plot_tau_bars_ci,
    plot_weight_sweep,
    write_figures,
)
from .markdown import (
    PAPER_STREAMING_COVERAGE,
    PAPER_STREAMING_FALSE_ALARMS,
    control_beats_sentence,
    markdown_table,
    report_markdown,
    task1_comparisons_markdown,
    task1_markdown,
    task1_protocols_markdown,
    task2_markdown,
    task2_protocols_markdown,
    task3_ablation_markdown,
    task3_all_turns_markdown,
    task3_markdown,
    task3_operating_markdown,
    weight_sweep_markdown,
)
from .writer import write_reports

__all__ = [
    "PAPER_STREAMING_COVERAGE",
    "PAPER_STREAMING_FALSE_ALARMS",
    "control_beats_sentence",
    "markdown_table",
    "plot_distance_by_k_panels",
    "plot_task3_summary",
    "plot_task3_tradeoff",
    "plot_tau_bars_ci",
    "plot_weight_sweep",
    "report_markdown",
    "task1_comparisons_markdown",
    "task1_markdown",
    "task1_protocols_markdown",
    "task2_markdown",
    "task2_protocols_markdown",
    "task3_ablation_markdown",
    "task3_all_turns_markdown",
    "task3_markdown",
    "task3_operating_markdown",
    "weight_sweep_markdown",
    "write_figures",
    "write_reports",
]
