"""Issue 45: a metric is its registry entry and its function. ``dialfork_metrics.load(NAME)`` of a
registered metric without a packaged folder makes its ``evaluate`` module from the entry on first use."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import toy_extensions

import dialfork_metrics
from dialfork_metrics import modules, registry
from dialfork_metrics.dialogue import score_pairs
from dialfork_metrics.module_folder import module_files

REFS = [["Book a table.", "For when?", "Tonight."], ["Weather?", "Which city?", "Paris.", "Sunny."]]
PREDS = [["Book a table.", "Pizza instead?", "No."], ["Weather?", "Which city?", "Paris.", "Rainy."]]


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """A pair and a set metric named ``toy_words`` registered for one test, and caches in tmp_path."""
    monkeypatch.setenv("DIALFORK_MODULES_CACHE", str(tmp_path / "dialfork-modules"))
    monkeypatch.setenv("HF_MODULES_CACHE", str(tmp_path / "hf-modules"))
    monkeypatch.setenv("HF_EVALUATE_OFFLINE", "1")
    registry.register(
        registry.MetricSpec("toy_words", "pair", "Toy words", core=toy_extensions.overlap_core, input="turns")
    )
    registry.register(
        registry.MetricSpec("toy_words", "set", "Toy words", core=len, fn=toy_extensions.set_overlap)
    )
    try:
        yield tmp_path
    finally:
        registry.unregister("toy_words", "pair")
        registry.unregister("toy_words", "set")


def test_a_registered_metric_loads_without_a_folder_of_its_own(toy):
    pytest.importorskip("evaluate")
    module = dialfork_metrics.load("toy_words")
    assert module.name == "toy_words"
    got = module.compute(predictions=PREDS, references=REFS)
    np.testing.assert_allclose(got["scores"], score_pairs(REFS, PREDS, ["toy_words"], None)["toy_words"])
    sets = dialfork_metrics.load("toy_words", level="set").compute(predictions=[PREDS], references=[REFS])
    assert sets["scores"] == [pytest.approx(toy_extensions.set_overlap(REFS, PREDS))]


def test_the_folder_is_the_entrys_written_once_in_the_cache(toy):
    path = modules.registered_module_path("toy_words")
    assert path.startswith(str(toy / "dialfork-modules"))
    files = {p.name: p.read_text(encoding="utf-8") for p in Path(path).iterdir()}
    assert files == module_files("toy_words", "pair")  # what new-module would write
    assert modules.registered_module_path("toy_words") == path  # reused, not rewritten
    assert modules.registered_module_path("toy_words", "set") != path
    assert not [p for p in (toy / "dialfork-modules").iterdir() if p.name.startswith(".partial-")]


def test_a_packaged_metric_keeps_its_folder_and_unknown_names_are_listed(toy):
    assert modules.registered_module_path("flowscore", "pair") == modules.module_path("flowscore")
    with pytest.raises(ValueError, match=r"unknown DialFork evaluate module or metric 'nope'.*toy_words"):
        modules.registered_module_path("nope")
    with pytest.raises(ValueError, match="level must be 'pair' or 'set'"):
        modules.registered_module_path("toy_words", "both")
    with pytest.raises(ValueError, match="drawn from a seed; it has no evaluate module"):
        modules.registered_module_path("random", "pair")
