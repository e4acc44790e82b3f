"""Play recorded dialogues through a guard proxy, many conversations at once (load tests, the
crash test, ``benchmarks/bench_guard.py``), and check what the proxy stored.

Each conversation sends its user turns in order and takes each system turn from the upstream
(the fake upstream replays the recorded dialogue, :mod:`dialfork_metrics.guard.fake_upstream`).
A request that fails at the transport level (the proxy is down or restarting) or with 502/503 is
retried, unchanged, until ``retry_for`` seconds have passed: exactly what a client does when the
proxy is killed, and what the proxy must absorb without losing or double-counting a turn.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class ServerProcess:
    """``python -m dialfork_metrics.guard <args>`` (serve or fake-upstream) as a child process, waited
    for through its ``--ready-file``; stopped (SIGTERM) or killed (SIGKILL) by its own PID.

    Use it as a context manager (``with ServerProcess(...) as server:``) to stop it on exit; pass
    ``--port 0`` to let the server pick a free port, then read :attr:`port` / :attr:`url`.

    Args:
        args: The command line after ``python -m dialfork_metrics.guard`` (items are ``str()``-ed),
            e.g. ``["fake-upstream", "--data", "demo_out/hub", "--port", 0]``.
        workdir: An existing folder for the ready file and the server's log (``<name>.log``).
        name: The server's name in file names and error messages.
        timeout: Seconds to wait for the server to serve.
        env: The child's environment (default: this process's).

    Raises:
        RuntimeError: The server exited before serving (the message ends with its log), did not
            serve within ``timeout`` seconds, or its ready file names another process.
    """

    def __init__(
        self,
        args: Sequence[Any],
        workdir: str | os.PathLike,
        name: str,
        timeout: float = 600,
        env: Mapping[str, str] | None = None,
    ):
        workdir = Path(workdir)
        self.name = name
        self.ready = workdir / f"{name}.ready.json"
        self.ready.unlink(missing_ok=True)
        self.log_path = workdir / f"{name}.log"
        self.log = open(self.log_path, "ab")
        cmd = [
            sys.executable,
            "-m",
            "dialfork_metrics.guard",
            *map(str, args),
            "--ready-file",
            str(self.ready),
        ]
        self.proc = subprocess.Popen(
            cmd, stdout=self.log, stderr=subprocess.STDOUT, env=dict(env) if env is not None else None
        )
        deadline = time.monotonic() + timeout
        while not self.ready.exists():
            if self.proc.poll() is not None:
                self.log.close()
                raise RuntimeError(
                    f"{name} exited with {self.proc.returncode}: {self.log_path.read_text()[-2000:]}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{name} did not start within {timeout} s")
            time.sleep(0.05)
        info = json.loads(self.ready.read_text())
        if info["pid"] != self.proc.pid:
            raise RuntimeError(f"{name}: the ready file names pid {info['pid']}, not {self.proc.pid}")
        self.port = int(info["port"])
        self.url = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def kill9(self) -> int:
        """Kill the server with SIGKILL (no clean shutdown: a crash test) and close its log.

        Returns:
            The process's return code (``-9``).
        """
        os.kill(self.proc.pid, signal.SIGKILL)
        rc = self.proc.wait(timeout=60)
        self.log.close()
        return rc

    def stop(self) -> None:
        """Stop the server with SIGTERM if it runs (SIGKILL after 60 s), and close its log."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=60)
        if not self.log.closed:
            self.log.close()


@dataclass
class ConversationResult:
    """What one client saw while playing one conversation through the proxy.

    Attributes:
        dialogue_id: The recorded dialogue played.
        conversation_id: The ``X-Conversation-Id`` sent.
        replies: The ``dialfork`` object of every reply, in order.
        texts: The text of every reply, in order.
        retries: Requests retried (a transport error, a 502/503 or an unreadable answer).
        latencies: Seconds of each reply's final request.
    """

    dialogue_id: str
    conversation_id: str
    replies: list[dict[str, Any]] = field(default_factory=list)
    """The ``dialfork`` object of every reply, in order."""
    texts: list[str] = field(default_factory=list)
    retries: int = 0
    latencies: list[float] = field(default_factory=list)


