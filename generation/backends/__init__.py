"""Generation backends and their registry.

``get_backend(name, **options)`` builds a backend by name; LLM backends are imported lazily,
so the template backend (and this module) never imports torch or an HTTP client.

=============== ================================================= =========================
name            class                                             needs
=============== ================================================= =========================
``template``    :class:`generation.backends.template.TemplateBackend` STAR only (CPU, exact)
``transformers``:class:`generation.backends.hf.TransformersBackend`     a chat model (GPU)
``openai``      :class:`generation.backends.openai_backend.OpenAIBackend` an OpenAI-compatible server
=============== ================================================= =========================
"""

from __future__ import annotations

import importlib
from typing import Any

from ..errors import UnknownBackendError
from .base import Backend, TurnRequest

BACKENDS: dict[str, str] = {
    "template": "generation.backends.template:TemplateBackend",
    "transformers": "generation.backends.hf:TransformersBackend",
    "openai": "generation.backends.openai_backend:OpenAIBackend",
}


def backend_class(name: str) -> type:
    """The class registered as backend ``name``, imported on demand (nothing is instantiated).

    Args:
        name: a key of :data:`BACKENDS` (``"template"``, ``"transformers"`` or ``"openai"``).

    Returns:
        The backend class named by the registry entry (``"module:Class"``).

    Raises:
        UnknownBackendError: ``name`` is not registered, or importing its module failed (e.g. a
            missing optional dependency such as torch or transformers).
    """
    if name not in BACKENDS:
        raise UnknownBackendError(f"unknown backend {name!r}; choose one of: {', '.join(BACKENDS)}")
    mod, _, cls = BACKENDS[name].partition(":")
    try:
        module = importlib.import_module(mod)
    except ImportError as e:
        raise UnknownBackendError(f"backend {name!r} is not available: importing {mod} failed ({e})") from e
    return getattr(module, cls)


def get_backend(name: str, **options: Any) -> Backend:
    """Instantiate backend ``name`` with ``options`` (passed to its constructor).

    Args:
        name: a key of :data:`BACKENDS`.
        **options: keyword arguments of the backend's constructor (e.g. ``model``,
            ``temperature``, ``device`` for ``transformers``; none are needed for ``template``).

    Returns:
        The backend instance.

    Raises:
        UnknownBackendError: ``name`` is not registered or its module cannot be imported.
    """
    return backend_class(name)(**options)


__all__ = ["BACKENDS", "Backend", "TurnRequest", "UnknownBackendError", "backend_class", "get_backend"]
