"""What ``generation`` offers the packages beside it: the one module ``dialfork_metrics`` imports.

``generation`` and ``dialfork_metrics`` both build on ``dialfork_dataset``. Three parts of
``dialfork_metrics`` need generation's machinery, and they import it from here only (the import
graph test, ``tests/test_layering.py``, allows ``dialfork_metrics -> generation.api`` and no other
module of ``generation``), so this file is the whole of that dependency:

* the **LLM runtime** (:mod:`generation.llm`) for the Task 3 LLM detector and the LLM judge:
  the OpenAI-compatible client, the ``transformers`` loader and the GGUF resolver;
* the **simulator** for the agent audit (:mod:`dialfork_metrics.audit`): its simulated users and
  fake agents are the template backend's (``Sim``, ``user_turn``, ``system_turn``, a fork's
  ``build_hal`` / ``hal_system_turn``), seeded as the generator seeds them;
* the **dialogue engine pieces** the audit drives against a user's agent: the ``Dialogue`` state
  and its opening messages, the prompts' end token and wrap-up, the knowledge-base tools, the
  variant pools, the code version recorded in its records.

``generation`` itself never imports ``dialfork_metrics``. Everything here is defined in a module
of ``generation`` named beside it; this module only names what the other side may use.
"""

from __future__ import annotations

from .backends.template import (
    GENERIC_NODES,
    Sim,
    TemplateBackend,
    build_hal,
    enter_node,
    hal_system_turn,
    read_answer,
    system_turn,
    user_turn,
)
from .engine import Dialogue, ForkSpec, code_version, init_messages
from .kb_tools import DEFAULT_MAX_TOOL_ROUNDS, KBExecutor, ToolSpecError, run_tool_loop
from .llm.client import EndpointError, OpenAICompatClient
from .llm.gguf import resolve_model
from .llm.loader import context_window, dtype_errors, load_chat_model, load_chat_tokenizer
from .prompts import END_TOKEN
from .prompts import render as render_prompt
from .seeds import Rng, dialogue_seed, stable_seed
from .variants import load_variants

__all__ = [
    # the LLM runtime (generation.llm)
    "EndpointError",
    "OpenAICompatClient",
    "context_window",
    "dtype_errors",
    "load_chat_model",
    "load_chat_tokenizer",
    "resolve_model",
    # seeds (generation.seeds)
    "Rng",
    "dialogue_seed",
    "stable_seed",
    # the template simulator (generation.backends.template)
    "GENERIC_NODES",
    "Sim",
    "TemplateBackend",
    "build_hal",
    "enter_node",
    "hal_system_turn",
    "read_answer",
    "system_turn",
    "user_turn",
    # the dialogue engine, prompts, KB tools, variant pools
    "DEFAULT_MAX_TOOL_ROUNDS",
    "END_TOKEN",
    "Dialogue",
    "ForkSpec",
    "KBExecutor",
    "ToolSpecError",
    "code_version",
    "init_messages",
    "load_variants",
    "render_prompt",
    "run_tool_loop",
]
