"""One registry shape for the toolkit's five registries, and the one ``"module:attr"`` resolver.

The metrics (:mod:`dialfork_metrics.registry`), the hallucination types
(:mod:`dialfork_dataset.taxonomy`), the Task 3 detectors (:mod:`dialfork_metrics.task3.registry`),
the generation backends (:mod:`generation.backends`) and the workflow source kinds
(:mod:`dialfork_dataset.sources`) are each one :class:`Registry`: an ordered table of frozen specs
(dataclasses that check their own fields when built), keyed by name, with the same four verbs.

* :meth:`Registry.register` checks the spec's type (and the registry's own rule, e.g. a metric's
  label across levels) and refuses a name already taken unless ``replace=True`` (a replaced entry
  keeps its position: registration order is table order, and for types the seed index);
* :meth:`Registry.unregister` and :meth:`Registry.get` raise :class:`RegistryError` for a name that
  is not registered, the same way in all five, naming the registered entries and how to add one;
* :meth:`Registry.names` and :meth:`Registry.specs` list the entries in registration order;
* :attr:`Registry.view` is a read-only live mapping (``types.MappingProxyType``): the only way to
  add an entry is :meth:`~Registry.register`;
* each registry's built-in entries are one named ``BUILTIN_*`` tuple of its module. A registry
  whose built-ins live in a package above it (the hallucination types, whose entries sit in
  ``generation/types/``) names them as ``"module:attr"`` strings: the registry registers them, in
  order, before its first read or registration (``Registry(..., builtins=...)``), so the seed
  order holds and importing the registry imports nothing above it.

:class:`RegistryError` is a :class:`~dialfork_dataset.errors.CollectedErrors` (a ``ValueError``)
and a ``KeyError``, so the ``except ValueError`` and ``except KeyError`` clauses written for the
older per-registry errors still catch it. A registry may raise a subclass that also derives from
its older error (``generation.backends`` raises one that is an ``UnknownBackendError`` as well).

Specs name code lazily as ``"package.module:attr"`` strings so that importing a registry imports
no numpy, torch or optional dependency; :func:`resolve` is the one function that imports them.

>>> from dataclasses import dataclass
>>> @dataclass(frozen=True)
... class Colour:
...     name: str
...     hex: str
>>> colours = Registry("colour", Colour, add_hint="register_colour")
>>> colours.register(Colour("red", "#f00")).hex
'#f00'
>>> colours.names(), "red" in colours, colours.view["red"].hex
(('red',), True, '#f00')
>>> colours.get("blue")
Traceback (most recent call last):
    ...
dialfork_dataset.registry.RegistryError: unknown colour 'blue'; registered: red (add one with register_colour)
>>> resolve("os.path:join", "example")("a", "b")
'a/b'
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any, Generic, TypeVar

from .errors import CollectedErrors

S = TypeVar("S")

#: A ``"package.module:attr"`` reference (``attr`` may be dotted: ``"pkg.mod:Class.method"``).
REF_PATTERN = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


class RegistryError(CollectedErrors, KeyError):
    """A name that is not registered (or one registered twice): the message names the registry,
    the name, the registered entries and how to add one.

    Both a ``ValueError`` (through :class:`~dialfork_dataset.errors.CollectedErrors`) and a
    ``KeyError``, so that ``except`` clauses written for the older per-registry errors keep working.

    Args:
        message: The exception's text.
        errors: Every problem, one line each; defaults to ``[message]``.
        registered: The names registered when it was raised.
    """

    def __init__(self, message: str, errors: list[str] | None = None, *, registered: tuple[str, ...] = ()):
        super().__init__(message, errors)
        self.registered: tuple[str, ...] = tuple(registered)

    def __str__(self) -> str:
        # KeyError's str() would quote the message
        return str(self.args[0]) if self.args else ""


def is_ref(value: Any) -> bool:
    """Whether ``value`` is a ``"package.module:attr"`` string (:data:`REF_PATTERN`).

    Args:
        value: Anything.

    Returns:
        True for a string of the form ``"module:attr"``.
    """
    return isinstance(value, str) and bool(REF_PATTERN.match(value))


def resolve(
    ref: Any,
    what: str = "entry",
    *,
    error: type[Exception] = ValueError,
    loaded_only: bool = False,
) -> Any:
    """The object a ``"package.module:attr"`` reference names, imported now; any other object is
    returned as is. The one lazy resolver of the toolkit's registries.

    Args:
        ref: The reference, or the object itself.
        what: What the reference is, for the error message (``"backend 'openai'"``,
            ``"planner of hallucination type 'TOY'"``).
        error: The exception class raised (default ``ValueError``); called with the message.
        loaded_only: Import nothing: return None when the module is not imported yet (for a
            caller asking whether an object could have come from it).

    Returns:
        The object (None with ``loaded_only`` when its module is not loaded).

    Raises:
        ValueError: ``ref`` is a string that is not ``"module:attr"``, or its module or attribute
            cannot be imported (the message names ``what`` and the reason); ``error`` instead of
            ``ValueError`` when given.
    """
    if not isinstance(ref, str):
        return ref
    if not is_ref(ref):
        raise error(f"{what}: expected an object or 'package.module:attr', got {ref!r}")
    mod, _, attr = ref.partition(":")
    try:
        if loaded_only:
            obj: Any = sys.modules.get(mod)
            if obj is None:
                return None
        else:
            obj = importlib.import_module(mod)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        if loaded_only:
            return None
        raise error(f"{what}: cannot import {attr!r} from {mod!r} ({e})") from e
    return obj


class Registry(Generic[S]):
    """An ordered table of specs keyed by name: register / unregister / get / names.

    Args:
        kind: What an entry is, for messages (``"Task 3 detector"``, ``"backend"``).
        spec_type: The spec class; :meth:`register` refuses anything else (``TypeError``).
        key: The spec attribute that holds its name (default ``"name"``; ``"code"`` for types).
        normalize: Maps a name given to :meth:`get` and :meth:`unregister` to its key (e.g. lower
            case, no surrounding spaces); default: as given.
        add_hint: The function that adds an entry, for the unknown-name message.
        error: The exception raised for an unknown or duplicate name: :class:`RegistryError` or a
            subclass (one that is also a registry's older error type).
        check: ``check(spec, registry) -> list[str]``: the registry's own rules, run by
            :meth:`register` (each problem one line; any refuses the spec with ``ValueError``).
        builtins: Built-in entries registered, in order, on the registry's first use (any method
            or :attr:`view`): specs, or their ``"module:attr"`` names, imported then (so that a
            registry can name built-ins that live in a package it may not import).

    Raises:
        TypeError: ``error`` is not a subclass of :class:`RegistryError`.
    """

    def __init__(
        self,
        kind: str,
        spec_type: type,
        *,
        key: str = "name",
        normalize: Callable[[Any], Any] | None = None,
        add_hint: str = "",
        error: type[RegistryError] = RegistryError,
        check: Callable[[Any, Registry], list[str]] | None = None,
        builtins: tuple[Any, ...] = (),
    ) -> None:
        if not (isinstance(error, type) and issubclass(error, RegistryError)):
            raise TypeError(f"registry of {kind}: error must be RegistryError or a subclass, got {error!r}")
        self.kind = kind
        self.spec_type = spec_type
        self.key = key
        self.add_hint = add_hint
        self.error = error
        self._normalize = normalize
        self._check = check
        self._entries: dict[Any, S] = {}
        self._view: Mapping[Any, S] = MappingProxyType(self._entries)
        self._pending: tuple[Any, ...] = tuple(builtins)

    def _load_builtins(self) -> None:
        """Register the pending built-ins (once; a re-entrant call during their import is a no-op)."""
        if not self._pending:
            return
        pending, self._pending = self._pending, ()
        specs = []
        try:
            for ref in pending:
                spec = resolve(ref, f"built-in {self.kind} {ref!r}")
                if not isinstance(spec, self.spec_type):
                    raise TypeError(
                        f"built-in {self.kind} {ref!r} is a {type(spec).__name__}, "
                        f"not a {self.spec_type.__name__}"
                    )
                specs.append(spec)
        except Exception:
            self._pending = pending  # tried again on the next use, and raising again
            raise
        # the built-ins come first, in their order, even before an entry registered while they imported
        later = dict(self._entries)
        self._entries.clear()
        self._entries.update({self.key_of(spec): spec for spec in specs})
        self._entries.update({n: s for n, s in later.items() if n not in self._entries})

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {', '.join(map(str, self._entries)) or 'empty'})"

    def _norm(self, name: Any) -> Any:
        return self._normalize(name) if self._normalize is not None else name

    def key_of(self, spec: S) -> Any:
        """The name ``spec`` is registered under.

        Args:
            spec: A spec of this registry's type.

        Returns:
            Its :attr:`key` attribute.
        """
        return getattr(spec, self.key)

    def register(self, spec: S, *, replace: bool = False) -> S:
        """Add ``spec`` at the end of the order (a replaced entry keeps its position).

        Args:
            spec: The entry, an instance of :attr:`spec_type` (it validated its fields when built).
            replace: Replace an entry of the same name (else that is an error).

        Returns:
            ``spec``, so that ``register`` can be used inline.

        Raises:
            TypeError: ``spec`` is not a :attr:`spec_type`.
            ValueError: The registry's own rule refuses it (the message names the entry).
            RegistryError: The name is registered and ``replace`` is false.
        """
        self._load_builtins()
        if not isinstance(spec, self.spec_type):
            raise TypeError(
                f"the {self.kind} registry takes a {self.spec_type.__name__}, got {type(spec).__name__}"
            )
        name = self.key_of(spec)
        if name in self._entries and not replace:
            raise self.error(
                f"a {self.kind} {name!r} is already registered (pass replace=True to replace it, "
                "or pick another name)",
                registered=self.names(),
            )
        problems = self._check(spec, self) if self._check is not None else []
        if problems:
            raise ValueError(f"{self.kind} {name!r}: " + "; ".join(problems))
        self._entries[name] = spec
        return spec

    def unregister(self, name: Any) -> S:
        """Remove an entry (tests and plug-ins use it to undo a run-time registration).

        Args:
            name: The entry's name.

        Returns:
            The removed spec.

        Raises:
            RegistryError: ``name`` is not registered (the message lists the registered ones).
        """
        spec = self.get(name)
        del self._entries[self.key_of(spec)]
        return spec

    def get(self, name: Any) -> S:
        """The entry registered as ``name``.

        Args:
            name: The entry's name (normalised as the registry says).

        Returns:
            Its spec.

        Raises:
            RegistryError: ``name`` is not registered (the message lists the registered ones).
        """
        self._load_builtins()
        try:
            return self._entries[self._norm(name)]
        except (KeyError, TypeError, AttributeError):
            raise self.unknown(name) from None

    def unknown(self, name: Any) -> RegistryError:
        """The error for a name that is not registered (not raised: a caller that parses names
        out of a larger string raises its own error with this message).

        Args:
            name: The name asked for.

        Returns:
            RegistryError: Its message names the registry, ``name``, the registered entries and
            :attr:`add_hint`.
        """
        self._load_builtins()
        hint = f" (add one with {self.add_hint})" if self.add_hint else ""
        names = ", ".join(map(str, self._entries)) or "(none)"
        return self.error(f"unknown {self.kind} {name!r}; registered: {names}{hint}", registered=self.names())

    def names(self) -> tuple[Any, ...]:
        """The registered names.

        Returns:
            The names, in registration order.
        """
        self._load_builtins()
        return tuple(self._entries)

    def specs(self) -> tuple[S, ...]:
        """The registered specs.

        Returns:
            The specs, in registration order.
        """
        self._load_builtins()
        return tuple(self._entries.values())

    @property
    def view(self) -> Mapping[Any, S]:
        """A read-only live mapping ``name -> spec`` in registration order (``MappingProxyType``)."""
        self._load_builtins()
        return self._view

    def __contains__(self, name: object) -> bool:
        self._load_builtins()
        try:
            return self._norm(name) in self._entries
        except (TypeError, AttributeError):
            return False

    def __iter__(self) -> Iterator[Any]:
        return iter(self.names())

    def __len__(self) -> int:
        self._load_builtins()
        return len(self._entries)


__all__ = ["REF_PATTERN", "Registry", "RegistryError", "is_ref", "resolve"]
