"""Fake agents behind an OpenAI-compatible endpoint on 127.0.0.1, for tests and the demo.

* ``faithful``: replays the template backend's conformant system policy (STAR's workflow walk),
  filling its templates with the values the user gave (``generation.api.read_answer``: the
  forecast is for the day and city the user asked about);
* ``derailed``: the same policy until system turn ``derail_at``, then the template backend's
  hallucination plan (WIC: the substitute task's workflow; SSPC: skip a step / jump to the
  outcome), as the benchmark's forks do at t_k;
* ``garbage``: answers HTTP 200 with an HTML page (a non-OpenAI server);
* ``empty``: answers well-formed completions with empty content;
* ``tools``: for ``--kb-tools``: when offered tools and none was called yet, answers with two tool
  calls (a valid call of the first tool, its required arguments set to the first value their
  schema allows, and a call whose arguments are not JSON); answers the tool results with
  ``Results: <content> | <content>`` (after checking they come back as ``role: tool`` messages
  with the calls' ids); otherwise replies as ``faithful``;
* ``user``: a scripted simulated user for ``--user openai:URL`` (greets, agrees, says goodbye with
  ``[END]`` after five turns or when the agent says goodbye).

The policy is stateless: each request replays the conversation it carries (the task is read from
the system prompt the audit sends, ``generation/prompts/system_agent.txt``; the user's yes/no and
closing answers are recognised in the template user's phrasing pools), so concurrent
conversations never share state. Each fake is a child process (``python -m
dialfork_metrics.audit.fakes``) bound to port 0; :func:`serve_fake_agent` starts it, reads its
port and stops it by its own PID.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any

from dialfork_dataset import taxonomy
from dialfork_dataset.taxonomy import is_type

KINDS = ("faithful", "derailed", "garbage", "empty", "user", "tools")
DEFAULT_DERAIL_AT = 3
"""System turn (1-based, t_k) at which the derailed fake leaves its workflow."""
DEFAULT_HTYPES = ("WIC", "SSPC")
SSPC_STRATEGIES = ("skip", "jump")
_SERVICE = re.compile(r"assistant \(the \"system\"\) of an? (.+?) service")


class _HappyScenario:
    happy = True
    user_task = ""
    user_guide = ()


class AgentPolicy:
    """The fake agent's reply to a chat request (see the module doc).

    Args:
        corpus: The workflow source (:class:`~dialfork_dataset.sources.WorkflowSource`, e.g. an
            opened STAR copy) whose tasks the agent serves.
        kind: ``"faithful"`` (follows the workflow) or ``"derailed"`` (leaves it at ``derail_at``).
        derail_at: System turn (1-based, t_k) from which the derailed agent follows a
            hallucination plan; ignored by the faithful agent.
        htypes: Hallucination types the derailed agent uses (any registered type with a
            planner: ``WIC``, ``SSPC``, ``GR``, ``CSC``, ...), one per conversation, chosen by
            the conversation's seed.
        variants: The variant pool the derailed agent draws from: a
            :class:`generation.variants.VariantPool`, a variant file's path, or None (the
            packaged file).

    Raises:
        ValueError: ``kind`` is neither ``"faithful"`` nor ``"derailed"``, or a type of
            ``htypes`` is not registered.
    """

    def __init__(
        self,
        corpus: Any,
        kind: str = "faithful",
        derail_at: int = DEFAULT_DERAIL_AT,
        htypes: Sequence[str] = DEFAULT_HTYPES,
        variants: Any = None,
    ):
        from generation.api import TemplateBackend, load_variants

        if kind not in ("faithful", "derailed"):
            raise ValueError(f"AgentPolicy: kind must be 'faithful' or 'derailed', got {kind!r}")
        bad = [h for h in htypes if not is_type(h)]
        if bad or not htypes:
            raise ValueError(
                f"AgentPolicy: unknown hallucination type(s) {bad}; registered: {', '.join(taxonomy.names())}"
            )
        self.corpus = corpus
        self.kind = kind
        self.derail_at = int(derail_at)
        self.htypes = tuple(htypes)
        self.backend = TemplateBackend()
        self.backend.bind_corpus(corpus)
        self.by_service = {t.replace("_", " "): t for t in corpus.tasks}
        self.variants = (
            variants
            if variants is not None and not isinstance(variants, (str, os.PathLike))
            else load_variants(variants)
        )
        data = self.backend.data["user"]
        self.answers: dict[str, str] = {}
        for key, ans in (
            ("yes", "yes"),
            ("more_yes", "yes"),
            ("trip_yes", "yes"),
            ("no", "no"),
            ("more_no", "no"),
            ("trip_no", "no"),
            ("trip_done", "done"),
            ("chit_chat", "chat"),
            ("close", "close"),
        ):
            for text in data.get(key, ()):
                if "{" not in text:
                    self.answers.setdefault(_key(text), ans)

    def task_of(self, system_prompt: str) -> str:
        """The task a system prompt is about (read from the service it names).

        Args:
            system_prompt: The audit's system prompt (``generation/prompts/system_agent.txt``).

        Returns:
            The task name.

        Raises:
            ValueError: The prompt names no service of the corpus.
        """
        m = _SERVICE.search(system_prompt)
        if not m or m.group(1) not in self.by_service:
            raise ValueError("the system prompt names no known STAR service")
        return self.by_service[m.group(1)]

    def _answer(self, text: str, sim: Any) -> str | None:
        kids = sim.m.children.get(sim.prev) or () if sim.prev else ()
        if "correct" in kids:
            t = text.strip()
            return "noanswer" if t == "I don't know." else ("incorrect" if t.endswith("?") else "correct")
        return self.answers.get(_key(text))

    def reply(self, messages: Sequence[Mapping[str, str]]) -> str:
        """The agent's next system turn for a chat request, replayed from the conversation it
        carries (stateless).

        Args:
            messages: The chat messages, the system prompt first, then the ``user`` and
                ``assistant`` messages (others ignored).

        Returns:
            The reply text.

        Raises:
            ValueError: The first message is not the system prompt, or it names no known service.
        """
        from generation.api import Rng, Sim, build_hal, hal_system_turn, read_answer, stable_seed, system_turn

        if not messages or messages[0].get("role") != "system":
            raise ValueError("the first message must be the system prompt")
        prompt = messages[0]["content"]
        task = self.corpus.task(self.task_of(prompt))
        convo = [
            m
            for m in messages[1:]
            if m.get("role") in ("user", "assistant") and isinstance(m.get("content"), str)
        ]
        seed = stable_seed("fake-agent", prompt, convo[0]["content"] if convo else "") % (2**62)
        m = self.backend.model(task)
        sim = Sim(m, _HappyScenario(), seed, self.backend.data)
        d = SimpleNamespace(
            turns=[],
            wrapped=False,
            fork=None,
            injected=False,
            seed=seed,
            scenario=_HappyScenario(),
            reference=None,
            substitute=None,
        )
        n_sys = 0
        for i, msg in enumerate([*convo, None]):
            if msg is not None and msg["role"] == "user":
                read_answer(
                    sim, sim.prev, msg["content"]
                )  # the values the user gives fill the later templates
                sim.answer = self._answer(msg["content"], sim)
                d.turns.append({"speaker": "user", "text": msg["content"]})
                continue
            n_sys += 1
            if self.kind == "derailed" and n_sys >= self.derail_at:
                rng = Rng(seed, i, 1000)
                if sim.hal is None:
                    self._fork(sim, d, m, task, seed, n_sys)
                    sim.hal = build_hal(sim, d, rng, self.backend)
                text = hal_system_turn(sim, d, rng, self.backend)
            else:
                text = system_turn(sim, d, Rng(seed, i), seed)
            if msg is None:
                return text
            d.turns.append({"speaker": "system", "text": msg["content"]})
        raise AssertionError("unreachable")

    def _fork(self, sim: Any, d: Any, m: Any, task: Any, seed: int, t: int) -> None:
        """The fork spec and the stand-in reference D+ (the walk so far, then the happy path)."""
        from generation.api import ForkSpec, Rng

        htype = self.htypes[seed % len(self.htypes)]
        pool = list(self.variants[htype])
        if htype == "SSPC":
            pool = [v for v in pool if v.template.get("strategy") in SSPC_STRATEGIES] or pool
        variant = Rng(seed, 3).choice(pool)
        sub = None
        if taxonomy.get(htype).substitute:
            same = sorted(
                n for n in self.corpus.tasks if n != task.name and self.corpus.tasks[n].domain == task.domain
            )
            others = same or sorted(n for n in self.corpus.tasks if n != task.name)
            sub = others[seed % len(others)]
            d.substitute = self.corpus.task(sub)
        trace = list(sim.trace)
        happy = list(m.happy_trace)
        last = max((j for j, n in enumerate(happy) if n in trace), default=-1)
        ref_trace = trace + happy[last + 1 :]
        d.reference = SimpleNamespace(scratch={"sim": SimpleNamespace(trace=ref_trace)}, turns=[])
        d.fork = ForkSpec(htype=htype, k=1, turn=t, variant=variant, instruction="", substitute_task=sub)
        d.injected = True


def example_arguments(tool: Mapping[str, Any]) -> dict[str, Any]:
    """The ``tools`` fake's valid call: every required parameter set to the first value its JSON
    Schema allows.

    Args:
        tool: A tool's OpenAI schema (``{"function": {"parameters": ...}}``).

    Returns:
        Required parameter -> value: the first ``enum`` value, else the integer ``minimum`` (1
        without one), True, a one-item list, or ``"Alex Smith"`` for anything else.
    """
    params = tool["function"]["parameters"]
    out: dict[str, Any] = {}
    for name in params.get("required", []):
        p = params["properties"][name]
        if "enum" in p:
            out[name] = p["enum"][0]
        elif p.get("type") == "integer":
            out[name] = p.get("minimum", 1)
        elif p.get("type") == "boolean":
            out[name] = True
        elif p.get("type") == "array":
            out[name] = list(p.get("items", {}).get("enum", ["x"]))[:1]
        else:
            out[name] = "Alex Smith"
    return out


def tool_reply(body: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ``tools`` fake's assistant message, or None to reply as the faithful agent.

    Args:
        body: The chat request (``messages``, optional ``tools``).

    Returns:
        After tool results: ``Results: <content> | <content>``; when tools are offered and none
        was called yet: two tool calls (a valid one and one whose arguments are not JSON);
        otherwise None.

    Raises:
        ValueError: The tool results do not follow an assistant message with the same call ids.
    """
    msgs = body["messages"]
    if msgs and msgs[-1].get("role") == "tool":
        k = len(msgs) - 1
        while msgs[k - 1].get("role") == "tool":
            k -= 1
        call_msg = msgs[k - 1]
        ids = [c["id"] for c in call_msg.get("tool_calls") or []]
        got = [m.get("tool_call_id") for m in msgs[k:]]
        if call_msg.get("role") != "assistant" or got != ids:
            raise ValueError(f"tool results {got} do not answer the tool calls {ids}")
        return {"role": "assistant", "content": "Results: " + " | ".join(m["content"] for m in msgs[k:])}
    tools = body.get("tools") or []
    if tools and not any(m.get("role") == "tool" for m in msgs):
        name = tools[0]["function"]["name"]
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_ok",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(example_arguments(tools[0]))},
                },
                {"id": "call_bad", "type": "function", "function": {"name": name, "arguments": "{not json"}},
            ],
        }
    return None


