"""Chat-message rewrites shared by the chat backends (pure functions over message lists).

* :func:`merge_system_messages`: for chat templates (or served models) without a system role;
* :func:`drop_oldest_turn`: shortening a conversation that does not fit the context window.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def merge_system_messages(
    messages: Sequence[Mapping[str, str]], joiner: str = "\n\n"
) -> list[dict[str, str]]:
    """Fold ``system`` messages into user messages, for chat templates without a system role.

    Each run of consecutive system messages (joined with ``joiner``) goes to a user message
    adjacent to the place where it was given, so an instruction injected before turn t_k is read at
    turn t_k and not earlier or later:

    * if a ``user`` message follows it, the text is prepended to that message;
    * else (an ``assistant`` message follows, or the conversation ends there) it is appended to the
      ``user`` message just before it, when there is one;
    * else it becomes a ``user`` message of its own at that place.

    Examples: ``[S, U1, A1, U2, S_inj]`` -> ``[U1', A1, U2 + S_inj]`` with ``U1' = S + U1``;
    ``[S, A1, U1]`` -> ``[S (as user), A1, U1]``. The result never holds two consecutive user messages.

    Args:
        messages: chat messages with ``role`` and ``content`` (other keys, such as ``tool_calls``,
            are kept on their message).
        joiner: the separator between merged texts (default a blank line).

    Returns:
        A new message list without ``system`` messages (the input is not changed).
    """
    out: list[dict[str, str]] = []
    pending: list[str] = []
    for m in messages:
        role, content = m["role"], m["content"]
        if role == "system":
            pending.append(content)
            continue
        if pending:
            text = joiner.join(pending)
            pending = []
            if role == "user":
                content = text + joiner + content if content else text
            elif out and out[-1]["role"] == "user":
                out[-1] = {"role": "user", "content": out[-1]["content"] + joiner + text}
            else:
                out.append({"role": "user", "content": text})
        out.append({**m, "content": content})  # tool_calls / tool_call_id travel with their message
    if pending:
        text = joiner.join(pending)
        if out and out[-1]["role"] == "user":
            out[-1] = {"role": "user", "content": out[-1]["content"] + joiner + text}
        else:
            out.append({"role": "user", "content": text})
    return out


def drop_oldest_turn(messages: Sequence[Mapping[str, str]]) -> list[dict[str, str]] | None:
    """``messages`` without its oldest non-system message; ``None`` when only the last message
    (the one being answered) and system messages remain.

    Args:
        messages: chat messages with ``role``.

    Returns:
        A copy of ``messages`` without its first non-system message, or ``None`` when at most one
            non-system message is left.
    """
    non_system = [i for i, m in enumerate(messages) if m["role"] != "system"]
    if len(non_system) <= 1:
        return None
    drop = non_system[0]
    return [dict(m) for i, m in enumerate(messages) if i != drop]


__all__ = ["drop_oldest_turn", "merge_system_messages"]
