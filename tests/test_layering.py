"""Arrows that run one way (issue 32): the import graph of the toolkit, read with ``ast``, follows
the layering, and no module imports itself back through others.

The layering (docs/development.md, "Packages and their dependencies"):

* ``dialfork_dataset`` imports no other package of the toolkit;
* ``generation`` imports ``dialfork_dataset``;
* ``dialfork_metrics`` imports ``dialfork_dataset``, and of ``generation`` only ``generation.api``
  (the LLM runtime and the simulator pieces its LLM detector, judge and agent audit use);
* ``leaderboard`` and ``annotation`` (the human-study tool), the top, import the three above and
  not each other; nothing in the toolkit imports them;
* ``benchmarks/`` and ``hf_spaces/`` are scripts above everything; nothing imports them.

Every import counts (module level, in a function, under ``TYPE_CHECKING``, lazy export tables);
see ``tests/import_graph.py`` for what an edge is.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import networkx as nx
import pytest
from import_graph import cycles, import_graph, layering_violations, module_edges, module_files

ROOT = Path(__file__).resolve().parents[1]

PACKAGES = ("dialfork_dataset", "generation", "dialfork_metrics", "leaderboard", "annotation")
CONSUMERS = ("benchmarks", "hf_spaces")

#: Top package -> the top packages it may import (besides itself).
ALLOWED: dict[str, tuple[str, ...]] = {
    "dialfork_dataset": (),
    "generation": ("dialfork_dataset",),
    "dialfork_metrics": ("dialfork_dataset",),
    "leaderboard": ("dialfork_dataset", "generation", "dialfork_metrics"),
    "annotation": ("dialfork_dataset", "generation", "dialfork_metrics"),
    "benchmarks": PACKAGES,
    "hf_spaces": PACKAGES,
}
#: Top package -> the single modules of a package it does not depend on that it may import.
ENTRY_POINTS: dict[str, tuple[str, ...]] = {"dialfork_metrics": ("generation.api",)}


@pytest.fixture(scope="module")
def tree():
    """The toolkit's import graph and its edges (walked once for the module's tests)."""
    return import_graph(ROOT, PACKAGES + CONSUMERS)


def test_the_layering_table_is_a_dag_with_nothing_above_the_top():
    g = nx.DiGraph([(a, b) for a, bs in ALLOWED.items() for b in bs])
    assert nx.is_directed_acyclic_graph(g)
    assert not [a for a in PACKAGES if {"leaderboard", "annotation", *CONSUMERS} & set(ALLOWED[a])]
    assert not [a for a, bs in ALLOWED.items() if set(CONSUMERS) & set(bs)]


def test_no_import_runs_against_the_layering(tree):
    graph, edges = tree
    by_top = {t: sum(1 for m in graph if m.partition(".")[0] == t) for t in PACKAGES + CONSUMERS}
    assert min(by_top.values()) >= 1 and graph.number_of_nodes() > 200 and graph.number_of_edges() > 600, (
        by_top
    )
    bad = layering_violations(edges, ALLOWED, ROOT, ENTRY_POINTS)
    assert not bad, f"{len(bad)} import(s) against the layering:\n" + "\n".join(bad)


def test_no_import_cycle_between_modules(tree):
    graph, edges = tree
    found = cycles(graph, edges, ROOT)
    assert not found, f"{len(found)} import cycle(s):\n" + "\n".join(found)


def test_the_walk_sees_every_kind_of_import_in_the_tree(tree):
    """The walk reads the imports that matter here, so a clean result is not an empty walk."""
    graph, _ = tree
    expected = [
        ("generation.backends.template.acts", "generation.backends.template.sim"),  # relative, module level
        ("dialfork_metrics.task3.llm.detector", "generation.api"),  # inside a method
        ("dialfork_metrics", "dialfork_metrics.task3"),  # a lazy export table (lazy_exports)
        ("generation.llm", "generation.llm.client"),  # a lazy table read with importlib
        # (a registry's "module:attr" strings are no import of the registry's module: the one resolver,
        # dialfork_dataset.registry.resolve, imports them when a consumer asks; issue 45)
        ("leaderboard.__main__", "leaderboard.leakcheck"),  # `from .audit import run_audit` in a function
        ("hf_spaces.leaderboard.app", "leaderboard.app"),  # a consumer script
    ]
    assert [e for e in expected if not graph.has_edge(*e)] == []
    # what metrics reaches in generation goes through generation.api only
    reached = {b for a, b in graph.edges if a.startswith("dialfork_metrics") and b.startswith("generation")}
    assert reached == {"generation.api"}


# ---- the checks themselves, on a tree written here ----------------------------------------------


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text), encoding="utf-8")


def test_checks_report_a_known_cycle_and_a_known_upward_import(tmp_path):
    _write(
        tmp_path,
        {
            "low/__init__.py": """\
            from .lazy import lazy_exports
            _EXPORTS = {"Thing": "a"}
            __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
            """,
            "low/lazy.py": "def lazy_exports(*a):\n    return None, None\n",
            "low/a.py": "from .b import helper\n",  # a -> b
            "low/b.py": """\
            import os


            def helper():
                from . import a  # b -> a, inside a function: still a cycle
                return a, os
            """,
            "low/c.py": """\
            from typing import TYPE_CHECKING

            if TYPE_CHECKING:
                from high.top import Top  # c -> high.top: upward, even if only for the type checker
            """,
            "low/sub/__init__.py": "",
            "low/sub/d.py": "from .. import c\nfrom ..a import helper\n",  # two levels: low.c, low.a
            "high/__init__.py": "",
            "high/top.py": "import low.a\nimport json\n",  # allowed: high -> low
        },
    )
    modules = module_files(tmp_path, ("low", "high"))
    assert set(modules) == {
        "low",
        "low.lazy",
        "low.a",
        "low.b",
        "low.c",
        "low.sub",
        "low.sub.d",
        "high",
        "high.top",
    }
    graph, edges = import_graph(tmp_path, ("low", "high"))
    assert set(graph.edges) == {
        ("low", "low.lazy"),
        ("low", "low.a"),
        ("low.a", "low.b"),
        ("low.b", "low.a"),
        ("low.c", "high.top"),
        ("low.sub.d", "low.c"),
        ("low.sub.d", "low.a"),
        ("high.top", "low.a"),
    }

    bad = layering_violations(edges, {"low": (), "high": ("low",)}, tmp_path)
    assert bad == ["low/c.py:4: low.c imports high.top, but low may import only nothing outside itself"]
    assert layering_violations(edges, {"low": ("high",), "high": ("low",)}, tmp_path) == []
    assert layering_violations(edges, {"low": (), "high": ("low",)}, tmp_path, {"low": ("high.top",)}) == []

    found = cycles(graph, edges, tmp_path)
    assert len(found) == 1 and found[0].startswith("2 modules in a cycle (low.a, low.b): ")
    assert (
        "low.a (low/a.py:1) -> low.b (low/b.py:5) -> low.a" in found[0]
        or "low.b (low/b.py:5) -> low.a (low/a.py:1) -> low.b" in found[0]
    )


def test_relative_imports_resolve_to_modules_or_their_package(tmp_path):
    _write(
        tmp_path,
        {
            "p/__init__.py": "VALUE = 1\n",
            "p/q/__init__.py": "from .. import VALUE\nfrom . import r\n",  # p (a name of p), p.q.r (a module)
            "p/q/r.py": "from .. import q\nimport p.q.missing\nfrom p.q.r import nothing\n",
            "p/q/deep.py": "from .... import x\n",
        },
    )
    modules = module_files(tmp_path, ("p",))
    edges = {(e.imported, e.line) for e in module_edges("p.q", modules["p.q"], modules)}
    assert edges == {("p", 1), ("p.q.r", 2)}
    edges = {(e.imported, e.line) for e in module_edges("p.q.r", modules["p.q.r"], modules)}
    assert edges == {("p.q", 1), ("p.q", 2)}  # the longest existing prefix; a self-import is no edge
    with pytest.raises(ValueError, match=r"deep.py:1: relative import beyond the top package"):
        module_edges("p.q.deep", modules["p.q.deep"], modules)
