"""Chat completions against OpenAI-compatible servers (vLLM, ollama, llama.cpp, TGI, the OpenAI
API), built on the official ``openai`` package (3.x; install ``dialfork[llm]``).

Shared by the generator (:mod:`generation.backends.openai_backend`), the LLM zero-shot detector
(:mod:`dialfork_metrics.task3.llm.detector`), the LLM judge and the audit (``dialfork_metrics`` may import
``generation``; ``generation`` never imports ``dialfork_metrics``).

What the ``openai`` package does here
-------------------------------------
* HTTP: one connection pool shared by the worker threads, the bearer key, ``timeout`` per request;
* retries: connection errors, timeouts, HTTP 408/409/429/5xx (and a server's ``x-should-retry``),
  ``max_retries`` of them, with ``Retry-After`` honoured;
* the request body: ``seed`` and the other chat-completion parameters by name, everything a server
  adds to the API (``top_k``, ``repetition_penalty``, ...) through ``extra_body``;
* typed errors (``APIStatusError`` with the status and body, ``APIConnectionError``,
  ``APITimeoutError``) and ``GET /models``.

What still needs own code, and why
----------------------------------
* **Batches.** :meth:`OpenAICompatClient.chat` sends a batch of conversations concurrently (a pool
  of ``concurrency`` threads) and returns the replies in order; when one conversation fails for
  good, the others stop retrying (a request hook refuses their next attempt).
* **Validation before any request**, every problem of the batch at once (:func:`validate_messages`),
  including tool-calling messages (``content: null`` with ``tool_calls``, ``role: tool`` results).
* **Garbage replies.** An HTTP 200 that is not a usable chat completion (not JSON, no ``choices``,
  ``content: null`` without tool calls) is retried within the same ``max_retries`` budget; the
  package parses leniently and would hand it back (:func:`parse_chat_completion` decides).
* **Deterministic waits** ``min(max_backoff, backoff * 2**k)`` without jitter, so that ``backoff=``
  keeps its meaning (the package's delays are module constants with jitter): the one override of the
  package is its retry-delay hook, ``_calculate_retry_timeout``.
* **Error messages** that name the server, the conversation of the batch and what to do (unknown
  model, refused key, wrong ``base_url``): :class:`EndpointError`.
* **Servers without a key** (vLLM, ollama): no ``Authorization`` header is sent (the package
  insists on a key; the header is omitted per request).
* **Counts**: ``stats`` (requests, retries) and :attr:`ChatReply.attempts`, from a request hook.

The wire format (message validation, reply parsing, :class:`ChatReply`, :class:`EndpointError`)
is in :mod:`generation.llm.chat_format`, re-exported here.

Not here: streaming (replies are requested with ``stream=False``; no SSE handling is needed) and
caching (the judge keeps its own resumable cache, :mod:`dialfork_metrics.judge`).
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import os
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .chat_format import (
    ChatReply,
    EndpointError,
    error_message,
    parse_chat_completion,
    parse_retry_after,
    root_cause,
    validate_messages,
)

logger = logging.getLogger(__name__)

RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})
"""HTTP statuses the package retries (with every other 5xx); every other 4xx fails at once."""

INSTALL_HINT = "pip install 'dialfork[llm]' (or: pip install 'openai>=3,<4')"


class _Garbage(Exception):
    """Internal: an HTTP 200 whose body is not a usable chat completion (retried)."""


class _Cancelled(Exception):
    """Internal: another conversation of the batch failed for good; stop retrying this one."""


# -- the package, with the project's retry waits -------------------------------------------------
class _CallState(threading.local):
    """Per thread: the call in flight (its client, attempts so far, the batch's cancel event)."""

    owner: OpenAICompatClient | None = None
    attempts: int = 0
    cancel: threading.Event | None = None


_call = _CallState()


@functools.lru_cache(maxsize=1)
def _openai_class() -> type:
    try:
        import openai
    except ImportError:
        raise ImportError(f"the OpenAI-compatible client needs the openai package: {INSTALL_HINT}") from None

    class DialforkOpenAI(openai.OpenAI):
        """``openai.OpenAI`` whose waits between retries are :meth:`OpenAICompatClient.retry_wait`."""

        def _calculate_retry_timeout(self, remaining_retries, options, response_headers=None):  # noqa: ANN001
            owner = _call.owner
            if owner is None:
                return super()._calculate_retry_timeout(remaining_retries, options, response_headers)
            retry_after = parse_retry_after(response_headers.get("retry-after") if response_headers else None)
            return owner.retry_wait(_call.attempts, retry_after)

    return DialforkOpenAI


@functools.lru_cache(maxsize=1)
def _create_params() -> frozenset[str]:
    """The parameters ``chat.completions.create`` takes by name; others go into ``extra_body``."""
    from openai.resources.chat.completions import Completions

    return frozenset(inspect.signature(Completions.create).parameters) - {"self"}


class OpenAICompatClient:
    """Concurrent chat completions against one model of an OpenAI-compatible server.

    ``openai`` is the underlying ``openai.OpenAI`` client, for calls this class does not wrap.

    Args:
        base_url: API root, e.g. ``http://127.0.0.1:8000/v1`` (vLLM) or
            ``http://127.0.0.1:11434/v1`` (ollama); must start with ``http://`` or ``https://``
            (a trailing ``/`` is dropped).
        model: the served model name, sent as ``model`` in every request (non-empty).
        api_key: bearer token; ``None`` (default) reads ``$OPENAI_API_KEY`` and sends no
            ``Authorization`` header when that is unset or empty.
        timeout: timeout of one HTTP request, in seconds, > 0 (default 60; a server silent that
            long is retried).
        max_retries: retries after the first attempt, per conversation, on transient failures
            (integer >= 0, default 4).
        concurrency: conversations in flight at once (integer >= 1, default 8).
        backoff: base wait in seconds (>= 0, default 0.5): ``min(max_backoff, backoff * 2**attempt)``
            seconds before retry ``attempt + 1``.
        max_backoff: the longest wait between retries, in seconds (>= 0, default 30); a
            ``Retry-After`` header lengthens a wait up to it.
        option_names: the command-line flags that set ``base_url`` and ``model``, e.g.
            ``{"base_url": "--agent", "model": "--model"}``, for a CLI's error hints (default None:
            the hints name this class's arguments and Python calls).

    Raises:
        ValueError: an argument is out of range (every problem is listed).
        ImportError: the ``openai`` package is not installed (``pip install 'dialfork[llm]'``).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 4,
        concurrency: int = 8,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
        option_names: Mapping[str, str] | None = None,
    ):
        errors = []
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            errors.append(f"base_url must start with http:// or https://, got {base_url!r}")
        if not isinstance(model, str) or not model.strip():
            errors.append(f"model must be a non-empty string, got {model!r}")
        if not (isinstance(timeout, (int, float)) and timeout > 0):
            errors.append(f"timeout must be > 0 seconds, got {timeout!r}")
        if not (isinstance(max_retries, int) and max_retries >= 0):
            errors.append(f"max_retries must be an integer >= 0, got {max_retries!r}")
        if not (isinstance(concurrency, int) and concurrency >= 1):
            errors.append(f"concurrency must be an integer >= 1, got {concurrency!r}")
        if not (isinstance(backoff, (int, float)) and backoff >= 0):
            errors.append(f"backoff must be >= 0, got {backoff!r}")
        if not (isinstance(max_backoff, (int, float)) and max_backoff >= 0):
            errors.append(f"max_backoff must be >= 0, got {max_backoff!r}")
        if errors:
            raise ValueError("OpenAICompatClient: " + "; ".join(errors))
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY") or None
        self.timeout = float(timeout)
        self.max_retries = max_retries
        self.concurrency = concurrency
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self.option_names = dict(option_names or {})
        self._lock = threading.Lock()
        self.stats = {"requests": 0, "retries": 0}
        """Running totals over the client's life: HTTP requests sent and retries among them."""
        import openai

        cls = _openai_class()
        http = openai.DefaultHttpxClient(timeout=self.timeout, event_hooks={"request": [self._on_request]})
        self.openai = cls(
            base_url=self.base_url,
            api_key=self.api_key or "no-key",
            timeout=self.timeout,
            max_retries=max_retries,
            http_client=http,
        )
        self._headers = {} if self.api_key else {"Authorization": openai.omit}

    def __repr__(self) -> str:
        return f"OpenAICompatClient(base_url={self.base_url!r}, model={self.model!r})"

    # -- retries -----------------------------------------------------------------------------
    def retry_wait(self, attempts: int, retry_after: float | None = None) -> float:
        """Seconds to wait after ``attempts`` failed requests of one call (0 once the batch is cancelled).

        Args:
            attempts: failed requests of the call so far (>= 1).
            retry_after: the server's ``Retry-After`` in seconds, or ``None``.

        Returns:
            ``min(max_backoff, backoff * 2**(attempts - 1))``, raised to ``retry_after`` (still
                capped at ``max_backoff``); 0.0 when another conversation of the batch failed for good.
        """
        if _call.cancel is not None and _call.cancel.is_set():
            return 0.0
        wait = min(self.max_backoff, self.backoff * 2 ** max(0, attempts - 1))
        if retry_after is not None:
            wait = min(self.max_backoff, max(wait, retry_after))
        logger.warning(
            "%s (%s): attempt %d failed; retry %d of %d in %.2f s",
            self.base_url,
            self.model,
            attempts,
            attempts,
            self.max_retries,
            wait,
        )
        return wait

    def _on_request(self, request: Any) -> None:
        """httpx request hook: runs in the calling thread before every attempt."""
        if _call.owner is self and _call.attempts and _call.cancel is not None and _call.cancel.is_set():
            raise _Cancelled
        with self._lock:
            self.stats["requests"] += 1
            if _call.owner is self and _call.attempts:
                self.stats["retries"] += 1
        if _call.owner is self:
            _call.attempts += 1

    def _run(self, fn, what: str, index: int | None = None, cancel: threading.Event | None = None):
        """``fn(package_client)`` with the package's retries, plus retries of garbage replies, in one
        budget of ``max_retries + 1`` attempts; returns ``(result, attempts)``."""
        import openai

        _call.owner, _call.attempts, _call.cancel = self, 0, cancel
        where = f" (conversation {index} of the batch)" if index is not None else ""
        last, status = "", None
        try:
            while _call.attempts <= self.max_retries:
                if _call.attempts:  # a garbage reply: wait, then spend what is left of the budget
                    if cancel is not None and cancel.is_set():
                        break
                    time.sleep(self.retry_wait(_call.attempts))
                left = self.max_retries - _call.attempts
                client = (
                    self.openai if left == self.max_retries else self.openai.with_options(max_retries=left)
                )
                try:
                    return fn(client), _call.attempts
                except _Garbage as e:
                    last, status = f"garbage reply: {e}", 200
                    logger.warning("%s%s: %s", what, where, last)
                except _Cancelled:
                    break
                except openai.APITimeoutError:
                    last, status = f"no reply from {self.base_url} within {self.timeout:g} s (timeout)", None
                    break
                except openai.APIConnectionError as e:
                    last, status = f"cannot reach {self.base_url}: {root_cause(e)}", None
                    break
                except openai.APIStatusError as e:
                    msg = error_message(e.response.content)
                    if e.status_code in RETRYABLE_STATUS or e.status_code >= 500:
                        last, status = f"HTTP {e.status_code} from {self.base_url}: {msg}", e.status_code
                        break
                    raise self._permanent_error(e.status_code, msg, index) from None
        finally:
            attempts = _call.attempts
            _call.owner, _call.attempts, _call.cancel = None, 0, None
        raise EndpointError(
            f"{what}{where} failed after {attempts} attempt(s): {last}. Is the server at "
            f"{self.base_url} running and serving {self.model!r}? (raise max_retries/timeout for a slow server)",
            status=status,
            index=index,
        )

    def _permanent_error(self, status: int, msg: str, index: int | None) -> EndpointError:
        where = f" (conversation {index} of the batch)" if index is not None else ""
        url_opt, model_opt = self.option_names.get("base_url"), self.option_names.get("model")
        if status == 404 and url_opt:

            def flag(url: str) -> str:  # "--agent URL", "--user openai:URL"
                return f"{url_opt}{url}" if url_opt.endswith(":") else f"{url_opt} {url}"

            fix = "" if self.base_url.endswith("/v1") else f", e.g. {flag(self.base_url + '/v1')}"
            hint = (
                f"{model_opt or 'the model'} {self.model!r} is unknown to the server, or {flag(self.base_url)} "
                f"is wrong (it is usually the API root ending in /v1{fix}); list the served models with "
                f"curl {self.base_url}/models"
            )
        elif status == 404:
            hint = (
                f"model {self.model!r} is unknown to the server, or base_url {self.base_url!r} is wrong "
                "(it is usually the API root ending in /v1); list the served models with "
                "OpenAICompatClient.list_models()"
            )
        elif status in (401, 403):
            hint = "the server refused the API key: pass api_key= or set $OPENAI_API_KEY"
        elif "model" in msg.lower() and ("not found" in msg.lower() or "does not exist" in msg.lower()):
            hint = f"model {self.model!r} is unknown to the server"
        else:
            hint = "the server rejected the request (check the sampling parameters it accepts)"
        return EndpointError(
            f"{self.base_url}: HTTP {status}{where}: {msg}; {hint}", status=status, index=index
        )

    # -- API ----------------------------------------------------------------------------------
    def list_models(self) -> list[str]:
        """Ids the server lists at ``GET /models``.

        Returns:
            The ``id`` of every entry of the reply's ``data`` list, in the server's order.

        Raises:
            EndpointError: the server is unreachable, answers with an error status, or keeps
                returning a body without a ``data`` list of objects with ``id``.
        """

        def once(client) -> list[str]:
            raw = client.models.with_raw_response.list(extra_headers=self._headers)
            body = raw.http_response.content
            try:
                return [str(m["id"]) for m in json.loads(body.decode("utf-8", "replace"))["data"]]
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise _Garbage(f"GET /models returned {type(e).__name__}: {error_message(body)}") from None

        return self._run(once, f"GET {self.base_url}/models")[0]

    def check_model(self) -> None:
        """Raise :class:`EndpointError` unless the server is reachable and lists ``model``.

        Servers that do not implement ``/models`` (404) are given the benefit of the doubt.

        Raises:
            EndpointError: the server cannot be reached or fails (:meth:`list_models`), or its list
                does not hold :attr:`model` (``status`` 404, the served models named).
        """
        try:
            models = self.list_models()
        except EndpointError as e:
            if e.status == 404:
                logger.info("%s does not list models (404); skipping the model check", self.base_url)
                return
            raise
        if self.model not in models:
            raise EndpointError(
                f"{self.base_url} does not serve model {self.model!r}; it serves {models}. "
                f"Pass one of these as {self.option_names.get('model', 'the model')}.",
                status=404,
            )

    def request_body(
        self, messages: Sequence[Mapping[str, Any]], seed: int | None = None, **sampling: Any
    ) -> dict[str, Any]:
        """The JSON body sent for one conversation (``None``-valued sampling options are dropped).

        Args:
            messages: the conversation (not validated here).
            seed: the request's ``seed`` (sent as an ``int``); ``None`` (default) sends none.
            **sampling: other request fields (``temperature``, ``top_p``, ``max_tokens``, ``stop``,
                ``tools``, server extensions such as ``top_k``).

        Returns:
            ``{"model", "messages", ["seed"], **sampling, "stream": False}``.
        """
        body: dict[str, Any] = {"model": self.model, "messages": [dict(m) for m in messages]}
        if seed is not None:
            body["seed"] = int(seed)
        for k, v in sampling.items():
            if v is not None:
                body[k] = v
        body["stream"] = False
        return body

    def _create_kwargs(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """:meth:`request_body` as ``chat.completions.create`` arguments: the parameters it names,
        the rest (server extensions such as ``top_k``) in ``extra_body``."""
        named, extra = {}, dict(body.get("extra_body") or {})
        for k, v in body.items():
            if k == "extra_body":
                continue
            (named if k in _create_params() else extra)[k] = v
        if extra:
            named["extra_body"] = extra
        named["extra_headers"] = self._headers
        return named

    def chat_one(
        self,
        messages: Sequence[Mapping[str, Any]],
        seed: int | None = None,
        index: int | None = None,
        _cancel: threading.Event | None = None,
        **sampling: Any,
    ) -> ChatReply:
        """One conversation, with retries; see :meth:`chat_full`.

        Args:
            messages: the conversation, ``[{"role", "content"}, ...]``.
            seed: the request's ``seed``, or ``None`` (default) for none.
            index: the conversation's position in its batch, for messages (default ``None``).
            _cancel: internal: the batch's cancel event (set when another conversation failed).
            **sampling: request fields sent as is (see :meth:`chat`).

        Returns:
            The parsed reply (:class:`ChatReply`), ``attempts`` counting the HTTP requests it took.

        Raises:
            ValueError: the conversation is malformed (:func:`validate_messages`); nothing is sent.
            EndpointError: the server cannot complete it within ``max_retries`` retries, or rejects
                it for good (unknown model, refused key, bad parameters).
        """
        problems = validate_messages(messages, "conversation" if index is None else f"conversation {index}")
        if problems:
            raise ValueError("; ".join(problems))
        kwargs = self._create_kwargs(self.request_body(messages, seed, **sampling))

        def once(client) -> ChatReply:
            raw = client.chat.completions.with_raw_response.create(**kwargs)
            try:
                return parse_chat_completion(raw.http_response.content)
            except ValueError as e:
                raise _Garbage(str(e)) from None

        reply, attempts = self._run(once, f"POST {self.base_url}/chat/completions", index, _cancel)
        return ChatReply(reply.text, reply.finish_reason, reply.usage, attempts, reply.tool_calls)

    def chat_full(
        self,
        batch: Sequence[Sequence[Mapping[str, Any]]],
        seeds: Sequence[int] | None = None,
        **sampling: Any,
    ) -> list[ChatReply]:
        """Like :meth:`chat`, returning :class:`ChatReply` objects (text, finish reason, usage, tool calls).

        Args:
            batch: the conversations.
            seeds: one integer seed per conversation, or ``None`` (default) for no seeds.
            **sampling: request fields sent with every request (see :meth:`chat`).

        Returns:
            One reply (:class:`ChatReply`) per conversation, in batch order (empty for an empty batch).

        Raises:
            ValueError: a conversation is malformed, or ``seeds`` has the wrong length or a
                non-integer entry (every problem of the batch listed; nothing is sent).
            EndpointError: a conversation cannot be completed (the first failing one in batch
                order); the others stop retrying.
        """
        batch = list(batch)
        problems = [p for i, conv in enumerate(batch) for p in validate_messages(conv, f"conversation {i}")]
        if seeds is not None:
            seeds = list(seeds)
            if len(seeds) != len(batch):
                problems.append(f"seeds has {len(seeds)} entries for {len(batch)} conversations")
            problems += [
                f"seeds[{i}] = {s!r} is not an integer" for i, s in enumerate(seeds) if not isinstance(s, int)
            ]
        if problems:
            raise ValueError("invalid chat batch: " + "; ".join(problems))
        if not batch:
            return []
        seeds = seeds if seeds is not None else [None] * len(batch)
        if len(batch) == 1 or self.concurrency == 1:
            return [self.chat_one(c, s, i, **sampling) for i, (c, s) in enumerate(zip(batch, seeds))]
        cancel = threading.Event()
        with ThreadPoolExecutor(
            max_workers=min(self.concurrency, len(batch)), thread_name_prefix="chat"
        ) as pool:
            futures = [
                pool.submit(self.chat_one, c, s, i, cancel, **sampling)
                for i, (c, s) in enumerate(zip(batch, seeds))
            ]
            results: list[ChatReply] = []
            try:
                for f in futures:
                    results.append(f.result())
            except BaseException:
                cancel.set()
                for f in futures:
                    f.cancel()
                raise
        return results

    def chat(
        self,
        batch: Sequence[Sequence[Mapping[str, Any]]],
        seeds: Sequence[int] | None = None,
        **sampling: Any,
    ) -> list[str]:
        """One reply text per conversation of ``batch``, in order.

        ``seeds[i]`` is sent as conversation ``i``'s ``seed``; ``sampling`` (``temperature``,
        ``top_p``, ``max_tokens``, ``stop``, ``tools``, and server extensions such as ``top_k``)
        is sent with every request. Raises :class:`EndpointError` when a conversation cannot be
        completed (the first failing one in batch order), ``ValueError`` on a malformed batch.

        Args:
            batch: the conversations, each a list of ``{"role", "content"}`` messages.
            seeds: one integer seed per conversation, or ``None`` (default) for no seeds.
            **sampling: request fields sent with every request; ``None`` values are dropped.

        Returns:
            One reply text per conversation, in batch order.

        Raises:
            ValueError: the batch is malformed (nothing is sent).
            EndpointError: a conversation cannot be completed.
        """
        return [r.text for r in self.chat_full(batch, seeds, **sampling)]

    def close(self) -> None:
        """Close the connection pool (also done when the client is garbage-collected)."""
        self.openai.close()


__all__ = [
    "RETRYABLE_STATUS",
    "ChatReply",
    "EndpointError",
    "OpenAICompatClient",
    "parse_chat_completion",
    "validate_messages",
]
