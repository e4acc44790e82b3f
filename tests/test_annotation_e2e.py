"""End to end in real headless Chromium (Debian's ``chromium`` driven by Playwright).

An admin logs in, creates an annotator and draws a mini-block; the annotator opens their
personal link, reads the introduction and completes every conversation (conformant, forked
with the true instruction, forked with a foil) through all three steps. Every payload the
browser receives is recorded: no cue reaches step 1 and no fork turn reaches step 1 or 2.
"""

from __future__ import annotations

import html
import os
import re
import shutil
import threading
import time

import pytest

CHROMIUM = os.environ.get("DIALFORK_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu"]  # Playwright adds its own headless defaults
STEP_MS = 180_000  # one browser step, bounded: generous, since the machine may be loaded (15 s was not)
PASSWORD = "e2e-admin-password"
BATCH_SEED = 17

pytestmark = pytest.mark.chromium


def _need_browser():
    if not (os.path.exists(CHROMIUM) or shutil.which(CHROMIUM)):
        pytest.skip(f"Debian's chromium not found at {CHROMIUM} (apt-get install -y chromium)")
    pytest.importorskip(
        "playwright.sync_api", reason="Playwright for Python is not installed (pip install playwright)"
    )
    pytest.importorskip("uvicorn")


def _pick_study_seed(records, pool):
    """A study seed whose first mini-block (batch seed BATCH_SEED) holds a fork shown a foil, a
    fork shown its true instruction with a step 3, and the conformant dialogue (always a foil)."""
    from annotation.design import TaskPool, assign_cue, draw_blocks

    block = draw_blocks(TaskPool.from_rows("weather", records), ["1"], 1, BATCH_SEED, next_row=0, next_key=1)[
        0
    ].block
    by_id = {r["dialogue_id"]: r for r in records}
    recs = [by_id[d] for d in block.dialogue_ids]
    for seed in range(1000):
        cues = [assign_cue(r, seed, pool) for r in recs]
        foil_fork = any(c.kind == "foil" and r["hallucination_type"] for c, r in zip(cues, recs))
        true_step3 = any(c.kind == "true" and r["fork_turn"] > 1 for c, r in zip(cues, recs))
        if foil_fork and true_step3:
            return seed
    raise AssertionError("no suitable study seed")


@pytest.fixture
def server(tmp_path, star_dir):
    _need_browser()
    import uvicorn

    from annotation.app import create_app
    from annotation.simulate import synthetic_records
    from annotation.store import Study
    from generation.variants import load_variants

    pool = load_variants()
    records = synthetic_records("weather", 8, seed=4, pool=pool)
    study = Study(
        f"sqlite:///{tmp_path / 'study.db'}", study_seed=_pick_study_seed(records, pool), variants=pool
    )
    study.import_records(records)
    study.set_admin_password(PASSWORD)
    app = create_app(
        study,
        star_dir=star_dir,
        analysis_dir=tmp_path / "analyses",
        analysis_options={"n_boot": 100, "plots": False},
    )
    # port 0: the server binds a free port itself (no window for another process to take it)
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off"))
    th = threading.Thread(target=srv.run, daemon=True)
    th.start()
    deadline = time.monotonic() + 300
    while not srv.started:
        if time.monotonic() > deadline or not th.is_alive():
            pytest.fail("the annotation server did not start")
        time.sleep(0.05)
    port = srv.servers[0].sockets[0].getsockname()[1]
    yield {"base": f"http://127.0.0.1:{port}", "study": study, "records": records, "pool": pool}
    srv.should_exit = True
    th.join(timeout=60)


