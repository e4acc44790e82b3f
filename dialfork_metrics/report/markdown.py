"""The benchmark report's Markdown tables, in the paper's layout (Tables 2, 3, 4, 7, 9; Appendix I)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from dialfork_dataset import taxonomy

from ..methods import label as _label
from ..registry import NameView, names, table4_order

logger = logging.getLogger(__name__)


def _f(v: Any, nd: int = 3, pct: bool = False) -> str:
    if v is None:
        return "–"
    if pct:
        return f"{100 * v:.1f}%"
    out = f"{v:.{nd}f}"
    return out[1:] if out.startswith("-") and not out.strip("-0.") else out  # no "-0.000"


def _p(v: Any) -> str:
    if v is None:
        return "–"
    return "<0.001" if v < 0.001 else f"{v:.3f}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub-flavoured Markdown table (cells are written as given, not escaped).

    Args:
        header: The column titles.
        rows: The rows, each a sequence of cell strings (one per column).

    Returns:
        The table's lines joined with newlines (no trailing newline).
    """
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def task1_markdown(t1: Mapping[str, Any]) -> str:
    """Table 2 (Task 1: tau per type and Avg, exact recovery, Fisher p against chance), then
    Appendix J's comparisons when ``t1`` has them.

    Args:
        t1: The report's ``task1`` part (``summary``; optional ``comparisons``, ``encoder``,
            ``encoders``).

    Returns:
        The Markdown text (no trailing newline).
    """
    s = t1["summary"]
    rows = []
    for m, vals in s["tau"].items():
        rows.append(
            [_label(m)]
            + [_f(vals.get(h)) for h in taxonomy.names()]
            + [_f(vals.get("Avg")), _f(s["exact_recovery"].get(m), pct=True), _p(s["fisher_p"].get(m))]
        )
    cross = ", cross-reference protocol" if t1.get("protocol") == "cross" else ""
    md = [
        f"### Table 2. Task 1: set-to-set distance (Kendall tau, {_task1_encoders(t1)}, {s['n_units']} units{cross})",
        "",
        markdown_table(["Method", *taxonomy.names(), "Avg", "Exact recovery", "p (Fisher, vs chance)"], rows),
    ]
    line = control_beats_sentence(
        s["tau"], t1.get("protocol") or "same-source", TASK1_FLOW_METHODS, TASK1_CONTROLS
    )
    md += ["", line] if line else []
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
    paired Wilcoxon, Holm within this family).

    Args:
        comp: :func:`~dialfork_metrics.bench.task1.task1_comparisons` rows.

    Returns:
        The Markdown text (no trailing newline).
    """
    rows = [
        [
            _label(r["a"]),
            _label(r["b"]),
            str(r["n_units"]),
            _f(r["mean_diff"]),
            f"[{_f(r['ci_low'])}, {_f(r['ci_high'])}]",
            _p(r["p"]),
            _p(r["p_holm"]),
        ]
        for r in comp
    ]
    return "\n".join(
        [
            "Appendix J. FlowKL against each method (Delta tau per unit; paired bootstrap 95% CI; "
            "two-sided paired Wilcoxon, Holm within this family):",
            "",
            markdown_table(
                ["A", "B", "units", "mean Delta tau (A - B)", "95% CI (bootstrap)", "p Wilcoxon", "p (Holm)"],
                rows,
            ),
        ]
    )


def _protocol_suffix(part: Mapping[str, Any]) -> str:
    """``""`` for the paper's same-source protocol (its tables read as before), else the protocol."""
    if part.get("protocol") != "cross":
        return ""
    n = part.get("n_references")
    if not n:
        return ", cross-reference protocol"
    return f", cross-reference protocol ({n} reference{'' if n == 1 else 's'} per fork)"


