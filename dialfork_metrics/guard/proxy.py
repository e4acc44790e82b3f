"""The guard as an OpenAI-compatible proxy (FastAPI + httpx).

``POST /v1/chat/completions`` is forwarded unchanged to ``<upstream>/chat/completions`` (vLLM, TGI,
any OpenAI-compatible agent server); on the way, the conversation's new user and assistant turns
are observed by the :class:`~dialfork_metrics.guard.Monitor`, in order, each once:

* a conversation is named by the ``X-Conversation-Id`` header; without it, by a hash of the
  message history as sent (content-addressed: the state after a history is a function of that
  history). Either way a request resumes from the longest history prefix already observed
  (:mod:`dialfork_metrics.guard.store`), so retries and regenerations never count a turn twice;
* OpenAI roles map to speakers: ``user`` -> ``user``, ``assistant`` -> ``system`` (the dialogue
  system); ``system``/``developer`` (instructions), ``tool``/``function`` (tool traffic) and
  messages without text (tool calls, images only) are not turns;
* the reply's turn is ``choices[0]``'s message (other choices of ``n > 1`` are passed through);
* annotate mode: the reply carries ``X-DialFork-Alarm`` and a top-level ``dialfork`` object (the
  reply's :class:`Verdict` fields, ``blocked``, ``observed``: every verdict of this request);
  with ``stream: true`` the object comes in a last data chunk (``choices: []``) before ``[DONE]``,
  and the header reflects the history before the reply;
* block mode: the reply of the request that raises the conversation's first alarm is replaced by
  the fallback message and ``dialfork.blocked`` is true (the client sends the fallback back in the
  history, and the proxy knows it). Streamed replies are buffered in block mode until checked.

Errors: malformed JSON, messages or roles -> 400 with the reason (OpenAI's error shape), bodies over
``max_body_bytes`` -> 413, upstream unreachable -> 502, upstream timeout -> 504, upstream error
statuses are passed through. ``GET /healthz``; ``GET /metrics`` (Prometheus text format).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from fastapi import Request  # resolved by FastAPI from this module's globals

from .monitor import Monitor, Verdict
from .store import Row, Store, chain, prefix_hashes

logger = logging.getLogger(__name__)

MODES = ("annotate", "block")
DEFAULT_FALLBACK = (
    "I'm sorry, I can't continue with that. Let me get back to the steps of your request, "
    "or connect you with a person who can help."
)
ROLE_SPEAKER = {"user": "user", "assistant": "system"}
IGNORED_ROLES = ("system", "developer", "tool", "function")
MAX_CONVERSATION_ID = 256
# request headers that are the proxy's business, not the upstream's
_HOP = {
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "accept-encoding",
    "te",
    "upgrade",
    "proxy-authorization",
    "proxy-connection",
    "trailer",
}
# upstream response headers the proxy sets itself
_OWN = _HOP | {"content-type", "content-encoding", "date", "server"}


def _passthrough(headers: Mapping[str, str]) -> dict[str, str]:
    """End-to-end upstream headers, lower-cased (the proxy's own headers, also lower-case, win)."""
    return {
        k.lower(): v
        for k, v in headers.items()
        if k.lower() not in _OWN and not k.lower().startswith("x-dialfork-") and k.lower() != "server-timing"
    }


@dataclass(frozen=True)
class GuardConfig:
    """The proxy's settings, checked when built.

    Attributes:
        upstream: The upstream's OpenAI base URL (e.g. ``http://127.0.0.1:8000/v1``).
        mode: ``"annotate"`` (each reply carries its verdict) or ``"block"`` (also replace the
            reply that raises the conversation's first alarm by ``fallback``).
        fallback: The message sent instead of a blocked reply.
        max_body_bytes: The largest request body accepted (>= 1024).
        upstream_timeout: Seconds to wait for the upstream (> 0).

    Raises:
        ValueError: Every bad setting, in one message.
    """

    upstream: str
    """The upstream's OpenAI base URL (e.g. ``http://127.0.0.1:8000/v1``)."""
    mode: str = "annotate"
    fallback: str = DEFAULT_FALLBACK
    max_body_bytes: int = 1 << 20
    upstream_timeout: float = 60.0

    def __post_init__(self):
        errs = []
        if not self.upstream.startswith(("http://", "https://")):
            errs.append(f"upstream must be an http(s) URL, got {self.upstream!r}")
        if self.mode not in MODES:
            errs.append(f"mode must be one of {MODES}, got {self.mode!r}")
        if not isinstance(self.fallback, str) or not self.fallback.strip():
            errs.append("the fallback message must be a non-empty string")
        if self.max_body_bytes < 1024:
            errs.append(f"max_body_bytes must be >= 1024, got {self.max_body_bytes}")
        if not self.upstream_timeout > 0:
            errs.append(f"upstream_timeout must be > 0 seconds, got {self.upstream_timeout}")
        if errs:
            raise ValueError("; ".join(errs))

    @property
    def completions_url(self) -> str:
        return self.upstream.rstrip("/") + "/chat/completions"


def check_upstream(upstream: str, timeout: float = 5.0, option: str = "--upstream") -> None:
    """Check at start-up that ``upstream`` is an OpenAI API root (the URL ``/chat/completions`` is
    appended to), so that a wrong base does not turn every request into a bare 404.

    A root whose path ends in ``/v1`` is accepted; an upstream that is not up yet only logs a warning.
    Any other path is accepted only when the upstream answers ``GET <upstream>/models`` with
    something other than 404 (a server with another API root); otherwise it is refused, with the
    fix (``<upstream>/v1``) and what ``<upstream>/v1/models`` answered.

    Args:
        upstream: The upstream base URL as given (``--upstream``).
        timeout: Seconds to wait for each probe.
        option: The name of the setting, for the message.

    Raises:
        ValueError: the URL is not http(s), or its path is not the API root (one line naming
            ``option``, the URL and the fix).
    """
    from urllib.parse import urlsplit

    import httpx

    base = upstream.rstrip("/")
    parts = urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(
            f"{option} {upstream!r} is not an http(s) URL; use e.g. {option} http://127.0.0.1:8000/v1"
        )
    path = parts.path

    def probe(url: str) -> int | str:
        try:
            return httpx.get(url, timeout=timeout).status_code
        except httpx.HTTPError as e:
            return f"unreachable ({type(e).__name__})"

    status = probe(base + "/models")
    if path.endswith("/v1"):
        if isinstance(status, str):
            logger.warning(
                "%s %s: the upstream is not up yet (GET %s/models: %s); requests get 502 until it is",
                option,
                upstream,
                base,
                status,
            )
        elif status != 200:
            logger.info("%s %s: GET %s/models answered %s; serving anyway", option, upstream, base, status)
        return
    if isinstance(status, int) and status != 404:
        logger.info(
            "%s %s: the path does not end in /v1, but GET %s/models answers %d: taken as the API root",
            option,
            upstream,
            base,
            status,
        )
        return
    v1 = probe(base + "/v1/models")
    seen = f"GET {base}/models: {status}; GET {base}/v1/models: {v1}"
    raise ValueError(
        f"{option} {upstream} is not the upstream's OpenAI API root (the proxy posts to "
        f"<upstream>/chat/completions; {seen}); use {option} {base}/v1"
    )


class BadRequest(Exception):
    """A request the proxy refuses, answered as an OpenAI-style error.

    Args:
        status: The HTTP status (400, 413, ...).
        message: What is wrong and how to fix it.
        param: The request field at fault, when there is one.
        kind: The OpenAI error ``type``.
    """

    def __init__(
        self, status: int, message: str, param: str | None = None, kind: str = "invalid_request_error"
    ):
        super().__init__(message)
        self.status, self.message, self.param, self.kind = status, message, param, kind


# -- request parsing (pure) ------------------------------------------------------------------------
def message_text(content: Any, where: str) -> str | None:
    """The text of a message's ``content`` (a string, a list of parts, or null).

    Args:
        content: The message's ``content``.
        where: Names the message in errors (``"messages[3]"``).

    Returns:
        The text (text parts joined by newlines), or ``None`` for null content.

    Raises:
        BadRequest: A content part without a ``type``, a text part without a string ``text``,
            or content of another type.
    """
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for j, p in enumerate(content):
            if not isinstance(p, Mapping) or not isinstance(p.get("type"), str):
                raise BadRequest(
                    400, f"{where}.content[{j}] must be an object with a 'type'", f"{where}.content"
                )
            if p["type"] == "text":
                if not isinstance(p.get("text"), str):
                    raise BadRequest(400, f"{where}.content[{j}].text must be a string", f"{where}.content")
                parts.append(p["text"])
        return "\n".join(parts)
    raise BadRequest(
        400,
        f"{where}.content must be a string, a list of content parts or null, got {type(content).__name__}",
        f"{where}.content",
    )


def parse_turns(body: Any) -> list[tuple[str, str]]:
    """The dialogue turns ``[(speaker, text), ...]`` of a chat completion request body.

    User messages become ``user`` turns and assistant messages ``system`` turns; system,
    developer, tool and function messages and empty texts are skipped.

    Args:
        body: The parsed JSON body.

    Returns:
        The turns, in order.

    Raises:
        BadRequest: The body is not an object, ``messages`` is not a non-empty list, ``stream`` is
            not a boolean, or a message is malformed (named by index).
    """
    if not isinstance(body, Mapping):
        raise BadRequest(400, f"the request body must be a JSON object, got {type(body).__name__}")
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise BadRequest(400, "'messages' must be a non-empty list", "messages")
    if "stream" in body and not isinstance(body["stream"], bool):
        raise BadRequest(400, f"'stream' must be true or false, got {body['stream']!r}", "stream")
    turns = []
    for i, m in enumerate(msgs):
        where = f"messages[{i}]"
        if not isinstance(m, Mapping):
            raise BadRequest(400, f"{where} must be an object, got {type(m).__name__}", where)
        role = m.get("role")
        if role not in ROLE_SPEAKER and role not in IGNORED_ROLES:
            raise BadRequest(
                400,
                f"{where}.role must be one of user, assistant, system, developer, tool, "
                f"function; got {role!r}",
                f"{where}.role",
            )
        text = message_text(m.get("content"), where)
        if role in ROLE_SPEAKER and text is not None and text.strip():
            turns.append((ROLE_SPEAKER[role], text))
        elif role == "user" and m.get("content") is None:
            raise BadRequest(400, f"{where}: a user message needs content", f"{where}.content")
    return turns


def conversation_id(headers: Mapping[str, str]) -> str:
    """The conversation key of a request, from its ``X-Conversation-Id`` header.

    Args:
        headers: The request headers (lower-case names).

    Returns:
        ``"id:<header>"``, or ``""`` without the header (the history then identifies the
        conversation).

    Raises:
        BadRequest: The header is blank, too long or holds control characters.
    """
    cid = headers.get("x-conversation-id")
    if cid is None:
        return ""
    if not cid.strip() or len(cid) > MAX_CONVERSATION_ID or any(ord(c) < 32 or ord(c) == 127 for c in cid):
        raise BadRequest(
            400,
            f"X-Conversation-Id must be 1..{MAX_CONVERSATION_ID} printable characters",
            "X-Conversation-Id",
        )
    return "id:" + cid


def empty_verdict(threshold: float) -> dict[str, Any]:
    """The verdict reported before any turn was observed.

    Args:
        threshold: The monitor's threshold.

    Returns:
        A verdict dict with no turn, no score and no alarm.
    """
    return {
        "turn": 0,
        "system_turn": None,
        "alarm": False,
        "first_alarm": None,
        "score": None,
        "threshold": threshold,
        "speaker": None,
        "raised": False,
        "warning": None,
        "rule": None,
    }


# -- the app -----------------------------------------------------------------------------------------
class _Metrics:
    def __init__(self):
        from prometheus_client import CollectorRegistry, Counter, Histogram

        r = self.registry = CollectorRegistry()
        ms = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
        self.requests = Counter(
            "dialfork_guard_requests", "chat completion requests", ["stream", "outcome"], registry=r
        )
        self.turns = Counter("dialfork_guard_turns", "turns observed", ["speaker"], registry=r)
        self.alarms = Counter(
            "dialfork_guard_alarms", "conversations whose first alarm was raised", registry=r
        )
        self.blocked = Counter(
            "dialfork_guard_blocked", "replies replaced by the fallback message", registry=r
        )
        self.upstream_errors = Counter(
            "dialfork_guard_upstream_errors", "upstream failures", ["kind"], registry=r
        )
        self.request_seconds = Histogram(
            "dialfork_guard_request_seconds",
            "time in the proxy per request",
            ["stream"],
            buckets=ms,
            registry=r,
        )
        self.encode_seconds = Histogram(
            "dialfork_guard_encode_seconds", "encoding + detector step per turn", buckets=ms, registry=r
        )
        self.upstream_seconds = Histogram(
            "dialfork_guard_upstream_seconds", "upstream time per request", buckets=ms, registry=r
        )
        self.overhead_seconds = Histogram(
            "dialfork_guard_overhead_seconds",
            "proxy time minus upstream and encoding, per request",
            buckets=ms,
            registry=r,
        )


class Guard:
    """The proxy's request logic (one per app).

    Args:
        monitor: The fitted monitor that scores the turns.
        store: The durable session state.
        config: The proxy's settings.
    """

    def __init__(self, monitor: Monitor, store: Store, config: GuardConfig):
        self.monitor, self.store, self.config = monitor, store, config
        self.metrics = _Metrics()
        # one worker thread encodes (the encoder sees one caller at a time, and the event loop is
        # never blocked by a model); everything else (store look-up, detector step, commit: well
        # under a millisecond) runs on the event loop, so a request hops to the worker only to encode
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="guard-encoder")
        self.client = None

    def shutdown(self) -> None:
        """Stop the encoder thread once its queued encodings finish (the app's shutdown)."""
        self._pool.shutdown(wait=True)

    async def _encode(self, texts: list[str]):
        """``(embeddings, seconds)`` of ``texts`` (one hop to the encoder thread; none for no text)."""
        if not texts:
            return None, 0.0

        def run():
            t0 = time.perf_counter()
            return self.monitor.encode_many(texts), time.perf_counter() - t0

        return await asyncio.get_running_loop().run_in_executor(self._pool, run)

    async def _history(self, conv: str, hashes: list[str], turns: list[tuple[str, str]]):
        """Resume from the longest stored prefix, observe the new history turns, commit them.
        Returns (state before, last stored verdict, session, verdicts, encoding seconds, done time)."""
        k, state, last = self.store.longest_prefix(conv, hashes)
        items = [(sp, text, h) for (sp, text), h in zip(turns[k:], hashes[k:])]
        E, enc = await self._encode([text for _, text, _ in items])
        session, rows, verdicts = self._observe(conv, state, items, E, enc)
        self.store.put(rows)  # what was observed is never observed twice
        return state, last, session, verdicts, enc, time.perf_counter()

    async def _reply(
        self, conv: str, prefix_before: str, state: dict[str, Any], text: str, first_before: int | None
    ):
        """Observe the reply (reused when this exact reply was already observed: a retried request),
        decide blocking, commit. Returns (verdicts, blocked, delivered text, encoding seconds)."""
        prefix = chain(prefix_before, "system", text)
        hit = self.store.get(conv, prefix)
        if hit is not None:
            v = Verdict.from_dict(hit[1])
            rows, verdicts, enc = [Row(conv, prefix, v.turn, "system", hit[0], hit[1])], [v], 0.0
        else:
            E, enc = await self._encode([text])
            _, rows, verdicts = self._observe(conv, state, [("system", text, prefix)], E, enc)
        raised_here = first_before is None and rows[-1].state["first_alarm"] is not None
        blocked = self.config.mode == "block" and raised_here
        delivered = self.config.fallback if blocked else text
        if blocked:
            self.metrics.blocked.inc()
            rows = [
                Row(
                    r.conv,
                    chain(prefix_before, "system", delivered),
                    r.idx,
                    r.speaker,
                    r.state,
                    r.verdict,
                    True,
                )
                for r in rows
            ]
        self.store.put(rows)
        return verdicts, blocked, delivered, enc

    def _observe(self, conv: str, state: dict | None, items: list[tuple[str, str, str]], E: Any, enc: float):
        """Observe ``(speaker, text, prefix)`` items (embeddings ``E``) from ``state``: (session, rows, verdicts)."""
        s = self.monitor.session(state)
        before = s.first_alarm
        rows, verdicts = [], []
        for i, (sp, text, prefix) in enumerate(items):
            v = s.observe(sp, text, embedding=E[i])
            self.metrics.encode_seconds.observe(enc / len(items))
            self.metrics.turns.labels(sp).inc()
            verdicts.append(v)
            rows.append(Row(conv, prefix, v.turn, sp, s.state(), v.to_dict()))
        if before is None and s.first_alarm is not None:
            self.metrics.alarms.inc()
        return s, rows, verdicts

    async def handle(self, headers: Mapping[str, str], raw: bytes, stream_label: list[str]):
        """Answer one chat completion request: observe its history, forward it upstream, observe the
        reply and attach (or, in ``block`` mode, enforce) the verdict.

        Args:
            headers: The request headers.
            raw: The raw request body.
            stream_label: A one-item list set to ``"true"``/``"false"`` (the metrics label).

        Returns:
            The response: JSON, or a streaming response for ``"stream": true``.

        Raises:
            BadRequest: The body is not valid JSON or not a valid chat completion request.
        """
        t_start = time.perf_counter()
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError, RecursionError) as e:
            raise BadRequest(400, f"the request body is not valid JSON: {type(e).__name__}: {e}") from e
        turns = parse_turns(body)
        stream = bool(body.get("stream", False))
        stream_label[0] = str(stream).lower()
        conv = conversation_id(headers)
        hashes = prefix_hashes(turns)
        # the history's new turns are encoded while the upstream answers (they do not depend on it)
        history = asyncio.ensure_future(self._history(conv, hashes, turns))
        ctx = {
            "t_start": t_start,
            "conv": conv,
            "prefix": hashes[-1] if hashes else "",
            "history": history,
            "encode": 0.0,
        }
        fwd = {k_: v for k_, v in headers.items() if k_.lower() not in _HOP}
        try:
            if stream:
                return await self._stream(raw, fwd, ctx)
            return await self._once(raw, fwd, ctx)
        finally:
            if not history.done():
                await asyncio.shield(history)  # committed whatever the upstream did

    async def _join_history(self, ctx, upstream_done: float) -> None:
        """Wait for the history's observation; its encoding counts as the request's encoding time
        only as far as it outlasted the upstream call (``Server-Timing: encode``)."""
        state, last, session, verdicts, enc, done = await ctx["history"]
        ctx.update(
            session=session,
            verdicts=verdicts,
            last=verdicts[-1].to_dict() if verdicts else last,
            first_before=None if state is None else state.get("first_alarm"),
        )
        ctx["encode"] += min(enc, max(0.0, done - upstream_done))

    def _dialfork(self, ctx, reply_verdicts: list[Verdict], blocked: bool) -> dict[str, Any]:
        allv = ctx["verdicts"] + reply_verdicts
        last = allv[-1].to_dict() if allv else (ctx["last"] or empty_verdict(self.monitor.threshold))
        return {
            **last,
            "blocked": blocked,
            "conversation_id": ctx["conv"][3:] if ctx["conv"] else None,
            "observed": [v.to_dict() for v in allv],
            "mode": self.config.mode,
        }

    async def _observe_reply(self, ctx, text: str | None) -> tuple[list[Verdict], bool, str | None]:
        """Observe the reply (if it has text); returns (verdicts, blocked, delivered text)."""
        if text is None or not text.strip():
            return [], False, text
        verdicts, blocked, delivered, enc = await self._reply(
            ctx["conv"], ctx["prefix"], ctx["session"].state(), text, ctx["first_before"]
        )
        ctx["encode"] += enc
        return verdicts, blocked, delivered

    def _headers(self, dialfork: Mapping[str, Any], ctx, upstream_s: float) -> dict[str, str]:
        fa = dialfork.get("first_alarm")
        return {
            "x-dialfork-alarm": "true" if dialfork.get("alarm") else "false",
            "x-dialfork-first-alarm": "none" if fa is None else str(fa),
            "x-dialfork-turn": str(dialfork.get("turn", 0)),
            "server-timing": f"encode;dur={ctx['encode'] * 1000:.3f}, upstream;dur={upstream_s * 1000:.3f}",
        }

    def _done(self, ctx, upstream_s: float, stream: str):
        total = time.perf_counter() - ctx["t_start"]
        self.metrics.request_seconds.labels(stream).observe(total)
        self.metrics.upstream_seconds.observe(upstream_s)
        self.metrics.overhead_seconds.observe(max(0.0, total - upstream_s - ctx["encode"]))
        self.metrics.requests.labels(stream, "ok").inc()

    def _upstream_failure(self, e: Exception) -> BadRequest:
        import httpx

        if isinstance(e, httpx.TimeoutException):
            self.metrics.upstream_errors.labels("timeout").inc()
            return BadRequest(
                504,
                f"the upstream {self.config.completions_url} did not answer within "
                f"{self.config.upstream_timeout:g} s ({type(e).__name__})",
                kind="upstream_timeout",
            )
        self.metrics.upstream_errors.labels("unreachable").inc()
        return BadRequest(
            502,
            f"the upstream {self.config.completions_url} is unreachable ({type(e).__name__}: {e})",
            kind="upstream_unreachable",
        )

    async def _once(self, raw: bytes, fwd: dict[str, str], ctx):
        import httpx
        from fastapi.responses import JSONResponse, Response

        t0 = time.perf_counter()
        try:
            r = await self.client.post(self.config.completions_url, content=raw, headers=fwd)
        except httpx.HTTPError as e:
            raise self._upstream_failure(e) from e
        upstream_s = time.perf_counter() - t0
        await self._join_history(ctx, t0 + upstream_s)
        if r.status_code != 200:
            self.metrics.upstream_errors.labels(f"status_{r.status_code}").inc()
            self.metrics.requests.labels("false", "upstream_status").inc()
            return Response(
                r.content,
                status_code=r.status_code,
                headers=_passthrough(r.headers),
                media_type=r.headers.get("content-type", "application/json"),
            )
        try:
            data = r.json()
            msg = data["choices"][0]["message"]
            text = message_text(msg.get("content"), "choices[0].message")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError, BadRequest) as e:
            self.metrics.upstream_errors.labels("invalid_response").inc()
            raise BadRequest(
                502,
                f"the upstream returned an invalid chat completion ({type(e).__name__}: {e})",
                kind="upstream_invalid_response",
            ) from e
        verdicts, blocked, delivered = await self._observe_reply(ctx, text)
        if blocked:
            msg["content"] = delivered
            msg.pop("tool_calls", None)
        data["dialfork"] = df = self._dialfork(ctx, verdicts, blocked)
        self._done(ctx, upstream_s, "false")
        return JSONResponse(data, headers={**_passthrough(r.headers), **self._headers(df, ctx, upstream_s)})

    async def _stream(self, raw: bytes, fwd: dict[str, str], ctx):
        import httpx
        from fastapi.responses import Response, StreamingResponse

        t0 = time.perf_counter()
        req = self.client.build_request("POST", self.config.completions_url, content=raw, headers=fwd)
        try:
            r = await self.client.send(req, stream=True)
        except httpx.HTTPError as e:
            raise self._upstream_failure(e) from e
        try:
            await self._join_history(ctx, time.perf_counter())
        except BaseException:
            await r.aclose()
            raise
        if r.status_code != 200:
            content = await r.aread()
            await r.aclose()
            self.metrics.upstream_errors.labels(f"status_{r.status_code}").inc()
            self.metrics.requests.labels("true", "upstream_status").inc()
            return Response(
                content,
                status_code=r.status_code,
                headers=_passthrough(r.headers),
                media_type=r.headers.get("content-type", "application/json"),
            )
        block = self.config.mode == "block"
        before = self._dialfork(ctx, [], False)

        async def events() -> AsyncIterator[bytes]:
            parts: list[str] = []
            held: list[str] = []
            first: dict[str, Any] = {}
            try:
                async for line in r.aiter_lines():
                    if line.startswith("data:"):
                        payload = line[5:].strip()
                        if payload == "[DONE]":
                            break
                        try:
                            chunk = json.loads(payload)
                            first = first or chunk
                            for ch in chunk.get("choices") or []:
                                if ch.get("index", 0) == 0:
                                    piece = (ch.get("delta") or {}).get("content")
                                    if isinstance(piece, str):
                                        parts.append(piece)
                        except (ValueError, AttributeError, TypeError):
                            pass  # not ours to judge: passed through as is
                    if block:
                        held.append(line)
                    else:
                        yield (line + "\n").encode()
            except httpx.HTTPError as e:
                kind = "timeout" if isinstance(e, httpx.TimeoutException) else "broken_stream"
                self.metrics.upstream_errors.labels(kind).inc()
                self.metrics.requests.labels("true", f"upstream_{kind}").inc()
                err = {
                    "error": {
                        "message": f"the upstream stream failed ({type(e).__name__}: {e})",
                        "type": f"upstream_{kind}",
                    },
                    "dialfork": before,
                }
                yield f"\ndata: {json.dumps(err)}\n\ndata: [DONE]\n\n".encode()
                return
            finally:
                await r.aclose()
            upstream_s = time.perf_counter() - t0
            text = "".join(parts)
            verdicts, blocked, delivered = await self._observe_reply(ctx, text if parts else None)
            if block:
                if blocked:
                    yield _fallback_events(first, delivered)
                else:
                    yield ("\n".join(held) + "\n").encode()
            df = self._dialfork(ctx, verdicts, blocked)
            tail = {
                "id": first.get("id", "dialfork"),
                "object": "chat.completion.chunk",
                "created": first.get("created", int(time.time())),
                "model": first.get("model", ""),
                "choices": [],
                "dialfork": df,
            }
            yield f"\ndata: {json.dumps(tail)}\n\ndata: [DONE]\n\n".encode()
            self._done(ctx, upstream_s, "true")

        return StreamingResponse(
            events(),
            media_type="text/event-stream",
            headers={
                **_passthrough(r.headers),
                **self._headers(before, ctx, 0.0),
                "cache-control": "no-cache",
            },
        )


