"""``write_reports``: report.md, report.json, the CSVs and the figures of one benchmark run."""

from __future__ import annotations

import csv
import io
import json
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dialfork_dataset import taxonomy
from dialfork_dataset.atomic import write_text_atomic

from .figures import write_figures
from .markdown import report_markdown

logger = logging.getLogger(__name__)


def _csv(rows: Sequence[Mapping[str, Any]], fields: Sequence[str]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(fields), extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: (json.dumps(v) if isinstance(v, list | dict) else v) for k, v in r.items()})
    return buf.getvalue()


def write_reports(
    report: Mapping[str, Any], out: str | os.PathLike, plots: bool = True, graph: Any = None
) -> list[Path]:
    """Write report.md, report.json, CSVs and plots into ``out``; returns the written paths.

    Args:
        report: The report dict of :func:`~dialfork_metrics.bench.run_benchmark`.
        out: The output folder (created if missing); every file is written atomically.
        plots: Also write the PNG figures (:func:`~dialfork_metrics.report.figures.write_figures`)
            and the flow graph.
        graph: ``(task name, FlowGraph or None)`` of the flow graph to export as
            ``flowgraph_<task>.graphml`` and ``.png`` (with ``plots``); None: no graph.

    Returns:
        The paths written: ``report.md`` (which embeds every PNG figure written, with its
        caption), ``report.json``, the CSV files of the tasks present (``task1_units.csv``,
        ``task1_summary.csv``, ``task1_comparisons.csv``, ``task2_units_<encoder>.csv``,
        ``task2_summary.csv``, ``task2_significance.csv``, ``task3.csv``,
        ``task3_all_turns.csv``, ``task3_weight_sweep.csv``; under the cross protocol also the
        ``task1_cross_*`` and ``task2_cross_*`` files, laid out alike), then the figures.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    figures: list[Path] = []
    captions: dict[str, str] = {}
    if plots:  # first, so that report.md embeds what was drawn
        figures += write_figures(report, out, captions=captions)
        if graph is not None and graph[1] is not None:
            name, g = graph
            g.to_graphml(out / f"flowgraph_{name}.graphml")
            g.draw(out / f"flowgraph_{name}.png")
            figures += [out / f"flowgraph_{name}.graphml", out / f"flowgraph_{name}.png"]
            captions[f"flowgraph_{name}.png"] = (
                f"The flow graph of task {name} (FlowKL's graph on its conformant "
                f"dialogues; the whole graph: flowgraph_{name}.graphml)"
            )

    def text(name: str, content: str) -> None:
        write_text_atomic(out / name, content)
        written.append(out / name)

    text(
        "report.md",
        report_markdown(
            report, [(p.name, captions.get(p.name, p.stem)) for p in figures if p.suffix == ".png"]
        ),
    )
    text("report.json", json.dumps(report, indent=1, default=float) + "\n")
    for key in ("task1", "task1_cross"):
        if key not in report:
            continue
        t1 = report[key]
        text(
            f"{key}_units.csv",
            _csv(t1["units"], ["task", "type", "method", "distances", "tau", "exact", "p_perm"]),
        )
        rows = [
            {
                "method": m,
                **{h: v.get(h) for h in (*taxonomy.names(), "Avg")},
                "exact_recovery": t1["summary"]["exact_recovery"].get(m),
                "fisher_p": t1["summary"]["fisher_p"].get(m),
            }
            for m, v in t1["summary"]["tau"].items()
        ]
        text(
            f"{key}_summary.csv",
            _csv(rows, ["method", *taxonomy.names(), "Avg", "exact_recovery", "fisher_p"]),
        )
        if t1.get("comparisons"):
            text(
                f"{key}_comparisons.csv",
                _csv(
                    t1["comparisons"], ["a", "b", "n_units", "mean_diff", "ci_low", "ci_high", "p", "p_holm"]
                ),
            )
    for key in ("task2", "task2_cross"):
        if key not in report:
            continue
        t2 = report[key]
        rows = []
        unit_fields = ["source_id", "type", "method", "distances", "tau"] + (
            ["references"] if key == "task2_cross" else []
        )
        for enc, res in t2["per_encoder"].items():
            safe = enc.replace("/", "_")
            text(f"{key}_units_{safe}.csv", _csv(res["units"], unit_fields))
            rows += [
                {"encoder": enc, "method": m, **{h: v.get(h) for h in (*taxonomy.names(), "Avg")}}
                for m, v in res["summary"]["tau"].items()
            ]
        text(f"{key}_summary.csv", _csv(rows, ["encoder", "method", *taxonomy.names(), "Avg"]))
        text(
            f"{key}_significance.csv",
            _csv(
                t2["significance"],
                [
                    "encoder",
                    "method",
                    "n_units",
                    "mean_diff",
                    "ci_low",
                    "ci_high",
                    "W",
                    "p_wilcoxon",
                    "p_wilcoxon_holm",
                    "t",
                    "p_ttest",
                    "p_ttest_holm",
                ],
            ),
        )
    if "task3" in report:
        rows = []
        for enc, res in report["task3"].items():
            for det, r in res["results"].items():
                rows.append(
                    {
                        "encoder": enc,
                        "detector": det,
                        **{f"mae_h_{h}": r.get("mae_h_by_type", {}).get(h) for h in taxonomy.names()},
                        **{
                            k: r.get(k)
                            for k in ("mae_h", "cov_h", "mae_c", "cov_c", "mae_h_ref", "mae_c_ref", "score")
                        },
                    }
                )
        text(
            "task3.csv",
            _csv(
                rows,
                [
                    "encoder",
                    "detector",
                    *(f"mae_h_{h}" for h in taxonomy.names()),
                    "mae_h",
                    "cov_h",
                    "mae_c",
                    "cov_c",
                    "mae_h_ref",
                    "mae_c_ref",
                    "score",
                ],
            ),
        )
    if "task3" in report:
        rows = []
        for enc, res in report["task3"].items():
            for det, r in res["results"].items():
                a = r.get("all_turns")
                if a is not None:
                    rows.append(
                        {
                            "encoder": enc,
                            "detector": det,
                            **{f"mae_h_{h}": a["mae_h_by_type"].get(h) for h in taxonomy.names()},
                            **{k: a.get(k) for k in ("mae_h", "mae_c", "mae_h_ref", "mae_c_ref")},
                        }
                    )
        if rows:
            text(
                "task3_all_turns.csv",
                _csv(
                    rows,
                    [
                        "encoder",
                        "detector",
                        *(f"mae_h_{h}" for h in taxonomy.names()),
                        "mae_h",
                        "mae_c",
                        "mae_h_ref",
                        "mae_c_ref",
                    ],
                ),
            )
    if report.get("task3_weight_sweep"):
        rows = []
        for enc, sw in report["task3_weight_sweep"].items():
            for i, w in enumerate(sw["weights"]):
                for det, sc in sw["scores"].items():
                    rows.append(
                        {
                            "encoder": enc,
                            "w_mae_h": w[0],
                            "w_mae_c": w[1],
                            "w_cov_h": w[2],
                            "w_cov_c": w[3],
                            "detector": det,
                            "score": sc[i],
                            "regime_winner": any(v[i] == det for v in sw["winners"].values()),
                        }
                    )
        text(
            "task3_weight_sweep.csv",
            _csv(
                rows,
                ["encoder", "w_mae_h", "w_mae_c", "w_cov_h", "w_cov_c", "detector", "score", "regime_winner"],
            ),
        )
    written += figures
    logger.info("wrote %d report files to %s", len(written), out)
    return written
