"""Griffe extension: render the Sphinx cross-reference roles of the docstrings as code.

The docstrings are read by two tools: ``help()``/IDEs, where Sphinx-style roles such as
``:class:`~dialfork_metrics.Encoder``` are the established convention, and mkdocstrings (Google
style), which does not know them and would print the role markup literally. Before the docstrings
are parsed, this extension rewrites each role to an inline code span with the name Sphinx would
show: ``:class:`~a.b.C``` -> ``C`` (the ``~`` keeps the last component), ``:func:`a.b``` ->
``a.b``, ``:meth:`fit <Detector.fit>``` -> ``fit``.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|data|attr|exc|obj|const|ref|term):`([^`]+)`")


def _shown(target: str) -> str:
    """The text Sphinx shows for a role's target."""
    explicit = re.fullmatch(r"(.+?)\s*<[^<>]+>", target)
    if explicit:
        return explicit.group(1)
    if target.startswith("~"):
        return target[1:].rsplit(".", 1)[-1]
    return target


def rewrite_roles(text: str) -> str:
    """``text`` with every Sphinx role replaced by a code span of its shown name."""
    return ROLE.sub(lambda m: f"`{_shown(m.group(1))}`", text)


class SphinxRoles(griffe.Extension):
    """Rewrites the roles of every docstring (see the module docstring)."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None and ":" in obj.docstring.value:
            obj.docstring.value = rewrite_roles(obj.docstring.value)
