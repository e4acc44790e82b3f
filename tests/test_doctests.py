"""The examples in the docstrings of the Task 2 distance modules run (issue 36 item 4): every
``>>>`` line of :mod:`dialfork_metrics.distances` and :mod:`dialfork_metrics.dialogue` is executed
and its printed result compared, so an example cannot drift from the code. The dialogue-level
examples encode with the packaged MiniLM, as a reader running them would."""

from __future__ import annotations

import doctest
import importlib

import pytest

FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


@pytest.mark.parametrize(
    "module, at_least", [("dialfork_metrics.distances", 5), ("dialfork_metrics.dialogue", 6)]
)
def test_docstring_examples_run(module, at_least):
    mod = importlib.import_module(module)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    tests = [t for t in finder.find(mod, module) if t.examples]
    skipped = [t.name for t in tests for e in t.examples if e.options.get(doctest.SKIP)]
    assert not skipped, f"examples marked +SKIP do not run: {skipped}"
    for t in tests:
        runner.run(t)
    result = runner.summarize(verbose=False)
    assert len(tests) >= at_least, f"{module}: only {len(tests)} docstrings with examples"
    assert result.failed == 0, (
        f"{result.failed} of {result.attempted} examples of {module} failed (output above)"
    )
