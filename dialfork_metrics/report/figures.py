"""The benchmark report's PNG figures (matplotlib, imported lazily; each file written atomically)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dialfork_dataset import taxonomy
from dialfork_dataset.atomic import atomic_path

from ..methods import label as _label
from ..methods import regime
from .markdown import PAPER_STREAMING_COVERAGE, PAPER_STREAMING_FALSE_ALARMS, _f

logger = logging.getLogger(__name__)


def _savefig(fig, path: Path) -> None:
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=120, bbox_inches="tight")


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_tau_bars_ci(
    table: Mapping[str, Mapping[str, Any]], ci: Mapping[str, Mapping[str, Any]] | None, title: str, path: Path
) -> list[str]:
    """Grouped bars of a tau table (one group per type and Avg, one bar per method) with the
    bootstrap 95% CIs as error bars, the legend outside the axes. A method whose every cell is 0
    or missing (Random: 0 by definition) gets no bar and no legend entry; it is named under the
    axes instead. Returns the methods drawn.

    Args:
        table: ``{method: {type or "Avg": mean tau or None}}`` (a summary's ``tau``).
        ci: ``{method: {type or "Avg": [low, high] or None}}``, or None for no error bars.
        title: The figure's title.
        path: The PNG file to write (atomically, 120 dpi).

    Returns:
        The methods drawn, in ``table`` order.
    """
    plt = _pyplot()
    import numpy as np

    groups = [*taxonomy.names(), "Avg"]
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
        ax.bar(
            x + i * w - 0.4 + w / 2,
            vals,
            w,
            yerr=err,
            capsize=2,
            label=_label(m),
            color=cmap(i % 10),
            error_kw={"elinewidth": 0.8, "ecolor": "black"},
        )
    ax.axhline(0, color="black", lw=0.8)
    ax.axvline(len(taxonomy.names()) - 0.5, color="grey", lw=0.6, ls=":")
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


def plot_distance_by_k_panels(
    curves: Mapping[str, Mapping[str, Mapping[str, Any]]], title: str, path: Path
) -> list[str]:
    """Task 2: mean distance d_k against fork position k, in each method's own units (not
    rescaled), with its bootstrap 95% CI as a band; one row of panels per method (y shared
    within a row, so the types compare), one column per type. Random is left out (its
    distances are uniform noise by construction). Returns the methods drawn.

    Args:
        curves: :func:`~dialfork_metrics.bench.task2.distance_by_k` output:
            ``{method: {type: {"mean", "low", "high", "n"}}}``.
        title: The figure's title (a caption line is added).
        path: The PNG file to write (atomically); nothing is written when no method is left.

    Returns:
        The methods drawn (empty when none).
    """
    plt = _pyplot()
    import numpy as np

    methods = [m for m in curves if m != "random" and curves[m]]
    if not methods:
        return []
    fig, axes = plt.subplots(
        len(methods),
        len(taxonomy.names()),
        figsize=(2.6 * len(taxonomy.names()), 1.9 * len(methods) + 0.6),
        sharex=True,
        sharey="row",
        squeeze=False,
    )
    ks = np.arange(1, 5)
    for i, m in enumerate(methods):
        for j, h in enumerate(taxonomy.names()):
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
    fig.suptitle(
        title + "\nmean distance to the source dialogue (own units), band: bootstrap 95% CI; "
        "expected to fall with k",
        fontsize=9,
    )
    fig.tight_layout()
    _savefig(fig, path)
    plt.close(fig)
    return methods


def plot_task3_summary(results: Mapping[str, Mapping[str, Any]], title: str, path: Path) -> None:
    """Task 3 side by side, one row per detector: MAE_h and MAE_c (system turns), coverages
    cov_h and cov_c (%), and the Score. Every value is written next to its bar, and a detector
    that flags nothing shows "none flagged" in place of an MAE bar, so a low-coverage detector is
    never an invisible bar.

    Args:
        results: ``{detector: score_predictions(...) result}`` (``mae_h``, ``mae_c``, ``cov_h``,
            ``cov_c``, ``score``).
        title: The figure's title.
        path: The PNG file to write (atomically).
    """
    plt = _pyplot()
    import numpy as np

    dets = list(results)
    y = np.arange(len(dets))
    fig, axes = plt.subplots(
        1, 3, figsize=(13, 0.45 * len(dets) + 1.6), sharey=True, gridspec_kw={"width_ratios": [1.2, 1.2, 1]}
    )
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
    one panel per regime, the paper's w = 0.35 marked; a winner that holds is the top line at every w.

    Args:
        sweep: :func:`~dialfork_metrics.bench.task3.task3_weight_sweep` output (``weights``,
            ``scores``, ``winners``, ``stable``).
        title: The figure's title.
        path: The PNG file to write (atomically).
    """
    plt = _pyplot()

    regimes = list(sweep["winners"])
    fig, axes = plt.subplots(1, len(regimes), figsize=(4.2 * len(regimes) + 1.6, 3.4), squeeze=False)
    ws = [w[0] for w in sweep["weights"]]
    for ax, reg in zip(axes[0], regimes):
        for i, d in enumerate(sorted(d for d in sweep["scores"] if regime(d) == reg)):
            ax.plot(ws, sweep["scores"][d], marker="o", ms=3, label=_label(d), color=f"C{i}")
        top = max([v for d in sweep["scores"] if regime(d) == reg for v in sweep["scores"][d]] + [0.0])
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


