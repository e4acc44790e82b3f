"""The guard proxy over real HTTP on 127.0.0.1: the fake upstream and the proxy run in uvicorn
servers on free ports (port 0) inside the test process, stopped at the end of each test. The
monitor uses a small deterministic word-hashing encoder (this file) so that the HTTP logic is
tested fast; tests/test_guard_crash.py runs the real CLI processes with the packaged MiniLM."""

from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
import time

import httpx
import numpy as np
import pytest

CLIENT_TIMEOUT_S = 300.0  # a request through the proxy, bounded (the machine may be loaded)

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("prometheus_client")

from dialfork_metrics.guard import Monitor  # noqa: E402
from dialfork_metrics.guard.fake_upstream import create_fake_upstream  # noqa: E402
from dialfork_metrics.guard.proxy import GuardConfig, create_app  # noqa: E402
from dialfork_metrics.guard.sse import read_completion  # noqa: E402
from dialfork_metrics.guard.store import Store, StoreError  # noqa: E402


class HashEncoder:
    """Bag of hashed words, L2-normalised (deterministic; similar wording -> similar vectors)."""

    alias = "hash-words-64"

    def __init__(self, dim: int = 64):
        self.dim = dim
        self.calls = 0

    def _one(self, text: str) -> np.ndarray:
        v = np.zeros(self.dim)
        for w in re.findall(r"\w+", text.lower()):
            h = int.from_bytes(hashlib.blake2b(w.encode(), digest_size=8).digest(), "little")
            v[h % self.dim] += 1.0 if (h >> 32) & 1 else -1.0
        v[0] += 1e-3  # never all zero
        return v / np.linalg.norm(v)

    def encode(self, texts):
        self.calls += len(texts)
        return np.stack([self._one(t) for t in texts]).astype(np.float32)

    def encode_dialogues(self, dialogues):
        from dialfork_dataset.turns import turn_texts

        return [self.encode(turn_texts(d)) for d in dialogues]


class ThreadServer:
    """A uvicorn server for ``app`` on a free 127.0.0.1 port, in a thread of this process."""

    def __init__(self, app):
        import uvicorn

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self):
        self.thread.start()
        deadline = time.monotonic() + 300
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.sock.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture(scope="module")
def corpus(template_corpus):
    from dialfork_metrics.task3 import load_examples

    train = [e for e in load_examples(template_corpus, "train") if e["task"] == "weather"]
    test = [e for e in load_examples(template_corpus, "test") if e["task"] == "weather"]
    return train, test


@pytest.fixture(scope="module")
def monitor(corpus):
    return Monitor.fit(corpus[0], detector="ss+nc", encoder=HashEncoder())


@pytest.fixture()
def upstream(corpus):
    with ThreadServer(create_fake_upstream(corpus[1])) as s:
        yield s


def _proxy(monitor, upstream_url, db, **kw):
    return ThreadServer(
        create_app(monitor, Store(db, monitor.fingerprint), GuardConfig(upstream=upstream_url, **kw))
    )


def _forks_and_conformant(test, n=6):
    conf = [e for e in test if e["hallucination_type"] is None][:2]
    forks = [e for e in test if e["hallucination_type"] is not None and e["fork_position"] in (2, 3)][: n - 2]
    return conf + forks


def _play(client, url, d, stream=False, conv=True, headers=None):
    """Play dialogue ``d`` through the proxy: user turns as messages, each system turn fetched from
    the upstream. Returns the dialfork objects of the replies and the reply texts."""
    msgs, out, texts = [], [], []
    for t in d["turns"]:
        if t["speaker"] == "user":
            msgs.append({"role": "user", "content": t["text"]})
            continue
        h = {"X-Fake-Dialogue": d["dialogue_id"], **(headers or {})}
        if conv:
            h["X-Conversation-Id"] = d["dialogue_id"] + ("/s" if stream else "")
        r = client.post(
            url + "/v1/chat/completions", json={"model": "m", "messages": msgs, "stream": stream}, headers=h
        )
        assert r.status_code == 200, r.text
        assert r.headers["x-fake-matched"] == "true"
        if stream:
            df, text = _read_sse(r.text)
        else:
            j = r.json()
            df, text = j["dialfork"], j["choices"][0]["message"]["content"]
            assert r.headers["x-dialfork-alarm"] == str(df["alarm"]).lower()
        out.append(df)
        texts.append(text)
        msgs.append({"role": "assistant", "content": text})
    return out, texts


