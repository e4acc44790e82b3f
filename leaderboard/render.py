"""The leaderboard page: one self-contained static HTML file (no external request).

Rows are rendered server-side (escaped; the page is readable without JavaScript); a small
inline script adds sortable columns (click a header; missing values sort last), the regime
filter and the toggle of the paper's reference rows. A Content-Security-Policy meta tag
(``default-src 'none'``) makes the browser refuse any request the page might try to make.

Private scores are shown only when the maintainers reveal them: pass the private area
(``--private DIR``) and ``reveal_private=True``.
"""

from __future__ import annotations

import html
import json
import logging
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from functools import cache
from pathlib import Path
from typing import Any

from dialfork_dataset.taxonomy import table3_order
from dialfork_metrics.registry import table4_order

from .store import load_results

logger = logging.getLogger(__name__)

TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"
DATA_DIR = Path(__file__).resolve().parent / "data"
REGIME_LABELS = {
    "streaming": "streaming",
    "offline": "offline",
    "streaming+workflow": "streaming + workflow",
    "offline+workflow": "offline + workflow",
    "baseline": "baseline",
}
#: Regimes given the ground-truth workflow: ranked in a table of their own, never beside the
#: workflow-free rows (SPEC 8's streaming regime has no workflow).
WORKFLOW_REGIMES = ("streaming+workflow", "offline+workflow")
_URL_RE = re.compile(r"https?://[^\s\"<>]+")
#: A Hugging Face Hub model id (``org/name``): the model column links to its Hub page.
_HUB_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}")
CODE_URL = "https://github.com/idiap/dialfork"
#: Template tokens of page.html; each is substituted once, in the template only (see :func:`fill_template`).
_TOKEN_RE = re.compile(r"@([A-Z]+)@")


@cache
def _template(name: str) -> str:
    return (TEMPLATE_DIR / name).read_text(encoding="utf-8")


@cache
def paper_baselines() -> dict[str, Any]:
    """The paper's reference rows (``data/paper_baselines.json``)."""
    with open(DATA_DIR / "paper_baselines.json", encoding="utf-8") as fh:
        return json.load(fh)


def _esc(s: Any) -> str:
    return html.escape("" if s is None else str(s), quote=True)


def _safe_url(u: Any) -> str | None:
    return u if isinstance(u, str) and len(u) <= 300 and _URL_RE.fullmatch(u) else None


def model_url(md: Mapping[str, Any]) -> str | None:
    """The metadata's ``model_url``, else the Hub page of a ``model_name`` shaped like a Hub id.

    Args:
        md: A result's metadata.

    Returns:
        A safe ``model_url`` (an http(s) URL of at most 300 characters), else
        ``https://huggingface.co/<model_name>`` when the name looks like ``owner/name``, else
        None.
    """
    url = _safe_url(md.get("model_url"))
    if url:
        return url
    name = md.get("model_name")
    if isinstance(name, str) and _HUB_ID_RE.fullmatch(name) and ".." not in name:
        return f"https://huggingface.co/{name}"
    return None


def _ci(x: Any) -> tuple[float, float] | None:
    if isinstance(x, list | tuple) and len(x) == 2:
        lo, hi = _num(x[0]), _num(x[1])
        if lo is not None and hi is not None:
            return lo, hi
    return None


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, int | float):
        return None
    x = float(x)
    return x if x == x and abs(x) != float("inf") else None


# --------------------------------------------------------------------------- rows


def _pct(x: Any) -> float | None:
    v = _num(x)
    return None if v is None else 100.0 * v