def task2_markdown(t2: Mapping[str, Any]) -> str:
    """Table 3 per encoder (Task 2: tau per type and Avg), then Table 7 when ``t2`` has the
    significance rows. Under the cross protocol the titles say so; a sentence follows each
    Table 3 saying whether a control beats a flow-aware method (:func:`control_beats_sentence`).

    Args:
        t2: The report's ``task2`` or ``task2_cross`` part (``per_encoder``; optional
            ``significance``, ``protocol``, ``n_references``).

    Returns:
        The Markdown text (no trailing newline).
    """
    md = []
    suffix = _protocol_suffix(t2)
    for enc, res in t2["per_encoder"].items():
        s = res["summary"]
        rows = [
            [_label(m)] + [_f(vals.get(h)) for h in taxonomy.names()] + [_f(vals.get("Avg"))]
            for m, vals in s["tau"].items()
        ]
        md += [
            f"### Table 3. Task 2: dialogue-to-dialogue distance (Kendall tau, encoder `{enc}`, {s['n_units']} units"
            f"{suffix})",
            "",
            markdown_table(["Method", *taxonomy.names(), "Avg"], rows),
            "",
        ]
        line = control_beats_sentence(
            s["tau"], t2.get("protocol") or "same-source", TASK2_FLOW_METHODS, TASK2_CONTROLS
        )
        md += [line, ""] if line else []
    sig = t2.get("significance") or []
    if sig:
        rows = [
            [
                r["encoder"],
                _label(r["method"]),
                str(r["n_units"]),
                _f(r["mean_diff"]),
                f"[{_f(r['ci_low'])}, {_f(r['ci_high'])}]",
                _stat(r.get("W"), 0),
                _p(r["p_wilcoxon_holm"]),
                _stat(r.get("t"), 2),
                _p(r["p_ttest_holm"]),
            ]
            for r in sig
        ]
        md += [
            f"### Table 7. FlowScore against each method (tau difference per unit; one-sided tests, Holm across "
            f"encoders{suffix})",
            "",
            markdown_table(
                [
                    "Encoder",
                    "Method",
                    "N",
                    "Mean Delta",
                    "95% CI (bootstrap)",
                    "W",
                    "p W (Holm)",
                    "t",
                    "p t (Holm)",
                ],
                rows,
            ),
        ]
    return "\n".join(md)


#: The flow-aware methods and the controls whose order the reports put in words (issue 38): live
#: views of the metric registry's ``flow_aware`` and ``control`` flags.
TASK2_FLOW_METHODS: Sequence[str] = NameView(lambda: names("pair", flow_aware=True))
TASK2_CONTROLS: Sequence[str] = NameView(lambda: names("pair", control=True))
TASK1_FLOW_METHODS: Sequence[str] = NameView(lambda: names("set", flow_aware=True))
TASK1_CONTROLS: Sequence[str] = NameView(lambda: names("set", control=True))
_PROTOCOL_WORDS = {
    "same-source": "the same-source protocol (the paper's: each fork against its own source)",
    "cross": "the cross-reference protocol (references from other scenarios: nothing copied from the "
    "fork's source)",
}


def control_beats_sentence(
    tau: Mapping[str, Mapping[str, Any]], protocol: str, flow_methods: Sequence[str], controls: Sequence[str]
) -> str:
    """One sentence saying, in words, which control beats (or ties with, at three decimals) which
    flow-aware method on average tau under a protocol, and what that means: the protocol rewards
    what the control measures (copied opening turns, length) rather than the flow; or that no
    control does.

    Args:
        tau: A summary's ``tau`` table (method -> ``"Avg"`` -> mean tau).
        protocol: ``"same-source"`` or ``"cross"``.
        flow_methods: The flow-aware methods (e.g. FlowScore, FlowDTW).
        controls: The controls (e.g. Shared prefix, the length diffs, Random).

    Returns:
        The sentence (Markdown, no trailing newline); ``""`` when the table has no flow-aware method
        or no control.
    """
    avg = {m: (tau.get(m) or {}).get("Avg") for m in (*flow_methods, *controls)}
    flows = [m for m in flow_methods if avg.get(m) is not None]
    ctrls = [m for m in controls if avg.get(m) is not None]
    if not flows or not ctrls:
        return ""
    where = _PROTOCOL_WORDS.get(protocol, protocol)
    parts, who = [], []
    for c in ctrls:
        beats = [f for f in flows if round(avg[c], 3) > round(avg[f], 3)]
        ties = [f for f in flows if round(avg[c], 3) == round(avg[f], 3)]
        for verb, fs in (("beats", beats), ("ties with", ties)):
            if fs:
                parts.append(
                    f"{_label(c)} (tau {avg[c]:.3f}) {verb} "
                    + " and ".join(f"{_label(f)} ({avg[f]:.3f})" for f in fs)
                )
                who.append(c)
    if not parts:
        return (
            f"Under {where} no control ({', '.join(_label(c) for c in ctrls)}) beats or ties with "
            f"{' or '.join(_label(f) for f in flows)} on average tau."
        )
    copying = "shared_prefix" in who
    why = (
        "a distance that only counts the opening turns a fork shares with its reference ranks the forks as well as "
        "the flow-aware metric or better, so this protocol rewards copying the source's prefix and cannot tell a "
        "flow-aware metric from turn copying"
        if copying
        else "a control that ignores the flow ranks the forks as well as the flow-aware metric or better, so under this "
        "protocol the ranking is carried by what the control measures (length or chance), not by the flow"
    )
    return (
        f"**Under {where}, a control beats or ties with a flow-aware method:** {'; '.join(parts)}. That is, "
        f"{why}."
    )


