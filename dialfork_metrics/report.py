"""Reports of the benchmark: Markdown tables in the paper's layout, CSV, JSON and PNG plots.

Every file is written atomically (temp file + rename), so an interrupted run never leaves a
half-written report.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dialfork_dataset.jsonl import make_public, write_text_atomic
from dialfork_dataset.records import HALLUCINATION_TYPES

logger = logging.getLogger(__name__)
TYPES = HALLUCINATION_TYPES


def _label(m: str) -> str:
    from .bench import LABELS

    return LABELS.get(m, m)


def _f(v: Any, nd: int = 3, pct: bool = False) -> str:
    if v is None:
        return "–"
    if pct:
        return f"{100 * v:.1f}%"
    return f"{v:.{nd}f}"


def _p(v: Any) -> str:
    if v is None:
        return "–"
    return "<0.001" if v < 0.001 else f"{v:.3f}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def task1_markdown(t1: Mapping[str, Any]) -> str:
    s = t1["summary"]
    rows = []
    for m, vals in s["tau"].items():
        rows.append([_label(m)] + [_f(vals.get(h)) for h in TYPES] + [_f(vals.get("Avg")), _f(s["exact_recovery"].get(m), pct=True),
                                                                        _p(s["fisher_p"].get(m))])
    md = [f"### Table 2. Task 1: set-to-set distance (Kendall tau, encoder `{t1.get('encoder')}`, {s['n_units']} units)",
          "", markdown_table(["Method", *TYPES, "Avg", "Exact recovery", "p (Fisher, vs chance)"], rows)]
    if s["pairwise"]:
        prow = [[_label(r["a"]), _label(r["b"]), str(r["n_units"]), _f(r["mean_diff"]), _p(r["p"]), _p(r["p_holm"])]
                for r in s["pairwise"]]
        md += ["", "Methods against each other (paired two-sided Wilcoxon over units, Holm):", "",
               markdown_table(["A", "B", "units", "mean tau(A) - tau(B)", "p", "p (Holm)"], prow)]
    return "\n".join(md)


def task2_markdown(t2: Mapping[str, Any]) -> str:
    md = []
    for enc, res in t2["per_encoder"].items():
        s = res["summary"]
        rows = [[_label(m)] + [_f(vals.get(h)) for h in TYPES] + [_f(vals.get("Avg"))] for m, vals in s["tau"].items()]
        md += [f"### Table 3. Task 2: dialogue-to-dialogue distance (Kendall tau, encoder `{enc}`, {s['n_units']} units)",
               "", markdown_table(["Method", *TYPES, "Avg"], rows), ""]
    sig = t2.get("significance") or []
    if sig:
        rows = [[r["encoder"], _label(r["method"]), str(r["n_units"]), _f(r["mean_diff"]),
                 f"[{_f(r['ci_low'])}, {_f(r['ci_high'])}]", _p(r["p_wilcoxon_holm"]), _p(r["p_ttest_holm"])] for r in sig]
        md += ["### Table 7. FlowScore against each method (tau difference per unit; one-sided tests, Holm across encoders)",
               "", markdown_table(["Encoder", "Method", "units", "mean diff", "95% CI (bootstrap)", "p Wilcoxon (Holm)",
                                   "p t-test (Holm)"], rows)]
    return "\n".join(md)


def _task3_rows(results: Mapping[str, Mapping[str, Any]]) -> list[list[str]]:
    rows = []
    for det, r in results.items():
        by = r.get("mae_h_by_type", {})
        rows.append([_label(det)] + [_f(by.get(h), 2) for h in TYPES] +
                    [_f(r["mae_h"], 2), _f(r["cov_h"], pct=True), _f(r["mae_c"], 2), _f(r["cov_c"], pct=True),
                     _f(r["score"], 2)])
    return rows


_TASK3_HEADER = ["Detector", *(f"MAE_h {h}" for h in TYPES), "MAE_h", "cov_h", "MAE_c", "cov_c", "Score"]
#: The paper's best streaming detector (IT+NC, D2F, Table 4): hallucinated coverage at its false alarms.
PAPER_STREAMING_COVERAGE = 0.9382
PAPER_STREAMING_FALSE_ALARMS = 0.0558


def _settings_text(s: Mapping[str, Any] | None) -> str:
    if not s:
        return "–"
    return (f"{s['calibration']}, {'backoff' if s['backoff'] else 'no backoff'}, thr {s['distance_threshold']:g}, "
            f"{s['scope']}, N={s['order']}")


def task3_markdown(t3: Mapping[str, Any]) -> str:
    md = []
    for enc, res in t3.items():
        any_r = next(iter(res["results"].values()))
        preset = res.get("preset", "selected")
        how = "settings chosen by cross-validation on train sources" if res.get("selection") else f"preset `{preset}`"
        md += [f"### Tables 4 and 9. Task 3: first deviating turn (encoder `{enc}`; {res['n_train']} train, "
               f"{res['n_test']} test dialogues; MAE_h_ref {_f(any_r['mae_h_ref'], 2)}, MAE_c_ref {_f(any_r['mae_c_ref'], 2)}; "
               f"streaming rows: {how}, operating point {100 * res.get('false_alarm_rate', 0.05):g}% false alarms)",
               "", markdown_table(_TASK3_HEADER, _task3_rows(res["results"])), ""]
        md += [task3_operating_markdown(res), ""]
        for key, title in (("table9", f"Table 9 protocol (the paper's settings, N=3; encoder `{enc}`)"),):
            if res.get(key):
                md += [f"#### {title}", "", markdown_table(_TASK3_HEADER, _task3_rows(res[key])), ""]
        md += [task3_ablation_markdown(res, enc), ""]
    return "\n".join(md)


def task3_operating_markdown(res: Mapping[str, Any]) -> str:
    """Per streaming detector: its settings, the coverage at 1/5/10% conformant false alarms
    (read off the trade-off curve on test) and the distance to the paper's 93.82%."""
    rows = []
    for det, r in res["results"].items():
        cov = r.get("coverage_at")
        if not cov:
            continue
        c5 = cov.get("0.05")
        rows.append([_label(det), _settings_text(r.get("settings")), _f(r["cov_c"], pct=True), _f(r["cov_h"], pct=True),
                     _f(cov.get("0.01"), pct=True), _f(c5, pct=True), _f(cov.get("0.1"), pct=True),
                     "–" if c5 is None else f"{100 * (c5 - PAPER_STREAMING_COVERAGE):+.1f} pts"])
    if not rows:
        return ""
    out = ["Streaming detectors at their operating point, and the hallucinated coverage at 1%, 5% and 10% conformant "
           "false alarms (threshold swept on test; paper, IT+NC with D2F: 93.82% coverage at 5.58% false alarms):", "",
           markdown_table(["Detector", "settings", "cov_c (false alarms)", "cov_h", "cov_h @1% FA", "cov_h @5% FA",
                           "cov_h @10% FA", "@5% vs paper 93.82%"], rows)]
    sel = res.get("selection")
    if sel:
        m = sel.get("meta", {})
        out += ["", f"Selection: {m.get('n_folds')}-fold cross-validation over {m.get('n_sources')} train sources "
                    f"({m.get('n_records')} train dialogues), {len(sel.get('table', []))} (detector, setting) rows, "
                    f"target {100 * m.get('false_alarm_rate', 0.05):g}% + {100 * m.get('tolerance', 0.01):g} pts."]
    return "\n".join(out)


