"""The static leaderboard page in real headless Chromium, driven through the DevTools protocol.

Checks: the page loads without console errors, exceptions or network requests; it shows one
row per result; sorting (numeric and text, both directions, missing values last), the regime
filter, the search box, the collapsible reference rows and the About tab work; at 1280 px the
Score column is on screen (a screenshot is taken; set ``DIALFORK_SCREENSHOT_DIR`` to keep it).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from live_server import stop

from leaderboard.render import paper_baselines, render_site

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

pytestmark = [
    pytest.mark.chromium,
    pytest.mark.skipif(
        CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install -y chromium)"
    ),
]


STEP_S = 180.0  # one browser step (start, a call, an event), bounded: the machine may be loaded


class CDP:
    """Minimal Chrome DevTools Protocol session over one page target."""

    def __init__(self, ws_url: str, timeout: float = STEP_S):
        try:
            import websocket  # websocket-client, a dev dependency
        except ImportError:
            pytest.fail(
                "the Chromium page test drives Chromium through websocket-client: pip install websocket-client "
                "(part of the dev extra)"
            )
        self.ws = websocket.create_connection(ws_url, timeout=timeout, suppress_origin=True)
        self.next_id = 0
        self.events: list[dict] = []

    def call(self, method: str, **params):
        self.next_id += 1
        mid = self.next_id
        self.ws.send(json.dumps({"id": mid, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == mid:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg)

    def wait_event(self, name: str, timeout: float = STEP_S) -> dict:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for e in self.events:
                if e["method"] == name:
                    return e
            msg = json.loads(self.ws.recv())
            if "method" in msg:
                self.events.append(msg)
        raise TimeoutError(name)

    def js(self, expr: str):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"JS error: {r['exceptionDetails']}")
        return r["result"].get("value")

    def close(self):
        self.ws.close()


@pytest.fixture
def browser(tmp_path):
    profile = tmp_path / "profile"
    profile.mkdir()
    proc = subprocess.Popen(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--disable-extensions",
            f"--user-data-dir={profile}",
            "--remote-debugging-port=0",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        port_file = profile / "DevToolsActivePort"
        end = time.monotonic() + STEP_S
        while not (port_file.exists() and port_file.read_text().strip()):
            if proc.poll() is not None or time.monotonic() > end:
                pytest.fail(f"chromium did not start (exit code {proc.poll()})")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=60) as r:  # loopback only
            targets = json.loads(r.read())
        page = next(t for t in targets if t.get("type") == "page")
        cdp = CDP(page["webSocketDebuggerUrl"])
        yield cdp
        cdp.close()
    finally:
        stop(proc)


def _result(method, score, regime, i, cov=0.9):
    return {
        "schema": "dialfork-leaderboard-result",
        "track": "detector",
        "method": method,
        "submitter": f"team{i}",
        "key": f"team{i}/m{i}/20260504T0900{i:02d}.000000Z.json",
        "submitted_at": f"2026-05-0{1 + i % 9}T09:00:00+00:00",
        "metadata": {
            "method": method,
            "regime": regime,
            "code_url": f"https://example.org/{i}",
            "open_source": i % 2 == 0,
            "used_conformant_train": True,
            "model_name": "sentence-transformers/all-MiniLM-L6-v2" if i == 0 else f"model-{i}",
            "model_size": None,
        },
        "scores": {
            "public": {
                "score": score,
                "mae_h": 1.0 + i,
                "mae_h_by_type": {"WIC": 1.0 * i, "CSC": 2.0},
                "cov_h": cov,
                "mae_c": None if i == 2 else 3.0,
                "cov_c": 0.05,
                "counts": {"dialogues": 100},
            }
        },
    }


RESULTS = [
    dict(
        _result("Alpha", 55.5, "streaming", 0),
        scores={
            "public": {
                **_result("Alpha", 55.5, "streaming", 0)["scores"]["public"],
                "score_ci": [51.25, 59.75],
            }
        },
    ),
    _result("beta", 80.25, "offline", 1),
    _result("Gamma", None, "offline+workflow", 2),
    _result("Delta", 12.0, "streaming", 3),
    _result("epsilon", 67.0, "offline", 4),
    _result("Theta", None, "streaming", 5),
    _result(
        "Zeta", 90.0, "streaming+workflow", 6
    ),  # given the workflow: its own table, never beside the rest
]
#: The results of the workflow-free table (the others are ranked in #detector-workflow-table).
FREE = [r for r in RESULTS if r["metadata"]["regime"] in ("streaming", "offline")]


def _write_page(tmp_path: Path) -> Path:
    d = tmp_path / "results"
    for r in RESULTS:
        p = d / r["key"]
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(r), encoding="utf-8")
    metric = dict(
        RESULTS[0],
        track="metric",
        key="team9/x/20260504T090000.000000Z.json",
        scores={"public": {"tau": 0.5, "tau_by_type": {"WIC": 0.5}, "exact_recovery": 0.25}},
    )
    (d / metric["key"]).parent.mkdir(parents=True, exist_ok=True)
    (d / metric["key"]).write_text(json.dumps(metric), encoding="utf-8")
    return render_site(d, tmp_path / "site")


COLUMN = """(function (table, label) {
  var ths = Array.from(document.querySelectorAll('#' + table + ' thead th'));
  return ths.findIndex(function (th) { return th.textContent.trim() === label; });
})"""

VALUES = """(function (table, idx, all) {
  return Array.from(document.querySelectorAll('#' + table + ' tbody tr'))
    .filter(function (r) { return all || (!r.hidden && r.classList.contains('result')); })
    .map(function (r) { var v = r.cells[idx].getAttribute('data-value'); return v === null ? null : v; });
})"""


def test_page_in_headless_chromium(browser, tmp_path):
    page = _write_page(tmp_path)
    cdp = browser
    for domain in ("Runtime", "Log", "Network", "Page"):
        cdp.call(f"{domain}.enable")
    cdp.call("Page.navigate", url=page.as_uri())
    cdp.wait_event("Page.loadEventFired")
    assert cdp.js("document.documentElement.getAttribute('data-ready')") == "1"

    # one row per result, the paper's reference rows after them; the regimes given the workflow in a
    # table of their own, ranked on their own (issue 46 item 3)
    assert cdp.js("document.querySelectorAll('#detector-table tbody tr.result').length") == len(FREE)
    wf_methods = "Array.from(document.querySelectorAll('#detector-workflow-table tbody tr.result')).map(r => [r.cells[0].textContent, r.cells[1].textContent])"
    assert cdp.js(wf_methods) == [["1", "Zeta"], ["2", "Gamma"]]
    assert cdp.js("document.querySelectorAll('#metric-table tbody tr.result').length") == 1
    n_ref = sum(r["regime"] != "offline+workflow" for r in paper_baselines()["detector"])
    assert (
        cdp.js("document.querySelectorAll('#detector-table tbody.references tr.reference').length") == n_ref
    )
    assert cdp.js("document.querySelectorAll('#detector-table tbody.results tr.reference').length") == 0
    score = cdp.js(f"{COLUMN}('detector-table', 'Score')")
    method = cdp.js(f"{COLUMN}('detector-table', 'Method')")
    assert method == 1 and score == 2  # Score sits next to Method
    # the bootstrap interval under the Score where one was computed
    assert cdp.js(
        "Array.from(document.querySelectorAll('#detector-table td.score .ci')).map(e => e.textContent)"
    ) == ["[51.25, 59.75]"]

    def results_col(idx):
        return cdp.js(f"{VALUES}('detector-table', {idx}, false)")

    # initial order: ranked by Score, missing last
    assert results_col(method) == ["beta", "epsilon", "Alpha", "Delta", "Theta"]
    # click Score: descending first, then ascending; missing values stay last both ways
    click = "document.querySelectorAll('#detector-table thead th')[%d].click()"
    cdp.js(click % score)
    vals = results_col(score)
    assert vals[:-1] == sorted(vals[:-1], key=float, reverse=True) and vals[-1] is None
    cdp.js(click % score)
    vals = results_col(score)
    assert [float(v) for v in vals[:-1]] == [12.0, 55.5, 67.0, 80.25] and vals[-1] is None
    assert (
        cdp.js(f"document.querySelectorAll('#detector-table thead th')[{score}].getAttribute('aria-sort')")
        == "ascending"
    )
    # the reference rows are sorted too, on their own, under their (collapsible) group header
    ref_scores = cdp.js(
        f"Array.from(document.querySelectorAll('#detector-table tbody.references tr.reference'))"
        f".map(r => r.cells[{score}].getAttribute('data-value')).filter(v => v !== null)"
    )
    assert [float(v) for v in ref_scores] == sorted(float(v) for v in ref_scores)
    assert cdp.js("document.querySelector('#detector-table tbody.references').rows[0].className") == "group"
    # text column: ascending first, case-insensitive locale order
    cdp.js(click % method)
    assert results_col(method) == ["Alpha", "beta", "Delta", "epsilon", "Theta"]
    cdp.js(click % method)
    assert results_col(method) == ["Theta", "epsilon", "Delta", "beta", "Alpha"]

    # regime filter
    set_regime = (
        "(function (v) { var s = document.getElementById('regime-filter'); s.value = v;"
        " s.dispatchEvent(new Event('change')); })('%s')"
    )
    visible = (
        "Array.from(document.querySelectorAll('#detector-table tbody tr:not(.group)')).filter(function (r) {"
        " return !r.hidden; }).map(function (r) { return [r.className, r.getAttribute('data-regime')]; })"
    )
    cdp.js(set_regime % "offline")
    rows = cdp.js(visible)
    assert sorted(cls for cls, reg in rows if cls == "result") == ["result", "result"]
    assert {reg for _, reg in rows} <= {"offline", "baseline"} and ("reference", "offline") in [
        tuple(r) for r in rows
    ]
    assert sorted(results_col(method)) == ["beta", "epsilon"]
    assert "offline+workflow" not in cdp.js(
        "Array.from(document.getElementById('regime-filter').options).map(o => o.value)"
    )
    cdp.js(
        "(function (s) { s.value = 'offline+workflow'; s.dispatchEvent(new Event('change')); })"
        "(document.getElementById('regime-filter-workflow'))"
    )
    assert cdp.js(f"{VALUES}('detector-workflow-table', {method}, false)") == ["Gamma"]
    cdp.js("document.getElementById('toggle-reference-detector').click()")
    assert all(cls == "result" for cls, _ in cdp.js(visible))
    assert (
        cdp.js("document.getElementById('toggle-reference-detector').getAttribute('aria-expanded')")
        == "false"
    )
    cdp.js(set_regime % "all")
    assert len(results_col(method)) == len(FREE)
    assert cdp.js("document.querySelectorAll('#detector-table tbody tr.reference:not([hidden])').length") == 0
    cdp.js("document.getElementById('toggle-reference-detector').click()")
    assert (
        cdp.js("document.querySelectorAll('#detector-table tbody tr.reference:not([hidden])').length")
        == n_ref
    )

    # search box: every word must occur in the method, submitter, model or regime
    search = (
        "(function (v) { var s = document.getElementById('search-detector'); s.value = v;"
        " s.dispatchEvent(new Event('input')); })('%s')"
    )
    cdp.js(search % "EPS")
    assert results_col(method) == ["epsilon"]
    cdp.js(search % "model-1 team1")
    assert results_col(method) == ["beta"]
    cdp.js(search % "random")  # a paper reference row
    assert (
        results_col(method) == []
        and cdp.js(
            "Array.from(document.querySelectorAll('#detector-table tr.reference:not([hidden])')).length"
        )
        >= 1
    )
    cdp.js(search % "")
    assert len(results_col(method)) == len(FREE)

    # links to the model (a Hub id links to its Hub page) and to the code
    hub = "a[href='https://huggingface.co/sentence-transformers/all-MiniLM-L6-v2']"
    assert cdp.js(f'document.querySelectorAll("#detector-table {hub}").length') == 1
    assert cdp.js(
        "document.querySelectorAll(\"#detector-table a[href^='https://example.org/']\").length"
    ) == len(FREE)

    # the About tab: how to submit and the citation
    assert cdp.js("document.getElementById('about').hidden") is True
    cdp.js("document.getElementById('tab-about').click()")
    assert cdp.js("document.getElementById('board').hidden") is True
    about = cdp.js("document.getElementById('about').innerText")
    assert (
        "How to submit" in about
        and "@misc{dialfork2026" in about
        and "python -m leaderboard validate" in about
    )
    cdp.js("document.getElementById('tab-board').click()")
    assert cdp.js("document.getElementById('board').hidden") is False

    # at 1280 px the Score column is on screen, without scrolling the table
    cdp.call("Emulation.setDeviceMetricsOverride", width=1280, height=900, deviceScaleFactor=1, mobile=False)
    rect = cdp.js(
        f"(function () {{ var r = document.querySelectorAll('#detector-table thead th')[{score}]"
        ".getBoundingClientRect(); return [r.left, r.right]; })()"
    )
    assert 0 < rect[0] < rect[1] <= 1280, rect
    shot = base64.b64decode(cdp.call("Page.captureScreenshot", format="png")["data"])
    assert shot[:8] == b"\x89PNG\r\n\x1a\n" and int.from_bytes(shot[16:20], "big") == 1280
    out = Path(os.environ.get("DIALFORK_SCREENSHOT_DIR") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    (out / "leaderboard_1280.png").write_bytes(shot)
    # at 1400 px every column of both detector tables is on screen: no horizontal scrolling (issue 46
    # item 8: from "MAE c" on, the columns were hidden even at 2000 px), the paper's long model names included
    cdp.call("Emulation.setDeviceMetricsOverride", width=1400, height=900, deviceScaleFactor=1, mobile=False)
    for table in ("detector-table", "detector-workflow-table"):
        sizes = cdp.js(
            f"(function () {{ var w = document.getElementById('{table}').closest('.tablewrap');"
            " return [w.scrollWidth, w.clientWidth]; })()"
        )
        assert sizes[0] <= sizes[1], (table, sizes)

    # no console errors, no exceptions, no request except the page itself
    errors = [
        e
        for e in cdp.events
        if e["method"] == "Runtime.exceptionThrown"
        or (
            e["method"] == "Runtime.consoleAPICalled"
            and e["params"]["type"] in ("error", "assert", "warning")
        )
        or (e["method"] == "Log.entryAdded" and e["params"]["entry"]["level"] in ("error", "warning"))
    ]
    assert errors == [], errors
    requests = [
        e["params"]["request"]["url"] for e in cdp.events if e["method"] == "Network.requestWillBeSent"
    ]
    assert requests and all(u == page.as_uri() for u in requests), requests