def turns_until_last_system(
    dialogue: Mapping[str, Any], max_turns: int | None = None
) -> list[dict[str, str]]:
    """The turns a client can play: up to ``max_turns``, ending at a system turn.

    Args:
        dialogue: A record with ``turns``.
        max_turns: Most turns to keep; None or 0: all.

    Returns:
        The first turns, trailing user turns dropped (empty when no system turn is left).
    """
    turns = list(dialogue["turns"])[: max_turns or None]
    while turns and turns[-1]["speaker"] != "system":
        turns.pop()
    return turns


async def _play_one(
    client,
    url: str,
    d: Mapping[str, Any],
    conv: str,
    turns: Sequence[Mapping[str, str]],
    stream: bool,
    retry_for: float,
    on_reply: Callable[[str, int], None] | None,
) -> ConversationResult:
    import httpx

    res = ConversationResult(d["dialogue_id"], conv)
    msgs: list[dict[str, str]] = []
    for t in turns:
        if t["speaker"] == "user":
            msgs.append({"role": "user", "content": t["text"]})
            continue
        body = {"model": "guard-load", "messages": list(msgs), "stream": stream}
        headers = {"X-Conversation-Id": conv, "X-Fake-Dialogue": d["dialogue_id"]}
        deadline = time.monotonic() + retry_for
        while True:
            t0 = time.perf_counter()
            try:
                r = await client.post(url, json=body, headers=headers)
                if r.status_code in (502, 503):
                    raise httpx.TransportError(f"status {r.status_code}")
                r.raise_for_status()
                if stream:
                    from .sse import read_completion

                    df, text = read_completion(r.text)
                else:
                    j = r.json()
                    df, text = j["dialfork"], j["choices"][0]["message"]["content"]
                break
            except (httpx.TransportError, ValueError, KeyError, IndexError) as e:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"conversation {conv}: no answer within {retry_for:g} s ({e})") from e
                res.retries += 1
                await asyncio.sleep(0.2)
        res.latencies.append(time.perf_counter() - t0)
        res.replies.append(df)
        res.texts.append(text)
        msgs.append({"role": "assistant", "content": text})
        if on_reply is not None:
            on_reply(conv, len(res.replies))
    return res


async def play_async(
    base_url: str,
    dialogues: Sequence[Mapping[str, Any]],
    *,
    concurrency: int = 50,
    max_turns: int | None = None,
    stream: bool = False,
    conversation_prefix: str = "",
    retry_for: float = 300.0,
    timeout: float = 120.0,
    on_reply: Callable[[str, int], None] | None = None,
) -> list[ConversationResult]:
    """Play the user side of recorded dialogues through a guard proxy, concurrently.

    Each dialogue is one conversation (``X-Conversation-Id: <conversation_prefix><dialogue_id>``):
    its user turns are sent as they were recorded, one request per system turn, and the reply is
    appended as the assistant message. Requests carry ``X-Fake-Dialogue: <dialogue_id>``, so that a
    fake upstream (``python -m dialfork_metrics.guard fake-upstream``) answers with that dialogue's
    recorded system turns; a real upstream ignores the header.

    Args:
        base_url: The proxy's base URL, e.g. ``http://127.0.0.1:8100`` (no ``/v1``).
        dialogues: Dicts with ``dialogue_id`` and ``turns`` (records or Task 3 examples).
        concurrency: Conversations in flight at once.
        max_turns: Play at most this many turns of each dialogue (ending at a system turn).
        stream: Ask for SSE replies (``stream: true``).
        conversation_prefix: Prefix of the conversation ids (separates runs on one database).
        retry_for: Seconds a request is retried while the proxy is down (502/503, refused).
        timeout: Seconds per HTTP request.
        on_reply: Called with (conversation id, number of replies so far) after each reply.

    Returns:
        One :class:`ConversationResult` per dialogue, in input order: the ``dialfork`` verdict
        object and the text of every reply.

    Raises:
        RuntimeError: A conversation got no answer within ``retry_for`` seconds.
        httpx.HTTPStatusError: The proxy answered a request with a client error (4xx).
    """
    import httpx

    url = base_url.rstrip("/") + "/v1/chat/completions"
    sem = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:

        async def one(d):
            async with sem:
                return await _play_one(
                    client,
                    url,
                    d,
                    conversation_prefix + d["dialogue_id"],
                    turns_until_last_system(d, max_turns),
                    stream,
                    retry_for,
                    on_reply,
                )

        return list(await asyncio.gather(*(one(d) for d in dialogues)))