def task2_protocols_markdown(same: Mapping[str, Any], cross: Mapping[str, Any]) -> str:
    """Tables 3 and 7 under both protocols side by side (issue 38): per encoder, each method's tau
    per type and Avg under the same-source protocol, then under the cross-reference protocol, and
    a sentence under the table for each protocol where a control beats a flow-aware method;
    then Table 7 (FlowScore against each method) under both.

    Args:
        same: The report's ``task2`` part (same-source).
        cross: The report's ``task2_cross`` part.

    Returns:
        The Markdown text (no trailing newline).
    """
    n = cross.get("n_references")
    md = []
    for enc in [e for e in same["per_encoder"] if e in cross["per_encoder"]]:
        s, c = same["per_encoder"][enc]["summary"], cross["per_encoder"][enc]["summary"]
        methods = list(dict.fromkeys([*s["tau"], *c["tau"]]))
        rows = [
            [_label(m)]
            + [_f((s["tau"].get(m) or {}).get(h)) for h in (*taxonomy.names(), "Avg")]
            + [_f((c["tau"].get(m) or {}).get(h)) for h in (*taxonomy.names(), "Avg")]
            for m in methods
        ]
        md += [
            f"### Table 3. Task 2: dialogue-to-dialogue distance (Kendall tau, encoder `{enc}`): same-source "
            f"({s['n_units']} units) | cross-reference ({c['n_units']} units, {n} reference{'' if n == 1 else 's'} per fork)",
            "",
            markdown_table(
                [
                    "Method",
                    *(f"same {h}" for h in taxonomy.names()),
                    "**same Avg**",
                    *(f"cross {h}" for h in taxonomy.names()),
                    "**cross Avg**",
                ],
                rows,
            ),
            "",
        ]
        for p, t in (("same-source", s["tau"]), ("cross", c["tau"])):
            line = control_beats_sentence(t, p, TASK2_FLOW_METHODS, TASK2_CONTROLS)
            if line:
                md += [line, ""]
    sig = {
        p: {(r["encoder"], r["method"]): r for r in (part.get("significance") or [])}
        for p, part in (("same-source", same), ("cross", cross))
    }
    keys = list(dict.fromkeys([*sig["same-source"], *sig["cross"]]))
    if keys:

        def cells(r):
            if r is None:
                return ["–", "–", "–"]
            return [_f(r["mean_diff"]), f"[{_f(r['ci_low'])}, {_f(r['ci_high'])}]", _p(r["p_wilcoxon_holm"])]

        rows = [
            [e, _label(m)] + cells(sig["same-source"].get((e, m))) + cells(sig["cross"].get((e, m)))
            for e, m in keys
        ]
        md += [
            "### Table 7. FlowScore against each method (tau difference per unit; one-sided Wilcoxon, Holm across "
            "encoders): same-source | cross-reference",
            "",
            markdown_table(
                [
                    "Encoder",
                    "Method",
                    "same Mean Delta",
                    "same 95% CI",
                    "same p W (Holm)",
                    "cross Mean Delta",
                    "cross 95% CI",
                    "cross p W (Holm)",
                ],
                rows,
            ),
        ]
    return "\n".join(md)