def _read_sse(body: str):
    df, text = read_completion(body)
    assert body.rstrip().endswith("data: [DONE]")
    return df, text


def _expected(monitor, d):
    """In-process verdicts of every turn, grouped like the proxy's replies."""
    vs = [v.to_dict() for v in monitor.replay(d)]
    groups, cur = [], []
    for v in vs:
        cur.append(v)
        if v["speaker"] == "system":
            groups.append(cur)
            cur = []
    return groups


# -- verdicts over HTTP equal the in-process monitor's -------------------------------------------------
@pytest.mark.parametrize("stream", [False, True])
def test_proxy_verdicts_equal_in_process(monitor, corpus, upstream, tmp_path, stream):
    dialogues = _forks_and_conformant(corpus[1])
    with (
        _proxy(monitor, upstream.url + "/v1", tmp_path / "s.db") as px,
        httpx.Client(timeout=CLIENT_TIMEOUT_S) as c,
    ):
        for d in dialogues:
            dfs, texts = _play(c, px.url, d, stream=stream)
            assert texts == [t["text"] for t in d["turns"] if t["speaker"] == "system"]
            exp = _expected(monitor, d)
            assert [df["observed"] for df in dfs] == exp
            for df, g in zip(dfs, exp):
                assert {k: df[k] for k in g[-1]} == g[-1]
                assert df["blocked"] is False and df["conversation_id"] == d["dialogue_id"] + (
                    "/s" if stream else ""
                )
            first = next((df["first_alarm"] for df in dfs if df["alarm"]), None)
            assert first == monitor.detector.predict(d)
        m = c.get(px.url + "/metrics").text
    n_turns = sum(len(d["turns"]) for d in dialogues)
    assert _metric(m, "dialfork_guard_turns_total") == n_turns  # every turn observed exactly once
    assert _metric(m, "dialfork_guard_requests_total", outcome="ok") == sum(
        t["speaker"] == "system" for d in dialogues for t in d["turns"]
    )


def _metric(text: str, name: str, **labels) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    total = 0.0
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total


def test_history_hash_mode_retries_and_no_double_counting(monitor, corpus, upstream, tmp_path):
    d = _forks_and_conformant(corpus[1])[3]
    with (
        _proxy(monitor, upstream.url + "/v1", tmp_path / "s.db") as px,
        httpx.Client(timeout=CLIENT_TIMEOUT_S) as c,
    ):
        dfs, _ = _play(c, px.url, d, conv=False)
        assert [df["observed"] for df in dfs] == _expected(monitor, d)
        assert all(df["conversation_id"] is None for df in dfs)
        # the same conversation again (a client retrying every request): same verdicts, nothing re-observed
        dfs2, _ = _play(c, px.url, d, conv=False)
        assert [df["turn"] for df in dfs2] == [df["turn"] for df in dfs]
        assert all(df["observed"][-1] == g[-1] for df, g in zip(dfs2, _expected(monitor, d)))
        m = c.get(px.url + "/metrics").text
    assert _metric(m, "dialfork_guard_turns_total") == len(d["turns"])  # retries observe (and encode) nothing


def test_block_mode_replaces_the_first_alarm_reply(monitor, corpus, upstream, tmp_path):
    forks = [d for d in _forks_and_conformant(corpus[1]) if monitor.detector.predict(d) is not None]
    assert forks
    d = forks[0]
    fallback = "Let me hand you over to a colleague."
    with (
        _proxy(monitor, upstream.url + "/v1", tmp_path / "s.db", mode="block", fallback=fallback) as px,
        httpx.Client(timeout=CLIENT_TIMEOUT_S) as c,
    ):
        for stream in (False, True):
            dfs, texts = _play(c, px.url, d, stream=stream)
            blocked = [i for i, df in enumerate(dfs) if df["blocked"]]
            i = next(i for i, df in enumerate(dfs) if df["alarm"])
            assert blocked == [i] and texts[i] == fallback  # exactly the reply that raised the first alarm
            assert all(
                t == ref
                for j, (t, ref) in enumerate(
                    zip(texts, [t["text"] for t in d["turns"] if t["speaker"] == "system"])
                )
                if j != i
            )
            # the client sent the fallback back in its history: the conversation went on without a break
            assert [df["observed"] for df in dfs] == _expected(monitor, d)
        m = c.get(px.url + "/metrics").text
    assert _metric(m, "dialfork_guard_blocked_total") == 2


