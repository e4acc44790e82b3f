"""The annotation app: gating, security and reliability (FastAPI TestClient, SQLite in tmp_path)."""

from __future__ import annotations

import json
import shutil
import threading

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("sqlalchemy")
pytest.importorskip("httpx")

from fastapi.testclient import TestClient  # noqa: E402

from annotation.app import STEP_HEADER, create_app  # noqa: E402
from annotation.security import LoginThrottle, hash_password, verify_password  # noqa: E402
from annotation.simulate import synthetic_records  # noqa: E402
from annotation.store import Study, recompute_cue, reconstruct_presentation  # noqa: E402
from generation.variants import load_variants  # noqa: E402

PASSWORD = "correct horse battery"


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


@pytest.fixture(scope="module")
def records():
    return synthetic_records("weather", 12, seed=2)


@pytest.fixture(scope="module")
def template_db(tmp_path_factory, records):
    """A study (records, admin password, alice and bob with one mini-block each), built once."""
    path = tmp_path_factory.mktemp("template") / "study.db"
    study = Study(f"sqlite:///{path}", study_seed=42)
    study.import_records(records)
    # the stored hash names its own scrypt cost and verification reads it from there: a low
    # cost keeps every login of these tests cheap (the throttle, not scrypt, is under test
    # here; test_password_is_stored_hashed checks the default cost's hashes)
    study.set_admin_password(PASSWORD)
    from sqlalchemy.orm import Session

    from annotation.db import Meta

    with Session(study.engine) as s, s.begin():
        s.get(Meta, "admin_hash").value = hash_password(PASSWORD, n=2**10)
    assert study.meta("admin_hash").startswith(f"scrypt${2**10}$")
    a = study.create_annotator("alice")
    b = study.create_annotator("bob")
    study.draw_batch("weather", [a["id"], b["id"]], 1, seed=9, overlap_share=0.0)
    study.engine.dispose()  # checkpoints the WAL into the file
    return path, a, b


@pytest.fixture
def env(tmp_path, records, star_dir, template_db):
    src, a, b = template_db
    shutil.copy(src, tmp_path / "study.db")
    study = Study(f"sqlite:///{tmp_path / 'study.db'}")
    clock = Clock()
    throttle = LoginThrottle(study.engine, clock=clock)
    app = create_app(
        study,
        star_dir=star_dir,
        analysis_dir=tmp_path / "an",
        throttle=throttle,
        analysis_options={"n_boot": 100, "plots": False},
    )
    for who in (a, b):  # the API tests start after the intro; test_intro_* undo this
        study.mark_intro_seen(study.annotator_by_link(who["link_token"]), "weather")
    client = TestClient(app)
    return {
        "study": study,
        "client": client,
        "a": a,
        "b": b,
        "clock": clock,
        "records": records,
        "app": app,
        "throttle": throttle,
    }


def _forget_intros(env):
    from sqlalchemy.orm import Session

    from annotation.db import IntroSeen

    with Session(env["study"].engine) as s, s.begin():
        s.query(IntroSeen).delete()


def _next(env, who="a"):
    ann = env["study"].annotator_by_link(env[who]["link_token"])
    return env["study"].overview(ann)["next"]["token"]


def _row(env, token):
    return next(r for r in env["study"].export_rows() if r["dialogue_id"] in _dids(env, token))


def _dids(env, token):
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    from annotation.db import Assignment, Conversation

    with Session(env["study"].engine) as s:
        cid = s.scalar(select(Assignment.conversation_id).where(Assignment.token == token))
        return {s.get(Conversation, cid).dialogue_id}


def _state(env, token):
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    from annotation.db import Assignment

    with Session(env["study"].engine) as s:
        a = s.scalar(select(Assignment).where(Assignment.token == token))
        return (a.state, a.slider, a.cue_answer, a.onset_turn, a.prefix_answer, a.note)


def _tokens(env, who):
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    from annotation.db import Assignment

    with Session(env["study"].engine) as s:
        return list(
            s.scalars(
                select(Assignment.token)
                .where(Assignment.annotator_id == env[who]["id"])
                .order_by(Assignment.position)
            )
        )


