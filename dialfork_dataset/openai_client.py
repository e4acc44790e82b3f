"""A small, dependency-free client for OpenAI-compatible chat servers (vLLM, ollama, llama.cpp,
TGI, the OpenAI API itself).

Shared by the generator (``generation.backends.openai_backend``) and the LLM zero-shot detector
(``dialfork_metrics``), which is why it lives in ``dialfork_dataset`` (the package both depend on).

* One call, :meth:`OpenAICompatClient.chat`, sends a batch of conversations concurrently (a thread
  pool of ``concurrency`` workers, standard library ``urllib`` only) and returns one reply per
  conversation, in order.
* Each conversation may carry its own ``seed`` (sent as the request's ``seed`` field, which vLLM,
  ollama and the OpenAI API honour), so a reply depends on its conversation and seed only.
* Transient failures (connection refused or reset, timeouts, HTTP 408/409/425/429/5xx, a reply
  that is not the JSON a chat completion must be) are retried with exponential backoff
  (``backoff * 2**attempt`` seconds, capped at ``max_backoff``, with a ``Retry-After`` header
  honoured up to the same cap); after ``max_retries`` retries the call raises
  :class:`EndpointError`, whose message says which server, which conversation of the batch and what
  went wrong. Permanent failures (400/401/403/404/422: a wrong key, an unknown model, a wrong
  ``base_url``) raise at once.
* ``base_url`` is the API root, as for the official client: usually ``http://HOST:PORT/v1``.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
"""HTTP statuses retried with backoff; every other 4xx/5xx status fails at once."""

_ROLES = frozenset({"system", "user", "assistant", "tool", "developer"})


class EndpointError(RuntimeError):
    """The server could not give a usable reply: unreachable, unknown model, bad key, garbage.

    ``status`` is the last HTTP status (``None`` when no HTTP reply came), ``index`` the position
    in the batch of the conversation that failed (``None`` for calls outside a batch).
    """

    def __init__(self, message: str, status: int | None = None, index: int | None = None):
        super().__init__(message)
        self.status = status
        self.index = index


class _Transient(Exception):
    """Internal: a failure worth retrying; carries the message and an optional server wait."""

    def __init__(self, message: str, status: int | None = None, retry_after: float | None = None):
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


@dataclass(frozen=True)
class ChatReply:
    """One parsed chat completion."""

    text: str
    finish_reason: str | None = None
    """``"stop"``, ``"length"`` (hit ``max_tokens``), ... as the server says."""
    usage: dict[str, Any] = field(default_factory=dict)
    attempts: int = 1
    """How many HTTP requests it took (1 = no retry)."""


def validate_messages(messages: Any, where: str = "conversation") -> list[str]:
    """Every problem of one chat conversation (a list of ``{"role", "content"}`` dicts)."""
    errors: list[str] = []
    if not isinstance(messages, Sequence) or isinstance(messages, (str, bytes)):
        return [f"{where}: expected a list of {{'role', 'content'}} messages, got {type(messages).__name__}"]
    if not messages:
        return [f"{where}: empty conversation (give at least one message)"]
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            errors.append(f"{where}, message {i}: expected a dict with 'role' and 'content', got {type(m).__name__}")
            continue
        role, content = m.get("role"), m.get("content")
        if role not in _ROLES:
            errors.append(f"{where}, message {i}: role {role!r} is not one of {sorted(_ROLES)}")
        if not isinstance(content, str):
            errors.append(f"{where}, message {i}: 'content' must be a string, got {type(content).__name__}")
    return errors


def parse_chat_completion(body: bytes | str) -> ChatReply:
    """Parse a ``/chat/completions`` response body; raise ``ValueError`` saying what is wrong."""
    if isinstance(body, bytes):
        try:
            body = body.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"reply is not UTF-8 ({e})") from None
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as e:
        raise ValueError(f"reply is not JSON ({e.msg} at char {e.pos}): {_snippet(body)}") from None
    if not isinstance(obj, dict):
        raise ValueError(f"reply is JSON {type(obj).__name__}, not an object: {_snippet(body)}")
    if "error" in obj and "choices" not in obj:
        raise ValueError(f"server returned an error object: {_error_text(obj)}")
    choices = obj.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ValueError(f"reply has no 'choices' list: {_snippet(body)}")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise ValueError(f"reply's choices[0] has no 'message' object: {_snippet(body)}")
    content = message.get("content")
    if not isinstance(content, str):
        raise ValueError(
            f"reply's choices[0].message.content is {type(content).__name__}, not a string "
            f"(a refusal or tool call?): {_snippet(body)}"
        )
    usage = obj.get("usage") if isinstance(obj.get("usage"), dict) else {}
    finish = choices[0].get("finish_reason")
    return ChatReply(text=content, finish_reason=finish if isinstance(finish, str) else None, usage=usage)


def _snippet(text: str, n: int = 200) -> str:
    text = text.strip().replace("\n", " ")
    return repr(text if len(text) <= n else text[:n] + "...")


def _error_text(obj: Any) -> str:
    """The human-readable part of an OpenAI-style error body (``{"error": {"message": ...}}``)."""
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            msg = err.get("message") or err.get("detail") or err.get("msg")
            if msg:
                return str(msg)
        elif isinstance(err, str):
            return err
        if "detail" in obj:
            return str(obj["detail"])
    return _snippet(json.dumps(obj) if not isinstance(obj, str) else obj)


def _parse_retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


class OpenAICompatClient:
    """Concurrent chat completions against one model of an OpenAI-compatible server.

    Parameters
    ----------
    base_url:
        API root, e.g. ``http://127.0.0.1:8000/v1`` (vLLM) or ``http://127.0.0.1:11434/v1`` (ollama).
    model:
        The served model name, sent as ``model`` in every request.
    api_key:
        Bearer token; ``None`` reads ``$OPENAI_API_KEY`` and sends no header when unset.
    timeout:
        Socket timeout of one HTTP request, in seconds (a server silent that long is retried).
    max_retries:
        Retries after the first attempt, per conversation, on transient failures.
    concurrency:
        Conversations in flight at once.
    backoff, max_backoff:
        Wait ``min(max_backoff, backoff * 2**attempt)`` seconds before retry ``attempt + 1``.
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
        self._lock = threading.Lock()
        self.stats = {"requests": 0, "retries": 0}
        """Running totals over the client's life: HTTP requests sent and retries among them."""

    def __repr__(self) -> str:
        return f"OpenAICompatClient(base_url={self.base_url!r}, model={self.model!r})"

    # -- HTTP ---------------------------------------------------------------------------------
    def _headers(self) -> dict[str, str]:
        h = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        return h

    def _http(self, method: str, path: str, payload: Mapping[str, Any] | None = None) -> tuple[int, bytes]:
        """One HTTP request; returns ``(status, body)`` for any HTTP reply; raises ``_Transient``
        on network failures and retryable statuses."""
        url = self.base_url + path
        data = json.dumps(payload).encode("utf-8") if payload is not None else None
        req = urllib.request.Request(url, data=data, method=method, headers=self._headers())
        with self._lock:
            self.stats["requests"] += 1
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as e:
            try:
                body = e.read()
            except Exception:  # noqa: BLE001 - a broken error body is still an HTTP error
                body = b""
            finally:
                e.close()
            if e.code in RETRYABLE_STATUS:
                raise _Transient(
                    f"HTTP {e.code} from {url}: {self._body_message(body)}",
                    status=e.code,
                    retry_after=_parse_retry_after(e.headers.get("Retry-After") if e.headers else None),
                ) from None
            return e.code, body
        except urllib.error.URLError as e:
            raise _Transient(f"cannot reach {url}: {e.reason}") from None
        except TimeoutError:
            raise _Transient(f"no reply from {url} within {self.timeout:g} s (timeout)") from None
        except (OSError, http.client.HTTPException) as e:
            raise _Transient(f"connection to {url} failed: {type(e).__name__}: {e}") from None

    @staticmethod
    def _body_message(body: bytes) -> str:
        text = body.decode("utf-8", "replace")
        try:
            return _error_text(json.loads(text))
        except json.JSONDecodeError:
            return _snippet(text) if text.strip() else "(empty body)"

    def _permanent_error(self, status: int, body: bytes, index: int | None) -> EndpointError:
        msg = self._body_message(body)
        where = f" (conversation {index} of the batch)" if index is not None else ""
        if status == 404:
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
        return EndpointError(f"{self.base_url}: HTTP {status}{where}: {msg}; {hint}", status=status, index=index)

    def _with_retries(self, fn, what: str, index: int | None = None, cancel: threading.Event | None = None):
        """Call ``fn()`` until it succeeds, retrying ``_Transient`` failures with backoff.

        ``cancel`` (set when another conversation of the batch failed for good) stops retrying."""
        last: _Transient | None = None
        attempts = 0
        for attempt in range(self.max_retries + 1):
            if attempt and cancel is not None and cancel.is_set():
                break
            if attempt:
                wait = min(self.max_backoff, self.backoff * 2 ** (attempt - 1))
                if last is not None and last.retry_after is not None:
                    wait = min(self.max_backoff, max(wait, last.retry_after))
                with self._lock:
                    self.stats["retries"] += 1
                logger.warning("%s: %s; retry %d/%d in %.2f s", what, last, attempt, self.max_retries, wait)
                time.sleep(wait)
            attempts += 1
            try:
                return fn(attempt + 1)
            except _Transient as e:
                last = e
        where = f" (conversation {index} of the batch)" if index is not None else ""
        raise EndpointError(
            f"{what}{where} failed after {attempts} attempt(s): {last}. Is the server at "
            f"{self.base_url} running and serving {self.model!r}? (raise max_retries/timeout for a slow server)",
            status=last.status if last else None,
            index=index,
        )

    # -- API ----------------------------------------------------------------------------------
    def list_models(self) -> list[str]:
        """Ids the server lists at ``GET /models``."""

        def once(_attempt: int) -> list[str]:
            status, body = self._http("GET", "/models")
            if status != 200:
                raise self._permanent_error(status, body, None)
            try:
                obj = json.loads(body.decode("utf-8", "replace"))
                return [str(m["id"]) for m in obj["data"]]
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise _Transient(f"GET /models returned garbage ({type(e).__name__}): {_snippet(body.decode('utf-8', 'replace'))}") from None

        return self._with_retries(once, f"GET {self.base_url}/models")

    def check_model(self) -> None:
        """Raise :class:`EndpointError` unless the server is reachable and lists ``model``.

        Servers that do not implement ``/models`` (404) are given the benefit of the doubt.
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
                "Pass one of these as the model.",
                status=404,
            )

    def request_body(
        self, messages: Sequence[Mapping[str, str]], seed: int | None = None, **sampling: Any
    ) -> dict[str, Any]:
        """The JSON body sent for one conversation (``None``-valued sampling options are dropped)."""
        body: dict[str, Any] = {"model": self.model, "messages": [dict(m) for m in messages]}
        if seed is not None:
            body["seed"] = int(seed)
        for k, v in sampling.items():
            if v is not None:
                body[k] = v
        body["stream"] = False
        return body

    def chat_one(
        self,
        messages: Sequence[Mapping[str, str]],
        seed: int | None = None,
        index: int | None = None,
        _cancel: threading.Event | None = None,
        **sampling: Any,
    ) -> ChatReply:
        """One conversation, with retries; see :meth:`chat_full`."""
        problems = validate_messages(messages, "conversation" if index is None else f"conversation {index}")
        if problems:
            raise ValueError("; ".join(problems))
        payload = self.request_body(messages, seed, **sampling)

        def once(attempt: int) -> ChatReply:
            status, body = self._http("POST", "/chat/completions", payload)
            if status != 200:
                raise self._permanent_error(status, body, index)
            try:
                reply = parse_chat_completion(body)
            except ValueError as e:
                raise _Transient(f"garbage reply: {e}", status=status) from None
            return ChatReply(reply.text, reply.finish_reason, reply.usage, attempt)

        return self._with_retries(once, f"POST {self.base_url}/chat/completions", index, _cancel)

    def chat_full(
        self,
        batch: Sequence[Sequence[Mapping[str, str]]],
        seeds: Sequence[int] | None = None,
        **sampling: Any,
    ) -> list[ChatReply]:
        """Like :meth:`chat`, returning :class:`ChatReply` objects (text, finish reason, usage)."""
        batch = list(batch)
        problems = [p for i, conv in enumerate(batch) for p in validate_messages(conv, f"conversation {i}")]
        if seeds is not None:
            seeds = list(seeds)
            if len(seeds) != len(batch):
                problems.append(f"seeds has {len(seeds)} entries for {len(batch)} conversations")
            problems += [f"seeds[{i}] = {s!r} is not an integer" for i, s in enumerate(seeds) if not isinstance(s, int)]
        if problems:
            raise ValueError("invalid chat batch: " + "; ".join(problems))
        if not batch:
            return []
        seeds = seeds if seeds is not None else [None] * len(batch)
        if len(batch) == 1 or self.concurrency == 1:
            return [self.chat_one(c, s, i, **sampling) for i, (c, s) in enumerate(zip(batch, seeds))]
        cancel = threading.Event()
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(batch)), thread_name_prefix="chat") as pool:
            futures = [
                pool.submit(self.chat_one, c, s, i, cancel, **sampling) for i, (c, s) in enumerate(zip(batch, seeds))
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
        batch: Sequence[Sequence[Mapping[str, str]]],
        seeds: Sequence[int] | None = None,
        **sampling: Any,
    ) -> list[str]:
        """One reply text per conversation of ``batch``, in order.

        ``seeds[i]`` is sent as conversation ``i``'s ``seed``; ``sampling`` (``temperature``,
        ``top_p``, ``max_tokens``, ``stop``, and server extensions such as ``top_k``) is sent with
        every request. Raises :class:`EndpointError` when a conversation cannot be completed
        (the first failing one in batch order), ``ValueError`` on a malformed batch.
        """
        return [r.text for r in self.chat_full(batch, seeds, **sampling)]
