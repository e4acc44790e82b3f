"""PEP 562 lazy exports, shared by the packages whose import must stay fast.

Lazy ``"module:attr"`` references (the registries' planners, cores, factories, targets and
openers) are resolved elsewhere, by :func:`dialfork_dataset.registry.resolve`, the one resolver.
"""

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


__all__ = ["lazy_exports"]
