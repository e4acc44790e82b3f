"""Generation backends and their registry: one :class:`BackendSpec` per backend.

``get_backend(name, **options)`` builds a backend by name; LLM backends are imported lazily,
so the template backend (and this module) never imports torch or an HTTP client.

=============== ================================================= =========================
name            class                                             needs
=============== ================================================= =========================
``template``    :class:`generation.backends.template.TemplateBackend` STAR only (CPU, exact)
``transformers``:class:`generation.backends.hf.TransformersBackend`     a chat model (GPU)
``openai``      :class:`generation.backends.openai_backend.OpenAIBackend` an OpenAI-compatible server
=============== ================================================= =========================

Every list of backend names reads :data:`BACKENDS`: the CLI's ``--backend`` choices (at parse
time), the default conformance check (:attr:`BackendSpec.llm`), the device placement of
``generation.distributed`` (:attr:`BackendSpec.placement`) and the records' ``code_version``
(:attr:`BackendSpec.target`). ``register_backend`` adds one at run time.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from ..errors import UnknownBackendError
from .base import Backend, TurnRequest


@dataclass(frozen=True)
class BackendSpec:
    """One registered backend.

    Attributes:
        name: the registry name (``--backend NAME``).
        target: the class as ``"module:Class"``, imported on first use.
        llm: whether it role-plays with a language model: its D+ may not follow the workflow, so the
            CLI checks their conformance by default (``False``: conformant by construction).
        placement: ``"module:function"`` placing the backend on a process's device under
            ``accelerate launch`` (:func:`generation.distributed.backend_options_for_process`):
            ``fn(options, state) -> options``; ``None``: the options are used as given.
        needs: what it needs to run, in a few words (the CLI's help).
    """

    name: str
    target: str
    llm: bool = True
    placement: str | None = None
    needs: str = ""

    def __post_init__(self):
        for field, value in (("target", self.target), ("placement", self.placement)):
            if value is not None and (
                not isinstance(value, str)
                or value.count(":") != 1
                or value.startswith(":")
                or value.endswith(":")
            ):
                raise ValueError(f"backend {self.name!r}: {field} must be 'module:attr', got {value!r}")


class _Registry(dict):
    """name -> :class:`BackendSpec`; assigning a ``"module:Class"`` string registers it with defaults."""

    def __setitem__(self, name: str, spec: BackendSpec | str) -> None:
        super().__setitem__(name, spec if isinstance(spec, BackendSpec) else BackendSpec(name, spec))


#: The backend registry: name -> :class:`BackendSpec`.
BACKENDS: dict[str, BackendSpec] = _Registry()


def register_backend(
    spec: BackendSpec | str, target: str | None = None, *, replace: bool = False, **fields: Any
) -> BackendSpec:
    """Register a backend, by spec or by name and ``"module:Class"``.

    Args:
        spec: a :class:`BackendSpec`, or the backend's name (then ``target`` and ``fields`` build it).
        target: ``"module:Class"`` when ``spec`` is a name.
        replace: allow replacing a registered backend of that name (default ``False``).
        **fields: the other :class:`BackendSpec` fields (``llm``, ``placement``, ``needs``).

    Returns:
        The registered spec.

    Raises:
        ValueError: the name is already registered (and ``replace`` is false), or the spec is malformed.
    """
    if not isinstance(spec, BackendSpec):
        spec = BackendSpec(spec, target, **fields)
    if spec.name in BACKENDS and not replace:
        raise ValueError(
            f"backend {spec.name!r} is already registered ({BACKENDS[spec.name].target}); "
            "pass replace=True or pick another name"
        )
    BACKENDS[spec.name] = spec
    return spec


def unregister_backend(name: str) -> None:
    """Remove backend ``name`` from the registry (nothing happens when it is not registered).

    Args:
        name: a registered backend's name.
    """
    BACKENDS.pop(name, None)


def backend_spec(name: str) -> BackendSpec:
    """The :class:`BackendSpec` registered as ``name``.

    Args:
        name: a key of :data:`BACKENDS`.

    Returns:
        Its spec.

    Raises:
        UnknownBackendError: ``name`` is not registered (the message lists the registered names).
    """
    if name not in BACKENDS:
        raise UnknownBackendError(
            f"unknown backend {name!r}; registered: {', '.join(BACKENDS)} "
            "(add one with generation.backends.register_backend)"
        )
    return BACKENDS[name]


def load_attr(target: str, what: str) -> Any:
    """Import ``"module:attr"`` and return the attribute.

    Args:
        target: ``"module:attr"``.
        what: who names it, for the error (e.g. ``"backend 'openai'"``).

    Returns:
        The attribute.

    Raises:
        UnknownBackendError: the module cannot be imported (e.g. a missing optional dependency such as
            torch) or has no such attribute.
    """
    mod, _, attr = target.partition(":")
    try:
        module = importlib.import_module(mod)
    except ImportError as e:
        raise UnknownBackendError(f"{what} is not available: importing {mod} failed ({e})") from e
    try:
        return getattr(module, attr)
    except AttributeError:
        raise UnknownBackendError(
            f"{what}: module {mod} has no {attr!r} (registry entry {target!r})"
        ) from None


def backend_class(name: str) -> type:
    """The class registered as backend ``name``, imported on demand (nothing is instantiated).

    Args:
        name: a key of :data:`BACKENDS` (``"template"``, ``"transformers"``, ``"openai"`` or one
            registered at run time).

    Returns:
        The backend class named by the registry entry (``"module:Class"``).

    Raises:
        UnknownBackendError: ``name`` is not registered, or importing its module failed (e.g. a
            missing optional dependency such as torch or transformers).
    """
    return load_attr(backend_spec(name).target, f"backend {name!r}")


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


#: The built-in backends, in the order the registry lists them.
BUILTIN_BACKENDS = (
    BackendSpec(
        "template",
        "generation.backends.template:TemplateBackend",
        llm=False,
        needs="a source with surface templates (CPU, exact)",
    ),
    BackendSpec(
        "transformers",
        "generation.backends.hf:TransformersBackend",
        placement="generation.backends.placement:place_on_process_device",
        needs="a local chat model (GPU)",
    ),
    BackendSpec(
        "openai", "generation.backends.openai_backend:OpenAIBackend", needs="an OpenAI-compatible server"
    ),
)
for _spec in BUILTIN_BACKENDS:
    register_backend(_spec)

__all__ = [
    "BACKENDS",
    "Backend",
    "BUILTIN_BACKENDS",
    "BackendSpec",
    "TurnRequest",
    "UnknownBackendError",
    "backend_class",
    "backend_spec",
    "get_backend",
    "load_attr",
    "register_backend",
    "unregister_backend",
]