def _api(env, who, token, step=None):
    link = env[who]["link_token"]
    return f"/api/a/{link}/c/{token}" + (f"/step/{step}" if step else "")


def _login(client):
    return client.post("/admin/login", data={"password": PASSWORD}, follow_redirects=False)


# ------------------------------------------------------------------ admin security


def test_admin_routes_refuse_without_password(env):
    c = env["client"]
    r = c.get("/admin", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/admin/login"
    for path in ("/admin/export.json", "/admin/progress.json"):
        r = c.get(path)
        assert r.status_code == 401 and "password" in r.json()["error"]
    r = c.get("/admin/export.csv", follow_redirects=False)
    assert r.status_code == 303 and "dialogue_id" not in r.text
    for path, data in (
        ("/admin/annotators", {"name": "eve"}),
        ("/admin/batches", {"task": "weather"}),
        ("/admin/analyses", {}),
    ):
        r = c.post(path, data=data)
        assert r.status_code == 401
    assert [a["name"] for a in env["study"].annotators()] == ["alice", "bob"]  # nothing created
    c.cookies.set("annotation_admin", "forged-session-token")
    assert c.get("/admin/progress.json").status_code == 401


def test_password_is_stored_hashed(env):
    stored = env["study"].meta("admin_hash")
    assert stored.startswith("scrypt$") and PASSWORD not in stored
    assert verify_password(PASSWORD, stored) and not verify_password(PASSWORD + "x", stored)
    assert hash_password(PASSWORD) != hash_password(PASSWORD)  # salted
    assert not verify_password(PASSWORD, "garbage")


def test_password_check_is_constant_time(env, monkeypatch):
    import annotation.security as sec

    calls = []
    real = sec.hmac.compare_digest

    def spy(a, b):
        calls.append((len(a), len(b)))
        return real(a, b)

    monkeypatch.setattr(sec.hmac, "compare_digest", spy)
    assert _login(env["client"]).status_code == 303
    assert env["client"].post("/admin/login", data={"password": "nope"}).status_code == 401
    assert len(calls) == 2


def test_login_attempts_are_rate_limited_with_backoff(env):
    c, clock, throttle = env["client"], env["clock"], env["throttle"]
    for _ in range(throttle.free_failures):
        r = c.post("/admin/login", data={"password": "wrong"})
        assert r.status_code == 401 and "Wrong password" in r.text
    r = _login(c)  # even the right password is refused during the backoff
    assert r.status_code == 429 and "Too many failed attempts" in r.text
    assert int(r.headers["Retry-After"]) == throttle.delay(throttle.free_failures) == 1
    clock.t += int(r.headers["Retry-After"])  # the documented backoff, then the admin gets in
    assert _login(c).status_code == 303
    assert c.get("/admin/progress.json").status_code == 200
    # exponential: after the success the count starts again; each further failure doubles the wait
    for _ in range(throttle.free_failures):
        assert c.post("/admin/login", data={"password": "wrong"}).status_code == 401
    waits = []
    for _ in range(4):
        r = c.post("/admin/login", data={"password": "wrong"})
        assert r.status_code == 429
        clock.t += int(r.headers["Retry-After"])
        waits.append(int(r.headers["Retry-After"]))
        assert c.post("/admin/login", data={"password": "wrong"}).status_code == 401
    assert waits == [1, 2, 4, 8]


def test_backoff_is_capped_and_forgotten():
    clock = Clock()
    t = LoginThrottle(clock=clock, free_failures=2, base_delay_s=1, max_delay_s=60, forget_s=3600)
    assert [t.delay(n) for n in range(1, 12)] == [0, 1, 2, 4, 8, 16, 32, 60, 60, 60, 60]
    assert t.delay(10**6) == 60  # no overflow
    for _ in range(30):
        clock.t += 61
        assert t.attempt("10.0.0.1") == 0
    assert t.status()[1]["failures"] == 30
    clock.t += 3600  # an hour without attempts forgives the client
    assert t.retry_after("10.0.0.1") == 0 and t.attempt("10.0.0.1") == 0
    assert [r.get("failures") for r in t.status()] == [None, 1]


def test_global_limit_slows_but_never_locks_out():
    clock = Clock()
    t = LoginThrottle(clock=clock, free_failures=3, global_rate=2.0, global_burst=8)
    for i in range(8):  # address rotation: every address is new, the global bucket empties
        assert t.attempt(f"10.0.0.{i}") == 0
    waits = [t.attempt(f"10.0.1.{i}") for i in range(50)]
    assert all(0 < w <= 1 / t.global_rate for w in waits)  # slowed, at most 1/rate seconds
    assert t.attempt("192.0.2.7") == pytest.approx(0.5)
    clock.t += 0.5
    assert t.attempt("192.0.2.7") == 0  # the real admin gets through after the short wait
    clock.t += 8 / 2.0
    assert all(t.attempt(f"10.0.2.{i}") == 0 for i in range(8))  # the bucket is full again


def test_throttle_keys_ipv6_by_prefix_and_resets_by_cli(tmp_path, capsys):
    from annotation.__main__ import main
    from annotation.security import client_key

    assert client_key("2001:db8::1") == client_key("2001:db8::ffff") == "2001:db8::/64"
    assert client_key("::ffff:192.0.2.1") == "192.0.2.1" and client_key(None) == "unknown"
    db = f"sqlite:///{tmp_path / 's.db'}"
    study = Study(db, study_seed=1)
    clock = Clock()
    t = LoginThrottle(study.engine, clock=clock)
    for _ in range(6):
        t.attempt("198.51.100.4")
    t.attempt("198.51.100.5")
    assert t.retry_after("198.51.100.4") > 0
    assert main(["reset-throttle", "--db", db, "--dry-run"]) == 0
    assert "198.51.100.4" in capsys.readouterr().out and t.retry_after("198.51.100.4") > 0
    assert main(["reset-throttle", "--db", db, "--client", "198.51.100.4"]) == 0
    assert t.retry_after("198.51.100.4") == 0 and [r["client"] for r in t.status()][-1] == "198.51.100.5"
    assert main(["reset-throttle", "--db", db]) == 0
    assert t.status() == []


def test_logout_ends_the_session(env):
    c = env["client"]
    _login(c)
    assert c.get("/admin/progress.json").status_code == 200
    c.post("/admin/logout")
    c.cookies.clear()
    assert c.get("/admin/progress.json").status_code == 401


# ------------------------------------------------------------------ annotator isolation and opacity


def test_link_reaches_only_own_assignments(env):
    c = env["client"]
    ta, tb = _next(env, "a"), _next(env, "b")
    before = _state(env, tb)
    # alice's link with bob's token: 404, same answer as for a made-up token; nothing changes
    r = c.get(f"/api/a/{env['a']['link_token']}/c/{tb}")
    assert r.status_code == 404 and r.json()["error"] == "no such conversation in your assignments"
    assert c.get(f"/api/a/{env['a']['link_token']}/c/made-up").json() == r.json()
    r = c.post(f"/api/a/{env['a']['link_token']}/c/{tb}/step/1", json={"slider": 3})
    assert r.status_code == 404 and _state(env, tb) == before
    assert c.get(f"/a/{env['a']['link_token']}/c/{tb}").status_code == 404
    assert c.get("/a/not-a-link").status_code == 404
    assert c.get(f"/api/a/{env['a']['link_token']}/c/{ta}").status_code == 200


def test_tokens_are_opaque_and_pages_leak_no_labels(env):
    c, study = env["client"], env["study"]
    rows = study.export_rows()
    assert rows
    tokens = set()
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    from annotation.db import Assignment

    with Session(study.engine) as s:
        for a in s.scalars(select(Assignment)):
            tokens.add(a.token)
            assert len(a.token) >= 24
    assert len(tokens) == len(rows)
    for tok in tokens:
        for r in env["records"]:
            assert r["dialogue_id"] not in tok and r["source_id"] not in tok
    link = env["a"]["link_token"]
    c.post(f"/a/{link}/intro/weather")
    tok = _next(env)
    html = c.get(f"/a/{link}/c/{tok}").text
    data = c.get(f"/api/a/{link}/c/{tok}").text
    for body in (html, data):
        assert not any(r["dialogue_id"] in body for r in env["records"])
        for h in ("WIC", "SSPC", "CSC", '"GR"', "fork", "variant", "instruction"):
            assert h not in body


# ------------------------------------------------------------------ gating


def test_steps_are_gated_and_ordered(env):
    c = env["client"]
    tok = _next(env)
    p1 = c.get(_api(env, "a", tok)).json()
    assert p1["step"] == 1
    # nothing that could tell a fork from a conformant dialogue (not even whether a step 3 follows)
    assert set(p1) == {"step", "token", "task", "turns", "num_assistant_turns", "question", "answer"}
    assert c.get(_api(env, "a", tok, 2)).status_code == 409
    r = c.post(_api(env, "a", tok, 2), json={"answer": "no"})
    assert r.status_code == 409 and "before step 1" in r.json()["error"]
    r3 = [c.get(_api(env, "a", t, 3)) for t in _tokens(env, "a")] + [
        c.post(_api(env, "a", t, 3), json={"prefix": "yes"}) for t in _tokens(env, "a")[:1]
    ]
    # before step 2, step 3 is refused the same way whether or not the conversation has one
    assert {r.status_code for r in r3} == {409}
    assert c.post(_api(env, "a", tok, 1), json={"slider": 70}).status_code == 200
    p2 = c.get(_api(env, "a", tok)).json()
    assert p2["step"] == 2 and p2["cue"] and "fork_turn" not in p2 and "injected_instruction" not in p2
    assert c.get(_api(env, "a", tok, 1)).json()["answer"] == {"slider": 70}  # earlier step: read-only
    assert set(p2) == set(p1) | {"cue_intro", "cue", "options", "slider"}
    assert c.get(_api(env, "a", tok, 3)).status_code in (404, 409)


def _complete(env, who, tok, onset=None):
    c = env["client"]
    assert c.post(_api(env, who, tok, 1), json={"slider": 50}).status_code == 200
    p = c.get(_api(env, who, tok)).json()
    body = {"answer": "yes", "onset_turn": onset or 1}
    r = c.post(_api(env, who, tok, 2), json=body)
    assert r.status_code == 200, r.text
    if r.json()["next_step"] == 3:
        p3 = c.get(_api(env, who, tok)).json()
        assert p3["step"] == 3 and p3["fork_turn"] >= 2 and p3["injected_instruction"]
        assert c.post(_api(env, who, tok, 3), json={"prefix": "mostly", "note": "ok"}).status_code == 200
    return p


def test_replayed_submissions_change_nothing(env):
    c = env["client"]
    tok = _next(env)
    assert c.post(_api(env, "a", tok, 1), json={"slider": 20}).status_code == 200
    r = c.post(_api(env, "a", tok, 1), json={"slider": 90})
    assert r.status_code == 409 and "cannot be changed" in r.json()["error"]
    assert _state(env, tok)[:2] == (1, 20)
    assert c.post(_api(env, "a", tok, 2), json={"answer": "no"}).status_code == 200
    after = _state(env, tok)
    assert c.post(_api(env, "a", tok, 1), json={"slider": 90}).status_code == 409
    assert c.post(_api(env, "a", tok, 2), json={"answer": "yes", "onset_turn": 1}).status_code == 409
    assert _state(env, tok) == after


@pytest.mark.parametrize(
    "step,body,needle",
    [
        (1, {"slider": 101}, "between 0 and 100"),
        (1, {"slider": -1}, "between 0 and 100"),
        (1, {"slider": "abc"}, "integer"),
        (1, {"slider": 50.5}, "integer"),
        (1, {"slider": True}, "integer"),
        (1, {}, "needs 'slider'"),
        (1, {"slider": 5, "cue": "x"}, "unknown field"),
    ],
)
def test_malformed_step1_is_refused(env, step, body, needle):
    tok = _next(env)
    before = _state(env, tok)
    r = env["client"].post(_api(env, "a", tok, step), json=body)
    assert r.status_code == 422 and needle in r.json()["error"]
    assert _state(env, tok) == before


def test_malformed_step2_and_step3_are_refused(env, records):
    c = env["client"]
    tok = _next(env)
    c.post(_api(env, "a", tok, 1), json={"slider": 10})
    T = c.get(_api(env, "a", tok)).json()["num_assistant_turns"]
    before = _state(env, tok)
    for body, needle in (
        ({"answer": "maybe"}, "one of yes, partly, no"),
        ({"answer": "yes"}, "click the first assistant turn"),
        ({"answer": "partly", "onset_turn": T + 1}, "is not an assistant turn"),
        ({"answer": "yes", "onset_turn": 0}, "is not an assistant turn"),
        ({"answer": "no", "onset_turn": 2}, "leave onset_turn empty"),
    ):
        r = c.post(_api(env, "a", tok, 2), json=body)
        assert r.status_code == 422 and needle in r.json()["error"], (body, r.text)
    r = c.post(_api(env, "a", tok, 2), content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422 and "not valid JSON" in r.json()["error"]
    r = c.post(_api(env, "a", tok, 2), json=[1, 2])
    assert r.status_code == 422
    r = c.post(_api(env, "a", tok, 2), content=b"answer=yes", headers={"content-type": "text/plain"})
    assert r.status_code == 422
    assert _state(env, tok) == before


def test_step3_validation_and_skip(env):
    c, study = env["client"], env["study"]
    ann = study.annotator_by_link(env["a"]["link_token"])
    seen3 = seen_skip = False
    while study.overview(ann)["next"] is not None:
        tok = study.overview(ann)["next"]["token"]
        c.post(_api(env, "a", tok, 1), json={"slider": 30})
        r = c.post(_api(env, "a", tok, 2), json={"answer": "no"})
        if r.json()["next_step"] == 3:
            seen3 = True
            before = _state(env, tok)
            for body in ({"prefix": "perhaps"}, {"prefix": "yes", "note": "x" * 2001}):
                assert c.post(_api(env, "a", tok, 3), json=body).status_code == 422
            assert _state(env, tok) == before
            assert c.post(_api(env, "a", tok, 3), json={"prefix": "no"}).status_code == 200
        else:
            seen_skip = True
            assert c.get(_api(env, "a", tok, 3)).status_code == 404
            assert c.post(_api(env, "a", tok, 3), json={"prefix": "yes"}).status_code == 409
    assert seen3 and seen_skip  # a mini-block holds k=1 forks / conformant (no step 3) and later forks


def test_conversations_follow_the_assigned_order(env):
    c, study = env["client"], env["study"]
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    from annotation.db import Assignment

    with Session(study.engine) as s:
        toks = list(
            s.scalars(
                select(Assignment.token)
                .where(Assignment.annotator_id == env["a"]["id"])
                .order_by(Assignment.position)
            )
        )
    r = c.post(_api(env, "a", toks[1], 1), json={"slider": 5})
    assert r.status_code == 409 and "current conversation first" in r.json()["error"]
    assert _state(env, toks[1])[0] == 0


def test_resume_after_closing_the_browser(env):
    link = env["a"]["link_token"]
    c1 = TestClient(env["app"])
    c1.post(f"/a/{link}/intro/weather")
    tok = _next(env)
    r = c1.post(f"/a/{link}/c/{tok}/step/1", data={"slider": "64"}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == f"/a/{link}/c/{tok}"
    c1.close()
    c2 = TestClient(env["app"])  # a new browser, no cookies: the link alone resumes at step 2
    r = c2.get(f"/a/{link}/next", follow_redirects=False)
    assert r.headers["location"] == f"/a/{link}/c/{tok}"
    page = c2.get(f"/a/{link}/c/{tok}")
    assert page.headers[STEP_HEADER] == "2" and 'id="step2"' in page.text
    assert _state(env, tok)[:2] == (1, 64)


def test_concurrent_duplicate_submissions_record_one_answer(env):
    tok = _next(env)
    results = []

    def post(v):
        results.append(TestClient(env["app"]).post(_api(env, "a", tok, 1), json={"slider": v}).status_code)

    threads = [threading.Thread(target=post, args=(v,)) for v in (11, 22, 33, 44)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [200, 409, 409, 409]
    assert _state(env, tok)[0] == 1 and _state(env, tok)[1] in (11, 22, 33, 44)


# ------------------------------------------------------------------ pages, admin workflow, reconstruction


def test_intro_first_then_workflow_panel_and_flowchart(env):
    _forget_intros(env)
    c = env["client"]
    link = env["a"]["link_token"]
    tok = _next(env)
    r = c.get(f"/a/{link}/c/{tok}", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == f"/a/{link}/intro/weather"
    intro = c.get(f"/a/{link}/intro/weather").text
    assert "Tell the user the weather." in intro and "Ask the user for the day" in intro
    assert "For what day would you like the weather forecast?" in intro  # template on demand
    img = c.get(f"/a/{link}/flowchart/weather")
    assert img.status_code == 200 and img.headers["content-type"] == "image/jpeg"
    assert c.get(f"/a/{link}/flowchart/hotel_book").status_code == 404  # not one of her tasks
    c.post(f"/a/{link}/intro/weather")
    page = c.get(f"/a/{link}/c/{tok}").text
    assert 'id="workflow"' in page and "Ask the user for the location" in page
    assert 'class="turn system' in page and 'class="turn user' in page and "weather: 0 / 5" in page


def test_admin_creates_annotator_draws_batch_monitors_exports_and_analyses(env, tmp_path):
    c, study = env["client"], env["study"]
    assert _login(c).status_code == 303
    r = c.post("/admin/annotators", data={"name": "carol"}, follow_redirects=False)
    assert r.status_code == 303
    carol = next(a for a in study.annotators() if a["name"] == "carol")
    page = c.get("/admin").text
    assert f"/a/{carol['link_token']}" in page
    assert c.post("/admin/annotators", data={"name": "carol"}).status_code == 409
    r = c.post(
        "/admin/batches",
        data={
            "task": "weather",
            "annotator_ids": [str(carol["id"])],
            "blocks_per_annotator": "2",
            "seed": "5",
        },
        follow_redirects=False,
    )
    assert r.status_code == 303
    r = c.post(
        "/admin/batches",
        data={"task": "weather", "annotator_ids": [str(carol["id"])], "blocks_per_annotator": "50"},
    )
    assert r.status_code == 422 and "no source left" in r.text
    prog = {(p["annotator"], p["task"]): p for p in c.get("/admin/progress.json").json()}
    assert prog[("carol", "weather")]["assigned"] == 10 and prog[("carol", "weather")]["done"] == 0
    # carol completes one conversation
    link = carol["link_token"]
    c.post(f"/a/{link}/intro/weather")
    ann = study.annotator_by_link(link)
    tok = study.overview(ann)["next"]["token"]
    env["carol"] = carol
    _complete(env, "carol", tok)
    prog = {(p["annotator"], p["task"]): p for p in c.get("/admin/progress.json").json()}
    assert prog[("carol", "weather")]["done"] == 1
    rows = c.get("/admin/export.json").json()
    done = [r for r in rows if r["state"] == 3]
    assert len(done) == 1 and done[0]["annotator"] == "carol" and done[0]["slider"] == 50
    csv_text = c.get("/admin/export.csv").text
    assert (
        csv_text.splitlines()[0].startswith("annotator,annotator_id,position")
        and len(csv_text.splitlines()) == len(rows) + 1
    )
    (tmp_path / "answers.csv").write_text(csv_text)
    from annotation.analysis import analyse
    from annotation.report import load_answers

    again = analyse(load_answers(tmp_path / "answers.csv"), n_boot=50)  # the CSV export round-trips
    assert again["counts"]["judgments"] == 1 and again["rq1"]["breaking"]["mean_slider"]
    assert c.post("/admin/analyses", follow_redirects=False).status_code == 303
    assert "Human study: analyses" in c.get("/admin").text
    assert json.loads(c.get("/admin/analyses/analyses.json").text)["counts"]["judgments"] == 1
    assert c.get("/admin/analyses/../study.db").status_code == 404


def test_presentation_and_cues_are_reconstructible(env):
    study = env["study"]
    rows = study.export_rows()
    pool = load_variants()
    for aid in (env["a"]["id"], env["b"]["id"]):
        stored = [r["dialogue_id"] for r in rows if r["annotator_id"] == aid]
        assert reconstruct_presentation(study, aid) == stored
    by_id = {r["dialogue_id"]: r for r in env["records"]}
    kinds = {}
    for r in rows:
        cue = recompute_cue(study, r["dialogue_id"])
        assert (cue.kind, cue.variant, cue.text, cue.seed) == (
            r["cue_kind"],
            r["cue_variant"],
            r["cue_text"],
            r["cue_seed"],
        )
        kinds[r["dialogue_id"]] = cue.kind
        if by_id[r["dialogue_id"]]["hallucination_type"] is None:
            assert cue.kind == "foil"
    # independent of the annotator: both annotators' conversations get the cue of the study seed
    other = Study(f"sqlite:///{study.engine.url.database}2", variants=pool, study_seed=42)
    other.import_records(env["records"])
    assert {r["dialogue_id"]: r["cue_text"] for r in other.export_rows()} == {}  # no assignments there
    for did in kinds:
        assert recompute_cue(other, did).text == next(r["cue_text"] for r in rows if r["dialogue_id"] == did)


def test_cli_serve_prints_password_and_links(tmp_path, records, star_dir, monkeypatch, capsys):
    import uvicorn

    from annotation.__main__ import main
    from dialfork_dataset.jsonl import write_jsonl

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    write_jsonl(corpus / "weather.jsonl", records)
    db = f"sqlite:///{tmp_path / 's.db'}"
    assert main(["add-annotator", "--db", db, "--name", "dora"]) == 0
    link_token = capsys.readouterr().out.strip().split("/a/")[1]
    called = {}
    monkeypatch.setattr(
        uvicorn, "run", lambda app, host, port, log_level: called.update(host=host, port=port)
    )
    assert (
        main(["serve", "--db", db, "--corpus", str(corpus), "--star", str(star_dir), "--port", "8999"]) == 0
    )
    out = capsys.readouterr().out
    assert called == {"host": "127.0.0.1", "port": 8999}
    pw = next(line for line in out.splitlines() if line.startswith("Admin password:")).split()[2]
    assert Study(db).check_admin_password(pw)
    assert (
        f"http://127.0.0.1:8999/a/{link_token}" in out
        and "add-annotator" in out
        and f"{len(records)} new conversation(s)" in out  # 12 sources, each with its forks
    )
    assert main(["draw-batch", "--db", db, "--task", "weather", "--annotators", "dora", "--seed", "1"]) == 0
    assert json.loads(capsys.readouterr().out.strip())["assignments"] == 5
    assert main(["draw-batch", "--db", db, "--task", "weather", "--annotators", "nobody"]) == 2
    assert main(["export", "--db", db, "--out", str(tmp_path / "a.csv")]) == 0
    assert (tmp_path / "a.csv").read_text().count("\n") == 6
    assert main(["analyse", "--db", db, "--out", str(tmp_path / "an"), "--n-boot", "50", "--no-plots"]) == 0
    assert "0 judgments analysed" in capsys.readouterr().out  # nothing completed yet
    assert (tmp_path / "an" / "report.md").read_text().startswith("# Human study")


def test_step3_shows_the_injected_instruction(env):
    """Issue 15 / paper, Appendix N: step 3 shows the instruction actually injected (the
    record's ``instruction``) next to the annotator's step-2 answer and its cue."""
    c, study = env["client"], env["study"]
    link = env["a"]["link_token"]
    by_id = {r["dialogue_id"]: r for r in env["records"]}
    ann = study.annotator_by_link(link)
    shown = 0
    while study.overview(ann)["next"] is not None:
        tok = study.overview(ann)["next"]["token"]
        c.post(_api(env, "a", tok, 1), json={"slider": 30})
        r = c.post(_api(env, "a", tok, 2), json={"answer": "no"})
        if r.json()["next_step"] == 3:
            rec = by_id[next(iter(_dids(env, tok)))]
            p3 = c.get(_api(env, "a", tok)).json()
            assert p3["injected_instruction"] == " ".join(rec["instruction"].split())
            assert p3["step2"]["cue"] and p3["step2"]["answer"] == "no"
            import html as _html
            import re as _re

            page = c.get(f"/a/{link}/c/{tok}").text
            q = _re.search(r'<q id="injected">(.*?)</q>', page, _re.S)
            assert q and _html.unescape(q.group(1)) == p3["injected_instruction"]
            shown += 1
            c.post(_api(env, "a", tok, 3), json={"prefix": "yes"})
    assert shown >= 1
