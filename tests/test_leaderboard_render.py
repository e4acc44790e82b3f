"""The static page (structure, escaping, no external request, private reveal) and the Space handlers."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from leaderboard.app import LeaderboardApp, app_from_env, metadata_from_form
from leaderboard.render import build_rows, paper_baselines, render_html, render_site
from leaderboard.store import LocalStore
from leaderboard.synthetic import make_fixture, write_metadata, write_predictions

ROOT = Path(__file__).resolve().parents[1]
T0 = datetime(2026, 5, 4, 9, 0, tzinfo=timezone.utc)


def fake_result(
    method, score, regime="streaming", key=None, code_url=None, submitter="alice", track="detector"
):
    if track == "detector":
        sc = {
            "score": score,
            "mae_h": 2.0,
            "mae_h_by_type": {"WIC": 1.0, "SSPC": 2.0, "GR": 3.0, "CSC": 4.0},
            "cov_h": 0.9,
            "mae_c": 5.0,
            "cov_c": 0.1,
            "counts": {"dialogues": 10},
        }
    else:
        sc = {
            "tau": score,
            "tau_by_type": {"WIC": 0.1, "SSPC": 0.2, "GR": 0.3, "CSC": 0.4},
            "exact_recovery": 0.5,
            "counts": {"units": 4},
        }
    return {
        "schema": "dialfork-leaderboard-result",
        "track": track,
        "method": method,
        "submitter": submitter,
        "key": key or f"{submitter}/{method.lower()}/20260504T090000.000000Z.json",
        "submitted_at": "2026-05-04T09:00:00+00:00",
        "metadata": {
            "method": method,
            "regime": regime,
            "code_url": code_url,
            "open_source": True,
            "used_conformant_train": True,
            "model_name": "enc",
            "model_size": "22M",
        },
        "scores": {"public": sc},
    }


def test_rows_ranked_with_reference_rows_last():
    res = [
        fake_result("B", 50.0),
        fake_result("A", 70.0),
        fake_result("C", None),
        fake_result("M", 0.5, track="metric"),
    ]
    rows = build_rows(res)
    det = rows["detector"]
    assert [r["method"] for r in det if r["kind"] == "result"] == ["A", "B", "C"]
    assert [r["rank"] for r in det if r["kind"] == "result"] == [1, 2, 3]
    n_ref = len(paper_baselines()["detector"])
    assert sum(r["kind"] == "reference" for r in det) == n_ref and det[-1]["kind"] == "reference"
    assert det[0]["cov_h_pct"] == pytest.approx(90.0) and det[0]["mae_by_type"]["CSC"] == 4.0
    assert [r["method"] for r in rows["metric"] if r["kind"] == "result"] == ["M"]
    assert paper_baselines()["detector"][0] == {
        "method": "Random",
        "regime": "baseline",
        "source": "Table 4",
        "mae_by_type": {"CSC": 6.31, "GR": 7.92, "SSPC": 5.74, "WIC": 6.44},
        "mae_h": 6.60,
        "cov_h_pct": 100.00,
        "mae_c": 7.50,
        "cov_c_pct": 100.00,
        "score": 0.94,
    }


def test_page_is_self_contained_and_escaped():
    evil = fake_result('<script>alert("x")</script>', 10.0, code_url="javascript:alert(1)")
    good = fake_result("Good", 20.0, code_url="https://github.com/org/repo")
    page = render_html([evil, good], generated_at=T0)
    assert "<script>alert" not in page and "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    assert "javascript:alert" not in page
    assert (
        '<a href="https://github.com/org/repo" rel="noopener noreferrer nofollow" target="_blank">code</a>'
        in page
    )
    # nothing the browser would fetch: no src/link/import/url(), and a CSP forbidding any request
    assert not re.search(r"\bsrc\s*=|<link\b|@import|url\(", page, re.I)
    assert "default-src 'none'" in page
    urls = re.findall(r"https?://[^\s\"'<>}]+", page)
    # the link and its sort key, the code of the project (page header, About, footer)
    # (+ the Hub pages of the paper rows' models named by a Hub id)
    assert {u for u in urls if not u.startswith("https://huggingface.co/")} == {
        "https://github.com/org/repo",
        "https://github.com/idiap/dialfork",
    }
    assert page.count('<tr class="result"') == 2
    assert page.count("<script>") == 1  # the inline script only
    assert "2026-05-04 09:00 UTC" in page


def test_private_scores_only_when_revealed():
    r = fake_result("A", 70.0, key="alice/a/20260504T090000.000000Z.json")
    priv = {r["key"]: {"key": r["key"], "scores": {"private": {"score": 12.345}}}}
    hidden = render_html([r], private=priv, reveal_private=False)
    shown = render_html([r], private=priv, reveal_private=True)
    assert "Private Score" not in hidden and "12.35" not in hidden and "withheld" in hidden
    assert "Private Score" in shown and 'data-value="12.345">12.35<' in shown


def test_empty_page_still_has_reference_rows():
    page = render_html([])
    assert "No detector results yet." in page and page.count('<tr class="reference"') == (
        len(paper_baselines()["detector"]) + len(paper_baselines()["metric"])
    )


# ---- the Space handlers ------------------------------------------------------------------


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    return make_fixture(tmp_path_factory.mktemp("lba"), n_sources=2, seed=9, with_text=False)


class Clock:
    def __init__(self, t):
        self.t = t

    def __call__(self):
        self.t += timedelta(seconds=1)
        return self.t


def _form(**kw):
    vals = {
        "method": "Space method",
        "regime": "offline",
        "used_conformant_train": False,
        "model_name": " ",
        "model_size": "7B",
        "code_url": "https://example.org/code",
        "open_source": True,
        "contact": "x@y.org",
        "description": "",
        "track": "detector",
    }
    vals.update(kw)
    return metadata_from_form(**vals)


def test_metadata_from_form():
    md = _form()
    assert md == {
        "track": "detector",
        "method": "Space method",
        "used_conformant_train": False,
        "model_name": None,
        "model_size": "7B",
        "code_url": "https://example.org/code",
        "open_source": True,
        "contact": "x@y.org",
        "regime": "offline",
    }
    assert "regime" not in _form(track="metric")


def test_space_handlers(env, tmp_path):
    app = LeaderboardApp(
        blind_dir=str(env["blind_dir"]),
        gold_dir=str(env["gold_dir"]),
        store=LocalStore(tmp_path / "store", clock=Clock(T0), max_per_day=1),
    )
    sub = write_predictions({b["dialogue_id"]: 2 for b in env["blind"]}, tmp_path / "s.jsonl")
    msg, rep = app.handle_validate(str(sub), _form())
    n = len(env["blind"])  # its sources and all their forks: 34 for the paper's types
    assert msg.startswith(f"**Valid** detector submission: {n} lines, {n} flagged") and rep["ok"]
    msg, rep = app.handle_validate(str(sub), _form(regime="online"))
    assert "error(s)" in msg and rep["errors"][0]["field"] == "regime"
    assert app.handle_validate(None, _form())[0] == "Upload a submission file first."
    assert "Log in" in app.handle_submit(str(sub), _form(), profile=None)[0]
    msg, res = app.handle_submit(str(sub), _form(), profile=type("P", (), {"username": "grace"})())
    assert msg.startswith("**Stored** as `grace/space-method/") and res["submitter"] == "grace"
    assert "x@y.org" not in json.dumps(res)
    msg, _ = app.handle_submit(str(sub), _form(), profile="grace")
    assert msg.startswith("**Refused**") and "limit 1 per UTC day" in msg
    msg, out = app.handle_dry_run(str(sub), _form())
    assert msg == "Scored (not stored)." and "public" in out["scores"]
    page = app.handle_refresh()
    assert page.count('<tr class="result"') == 1 and "Space method" in page
    assert 'srcdoc="' in app.page_iframe()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{}\n", encoding="utf-8")
    msg, rep = app.handle_submit(str(bad), _form(), profile="henry")
    assert msg.startswith("**") and "error(s)" in msg and not rep["ok"]
    assert not list((tmp_path / "store" / "results").glob("henry/*/*.json"))


def test_app_from_env(env, tmp_path):
    with pytest.raises(ValueError, match="DIALFORK_BLIND_DIR"):
        app_from_env({})
    app = app_from_env(
        {
            "DIALFORK_BLIND_DIR": str(env["blind_dir"]),
            "DIALFORK_GOLD_DIR": str(env["gold_dir"]),
            "DIALFORK_RESULTS_DIR": str(tmp_path / "r"),
            "DIALFORK_MAX_PER_DAY": "7",
        }
    )
    assert isinstance(app.store, LocalStore) and app.store.max_per_day == 7


@pytest.mark.skipif(importlib.util.find_spec("gradio") is not None, reason="gradio is installed")
def test_build_without_gradio_says_how_to_install(env, tmp_path):
    app = LeaderboardApp(
        blind_dir=str(env["blind_dir"]), gold_dir=str(env["gold_dir"]), store=LocalStore(tmp_path)
    )
    with pytest.raises(ImportError, match=r"dialfork\[leaderboard\]"):
        app.build()


def test_cli_render_and_reveal(env, tmp_path):
    st = LocalStore(tmp_path / "store", clock=Clock(T0))
    from leaderboard.submissions import submit

    sub = write_predictions({b["dialogue_id"]: None for b in env["blind"]}, tmp_path / "n.jsonl")
    write_metadata(tmp_path / "n.metadata.json", method="Never flags", submitter="ivan")
    submit(sub, track="detector", gold=env["gold_dir"], store=st)
    out = tmp_path / "site"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "leaderboard",
            "render",
            "--results",
            str(tmp_path / "store"),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    page = (out / "index.html").read_text(encoding="utf-8")
    assert "Never flags" in page and "Private Score" not in page
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "leaderboard",
            "render",
            "--results",
            str(tmp_path / "store"),
            "--out",
            str(tmp_path / "site2"),
            "--reveal-private",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert "Private Score" in (tmp_path / "site2" / "index.html").read_text(encoding="utf-8")
    # site/ from render_site directly: a folder gets index.html, a .html path is used as is
    assert render_site(tmp_path / "store" / "results", tmp_path / "x.html").name == "x.html"


def test_workflow_aware_rows_are_ranked_apart_from_workflow_free_rows():
    """Issue 46 item 3: SPEC 8's streaming regime has no workflow; wf reads it, is submitted as
    streaming+workflow and is ranked in a table of its own."""
    from leaderboard.validate import REGIMES
    from leaderboard.validate.schemas import metadata_problems

    assert "streaming+workflow" in REGIMES
    md = {
        "method": "WF (MiniLM)",
        "regime": "streaming+workflow",
        "used_conformant_train": True,
        "model_name": "all-MiniLM-L6-v2",
        "model_size": "22M",
        "code_url": None,
        "open_source": True,
        "contact": "me@lab.org",
    }
    assert metadata_problems(md, "detector") == []
    res = [
        fake_result("WF", 90.0, "streaming+workflow"),
        fake_result("IT", 70.0),
        fake_result("LLM", 80.0, "offline"),
    ]
    det = [r for r in build_rows(res)["detector"] if r["kind"] == "result"]
    assert [(r["method"], r["group"], r["rank"]) for r in det] == [
        ("WF", "workflow", 1),
        ("LLM", "free", 1),
        ("IT", "free", 2),
    ]
    page = render_html(res, generated_at=T0)
    free = page[page.index('id="detector-table"') : page.index('id="detector-workflow-table"')]
    given = page[page.index('id="detector-workflow-table"') :]
    assert ">WF<" not in free.split("</table>")[0] and ">WF<" in given.split("</table>")[0]
    assert "given the workflow" in page and page.count('class="regime-filter"') == 2