def scripted_user(messages: Sequence[Mapping[str, str]]) -> str:
    """The ``user`` fake's turn: the agent's turns arrive as ``user`` messages, its own as ``assistant``.

    Args:
        messages: The chat request's messages.

    Returns:
        ``"Hello."`` first; a goodbye with ``[END]`` after five own turns or when the agent's last
        turn says bye; else ``"Yes, that's right."`` after a question and ``"OK, thank you."``.
    """
    own = sum(m.get("role") == "assistant" for m in messages)
    last = next((m["content"] for m in reversed(messages) if m.get("role") == "user"), "")
    if own == 0:
        return "Hello."
    if own >= 5 or "bye" in last.lower():
        return "Thanks, that's all. Goodbye! [END]"
    return "Yes, that's right." if last.rstrip().endswith("?") else "OK, thank you."


def _key(text: str) -> str:
    return re.sub(r"\s+", " ", text.strip().lower())


def completion(text: str, model: str) -> dict[str, Any]:
    """A minimal OpenAI chat completion with ``text`` as the assistant's message.

    Args:
        text: The reply.
        model: The model name reported.

    Returns:
        The completion object (``finish_reason`` ``"stop"``; usage counts words).
    """
    return {
        "id": "fake",
        "object": "chat.completion",
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 0, "completion_tokens": len(text.split())},
    }


