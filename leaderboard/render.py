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

from .store import load_results

logger = logging.getLogger(__name__)

TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"
DATA_DIR = Path(__file__).resolve().parent / "data"
#: Column order of the per-type MAEs (the paper's Table 4 order).
DETECTOR_TYPES = ("CSC", "GR", "SSPC", "WIC")
#: Column order of the per-type taus (the paper's Table 3 order).
METRIC_TYPES = ("WIC", "SSPC", "GR", "CSC")
REGIME_LABELS = {"streaming": "streaming", "offline": "offline", "offline+workflow": "offline + workflow",
                 "baseline": "baseline"}
_URL_RE = re.compile(r"^https?://[^\s\"<>]+$")


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
    return u if isinstance(u, str) and _URL_RE.match(u) else None


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
    """A display row from a detector-track result (coverages in percent)."""
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
        "mae_by_type": {h: _num(by_type.get(h)) for h in DETECTOR_TYPES},
        "mae_h": _num(sc.get("mae_h")),
        "cov_h_pct": _pct(sc.get("cov_h")),
        "mae_c": _num(sc.get("mae_c")),
        "cov_c_pct": _pct(sc.get("cov_c")),
        "score": _num(sc.get("score")),
        "n": (sc.get("counts") or {}).get("dialogues"),
        "date": (result.get("submitted_at") or "")[:10],
        "key": result.get("key"),
        "private_score": None,
    }
    if private is not None:
        ps = ((private.get("scores") or {}).get("private") or {})
        row["private_score"] = _num(ps.get("score"))
    return row


def metric_row(result: Mapping[str, Any], private: Mapping[str, Any] | None = None) -> dict[str, Any]:
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
        "tau_by_type": {h: _num(by_type.get(h)) for h in METRIC_TYPES},
        "tau": _num(sc.get("tau")),
        "exact_pct": _pct(sc.get("exact_recovery")),
        "n": (sc.get("counts") or {}).get("units"),
        "date": (result.get("submitted_at") or "")[:10],
        "key": result.get("key"),
        "private_score": None,
    }
    if private is not None:
        ps = ((private.get("scores") or {}).get("private") or {})
        row["private_score"] = _num(ps.get("tau"))
    return row


def reference_rows(track: str) -> list[dict[str, Any]]:
    out = []
    for r in paper_baselines()[track]:
        row = {"kind": "reference", "submitter": f"paper ({r.get('source', '')})", "code_url": None, "date": "",
               "model_name": r.get("model_name"), "private_score": None, "n": None, "key": None, "method": r["method"]}
        if track == "detector":
            row.update({"regime": r.get("regime"), "model_size": r.get("model_size"), "open_source": None,
                        "used_train": None,
                        "mae_by_type": {h: _num(r.get("mae_by_type", {}).get(h)) for h in DETECTOR_TYPES},
                        "mae_h": _num(r.get("mae_h")), "cov_h_pct": _num(r.get("cov_h_pct")),
                        "mae_c": _num(r.get("mae_c")), "cov_c_pct": _num(r.get("cov_c_pct")),
                        "score": _num(r.get("score"))})
        else:
            row.update({"open_source": None, "tau_by_type": {h: _num(r.get("tau_by_type", {}).get(h)) for h in METRIC_TYPES},
                        "tau": _num(r.get("tau")), "exact_pct": None})
        out.append(row)
    return out


def build_rows(results: Iterable[Mapping[str, Any]], private: Mapping[str, Mapping[str, Any]] | None = None,
               include_reference: bool = True) -> dict[str, list[dict[str, Any]]]:
    """``{"detector": rows, "metric": rows}``: results ranked by Score / tau (best first,
    missing last), ``rank`` 1..n, then the paper's reference rows (no rank)."""
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
        rows.sort(key=lambda x: (x[key] is None, -(x[key] or 0.0), x.get("date") or "", x.get("method") or ""))
        for i, row in enumerate(rows, 1):
            row["rank"] = i
        if include_reference:
            rows.extend(reference_rows(track))
    return out


# --------------------------------------------------------------------------- HTML


def _fmt(v: float | None, nd: int = 2) -> str:
    return "\u2014" if v is None else f"{v:.{nd}f}"


def _td_num(v: float | None, nd: int = 2, cls: str = "") -> str:
    c = " ".join(x for x in (cls, "na" if v is None else "") if x)
    attr = f' class="{c}"' if c else ""
    data = "" if v is None else f' data-value="{v!r}"'
    return f"<td{attr}{data}>{_fmt(v, nd)}</td>"


def _td_txt(text: Any, value: Any = None, inner: str | None = None) -> str:
    v = text if value is None else value
    data = "" if v is None or v == "" else f' data-value="{_esc(v)}"'
    return f'<td class="txt"{data}>{inner if inner is not None else _esc(text if text is not None else "")}</td>'


def _bool(v: Any) -> str:
    return "\u2014" if v is None else ("yes" if v else "no")