# -- bad input, upstream failures ---------------------------------------------------------------------
def test_bad_requests_get_400_with_the_reason(monitor, upstream, tmp_path):
    cases = [
        (b"{not json", None, "not valid JSON"),
        (b"[" * 200_000, None, "not valid JSON"),  # nesting bomb
        (json.dumps({"messages": "hi"}).encode(), "messages", "'messages' must be a non-empty list"),
        (json.dumps({"messages": []}).encode(), "messages", "'messages' must be a non-empty list"),
        (json.dumps({"messages": [{"role": "hacker", "content": "x"}]}).encode(), "messages[0].role", "role"),
        (
            json.dumps({"messages": [{"role": "user", "content": 5}]}).encode(),
            "messages[0].content",
            "content",
        ),
        (
            json.dumps({"messages": [{"role": "user", "content": [{"text": "x"}]}]}).encode(),
            "messages[0].content",
            "type",
        ),
        (json.dumps({"messages": ["x"]}).encode(), "messages[0]", "object"),
        (
            json.dumps({"messages": [{"role": "user", "content": "x"}], "stream": "yes"}).encode(),
            "stream",
            "stream",
        ),
        (json.dumps([1, 2]).encode(), None, "JSON object"),
    ]
    with (
        _proxy(monitor, upstream.url + "/v1", tmp_path / "s.db") as px,
        httpx.Client(timeout=CLIENT_TIMEOUT_S) as c,
    ):
        for raw, param, msg in cases:
            r = c.post(
                px.url + "/v1/chat/completions", content=raw, headers={"content-type": "application/json"}
            )
            assert r.status_code == 400, (raw[:40], r.text)
            err = r.json()["error"]
            assert msg in err["message"] and err["param"] == param
        for bad in ("x" * 300, "a\tb"):
            r = c.post(
                px.url + "/v1/chat/completions",
                json={"messages": [{"role": "user", "content": "hi"}]},
                headers={"X-Conversation-Id": bad},
            )
            assert r.status_code == 400 and r.json()["error"]["param"] == "X-Conversation-Id"
        assert _metric(c.get(px.url + "/metrics").text, "dialfork_guard_turns_total") == 0


def test_oversized_bodies_get_413(monitor, upstream, tmp_path):
    big = json.dumps({"messages": [{"role": "user", "content": "x" * 5000}]}).encode()
    with (
        _proxy(monitor, upstream.url + "/v1", tmp_path / "s.db", max_body_bytes=4096) as px,
        httpx.Client(timeout=CLIENT_TIMEOUT_S) as c,
    ):
        assert c.post(px.url + "/v1/chat/completions", content=big).status_code == 413
        chunked = c.post(px.url + "/v1/chat/completions", content=iter([big[:3000], big[3000:]]))  # no length
        assert chunked.status_code == 413 and "limit" in chunked.json()["error"]["message"]


