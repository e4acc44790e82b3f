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
    md = [f"### Table 2. Task 1: set-to-set distance (Kendall tau, {_task1_encoders(t1)}, {s['n_units']} units)",
          "", markdown_table(["Method", *TYPES, "Avg", "Exact recovery", "p (Fisher, vs chance)"], rows)]
    comp = t1.get("comparisons") or []
    if comp:
        md += ["", task1_comparisons_markdown(comp)]
    return "\n".join(md)


def _task1_encoders(t1: Mapping[str, Any]) -> str:
    used = t1.get("encoders") or {}
    if not used or len(set(used.values())) == 1:
        return f"encoder `{t1.get('encoder')}`"
    return "encoders " + ", ".join(f"{_label(m)} `{e}`" for m, e in used.items())


def task1_comparisons_markdown(comp: Sequence[Mapping[str, Any]]) -> str:
    """Appendix J: FlowKL against each method (paired bootstrap CI of mean Delta tau, two-sided
    paired Wilcoxon, Holm within this family)."""
    rows = [[_label(r["a"]), _label(r["b"]), str(r["n_units"]), _f(r["mean_diff"]),
             f"[{_f(r['ci_low'])}, {_f(r['ci_high'])}]", _p(r["p"]), _p(r["p_holm"])] for r in comp]
    return "\n".join(["Appendix J. FlowKL against each method (Delta tau per unit; paired bootstrap 95% CI; "
                      "two-sided paired Wilcoxon, Holm within this family):", "",
                      markdown_table(["A", "B", "units", "mean Delta tau (A - B)", "95% CI (bootstrap)", "p Wilcoxon",
                                      "p (Holm)"], rows)])


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
                 f"[{_f(r['ci_low'])}, {_f(r['ci_high'])}]", _stat(r.get("W"), 0), _p(r["p_wilcoxon_holm"]),
                 _stat(r.get("t"), 2), _p(r["p_ttest_holm"])] for r in sig]
        md += ["### Table 7. FlowScore against each method (tau difference per unit; one-sided tests, Holm across encoders)",
               "", markdown_table(["Encoder", "Method", "N", "Mean Delta", "95% CI (bootstrap)", "W", "p W (Holm)",
                                   "t", "p t (Holm)"], rows)]
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
        md += [f"### Tables 4 and 9. Task 3: first deviating turn, MAEs in system turns (encoder `{enc}`; {res['n_train']} train, "
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


def _stat(v: Any, nd: int) -> str:
    return "–" if v is None else f"{v:,.{nd}f}"


def task3_all_turns_markdown(t3: Mapping[str, Any]) -> str:
    """Task 3 MAEs in all turns (user + system), the unit of the paper's Table 4; the Score is
    unit-free and stays in the system-turn table."""
    md = []
    for enc, res in t3.items():
        rows = []
        for det, r in res["results"].items():
            a = r.get("all_turns")
            if a is None:
                continue
            by = a.get("mae_h_by_type", {})
            rows.append([_label(det)] + [_f(by.get(h), 2) for h in TYPES] + [_f(a["mae_h"], 2), _f(a["mae_c"], 2)])
        if not rows:
            continue
        a = next(r["all_turns"] for r in res["results"].values() if r.get("all_turns"))
        md += [f"### Table 4 (paper's unit). Task 3 MAEs in all turns, user + system (encoder `{enc}`; "
               f"MAE_h_ref {_f(a['mae_h_ref'], 2)}, MAE_c_ref {_f(a['mae_c_ref'], 2)}; coverages and Score as above)",
               "", markdown_table(["Detector", *(f"MAE_h {h}" for h in TYPES), "MAE_h", "MAE_c"], rows), ""]
    return "\n".join(md)


def weight_sweep_markdown(sweep: Mapping[str, Mapping[str, Any]]) -> str:
    """Appendix I: the winner of each regime (and its Score) for each weight vector of the grid."""
    md = []
    for enc, sw in sweep.items():
        regimes = list(sw["winners"])
        rows = []
        for i, w in enumerate(sw["weights"]):
            cells = []
            for reg in regimes:
                d = sw["winners"][reg][i]
                cells.append(f"{_label(d)} ({_f(sw['scores'][d][i], 2)})")
            rows.append([" / ".join(f"{x:.3f}".rstrip("0").rstrip(".") for x in w)] + cells)
        stable = ", ".join(f"{reg}: {'yes' if sw['stable'][reg] else 'NO'}" for reg in regimes)
        md += [f"### Appendix I. Task 3 Score weights (encoder `{enc}`): winner of each regime per weight vector",
               "", markdown_table(["w (MAE_h / MAE_c / cov_h / cov_c)", *(f"winner {reg} (Score)" for reg in regimes)],
                                  rows), "", f"Same winner at every weight: {stable}.", ""]
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
        md += [task3_all_turns_markdown(report["task3"]), ""]
    if report.get("task3_weight_sweep"):
        md += [weight_sweep_markdown(report["task3_weight_sweep"]), ""]
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


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_tau_bars_ci(table: Mapping[str, Mapping[str, Any]], ci: Mapping[str, Mapping[str, Any]] | None,
                     title: str, path: Path) -> list[str]:
    """Grouped bars of a tau table (one group per type and Avg, one bar per method) with the
    bootstrap 95% CIs as error bars, the legend outside the axes. A method whose every cell is 0
    or missing (Random: 0 by definition) gets no bar and no legend entry; it is named under the
    axes instead. Returns the methods drawn."""
    plt = _pyplot()
    import numpy as np

    groups = [*TYPES, "Avg"]
    drawn = [m for m in table if any((table[m].get(g) or 0.0) != 0.0 for g in groups)]
    flat = [m for m in table if m not in drawn]
    x = np.arange(len(groups))
    w = 0.8 / max(1, len(drawn))
    cmap = plt.get_cmap("tab10")
    fig, ax = plt.subplots(figsize=(9, 3.8))
    for i, m in enumerate(drawn):
        vals = np.array([np.nan if table[m].get(g) is None else table[m][g] for g in groups], dtype=float)
        err = None
        if ci:
            lo = np.array([(ci.get(m, {}).get(g) or [v, v])[0] for g, v in zip(groups, vals)], dtype=float)
            hi = np.array([(ci.get(m, {}).get(g) or [v, v])[1] for g, v in zip(groups, vals)], dtype=float)
            err = np.vstack([np.clip(vals - lo, 0, None), np.clip(hi - vals, 0, None)])
        ax.bar(x + i * w - 0.4 + w / 2, vals, w, yerr=err, capsize=2, label=_label(m), color=cmap(i % 10),
               error_kw={"elinewidth": 0.8, "ecolor": "black"})
    ax.axhline(0, color="black", lw=0.8)
    ax.axvline(len(TYPES) - 0.5, color="grey", lw=0.6, ls=":")
    ax.set_xticks(x, groups)
    ax.set_ylabel("Kendall tau (mean over units)")
    ax.set_title(title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    note = "error bars: percentile bootstrap 95% CI over units" if ci else ""
    if flat:
        note += ("; " if note else "") + ", ".join(_label(m) for m in flat) + ": tau = 0 (not drawn)"
    if note:
        ax.text(0, -0.14, note, transform=ax.transAxes, fontsize=7, va="top", color="dimgray")
    _savefig(fig, path)
    plt.close(fig)
    return drawn


def plot_distance_by_k_panels(curves: Mapping[str, Mapping[str, Mapping[str, Any]]], title: str, path: Path) -> list[str]:
    """Task 2: mean distance d_k against fork position k, in each method's own units (not
    rescaled), with its bootstrap 95% CI as a band; one row of panels per method (y shared
    within a row, so the four types compare), one column per type. Random is left out (its
    distances are uniform noise by construction). Returns the methods drawn."""
    plt = _pyplot()
    import numpy as np

    methods = [m for m in curves if m != "random" and curves[m]]
    if not methods:
        return []
    fig, axes = plt.subplots(len(methods), len(TYPES), figsize=(2.6 * len(TYPES), 1.9 * len(methods) + 0.6),
                             sharex=True, sharey="row", squeeze=False)
    ks = np.arange(1, 5)
    for i, m in enumerate(methods):
        for j, h in enumerate(TYPES):
            ax = axes[i, j]
            c = curves[m].get(h)
            if c:
                ax.fill_between(ks, c["low"], c["high"], color=f"C{j}", alpha=0.25, lw=0)
                ax.plot(ks, c["mean"], marker="o", ms=3, color=f"C{j}")
            if i == 0:
                n = c["n"] if c else 0
                ax.set_title(f"{h} (n={n})", fontsize=9)
            if j == 0:
                ax.set_ylabel(_label(m), fontsize=9)
            ax.tick_params(labelsize=7)
            ax.grid(alpha=0.3, lw=0.5)
    for ax in axes[-1]:
        ax.set_xticks(ks)
        ax.set_xlabel("fork position k", fontsize=8)
    fig.suptitle(title + "\nmean distance to the source dialogue (own units), band: bootstrap 95% CI; "
                 "expected to fall with k", fontsize=9)
    fig.tight_layout()
    _savefig(fig, path)
    plt.close(fig)
    return methods


def plot_task3_summary(results: Mapping[str, Mapping[str, Any]], title: str, path: Path) -> None:
    """Task 3 side by side, one row per detector: MAE_h and MAE_c (system turns), coverages
    cov_h and cov_c (%), and the Score. Every value is written next to its bar, and a detector
    that flags nothing shows "none flagged" in place of an MAE bar, so a low-coverage detector is
    never an invisible bar."""
    plt = _pyplot()
    import numpy as np

    dets = list(results)
    y = np.arange(len(dets))
    fig, axes = plt.subplots(1, 3, figsize=(13, 0.45 * len(dets) + 1.6), sharey=True,
                             gridspec_kw={"width_ratios": [1.2, 1.2, 1]})
    h = 0.38

    def bars(ax, key, offset, color, label, scale=1.0, fmt="{:.2f}"):
        vmax = max([(results[d].get(key) or 0) * scale for d in dets] + [1e-9])
        for yi, d in zip(y, dets):
            v = results[d].get(key)
            if v is None:
                ax.text(0, yi + offset, " none flagged", va="center", fontsize=7, color=color, style="italic")
                continue
            ax.barh(yi + offset, v * scale, h, color=color, label=label if yi == y[0] else None)
            ax.text(v * scale + 0.01 * vmax, yi + offset, fmt.format(v * scale), va="center", fontsize=7)
        return vmax

    m1 = bars(axes[0], "mae_h", -h / 2, "C3", "MAE_h (forks)")
    m2 = bars(axes[0], "mae_c", h / 2, "C0", "MAE_c (conformant)")
    axes[0].set_xlim(0, 1.25 * max(m1, m2))
    axes[0].set_xlabel("MAE (system turns, lower is better)")
    bars(axes[1], "cov_h", -h / 2, "C3", "cov_h (forks flagged, higher is better)", 100, "{:.1f}%")
    bars(axes[1], "cov_c", h / 2, "C0", "cov_c (false alarms, lower is better)", 100, "{:.1f}%")
    axes[1].set_xlim(0, 118)
    axes[1].set_xlabel("coverage (%)")
    for yi, d in zip(y, dets):
        v = results[d].get("score")
        axes[2].barh(yi, v or 0.0, 0.6, color="C2")
        axes[2].text((v or 0.0) + 1, yi, _f(v, 2), va="center", fontsize=7)
    axes[2].set_xlim(0, 110)
    axes[2].set_xlabel("Score (0-100, higher is better)")
    axes[0].set_yticks(y, [_label(d) for d in dets])
    axes[0].invert_yaxis()
    for ax in axes[:2]:
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), fontsize=7, frameon=False, ncol=1)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    _savefig(fig, path)
    plt.close(fig)