def play(base_url: str, dialogues: Sequence[Mapping[str, Any]], **kw: Any) -> list[ConversationResult]:
    """:func:`play_async` from synchronous code.

    Args:
        base_url: The proxy's base URL, e.g. ``http://127.0.0.1:8100``.
        dialogues: Dicts with ``dialogue_id`` and ``turns``.
        **kw: The keyword arguments of :func:`play_async` (``concurrency``, ``max_turns``,
            ``stream``, ...).

    Returns:
        One :class:`ConversationResult` per dialogue, in input order.

    Raises:
        RuntimeError: A conversation got no answer in time (see :func:`play_async`).
    """
    return asyncio.run(play_async(base_url, dialogues, **kw))


def check_against_monitor(
    monitor,
    store,
    results: Sequence[ConversationResult],
    dialogues: Mapping[str, Mapping[str, Any]],
    max_turns: int | None = None,
) -> dict[str, int]:
    """Compare what the proxy stored and answered with the in-process ``monitor``: every turn of every
    conversation stored exactly once, at its index, with the in-process verdict; every reply's
    ``dialfork`` equal to the in-process verdict of that reply. Returns counts; raises
    ``AssertionError`` describing the first difference.

    Args:
        monitor: The in-process monitor (``replay(turns)`` gives one verdict per turn).
        store: The proxy's store (``conversation("id:<conversation id>")`` gives its rows).
        results: The conversations played.
        dialogues: The recorded dialogues by id.
        max_turns: The ``max_turns`` the conversations were played with.

    Returns:
        ``{"conversations", "turns", "replies"}``: how many were checked.

    Raises:
        AssertionError: A turn is lost or stored twice, a stored speaker or verdict differs, the
            number of replies differs from the system turns, a reply's ``dialfork`` differs, or
            the reply texts are not the recorded system turns.
    """
    n_turns = n_replies = 0
    for res in results:
        d = dialogues[res.dialogue_id]
        turns = turns_until_last_system(d, max_turns)
        expected = [v.to_dict() for v in monitor.replay(turns)]
        rows = store.conversation("id:" + res.conversation_id)
        idx = [r["turn"] for r in rows]
        if idx != list(range(1, len(turns) + 1)):
            lost = sorted(set(range(1, len(turns) + 1)) - set(idx))
            dup = sorted({i for i in idx if idx.count(i) > 1})
            raise AssertionError(
                f"{res.conversation_id}: stored turns {len(idx)} for {len(turns)} played "
                f"(lost {lost[:5]}, duplicated {dup[:5]})"
            )
        for r, t, e in zip(rows, turns, expected):
            if r["speaker"] != t["speaker"] or r["verdict"] != e:
                raise AssertionError(
                    f"{res.conversation_id} turn {r['turn']}: stored {r['speaker']} {r['verdict']} "
                    f"but in process {t['speaker']} {e}"
                )
        sys_expected = [e for e in expected if e["speaker"] == "system"]
        if len(res.replies) != len(sys_expected):
            raise AssertionError(
                f"{res.conversation_id}: {len(res.replies)} replies for {len(sys_expected)} system turns"
            )
        for k, (df, e) in enumerate(zip(res.replies, sys_expected), 1):
            got = {key: df.get(key) for key in e}
            if got != e:
                raise AssertionError(f"{res.conversation_id} reply {k}: proxy {got} != in process {e}")
        ref = [t["text"] for t in turns if t["speaker"] == "system"]
        if res.texts != ref:
            raise AssertionError(f"{res.conversation_id}: the replies are not the recorded system turns")
        n_turns += len(turns)
        n_replies += len(res.replies)
    return {"conversations": len(results), "turns": n_turns, "replies": n_replies}