def _fallback_events(first: Mapping[str, Any], text: str) -> bytes:
    base = {
        "id": first.get("id", "dialfork-blocked"),
        "object": "chat.completion.chunk",
        "created": first.get("created", int(time.time())),
        "model": first.get("model", ""),
    }
    a = {
        **base,
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": None}],
    }
    b = {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    return f"data: {json.dumps(a)}\n\ndata: {json.dumps(b)}\n\n".encode()


async def _read_limited(request, limit: int) -> bytes:
    cl = request.headers.get("content-length")
    if cl is not None:
        try:
            if int(cl) > limit:
                raise BadRequest(413, f"request body of {int(cl)} bytes is over the limit of {limit} bytes")
        except ValueError as e:
            raise BadRequest(400, "invalid Content-Length header") from e
    buf = bytearray()
    async for chunk in request.stream():
        buf += chunk
        if len(buf) > limit:
            raise BadRequest(413, f"request body is over the limit of {limit} bytes")
    return bytes(buf)


def create_app(monitor: Monitor, store: Store, config: GuardConfig, on_startup=None):
    """The FastAPI app of the proxy.

    Args:
        monitor: The fitted monitor.
        store: The session state database.
        config: The proxy's settings.
        on_startup: Called once the app is ready to serve.

    Returns:
        The app: ``POST /v1/chat/completions``, ``GET /healthz`` and ``GET /metrics``.
    """
    import httpx
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse, Response

    guard = Guard(monitor, store, config)

    @asynccontextmanager
    async def lifespan(app):
        guard.client = httpx.AsyncClient(
            timeout=httpx.Timeout(config.upstream_timeout, connect=min(10.0, config.upstream_timeout)),
            limits=httpx.Limits(max_connections=512, max_keepalive_connections=128),
        )
        if on_startup is not None:
            on_startup()
        try:
            yield
        finally:
            await guard.client.aclose()
            guard.shutdown()

    app = FastAPI(title="DialFork guard", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.guard = guard

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        label = ["unknown"]
        try:
            raw = await _read_limited(request, config.max_body_bytes)
            return await guard.handle(request.headers, raw, label)
        except BadRequest as e:
            outcome = {400: "bad_request", 413: "too_large", 502: "upstream_error", 504: "upstream_timeout"}
            guard.metrics.requests.labels(label[0], outcome.get(e.status, str(e.status))).inc()
            return JSONResponse(
                {"error": {"message": e.message, "type": e.kind, "param": e.param, "code": None}},
                status_code=e.status,
            )

    @app.get("/healthz")
    async def healthz():
        det = monitor.detector
        return {
            "status": "ok",
            "mode": config.mode,
            "detector": det.name,
            "order": getattr(det, "order", None),
            "task": monitor.task,
            "monitor": monitor.fingerprint,
            "upstream": config.upstream,
        }

    @app.get("/metrics")
    async def metrics():
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return Response(generate_latest(guard.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app