def plot_weight_sweep(sweep: Mapping[str, Any], title: str, path: Path) -> None:
    """Appendix I: each detector's Score against the MAE weight w (weights (w, w, 0.5 - w, 0.5 - w)),
    one panel per regime, the paper's w = 0.35 marked; a winner that holds is the top line at every w."""
    plt = _pyplot()

    from .bench import _regime

    regimes = list(sweep["winners"])
    fig, axes = plt.subplots(1, len(regimes), figsize=(4.2 * len(regimes) + 1.6, 3.4), squeeze=False)
    ws = [w[0] for w in sweep["weights"]]
    for ax, reg in zip(axes[0], regimes):
        for i, d in enumerate(sorted(d for d in sweep["scores"] if _regime(d) == reg)):
            ax.plot(ws, sweep["scores"][d], marker="o", ms=3, label=_label(d), color=f"C{i}")
        top = max([v for d in sweep["scores"] if _regime(d) == reg for v in sweep["scores"][d]] + [0.0])
        ax.set_ylim(0, max(1.0, 1.12 * top))  # Scores near 0 (1e-5 from the floored log) read as 0
        ax.axvline(0.35, color="grey", ls=":", lw=0.8)
        ax.text(0.351, ax.get_ylim()[1], " paper", fontsize=7, va="top", color="grey")
        ax.set_xlabel("weight of each MAE component (coverage: 0.5 - w)")
        ax.set_ylabel("Score")
        ax.set_title(f"{reg}: winner {'holds' if sweep['stable'][reg] else 'CHANGES'}", fontsize=9)
        ax.grid(alpha=0.3, lw=0.5)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, frameon=False)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    _savefig(fig, path)
    plt.close(fig)