def test_upstream_down_slow_or_failing(monitor, corpus, tmp_path):
    body = {"model": "m", "messages": [{"role": "user", "content": "What's the weather?"}]}
    with socket.socket() as s:  # bound, never listening: connections are refused, and no other
        s.bind(("127.0.0.1", 0))  # process can take the port while the test runs
        dead = s.getsockname()[1]
        with (
            _proxy(monitor, f"http://127.0.0.1:{dead}/v1", tmp_path / "a.db") as px,
            httpx.Client(timeout=CLIENT_TIMEOUT_S) as c,
        ):
            for stream in (False, True):
                r = c.post(px.url + "/v1/chat/completions", json={**body, "stream": stream})
                assert r.status_code == 502 and "unreachable" in r.json()["error"]["message"]
            assert (
                _metric(
                    c.get(px.url + "/metrics").text,
                    "dialfork_guard_upstream_errors_total",
                    kind="unreachable",
                )
                == 2
            )
    with (
        ThreadServer(create_fake_upstream(corpus[1], delay_s=2.0)) as slow,
        _proxy(monitor, slow.url + "/v1", tmp_path / "b.db", upstream_timeout=0.3) as px,
        httpx.Client(timeout=CLIENT_TIMEOUT_S) as c,
    ):
        r = c.post(px.url + "/v1/chat/completions", json=body)
        assert r.status_code == 504 and "did not answer within 0.3 s" in r.json()["error"]["message"]
    with (
        ThreadServer(create_fake_upstream(corpus[1])) as up,
        _proxy(monitor, up.url + "/v1", tmp_path / "c.db") as px,
        httpx.Client(timeout=CLIENT_TIMEOUT_S) as c,
    ):
        r = c.post(
            px.url + "/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "hi"}], "stream": False},
            headers={"X-Fake-Dialogue": "nope"},
        )
        assert (
            r.status_code == 200 and r.json()["dialfork"]["turn"] == 2
        )  # unmatched: the fake's generic reply
        bad = httpx.post(up.url + "/v1/chat/completions", content=b"{}")
        assert bad.status_code == 400
        # instructions and tool traffic are not turns: only the reply is observed
        r = c.post(
            px.url + "/v1/chat/completions",
            json={"messages": [{"role": "system", "content": "Be nice."}, {"role": "tool", "content": "x"}]},
        )
        assert r.status_code == 200 and r.json()["dialfork"]["turn"] == 1


def test_upstream_error_status_is_passed_through(monitor, tmp_path):
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def fail():
        return JSONResponse({"error": {"message": "model not found"}}, status_code=404)

    with (
        ThreadServer(app) as up,
        _proxy(monitor, up.url + "/v1", tmp_path / "s.db") as px,
        httpx.Client(timeout=CLIENT_TIMEOUT_S) as c,
    ):
        r = c.post(px.url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 404 and r.json()["error"]["message"] == "model not found"
        m = c.get(px.url + "/metrics").text
        assert _metric(m, "dialfork_guard_upstream_errors_total", kind="status_404") == 1


def test_healthz_and_metrics_format(monitor, corpus, upstream, tmp_path):
    from prometheus_client.parser import text_string_to_metric_families

    with (
        _proxy(monitor, upstream.url + "/v1", tmp_path / "s.db") as px,
        httpx.Client(timeout=CLIENT_TIMEOUT_S) as c,
    ):
        h = c.get(px.url + "/healthz").json()
        assert h["status"] == "ok" and h["monitor"] == monitor.fingerprint and h["detector"] == "ss+nc"
        _play(c, px.url, corpus[1][0])
        r = c.get(px.url + "/metrics")
        assert r.headers["content-type"].startswith("text/plain")
        names = {f.name for f in text_string_to_metric_families(r.text)}
    assert {
        "dialfork_guard_turns",
        "dialfork_guard_alarms",
        "dialfork_guard_requests",
        "dialfork_guard_upstream_errors",
        "dialfork_guard_request_seconds",
        "dialfork_guard_encode_seconds",
        "dialfork_guard_upstream_seconds",
        "dialfork_guard_overhead_seconds",
        "dialfork_guard_blocked",
    } <= names


def test_store_refuses_another_monitors_db_and_non_sqlite(monitor, tmp_path):
    Store(tmp_path / "s.db", monitor.fingerprint).close()
    with pytest.raises(StoreError, match="another monitor"):
        Store(tmp_path / "s.db", "f" * 64)
    (tmp_path / "junk.db").write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError, match="not a usable SQLite"):
        Store(tmp_path / "junk.db", monitor.fingerprint)
    assert Store(tmp_path / "s.db", monitor.fingerprint).count() == 0


