"""The leaderboard Space: handlers without Gradio, the Gradio build with and without login, and
the whole app in headless Chromium (validate, submit, then the table), started exactly as a
user starts it: ``python -m leaderboard.app --blind ... --gold ... --results ... --no-login``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from live_server import start_app, stop

from leaderboard.app import LeaderboardApp, md_escape
from leaderboard.store import LocalStore
from leaderboard.synthetic import make_fixture, write_predictions

ROOT = Path(__file__).resolve().parents[1]
T0 = datetime(2026, 5, 4, 9, 0, tzinfo=timezone.utc)
CHROMIUM = os.environ.get("DIALFORK_CHROMIUM", "/usr/bin/chromium")
HAS_GRADIO = importlib.util.find_spec("gradio") is not None


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    return make_fixture(tmp_path_factory.mktemp("lbapp"), n_sources=2, seed=9, with_text=False)


class Clock:
    def __init__(self, t):
        self.t = t
        self.lock = threading.Lock()

    def __call__(self):
        with self.lock:
            self.t += timedelta(seconds=1)
            return self.t


def _form(**kw):
    md = {
        "method": "Local method",
        "regime": "offline",
        "used_conformant_train": False,
        "model_name": None,
        "model_size": "7B",
        "code_url": None,
        "open_source": True,
        "contact": "x@y.org",
        "track": "detector",
    }
    md.update(kw)
    return md


def _app(env, tmp_path, **kw):
    store = LocalStore(tmp_path / "store", clock=Clock(T0), max_per_day=kw.pop("max_per_day", 5))
    return LeaderboardApp(blind_dir=str(env["blind_dir"]), gold_dir=str(env["gold_dir"]), store=store, **kw)


# ---------------------------------------------------------------- handlers (no Gradio)


def test_local_submitter_comes_from_the_form(env, tmp_path):
    app = _app(env, tmp_path, require_login=False)
    sub = write_predictions({b["dialogue_id"]: 2 for b in env["blind"]}, tmp_path / "s.jsonl")
    msg, _ = app.handle_submit(str(sub), _form())
    assert msg.startswith("Enter a submitter name")
    msg, res = app.handle_submit(str(sub), _form(), submitter="ada")
    assert msg.startswith("**Stored** as `ada/local-method/") and res["submitter"] == "ada"
    # a name with a trailing newline (or anything not a full match) is refused, nothing is stored
    msg, rep = app.handle_submit(str(sub), _form(), submitter="ada\n")
    assert "not a valid id" in msg and rep["errors"][0]["code"] == "bad_submitter"
    assert [p.name for p in (tmp_path / "store" / "results").iterdir()] == ["ada"]


def test_on_a_space_only_the_oauth_user_counts(env, tmp_path):
    app = _app(env, tmp_path, require_login=True)
    sub = write_predictions({b["dialogue_id"]: 2 for b in env["blind"]}, tmp_path / "s.jsonl")
    assert app.handle_submit(str(sub), _form(), submitter="mallory")[0].startswith("Log in")
    msg, res = app.handle_submit(
        str(sub),
        _form(submitter="mallory"),
        profile=type("P", (), {"username": "bob"})(),
        submitter="mallory",
    )
    assert res["submitter"] == "bob" and res["metadata"]["submitter"] == "bob" and "bob/" in res["key"]


def test_errors_in_plain_words_capped_and_escaped(env, tmp_path):
    app = _app(env, tmp_path, require_login=False)
    lines = [
        json.dumps({"dialogue_id": f"[x](javascript:alert(1))-{i}" + "z" * 200, "prediction": 1.5})
        for i in range(300)
    ]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n", encoding="utf-8")
    msg, rep = app.handle_validate(str(bad), _form(model_size="big", submitter="a b"))
    assert (
        rep["n_errors"] > 100 and len(rep["errors"]) == 100 and rep["errors_omitted"] == rep["n_errors"] - 100
    )
    assert (
        msg.startswith(f"**{rep['n_errors']:,} error(s)**") and "more (the report lists the first 100)" in msg
    )
    assert (
        "](javascript" not in msg and "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz" not in msg
    )  # ids shortened
    text = json.dumps(rep)
    assert "does not match" not in text and "is not of type" not in text  # no raw jsonschema text
    assert md_escape("*a* [b](c) <i>") == r"\*a\* \[b\]\(c\) \<i\>"


def test_rate_limit_holds_under_concurrent_submissions(env, tmp_path):
    """Eight simultaneous submissions of one submitter with a limit of 3: exactly 3 are stored.
    The store's count is slowed down so that, without the lock, all eight would pass it."""

    class SlowCount(LocalStore):
        def count_today(self, submitter, now=None):
            n = super().count_today(submitter, now)
            time.sleep(0.05)
            return n

    store = SlowCount(tmp_path / "store", clock=Clock(T0), max_per_day=3)
    app = LeaderboardApp(
        blind_dir=str(env["blind_dir"]), gold_dir=str(env["gold_dir"]), store=store, require_login=False
    )
    app.blind  # noqa: B018 - read once, before the threads
    subs = [  # eight different files: a submitter's file is scored once (issue 46 item 8)
        write_predictions(
            {b["dialogue_id"]: (1 if j < i else 2) for j, b in enumerate(env["blind"])},
            tmp_path / f"s{i}.jsonl",
        )
        for i in range(8)
    ]
    out: list[str] = []
    threads = [
        threading.Thread(
            target=lambda i=i: out.append(
                app.handle_submit(str(subs[i]), _form(method=f"m{i}"), submitter="eve")[0]
            )
        )
        for i in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(m.startswith("**Stored**") for m in out) == 3
    assert sum(m.startswith("**Refused**") for m in out) == 5
    assert len(store.keys(submitter="eve")) == 3


def test_rate_limit_holds_across_processes(env, tmp_path):
    """Four processes submit for one submitter at once (limit 2): the file lock lets 2 through."""
    store_dir = tmp_path / "store"
    subs = [  # a file each: a submitter's file is scored once
        write_predictions(
            {b["dialogue_id"]: (1 if j < i else 2) for j, b in enumerate(env["blind"])},
            tmp_path / f"s{i}.jsonl",
        )
        for i in range(4)
    ]
    (tmp_path / "s.metadata.json").write_text(json.dumps(_form(submitter="zed")), encoding="utf-8")
    script = (
        "import sys, time\n"
        "from leaderboard.store import LocalStore\n"
        "class Slow(LocalStore):\n"
        "    def count_today(self, s, now=None):\n"
        "        n = super().count_today(s, now); time.sleep(0.3); return n\n"
        "from leaderboard.submissions import submit\n"
        "from leaderboard.store import RateLimitError\n"
        f"st = Slow({str(store_dir)!r}, max_per_day=2)\n"
        "try:\n"
        f"    submit(SUB, track='detector', gold={str(env['gold_dir'])!r}, store=st, ci_resamples=0)\n"
        "    print('stored')\n"
        "except RateLimitError:\n"
        "    print('refused')\n"
    )
    envv = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH")))),
    }
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                script.replace(
                    "ci_resamples=0", f"ci_resamples=0, metadata={str(tmp_path / 's.metadata.json')!r}"
                ).replace("SUB", repr(str(sub))),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=envv,
        )
        for sub in subs
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    results = sorted(o.strip().splitlines()[-1] if o.strip() else e[-300:] for o, e in outs)
    assert results == ["refused", "refused", "stored", "stored"], outs
    assert len(LocalStore(store_dir).keys(submitter="zed")) == 2


