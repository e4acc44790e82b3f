"""MkDocs hook: the API reference's lists of registry entries, made from the registries.

A page names a registry by a line ``<!-- registry: NAME -->``; the hook replaces it with the
entries of that registry's ``BUILTIN_*`` tuple, in registration order, so that a built-in entry
appears in the reference by being registered, with no page to edit (issue 52):

* ``metrics:pair`` / ``metrics:set``: ``::: dialfork_metrics.<name>`` for each built-in metric of
  that level whose function ``dialfork_metrics`` exports (``dialfork_metrics.registry.exports``);
* ``detectors``: ``::: dialfork_metrics.task3.<Class>`` for each detector class
  ``dialfork_metrics.task3`` exports (``dialfork_metrics.task3.registry.exports``);
* ``types``, ``backends``, ``source-kinds``: a table of the built-in hallucination types,
  generation backends and workflow source kinds.

Only the built-in tuples are read (``DIALFORK_PLUGINS`` is dropped): the reference documents what
ships.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

os.environ.pop("DIALFORK_PLUGINS", None)

MARKER = re.compile(r"^<!-- registry: ([a-z0-9:-]+) -->$", re.M)


def _directives(paths: list[str]) -> str:
    return "\n\n".join(f"::: {p}" for p in dict.fromkeys(paths))


def _metrics(level: str) -> str:
    from dialfork_metrics.registry import BUILTIN_METRICS, exports

    exported = exports()
    return _directives(
        [
            f"dialfork_metrics.{s.name}"
            for s in BUILTIN_METRICS
            if s.level == level and s.fn == f"dialfork_metrics.{exported.get(s.name)}:{s.name}"
        ]
    )


def _detectors() -> str:
    from dialfork_metrics.task3.registry import BUILTIN_DETECTORS, exports

    exported = exports()
    names = [s.factory.partition(":")[2] for s in BUILTIN_DETECTORS if isinstance(s.factory, str)]
    return _directives([f"dialfork_metrics.task3.{n}" for n in names if n in exported])


def _table(header: tuple[str, ...], rows: list[tuple[Any, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _code(value: Any) -> str:
    return f"`{value}`" if value not in (None, "") else ""


def _types() -> str:
    from dialfork_dataset.registry import resolve
    from dialfork_dataset.taxonomy import BUILTIN_TYPES

    rows = []
    for ref in BUILTIN_TYPES:
        t = resolve(ref, "built-in type")
        rows.append(
            (
                _code(t.code),
                t.name,
                "yes" if t.breaks_task else "no",
                "yes" if t.substitute else "no",
                _code(ref),
            )
        )
    return _table(("code", "name", "breaks the task", "substitute task", "entry"), rows)


def _backends() -> str:
    from generation.backends import BUILTIN_BACKENDS

    rows = [
        (_code(b.name), _code(b.target), "yes" if b.llm else "no", str(b.needs) or "")
        for b in BUILTIN_BACKENDS
    ]
    return _table(("name", "class", "LLM", "needs"), rows)


def _source_kinds() -> str:
    from dialfork_dataset.sources import BUILTIN_SOURCE_KINDS

    rows = [
        (
            _code(f"{k.name}:PATH"),
            k.describe,
            _code(k.opener if isinstance(k.opener, str) else k.opener.__name__),
        )
        for k in BUILTIN_SOURCE_KINDS
    ]
    return _table(("spec", "PATH is", "opener"), rows)


RENDERERS: dict[str, Callable[[], str]] = {
    "metrics:pair": lambda: _metrics("pair"),
    "metrics:set": lambda: _metrics("set"),
    "detectors": _detectors,
    "types": _types,
    "backends": _backends,
    "source-kinds": _source_kinds,
}


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """Replace each ``<!-- registry: NAME -->`` line with that registry's entries.

    Args:
        markdown: The page's Markdown.
        **kwargs: What MkDocs passes (page, config, files).

    Returns:
        The Markdown with every marker replaced.

    Raises:
        KeyError: A marker names no registry of :data:`RENDERERS`.
    """

    def render(m: re.Match[str]) -> str:
        if m.group(1) not in RENDERERS:
            raise KeyError(f"<!-- registry: {m.group(1)} -->: no such registry; known: {sorted(RENDERERS)}")
        return RENDERERS[m.group(1)]()

    return MARKER.sub(render, markdown)
