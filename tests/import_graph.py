"""The import graph of a source tree, read with :mod:`ast` (nothing is imported), and the two checks
``tests/test_layering.py`` runs on it: imports against the layering, and cycles between modules.

What counts as an import of module ``b`` by module ``a`` (an edge ``a -> b``):

* every ``import`` / ``from ... import`` statement of ``a``, wherever it stands: at module level,
  inside a function or a class, under ``if TYPE_CHECKING:``, in a ``try:``. A function-level
  import runs when the function is called and a ``TYPE_CHECKING`` import is read by the type
  checker and the documentation tools, so both are dependencies (the stricter reading);
* relative imports resolved against ``a``'s package (``from . import x`` in ``p/q.py`` is
  ``p.x`` when ``p/x.py`` exists, else the package ``p`` itself, whose ``__init__`` defines ``x``);
* ``from p import x`` is ``p.x`` when that is a module, else ``p``; ``import p.q.r`` is the
  longest of ``p.q.r``, ``p.q``, ``p`` that is a module of the tree;
* the lazy export tables of a package (``lazy_exports(__name__, TABLE, ...)`` or a table read
  with ``importlib.import_module``): each submodule a table names is imported by the package, and
  registry strings ``"pkg.module:Name"`` in such a module name the modules they load.

Importing ``p.q`` also runs ``p/__init__.py``; that implicit parent import is not an edge (every
submodule would otherwise be in a cycle with a package ``__init__`` that re-exports it), but an
explicit ``from p import name`` of the package is one. Imports of modules outside the tree
(the standard library, third-party packages) are not edges.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import networkx as nx


@dataclass(frozen=True)
class Edge:
    """``importer`` imports ``imported`` at ``path:line``."""

    importer: str
    imported: str
    path: Path
    line: int

    def where(self, root: Path) -> str:
        try:
            return f"{self.path.relative_to(root)}:{self.line}"
        except ValueError:
            return f"{self.path}:{self.line}"


def module_files(root: Path, tops: Iterable[str]) -> dict[str, Path]:
    """Every module under the top-level folders ``tops`` of ``root``: dotted name -> file.

    A folder's ``__init__.py`` is the package's module (``p/__init__.py`` -> ``p``). A top folder
    without ``__init__.py`` (a folder of scripts) still names its modules ``top.script``.
    """
    out: dict[str, Path] = {}
    for top in tops:
        base = root / top
        if not base.is_dir():
            raise FileNotFoundError(f"{base}: no such package folder")
        for path in sorted(base.rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if any(p.startswith(".") or p == "__pycache__" for p in parts):
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _resolve(name: str, modules: Mapping[str, Path]) -> str | None:
    """The longest prefix of the dotted ``name`` that is a module of the tree."""
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        cand = ".".join(parts[:n])
        if cand in modules:
            return cand
    return None


def _package_of(module: str, path: Path) -> str:
    """The package a relative import of ``module`` starts from (the module itself for an ``__init__``)."""
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _strings(node: ast.AST) -> list[str]:
    """The string constants among the values of a dict literal or a dict comprehension, and the
    ``"module:attr"`` strings anywhere in a tuple or list literal (a table of registry specs)."""
    if isinstance(node, ast.Dict):
        return [v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str)]
    if (
        isinstance(node, ast.DictComp)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    ):
        return [node.value.value]
    if isinstance(node, (ast.Tuple, ast.List)):  # a table of specs: their "module:attr" strings
        return [
            c.value
            for c in ast.walk(node)
            if isinstance(c, ast.Constant) and isinstance(c.value, str) and c.value.count(":") == 1
        ]
    return []


def _dynamic_targets(tree: ast.Module) -> list[tuple[str, int, bool]]:
    """``(name, line, relative)`` for what a module's lazy export tables and registries name.

    Only in a module that calls ``lazy_exports`` or ``importlib.import_module``: the string values
    of its module-level dict tables. A value without a dot or colon is a relative submodule of a
    lazy table; ``"a.b"`` or ``"a.b:Name"`` is an absolute module.
    """
    calls = {
        (n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", None))
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
    }
    if not calls & {"lazy_exports", "import_module"}:
        return []
    out = []
    for stmt in tree.body:
        value = stmt.value if isinstance(stmt, (ast.Assign, ast.AnnAssign)) else None
        for s in _strings(value) if value is not None else []:
            target = s.partition(":")[0]
            if target.isidentifier():
                out.append((target, stmt.lineno, True))
            elif target and all(p.isidentifier() for p in target.split(".")):
                out.append((target, stmt.lineno, False))
    return out


def module_edges(module: str, path: Path, modules: Mapping[str, Path]) -> list[Edge]:
    """Every edge from ``module`` (file ``path``) to another module of ``modules``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = _package_of(module, path)
    found: list[tuple[str | None, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((_resolve(a.name, modules), node.lineno) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".") if package else []
                keep = len(parts) - (node.level - 1)
                if keep <= 0:
                    raise ValueError(f"{path}:{node.lineno}: relative import beyond the top package")
                base = ".".join(parts[:keep] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.append((sub if sub in modules else _resolve(base, modules), node.lineno))
    for name, line, relative in _dynamic_targets(tree):
        target = f"{package}.{name}" if relative else name
        found.append((target if target in modules else None, line))
    return [
        Edge(module, target, path, line)
        for target, line in dict.fromkeys(found)
        if target is not None and target != module
    ]


def import_graph(root: Path, tops: Iterable[str]) -> tuple[nx.DiGraph, list[Edge]]:
    """The module graph of the packages ``tops`` under ``root`` and every import edge (one per
    import statement, so one graph edge may stand for several)."""
    modules = module_files(root, tops)
    edges = [e for name, path in modules.items() for e in module_edges(name, path, modules)]
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for e in edges:
        graph.add_edge(e.importer, e.imported)
    return graph, edges


def top(module: str) -> str:
    return module.partition(".")[0]


def layering_violations(
    edges: Iterable[Edge],
    allowed: Mapping[str, Iterable[str]],
    root: Path,
    entry_points: Mapping[str, Iterable[str]] | None = None,
) -> list[str]:
    """One line per import across packages that the layering does not allow.

    Args:
        edges: The import edges.
        allowed: Top package -> the top packages it may import (its own is always allowed). A
            package missing from the table may import nothing outside itself.
        root: Where paths are shown from.
        entry_points: Top package -> modules of packages it does not depend on that it may still
            import (each exactly, not its submodules).
    """
    entry_points = entry_points or {}
    out = []
    for e in edges:
        src, dst = top(e.importer), top(e.imported)
        if src == dst or dst in set(allowed.get(src, ())) or e.imported in set(entry_points.get(src, ())):
            continue
        may = sorted(set(allowed.get(src, ()))) + sorted(set(entry_points.get(src, ())))
        out.append(
            f"{e.where(root)}: {e.importer} imports {e.imported}, but {src} may import only "
            f"{', '.join(may) or 'nothing outside itself'}"
        )
    return out


def cycles(graph: nx.DiGraph, edges: Iterable[Edge], root: Path) -> list[str]:
    """One line per strongly connected set of modules (every import cycle lies in one), with one
    cycle through it spelled out as ``a (file:line) -> b (file:line) -> ... -> a``."""
    where: dict[tuple[str, str], str] = {}
    for e in edges:
        where.setdefault((e.importer, e.imported), e.where(root))
    out = []
    for scc in sorted(sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1):
        cycle = next(nx.simple_cycles(graph.subgraph(scc)))
        steps = [f"{a} ({where[(a, b)]})" for a, b in zip(cycle, cycle[1:] + cycle[:1])]
        out.append(
            f"{len(scc)} modules in a cycle ({', '.join(scc)}): " + " -> ".join(steps) + f" -> {cycle[0]}"
        )
    return out
