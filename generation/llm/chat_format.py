"""The wire format of OpenAI-compatible chat completions, as pure functions: what a conversation
may hold (:func:`validate_messages`), what a reply must hold (:func:`parse_chat_completion`), the
parsed reply (:class:`ChatReply`) and the client's error (:class:`EndpointError`).

Kept apart from :mod:`generation.llm.client` so that it needs no ``openai`` package: a malformed
batch is refused, and a server's body judged, by the same code whatever sends the request.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

ROLES = frozenset({"system", "user", "assistant", "tool", "developer"})
"""Message roles a conversation may use."""


class EndpointError(RuntimeError):
    """The server could not give a usable reply: unreachable, unknown model, bad key, garbage.

    ``status`` is the last HTTP status (``None`` when no HTTP reply came), ``index`` the position
    in the batch of the conversation that failed (``None`` for calls outside a batch).

    Args:
        message: what went wrong and how to fix it.
        status: the last HTTP status, or ``None`` (default) when no HTTP reply came.
        index: the 0-based position in the batch of the failed conversation, or ``None``
            (default).
    """

    def __init__(self, message: str, status: int | None = None, index: int | None = None):
        super().__init__(message)
        self.status = status
        self.index = index


@dataclass(frozen=True)
class ChatReply:
    """One parsed chat completion.

    Attributes:
        text: the assistant's text (``""`` when it only calls tools).
        finish_reason: why generation stopped, as the server says; ``None`` when it gives none.
        usage: the server's ``usage`` object (token counts), empty when absent.
        attempts: how many HTTP requests it took (1 = no retry).
        tool_calls: the assistant's tool calls, empty when none.
    """

    text: str
    finish_reason: str | None = None
    """``"stop"``, ``"length"`` (hit ``max_tokens``), ``"tool_calls"``, ... as the server says."""
    usage: dict[str, Any] = field(default_factory=dict)
    attempts: int = 1
    """How many HTTP requests it took (1 = no retry)."""
    tool_calls: tuple[dict[str, Any], ...] = ()
    """The assistant's tool calls (``{"id", "type": "function", "function": {"name", "arguments"}}``)."""


def _message_errors(m: Any, where: str) -> list[str]:
    if not isinstance(m, Mapping):
        return [f"{where}: expected a dict with 'role' and 'content', got {type(m).__name__}"]
    errors = []
    role, content = m.get("role"), m.get("content")
    if role not in ROLES:
        errors.append(f"{where}: role {role!r} is not one of {sorted(ROLES)}")
    calls = m.get("tool_calls")
    if calls is not None:
        if role != "assistant":
            errors.append(f"{where}: only assistant messages carry 'tool_calls', not role {role!r}")
        elif not isinstance(calls, Sequence) or isinstance(calls, (str, bytes)) or not calls:
            errors.append(f"{where}: 'tool_calls' must be a non-empty list, got {calls!r}")
        else:
            for j, c in enumerate(calls):
                fn = c.get("function") if isinstance(c, Mapping) else None
                if not (isinstance(fn, Mapping) and isinstance(fn.get("name"), str)):
                    errors.append(f"{where}: tool_calls[{j}] needs a 'function' with a 'name', got {c!r}")
    if content is None and (calls or role == "tool"):
        pass  # an assistant turn that only calls tools, or a tool result without text
    elif not isinstance(content, str):
        errors.append(
            f"{where}: 'content' must be a string, got {type(content).__name__}"
            + (" (null is allowed only with tool_calls or in a tool result)" if content is None else "")
        )
    if role == "tool" and not isinstance(m.get("tool_call_id"), str):
        errors.append(f"{where}: a tool result needs 'tool_call_id' (the id of the call it answers)")
    return errors


def validate_messages(messages: Any, where: str = "conversation") -> list[str]:
    """Every problem of one chat conversation (a list of ``{"role", "content"}`` dicts; assistant
    messages may carry ``tool_calls`` with ``content: null``, tool results need ``tool_call_id``).

    Args:
        messages: the conversation to check (anything: the caller's input).
        where: how the conversation is named in the messages (default ``"conversation"``).

    Returns:
        One message per problem (not a list, empty, a message that is not a dict, an unknown role,
            a non-string content, malformed ``tool_calls``, a tool result without ``tool_call_id``),
            each naming ``where`` and the message index; empty when the conversation is valid.
    """
    if not isinstance(messages, Sequence) or isinstance(messages, (str, bytes)):
        return [f"{where}: expected a list of {{'role', 'content'}} messages, got {type(messages).__name__}"]
    if not messages:
        return [f"{where}: empty conversation (give at least one message)"]
    return [e for i, m in enumerate(messages) for e in _message_errors(m, f"{where}, message {i}")]


def parse_chat_completion(body: bytes | str) -> ChatReply:
    """Parse a ``/chat/completions`` response body; raise ``ValueError`` saying what is wrong.

    Only ``choices[0]`` is read.

    Args:
        body: the HTTP response body (UTF-8 bytes or text).

    Returns:
        The parsed reply, a :class:`ChatReply` (``attempts`` is left at 1; the client sets it).

    Raises:
        ValueError: the body is not UTF-8 or not JSON, is not a JSON object, is an error object
            without ``choices``, has no non-empty ``choices`` list or no ``choices[0].message``
            object, or its content is not a string (and there are no tool calls).
    """
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
    content, calls = message.get("content"), message.get("tool_calls")
    calls = tuple(c for c in calls if isinstance(c, dict)) if isinstance(calls, list) else ()
    if content is None and calls:
        content = ""
    if not isinstance(content, str):
        raise ValueError(
            f"reply's choices[0].message.content is {type(content).__name__}, not a string "
            f"(a refusal?): {_snippet(body)}"
        )
    usage = obj.get("usage") if isinstance(obj.get("usage"), dict) else {}
    finish = choices[0].get("finish_reason")
    return ChatReply(
        text=content, finish_reason=finish if isinstance(finish, str) else None, usage=usage, tool_calls=calls
    )


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


def error_message(body: bytes) -> str:
    """The readable message of an error body (JSON error object or text).

    Args:
        body: the HTTP error response body.

    Returns:
        The error object's ``message``/``detail``/``msg`` when the body is such JSON, else a quoted
            snippet of the body (at most 200 characters), or ``"(empty body)"``.
    """
    text = body.decode("utf-8", "replace")
    try:
        return _error_text(json.loads(text))
    except json.JSONDecodeError:
        return _snippet(text) if text.strip() else "(empty body)"


def parse_retry_after(value: str | None) -> float | None:
    """Seconds of a ``Retry-After`` header given in seconds (``None`` otherwise).

    Args:
        value: the header's value, or ``None`` when absent.

    Returns:
        The delay in seconds (negative values become 0.0), or ``None`` for a missing, empty or
            non-numeric value (e.g. an HTTP date).
    """
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def root_cause(e: BaseException) -> str:
    """The innermost cause's message (``[Errno 111] Connection refused``, not "Connection error.").

    Args:
        e: an exception.

    Returns:
        The message of the last exception along its ``__cause__``/``__context__`` chain (an
            unsuppressed context counts), or that exception's type name when its message is empty.
    """
    while e.__cause__ is not None or (e.__context__ is not None and not e.__suppress_context__):
        e = e.__cause__ or e.__context__
    return str(e) or type(e).__name__


__all__ = [
    "ROLES",
    "ChatReply",
    "EndpointError",
    "error_message",
    "parse_chat_completion",
    "parse_retry_after",
    "root_cause",
    "validate_messages",
]
