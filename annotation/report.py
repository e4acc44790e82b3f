"""Outputs of the analyses: Markdown report (the paper's Table 10 layout, Table 11's "people"
column), ``analyses.json``, ``summary.csv`` and ``figure8.png`` (Figure 8's four panels)."""

from __future__ import annotations

import csv
import io
import json
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from dialfork_dataset.atomic import atomic_path, write_text_atomic
from dialfork_dataset.taxonomy import FORK_POSITIONS, breaking_types

from .analysis import N_BOOT, analyse

logger = logging.getLogger(__name__)


def _and(items: Iterable[str]) -> str:
    """``"a, b and c"``."""
    items = list(items)
    return ", ".join(items[:-1]) + (" and " if len(items) > 1 else "") + (items[-1] if items else "")


def _pct(x: float | None, digits: int = 0) -> str:
    return "n/a" if x is None else f"{100 * x:.{digits}f}%"


def _num(x: float | None, digits: int = 2) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _ci(d: Mapping[str, Any], key_lo: str = "ci_low", key_hi: str = "ci_high", pct: bool = False) -> str:
    lo, hi = d.get(key_lo), d.get(key_hi)
    if lo is None or hi is None:
        return ""
    return f" [{100 * lo:.0f}, {100 * hi:.0f}]" if pct else f" [{lo:.2f}, {hi:.2f}]"


def _p(p: float | None) -> str:
    if p is None:
        return "p n/a"
    return "p<0.001" if p < 0.001 else f"p={p:.3f}"


def verdicts(res: Mapping[str, Any]) -> dict[str, str]:
    """A yes / no / inconclusive reading of each research question (ours, documented):
    RQ1 yes when the lower CI bound of the mean within-unit tau_b (the workflow-breaking types:
    WIC/SSPC/GR) is above 0;
    RQ2 yes when true instructions are confirmed significantly more often than foils on
    conformant dialogues (one-sided Fisher p < 0.05); RQ3 yes when at least half of the
    confirmed onsets are within one turn of t_k; RQ4 yes when the lower Wilson bound of
    "yes or mostly" is above 0.5. "n/a" without data.

    Args:
        res: An :func:`annotation.analysis.analyse` result.

    Returns:
        ``{"RQ1".."RQ4": "Yes", "No" (RQ3 only), "Inconclusive" or "n/a"}``.
    """
    out = {}
    t = res.get("rq1", {}).get("breaking", {}).get("tau_b_within_units", {})
    out["RQ1"] = "n/a" if t.get("ci_low") is None else ("Yes" if t["ci_low"] > 0 else "Inconclusive")
    p = res.get("rq2", {}).get("p_fisher_true_vs_foil_conformant")
    out["RQ2"] = "n/a" if p is None else ("Yes" if p < 0.05 else "Inconclusive")
    w = res.get("rq3", {}).get("within_one", {})
    out["RQ3"] = "n/a" if not w.get("n") else ("Yes" if w["rate"] >= 0.5 else "No")
    y = res.get("rq4", {}).get("overall", {}).get("yes_or_mostly", {})
    out["RQ4"] = "n/a" if not y.get("n") else ("Yes" if (y.get("ci_low") or 0) > 0.5 else "Inconclusive")
    return out


def table11_cells(res: Mapping[str, Any] | None) -> list[str]:
    """One column of Table 11 from an :func:`analyse` result (``n/a`` cells without data):
    ratings per k over WIC/SSPC/GR forks, conformant rating, true instructions confirmed,
    foils on conformant dialogues confirmed, onset exact / within one turn.

    Args:
        res: An :func:`annotation.analysis.analyse` result, or None.

    Returns:
        Five cells as text: mean ratings ``"k1/k2/k3/k4"``, conformant mean rating, true
        confirmed (%), foils confirmed (%, one decimal), ``"exact / within one"`` (%); five
        ``"n/a"`` when ``res`` is empty or has no ``rq1``.
    """
    if not res or "rq1" not in res:
        return ["n/a"] * 5
    ms = res["rq1"]["breaking"]["mean_slider"]
    r2, r3 = res["rq2"], res["rq3"]
    return [
        "/".join(_num(ms[f"k{k}"]["mean"], 0) for k in FORK_POSITIONS),
        _num(ms["conformant"]["mean"], 0),
        _pct(r2["true_overall"]["rate"]),
        _pct(r2["foil_conformant"]["rate"], 1),
        f"{_pct(r3['exact']['rate'])} / {_pct(r3['within_one']['rate'])}",
    ]


