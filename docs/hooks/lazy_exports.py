"""Griffe extension: make the PEP 562 lazy exports of the DialFork packages visible to mkdocstrings.

``dialfork_metrics``, ``dialfork_metrics.task3``, ``leaderboard``, ``annotation`` and
``dialfork_dataset`` (for its STAR names) resolve public names on first access from a literal
mapping ``_EXPORTS = {"name": "submodule", ...}`` (see ``dialfork_dataset.lazy``). Static analysis
does not run ``__getattr__``, so without this extension ``::: dialfork_metrics.flowscore`` could
not be collected. For every module that defines such a mapping (a dict literal, or a dict
comprehension ``{n: "sub" for n in (...)}``), the extension adds an alias
``package.name -> package.submodule.name``, exactly what ``__getattr__`` returns at run time. The
API reference can then name each object by its package-level path, which survives moving code
between submodules. A table that takes entries from a registry at import (``_EXPORTS.update(...)``:
the metric functions, the detector classes) is read by importing the package, without
``DIALFORK_PLUGINS``: the reference documents what ships.
"""

from __future__ import annotations

import ast
from typing import Any

import griffe

_NAMES = ("_EXPORTS", "_STAR_EXPORTS")


def _mapping(node: ast.AST) -> dict[str, str] | None:
    """``{public name: submodule}`` from a dict literal or a simple dict comprehension."""
    if isinstance(node, ast.Dict):
        try:
            value = ast.literal_eval(node)
        except ValueError:
            return None
        return {str(k): str(v) for k, v in value.items()}
    if isinstance(node, ast.DictComp) and len(node.generators) == 1:
        gen = node.generators[0]
        if (
            isinstance(node.value, ast.Constant)
            and isinstance(gen.target, ast.Name)
            and isinstance(node.key, ast.Name)
            and node.key.id == gen.target.id
        ):
            try:
                names = ast.literal_eval(gen.iter)
            except ValueError:
                return None
            return {str(n): str(node.value.value) for n in names}
    return None


class LazyExports(griffe.Extension):
    """Adds one alias per lazily exported name of a module (see the module docstring)."""

    def on_module(self, *, mod: griffe.Module, **kwargs: Any) -> None:
        if mod.filepath is None or isinstance(mod.filepath, list) or mod.filepath.name != "__init__.py":
            return
        tree = ast.parse(mod.filepath.read_text(encoding="utf-8"))
        for stmt in tree.body:
            targets = (
                stmt.targets
                if isinstance(stmt, ast.Assign)
                else [stmt.target]
                if isinstance(stmt, ast.AnnAssign)
                else []
            )
            if not any(isinstance(t, ast.Name) and t.id in _NAMES for t in targets) or stmt.value is None:
                continue
            for name, sub in (_mapping(stmt.value) or {}).items():
                if name not in mod.members:
                    mod.set_member(name, griffe.Alias(name, f"{mod.path}.{sub}.{name}", parent=mod))
        # the entries a table takes from a registry at import (``_EXPORTS.update(...)``: the metric
        # functions of dialfork_metrics, the detector classes of dialfork_metrics.task3)
        if "_EXPORTS.update(" in mod.filepath.read_text(encoding="utf-8"):
            for name, sub in _runtime_exports(mod.path).items():
                if name not in mod.members:
                    mod.set_member(name, griffe.Alias(name, f"{mod.path}.{sub}.{name}", parent=mod))


def _runtime_exports(path: str) -> dict[str, str]:
    """The package's ``_EXPORTS`` as imported: the shipped entries only (no ``DIALFORK_PLUGINS``)."""
    import importlib
    import os

    os.environ.pop("DIALFORK_PLUGINS", None)  # the reference documents the package, not a plug-in
    table = getattr(importlib.import_module(path), "_EXPORTS", None)
    return {str(k): str(v) for k, v in table.items()} if isinstance(table, dict) else {}