@pytest.mark.timeout(1800)  # every step is bounded by STEP_MS; this bounds their sum on a starved machine
def test_admin_and_annotator_in_chromium(server):
    from playwright.sync_api import sync_playwright

    base, study, pool = server["base"], server["study"], server["pool"]
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    from annotation.db import Conversation

    with Session(study.engine) as s:  # every cue of the study (WIC cues name a substitute task)
        all_cues = {v.cue for vs in pool.types.values() for v in vs} | set(
            s.scalars(select(Conversation.cue_text))
        )

    def cues_in(body: str) -> list[str]:  # bodies are recorded HTML-unescaped
        return [c for c in all_cues if c in body]

    received: list[dict] = []

    def record(resp):
        if not resp.url.startswith(base):
            return
        try:
            body = html.unescape(resp.body().decode("utf-8", "replace"))
        except Exception:  # redirects carry no body; a page navigated away before its body was read
            body = None
        received.append(
            {
                "url": resp.url,
                "step": resp.headers.get("x-annotation-step"),
                "body": body,
                "status": resp.status,
            }
        )

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, timeout=STEP_MS)
        try:
            page = browser.new_page()
            page.set_default_timeout(STEP_MS)
            page.set_default_navigation_timeout(STEP_MS)
            page.on("response", record)

            # --- admin: log in, create an annotator, draw one mini-block of weather for them
            page.goto(f"{base}/admin")
            assert page.url.endswith("/admin/login")
            page.fill("input[name=password]", "not the password")
            page.click("#login")
            assert "Wrong password." in page.inner_text("#login-message")
            page.fill("input[name=password]", PASSWORD)
            page.click("#login")
            page.fill("#annotator-name", "ana")
            page.click("#create-annotator")
            link = page.inner_text("code.link[data-annotator=ana]").strip()
            assert re.fullmatch(re.escape(base) + r"/a/[A-Za-z0-9_-]{20,}", link)
            page.select_option("#batch-task", "weather")
            page.check("input[name=annotator_ids]")
            page.fill("#batch-seed", str(BATCH_SEED))
            page.click("#draw-batch")
            assert "drawn and assigned" in page.inner_text("#batch-created")

            # --- annotator: a fresh browser context (no admin cookie), personal link only
            ctx = browser.new_context()
            ann = ctx.new_page()
            ann.set_default_timeout(STEP_MS)
            ann.set_default_navigation_timeout(STEP_MS)
            ann.on("response", record)
            ann.goto(link)
            ann.click("#continue")
            assert "/intro/weather" in ann.url
            assert "Ask the user for the day" in ann.inner_text("#workflow")
            # the flowchart image loads after the page (it may still be loading on a loaded machine)
            ann.wait_for_function(
                "() => { const i = document.querySelector('.flowchart img');"
                " return i !== null && i.complete && i.naturalWidth > 0; }",
                timeout=STEP_MS,
            )
            ann.click("#start-task")

            steps_seen = []
            replayed = False
            for _ in range(40):
                if "/c/" not in ann.url:
                    break
                ann.wait_for_selector("body[data-ready]", state="attached")  # app.js has run
                token = ann.url.rsplit("/", 1)[1]
                step = int(ann.get_attribute("#conversation", "data-step"))
                steps_seen.append(step)
                if step == 1:
                    assert ann.is_disabled("#submit1")
                    ann.locator("#slider").fill("37")
                    ann.click("#submit1")
                    if not replayed:  # the same form posted again (a replay): refused, nothing changes
                        r = ann.request.post(f"{link}/c/{token}/step/1", form={"slider": "99"})
                        assert r.status == 409 and "cannot be changed" in r.text()
                        ann.reload()
                        assert ann.get_attribute("#conversation", "data-step") == "2"
                        replayed = True
                elif step == 2:
                    cue = ann.inner_text("#cue").strip()
                    conv = _conversation(study, token)
                    assert cue == conv.cue_text  # the stored cue (for WIC: the substitute task's description)
                    if _is_true(study, token):
                        ann.check("input[name=answer][value=yes]")
                        ann.click(".turn.system[data-n='2']")
                        assert "assistant turn 2" in ann.inner_text("#onset-shown")
                    else:
                        ann.check("input[name=answer][value=no]")
                    ann.click("#submit2")
                else:
                    assert ann.locator(".fork-region").count() > 0
                    ann.check("input[name=prefix][value=yes]")
                    ann.fill("textarea[name=note]", "looks fine")
                    ann.click("#submit3")
            assert "all 5 conversations" in ann.inner_text("#all-done")
            assert 3 in steps_seen

            # --- admin: progress, recompute analyses, export
            page.goto(f"{base}/admin")
            assert "ana" in page.inner_text("#progress")
            page.click("#recompute")
            assert "Table 10" in page.inner_text("#analyses")
            csv_text = page.request.get(f"{base}/admin/export.csv").text()
            assert csv_text.count("\n") == 6
        finally:
            browser.close()

    # --- what was done: conformant, forked with the true cue, forked with a foil, all three steps
    rows = [r for r in study.export_rows() if r["state"] == 3]
    assert len(rows) == 5
    kinds = {("conformant" if r["hallucination_type"] is None else "fork", r["cue_kind"]) for r in rows}
    assert kinds == {("conformant", "foil"), ("fork", "true"), ("fork", "foil")}
    assert any(r["prefix_answer"] == "yes" and r["note"] == "looks fine" for r in rows)
    assert all(r["slider"] == 37 for r in rows)
    true_rows = [r for r in rows if r["cue_kind"] == "true"]
    assert all(r["cue_answer"] == "yes" and r["onset_turn"] == 2 for r in true_rows)

    # --- every payload the browser received
    by_text = {r["dialogue_id"]: r for r in rows}
    conv_pages = [x for x in received if x["step"] is not None and x["body"] is not None]
    assert {x["step"] for x in conv_pages} == {"1", "2", "3"}  # every step's payload was read
    for x in received:
        if (
            "/admin" in x["url"] or x["body"] is None
        ):  # an unread body (a navigation race) holds nothing to check
            continue
        low = x["body"].lower()
        if x["step"] in (None, "1"):
            # step 1 (and every other annotator page, the script and the style sheet): no cue at all
            assert not cues_in(x["body"]), x["url"]
            assert "instruction" not in low, x["url"]
        if x["step"] in ("1", "2"):
            assert "fork" not in low and "data-fork-turn" not in low, x["url"]
            assert "injected" not in low and "actually given" not in low, x["url"]
            assert not any(d in x["body"] for d in by_text), x["url"]  # opaque: no dialogue id
        if x["step"] == "2":
            shown = cues_in(x["body"])
            assert len(shown) == 1, x["url"]  # only the cue of this conversation
        if x["step"] == "3":
            assert "data-fork-turn" in x["body"]


def _conversation(study, token):
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    from annotation.db import Assignment, Conversation

    with Session(study.engine) as s:
        cid = s.scalar(select(Assignment.conversation_id).where(Assignment.token == token))
        c = s.get(Conversation, cid)
        s.expunge(c)
        return c


def _cue_type(study, token):
    return _conversation(study, token).cue_type


def _is_true(study, token):
    return _conversation(study, token).cue_kind == "true"