# ---------------------------------------------------------------- the Gradio build

_BUILD = """
import json, sys
from leaderboard.app import LeaderboardApp
from leaderboard.store import LocalStore
app = LeaderboardApp(blind_dir=sys.argv[1], gold_dir=sys.argv[2], store=LocalStore(sys.argv[3]),
                     require_login=sys.argv[4] == "login")
demo = app.build()
import gradio as gr
kinds = sorted({type(b).__name__ for b in demo.blocks.values()})
labels = [getattr(b, "label", None) for b in demo.blocks.values() if isinstance(b, gr.Textbox)]
print(json.dumps({"kinds": kinds, "labels": labels, "expects_oauth": bool(demo.expects_oauth),
                  "authlib": any(m.split(".")[0] == "authlib" for m in sys.modules)}))
"""


@pytest.mark.skipif(not HAS_GRADIO, reason="gradio is not installed (pip install 'dialfork[leaderboard]')")
@pytest.mark.parametrize("mode", ["no-login", "login"])
def test_build_with_and_without_login(env, tmp_path, mode):
    envv = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH")))),
        "GRADIO_ANALYTICS_ENABLED": "False",
    }
    if mode == "login":  # what a Space with hf_oauth: true provides (nothing is contacted while building)
        envv.update(
            {
                "SYSTEM": "spaces",
                "SPACE_ID": "idiap/dialfork-leaderboard",
                "OAUTH_CLIENT_ID": "test-client",
                "OAUTH_CLIENT_SECRET": "test-secret",
                "OAUTH_SCOPES": "openid profile",
                "OPENID_PROVIDER_URL": "https://huggingface.co",
            }
        )
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            _BUILD,
            str(env["blind_dir"]),
            str(env["gold_dir"]),
            str(tmp_path / "store"),
            mode,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=envv,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    if mode == "no-login":
        assert "LoginButton" not in got["kinds"] and not got["expects_oauth"] and not got["authlib"]
        assert "Submitter (your account or team id)" in got["labels"]
    else:
        assert "LoginButton" in got["kinds"] and got["expects_oauth"]
        assert not any(lbl and lbl.startswith("Submitter") for lbl in got["labels"])


