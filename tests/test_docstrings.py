"""The public API documents itself: every function and class in a package's ``__all__`` has the
Google-style sections the API reference renders (issue 21).

* ``Args:`` (``Attributes:`` for a dataclass) when it takes parameters;
* ``Returns:`` (or ``Yields:``) when its body returns a value and it is not annotated ``-> None``;
* ``Raises:`` when its own body raises.

Read statically from each object's source with ``ast``: the check is about the docstring matching
the code, not about what the code does.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import textwrap

PACKAGES = ("dialfork_dataset", "generation", "dialfork_metrics", "leaderboard", "annotation")


def _public_objects():
    seen = set()
    for top in PACKAGES:
        root = importlib.import_module(top)
        modules = [root] + [importlib.import_module(i.name)
                            for i in pkgutil.walk_packages(root.__path__, top + ".") if i.ispkg]
        for mod in modules:
            for name in getattr(mod, "__all__", ()):
                obj = getattr(mod, name)
                if not (inspect.isfunction(obj) or inspect.isclass(obj)):
                    continue
                key = (obj.__module__, obj.__qualname__)
                if key not in seen:
                    seen.add(key)
                    yield obj


def _missing(obj) -> list[str]:
    doc = inspect.getdoc(obj) or ""
    if not doc:
        return ["docstring"]
    need = []
    try:
        params = [p for p in inspect.signature(obj).parameters if p not in ("self", "cls")]
    except (TypeError, ValueError):
        params = []
    if params and "Args:" not in doc and "Attributes:" not in doc:
        need.append("Args")
    if inspect.isfunction(obj):
        fn = ast.parse(textwrap.dedent(inspect.getsource(obj))).body[0]
        returns_none = isinstance(fn.returns, ast.Constant) and fn.returns.value is None
        if not returns_none and "Returns:" not in doc and "Yields:" not in doc and any(
                isinstance(n, ast.Return) and n.value is not None for n in ast.walk(fn)):
            need.append("Returns")
        if "Raises:" not in doc and any(isinstance(n, ast.Raise) for n in ast.walk(fn)):
            need.append("Raises")
    return need


def test_public_api_has_args_returns_raises():
    objects = list(_public_objects())
    assert len(objects) > 300  # the walk found the packages' exports
    missing = [f"{o.__module__}.{o.__qualname__}: {', '.join(m)}" for o in objects if (m := _missing(o))]
    assert not missing, f"{len(missing)} public objects lack docstring sections:\n" + "\n".join(missing)


def test_the_check_has_teeth():
    def undocumented(x: int) -> int:
        """Summary only."""
        if x < 0:
            raise ValueError("negative")
        return x

    assert _missing(undocumented) == ["Args", "Returns", "Raises"]
