"""The public API documents itself: every public function and class of every module of the
packages (not only their ``__all__``), and every public method of those classes, has the
Google-style sections the API reference renders (issues 21, 36):

* ``Args:`` (``Attributes:`` for a dataclass) when it takes parameters;
* ``Returns:`` (or ``Yields:``) when its body returns a value and it is not annotated ``-> None``;
* ``Raises:`` when its own body raises.

Read statically from each object's source with ``ast``: the check is about the docstring matching
the code, not about what the code does. Public means a name without a leading underscore, defined
in the module walked (re-exports are checked where they are defined); ``__main__`` modules (the
command lines, some of which run on import) are not walked.

The gaps that remain are listed in ``tests/docstring_gaps.txt`` (a ratchet): a new gap fails, and
so does a listed gap that was fixed (remove its line), so the list can only shrink.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import textwrap
from pathlib import Path

PACKAGES = ("dialfork_dataset", "generation", "dialfork_metrics", "leaderboard", "annotation")


GAPS_FILE = Path(__file__).with_name("docstring_gaps.txt")


def _modules():
    for top in PACKAGES:
        root = importlib.import_module(top)
        yield root
        for info in pkgutil.walk_packages(root.__path__, top + "."):
            if info.name.rsplit(".", 1)[-1] != "__main__":
                yield importlib.import_module(info.name)


def _public_objects():
    """``(qualified name, object)`` of every public function, class and method of a public class."""
    seen = set()
    for mod in _modules():
        for name, obj in vars(mod).items():
            if (
                name.startswith("_")
                or not (inspect.isfunction(obj) or inspect.isclass(obj))
                or obj.__module__ != mod.__name__
                # made at run time inside a function and cached in the module (datasets' builder
                # classes): present or not depending on what ran before, so the walk skips them
                or "<locals>" in obj.__qualname__
            ):
                continue
            members = [(obj.__qualname__, obj)]
            if inspect.isclass(obj):
                for mname, m in vars(obj).items():
                    m = m.__func__ if isinstance(m, staticmethod | classmethod) else m
                    if not mname.startswith("_") and inspect.isfunction(m):
                        members.append((f"{obj.__qualname__}.{mname}", m))
            for qualname, o in members:
                key = f"{mod.__name__}.{qualname}"
                if key not in seen:
                    seen.add(key)
                    yield key, o


def _read_gaps() -> dict[str, list[str]]:
    gaps = {}
    for line in GAPS_FILE.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, sections = line.partition(": ")
            gaps[key] = [x.strip() for x in sections.split(",")]
    return gaps


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
        if (
            not returns_none
            and "Returns:" not in doc
            and "Yields:" not in doc
            and any(isinstance(n, ast.Return) and n.value is not None for n in ast.walk(fn))
        ):
            need.append("Returns")
        if "Raises:" not in doc and any(isinstance(n, ast.Raise) for n in ast.walk(fn)):
            need.append("Raises")
    return need


def test_public_api_has_args_returns_raises():
    objects = list(_public_objects())
    assert len(objects) > 1000  # the walk found every module's functions, classes and methods
    names = {k for k, _ in objects}
    for key in (
        "dialfork_metrics.dialogue.score_pairs",
        "dialfork_metrics.setlevel.prd_curve",
        "dialfork_metrics.task3.streaming.detector.StreamingDetector.predict_many",
    ):
        assert key in names
    found = {k: m for k, o in objects if (m := _missing(o))}
    allowed = _read_gaps()
    new = [f"{k}: {', '.join(m)}" for k, m in found.items() if not set(m) <= set(allowed.get(k, ()))]
    assert not new, (
        f"{len(new)} public objects lack docstring sections (write them; "
        "tests/docstring_gaps.txt only lists older gaps):\n" + "\n".join(new)
    )
    fixed = [f"{k}: {', '.join(m)}" for k, m in allowed.items() if found.get(k) != m]
    assert not fixed, (
        f"{len(fixed)} lines of tests/docstring_gaps.txt are out of date (fixed or gone): "
        "write each line as below, or delete it when nothing is missing:\n"
        + "\n".join(
            f"{k}: {', '.join(found[k])}" if k in found else f"{k}: (delete)"
            for k in (x.partition(":")[0] for x in fixed)
        )
    )


def test_the_check_has_teeth():
    def undocumented(x: int) -> int:
        """Summary only."""
        if x < 0:
            raise ValueError("negative")
        return x

    assert _missing(undocumented) == ["Args", "Returns", "Raises"]