# ---------------------------------------------------------------- the app in Chromium
#
# Under load (2 cores shared with other jobs) every step of this test can be many times slower
# than on an idle machine, so nothing here waits on a short clock or on a transient state:
# - Playwright's ``expect`` waits 5 s unless told otherwise (``page.set_default_timeout`` does
#   not apply to it): every ``expect`` here gets ``STEP_MS``. The 5 s default on the status
#   checks was what failed under load (validation and scoring run in the starved app).
# - a chosen file shows its name as one text only in the progress view, while the upload runs;
#   once uploaded, the preview splits it into stem and extension, so a text match on the name
#   passes only if it looks during the upload (idle machine) and never after (loaded machine).
#   The test waits for the end state: the preview's cell labelled with the file name.
# - Gradio's upload widget replaces its hidden file input when its settings update; a file
#   set on the input being replaced is dropped without a request. The file is chosen again
#   only when no upload request was sent; an upload in flight is waited for, never repeated.
# - Gradio's ``launch`` gives its own server 5 s to start and then probes it with a 3 s HEAD
#   request; a starved process can miss either and exit: ``live_server.start_app`` starts it
#   again on a fresh port (a bounded number of times) when it exits before serving.
# - every wait is bounded (``STEP_MS`` for a browser step, measured while the browser itself
#   may be starved; the pytest timeout for the whole test).

STEP_MS = 180_000  # one browser step (a click and its result), bounded
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu"]  # Playwright adds its own headless defaults


@pytest.fixture
def served_app(env, tmp_path):
    if not HAS_GRADIO:
        pytest.skip("gradio is not installed (pip install 'dialfork[leaderboard]')")
    cmd = [
        sys.executable,
        "-m",
        "leaderboard.app",
        "--blind",
        str(env["blind_dir"]),
        "--gold",
        str(env["gold_dir"]),
        "--results",
        str(tmp_path / "store"),
        "--no-login",
        "--host",
        "127.0.0.1",
    ]
    envv = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH")))),
        "GRADIO_ANALYTICS_ENABLED": "False",
        "HF_HUB_OFFLINE": "1",
    }
    proc, base, log = start_app(lambda port: ([*cmd, "--port", str(port)], envv), tmp_path, tmp_path)
    try:
        yield {"base": base, "store": tmp_path / "store", "log": log}
    finally:
        stop(proc)


def _is_upload(request) -> bool:
    return request.method == "POST" and "/gradio_api/upload" in request.url.split("?")[0]


def _shown(box, name: str):
    """The uploaded file in the box's preview (its name cell; the text itself is split into a
    stem and an extension, so a text match on the whole name finds nothing there). While the
    upload runs, a progress view shows the name as one text: that is not the end state."""
    return box.locator(f'.file-preview [aria-label="{name}"]')


