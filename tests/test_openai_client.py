"""The shared OpenAI-compatible client against a fake server on 127.0.0.1.

``FakeOpenAIServer`` (a threaded ``http.server``) is importable by other test files
(``from test_openai_client import FakeOpenAIServer``; pytest puts ``tests/`` on ``sys.path``).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from generation.llm.client import (
    ChatReply,
    EndpointError,
    OpenAICompatClient,
    parse_chat_completion,
    validate_messages,
)


def completion_body(text, finish_reason="stop", usage=None) -> bytes:
    return json.dumps(
        {
            "id": "cmpl-1",
            "object": "chat.completion",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": finish_reason,
                }
            ],
            "usage": usage or {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
        }
    ).encode()


def default_reply(body: dict) -> str:
    """Deterministic in (seed, last message, number of messages): what a seeded server does."""
    msgs = body["messages"]
    return f"seed={body.get('seed')} n={len(msgs)} last={msgs[-1]['content'][:30]}"


class FakeOpenAIServer:
    """An OpenAI-compatible server on 127.0.0.1 with a scriptable behaviour.

    ``handler(body, n) -> (status, body_bytes, headers) | None`` decides each
    ``/chat/completions`` reply (``n`` = 1-based count of chat requests so far); ``None`` means the
    default seeded reply. ``models`` is what ``GET /models`` lists. Every request is recorded in
    ``requests``; more than ``max_requests`` requests fail the test (no unbounded retry loops).
    """

    def __init__(
        self,
        models=("fake-model",),
        handler: Callable | None = None,
        max_requests: int = 500,
        delay: float = 0.0,
    ):
        self.models = list(models)
        self.handler = handler
        self.max_requests = max_requests
        self.delay = delay
        self.requests: list[dict] = []
        self.chat_count = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            wbufsize = 1 << 16  # headers and body leave in one write (no Nagle/delayed-ACK stall)

            def log_message(self, *args):  # quiet
                pass

            def _send(self, status, body: bytes, headers=None):
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                try:
                    self.wfile.write(body)
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout test)
                    pass

            def do_GET(self):
                with outer.lock:
                    outer.requests.append({"method": "GET", "path": self.path})
                if self.path.endswith("/models") and outer.models is not None:
                    data = {"object": "list", "data": [{"id": m, "object": "model"} for m in outer.models]}
                    self._send(200, json.dumps(data).encode())
                else:
                    self._send(404, b'{"error": {"message": "Not Found"}}')

            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                raw = self.rfile.read(length)
                body = json.loads(raw)
                with outer.lock:
                    outer.requests.append(
                        {
                            "method": "POST",
                            "path": self.path,
                            "body": body,
                            "auth": self.headers.get("Authorization"),
                        }
                    )
                    outer.chat_count += 1
                    n = outer.chat_count
                    outer.in_flight += 1
                    outer.max_in_flight = max(outer.max_in_flight, outer.in_flight)
                # in_flight drops before the reply is written: a client sends its next request only
                # after reading a reply, so the count never includes a finished request's tail
                resp = None
                try:
                    if n > outer.max_requests:
                        resp = (400, b'{"error": {"message": "fake server: request budget exceeded"}}', None)
                    elif not self.path.endswith("/chat/completions"):
                        resp = (404, b'{"error": {"message": "Not Found"}}', None)
                    else:
                        if outer.delay:
                            time.sleep(outer.delay)
                        if body.get("model") not in outer.models:
                            msg = {
                                "error": {
                                    "message": f"The model `{body.get('model')}` does not exist.",
                                    "type": "NotFoundError",
                                    "code": 404,
                                }
                            }
                            resp = (404, json.dumps(msg).encode(), None)
                        else:
                            out = outer.handler(body, n) if outer.handler else None
                            resp = (200, completion_body(default_reply(body)), None) if out is None else out
                finally:
                    with outer.lock:
                        outer.in_flight -= 1
                status, payload, headers = resp
                if headers is None:
                    self._send(status, payload)
                else:
                    self._send(status, payload, headers)

        class Server(ThreadingHTTPServer):
            request_queue_size = 128  # socketserver's default listen backlog (5) drops bursts of connects

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)

    @property
    def chat_bodies(self) -> list[dict]:
        return [r["body"] for r in self.requests if r["method"] == "POST"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def client(server, **kw) -> OpenAICompatClient:
    kw.setdefault("backoff", 0.01)
    kw.setdefault("max_backoff", 0.05)
    kw.setdefault("timeout", 5.0)
    return OpenAICompatClient(server.base_url, "fake-model", **kw)


CONV = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there"}]


def test_chat_returns_replies_in_order_with_seeds_and_sampling():
    with FakeOpenAIServer() as srv:
        c = client(srv, concurrency=4, api_key="k123")
        batch = [
            CONV + [{"role": "assistant", "content": "x"}, {"role": "user", "content": f"q{i}"}]
            for i in range(7)
        ]
        out = c.chat(
            batch, seeds=list(range(100, 107)), temperature=1.3, top_p=0.95, top_k=64, max_tokens=None
        )
        assert out == [f"seed={100 + i} n=4 last=q{i}" for i in range(7)]
        bodies = sorted(srv.chat_bodies, key=lambda b: b["seed"])
        assert [b["seed"] for b in bodies] == list(range(100, 107))
        b = bodies[0]
        assert (
            b["model"] == "fake-model" and b["temperature"] == 1.3 and b["top_p"] == 0.95 and b["top_k"] == 64
        )
        assert "max_tokens" not in b and b["stream"] is False
        assert all(r["auth"] == "Bearer k123" for r in srv.requests)
        assert srv.chat_count == 7


def test_concurrency_is_bounded_and_used():
    with FakeOpenAIServer(delay=0.05) as srv:
        c = client(srv, concurrency=3)
        c.chat([CONV] * 9, seeds=[1] * 9)
        assert srv.max_in_flight <= 3
        assert srv.max_in_flight >= 2  # requests overlapped


def test_retries_transient_errors_then_succeeds():
    seen = []

    def handler(body, n):
        seen.append(n)
        if n == 1:
            return 429, b'{"error": {"message": "rate limited"}}', {"Retry-After": "0"}
        if n == 2:
            return 503, b"overloaded", {}
        if n == 3:
            return 200, b"<html>not json</html>", {}
        return None

    with FakeOpenAIServer(handler=handler) as srv:
        c = client(srv, max_retries=4)
        reply = c.chat_full([CONV], seeds=[5])[0]
        assert isinstance(reply, ChatReply)
        assert reply.text == "seed=5 n=2 last=hello there" and reply.attempts == 4
        assert srv.chat_count == 4
        assert c.stats == {"requests": 4, "retries": 3}


def test_exponential_backoff_waits(monkeypatch):
    waits = []
    monkeypatch.setattr("generation.llm.client.time.sleep", waits.append)
    with FakeOpenAIServer(handler=lambda b, n: (500, b"boom", {})) as srv:
        c = OpenAICompatClient(srv.base_url, "fake-model", max_retries=4, backoff=0.5, max_backoff=3.0)
        with pytest.raises(EndpointError, match=r"failed after 5 attempt\(s\).*HTTP 500") as ei:
            c.chat([CONV])
        assert waits == [0.5, 1.0, 2.0, 3.0]  # 0.5 * 2**k capped at max_backoff
        assert ei.value.status == 500 and ei.value.index == 0
        assert srv.chat_count == 5


def test_garbage_reply_after_retries_is_a_clear_error():
    garbage = json.dumps({"choices": [{"message": {"role": "assistant", "content": None}}]}).encode()
    with FakeOpenAIServer(handler=lambda b, n: (200, garbage, {})) as srv:
        c = client(srv, max_retries=2)
        with pytest.raises(EndpointError, match="garbage reply.*content is NoneType") as ei:
            c.chat([CONV, CONV], seeds=[1, 2])
        assert "fake-model" in str(ei.value)
        assert srv.chat_count <= 6  # bounded: 2 conversations x 3 attempts


def test_unknown_model_fails_at_once_with_hint():
    with FakeOpenAIServer(models=["other-model"]) as srv:
        c = client(srv, max_retries=5)
        with pytest.raises(EndpointError, match="unknown to the server") as ei:
            c.chat([CONV])
        assert ei.value.status == 404 and "does not exist" in str(ei.value)
        assert srv.chat_count == 1  # not retried
        with pytest.raises(EndpointError, match=r"does not serve model 'fake-model'.*other-model"):
            c.check_model()
        assert c.list_models() == ["other-model"]


def test_check_model_ok_and_tolerates_servers_without_models_route():
    with FakeOpenAIServer() as srv:
        client(srv).check_model()
        srv.models = None  # GET /models -> 404, chat still served
        client(srv).check_model()


def test_bad_key_fails_at_once():
    with FakeOpenAIServer(
        handler=lambda b, n: (401, b'{"error": {"message": "Incorrect API key"}}', {})
    ) as srv:
        with pytest.raises(EndpointError, match="Incorrect API key.*refused the API key"):
            client(srv, max_retries=3).chat([CONV])
        assert srv.chat_count == 1


def test_unreachable_server_is_a_clear_error(dead_port):
    port = dead_port
    c = OpenAICompatClient(f"http://127.0.0.1:{port}/v1", "m", max_retries=2, backoff=0.01, timeout=2)
    # "Connection refused" (not "timed out"): each attempt failed at once instead of waiting for the
    # timeout; no wall-clock assert (the machine may be loaded)
    with pytest.raises(
        EndpointError, match=r"failed after 3 attempt\(s\): cannot reach .*Connection refused.*Is the server"
    ) as ei:
        c.chat([CONV])
    assert ei.value.status is None


def test_timeout_is_retried_then_reported():
    with FakeOpenAIServer(delay=0.6) as srv:
        c = client(srv, timeout=0.2, max_retries=1)
        with pytest.raises(EndpointError, match="timeout|timed out"):
            c.chat([CONV])
        assert srv.chat_count == 2


def test_one_failing_conversation_names_its_index_and_stops_the_batch():
    def handler(body, n):
        if body["messages"][-1]["content"] == "bad":
            return 400, b'{"error": {"message": "top_k not supported"}}', {}
        return None

    with FakeOpenAIServer(handler=handler) as srv:
        c = client(srv, concurrency=2)
        batch = [CONV, CONV[:1] + [{"role": "user", "content": "bad"}], CONV]
        with pytest.raises(EndpointError, match=r"conversation 1 of the batch.*top_k not supported") as ei:
            c.chat(batch)
        assert ei.value.index == 1 and ei.value.status == 400


def test_bad_input_is_rejected_before_any_request():
    with FakeOpenAIServer() as srv:
        c = client(srv)
        with pytest.raises(ValueError) as ei:
            c.chat([[], [{"role": "wizard", "content": 3}], "text"], seeds=[1, "x"])
        msg = str(ei.value)
        for part in (
            "conversation 0: empty",
            "conversation 1, message 0: role 'wizard'",
            "'content' must be a string",
            "conversation 2: expected a list",
            "seeds has 2 entries for 3",
            "seeds[1] = 'x'",
        ):
            assert part in msg
        assert srv.requests == []
        assert c.chat([]) == []
    with pytest.raises(ValueError, match="base_url must start with http.*concurrency must be"):
        OpenAICompatClient("localhost:8000", "m", concurrency=0)


def test_parse_chat_completion_known_answers():
    r = parse_chat_completion(completion_body("hi", "length", {"completion_tokens": 7}))
    assert r == ChatReply("hi", "length", {"completion_tokens": 7})
    assert parse_chat_completion(completion_body("")).text == ""
    for bad, why in [
        (b"\xff", "not UTF-8"),
        (b"[1]", "not an object"),
        (b"{}", "no 'choices'"),
        (b'{"choices": [{}]}', "no 'message'"),
        (b'{"error": {"message": "kaput"}}', "kaput"),
    ]:
        with pytest.raises(ValueError, match=why):
            parse_chat_completion(bad)


def test_validate_messages():
    assert validate_messages(CONV) == []
    assert validate_messages("hi") == [
        "conversation: expected a list of {'role', 'content'} messages, got str"
    ]


TOOL_CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "lookup_claim", "arguments": '{"n": 381204}'},
}


def test_tool_calling_messages_are_valid_and_sent_intact():
    conv = CONV + [
        {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"status": "approved"}'},
    ]
    assert validate_messages(conv) == []
    assert validate_messages([{"role": "tool", "tool_call_id": "call_1", "content": None}]) == []
    bad = [
        {"role": "user", "content": None},
        {"role": "user", "content": "x", "tool_calls": [TOOL_CALL]},
        {"role": "assistant", "content": None, "tool_calls": [{"function": {}}]},
        {"role": "tool", "content": "r"},
    ]
    problems = validate_messages(bad)
    for part in (
        "message 0: 'content' must be a string, got NoneType (null is allowed only with tool_calls",
        "message 1: only assistant messages carry 'tool_calls'",
        "message 2: tool_calls[0] needs a 'function'",
        "message 3: a tool result needs 'tool_call_id'",
    ):
        assert any(part in p for p in problems), (part, problems)
    tools = [{"type": "function", "function": {"name": "lookup_claim", "parameters": {"type": "object"}}}]
    with FakeOpenAIServer() as srv:
        client(srv).chat([conv], tools=tools, extra_body={"repetition_penalty": 1.1}, top_k=5)
        body = srv.chat_bodies[0]
    assert body["messages"] == conv and body["tools"] == tools
    assert body["repetition_penalty"] == 1.1 and body["top_k"] == 5  # server extensions ride in extra_body


def test_a_tool_call_reply_is_parsed_not_retried():
    reply = {
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]},
            }
        ]
    }
    with FakeOpenAIServer(handler=lambda b, n: (200, json.dumps(reply).encode(), {})) as srv:
        r = client(srv, max_retries=3).chat_full([CONV])[0]
        assert srv.chat_count == 1
    assert (r.text, r.finish_reason, r.tool_calls, r.attempts) == ("", "tool_calls", (TOOL_CALL,), 1)


def test_a_failing_conversation_stops_the_retries_of_the_others():
    def handler(body, n):
        last = body["messages"][-1]["content"]
        return (400, b'{"error": {"message": "bad request"}}', {}) if last == "bad" else (503, b"busy", {})

    with FakeOpenAIServer(handler=handler, delay=0.05) as srv:
        c = client(srv, concurrency=2, max_retries=50, backoff=0.02, max_backoff=0.02)
        with pytest.raises(EndpointError, match="conversation 0 of the batch.*bad request"):
            c.chat([CONV[:1] + [{"role": "user", "content": "bad"}], CONV])
        assert srv.chat_count < 40  # the busy conversation gave up well before its 51 attempts