# -- the upstream URL is checked at start-up -----------------------------------------------------------
@pytest.mark.parametrize("tail", ["", "/"])
def test_serve_refuses_an_upstream_url_without_v1(corpus, tmp_path, capsys, tail):
    from dialfork_metrics.guard.__main__ import main

    with ThreadServer(create_fake_upstream(corpus[1])) as up:
        # the monitor file does not exist: the URL is checked first, before the model loads
        rc = main(
            [
                "serve",
                "--upstream",
                up.url + tail,
                "--monitor",
                str(tmp_path / "absent.monitor"),
                "--db",
                str(tmp_path / "s.db"),
                "--port",
                "0",
            ]
        )
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("error: --upstream " + up.url)
    assert err.endswith(f"use --upstream {up.url}/v1")
    assert f"GET {up.url}/models: 404; GET {up.url}/v1/models: 200" in err
    assert not (tmp_path / "s.db").exists()


def test_check_upstream_accepts_api_roots_and_only_warns_when_not_up(corpus, caplog):
    import logging

    from fastapi import FastAPI

    from dialfork_metrics.guard.proxy import check_upstream

    with ThreadServer(create_fake_upstream(corpus[1])) as up:
        check_upstream(up.url + "/v1")
        check_upstream(up.url + "/v1/")
    other = FastAPI()  # a server whose API root is not /v1 but that lists its models there

    @other.get("/openai/models")
    async def models():
        return {"object": "list", "data": [{"id": "m"}]}

    with ThreadServer(other) as srv:
        check_upstream(srv.url + "/openai")
        with pytest.raises(ValueError, match=r"use --upstream http://127\.0\.0\.1:\d+/elsewhere/v1$"):
            check_upstream(srv.url + "/elsewhere")
    with socket.socket() as s:  # bound, never listening: the upstream is not up yet
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
        with caplog.at_level(logging.WARNING, logger="dialfork_metrics.guard"):
            check_upstream(dead + "/v1", timeout=2.0)  # not an error: it may start after the guard
        assert any("not up yet" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)
        with pytest.raises(ValueError, match=r"unreachable.*use --upstream http://127\.0\.0\.1:\d+/v1$"):
            check_upstream(dead, timeout=2.0)
    with pytest.raises(ValueError, match="not an http"):
        check_upstream("127.0.0.1:8000/v1")


def test_the_normal_start_is_logged_as_info(tmp_path, caplog):
    import logging

    from dialfork_metrics.guard.__main__ import _ready_writer

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        with caplog.at_level(logging.INFO, logger="dialfork_metrics.guard"):
            _ready_writer(s, str(tmp_path / "ready.json"))()
    (rec,) = [r for r in caplog.records if "serving on" in r.getMessage()]
    assert rec.levelno == logging.INFO  # a normal start is no warning
    assert json.loads((tmp_path / "ready.json").read_text())["port"] == port


# -- the workflow-aware monitor (wf, the default) over HTTP ---------------------------------------------
@pytest.fixture(scope="module")
def wf_monitor(corpus, star_dir):
    from dialfork_dataset.star import StarCorpus

    return Monitor.fit(corpus[0], workflow=StarCorpus(star_dir))


@pytest.mark.parametrize("stream", [False, True])
def test_proxy_verdicts_equal_in_process_with_the_workflow_aware_monitor(
    wf_monitor, corpus, upstream, tmp_path, stream
):
    """The wf session's state goes through the proxy's store between requests (one request per agent
    turn): verdicts, warnings and the first alarm equal the in-process replay and the detector's."""
    assert wf_monitor.workflow_aware
    dialogues = _forks_and_conformant(corpus[1])
    with (
        _proxy(wf_monitor, upstream.url + "/v1", tmp_path / "s.db") as px,
        httpx.Client(timeout=CLIENT_TIMEOUT_S) as c,
    ):
        for d in dialogues:
            dfs, _ = _play(c, px.url, d, stream=stream)
            assert [df["observed"] for df in dfs] == _expected(wf_monitor, d)
            first = next((df["first_alarm"] for df in dfs if df["alarm"]), None)
            assert first == wf_monitor.detector.predict(d)
        h = c.get(px.url + "/healthz").json()
    assert h["detector"] == "wf" and h["monitor"] == wf_monitor.fingerprint and h["order"] is None
