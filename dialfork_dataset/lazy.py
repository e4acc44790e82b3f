"""PEP 562 lazy exports and lazy ``"module:attr"`` references, shared by the packages whose import
must stay fast and by every registry (types, metrics, detectors)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, exports: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package`` resolving ``name -> .submodule`` on first access.

    The resolved value is cached in the package namespace, so later lookups are plain attribute
    reads. Usage in a package ``__init__``::

        __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

    Args:
        package: The package's name (``__name__``); submodules are imported relative to it.
        exports: Exported name -> the submodule (relative, without the dot) that defines it.
        namespace: The package's ``globals()``, where resolved values are cached.

    Returns:
        tuple[Callable[[str], Any], Callable[[], list[str]]]: ``(__getattr__, __dir__)``.
        ``__getattr__`` raises ``AttributeError`` for a name not in ``exports``; ``__dir__`` lists
        the namespace and the exports, sorted.

    Raises:
        AttributeError: Not raised by this call: the returned ``__getattr__`` raises it for a name
            not in ``exports``.
    """

    def __getattr__(name: str) -> Any:
        mod = exports.get(name)
        if mod is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{mod}", package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__


def resolve_ref(ref: Any, what: str = "entry") -> Any:
    """The object a ``"package.module:attr"`` reference names, imported now (``attr`` may be
    dotted); an object that is not a string is returned as is.

    Args:
        ref: The reference, or the object itself.
        what: What the reference is, for the error message (``"planner of hallucination type 'TOY'"``).

    Returns:
        The object.

    Raises:
        ValueError: ``ref`` is a string that is not ``"module:attr"``, or its module or attribute
            cannot be imported (the message names ``what``).
    """
    if not isinstance(ref, str):
        return ref
    mod, sep, attr = ref.partition(":")
    if not (sep and mod and attr):
        raise ValueError(f"{what}: expected a callable or 'package.module:attr', got {ref!r}")
    try:
        obj: Any = importlib.import_module(mod)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"{what}: cannot import {attr!r} from {mod!r} ({e})") from e
    return obj
