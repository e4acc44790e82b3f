"""Chat LLMs behind an OpenAI-compatible server (vLLM, ollama, llama.cpp, TGI, the OpenAI API).

Each engine step sends all its requests concurrently through the shared
:class:`generation.llm.client.OpenAICompatClient` (retries with exponential backoff on
429/5xx/timeouts/garbage replies, timeouts, clear :class:`EndpointError` otherwise). Every request
carries its own ``seed``, :func:`request_seed` of (dialogue seed, turn index, role), so a seeded server
(vLLM, ollama, llama.cpp) gives a dialogue the same text whatever else is in flight; how exact that
is depends on the server (vLLM's batch-invariant mode, for instance). ``replay`` forks record the
prefix turns that came out differently in ``prefix_divergence``.

``top_k`` is not part of the OpenAI API; vLLM, ollama and llama.cpp accept it in the request body.
Pass ``top_k=0`` for servers that reject it (the OpenAI API does, with HTTP 400).

KB tools (``--kb-tools``, :meth:`OpenAIBackend.bind_tools`): the system agent is offered its task's
knowledge-base tool (:mod:`generation.kb_tools`) and each system turn is a tool loop
(:func:`generation.kb_tools.run_tool_loop`): the model's calls run against the run's workflow source
and the ``role: tool`` answers go back to it until it answers with text, which is the turn. The tool
traffic stays in the system agent's own context (kept per dialogue in ``Dialogue.scratch``, put
back before the system turn it led to in every later request); it is never a turn of the record,
and the user agent never sees it. A ``reuse`` fork inherits its parent's traffic for the copied
prefix. The executor is deterministic (same call, same rows; seeded by the dialogue seed, so a
``replay`` fork gets its parent's rows for the same calls).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import GenerationError
from ..llm.client import EndpointError, validate_messages
from ..llm.messages import merge_system_messages
from ..llm.sampling import request_salt, turn_sampling_seed
from .base import TurnRequest, decoding_errors

logger = logging.getLogger(__name__)


class BackendEndpointError(GenerationError, EndpointError):
    """An :class:`EndpointError` of the server behind :class:`OpenAIBackend`, also a
    :class:`~generation.engine.GenerationError` so that the generation CLI reports it in one line.

    Args:
        err: the client's error; its message, ``status`` and ``index`` are kept.
    """

    def __init__(self, err: EndpointError):
        GenerationError.__init__(self, str(err))
        self.status, self.index = err.status, err.index


def request_seed(seed: int, turn_index: int, role: str, salt: str = "") -> int:
    """The ``seed`` sent to the server for one turn: :func:`turn_sampling_seed` reduced to 31 bits
    (some servers store seeds as signed 32-bit integers).

    Args:
        seed: the dialogue's seed.
        turn_index: the 0-based position of the turn in the dialogue.
        role: the speaking agent, ``"system"`` or ``"user"``.
        salt: a reworded prefix turn's salt (:func:`~generation.llm.sampling.request_salt`), else "".

    Returns:
        An integer in ``[0, 2**31)``.
    """
    return turn_sampling_seed(seed, turn_index, role, salt) % (2**31)


class OpenAIBackend:
    """Generate turns with a model served by an OpenAI-compatible server.

    Args:
        model: the served model name.
        base_url: API root, ``http://HOST:PORT/v1`` (default ``http://127.0.0.1:8000/v1``, a local
            vLLM).
        api_key: bearer token (``None``, the default: ``$OPENAI_API_KEY``; local servers need none).
        temperature: sampling temperature, >= 0 (SPEC section 3 default 1.3).
        top_p: nucleus mass in (0, 1] (default 0.95).
        top_k: top-k cut-off, integer >= 0 (default 64); 0 leaves it out of the request (for servers
            that reject it, such as the OpenAI API).
        max_new_tokens: the most tokens per turn, integer >= 1 (default 256), sent as
            ``max_tokens``.
        stop: stop strings sent to the server (the server cuts the text before them); default none.
        timeout: per-request timeout in seconds (default 120).
        max_retries: retries per request on transient failures (default 4).
        concurrency: requests in flight at once (default 16).
        backoff: base wait in seconds before the first retry, doubled at each retry (default 1.0;
            :class:`~generation.llm.client.OpenAICompatClient`).
        system_role: ``"native"`` (default: send system messages as they are) or ``"merge"`` (fold
            them into user messages with :func:`generation.llm.messages.merge_system_messages`, for
            served models whose chat template has no system role).
        check_model: ask ``GET /models`` at construction (default ``True``), so an unreachable
            server or an unknown model fails before any output is written.
        extra_body: more fields sent with every request (e.g. ``{"repetition_penalty": 1.0}`` for
            vLLM); default none.
        name: recorded as the records' ``generator`` (``None``, the default: ``model``).

    Raises:
        ValueError: a decoding parameter, ``system_role`` or a client setting (``base_url``,
            ``timeout``, ``max_retries``, ``concurrency``, ``backoff``) is invalid.
        BackendEndpointError: with ``check_model``, the server cannot be reached or does not serve
            ``model``.
        ImportError: the ``openai`` package is not installed.
    """

    uses_messages = True
    rewords = True
    """``reword`` prefix mode: a reworded prefix turn is sent with another seed."""

    def __init__(
        self,
        model: str,
        base_url: str = "http://127.0.0.1:8000/v1",
        *,
        api_key: str | None = None,
        temperature: float = 1.3,
        top_p: float = 0.95,
        top_k: int = 64,
        max_new_tokens: int = 256,
        stop: Sequence[str] = (),
        timeout: float = 120.0,
        max_retries: int = 4,
        concurrency: int = 16,
        backoff: float = 1.0,
        system_role: str = "native",
        check_model: bool = True,
        extra_body: Mapping[str, Any] | None = None,
        name: str | None = None,
    ):
        from ..llm.client import OpenAICompatClient

        errs: list[str] = []
        errs += decoding_errors(temperature, top_p, top_k, max_new_tokens, stop)
        if system_role not in ("native", "merge"):
            errs.append(f"system_role must be 'native' or 'merge', got {system_role!r}")
        if errs:
            raise ValueError("OpenAIBackend: " + "; ".join(errs))
        self.client = OpenAICompatClient(
            base_url,
            model,
            api_key=api_key,
            timeout=timeout,
            max_retries=max_retries,
            concurrency=concurrency,
            backoff=backoff,
        )
        self.model = model
        self.name = name or model
        self.temperature = float(temperature)
        self.top_p = float(top_p)
        self.top_k = int(top_k)
        self.max_new_tokens = int(max_new_tokens)
        self.stop = tuple(stop)
        self.system_role = system_role
        self.extra_body = dict(extra_body or {})
        self.stats = {"requests": 0, "prompt_tokens": 0, "new_tokens": 0, "length_cut": 0}
        self.kb_executor: Any = None
        self._stats_lock = threading.Lock()
        if check_model:
            try:
                self.client.check_model()
            except EndpointError as e:
                raise BackendEndpointError(e) from None

    def decoding(self) -> dict[str, Any]:
        """The record's ``decoding`` fields (SPEC section 4).

        Returns:
            ``{"temperature", "top_p", "top_k", "max_new_tokens"}`` with this backend's values.
        """
        return {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "max_new_tokens": self.max_new_tokens,
        }

    def describe(self) -> dict[str, Any]:
        """Everything that determines the text, for a run manifest.

        Returns:
            :meth:`decoding` plus ``backend``, ``model``, ``base_url``, ``stop``, ``system_role``,
                ``extra_body``, how the request ``seed`` is made, and ``kb_tools: True`` when tools are
                bound.
        """
        return {
            **self.decoding(),
            "backend": "openai",
            "model": self.model,
            "base_url": self.client.base_url,
            "stop": list(self.stop),
            "system_role": self.system_role,
            "extra_body": self.extra_body,
            "seed": "request_seed(seed, turn_index, role)",
            **({"kb_tools": True} if self.kb_executor is not None else {}),
        }

    def bind_tools(self, executor: Any) -> None:
        """Offer the system agent its task's KB tools, run by ``executor`` (a
        :class:`generation.kb_tools.KBExecutor`; ``None`` turns them off again).

        Args:
            executor: the executor of the run's KB tools, or ``None``.
        """
        self.kb_executor = executor
        self.stats.setdefault("tool_calls", 0)
        self.stats.setdefault("tool_errors", 0)

    def sampling(self) -> dict[str, Any]:
        """The sampling fields sent with every request.

        Returns:
            ``temperature``, ``top_p``, ``max_tokens``, ``top_k`` when > 0, ``stop`` when given, then
                :attr:`extra_body` (which overrides any of them).
        """
        s: dict[str, Any] = {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_new_tokens,
        }
        if self.top_k > 0:
            s["top_k"] = self.top_k
        if self.stop:
            s["stop"] = list(self.stop)
        s.update(self.extra_body)
        return s

    def messages_for(self, request: TurnRequest) -> list[dict[str, str]]:
        """The chat messages sent for ``request``.

        Args:
            request: the turn request.

        Returns:
            Its messages reduced to ``role`` and ``content``, system messages merged into user ones
                when :attr:`system_role` is ``"merge"``.
        """
        msgs = [{"role": m["role"], "content": m["content"]} for m in request.messages]
        return merge_system_messages(msgs) if self.system_role == "merge" else msgs

    def generate(self, requests: Sequence[TurnRequest]) -> list[str]:
        """One utterance per request, in order, all requests in flight concurrently.

        Each request carries :func:`request_seed`; with bound KB tools, a system turn of a task
        with a tool runs the tool loop. Writes ``extra["finish_reason"]``, ``extra["attempts"]``
        and ``extra["usage"]`` (and ``extra["tool_calls"]``) into each request.

        Args:
            requests: the batch of :class:`TurnRequest`.

        Returns:
            The reply texts, stripped, in request order; empty for an empty batch.

        Raises:
            ValueError: an item is not a :class:`TurnRequest`, or a conversation is malformed
                (the dialogue keys of the batch are named).
            BackendEndpointError: a request cannot be completed (the dialogue and turn are
                named).
        """
        requests = list(requests)
        bad = [
            f"request {i}: expected a TurnRequest, got {type(r).__name__}"
            for i, r in enumerate(requests)
            if not isinstance(r, TurnRequest)
        ]
        if bad:
            raise ValueError("OpenAIBackend.generate: " + "; ".join(bad))
        if not requests:
            return []
        if self.kb_executor is not None and any(_tool_task(r) for r in requests):
            return self._generate_with_tools(requests)
        batch = [self.messages_for(r) for r in requests]
        seeds = [request_seed(r.seed, r.turn_index, r.role, request_salt(r)) for r in requests]
        try:
            replies = self.client.chat_full(batch, seeds, **self.sampling())
        except EndpointError as e:
            if e.index is not None:
                r = requests[e.index]
                e = EndpointError(
                    f"{e} [dialogue {r.dialogue_key!r}, turn {r.turn_index}]", e.status, e.index
                )
            raise BackendEndpointError(e) from None
        except ValueError as e:
            keys = ", ".join(f"{i}={r.dialogue_key}" for i, r in enumerate(requests[:10]))
            raise ValueError(f"{e} (requests: {keys})") from None
        out = []
        for r, rep in zip(requests, replies):
            self._count(r, rep)
            out.append(rep.text.strip())
        return out

    def _count(self, r: TurnRequest, rep: Any) -> None:
        r.extra["finish_reason"] = rep.finish_reason
        r.extra["attempts"] = rep.attempts
        r.extra["usage"] = rep.usage
        with self._stats_lock:
            self.stats["requests"] += 1
            self.stats["prompt_tokens"] += int(rep.usage.get("prompt_tokens") or 0)
            self.stats["new_tokens"] += int(rep.usage.get("completion_tokens") or 0)
            if rep.finish_reason == "length":
                self.stats["length_cut"] += 1
                logger.debug(
                    "dialogue %s turn %d: reply cut at max_tokens=%d",
                    r.dialogue_key,
                    r.turn_index,
                    self.max_new_tokens,
                )

    # -- KB tools ------------------------------------------------------------------------------------
    def _tool_turn(self, index: int, r: TurnRequest, cancel: threading.Event) -> str:
        """One request: a system turn of a task with a KB tool runs the tool loop, any other is one request."""
        from ..kb_tools import run_tool_loop

        seed = request_seed(r.seed, r.turn_index, r.role, request_salt(r))
        sampling = self.sampling()
        task = _tool_task(r)
        if task is None or not self.kb_executor.tools(task):
            rep = self.client.chat_one(self.messages_for(r), seed, index, cancel, **sampling)
            self._count(r, rep)
            return rep.text.strip()
        d = r.state
        traffic = _tool_traffic(d)
        ordinal = sum(1 for m in r.messages if m["role"] == "assistant")  # this turn's system-turn index
        engine_msgs = [{"role": m["role"], "content": m["content"]} for m in r.messages]
        own: list[dict[str, Any]] = []  # this turn's tool traffic (run_tool_loop appends to it)

        def complete(new: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
            msgs = _with_traffic(engine_msgs, traffic) + new
            if self.system_role == "merge":
                msgs = merge_system_messages(msgs)
            rep = self.client.chat_one(
                msgs, seed, index, cancel, **sampling, **({"tools": tools} if tools else {})
            )
            self._count(r, rep)  # every request of the loop (r.extra ends with the last one's)
            out: dict[str, Any] = {"role": "assistant", "content": rep.text}
            if rep.tool_calls:
                out["tool_calls"] = [dict(c) for c in rep.tool_calls]
            return out

        msg, results = run_tool_loop(
            complete,
            own,
            self.kb_executor,
            task,
            happy=bool(getattr(d.scenario, "happy", True)),
            seed=int(r.seed),
        )
        traffic[ordinal] = own
        with self._stats_lock:
            self.stats["tool_calls"] += len(results)
            self.stats["tool_errors"] += sum(not x.ok for x in results)
        r.extra["tool_calls"] = [x.to_dict() for x in results]
        text = msg.get("content")
        return text.strip() if isinstance(text, str) else ""

    def _generate_with_tools(self, requests: list[TurnRequest]) -> list[str]:
        from concurrent.futures import ThreadPoolExecutor

        problems = [
            p
            for i, r in enumerate(requests)
            for p in validate_messages(self.messages_for(r), f"conversation {i}")
        ]
        if problems:
            keys = ", ".join(f"{i}={r.dialogue_key}" for i, r in enumerate(requests[:10]))
            raise ValueError("invalid chat batch: " + "; ".join(problems) + f" (requests: {keys})")
        cancel = threading.Event()
        try:
            with ThreadPoolExecutor(
                max_workers=max(1, min(self.client.concurrency, len(requests))),
                thread_name_prefix="chat-tools",
            ) as pool:
                futures = [pool.submit(self._tool_turn, i, r, cancel) for i, r in enumerate(requests)]
                try:
                    return [f.result() for f in futures]
                except BaseException:
                    cancel.set()
                    for f in futures:
                        f.cancel()
                    raise
        except EndpointError as e:
            if e.index is not None:
                r = requests[e.index]
                e = EndpointError(
                    f"{e} [dialogue {r.dialogue_key!r}, turn {r.turn_index}]", e.status, e.index
                )
            raise BackendEndpointError(e) from None

    def __repr__(self) -> str:
        return f"OpenAIBackend({self.model!r} at {self.client.base_url!r})"


_TRAFFIC = "kb_tool_traffic"


def _tool_task(r: TurnRequest) -> str | None:
    """The task whose KB tool a request's agent is offered: system turns of a dialogue only."""
    if r.role != "system" or r.state is None:
        return None
    task = getattr(r.state, "task", None)
    return getattr(task, "name", None)


