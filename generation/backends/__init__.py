"""Generation backends and their registry: one :class:`BackendSpec` per backend.

``get_backend(name, **options)`` builds a backend by name; LLM backends are imported lazily,
so the template backend (and this module) never imports torch or an HTTP client.

================ ========================================================== ===========================
name             class                                                      needs
================ ========================================================== ===========================
``template``     :class:`generation.backends.template.TemplateBackend`      ``surface_templates`` (CPU)
``transformers`` :class:`generation.backends.hf.TransformersBackend`        ``model``, ``gpu``
``openai``       :class:`generation.backends.openai_backend.OpenAIBackend`  ``server``
================ ========================================================== ===========================

Every list of backend names reads :data:`BACKENDS`, the read-only view of the registry (a
:class:`~dialfork_dataset.registry.Registry`): the CLI's ``--backend`` choices and help (at parse
time; :attr:`BackendSpec.needs`), the default conformance check (:attr:`BackendSpec.llm`), the
device placement of ``generation.distributed`` (:attr:`BackendSpec.placement`) and the records'
``code_version`` (:attr:`BackendSpec.target`). ``register`` adds one at run time,
``unregister`` removes one; an unknown name raises :class:`UnknownBackendName` (both the
registries' ``RegistryError`` and an ``UnknownBackendError``) listing the registered ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dialfork_dataset.registry import Registry, RegistryError, is_ref, resolve

from ..errors import UnknownBackendError
from .base import Backend, TurnRequest

#: What a backend needs to run (:attr:`BackendSpec.needs`), each with the words ``--backend``'s help
#: says: the source features it requires (:data:`dialfork_dataset.sources.FEATURES`, checked with
#: ``require`` before a run), a local chat model, a GPU, an OpenAI-compatible server.
NEEDS: Mapping[str, str] = {
    "surface_templates": "a source with surface templates",
    "api": "a source with task APIs",
    "kb": "a source with KB tables",
    "model": "a local chat model",
    "gpu": "a GPU",
    "server": "an OpenAI-compatible server",
}


class BackendNeeds(tuple):
    """:attr:`BackendSpec.needs`: a tuple of :data:`NEEDS` names whose ``str`` is their words
    (``"a local chat model, a GPU"``), as ``--backend``'s help shows them.

    Args:
        iterable: The names (checked by :class:`BackendSpec`).
    """

    def __str__(self) -> str:
        return ", ".join(NEEDS[n] for n in self)


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
        needs: what it needs to run, names from :data:`NEEDS` (``("model", "gpu")``); ``--backend``'s
            help says them in words (``str(spec.needs)``).

    Raises:
        ValueError: On construction: a name that is not a non-empty string, a ``target`` or
            ``placement`` that is not ``"module:attr"``, or a need not in :data:`NEEDS` (the
            message names the backend and the field).
    """

    name: str
    target: str
    llm: bool = True
    placement: str | None = None
    needs: tuple[str, ...] = ()

    def __post_init__(self):
        where = f"backend {self.name!r}"
        if not isinstance(self.name, str) or not self.name or self.name != self.name.strip():
            raise ValueError(f"{where}: the name must be a non-empty string without surrounding spaces")
        for field, value in (("target", self.target), ("placement", self.placement)):
            if value is not None and not is_ref(value):
                raise ValueError(f"{where}: {field} must be 'module:attr', got {value!r}")
        if isinstance(self.needs, str) or not all(isinstance(n, str) for n in self.needs):
            raise ValueError(
                f"{where}: needs must be a tuple of names from {tuple(NEEDS)}, got {self.needs!r}"
            )
        bad = [n for n in self.needs if n not in NEEDS]
        if bad:
            raise ValueError(f"{where}: unknown needs {bad}; known: {tuple(NEEDS)}")
        if not isinstance(self.llm, bool):
            raise ValueError(f"{where}: llm must be True or False, got {self.llm!r}")
        object.__setattr__(self, "needs", BackendNeeds(n for n in NEEDS if n in self.needs))

    def target_class(self) -> type:
        """The backend's class, imported now.

        Returns:
            The class ``target`` names.

        Raises:
            UnknownBackendError: Its module cannot be imported (e.g. a missing optional dependency
                such as torch) or has no such attribute.
        """
        return resolve(self.target, f"backend {self.name!r}", error=UnknownBackendError)

    def placement_fn(self) -> Any:
        """The placement function, imported now (None when the backend has none).

        Returns:
            The function ``placement`` names, or None.

        Raises:
            UnknownBackendError: It cannot be imported.
        """
        if self.placement is None:
            return None
        return resolve(self.placement, f"backend {self.name!r}'s placement", error=UnknownBackendError)


class UnknownBackendName(RegistryError, UnknownBackendError):
    """A backend name that is not registered (or registered twice): the registries' one
    :class:`~dialfork_dataset.registry.RegistryError`, and an :class:`UnknownBackendError` as before.

    Args:
        message: the unknown name and the registered ones.
        errors: every problem, one line each; defaults to ``[message]``.
        registered: the registered names.
    """


_BACKENDS: Registry[BackendSpec] = Registry(
    "backend", BackendSpec, add_hint="generation.backends.register", error=UnknownBackendName
)

#: The backend registry, a read-only live mapping: name -> :class:`BackendSpec` (:func:`register`
#: is the one way to add a backend).
BACKENDS: Mapping[str, BackendSpec] = _BACKENDS.view


def register(
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
        ValueError: the spec is malformed.
        UnknownBackendName: the name is already registered and ``replace`` is false (a
            ``ValueError``).
    """
    if not isinstance(spec, BackendSpec):
        spec = BackendSpec(spec, target, **fields)
    return _BACKENDS.register(spec, replace=replace)


def unregister(name: str) -> BackendSpec:
    """Remove backend ``name`` from the registry.

    Args:
        name: a registered backend's name.

    Returns:
        The removed spec.

    Raises:
        UnknownBackendName: ``name`` is not registered (the message lists the registered names).
    """
    return _BACKENDS.unregister(name)


def names() -> tuple[str, ...]:
    """The registered backend names, in registration order (the built-ins first).

    Returns:
        The names.
    """
    return _BACKENDS.names()


def get(name: str) -> BackendSpec:
    """The :class:`BackendSpec` registered as ``name``.

    Args:
        name: a key of :data:`BACKENDS`.

    Returns:
        Its spec.

    Raises:
        UnknownBackendName: ``name`` is not registered (an :class:`UnknownBackendError`; the
            message lists the registered names).
    """
    return _BACKENDS.get(name)


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
    return get(name).target_class()


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
        needs=("surface_templates",),
    ),
    BackendSpec(
        "transformers",
        "generation.backends.hf:TransformersBackend",
        placement="generation.backends.placement:place_on_process_device",
        needs=("model", "gpu"),
    ),
    BackendSpec("openai", "generation.backends.openai_backend:OpenAIBackend", needs=("server",)),
)
for _spec in BUILTIN_BACKENDS:
    register(_spec)
del _spec

__all__ = [
    "BACKENDS",
    "Backend",
    "BUILTIN_BACKENDS",
    "BackendNeeds",
    "BackendSpec",
    "NEEDS",
    "TurnRequest",
    "UnknownBackendError",
    "UnknownBackendName",
    "backend_class",
    "get",
    "names",
    "get_backend",
    "register",
    "unregister",
]