def detector_row(result: Mapping[str, Any], private: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A display row from a detector-track result (coverages in percent).

    Args:
        result: A stored detector-track result (public scores under ``scores.public``).
        private: Its private twin, when the private Score should be shown; None leaves
            ``private_score`` None.

    Returns:
        The row: ``kind`` ``"result"``, the method, submitter and metadata columns, safe links,
        ``mae_by_type`` (Table 4 order), ``mae_h``, ``cov_h_pct``, ``mae_c``, ``cov_c_pct``,
        ``score``, ``score_ci``, ``n`` (dialogues), ``date`` (YYYY-MM-DD), ``key`` and
        ``private_score``; a number that is missing or not finite is None.
    """
    md = result.get("metadata") or {}
    sc = (result.get("scores") or {}).get("public") or {}
    by_type = sc.get("mae_h_by_type") or {}
    row = {
        "kind": "result",
        "method": result.get("method") or md.get("method"),
        "submitter": result.get("submitter"),
        "regime": md.get("regime"),
        "model_name": md.get("model_name"),
        "model_size": md.get("model_size"),
        "open_source": md.get("open_source"),
        "used_train": md.get("used_conformant_train"),
        "code_url": _safe_url(md.get("code_url")),
        "model_url": model_url(md),
        "mae_by_type": {h: _num(by_type.get(h)) for h in table4_order()},
        "mae_h": _num(sc.get("mae_h")),
        "cov_h_pct": _pct(sc.get("cov_h")),
        "mae_c": _num(sc.get("mae_c")),
        "cov_c_pct": _pct(sc.get("cov_c")),
        "score": _num(sc.get("score")),
        "score_ci": _ci(sc.get("score_ci")),
        "n": (sc.get("counts") or {}).get("dialogues"),
        "date": (result.get("submitted_at") or "")[:10],
        "key": result.get("key"),
        "private_score": None,
    }
    if private is not None:
        ps = (private.get("scores") or {}).get("private") or {}
        row["private_score"] = _num(ps.get("score"))
    return row


def metric_row(result: Mapping[str, Any], private: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A display row from a metric-track result (exact recovery in percent).

    Args:
        result: A stored metric-track result (public scores under ``scores.public``).
        private: Its private twin, when the private Avg. tau should be shown; None leaves
            ``private_score`` None.

    Returns:
        The row: ``kind`` ``"result"``, the method, submitter and metadata columns, safe links,
        ``tau_by_type`` (Table 3 order), ``tau``, ``tau_ci``, ``exact_pct``, ``n`` (units),
        ``date`` (YYYY-MM-DD), ``key`` and ``private_score``; a number that is missing or not
        finite is None.
    """
    md = result.get("metadata") or {}
    sc = (result.get("scores") or {}).get("public") or {}
    by_type = sc.get("tau_by_type") or {}
    row = {
        "kind": "result",
        "method": result.get("method") or md.get("method"),
        "submitter": result.get("submitter"),
        "model_name": md.get("model_name"),
        "open_source": md.get("open_source"),
        "code_url": _safe_url(md.get("code_url")),
        "model_url": model_url(md),
        "tau_by_type": {h: _num(by_type.get(h)) for h in table3_order()},
        "tau": _num(sc.get("tau")),
        "tau_ci": _ci(sc.get("tau_ci")),
        "exact_pct": _pct(sc.get("exact_recovery")),
        "n": (sc.get("counts") or {}).get("units"),
        "date": (result.get("submitted_at") or "")[:10],
        "key": result.get("key"),
        "private_score": None,
    }
    if private is not None:
        ps = (private.get("scores") or {}).get("private") or {}
        row["private_score"] = _num(ps.get("tau"))
    return row


def reference_rows(track: str) -> list[dict[str, Any]]:
    """The paper's baselines of a track as display rows (``kind`` ``"reference"``, no rank).

    Args:
        track: ``"detector"`` or ``"metric"``.

    Returns:
        One row per baseline, with the columns of :func:`detector_row` or :func:`metric_row`
        (submitter ``"paper (SOURCE)"``; columns the paper does not report are None).
    """
    out = []
    for r in paper_baselines()[track]:
        row = {
            "kind": "reference",
            "submitter": f"paper ({r.get('source', '')})",
            "code_url": None,
            "date": "",
            "model_url": model_url({"model_name": r.get("model_name")}),
            "score_ci": None,
            "tau_ci": None,
            "model_name": r.get("model_name"),
            "private_score": None,
            "n": None,
            "key": None,
            "method": r["method"],
        }
        if track == "detector":
            row.update(
                {
                    "regime": r.get("regime"),
                    "model_size": r.get("model_size"),
                    "open_source": None,
                    "used_train": None,
                    "mae_by_type": {h: _num(r.get("mae_by_type", {}).get(h)) for h in table4_order()},
                    "mae_h": _num(r.get("mae_h")),
                    "cov_h_pct": _num(r.get("cov_h_pct")),
                    "mae_c": _num(r.get("mae_c")),
                    "cov_c_pct": _num(r.get("cov_c_pct")),
                    "score": _num(r.get("score")),
                }
            )
        else:
            row.update(
                {
                    "open_source": None,
                    "tau_by_type": {h: _num(r.get("tau_by_type", {}).get(h)) for h in table3_order()},
                    "tau": _num(r.get("tau")),
                    "exact_pct": None,
                }
            )
        out.append(row)
    return out


def build_rows(
    results: Iterable[Mapping[str, Any]],
    private: Mapping[str, Mapping[str, Any]] | None = None,
    include_reference: bool = True,
) -> dict[str, list[dict[str, Any]]]:
    """``{"detector": rows, "metric": rows}``: results ranked by Score / tau (best first,
    missing last), ``rank`` 1..n, then the paper's reference rows (no rank). A detector row's
    ``group`` is ``"workflow"`` for the regimes given the workflow (:data:`WORKFLOW_REGIMES`), else
    ``"free"``; each group is ranked on its own (the page shows one table per group).

    Args:
        results: The stored public results; one with an unknown ``track`` is skipped with a
            warning.
        private: Private twins by result key; None: no private scores.
        include_reference: Append the paper's baselines to each track (default True).

    Returns:
        The rows of each track. Ties are broken by date, then method name.
    """
    out: dict[str, list[dict[str, Any]]] = {"detector": [], "metric": []}
    private = private or {}
    for r in results:
        track = r.get("track")
        if track not in out:
            logger.warning("skipping a result with unknown track %r (%s)", track, r.get("key"))
            continue
        make = detector_row if track == "detector" else metric_row
        out[track].append(make(r, private.get(r.get("key"))))
    for track, key in (("detector", "score"), ("metric", "tau")):
        rows = out[track]
        rows.sort(
            key=lambda x: (x[key] is None, -(x[key] or 0.0), x.get("date") or "", x.get("method") or "")
        )
        seen: dict[str, int] = {}
        for row in rows:
            group = _group(row) if track == "detector" else "all"
            seen[group] = seen.get(group, 0) + 1
            row["group"], row["rank"] = group, seen[group]
        if include_reference:
            refs = reference_rows(track)
            for row in refs:
                row["group"] = _group(row) if track == "detector" else "all"
            rows.extend(refs)
    return out


def _group(row: Mapping[str, Any]) -> str:
    return "workflow" if row.get("regime") in WORKFLOW_REGIMES else "free"


# --------------------------------------------------------------------------- HTML


def _fmt(v: float | None, nd: int = 2) -> str:
    return "\u2014" if v is None else f"{v:.{nd}f}"


def _td_num(v: float | None, nd: int = 2, cls: str = "") -> str:
    c = " ".join(x for x in (cls, "na" if v is None else "") if x)
    attr = f' class="{c}"' if c else ""
    data = "" if v is None else f' data-value="{v!r}"'
    return f"<td{attr}{data}>{_fmt(v, nd)}</td>"


def _td_score(v: float | None, ci: tuple[float, float] | None, nd: int, what: str) -> str:
    """The main metric's cell, with its bootstrap interval underneath when one was computed."""
    c = "score" + (" na" if v is None else "")
    data = "" if v is None else f' data-value="{v!r}"'
    inner = _fmt(v, nd)
    title = ""
    if ci is not None and v is not None:
        inner += f'<span class="ci">[{ci[0]:.{nd}f}, {ci[1]:.{nd}f}]</span>'
        title = f' title="95% bootstrap interval of the {_esc(what)} (public part)"'
    return f'<td class="{c}"{data}{title}>{inner}</td>'


def _td_txt(text: Any, value: Any = None, inner: str | None = None) -> str:
    v = text if value is None else value
    data = "" if v is None or v == "" else f' data-value="{_esc(v)}"'
    return (
        f'<td class="txt"{data}>{inner if inner is not None else _esc(text if text is not None else "")}</td>'
    )


def _bool(v: Any) -> str:
    return "\u2014" if v is None else ("yes" if v else "no")


def _link(url: str, text: str) -> str:
    return f'<a href="{_esc(url)}" rel="noopener noreferrer nofollow" target="_blank">{text}</a>'


def _method_cell(row: Mapping[str, Any]) -> str:
    inner = _esc(row.get("method") or "?")
    if row.get("kind") == "reference":
        inner += ' <span class="badge">paper</span>'
    return _td_txt(row.get("method"), inner=inner)


def _model_cell(row: Mapping[str, Any]) -> str:
    name = row.get("model_name")
    url = row.get("model_url")
    if not name:
        return _td_txt(name)
    return _td_txt(name, inner=_link(url, _esc(name)) if url else _esc(name))


def _code_cell(row: Mapping[str, Any]) -> str:
    url = row.get("code_url")
    if not url:
        return _td_txt("")
    return _td_txt(url, inner=_link(url, "code"))


def _th(
    label: str, typ: str | None, title: str = "", first: str = "descending", txt: bool = False, cls: str = ""
) -> str:
    attrs = []
    if typ:
        attrs.append(f'data-type="{typ}"')
        attrs.append(f'data-first="{first}"')
    classes = " ".join(x for x in ("txt" if txt else "", cls) if x)
    if classes:
        attrs.append(f'class="{classes}"')
    if title:
        attrs.append(f'title="{_esc(title)}"')
    return f'<th {" ".join(attrs)} scope="col">{_esc(label)}</th>'


def _rank_cell(row: Mapping[str, Any]) -> str:
    if row.get("kind") == "reference":
        return '<td class="rank">ref</td>'
    return f'<td class="rank" data-value="{row["rank"]}">{row["rank"]}</td>'


def _search_text(row: Mapping[str, Any]) -> str:
    return " ".join(str(row.get(k) or "") for k in ("method", "submitter", "model_name", "regime")).lower()


def _tr(row: Mapping[str, Any], cells: list[str], regime: str) -> str:
    cls = "reference" if row["kind"] == "reference" else "result"
    return (
        f'<tr class="{cls}" data-regime="{_esc(regime)}" data-search="{_esc(_search_text(row))}">'
        + "".join(cells)
        + "</tr>"
    )


def _detector_table(rows: Sequence[Mapping[str, Any]], show_private: bool, track: str = "detector") -> str:
    head = [
        _th("#", "num", "rank by Score", first="ascending"),
        _th("Method", "str", first="ascending", txt=True),
        _th(
            "Score",
            "num",
            "SPEC section 8, 0-100 (higher is better); 95% bootstrap interval below when computed",
            cls="score",
        ),
        _th("Submitter", "str", first="ascending", txt=True),
        _th("Regime", "str", first="ascending", txt=True),
        _th("Model", "str", first="ascending", txt=True),
        _th("Size", "str", txt=True),
    ]
    head += [
        _th(
            f"MAE {h}",
            "num",
            f"mean |pred - t_k| over flagged {h} forks (turns; lower is better)",
            first="ascending",
        )
        for h in table4_order()
    ]
    head += [
        _th("Avg. MAE", "num", "MAE over all flagged forks (lower is better)", first="ascending"),
        _th("Cov. h %", "num", "share of forks flagged (higher is better)"),
        _th(
            "MAE c",
            "num",
            "mean |(T+1) - pred| over flagged conformant dialogues (lower is better)",
            first="ascending",
        ),
        _th(
            "Cov. c %",
            "num",
            "share of conformant dialogues flagged: false alarms (lower is better)",
            first="ascending",
        ),
    ]
    if show_private:
        head.append(_th("Private Score", "num", "Score on the private part of the blind set"))
    head += [
        _th("Open", "str", "open-source code", txt=True),
        _th("Train", "str", "used the conformant train split", txt=True),
        _th("Code", None, txt=True),
        _th("Date", "str", txt=True),
    ]
    body = []
    for r in rows:
        regime = r.get("regime") or ""
        cells = [
            _rank_cell(r),
            _method_cell(r),
            _td_score(r["score"], r.get("score_ci"), 2, "Score"),
            _td_txt(r.get("submitter")),
            _td_txt(REGIME_LABELS.get(regime, regime), value=regime),
            _model_cell(r),
            _td_txt(r.get("model_size")),
        ]
        cells += [_td_num(r["mae_by_type"].get(h)) for h in table4_order()]
        cells += [_td_num(r["mae_h"]), _td_num(r["cov_h_pct"]), _td_num(r["mae_c"]), _td_num(r["cov_c_pct"])]
        if show_private:
            cells.append(_td_num(r.get("private_score")))
        cells += [
            _td_txt(_bool(r.get("open_source"))),
            _td_txt(_bool(r.get("used_train"))),
            _code_cell(r),
            _td_txt(r.get("date")),
        ]
        body.append(_tr(r, cells, regime))
    return _table(track, head, body, rows)


def _metric_table(rows: Sequence[Mapping[str, Any]], show_private: bool) -> str:
    head = [
        _th("#", "num", "rank by Avg. tau", first="ascending"),
        _th("Method", "str", first="ascending", txt=True),
        _th(
            "Avg. \u03c4",
            "num",
            "mean of the per-type mean Kendall tau-b over every type (higher is better); 95% "
            "bootstrap interval below when computed",
            cls="score",
        ),
        _th("Submitter", "str", first="ascending", txt=True),
        _th("Model", "str", first="ascending", txt=True),
    ]
    head += [
        _th(f"\u03c4 {h}", "num", f"mean Kendall tau-b over {h} units (higher is better)")
        for h in table3_order()
    ]
    head += [_th("Exact %", "num", "share of units whose fork order is exactly recovered")]
    if show_private:
        head.append(_th("Private \u03c4", "num", "Avg. tau on the private part"))
    head += [_th("Open", "str", txt=True), _th("Code", None, txt=True), _th("Date", "str", txt=True)]
    body = []
    for r in rows:
        cells = [
            _rank_cell(r),
            _method_cell(r),
            _td_score(r["tau"], r.get("tau_ci"), 3, "Avg. tau"),
            _td_txt(r.get("submitter")),
            _model_cell(r),
        ]
        cells += [_td_num(r["tau_by_type"].get(h), 3) for h in table3_order()]
        cells += [_td_num(r["exact_pct"])]
        if show_private:
            cells.append(_td_num(r.get("private_score"), 3))
        cells += [_td_txt(_bool(r.get("open_source"))), _code_cell(r), _td_txt(r.get("date"))]
        body.append(_tr(r, cells, ""))
    return _table("metric", head, body, rows)


def _table(track: str, head: list[str], body: list[str], rows: Sequence[Mapping[str, Any]]) -> str:
    """Results in one ``tbody``, the paper's reference rows in a second one whose header row
    collapses and expands them (each ``tbody`` sorts on its own: references are never ranked)."""
    results = [b for b, r in zip(body, rows) if r["kind"] != "reference"]
    refs = [b for b, r in zip(body, rows) if r["kind"] == "reference"]
    out = (
        f'<div class="tablewrap"><table class="lb" id="{track}-table"><thead><tr>{"".join(head)}</tr></thead>'
        f'<tbody class="results">{"".join(results)}</tbody>'
    )
    if refs:
        out += (
            f'<tbody class="references"><tr class="group"><th colspan="{len(head)}" scope="rowgroup">'
            f'<button type="button" class="toggle-reference" id="toggle-reference-{track}" aria-expanded="true">'
            f'Paper reference rows ({len(refs)})</button> <span class="hint">measured on the paper\'s test set; '
            f"never ranked</span></th></tr>{''.join(refs)}</tbody>"
        )
    return out + "</table></div>"


def _audit_value(v: Any, track: str) -> str:
    x = _num(v)
    return "\u2014" if x is None else (f"{x:.2f}" if track == "detector" else f"{x:.3f}")


def audit_html(audit: Mapping[str, Any] | None, rows: Mapping[str, Sequence[Mapping[str, Any]]]) -> str:
    """The release audit's verdict, shown beside the tables (issue 33): in plain words, with every
    attack's Score or tau, and the public-data ceiling next to the best detector on the board.

    Args:
        audit: The audit report as JSON (``leaderboard.leakcheck.AuditReport.to_dict()``, the export's
            ``audit_report.json``); None: the page says that no audit was given.
        rows: The page's rows (:func:`build_rows`), for the best detector result.

    Returns:
        An HTML ``section`` (every value escaped).
    """
    if not audit:
        return (
            '<section id="audit" class="audit"><h2>Release audit</h2><p class="note">No audit report was given '
            "to this page (<code>leaderboard render --audit GOLD/audit_report.json</code>).</p></section>"
        )
    attacks = [a for a in audit.get("attacks") or [] if isinstance(a, Mapping)]
    honest = [a for a in audit.get("honest") or [] if isinstance(a, Mapping)]
    waived = any(a.get("waived") for a in attacks)
    plumbing = waived or bool(audit.get("plumbing_only")) or "template" in (audit.get("generators") or ())
    state = "fail" if not audit.get("ok") else "plumbing" if plumbing else "pass"
    body = []
    for a in [*attacks, *honest]:
        track = str(a.get("track") or "")
        status = str(a.get("status") or "")
        verdict = (
            "FAIL (waived: plumbing only)"
            if a.get("waived")
            else ("reported, not a verdict" if status == "reported" else status)
        )
        cls = "fail" if status == "FAIL" else ""
        body.append(
            f'<tr class="{cls}"><td class="txt">{_esc(a.get("name"))}</td><td class="txt">{_esc(track)}</td>'
            f"<td>{_audit_value(a.get('value'), track)}</td>"
            f"<td>{_audit_value(a.get('matched_random'), 'detector')}</td>"
            f'<td class="txt">{_esc(verdict)}</td></tr>'
        )
    ceiling = next(
        (
            a
            for a in attacks
            if a.get("track") == "detector"
            and a.get("status") == "reported"
            and _num(a.get("value")) is not None
        ),
        None,
    )
    best = next(
        (r for r in rows.get("detector", ()) if r.get("kind") == "result" and r.get("score") is not None),
        None,
    )
    line = ""
    if ceiling is not None:
        line = (
            f'<p class="note">Public-data ceiling: Score {_num(ceiling["value"]):.2f} on the whole blind set '
            "(a supervised classifier fitted on the public labelled configs; learning from them is allowed, so "
            "it is reported, not a verdict)"
        )
        if best is not None:
            line += (
                f"; best detector on this board: {_esc(best.get('method'))}, Score {best['score']:.2f} "
                "(public part)"
            )
        line += ".</p>"
    th = audit.get("thresholds") or {}
    return (
        f'<section id="audit" class="audit {state}"><h2>Release audit</h2>'
        f'<p class="verdict"><strong>Verdict:</strong> {_esc(audit.get("verdict") or ("PASS" if audit.get("ok") else "FAIL"))}</p>'
        f"{line}<details><summary>Every attack ({len(attacks)}), built from the public files and code only; "
        f"a detector-track attack fails beyond its matched Random + {_esc(th.get('detector_margin', 5))} Score "
        f"points, a metric-track attack above tau {_esc(th.get('metric_tau_max', 0.8))}</summary>"
        '<div class="tablewrap"><table class="audit"><thead><tr><th class="txt">Attack</th><th class="txt">Track'
        '</th><th>Score / \u03c4</th><th>Matched Random</th><th class="txt">Verdict</th></tr></thead><tbody>'
        + "".join(body)
        + "</tbody></table></div></details></section>"
    )


def about_html() -> str:
    """The About text (how to submit, what is scored, citation); the page's About tab and the Space's.

    Returns:
        The ``about.html`` template with the BibTeX entry and the code URL filled in (escaped).
    """
    from dialfork_metrics.modules import DIALFORK_BIBTEX

    return (
        _template("about.html").replace("@BIBTEX@", _esc(DIALFORK_BIBTEX)).replace("@CODE@", _esc(CODE_URL))
    )


def fill_template(template: str, values: Mapping[str, str]) -> str:
    """Substitute each ``@NAME@`` token of ``template`` in one pass over the template itself, so
    a token that occurs inside a substituted value (a method named ``@FOOTER@``) stays literal.

    Args:
        template: The template text.
        values: Token name (without the ``@``) -> text to put in its place.

    Returns:
        The filled text; a token without a value is left as it is.
    """

    def sub(m: re.Match[str]) -> str:
        return values[m.group(1)] if m.group(1) in values else m.group(0)

    return _TOKEN_RE.sub(sub, template)


def render_html(
    results: Iterable[Mapping[str, Any]],
    *,
    private: Mapping[str, Mapping[str, Any]] | None = None,
    reveal_private: bool = False,
    title: str = "DialFork leaderboard",
    generated_at: datetime | None = None,
    include_reference: bool = True,
    audit: Mapping[str, Any] | None = None,
    embedded: bool = False,
) -> str:
    """The page as a string. ``private``: ``{key: private twin}`` (used only if ``reveal_private``).

    Args:
        results: The public results (``leaderboard-result`` objects, e.g. from
            :func:`load_results`); results of an unknown track are skipped with a warning.
        private: ``{result key: private twin}``: the private-part scores shown next to each
            result; used only with ``reveal_private``.
        reveal_private: Show the private-part scores (the maintainers' reveal); False withholds
            them.
        title: The page title.
        generated_at: The time printed as "Generated ..." (timezone-aware); None: now (UTC).
        include_reference: Append the paper's reference rows (unranked) to each table.
        audit: The release's audit report (JSON): its verdict is shown above the tables
            (:func:`audit_html`); None shows nothing.
        embedded: The page as the Space shows it, inside its own frame: no page header (the Space
            has the title) and no About tab (the Space has its own); the tables, the "Generated"
            line and the footer stay.

    Returns:
        The complete, self-contained HTML document (inline CSS and script, strict
        Content-Security-Policy, every value escaped).

    Raises:
        ValueError: The packaged ``page.js`` contains ``</script`` (it would end the inline
            script early).
    """
    rows = build_rows(results, private if reveal_private else None, include_reference)
    n_met = sum(1 for r in rows["metric"] if r["kind"] == "result")
    generated_at = generated_at or datetime.now(timezone.utc)
    note_ref = _esc(paper_baselines()["source"])
    search = (
        '<label>Search <input type="search" class="search" id="search-{t}" placeholder="method, submitter, '
        'model" autocomplete="off"></label>'
    )
    nav = (
        ""
        if embedded
        else f"""
<nav class="tabs" role="tablist">
<a href="#board" role="tab" class="tab" id="tab-board" aria-controls="board">Leaderboard</a>
<a href="#about" role="tab" class="tab" id="tab-about" aria-controls="about">About</a>
<a href="{_esc(CODE_URL)}" class="ext" rel="noopener noreferrer" target="_blank">Code</a>
</nav>"""
    )
    about = (
        ""
        if embedded
        else f"""
<div id="about" class="panel" role="tabpanel" aria-labelledby="tab-about">
{about_html()}
</div>"""
    )
    body = f"""{nav}
<div id="board" class="panel" role="tabpanel" aria-labelledby="tab-board">
{audit_html(audit, rows) if audit is not None else ""}
{_detector_section(rows["detector"], "free", reveal_private, search)}
{_detector_section(rows["detector"], "workflow", reveal_private, search)}
<section id="metric">
<h2>Metric track (Task 2: dialogue-to-dialogue distance)</h2>
<p class="note">Ranked by the mean Kendall tau-b between each unit's four distances and the fork order (4, 3, 2, 1),
averaged per type and over every type of the release ({n_met} result{"s" if n_met != 1 else ""}).</p>
<div class="controls">
{search.format(t="metric")}
</div>
{_metric_table(rows["metric"], reveal_private)}
{"" if n_met else '<p class="empty">No metric results yet.</p>'}
</section>
<p class="note">Reference rows: {note_ref}</p>
</div>{about}
"""
    subtitle = (
        f"Procedural hallucination detection on the blind DialFork test set. "
        f"Generated {generated_at.astimezone(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}."
    )
    footer = (
        f"Submit on the Space or check a file with <code>python -m leaderboard validate</code>; formats: "
        f'<code>leaderboard/schema/*.json</code>. Code: <a href="{_esc(CODE_URL)}" rel="noopener noreferrer">'
        f"{_esc(CODE_URL)}</a>."
    )
    js = _template("page.js")
    if "</script" in js.lower():
        raise ValueError("page.js must not contain '</script'")
    page = fill_template(
        _template("page.html"),
        {
            "CSS": _template("page.css"),
            "JS": js,
            "BODY": body,
            "SUBTITLE": _esc(subtitle),
            "FOOTER": footer,
            "TITLE": _esc(title),
        },
    )
    if embedded:  # the Space shows the title above the frame: keep only the "Generated" line
        page = page.replace(f"<header>\n<h1>{_esc(title)}</h1>\n", "<header>\n", 1)
    return page


_SECTIONS = {
    "free": (
        "detector",
        "regime-filter",
        "Detector track (Task 3: first deviating system turn), without the workflow",
        "Detectors that never see the workflow: streaming (turn by turn, conformant train split only) "
        "and offline (whole transcript). Ranked by Score on the public part of the blind test set",
    ),
    "workflow": (
        "detector-workflow",
        "regime-filter-workflow",
        "Detector track, given the workflow",
        "Detectors that read the ground-truth workflow (streaming + workflow, such as the workflow-aware "
        "wf; offline + workflow), ranked on their own: knowing the workflow is an advantage the "
        "workflow-free table's methods do not have. Ranked by Score on the public part of the blind test set",
    ),
}


def _detector_section(
    rows: Sequence[Mapping[str, Any]], group: str, reveal_private: bool, search: str
) -> str:
    """One detector table (workflow-free or given the workflow) with its own ranks, search and filter."""
    track, filter_id, title, note = _SECTIONS[group]
    mine = [r for r in rows if r.get("group") == group or (group == "free" and r.get("group") is None)]
    n = sum(1 for r in mine if r["kind"] == "result")
    regimes = [
        k for k in REGIME_LABELS if k != "baseline" and (k in WORKFLOW_REGIMES) == (group == "workflow")
    ]
    options = "".join(f'<option value="{_esc(k)}">{_esc(REGIME_LABELS[k])}</option>' for k in regimes)
    private = (
        "Private scores are revealed."
        if reveal_private
        else "Private scores are withheld until the maintainers reveal them."
    )
    return f"""<section id="{track}">
<h2>{_esc(title)}</h2>
<p class="note">{_esc(note)} ({n} result{"s" if n != 1 else ""}). Coverages in percent; MAEs in system turns. {private}</p>
<div class="controls">
{search.format(t=track)}
<label>Regime <select class="regime-filter" id="{filter_id}"><option value="all">all</option>{options}</select></label>
</div>
{_detector_table(mine, reveal_private, track)}
{"" if n else '<p class="empty">No detector results yet.</p>'}
</section>"""


def _private_by_key(paths: Iterable[str | os.PathLike]) -> dict[str, dict[str, Any]]:
    out = {}
    for p in paths:
        for f in sorted(Path(p).rglob("*.json")):
            with open(f, encoding="utf-8") as fh:
                obj = json.load(fh)
            if isinstance(obj, dict) and obj.get("key"):
                out[obj["key"]] = obj
    return out


def render_site(
    results_dirs: str | os.PathLike | Sequence[str | os.PathLike],
    out: str | os.PathLike,
    *,
    private_dir: str | os.PathLike | None = None,
    reveal_private: bool = False,
    title: str = "DialFork leaderboard",
    generated_at: datetime | None = None,
    audit: Mapping[str, Any] | None = None,
) -> Path:
    """Read every result under ``results_dirs`` and write ``out/index.html`` atomically.

    Args:
        results_dirs: A folder of public results (or a list of them), read with
            :func:`load_results`.
        out: The output folder (the page is ``out/index.html``), or a file path ending in
            ``.html``.
        private_dir: The store's private area (the private twins, matched to results by their
            ``key``); read only with ``reveal_private``.
        reveal_private: Show the private-part scores; needs ``private_dir``.
        title: The page title.
        generated_at: The time printed on the page (timezone-aware); None: now (UTC).
        audit: The release's audit report (JSON, the export's ``audit_report.json``): its verdict
            is shown beside the tables; None shows nothing.

    Returns:
        The path of the HTML file written.

    Raises:
        ValueError: ``reveal_private`` without ``private_dir``.
        json.JSONDecodeError: A JSON file under the folders is malformed.
    """
    from dialfork_dataset.jsonl import write_text_atomic

    dirs = [results_dirs] if isinstance(results_dirs, str | os.PathLike) else list(results_dirs)
    results = load_results(dirs)
    private = _private_by_key([private_dir]) if (private_dir is not None and reveal_private) else None
    if reveal_private and private_dir is None:
        raise ValueError("reveal_private needs private_dir (the private area of the store)")
    page = render_html(
        results,
        private=private,
        reveal_private=reveal_private,
        title=title,
        generated_at=generated_at,
        audit=audit,
    )
    out = Path(out)
    target = out / "index.html" if out.suffix.lower() != ".html" else out
    write_text_atomic(target, page)
    logger.info("wrote %s (%d results)", target, len(results))
    return target