def _method_cell(row: Mapping[str, Any]) -> str:
    name = _esc(row.get("method") or "?")
    inner = name
    if row.get("kind") == "reference":
        inner += ' <span class="badge">paper</span>'
    return _td_txt(row.get("method"), inner=inner)


def _code_cell(row: Mapping[str, Any]) -> str:
    url = row.get("code_url")
    if not url:
        return _td_txt("")
    return _td_txt(url, inner=f'<a href="{_esc(url)}" rel="noopener noreferrer nofollow">code</a>')


def _th(label: str, typ: str | None, title: str = "", first: str = "descending", txt: bool = False) -> str:
    attrs = []
    if typ:
        attrs.append(f'data-type="{typ}"')
        attrs.append(f'data-first="{first}"')
    if txt:
        attrs.append('class="txt"')
    if title:
        attrs.append(f'title="{_esc(title)}"')
    return f"<th {' '.join(attrs)} scope=\"col\">{_esc(label)}</th>"


def _rank_cell(row: Mapping[str, Any]) -> str:
    if row.get("kind") == "reference":
        return '<td class="rank">ref</td>'
    return f'<td class="rank" data-value="{row["rank"]}">{row["rank"]}</td>'


def _detector_table(rows: Sequence[Mapping[str, Any]], show_private: bool) -> str:
    head = [_th("#", "num", "rank by Score", first="ascending"), _th("Method", "str", first="ascending", txt=True),
            _th("Submitter", "str", first="ascending", txt=True), _th("Regime", "str", first="ascending", txt=True),
            _th("Model", "str", first="ascending", txt=True), _th("Size", "str", txt=True)]
    head += [_th(f"MAE {h}", "num", f"mean |pred - t_k| over flagged {h} forks (turns; lower is better)",
                 first="ascending") for h in DETECTOR_TYPES]
    head += [_th("Avg. MAE", "num", "MAE over all flagged forks (lower is better)", first="ascending"),
             _th("Cov. h %", "num", "share of forks flagged (higher is better)"),
             _th("MAE c", "num", "mean |(T+1) - pred| over flagged conformant dialogues (lower is better)",
                 first="ascending"),
             _th("Cov. c %", "num", "share of conformant dialogues flagged: false alarms (lower is better)",
                 first="ascending"),
             _th("Score", "num", "SPEC section 8 (higher is better)")]
    if show_private:
        head.append(_th("Private Score", "num", "Score on the private part of the blind set"))
    head += [_th("Open", "str", "open-source code", txt=True), _th("Train", "str", "used the conformant train split", txt=True),
             _th("Code", None, txt=True), _th("Date", "str", txt=True)]
    body = []
    for r in rows:
        cls = "reference" if r["kind"] == "reference" else "result"
        regime = r.get("regime") or ""
        cells = [_rank_cell(r), _method_cell(r), _td_txt(r.get("submitter")),
                 _td_txt(REGIME_LABELS.get(regime, regime), value=regime), _td_txt(r.get("model_name")),
                 _td_txt(r.get("model_size"))]
        cells += [_td_num(r["mae_by_type"].get(h)) for h in DETECTOR_TYPES]
        cells += [_td_num(r["mae_h"]), _td_num(r["cov_h_pct"]), _td_num(r["mae_c"]), _td_num(r["cov_c_pct"]),
                  _td_num(r["score"], cls="score")]
        if show_private:
            cells.append(_td_num(r.get("private_score")))
        cells += [_td_txt(_bool(r.get("open_source"))), _td_txt(_bool(r.get("used_train"))), _code_cell(r),
                  _td_txt(r.get("date"))]
        body.append(f'<tr class="{cls}" data-regime="{_esc(regime)}">' + "".join(cells) + "</tr>")
    return _table("detector-table", head, body)


def _metric_table(rows: Sequence[Mapping[str, Any]], show_private: bool) -> str:
    head = [_th("#", "num", "rank by Avg. tau", first="ascending"), _th("Method", "str", first="ascending", txt=True),
            _th("Submitter", "str", first="ascending", txt=True), _th("Model", "str", first="ascending", txt=True)]
    head += [_th(f"\u03c4 {h}", "num", f"mean Kendall tau-b over {h} units (higher is better)") for h in METRIC_TYPES]
    head += [_th("Avg. \u03c4", "num", "mean of the four per-type means"),
             _th("Exact %", "num", "share of units whose fork order is exactly recovered")]
    if show_private:
        head.append(_th("Private \u03c4", "num", "Avg. tau on the private part"))
    head += [_th("Open", "str", txt=True), _th("Code", None, txt=True), _th("Date", "str", txt=True)]
    body = []
    for r in rows:
        cls = "reference" if r["kind"] == "reference" else "result"
        cells = [_rank_cell(r), _method_cell(r), _td_txt(r.get("submitter")), _td_txt(r.get("model_name"))]
        cells += [_td_num(r["tau_by_type"].get(h), 3) for h in METRIC_TYPES]
        cells += [_td_num(r["tau"], 3, cls="score"), _td_num(r["exact_pct"])]
        if show_private:
            cells.append(_td_num(r.get("private_score"), 3))
        cells += [_td_txt(_bool(r.get("open_source"))), _code_cell(r), _td_txt(r.get("date"))]
        body.append(f'<tr class="{cls}" data-regime="">' + "".join(cells) + "</tr>")
    return _table("metric-table", head, body)