TABLE11_ROWS = (
    "Rating, k=1/2/3/4",
    "Rating, conformant",
    "Instruction confirmed",
    "Foil confirmed",
    "Onset at t_k / within +-1",
)


def table11(res: Mapping[str, Any], judge: Mapping[str, Any] | None = None) -> list[str]:
    """Table 11 (Markdown lines): the people on this study and, when ``judge`` holds the
    analyses of the LLM judge's answers (``{"study": ..., "all": ..., "model": ...}``), the
    judge on the same conversations and on the whole corpus.

    Args:
        res: The people's :func:`annotation.analysis.analyse` result.
        judge: The judge's analyses (``study``, optional ``all``, ``model``, ``calibration``),
            as in ``run_analyses``' ``llm_judge``; None: the people's column only.

    Returns:
        The Markdown lines of the table (a heading, the table, and with ``judge`` a note on
        the calibration), ``n/a`` in cells without data.
    """
    cols = [("People (this study)", table11_cells(res))]
    title = "## Table 11 layout: people on this study"
    if judge:
        name = judge.get("model") or "LLM judge"
        cols.append((f"LLM judge ({name}), study", table11_cells(judge.get("study"))))
        if judge.get("all") is not None:
            cols.append((f"LLM judge ({name}), all dialogues", table11_cells(judge.get("all"))))
        title = "## Table 11: the calibrated LLM judge next to the people"
    lines = [title, "", "| | " + " | ".join(c for c, _ in cols) + " |", "| --- " * (len(cols) + 1) + "|"]
    for i, row in enumerate(TABLE11_ROWS):
        lines.append(f"| {row} | " + " | ".join(cells[i] for _, cells in cols) + " |")
    lines.append("")
    if judge:
        cal = judge.get("calibration") or {}
        lines += [
            f"Ratings are means over {_and(breaking_types())} forks; the judge's ratings are calibrated on the people's "
            f"({cal.get('method', 'n/a')}, cross-fitted in {cal.get('n_folds', 'n/a')} folds by source on the "
            f"study's {cal.get('n', 'n/a')} conversations). Confirmation and onset are over forks shown the true "
            "instruction; foils are those shown on conformant dialogues.",
            "",
        ]
    return lines