def task3_ablation_markdown(res: Mapping[str, Any], enc: str) -> str:
    """The N-gram order and fitting-scope ablations (Score, cov_c, cov_h per detector)."""
    md = []
    for key, what in (("ablation_order", "N-gram order N"), ("ablation_scope", "fitting scope")):
        ab = res.get(key)
        if not ab:
            continue
        dets = list(next(iter(ab.values())))
        rows = [[str(v)] + [f"{_f(r[d]['score'], 1)} ({_f(r[d]['cov_c'], pct=True)} / {_f(r[d]['cov_h'], pct=True)})"
                            for d in dets] for v, r in ab.items()]
        md += [f"#### Ablation: {what} (encoder `{enc}`; other settings as in the main rows; "
               f"{res.get('ablation_n_test', res['n_test'])} test dialogues). Score (cov_c / cov_h)", "",
               markdown_table([what, *(_label(d) for d in dets)], rows), ""]
    return "\n".join(md)


def report_markdown(report: Mapping[str, Any]) -> str:
    meta = report["meta"]
    t = report["timings"]
    md = ["# DialFork benchmark report", "",
          f"Data: `{meta['data']}` (fingerprint `{meta['fingerprint'][:16]}`), {meta['n_records']:,} dialogues "
          f"({meta['n_conformant']:,} conformant). Encoders: {', '.join(f'`{e}`' for e in meta['encoders'])}. "
          f"Seed {meta['seed']}. Wall time {t['total']:.1f} s, of which encoding {100 * t['encoding_share']:.1f}%.", ""]
    if "task1" in report:
        md += [task1_markdown(report["task1"]), ""]
    if "task2" in report:
        md += [task2_markdown(report["task2"]), ""]
    if "task3" in report:
        md += [task3_markdown(report["task3"]), ""]
    sk = report.get("skipped") or []
    md += [f"Skipped units: {len(sk)}"] + [f"- {s}" for s in sk[:50]] + ([f"- ... ({len(sk) - 50} more)"] if len(sk) > 50 else [])
    return "\n".join(md) + "\n"