def _table(tid: str, head: list[str], body: list[str]) -> str:
    return (f'<div class="tablewrap"><table class="lb" id="{tid}"><thead><tr>{"".join(head)}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table></div>')


def render_html(results: Iterable[Mapping[str, Any]], *, private: Mapping[str, Mapping[str, Any]] | None = None,
                reveal_private: bool = False, title: str = "DialFork leaderboard",
                generated_at: datetime | None = None, include_reference: bool = True) -> str:
    """The page as a string. ``private``: ``{key: private twin}`` (used only if ``reveal_private``)."""
    rows = build_rows(results, private if reveal_private else None, include_reference)
    n_det = sum(1 for r in rows["detector"] if r["kind"] == "result")
    n_met = sum(1 for r in rows["metric"] if r["kind"] == "result")
    generated_at = generated_at or datetime.now(timezone.utc)
    regimes = "".join(f'<option value="{_esc(k)}">{_esc(v)}</option>' for k, v in REGIME_LABELS.items()
                      if k != "baseline")
    note_ref = _esc(paper_baselines()["source"])
    body = f"""
<section id="detector">
<h2>Detector track (Task 3: first deviating system turn)</h2>
<p class="note">Ranked by Score on the public part of the blind test set ({n_det} result{'s' if n_det != 1 else ''}).
Coverages in percent; MAEs in system turns. {'Private scores are revealed.' if reveal_private else 'Private scores are withheld until the maintainers reveal them.'}</p>
<div class="controls">
<label>Regime <select class="regime-filter" id="regime-filter"><option value="all">all</option>{regimes}</select></label>
<label><input type="checkbox" class="show-reference" id="show-reference-detector" checked> paper reference rows</label>
</div>
{_detector_table(rows['detector'], reveal_private)}
{'' if n_det else '<p class="empty">No detector results yet.</p>'}
</section>
<section id="metric">
<h2>Metric track (Task 2: dialogue-to-dialogue distance)</h2>
<p class="note">Ranked by the mean Kendall tau-b between each unit's four distances and the fork order (4, 3, 2, 1),
averaged per type and over the four types ({n_met} result{'s' if n_met != 1 else ''}).</p>
<div class="controls">
<label><input type="checkbox" class="show-reference" id="show-reference-metric" checked> paper reference rows</label>
</div>
{_metric_table(rows['metric'], reveal_private)}
{'' if n_met else '<p class="empty">No metric results yet.</p>'}
</section>
<p class="note">Reference rows: {note_ref}</p>
"""
    subtitle = (f"Procedural hallucination detection on the blind DialFork test set. "
                f"Generated {generated_at.astimezone(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}.")
    footer = ("Submit with <code>python -m leaderboard validate</code> then <code>score</code>; "
              "format: <code>leaderboard/schema/*.json</code>.")
    page = _template("page.html")
    js = _template("page.js")
    if "</script" in js.lower():
        raise ValueError("page.js must not contain '</script'")
    for token, value in (("@CSS@", _template("page.css")), ("@JS@", js), ("@BODY@", body),
                         ("@SUBTITLE@", _esc(subtitle)), ("@FOOTER@", footer), ("@TITLE@", _esc(title))):
        page = page.replace(token, value)
    return page


def _private_by_key(paths: Iterable[str | os.PathLike]) -> dict[str, dict[str, Any]]:
    out = {}
    for p in paths:
        for f in sorted(Path(p).rglob("*.json")):
            with open(f, encoding="utf-8") as fh:
                obj = json.load(fh)
            if isinstance(obj, dict) and obj.get("key"):
                out[obj["key"]] = obj
    return out


def render_site(results_dirs: str | os.PathLike | Sequence[str | os.PathLike], out: str | os.PathLike, *,
                private_dir: str | os.PathLike | None = None, reveal_private: bool = False,
                title: str = "DialFork leaderboard", generated_at: datetime | None = None) -> Path:
    """Read every result under ``results_dirs`` and write ``out/index.html`` atomically."""
    from dialfork_dataset.jsonl import write_text_atomic

    dirs = [results_dirs] if isinstance(results_dirs, str | os.PathLike) else list(results_dirs)
    results = load_results(dirs)
    private = _private_by_key([private_dir]) if (private_dir is not None and reveal_private) else None
    if reveal_private and private_dir is None:
        raise ValueError("reveal_private needs private_dir (the private area of the store)")
    page = render_html(results, private=private, reveal_private=reveal_private, title=title,
                       generated_at=generated_at)
    out = Path(out)
    target = out / "index.html" if out.suffix.lower() != ".html" else out
    write_text_atomic(target, page)
    logger.info("wrote %s (%d results)", target, len(results))
    return target
