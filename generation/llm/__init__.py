"""LLM plumbing shared by the generator, the detectors, the judge and the audit: one place.

* :mod:`generation.llm.client`: :class:`OpenAICompatClient`, chat completions against any
  OpenAI-compatible server (vLLM, ollama, llama.cpp, TGI, the OpenAI API), on the ``openai`` package;
* :mod:`generation.llm.loader`: loading a local ``transformers`` chat model and its tokenizer
  (dtype, device map, chat-template checks, errors naming the model and the fix).

``generation`` never imports ``dialfork_metrics``; ``dialfork_metrics`` imports from here.
Names are loaded on first use (``openai``, ``torch`` and ``transformers`` are imported lazily).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ChatReply": "client",
    "EndpointError": "client",
    "OpenAICompatClient": "client",
    "parse_chat_completion": "client",
    "validate_messages": "client",
    "ChatTemplateError": "loader",
    "ModelLoadError": "loader",
    "load_chat_model": "loader",
    "load_chat_tokenizer": "loader",
    "resolve_device_dtype": "loader",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