def _upload(page, path: Path, sync_api, seen: list[str], tries: int = 3) -> None:
    """Choose ``path`` in the upload box and wait until the box shows it.

    The front end answers a chosen file with a POST to ``/gradio_api/upload`` and shows the name
    once that upload is done. When no upload request comes at all, the change event reached an
    upload widget that was not listening yet: the file is chosen again (at most ``tries`` times).
    When the request came, the test waits (bounded) for it and for the name; it never chooses
    again over an upload in flight. ``seen`` (the page's console and requests) goes into the
    failure's message."""
    box = page.locator("#upload")
    for _ in range(tries):
        file_input = box.locator("input[type=file]")
        sync_api.expect(file_input).to_have_count(1, timeout=STEP_MS)
        try:
            with page.expect_request(_is_upload, timeout=STEP_MS // 3) as req:
                file_input.set_input_files(str(path), timeout=STEP_MS)
        except sync_api.TimeoutError:
            continue  # nothing was sent: choose again
        resp = req.value.response()  # waits for the server's answer
        assert resp is not None and resp.ok, f"upload of {path.name} failed: {resp and resp.status}"
        try:
            sync_api.expect(_shown(box, path.name)).to_be_visible(timeout=STEP_MS)
        except AssertionError as e:
            raise AssertionError(
                f"{e}\n#upload after the upload answered {resp.status} {resp.text()[:300]}:\n"
                f"{box.evaluate('b => b.outerHTML')[:4000]}\nconsole:\n" + "\n".join(seen[-30:])
            ) from None
        return
    raise AssertionError(f"the front end never uploaded {path.name} after {tries} tries")


@pytest.mark.chromium
@pytest.mark.timeout(1800)  # every step is bounded; this bounds their sum on a starved machine
def test_validate_submit_and_table_in_chromium(served_app, env, tmp_path):
    if not (os.path.exists(CHROMIUM) or shutil.which(CHROMIUM)):
        pytest.skip(f"Debian's chromium not found at {CHROMIUM}")
    sync_api = pytest.importorskip("playwright.sync_api")
    expect = sync_api.expect

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"dialogue_id": "nope", "prediction": 2.0}\n', encoding="utf-8")
    good = write_predictions({b["dialogue_id"]: 2 for b in env["blind"]}, tmp_path / "good.jsonl")

    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, timeout=STEP_MS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(STEP_MS)
            page.set_default_navigation_timeout(STEP_MS)
            seen: list[str] = []  # what the front end said and fetched, for a failure's message
            page.on("console", lambda m: seen.append(f"{m.type}: {m.text}"))
            page.on("requestfinished", lambda r: seen.append(f"net: {r.method} {r.url[:120]}"))
            page.on(
                "requestfailed", lambda r: seen.append(f"net FAILED: {r.method} {r.url[:120]} {r.failure}")
            )
            page.goto(served_app["base"])
            page.get_by_role("tab", name="Submit").click()
            expect(page.locator("#upload input[type=file]")).to_have_count(1, timeout=STEP_MS)  # front end up
            page.locator("#submitter").get_by_role("textbox").fill("ada")
            page.locator("#method").get_by_role("textbox").fill("Chromium method @FOOTER@")
            page.locator("#contact").get_by_role("textbox").fill("ada@example.org")

            # a bad file: plain-word errors with line numbers, nothing stored
            _upload(page, bad, sync_api, seen)
            page.locator("#validate").click()
            status = page.locator("#status")
            expect(status).to_contain_text("error(s)", timeout=STEP_MS)
            text = status.inner_text()
            assert "line 1: dialogue_id 'nope'" in text and "turn indices are JSON integers (write 2)" in text
            assert "is not in the blind test set" in text

            # the good file: valid, then stored
            page.locator(
                "#upload button[aria-label*='Clear'], #upload button[aria-label*='clear']"
            ).first.click()
            # the upload box re-renders its file input once the clear is processed: wait for that,
            # so the new file does not go to the input being replaced
            expect(_shown(page.locator("#upload"), "bad.jsonl")).to_have_count(0, timeout=STEP_MS)
            _upload(page, good, sync_api, seen)
            page.locator("#validate").click()
            expect(status).to_contain_text("Valid detector submission", timeout=STEP_MS)
            page.locator("#submit").click()
            expect(status).to_contain_text("Stored", timeout=STEP_MS)
            assert "ada/chromium-method-footer/" in status.inner_text()

            # the table shows the new row (refreshed after the submit), the method name kept literal
            page.get_by_role("tab", name="Leaderboard").click()
            frame = page.frame_locator("iframe[title='DialFork leaderboard']")
            row = frame.locator("#detector-table tbody.results tr.result")
            expect(row).to_have_count(1, timeout=STEP_MS)
            assert "Chromium method @FOOTER@" in row.inner_text()
            assert frame.locator("#detector-table thead th").nth(2).inner_text().strip() == "Score"
        finally:
            browser.close()
    stored = list((served_app["store"] / "results" / "ada").rglob("*.json"))
    assert len(stored) == 1 and "ada@example.org" not in stored[0].read_text()


# ---------------------------------------------------------------- the Space folder


def _front_matter(readme: Path) -> dict:
    import re

    import yaml

    m = re.match(r"^---\n(.*?)\n---\n", readme.read_text(encoding="utf-8"), flags=re.S)
    assert m, f"{readme}: no YAML front matter"
    return yaml.safe_load(m.group(1))


def test_space_folder():
    folder = ROOT / "hf_spaces" / "leaderboard"
    meta = _front_matter(folder / "README.md")
    assert meta["sdk"] == "gradio" and meta["app_file"] == "app.py" and (folder / "app.py").is_file()
    assert meta["hf_oauth"] is True and "leaderboard" in meta["tags"]
    reqs = (folder / "requirements.txt").read_text(encoding="utf-8").splitlines()
    gradio_req = [r for r in reqs if r.startswith("gradio")]
    assert (
        gradio_req and gradio_req[0].startswith("gradio[oauth]") and str(meta["sdk_version"]) in gradio_req[0]
    )
    assert any(r.startswith("dialfork[leaderboard]") for r in reqs)
    # the Space's app.py runs leaderboard.app with login (no --no-login)
    src = (folder / "app.py").read_text(encoding="utf-8")
    assert "from leaderboard.app import main" in src and "--no-login" not in src