def _csv(rows: Sequence[Mapping[str, Any]], fields: Sequence[str]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(fields), extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: (json.dumps(v) if isinstance(v, list | dict) else v) for k, v in r.items()})
    return buf.getvalue()


def _savefig(fig, path: Path) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".png", dir=path.parent)
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=120, bbox_inches="tight")
        make_public(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _grouped_bars(values: Mapping[str, Mapping[str, Any]], ylabel: str, title: str, path: Path,
                  zero_line: bool = False) -> None:
    """One group of bars per hallucination type, one bar per row of ``values`` (missing -> 0)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    rows = list(values)
    x = np.arange(len(TYPES))
    w = 0.8 / max(1, len(rows))
    fig, ax = plt.subplots(figsize=(8, 3.6))
    for i, m in enumerate(rows):
        ax.bar(x + i * w - 0.4 + w / 2, [values[m].get(h) or 0.0 for h in TYPES], w, label=_label(m))
    ax.set_xticks(x, TYPES)
    if zero_line:
        ax.axhline(0, color="black", lw=0.8)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=7, ncol=2)
    _savefig(fig, path)
    plt.close(fig)


def plot_tau_bars(table: Mapping[str, Mapping[str, Any]], title: str, path: Path) -> None:
    _grouped_bars(table, "Kendall tau", title, path, zero_line=True)


def plot_distance_by_k(mean_by_k: Mapping[str, Mapping[int, float]], title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(6, 3.6))
    for m, byk in mean_by_k.items():
        if m == "random" or not byk:
            continue
        ks = sorted(int(k) for k in byk)
        v = np.array([byk[k] if k in byk else byk[str(k)] for k in ks], dtype=float)
        span = v.max() - v.min()
        ax.plot(ks, (v - v.min()) / span if span > 0 else v * 0, marker="o", label=_label(m))
    ax.set_xticks([1, 2, 3, 4])
    ax.set_xlabel("fork position k")
    ax.set_ylabel("mean distance (min-max scaled)")
    ax.set_title(title)
    ax.legend(fontsize=7)
    _savefig(fig, path)
    plt.close(fig)


def plot_task3_tradeoff(results: Mapping[str, Mapping[str, Any]], title: str, path: Path) -> None:
    """Hallucinated coverage against conformant false-alarm rate per streaming detector (threshold
    swept), each detector's operating point marked, the paper's IT+NC point for reference."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.6, 4.4))
    for i, (det, r) in enumerate((d, r) for d, r in results.items() if r.get("curve")):
        color = f"C{i}"
        ax.plot(r["curve"]["cov_c"], r["curve"]["cov_h"], color=color, lw=1.4, label=_label(det))
        ax.plot([r["cov_c"]], [r["cov_h"]], marker="o", color=color, ms=7, mec="black")
    ax.plot([PAPER_STREAMING_FALSE_ALARMS], [PAPER_STREAMING_COVERAGE], marker="*", color="black", ms=11, ls="none",
            label="paper IT+NC (D2F)")
    ax.axvline(0.05, color="grey", lw=0.8, ls="--")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("conformant false-alarm rate (cov_c)")
    ax.set_ylabel("hallucinated coverage (cov_h)")
    ax.set_title(title + "\n(dots: operating points; dashed: 5%)", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    _savefig(fig, path)
    plt.close(fig)


def plot_task3_mae(results: Mapping[str, Mapping[str, Any]], title: str, path: Path) -> None:
    _grouped_bars({d: r.get("mae_h_by_type", {}) for d, r in results.items()}, "MAE_h (system turns)", title, path)


def write_reports(report: Mapping[str, Any], out: str | os.PathLike, plots: bool = True, graph: Any = None) -> list[Path]:
    """Write report.md, report.json, CSVs and plots into ``out``; returns the written paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    def text(name: str, content: str) -> None:
        write_text_atomic(out / name, content)
        written.append(out / name)

    text("report.md", report_markdown(report))
    text("report.json", json.dumps(report, indent=1, default=float) + "\n")
    if "task1" in report:
        t1 = report["task1"]
        text("task1_units.csv", _csv(t1["units"], ["task", "type", "method", "distances", "tau", "exact", "p_perm"]))
        rows = [{"method": m, **{h: v.get(h) for h in (*TYPES, "Avg")},
                 "exact_recovery": t1["summary"]["exact_recovery"].get(m), "fisher_p": t1["summary"]["fisher_p"].get(m)}
                for m, v in t1["summary"]["tau"].items()]
        text("task1_summary.csv", _csv(rows, ["method", *TYPES, "Avg", "exact_recovery", "fisher_p"]))
    if "task2" in report:
        t2 = report["task2"]
        rows = []
        for enc, res in t2["per_encoder"].items():
            safe = enc.replace("/", "_")
            text(f"task2_units_{safe}.csv", _csv(res["units"], ["source_id", "type", "method", "distances", "tau"]))
            rows += [{"encoder": enc, "method": m, **{h: v.get(h) for h in (*TYPES, "Avg")}} for m, v in res["summary"]["tau"].items()]
        text("task2_summary.csv", _csv(rows, ["encoder", "method", *TYPES, "Avg"]))
        text("task2_significance.csv", _csv(t2["significance"], ["encoder", "method", "n_units", "mean_diff", "ci_low", "ci_high",
                                                                  "p_wilcoxon", "p_wilcoxon_holm", "p_ttest", "p_ttest_holm"]))
    if "task3" in report:
        rows = []
        for enc, res in report["task3"].items():
            for det, r in res["results"].items():
                rows.append({"encoder": enc, "detector": det, **{f"mae_h_{h}": r.get("mae_h_by_type", {}).get(h) for h in TYPES},
                             **{k: r.get(k) for k in ("mae_h", "cov_h", "mae_c", "cov_c", "mae_h_ref", "mae_c_ref", "score")}})
        text("task3.csv", _csv(rows, ["encoder", "detector", *(f"mae_h_{h}" for h in TYPES), "mae_h", "cov_h", "mae_c", "cov_c",
                                      "mae_h_ref", "mae_c_ref", "score"]))
    if plots:
        if "task1" in report:
            plot_tau_bars(report["task1"]["summary"]["tau"], "Task 1: Kendall tau per type", out / "task1_tau.png")
            written.append(out / "task1_tau.png")
        if "task2" in report:
            for enc, res in report["task2"]["per_encoder"].items():
                safe = enc.replace("/", "_")
                plot_tau_bars(res["summary"]["tau"], f"Task 2 ({enc}): Kendall tau per type", out / f"task2_tau_{safe}.png")
                plot_distance_by_k(res["summary"]["mean_distance_by_k"], f"Task 2 ({enc}): distance vs fork position",
                                   out / f"task2_distance_by_k_{safe}.png")
                written += [out / f"task2_tau_{safe}.png", out / f"task2_distance_by_k_{safe}.png"]
        if "task3" in report:
            for enc, res in report["task3"].items():
                safe = enc.replace("/", "_")
                plot_task3_mae(res["results"], f"Task 3 ({enc}): MAE_h per type", out / f"task3_mae_{safe}.png")
                written.append(out / f"task3_mae_{safe}.png")
                if any(r.get("curve") for r in res["results"].values()):
                    plot_task3_tradeoff(res["results"], f"Task 3 ({enc}): coverage vs false alarms",
                                        out / f"task3_tradeoff_{safe}.png")
                    written.append(out / f"task3_tradeoff_{safe}.png")
        if graph is not None and graph[1] is not None:
            name, g = graph
            g.to_graphml(out / f"flowgraph_{name}.graphml")
            g.draw(out / f"flowgraph_{name}.png")
            written += [out / f"flowgraph_{name}.graphml", out / f"flowgraph_{name}.png"]
    logger.info("wrote %d report files to %s", len(written), out)
    return written