def _tool_traffic(d: Any) -> dict[int, list[dict[str, Any]]]:
    """A dialogue's tool traffic: system-turn index (0-based) -> the messages that led to that turn.
    A fork whose prefix was copied from its parent (``reuse``, or a replay that fell back to it)
    starts with the parent's traffic for the copied system turns."""
    traffic = d.scratch.get(_TRAFFIC)
    if traffic is None:
        traffic = {}
        ref = getattr(d, "reference", None)
        if getattr(d, "prefix_len", 0) and ref is not None:
            copied = sum(1 for t in d.turns[: d.prefix_len] if t["speaker"] == "system")
            traffic = {j: list(v) for j, v in ref.scratch.get(_TRAFFIC, {}).items() if j < copied}
        d.scratch[_TRAFFIC] = traffic
    return traffic


def _with_traffic(
    messages: list[dict[str, Any]], traffic: Mapping[int, list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    """``messages`` (the engine's context) with each earlier system turn's tool traffic put back
    just before that turn (the ``j``-th ``assistant`` message)."""
    if not traffic:
        return list(messages)
    out: list[dict[str, Any]] = []
    j = 0
    for m in messages:
        if m["role"] == "assistant":
            out.extend(traffic.get(j, ()))
            j += 1
        out.append(m)
    return out


__all__ = ["BackendEndpointError", "OpenAIBackend", "request_seed"]