def write_figures(report: Mapping[str, Any], out: Path) -> list[Path]:
    """The PNG figures of a report (tau bars with CIs, Task 2 distance by k, Task 3 side by side,
    the Score weight sweep); returns the written paths."""
    written: list[Path] = []
    if "task1" in report:
        s = report["task1"]["summary"]
        plot_tau_bars_ci(s["tau"], s.get("tau_ci"), "Task 1: Kendall tau per type", out / "task1_tau.png")
        written.append(out / "task1_tau.png")
    if "task2" in report:
        for enc, res in report["task2"]["per_encoder"].items():
            safe = enc.replace("/", "_")
            s = res["summary"]
            plot_tau_bars_ci(s["tau"], s.get("tau_ci"), f"Task 2 ({enc}): Kendall tau per type", out / f"task2_tau_{safe}.png")
            written.append(out / f"task2_tau_{safe}.png")
            if s.get("distance_by_k"):
                plot_distance_by_k_panels(s["distance_by_k"], f"Task 2 ({enc}): distance by fork position",
                                          out / f"task2_distance_by_k_{safe}.png")
                written.append(out / f"task2_distance_by_k_{safe}.png")
    if "task3" in report:
        for enc, res in report["task3"].items():
            safe = enc.replace("/", "_")
            plot_task3_summary(res["results"], f"Task 3 ({enc}): localisation, coverage and Score",
                               out / f"task3_summary_{safe}.png")
            written.append(out / f"task3_summary_{safe}.png")
            if any(r.get("curve") for r in res["results"].values()):
                plot_task3_tradeoff(res["results"], f"Task 3 ({enc}): coverage vs false alarms",
                                    out / f"task3_tradeoff_{safe}.png")
                written.append(out / f"task3_tradeoff_{safe}.png")
    for enc, sw in (report.get("task3_weight_sweep") or {}).items():
        safe = enc.replace("/", "_")
        plot_weight_sweep(sw, f"Task 3 ({enc}): Score under other weights (Appendix I)", out / f"task3_weights_{safe}.png")
        written.append(out / f"task3_weights_{safe}.png")
    return written


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
        if t1.get("comparisons"):
            text("task1_comparisons.csv", _csv(t1["comparisons"], ["a", "b", "n_units", "mean_diff", "ci_low", "ci_high",
                                                                   "p", "p_holm"]))
    if "task2" in report:
        t2 = report["task2"]
        rows = []
        for enc, res in t2["per_encoder"].items():
            safe = enc.replace("/", "_")
            text(f"task2_units_{safe}.csv", _csv(res["units"], ["source_id", "type", "method", "distances", "tau"]))
            rows += [{"encoder": enc, "method": m, **{h: v.get(h) for h in (*TYPES, "Avg")}} for m, v in res["summary"]["tau"].items()]
        text("task2_summary.csv", _csv(rows, ["encoder", "method", *TYPES, "Avg"]))
        text("task2_significance.csv", _csv(t2["significance"], ["encoder", "method", "n_units", "mean_diff", "ci_low", "ci_high",
                                                                  "W", "p_wilcoxon", "p_wilcoxon_holm", "t", "p_ttest",
                                                                  "p_ttest_holm"]))
    if "task3" in report:
        rows = []
        for enc, res in report["task3"].items():
            for det, r in res["results"].items():
                rows.append({"encoder": enc, "detector": det, **{f"mae_h_{h}": r.get("mae_h_by_type", {}).get(h) for h in TYPES},
                             **{k: r.get(k) for k in ("mae_h", "cov_h", "mae_c", "cov_c", "mae_h_ref", "mae_c_ref", "score")}})
        text("task3.csv", _csv(rows, ["encoder", "detector", *(f"mae_h_{h}" for h in TYPES), "mae_h", "cov_h", "mae_c", "cov_c",
                                      "mae_h_ref", "mae_c_ref", "score"]))
    if "task3" in report:
        rows = []
        for enc, res in report["task3"].items():
            for det, r in res["results"].items():
                a = r.get("all_turns")
                if a is not None:
                    rows.append({"encoder": enc, "detector": det, **{f"mae_h_{h}": a["mae_h_by_type"].get(h) for h in TYPES},
                                 **{k: a.get(k) for k in ("mae_h", "mae_c", "mae_h_ref", "mae_c_ref")}})
        if rows:
            text("task3_all_turns.csv", _csv(rows, ["encoder", "detector", *(f"mae_h_{h}" for h in TYPES), "mae_h", "mae_c",
                                                    "mae_h_ref", "mae_c_ref"]))
    if report.get("task3_weight_sweep"):
        rows = []
        for enc, sw in report["task3_weight_sweep"].items():
            for i, w in enumerate(sw["weights"]):
                for det, sc in sw["scores"].items():
                    rows.append({"encoder": enc, "w_mae_h": w[0], "w_mae_c": w[1], "w_cov_h": w[2], "w_cov_c": w[3],
                                 "detector": det, "score": sc[i],
                                 "regime_winner": any(v[i] == det for v in sw["winners"].values())})
        text("task3_weight_sweep.csv", _csv(rows, ["encoder", "w_mae_h", "w_mae_c", "w_cov_h", "w_cov_c", "detector",
                                                   "score", "regime_winner"]))
    if plots:
        written += write_figures(report, out)
        if graph is not None and graph[1] is not None:
            name, g = graph
            g.to_graphml(out / f"flowgraph_{name}.graphml")
            g.draw(out / f"flowgraph_{name}.png")
            written += [out / f"flowgraph_{name}.graphml", out / f"flowgraph_{name}.png"]
    logger.info("wrote %d report files to %s", len(written), out)
    return written
