"""Extensions registered in every process: the ``DIALFORK_PLUGINS`` environment variable.

An extension registered in Python (``dialfork_dataset.taxonomy.register``, ``dialfork_metrics.task3.registry.register``, ``generation.backends.register``,
...) lives in the process that registered it. The command-line tools (``python -m generation``,
``python -m dialfork_metrics.bench``, ``python -m leaderboard``, ``accelerate launch`` workers)
are other processes: a corpus holding a type they do not know is refused by them. Naming the
extension's module in ``DIALFORK_PLUGINS`` makes every process register it when
:mod:`dialfork_dataset` is imported (which every registry imports first):

.. code-block:: bash

    export DIALFORK_PLUGINS=my_pkg.dialfork_ext            # registers on import
    export DIALFORK_PLUGINS=my_pkg.ext:register,other_ext   # calls my_pkg.ext.register()

Entries are separated by commas; each is a module (imported) or ``"module:function"`` (imported and
the function called with no argument), loaded once per process, in order. An entry that cannot be
imported or fails stops the import with a :class:`PluginError` naming the entry and the variable.
With the variable unset or empty nothing is imported (``import dialfork_dataset`` stays fast).

>>> parse_plugins(" my_pkg.ext:register, other_ext ,")
['my_pkg.ext:register', 'other_ext']
"""

from __future__ import annotations

import importlib
import logging
import os
import re

logger = logging.getLogger(__name__)

#: The environment variable naming the plugins.
ENV = "DIALFORK_PLUGINS"
_ENTRY = re.compile(r"^[A-Za-z_][\w.]*(:[A-Za-z_][\w.]*)?$")
_loaded: list[str] = []
_loading: set[str] = set()


class PluginError(ImportError):
    """A ``DIALFORK_PLUGINS`` entry is malformed, cannot be imported, or its function failed."""


def parse_plugins(value: str | None) -> list[str]:
    """The entries of a ``DIALFORK_PLUGINS`` value (commas separate; blanks are ignored).

    Args:
        value: The variable's value (``None``: unset).

    Returns:
        The entries, stripped, in order.

    Raises:
        PluginError: An entry is neither ``module`` nor ``module:function`` (every bad entry named).
    """
    entries = [e.strip() for e in (value or "").split(",") if e.strip()]
    bad = [e for e in entries if not _ENTRY.match(e)]
    if bad:
        raise PluginError(
            f"{ENV}: {', '.join(repr(b) for b in bad)} is not 'package.module' or 'package.module:function' "
            f"(entries are separated by commas; got {value!r})"
        )
    return entries


def load_plugins(value: str | None = None) -> list[str]:
    """Import (and call) the plugins named in ``value`` or ``$DIALFORK_PLUGINS``, each once per process.

    Args:
        value: The entries as in the variable; ``None`` (default) reads ``$DIALFORK_PLUGINS``.

    Returns:
        The entries loaded so far in this process, in order.

    Raises:
        PluginError: An entry is malformed, cannot be imported, has no such function, or its
            function raised (the message names the entry and says how to fix or unset the variable).
    """
    for entry in parse_plugins(os.environ.get(ENV) if value is None else value):
        if entry in _loaded or entry in _loading:  # once; a plugin importing dialfork_dataset re-enters
            continue
        _loading.add(entry)
        try:
            module, _, attr = entry.partition(":")
            try:
                obj = importlib.import_module(module)
                for part in attr.split(".") if attr else ():
                    obj = getattr(obj, part)
            except (ImportError, AttributeError) as e:
                raise PluginError(
                    f"{ENV} entry {entry!r}: cannot import it ({type(e).__name__}: {e}); install the "
                    f"extension or put its folder on PYTHONPATH, or remove it from {ENV}"
                ) from e
            if attr:
                try:
                    obj()
                except Exception as e:
                    raise PluginError(
                        f"{ENV} entry {entry!r}: {attr}() failed ({type(e).__name__}: {e}); fix the "
                        f"extension or remove it from {ENV}"
                    ) from e
            _loaded.append(entry)
            logger.debug("loaded plugin %s", entry)
        finally:
            _loading.discard(entry)
    return list(_loaded)


__all__ = ["ENV", "PluginError", "load_plugins", "parse_plugins"]