def task1_protocols_markdown(same: Mapping[str, Any], cross: Mapping[str, Any]) -> str:
    """Table 2 (Task 1) under both protocols side by side: tau per type and Avg, and exact recovery,
    same-source then cross-reference (the reference set from sources disjoint from the forks'),
    with a sentence for each protocol where a control beats FlowKL.

    Args:
        same: The report's ``task1`` part.
        cross: The report's ``task1_cross`` part.

    Returns:
        The Markdown text (no trailing newline).
    """
    s, c = same["summary"], cross["summary"]
    methods = list(dict.fromkeys([*s["tau"], *c["tau"]]))
    rows = [
        [_label(m)]
        + [_f((s["tau"].get(m) or {}).get(h)) for h in (*taxonomy.names(), "Avg")]
        + [_f(s["exact_recovery"].get(m), pct=True)]
        + [_f((c["tau"].get(m) or {}).get(h)) for h in (*taxonomy.names(), "Avg")]
        + [_f(c["exact_recovery"].get(m), pct=True)]
        for m in methods
    ]
    md = [
        f"### Table 2. Task 1: set-to-set distance (Kendall tau, {_task1_encoders(same)}): same-source "
        f"({s['n_units']} units) | cross-reference ({c['n_units']} units; reference set from half of each task's "
        f"sources, forks from the other half)",
        "",
        markdown_table(
            [
                "Method",
                *(f"same {h}" for h in taxonomy.names()),
                "**same Avg**",
                "same exact",
                *(f"cross {h}" for h in taxonomy.names()),
                "**cross Avg**",
                "cross exact",
            ],
            rows,
        ),
        "",
    ]
    for p, t in (("same-source", s["tau"]), ("cross", c["tau"])):
        line = control_beats_sentence(t, p, TASK1_FLOW_METHODS, TASK1_CONTROLS)
        if line:
            md += [line, ""]
    for name, part in (("same-source", same), ("cross-reference", cross)):
        if part.get("comparisons"):
            md += [f"{name}: " + task1_comparisons_markdown(part["comparisons"]), ""]
    return "\n".join(md).rstrip("\n")


def _task3_rows(results: Mapping[str, Mapping[str, Any]]) -> list[list[str]]:
    rows = []
    for det, r in results.items():
        by = r.get("mae_h_by_type", {})
        rows.append(
            [_label(det)]
            + [_f(by.get(h), 2) for h in table4_order()]
            + [
                _f(r["mae_h"], 2),
                _f(r["cov_h"], pct=True),
                _f(r["mae_c"], 2),
                _f(r["cov_c"], pct=True),
                _f(r["score"], 2),
            ]
        )
    return rows


def _task3_header() -> list[str]:
    return [
        "Detector",
        *(f"MAE_h {h}" for h in table4_order()),
        "MAE_h",
        "cov_h",
        "MAE_c",
        "cov_c",
        "Score",
    ]


#: The paper's best streaming detector (IT+NC, D2F, Table 4): hallucinated coverage at its false alarms.
PAPER_STREAMING_COVERAGE = 0.9382
PAPER_STREAMING_FALSE_ALARMS = 0.0558


def _settings_text(s: Mapping[str, Any] | None) -> str:
    if not s:
        return "–"
    return (
        f"{s['calibration']}, {'backoff' if s['backoff'] else 'no backoff'}, thr {s['distance_threshold']:g}, "
        f"{s['scope']}, N={s['order']}"
        + (f", position weight {s['position_weight']:g}" if s.get("position_weight") else "")
    )


def task3_markdown(t3: Mapping[str, Any]) -> str:
    """Tables 4 and 9 per encoder (Task 3 in system turns), each followed by the operating-point
    table, the Table 9 protocol rows when present and the ablations.

    Args:
        t3: The report's ``task3`` part: encoder -> :func:`~dialfork_metrics.bench.task3.run_task3`
            result (at least one detector per encoder).

    Returns:
        The Markdown text (no trailing newline).
    """
    md = []
    for enc, res in t3.items():
        any_r = next(iter(res["results"].values()))
        preset = res.get("preset", "selected")
        how = (
            "settings chosen by cross-validation on train sources"
            if res.get("selection")
            else f"preset `{preset}`"
        )
        md += [
            f"### Tables 4 and 9. Task 3: first deviating turn, MAEs in system turns (encoder `{enc}`; {res['n_train']} train, "
            f"{res['n_test']} test dialogues; MAE_h_ref {_f(any_r['mae_h_ref'], 2)}, MAE_c_ref {_f(any_r['mae_c_ref'], 2)}; "
            f"streaming rows: {how}, operating point {100 * res.get('false_alarm_rate', 0.05):g}% false alarms)",
            "",
            markdown_table(_task3_header(), _task3_rows(res["results"])),
            "",
        ]
        md += [task3_operating_markdown(res), ""]
        for key, title in (("table9", f"Table 9 protocol (the paper's settings, N=3; encoder `{enc}`)"),):
            if res.get(key):
                md += [f"#### {title}", "", markdown_table(_task3_header(), _task3_rows(res[key])), ""]
        md += [task3_ablation_markdown(res, enc), ""]
    return "\n".join(md)


