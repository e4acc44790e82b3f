"""The shared foundations: one taxonomy, one collected-errors base, one atomic-write helper."""

import doctest
import os

import pytest

from dialfork_dataset import atomic, errors, taxonomy
from dialfork_dataset.atomic import atomic_path, write_json_atomic, write_text_atomic
from dialfork_dataset.errors import CollectedErrors


@pytest.mark.parametrize("module", [atomic, errors, taxonomy])
def test_doctests(module):
    result = doctest.testmod(module, verbose=False)
    assert result.attempted > 0 and result.failed == 0


def test_taxonomy_is_the_only_source_of_the_types():
    from dialfork_dataset import records
    from dialfork_metrics.task3 import scorer

    assert records.HALLUCINATION_TYPES == taxonomy.HALLUCINATION_TYPES == taxonomy.names()
    assert records.FORK_POSITIONS is taxonomy.FORK_POSITIONS
    assert set(taxonomy.TABLE4_ORDER) == set(taxonomy.HALLUCINATION_TYPES) == set(taxonomy.TYPE_NAMES)
    assert not hasattr(scorer, "TYPES")  # no copy of the list: every consumer reads the registry
    with pytest.raises(KeyError, match="registered: " + ", ".join(taxonomy.names())):
        taxonomy.display_name("XYZ")


def test_every_collected_error_class_shares_the_base():
    from dialfork_dataset.jsonl import JsonlError
    from dialfork_dataset.records import RecordError
    from dialfork_dataset.star import StarError
    from dialfork_metrics.task3.scorer import PredictionError
    from generation.engine import GenerationError

    for cls in (RecordError, StarError, JsonlError, GenerationError, PredictionError):
        assert issubclass(cls, CollectedErrors) and issubclass(cls, ValueError), cls
    e = PredictionError(["a", "b"])
    assert e.errors == ["a", "b"] and "2 error(s)" in str(e)
    with pytest.raises(RecordError) as ei:
        RecordError.raise_if([f"line {i}" for i in range(30)], "x.jsonl")
    assert len(ei.value.errors) == 30 and "... and 10 more" in str(ei.value)
    RecordError.raise_if([], "x.jsonl")  # nothing to raise


def test_atomic_write_leaves_old_file_and_no_temp_on_failure(tmp_path):
    out = tmp_path / "r.json"
    write_json_atomic(out, {"a": 1})
    with pytest.raises(RuntimeError), atomic_path(out) as tmp:
        tmp.write_text("half")
        raise RuntimeError("writer died")
    assert out.read_text() == '{\n  "a": 1\n}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_atomic_write_gives_the_mode_of_a_plain_open(tmp_path):
    write_text_atomic(tmp_path / "a.txt", "x")
    (tmp_path / "b.txt").write_text("x")
    assert os.stat(tmp_path / "a.txt").st_mode == os.stat(tmp_path / "b.txt").st_mode


def test_no_lazy_export_is_shadowed_by_a_submodule():
    """A lazily exported name that is also a submodule's name resolves to the *module* once any
    code imports that submodule (the import system sets the package attribute), e.g.
    ``from leaderboard import evaluate, submit`` gave the module ``leaderboard.submit``."""
    import importlib
    import pkgutil

    clashes = []
    for top in ("dialfork_dataset", "generation", "dialfork_metrics", "leaderboard", "annotation"):
        root = importlib.import_module(top)
        packages = [root] + [
            importlib.import_module(i.name)
            for i in pkgutil.walk_packages(root.__path__, top + ".")
            if i.ispkg
        ]
        for pkg in packages:
            exports = getattr(pkg, "_EXPORTS", None) or {}
            submodules = {i.name for i in pkgutil.iter_modules(pkg.__path__)}
            clashes += [f"{pkg.__name__}.{name}" for name in exports if name in submodules]
    assert not clashes, f"exported names that are also submodules: {clashes}"
    from leaderboard import evaluate, submit  # the case that was broken, in this order

    assert callable(evaluate) and callable(submit) and submit.__name__ == "submit"
