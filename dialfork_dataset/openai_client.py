"""Deprecated location of the OpenAI-compatible client: it moved to :mod:`generation.llm.client`
(the LLM code of the project lives in one place, ``generation.llm``).

This module re-exports the same objects so that old imports keep working; import from
``generation.llm.client`` in new code.
"""

from __future__ import annotations

import warnings

from generation.llm.client import (  # noqa: F401 - re-exported
    RETRYABLE_STATUS,
    ChatReply,
    EndpointError,
    OpenAICompatClient,
    parse_chat_completion,
    validate_messages,
)

warnings.warn(
    "dialfork_dataset.openai_client moved to generation.llm.client; import it from there",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["RETRYABLE_STATUS", "ChatReply", "EndpointError", "OpenAICompatClient", "parse_chat_completion",
           "validate_messages"]