def task3_operating_markdown(res: Mapping[str, Any]) -> str:
    """Per streaming detector: its settings, the coverage at 1/5/10% conformant false alarms
    (read off the trade-off curve on test) and the distance to the paper's 93.82%.

    Args:
        res: One encoder's :func:`~dialfork_metrics.bench.task3.run_task3` result; rows come from
            results with ``coverage_at``, plus a line on ``selection`` when present.

    Returns:
        The Markdown text, or ``""`` when no result has ``coverage_at``.
    """
    rows = []
    for det, r in res["results"].items():
        cov = r.get("coverage_at")
        if not cov:
            continue
        c5 = cov.get("0.05")
        rows.append(
            [
                _label(det),
                _settings_text(r.get("settings")),
                _f(r["cov_c"], pct=True),
                _f(r["cov_h"], pct=True),
                _f(cov.get("0.01"), pct=True),
                _f(c5, pct=True),
                _f(cov.get("0.1"), pct=True),
                "–" if c5 is None else f"{100 * (c5 - PAPER_STREAMING_COVERAGE):+.1f} pts",
            ]
        )
    if not rows:
        return ""
    out = [
        "Streaming detectors at their operating point, and the hallucinated coverage at 1%, 5% and 10% conformant "
        "false alarms (threshold swept on test; paper, IT+NC with D2F: 93.82% coverage at 5.58% false alarms):",
        "",
        markdown_table(
            [
                "Detector",
                "settings",
                "cov_c (false alarms)",
                "cov_h",
                "cov_h @1% FA",
                "cov_h @5% FA",
                "cov_h @10% FA",
                "@5% vs paper 93.82%",
            ],
            rows,
        ),
    ]
    sel = res.get("selection")
    if sel:
        m = sel.get("meta", {})
        out += [
            "",
            f"Selection: {m.get('n_folds')}-fold cross-validation over {m.get('n_sources')} train sources "
            f"({m.get('n_records')} train dialogues), {len(sel.get('table', []))} (detector, setting) rows, "
            f"target {100 * m.get('false_alarm_rate', 0.05):g}% + {100 * m.get('tolerance', 0.01):g} pts.",
        ]
    return "\n".join(out)


def task3_ablation_markdown(res: Mapping[str, Any], enc: str) -> str:
    """The N-gram order and fitting-scope ablations (Score, cov_c, cov_h per detector).

    Args:
        res: One encoder's :func:`~dialfork_metrics.bench.task3.run_task3` result
            (``ablation_order``, ``ablation_scope``, when present).
        enc: The encoder's name, for the headings.

    Returns:
        The Markdown text; ``""`` without ablations.
    """
    md = []
    for key, what in (("ablation_order", "N-gram order N"), ("ablation_scope", "fitting scope")):
        ab = res.get(key)
        if not ab:
            continue
        dets = list(next(iter(ab.values())))
        rows = [
            [str(v)]
            + [
                f"{_f(r[d]['score'], 1)} ({_f(r[d]['cov_c'], pct=True)} / {_f(r[d]['cov_h'], pct=True)})"
                for d in dets
            ]
            for v, r in ab.items()
        ]
        md += [
            f"#### Ablation: {what} (encoder `{enc}`; other settings as in the main rows; "
            f"{res.get('ablation_n_test', res['n_test'])} test dialogues). Score (cov_c / cov_h)",
            "",
            markdown_table([what, *(_label(d) for d in dets)], rows),
            "",
        ]
    return "\n".join(md)


def _stat(v: Any, nd: int) -> str:
    return "–" if v is None else f"{v:,.{nd}f}"


def task3_all_turns_markdown(t3: Mapping[str, Any]) -> str:
    """Task 3 MAEs in all turns (user + system), the unit of the paper's Table 4; the Score is
    unit-free and stays in the system-turn table.

    Args:
        t3: The report's ``task3`` part (encoder -> result); results without ``all_turns`` are
            left out.

    Returns:
        The Markdown text; ``""`` when no result has ``all_turns``.
    """
    md = []
    for enc, res in t3.items():
        rows = []
        for det, r in res["results"].items():
            a = r.get("all_turns")
            if a is None:
                continue
            by = a.get("mae_h_by_type", {})
            rows.append(
                [_label(det)]
                + [_f(by.get(h), 2) for h in table4_order()]
                + [_f(a["mae_h"], 2), _f(a["mae_c"], 2)]
            )
        if not rows:
            continue
        a = next(r["all_turns"] for r in res["results"].values() if r.get("all_turns"))
        md += [
            f"### Table 4 (paper's unit). Task 3 MAEs in all turns, user + system (encoder `{enc}`; "
            f"MAE_h_ref {_f(a['mae_h_ref'], 2)}, MAE_c_ref {_f(a['mae_c_ref'], 2)}; coverages and Score as above)",
            "",
            markdown_table(["Detector", *(f"MAE_h {h}" for h in table4_order()), "MAE_h", "MAE_c"], rows),
            "",
        ]
    return "\n".join(md)