def make_handler(kind: str, model: str, policy: AgentPolicy | None):
    """The HTTP request handler class of a fake agent.

    ``GET .../models`` lists ``model``; ``POST`` answers a chat completion by ``kind`` (an HTML page
    for ``garbage``, empty content for ``empty``, the scripted user, tool calls, or ``policy``'s
    reply), 400 for a request it cannot read.

    Args:
        kind: One of :data:`KINDS`.
        model: The model name served.
        policy: The agent policy of ``faithful``, ``derailed`` and ``tools``; None for the others.

    Returns:
        A ``BaseHTTPRequestHandler`` subclass for ``ThreadingHTTPServer``.
    """

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path.rstrip("/").endswith("/models"):
                self._send(200, json.dumps({"object": "list", "data": [{"id": model}]}).encode())
            else:
                self._send(404, b'{"error": {"message": "not found"}}')

        def do_POST(self):
            n = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(n)
            if kind == "garbage":
                self._send(200, b"<html><body>It works!</body></html>", "text/html")
                return
            try:
                body = json.loads(raw)
                if kind == "empty":
                    text = ""
                elif kind == "user":
                    text = scripted_user(body["messages"])
                elif kind == "tools" and (msg := tool_reply(body)) is not None:
                    out = completion(msg["content"] or "", body.get("model", model))
                    out["choices"][0]["message"] = msg
                    out["choices"][0]["finish_reason"] = "tool_calls" if msg.get("tool_calls") else "stop"
                    self._send(200, json.dumps(out).encode())
                    return
                else:
                    text = policy.reply(body["messages"])
            except (ValueError, KeyError, TypeError) as e:
                self._send(400, json.dumps({"error": {"message": f"fake agent: {e}"}}).encode())
                return
            self._send(200, json.dumps(completion(text, body.get("model", model))).encode())

    return Handler