def markdown_report(res: Mapping[str, Any], judge: Mapping[str, Any] | None = None) -> str:
    """The report; ``judge`` adds the LLM judge's columns to Table 11 (see :func:`table11`).

    Args:
        res: An :func:`annotation.analysis.analyse` result (with ``counts`` and ``parameters``).
        judge: The judge's analyses for Table 11 (see :func:`table11`), or None.

    Returns:
        The Markdown text (Table 10's research questions with verdicts, Table 11, and the
        detailed sections), ending with a newline; only the counts and "No completed judgments
        yet." when ``res`` has no analyses.
    """
    c = res["counts"]
    lines = [
        "# Human study: analyses (paper, Appendix N)",
        "",
        f"{c['judgments']} judgments of {c['conversations']} conversations ({c['forked']} forked, "
        f"{c['conformant']} conformant) by {c['annotators']} annotators; tasks: {', '.join(c['tasks']) or 'none'}.",
        f"Bootstrap: {res['parameters']['n_boot']} resamples, seed {res['parameters']['seed']}. "
        f"Excluded annotators (foil criterion): {', '.join(res['excluded_annotators']) or 'none'}.",
        "",
    ]
    if "rq1" not in res:
        lines.append("No completed judgments yet.")
        return "\n".join(lines) + "\n"
    v = verdicts(res)
    r1 = res["rq1"]["breaking"]
    tu, tq = r1["tau_b_within_units"], r1["tau_b_quartets"]
    r2, r3, r4 = res["rq2"], res["rq3"], res["rq4"]
    per_type = [x["rate"] for x in r2["true_per_type"].values() if x["rate"] is not None]
    lines += [
        "## Table 10: research questions",
        "",
        "| RQ | Question | Validates | Measure | Statistic | Result |",
        "| --- | --- | --- | --- | --- | --- |",
        "| RQ1 | Does fork position track perceived procedural deviation? | Fork order k (Tasks 1-2) | "
        "Step 1: 0-100 conformance slider, before any cue | Kendall tau_b and probability of superiority within "
        "each (annotator, task); conformant dialogues as anchor | "
        f"{v['RQ1']}: tau_b={_num(tu['mean'])}{_ci(tu)} within annotators ({tu['n']} units, {_p(tu['p_wilcoxon_greater'])}), "
        f"{_num(tq['mean'])}{_ci(tq)} over {tq['n']} quartets; P(later rated higher)={_pct(r1['superiority']['ps'])}"
        f"{_ci(r1['superiority'], pct=True)} ({', '.join(breaking_types())}) |",
        "| RQ2 | Does the injected behavior appear? | Type and variant labels | Step 2: yes / partly / no, against "
        "the true instruction or a foil | Confirmation rate per type (Wilson CIs) vs. foil confirmation rate | "
        f"{v['RQ2']}: {_pct(r2['true_overall']['rate'])}{_ci(r2['true_overall'], pct=True)} confirmed"
        + (f" ({_pct(min(per_type))}-{_pct(max(per_type))} per type)" if per_type else "")
        + f", vs. {_pct(r2['foil_conformant']['rate'])} for foils on conformant dialogues "
        f"({_p(r2['p_fisher_true_vs_foil_conformant'])}) |",
        "| RQ3 | Does it start at the intended turn? | Fork turn t_k (Task 3) | Step 2: first assistant turn "
        "where it starts, before the fork is shown | abs(onset - t_k) distribution; share exact and within +-1 "
        f"turn | {v['RQ3']}: {_pct(r3['exact']['rate'])} exact, {_pct(r3['within_one']['rate'])} within one turn "
        f"(n={r3['n']}) |",
        "| RQ4 | Is the pre-fork part conformant? | Seeded replay of the prefix | Step 3: yes / mostly / no, "
        "for forks with t_k>1 | Conformance rate (Wilson CI) | "
        f"{v['RQ4']}: {_pct(r4['overall']['yes_or_mostly']['rate'])}{_ci(r4['overall']['yes_or_mostly'], pct=True)} "
        f"followed or mostly followed (n={r4['overall']['n']}) |",
        "",
    ]
    lines += table11(res, judge)
    lines += ["## RQ1: blind conformance rating", ""]
    for name in ("breaking", "all"):
        r = res["rq1"][name]
        lines += [
            f"### Types {', '.join(r['types'])}",
            "",
            "| statistic | value | 95% CI | n |",
            "| --- | --- | --- | --- |",
        ]
        for label, d, key in (
            ("mean tau_b within (annotator, task)", r["tau_b_within_units"], "mean"),
            ("mean tau_b within quartets", r["tau_b_quartets"], "mean"),
        ):
            lines.append(
                f"| {label} ({_p(d['p_wilcoxon_greater'])}, one-sided Wilcoxon) | {_num(d[key])} | "
                f"{_ci(d).strip()} | {d['n']} |"
            )
        for label, key in (
            ("P(later fork rated higher)", "superiority"),
            ("P(k=4 above k=1)", "superiority_k4_vs_k1"),
            ("P(conformant above fork)", "superiority_conformant_vs_fork"),
        ):
            d = r[key]
            lines.append(
                f"| {label} | {_pct(d['ps'])} | {_ci(d, pct=True).strip()} | {d['pairs']} pairs, {d['units']} units |"
            )
        ch = r["conformant_highest"]
        lines.append(f"| conformant rated highest | {_pct(ch['share'])} | | {ch['n']} units |")
        for k in ("k1", "k2", "k3", "k4", "conformant"):
            d = r["mean_slider"][k]
            lines.append(f"| mean rating, {k} | {_num(d['mean'], 1)} | {_ci(d).strip()} | {d['n']} |")
        lines.append("")
    lines += [
        "### Mean rating per type and position",
        "",
        "| type | k=1 | k=2 | k=3 | k=4 |",
        "| --- | --- | --- | --- | --- |",
    ]
    for h, d in res["rq1"]["mean_slider_per_type"].items():
        lines.append(f"| {h} | " + " | ".join(_num(d[f"k{k}"]["mean"], 1) for k in FORK_POSITIONS) + " |")
    lines += [
        "",
        "## RQ2: confirmation of the injected instruction",
        "",
        "| shown | confirmed | 95% Wilson CI | yes | partly | n |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for h, d in r2["true_per_type"].items():
        lines.append(
            f"| true instruction, {h} | {_pct(d['rate'])} | {_ci(d, pct=True).strip()} | {d['yes']} | {d['partly']} | {d['n']} |"
        )
    d = r2["true_overall"]
    lines.append(
        f"| true instruction, all | {_pct(d['rate'])} | {_ci(d, pct=True).strip()} | {d['yes']} | {d['partly']} | {d['n']} |"
    )
    for label, key in (("foil on conformant", "foil_conformant"), ("foil on forked", "foil_forked")):
        d = r2[key]
        lines.append(f"| {label} | {_pct(d['rate'])} | {_ci(d, pct=True).strip()} | | | {d['n']} |")
    lines += [
        "",
        f"One-sided Fisher exact test, true vs. foils on conformant: {_p(r2['p_fisher_true_vs_foil_conformant'])}; "
        f"true vs. foils on forked: {_p(r2['p_fisher_true_vs_foil_forked'])}.",
        "",
        "## RQ3: onset of the injected behavior",
        "",
        f"Over {r3['n']} confirmed true instructions: exact {_pct(r3['exact']['rate'])}{_ci(r3['exact'], pct=True)}, "
        f"within one turn {_pct(r3['within_one']['rate'])}{_ci(r3['within_one'], pct=True)}, at or after t_k "
        f"{_pct(r3['at_or_after']['rate'])}, median absolute error {_num(r3['median_abs_error'], 1)}.",
        "",
        "| onset - t_k | count |",
        "| --- | --- |",
    ]
    lines += [f"| {k} | {n} |" for k, n in r3["distribution"].items()]
    lines += [
        "",
        "## RQ4: the part before the fork",
        "",
        "| k | yes | mostly | no | yes or mostly | 95% Wilson CI | n |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for k in ("k2", "k3", "k4", "overall"):
        d = r4[k]
        lines.append(
            f"| {k} | {d['yes']['count']} | {d['mostly']} | {d['no']} | {_pct(d['yes_or_mostly']['rate'])} | "
            f"{_ci(d['yes_or_mostly'], pct=True).strip()} | {d['n']} |"
        )
    a = res["agreement"]
    lines += [
        "",
        "## Agreement (conversations judged by more than one annotator)",
        "",
        f"{a['conversations']} conversations (judged by: {a['judged_by']}).",
        "",
        "| answer | raw agreement | Gwet's AC1 | Krippendorff's alpha (interval) | n |",
        "| --- | --- | --- | --- | --- |",
        f"| confirmation (yes/partly vs no) | {_num(a['confirmation']['raw'])} | {_num(a['confirmation']['ac1'])} | | {a['confirmation']['n_subjects']} |",
        f"| step 2, three-way | {_num(a['three_way']['raw'])} | {_num(a['three_way']['ac1'])} | | {a['three_way']['n_subjects']} |",
        f"| prefix (step 3) | {_num(a['prefix']['raw'])} | {_num(a['prefix']['ac1'])} | | {a['prefix']['n_subjects']} |",
        f"| slider | | | {_num(a['slider']['alpha'])} | {a['slider']['n_subjects']} |",
        f"| onset turn | | | {_num(a['onset']['alpha'])} | {a['onset']['n_subjects']} |",
        "",
        f"Annotator pairs placing the onset within one turn of each other: {_pct(a['onset']['pairs_within_one'])} "
        f"({a['onset']['pairs']} pairs).",
        "",
        "## Annotators: foil false confirmation (exclusion criterion)",
        "",
        "| annotator | judgments | conformant foils | confirmed | rate | assessed | excluded |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for f in res["annotator_foils"]:
        lines.append(
            f"| {f['annotator']} | {f['judgments']} | {f['conformant_foils']} | {f['conformant_foils_confirmed']} | "
            f"{_pct(f['conformant_foil_rate'])} | {'yes' if f['assessed'] else 'no'} | {'yes' if f['excluded'] else 'no'} |"
        )
    lines += [
        "",
        "## Learning across each annotator's sequence",
        "",
        "| third | onset within one | true confirmed | foil confirmed |",
        "| --- | --- | --- | --- |",
    ]
    for t, d in res["learning"].items():
        lines.append(
            f"| {t} | {_pct(d['onset_within_one']['rate'])} (n={d['onset_within_one']['n']}) | "
            f"{_pct(d['true_confirmed']['rate'])} (n={d['true_confirmed']['n']}) | "
            f"{_pct(d['foil_confirmed']['rate'])} (n={d['foil_confirmed']['n']}) |"
        )
    if "distance_correlation" in res:
        lines += [
            "",
            "## Task-2 distances vs. perceived deviation (100 - mean slider)",
            "",
            "| method | Spearman rho | 95% CI | p | n |",
            "| --- | --- | --- | --- | --- |",
        ]
        for m, d in res["distance_correlation"].items():
            lines.append(f"| {m} | {_num(d['rho'])} | {_ci(d).strip()} | {_p(d['p'])} | {d['n']} |")
    return "\n".join(lines) + "\n"


def summary_rows(res: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Flat ``section, statistic, value, ci_low, ci_high, n`` rows of the headline numbers.

    Args:
        res: An :func:`annotation.analysis.analyse` result.

    Returns:
        One dict per statistic (RQ1 to RQ4, agreement, distance correlations when present);
        empty when ``res`` has no ``rq1``. Bounds and ``n`` are None where they do not apply.
    """
    rows: list[dict[str, Any]] = []

    def add(section, stat, value, lo=None, hi=None, n=None):
        rows.append(
            {"section": section, "statistic": stat, "value": value, "ci_low": lo, "ci_high": hi, "n": n}
        )

    if "rq1" not in res:
        return rows
    for name in ("breaking", "all"):
        r = res["rq1"][name]
        for key in ("tau_b_within_units", "tau_b_quartets"):
            d = r[key]
            add(f"rq1_{name}", key, d["mean"], d["ci_low"], d["ci_high"], d["n"])
        for key in ("superiority", "superiority_k4_vs_k1", "superiority_conformant_vs_fork"):
            d = r[key]
            add(f"rq1_{name}", key, d["ps"], d["ci_low"], d["ci_high"], d["pairs"])
        for k, d in r["mean_slider"].items():
            add(f"rq1_{name}", f"mean_slider_{k}", d["mean"], d["ci_low"], d["ci_high"], d["n"])
    r2 = res["rq2"]
    for h, d in r2["true_per_type"].items():
        add("rq2", f"confirmed_{h}", d["rate"], d["ci_low"], d["ci_high"], d["n"])
    for key in ("true_overall", "foil_conformant", "foil_forked"):
        d = r2[key]
        add("rq2", key, d["rate"], d["ci_low"], d["ci_high"], d["n"])
    for key in ("exact", "within_one", "at_or_after"):
        d = res["rq3"][key]
        add("rq3", key, d["rate"], d["ci_low"], d["ci_high"], d["n"])
    for k, d in res["rq4"].items():
        add(
            "rq4",
            f"yes_or_mostly_{k}",
            d["yes_or_mostly"]["rate"],
            d["yes_or_mostly"]["ci_low"],
            d["yes_or_mostly"]["ci_high"],
            d["n"],
        )
    a = res["agreement"]
    for key in ("confirmation", "three_way", "prefix"):
        add("agreement", f"{key}_raw", a[key]["raw"], n=a[key]["n_subjects"])
        add("agreement", f"{key}_ac1", a[key]["ac1"], n=a[key]["n_subjects"])
    for key in ("slider", "onset"):
        add("agreement", f"{key}_alpha", a[key]["alpha"], n=a[key]["n_subjects"])
    for m, d in res.get("distance_correlation", {}).items():
        add("distances", f"spearman_{m}", d["rho"], d["ci_low"], d["ci_high"], d["n"])
    return rows


def plot_figure8(res: Mapping[str, Any], path: str | Path) -> Path | None:
    """Figure 8's four panels: (a) mean rating per k (bars WIC/SSPC/GR, markers all types, plus
    conformant) with bootstrap CIs; (b) confirmation per type vs. foils with Wilson CIs;
    (c) |onset - t_k| histogram; (d) prefix answers per k.

    Args:
        res: An :func:`annotation.analysis.analyse` result.
        path: The PNG file to write (120 dpi; written atomically).

    Returns:
        ``path`` as a ``Path``, or None (nothing written) when ``res`` has no ``rq1``.
    """
    if "rq1" not in res:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(1, 4, figsize=(16, 3.6))
    keys = ["k1", "k2", "k3", "k4", "conformant"]
    br, al = res["rq1"]["breaking"]["mean_slider"], res["rq1"]["all"]["mean_slider"]

    def err(d):
        m = np.array([np.nan if d[k]["mean"] is None else d[k]["mean"] for k in keys])
        lo = np.array([np.nan if d[k]["ci_low"] is None else d[k]["ci_low"] for k in keys])
        hi = np.array([np.nan if d[k]["ci_high"] is None else d[k]["ci_high"] for k in keys])
        return m, np.clip(np.vstack([np.nan_to_num(m - lo), np.nan_to_num(hi - m)]), 0, None)

    m, e = err(br)
    x = np.arange(len(keys))
    ax[0].bar(
        x, np.nan_to_num(m), yerr=e, color=["#c6dbef", "#9ecae1", "#6baed6", "#3182bd", "#31a354"], capsize=3
    )
    m2, e2 = err(al)
    ax[0].errorbar(x[:4], m2[:4], yerr=e2[:, :4], fmt="o", color="k", capsize=3, label="all types")
    ax[0].set_xticks(x, ["k=1", "k=2", "k=3", "k=4", "conf."])
    ax[0].set_ylim(0, 100)
    ax[0].set_title("(a) RQ1: blind rating")
    ax[0].legend(fontsize=7)
    r2 = res["rq2"]
    labels = list(r2["true_per_type"]) + ["foil conf.", "foil fork"]
    ds = list(r2["true_per_type"].values()) + [r2["foil_conformant"], r2["foil_forked"]]
    vals = np.array([np.nan if d["rate"] is None else 100 * d["rate"] for d in ds])
    lo = np.array([np.nan if d["ci_low"] is None else 100 * d["ci_low"] for d in ds])
    hi = np.array([np.nan if d["ci_high"] is None else 100 * d["ci_high"] for d in ds])
    ax[1].bar(
        range(len(ds)),
        np.nan_to_num(vals),
        yerr=np.clip([np.nan_to_num(vals - lo), np.nan_to_num(hi - vals)], 0, None),
        color=["#3182bd"] * 4 + ["#bdbdbd"] * 2,
        capsize=3,
    )
    ax[1].set_xticks(range(len(ds)), labels, rotation=30, fontsize=8)
    ax[1].set_ylim(0, 100)
    ax[1].set_title("(b) RQ2: confirmed (%)")
    dist = {int(k): v for k, v in res["rq3"]["distribution"].items()}
    absd: dict[int, int] = {}
    for k, v in dist.items():
        absd[abs(k)] = absd.get(abs(k), 0) + v
    if absd:
        ks = sorted(absd)
        ax[2].bar(ks, [absd[k] for k in ks], color="#6baed6")
    ax[2].set_title("(c) RQ3: |onset - t_k|")
    ax[2].set_xlabel("assistant turns")
    r4 = res["rq4"]
    bottom = np.zeros(3)
    for ans, col in (("yes", "#31a354"), ("mostly", "#fdae6b"), ("no", "#de2d26")):
        v = np.array(
            [
                (r4[k]["yes"]["count"] if ans == "yes" else r4[k][ans]) / r4[k]["n"] * 100
                if r4[k]["n"]
                else 0
                for k in ("k2", "k3", "k4")
            ]
        )
        ax[3].bar(range(3), v, bottom=bottom, color=col, label=ans)
        bottom += v
    ax[3].set_xticks(range(3), ["k=2", "k=3", "k=4"])
    ax[3].set_title("(d) RQ4: before the fork (%)")
    ax[3].legend(fontsize=7)
    fig.tight_layout()
    path = Path(path)
    try:
        with atomic_path(path, suffix=".png") as tmp:
            fig.savefig(tmp, dpi=120)
    finally:
        plt.close(fig)
    return path


def jsonable(obj: Any) -> Any:
    """``obj`` with numpy scalars converted and NaN replaced by ``None`` (strict JSON).

    Args:
        obj: Any value; mappings (keys made ``str``), lists and tuples are converted recursively.

    Returns:
        The converted value: mappings become dicts, tuples become lists, NaN and infinities
        become None.
    """
    import math

    import numpy as np

    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and (math.isnan(obj) or math.isinf(obj)):
        return None
    return obj


def run_analyses(
    judgments: Iterable[Mapping[str, Any]],
    out_dir: str | Path,
    distances: Mapping[str, Mapping[str, float]] | None = None,
    n_boot: int = N_BOOT,
    seed: int = 0,
    apply_exclusion: bool = True,
    plots: bool = True,
    judge: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Run :func:`annotation.analysis.analyse` and write ``report.md``, ``analyses.json``,
    ``summary.csv`` and (with ``plots``) ``figure8.png`` into ``out_dir`` (atomically).

    Args:
        judgments: The judgments (rows of the study's export; see
            :func:`annotation.analysis.prepare`).
        out_dir: The output folder (created if missing).
        distances: Optional Task-2 distances ``{method: {dialogue_id: distance}}`` (see
            :func:`load_distances`), correlated with the people's ratings.
        n_boot: Bootstrap resamples of every interval.
        seed: Seed of the bootstrap.
        apply_exclusion: Apply the foil exclusion criterion to the people (see
            :func:`annotation.analysis.analyse`).
        plots: Also draw ``figure8.png`` (needs matplotlib).
        judge: The LLM judge's output (:func:`annotation.judge.run_judge`, plus ``model``); its
            rows are analysed the same way (the exclusion criterion is not applied to the
            judge) and become the judge's columns of Table 11 (``analyses.json``:
            ``llm_judge``). None: people only.

    Returns:
        The analyses as written to ``analyses.json``: the :func:`annotation.analysis.analyse`
        result made JSON-safe, plus ``verdicts`` (a reading of RQ1-RQ4) and, with ``judge``,
        ``llm_judge`` (``model``, ``calibration``, ``report``, ``study`` and ``all`` analyses).

    Raises:
        AnswersError: The judgments (or the judge's rows) are malformed.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    res = jsonable(
        analyse(judgments, distances=distances, n_boot=n_boot, seed=seed, apply_exclusion=apply_exclusion)
    )
    res["verdicts"] = verdicts(res)
    judged = None
    if judge is not None:
        judged = {
            "model": judge.get("model"),
            "calibration": judge.get("calibration"),
            "report": judge.get("report"),
            "study": jsonable(analyse(judge["study"], n_boot=n_boot, seed=seed, apply_exclusion=False)),
            "all": (
                jsonable(analyse(judge["all"], n_boot=n_boot, seed=seed, apply_exclusion=False))
                if judge.get("all") is not None
                else None
            ),
        }
        res["llm_judge"] = judged
    write_text_atomic(
        out / "analyses.json", json.dumps(res, ensure_ascii=False, indent=2, allow_nan=False) + "\n"
    )
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=["section", "statistic", "value", "ci_low", "ci_high", "n"])
    w.writeheader()
    w.writerows(summary_rows(res))
    write_text_atomic(out / "summary.csv", buf.getvalue())
    write_text_atomic(out / "report.md", markdown_report(res, judged))
    if plots:
        plot_figure8(res, out / "figure8.png")
    logger.info("analyses written to %s", out)
    return res


def load_answers(path: str | Path) -> list[dict[str, Any]]:
    """Judgments from an exported ``answers.json`` or ``answers.csv`` (completed rows only).

    Args:
        path: The export file; its suffix (``.json`` or ``.csv``) chooses the format. CSV cells
            neutralized against formula injection are restored (:func:`restore_cell`).

    Returns:
        The rows whose ``state`` is the completed state (rows without ``state`` count as
        completed), as dicts (CSV values are strings).

    Raises:
        ValueError: The suffix is neither ``.json`` nor ``.csv``, the JSON is not a list, or the
            JSON is malformed (``json.JSONDecodeError``).
        OSError: The file cannot be read.
    """
    p = Path(path)
    if p.suffix == ".json":
        rows = json.loads(p.read_text(encoding="utf-8"))
        if not isinstance(rows, list):
            raise ValueError(f"{p}: expected a JSON list of answer rows")
    elif p.suffix == ".csv":
        from .security import restore_cell

        with open(p, encoding="utf-8", newline="") as fh:
            rows = [{k: restore_cell(v) for k, v in r.items()} for r in csv.DictReader(fh)]
    else:
        raise ValueError(f"{p}: answers must be a .json or .csv export")
    from .db import DONE

    return [r for r in rows if str(r.get("state", DONE)) == str(DONE)]


def load_distances(path: str | Path) -> dict[str, dict[str, float]]:
    """Task-2 distances: JSON ``{method: {dialogue_id: distance}}`` or CSV with columns
    ``dialogue_id, method, distance``.

    Args:
        path: A ``.json`` file; any other suffix is read as CSV.

    Returns:
        ``{method: {dialogue_id: distance}}`` with float distances.

    Raises:
        ValueError: The JSON is malformed or not a mapping of mappings, a distance is not a
            number, or CSV rows lack a field or a numeric distance (every bad CSV line listed).
        OSError: The file cannot be read.
    """
    p = Path(path)
    if p.suffix == ".json":
        data = json.loads(p.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
            raise ValueError(f"{p}: expected {{method: {{dialogue_id: distance}}}}")
        return {m: {k: float(v) for k, v in d.items()} for m, d in data.items()}
    out: dict[str, dict[str, float]] = {}
    errs = []
    with open(p, encoding="utf-8", newline="") as fh:
        for i, r in enumerate(csv.DictReader(fh), 2):
            try:
                out.setdefault(r["method"], {})[r["dialogue_id"]] = float(r["distance"])
            except (KeyError, TypeError, ValueError):
                errs.append(f"{p}:{i}: needs dialogue_id, method and a numeric distance")
    if errs:
        raise ValueError("\n".join(errs))
    return out