def weight_sweep_markdown(sweep: Mapping[str, Mapping[str, Any]]) -> str:
    """Appendix I: the winner of each regime (and its Score) for each weight vector of the grid.

    Args:
        sweep: Encoder -> :func:`~dialfork_metrics.bench.task3.task3_weight_sweep` output.

    Returns:
        The Markdown text (no trailing newline).
    """
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
        md += [
            f"### Appendix I. Task 3 Score weights (encoder `{enc}`): winner of each regime per weight vector",
            "",
            markdown_table(
                ["w (MAE_h / MAE_c / cov_h / cov_c)", *(f"winner {reg} (Score)" for reg in regimes)], rows
            ),
            "",
            f"Same winner at every weight: {stable}.",
            "",
        ]
    return "\n".join(md)


def figures_markdown(figures: Sequence[tuple[str, str]]) -> str:
    """The report's Figures section: each figure embedded (``![caption](file)``, a path relative
    to ``report.md``, so the report shows them wherever the folder is read) with its caption.

    Args:
        figures: ``(file name, caption)`` of each figure, in the order shown.

    Returns:
        The Markdown text (no trailing newline); ``""`` without figures.
    """
    if not figures:
        return ""
    md = ["## Figures", ""]
    for name, caption in figures:
        alt = caption.replace("[", "(").replace("]", ")")
        md += [f"![{alt}]({name})", "", f"*{caption}* (`{name}`)", ""]
    return "\n".join(md).rstrip("\n")


def report_markdown(report: Mapping[str, Any], figures: Sequence[tuple[str, str]] = ()) -> str:
    """The whole benchmark report (``report.md``): a header with the data, encoders, seed and
    timings, the table of each task run, the weight sweep, the figures and the skipped units
    (first 50).

    Args:
        report: The report dict of :func:`~dialfork_metrics.bench.run_benchmark` (``meta``,
            ``timings``, and the task parts present).
        figures: ``(file name, caption)`` of the figures written next to ``report.md``, embedded
            in a Figures section (:func:`figures_markdown`); empty: no section.

    Returns:
        The Markdown text, ending with a newline.
    """
    meta = report["meta"]
    t = report["timings"]
    md = [
        "# DialFork benchmark report",
        "",
        f"Data: `{meta['data']}` (fingerprint `{meta['fingerprint'][:16]}`), {meta['n_records']:,} dialogues "
        f"({meta['n_conformant']:,} conformant). Encoders: {', '.join(f'`{e}`' for e in meta['encoders'])}. "
        f"Seed {meta['seed']}. Wall time {t['total']:.1f} s, of which encoding {100 * t['encoding_share']:.1f}%.",
        "",
    ]
    if "task1" in report and "task1_cross" in report:
        md += [task1_protocols_markdown(report["task1"], report["task1_cross"]), ""]
    elif "task1" in report or "task1_cross" in report:
        md += [task1_markdown(report.get("task1") or report["task1_cross"]), ""]
    if "task2" in report and "task2_cross" in report:
        md += [task2_protocols_markdown(report["task2"], report["task2_cross"]), ""]
    elif "task2" in report or "task2_cross" in report:
        md += [task2_markdown(report.get("task2") or report["task2_cross"]), ""]
    if "task3" in report:
        md += [task3_markdown(report["task3"]), ""]
        md += [task3_all_turns_markdown(report["task3"]), ""]
    if report.get("task3_weight_sweep"):
        md += [weight_sweep_markdown(report["task3_weight_sweep"]), ""]
    if figures:
        md += [figures_markdown(figures), ""]
    sk = report.get("skipped") or []
    md += (
        [f"Skipped units: {len(sk)}"]
        + [f"- {s}" for s in sk[:50]]
        + ([f"- ... ({len(sk) - 50} more)"] if len(sk) > 50 else [])
    )
    return "\n".join(md) + "\n"