def write_figures(report: Mapping[str, Any], out: Path, captions: dict[str, str] | None = None) -> list[Path]:
    """The PNG figures of a report (tau bars with CIs, Task 2 distance by k, Task 3 side by side,
    the Score weight sweep); returns the written paths.

    Args:
        report: The report dict of :func:`~dialfork_metrics.bench.run_benchmark`.
        out: An existing folder; files are named ``task1_tau.png``, ``task2_tau_<encoder>.png``,
            ``task2_distance_by_k_<encoder>.png``, ``task3_summary_<encoder>.png``,
            ``task3_tradeoff_<encoder>.png`` and ``task3_weights_<encoder>.png`` (``/`` in an
            encoder name written ``_``).
        captions: A dict that receives ``{file name: the figure's title}`` of every figure
            written (what ``report.md`` shows under each embedded figure); None: not recorded.

    Returns:
        The paths written, in that order.
    """
    written: list[Path] = []

    def draw(plot, data: Any, title: str, name: str) -> None:
        plot(data, title, out / name)
        written.append(out / name)
        if captions is not None:
            captions[name] = title

    if "task1" in report:
        s = report["task1"]["summary"]
        draw(
            lambda d, t, p: plot_tau_bars_ci(d["tau"], d.get("tau_ci"), t, p),
            s,
            "Task 1: Kendall tau per type",
            "task1_tau.png",
        )
    if "task2" in report:
        for enc, res in report["task2"]["per_encoder"].items():
            safe = enc.replace("/", "_")
            s = res["summary"]
            draw(
                lambda d, t, p: plot_tau_bars_ci(d["tau"], d.get("tau_ci"), t, p),
                s,
                f"Task 2 ({enc}): Kendall tau per type",
                f"task2_tau_{safe}.png",
            )
            if s.get("distance_by_k"):
                draw(
                    plot_distance_by_k_panels,
                    s["distance_by_k"],
                    f"Task 2 ({enc}): distance by fork position",
                    f"task2_distance_by_k_{safe}.png",
                )
    if "task3" in report:
        for enc, res in report["task3"].items():
            safe = enc.replace("/", "_")
            draw(
                plot_task3_summary,
                res["results"],
                f"Task 3 ({enc}): localisation, coverage and Score",
                f"task3_summary_{safe}.png",
            )
            if any(r.get("curve") for r in res["results"].values()):
                draw(
                    plot_task3_tradeoff,
                    res["results"],
                    f"Task 3 ({enc}): coverage vs false alarms",
                    f"task3_tradeoff_{safe}.png",
                )
    for enc, sw in (report.get("task3_weight_sweep") or {}).items():
        safe = enc.replace("/", "_")
        draw(
            plot_weight_sweep,
            sw,
            f"Task 3 ({enc}): Score under other weights (Appendix I)",
            f"task3_weights_{safe}.png",
        )
    return written


def plot_task3_tradeoff(results: Mapping[str, Mapping[str, Any]], title: str, path: Path) -> None:
    """Hallucinated coverage against conformant false-alarm rate per streaming detector (threshold
    swept), each detector's operating point marked, the paper's IT+NC point for reference.

    Args:
        results: ``{detector: result}``; only results with a ``curve`` (``cov_c``, ``cov_h``
            lists) are drawn, their ``cov_c``/``cov_h`` as the operating point.
        title: The figure's title.
        path: The PNG file to write (atomically).
    """
    plt = _pyplot()

    fig, ax = plt.subplots(figsize=(5.6, 4.4))
    for i, (det, r) in enumerate((d, r) for d, r in results.items() if r.get("curve")):
        color = f"C{i}"
        ax.plot(r["curve"]["cov_c"], r["curve"]["cov_h"], color=color, lw=1.4, label=_label(det))
        ax.plot([r["cov_c"]], [r["cov_h"]], marker="o", color=color, ms=7, mec="black")
    ax.plot(
        [PAPER_STREAMING_FALSE_ALARMS],
        [PAPER_STREAMING_COVERAGE],
        marker="*",
        color="black",
        ms=11,
        ls="none",
        label="paper IT+NC (D2F)",
    )
    ax.axvline(0.05, color="grey", lw=0.8, ls="--")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("conformant false-alarm rate (cov_c)")
    ax.set_ylabel("hallucinated coverage (cov_h)")
    ax.set_title(title + "\n(dots: operating points; dashed: 5%)", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    _savefig(fig, path)
    plt.close(fig)