def _policy(
    kind: str, source: str | None, derail_at: int, htypes: Sequence[str], variants: str | os.PathLike | None
) -> AgentPolicy | None:
    """The policy behind a fake of ``kind`` (None for the kinds that need none)."""
    if kind not in ("faithful", "derailed", "tools"):
        return None
    from dialfork_dataset.sources import open_source

    return AgentPolicy(
        open_source(source), "faithful" if kind == "tools" else kind, derail_at, htypes, variants
    )


@dataclass
class FakeAgent:
    """A running fake agent (yielded by :func:`serve_fake_agent`).

    Attributes:
        url: API root, ``http://127.0.0.1:PORT/v1``.
        model: The model name it serves.
        pid: The child process's PID (this process's when served in process).
        kind: One of :data:`KINDS`.
    """

    url: str
    """API root, ``http://127.0.0.1:PORT/v1``."""
    model: str
    pid: int
    kind: str


@contextlib.contextmanager
def serve_fake_agent(
    kind: str = "faithful",
    star: str | os.PathLike | None = None,
    model: str | None = None,
    derail_at: int = DEFAULT_DERAIL_AT,
    htypes: Sequence[str] = DEFAULT_HTYPES,
    timeout: float = 120.0,
    source: str | None = None,
    variants: str | os.PathLike | None = None,
    in_process: bool = False,
) -> Iterator[FakeAgent]:
    """Run a fake agent in a child process on 127.0.0.1 (port 0) and stop it by its PID on exit.
    ``source``: a workflow source spec (``workflow:PATH``) instead of the STAR copy ``star``.
    ``in_process``: serve from a thread of this process instead, so that what was registered at
    run time here (a hallucination type, a source kind) is seen by the fake.

    Args:
        kind: One of ``faithful``, ``derailed``, ``garbage``, ``empty``, ``user``, ``tools`` (see
            the module doc).
        star: A STAR copy; None: ``$DIALFORK_STAR_DIR`` (read by the child process).
        model: The model name the fake serves; None: ``fake-<kind>``.
        derail_at: System turn (1-based) at which the ``derailed`` fake leaves its workflow.
        htypes: Hallucination types of the ``derailed`` fake, chosen per conversation by its seed.
        timeout: Seconds to wait for the child to exit after SIGTERM before it is killed.
        source: A workflow source spec (``star:PATH`` or ``workflow:PATH``) used instead of ``star``.
        variants: The variant file the ``derailed`` fake draws from (None: the packaged one).
        in_process: Serve from a daemon thread of this process (stopped on exit) rather than a
            child process.

    Yields:
        A :class:`FakeAgent` with the API root ``http://127.0.0.1:PORT/v1``, the model name, the
        child's PID (this process's with ``in_process``) and the kind.

    Raises:
        ValueError: ``kind`` is not a known fake agent kind.
        RuntimeError: The child process did not start (it printed no listening port).
    """
    if kind not in KINDS:
        raise ValueError(f"unknown fake agent kind {kind!r}; known: {', '.join(KINDS)}")
    model = model or f"fake-{kind}"
    if in_process:
        import threading

        srv = ThreadingHTTPServer(
            ("127.0.0.1", 0),
            make_handler(
                kind,
                model,
                _policy(
                    kind,
                    source if source is not None else (os.fspath(star) if star is not None else None),
                    derail_at,
                    htypes,
                    variants,
                ),
            ),
        )
        thread = threading.Thread(target=srv.serve_forever, name=f"fake-{kind}", daemon=True)
        thread.start()
        try:
            yield FakeAgent(f"http://127.0.0.1:{srv.server_address[1]}/v1", model, os.getpid(), kind)
        finally:
            srv.shutdown()
            srv.server_close()
            thread.join(timeout)
        return
    cmd = [
        sys.executable,
        "-m",
        "dialfork_metrics.audit.fakes",
        "--kind",
        kind,
        "--model",
        model,
        "--derail-at",
        str(derail_at),
        "--htypes",
        ",".join(htypes),
    ]
    if star is not None:
        cmd += ["--star", os.fspath(star)]
    if source is not None:
        cmd += ["--source", os.fspath(source)]
    if variants is not None:
        cmd += ["--variants", os.fspath(variants)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        m = re.match(r"listening on (\d+)", line or "")
        if not m:
            raise RuntimeError(f"fake agent {kind!r} did not start (exit code {proc.poll()}): {line!r}")
        yield FakeAgent(f"http://127.0.0.1:{m.group(1)}/v1", model, proc.pid, kind)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        if proc.stdout:
            proc.stdout.close()


def main(argv: list[str] | None = None) -> int:
    """Serve one fake agent until SIGTERM or Ctrl-C (``python -m dialfork_metrics.audit.fakes``).

    Prints ``listening on PORT`` once bound (``--port 0``: a free port), which
    :func:`serve_fake_agent` reads.

    Args:
        argv: The arguments (``--kind``, ``--model``, ``--star``, ``--source``, ``--port``,
            ``--derail-at``, ``--htypes``, ``--variants``); None reads ``sys.argv``. An
            ``--htypes`` value that names no registered type exits with status 2 (argparse).

    Returns:
        0 once the server stops.
    """
    from dialfork_dataset.console import plain_text

    ap = argparse.ArgumentParser(
        prog="python -m dialfork_metrics.audit.fakes", description=plain_text(__doc__.split("\n\n")[0])
    )
    ap.add_argument("--kind", choices=KINDS, default="faithful")
    ap.add_argument("--model", default=None)
    ap.add_argument("--star", default=None, help="STAR copy (default $DIALFORK_STAR_DIR)")
    ap.add_argument(
        "--source",
        default=None,
        help="workflow source (star:PATH or workflow:PATH) instead of --star; KIND:PATH for any kind of dialfork_dataset.sources.SOURCE_KINDS",
    )
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--derail-at", type=int, default=DEFAULT_DERAIL_AT)
    ap.add_argument(
        "--htypes", default=",".join(DEFAULT_HTYPES), help="derailed: hallucination types, cycled by seed"
    )
    ap.add_argument("--variants", default=None, help="derailed: the variant file (default: the packaged one)")
    a = ap.parse_args(argv)
    htypes = [h.strip() for h in a.htypes.split(",") if h.strip()]
    bad = [h for h in htypes if not is_type(h)]
    if bad or not htypes:
        ap.error(f"--htypes: unknown hallucination type(s) {bad}; use {', '.join(taxonomy.names())}")
    policy = _policy(a.kind, a.source or a.star, a.derail_at, htypes, a.variants)
    srv = ThreadingHTTPServer(
        ("127.0.0.1", a.port), make_handler(a.kind, a.model or f"fake-{a.kind}", policy)
    )
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    print(f"listening on {srv.server_address[1]}", flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
