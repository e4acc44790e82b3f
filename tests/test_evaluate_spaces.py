"""The evaluate module Spaces, run as a Space runs them (``python app.py`` in the module folder),
and the ``task3`` module's agreement with the leaderboard on what a valid prediction is."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import urllib.request
from pathlib import Path

import pytest
from live_server import start_app, stop

import dialfork_metrics as dm
from dialfork_metrics import modules as M
from dialfork_metrics.modules.space import card_text, compute_json
from dialfork_metrics.task3.rows import check_prediction
from leaderboard.validate import check_line_object

ROOT = Path(__file__).resolve().parents[1]
HAS_GRADIO = importlib.util.find_spec("gradio") is not None

REFS = [
    {"num_system_turns": 5, "hallucination_type": None, "fork_turn": None},
    {"num_system_turns": 6, "hallucination_type": "GR", "fork_turn": 2},
]


def _space_checkout(name: str, tmp_path: Path) -> Path:
    """The module folder copied as a Space's repository is checked out: not under the module's name."""
    import shutil

    dest = tmp_path / "space"
    shutil.copytree(M.module_path(name), dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


@pytest.mark.skipif(not HAS_GRADIO, reason="gradio is not installed (pip install 'dialfork[leaderboard]')")
@pytest.mark.parametrize("name", M.available())
def test_space_app_starts_in_a_folder_of_another_name(name, tmp_path):
    """`cp -r dialfork_metrics/modules/<name> space && cd space && python app.py` (issue 37: it looked
    for space/space.py)."""
    folder = _space_checkout(name, tmp_path)

    def launch(port):
        return [sys.executable, "app.py"], {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH")))),
            "GRADIO_SERVER_NAME": "127.0.0.1",
            "GRADIO_SERVER_PORT": str(port),
            "GRADIO_ANALYTICS_ENABLED": "False",
            "HF_HUB_OFFLINE": "1",
            "HF_EVALUATE_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "HF_MODULES_CACHE": str(tmp_path / "modules"),
        }

    # started again on a fresh port if Gradio's own start-up checks (5 s, 3 s) miss under load
    proc, base, _ = start_app(launch, folder, tmp_path)
    try:
        with urllib.request.urlopen(f"{base}/config", timeout=60) as r:  # loopback only
            config = json.loads(r.read())
        values = json.dumps([c.get("props", {}).get("value") for c in config["components"]])
        title = card_text(folder).splitlines()[0].lstrip("# ").strip()
        assert title in values  # the metric card is shown
        # the module was loaded from the script beside app.py (copied into this run's module cache)
        assert list((tmp_path / "modules").rglob(f"{name}.py"))
    finally:
        stop(proc)  # the app's own PID


@pytest.mark.parametrize("name", M.available())
def test_the_module_script_is_found_by_its_own_name(name, tmp_path, monkeypatch):
    import evaluate

    from dialfork_metrics.modules.space import module_script

    monkeypatch.setenv("HF_EVALUATE_OFFLINE", "1")
    monkeypatch.setenv("HF_MODULES_CACHE", str(tmp_path / "modules"))
    folder = _space_checkout(name, tmp_path)
    script = module_script(folder)
    assert script == folder / f"{name}.py"
    assert evaluate.load(str(script)).name == name


def test_a_space_folder_without_one_module_script_is_refused(tmp_path):
    from dialfork_metrics.modules.space import module_script

    (tmp_path / "app.py").write_text("")
    with pytest.raises(FileNotFoundError, match="found none. Copy the whole module folder"):
        module_script(tmp_path)
    (tmp_path / "a.py").write_text("")
    (tmp_path / "b.py").write_text("")
    with pytest.raises(FileNotFoundError, match="found a.py, b.py"):
        module_script(tmp_path)


def test_compute_json_words_errors():
    task3 = dm.load("task3")
    res, msg = compute_json(task3, "[null, 3]", json.dumps(REFS))
    assert msg == "ok" and res["task3"] == pytest.approx(
        task3.compute(predictions=[None, 3], references=REFS)["task3"]
    )
    assert compute_json(task3, "[null, 3", json.dumps(REFS))[1].startswith("predictions is not valid JSON")
    assert "must be a JSON list" in compute_json(task3, "{}", json.dumps(REFS))[1]
    assert "has 1 items but references has 2" in compute_json(task3, "[1]", json.dumps(REFS))[1]
    deep = "[" * 100_000 + "]" * 100_000
    assert "could not be read" in compute_json(task3, deep, json.dumps(REFS))[1]
    res, msg = compute_json(task3, "[3.0, 3]", json.dumps(REFS))
    assert (
        res is None and "row 0: prediction is a float (3.0); turn indices are JSON integers (write 3)" in msg
    )


VALUES = [
    None,
    1,
    3,
    6,
    7,
    0,
    -1,
    -5,
    3.0,
    2.5,
    True,
    False,
    "3",
    "null",
    "abc",
    [1],
    {"a": 1},
    10**40,
    float("nan"),
    float("inf"),
]


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_task3_module_and_leaderboard_agree(value):
    """Same value, same T: the module and the leaderboard's line check accept or refuse it
    together, with the same words."""
    T = 6
    lb = [
        m
        for code, m, f in check_line_object({"dialogue_id": "d", "prediction": value}, "detector", T)
        if f == "prediction"
    ]
    problem = check_prediction(value, T)
    task3 = dm.load("task3")
    refs = [
        {"num_system_turns": T, "hallucination_type": "GR", "fork_turn": 2},
        {"num_system_turns": 5, "hallucination_type": None, "fork_turn": None},
    ]
    try:
        task3.compute(predictions=[value, None], references=refs)
        module_errors: list[str] = []
    except ValueError as e:
        module_errors = getattr(e, "errors", [str(e)])
    if problem is None:
        assert lb == [] and module_errors == []
    else:
        assert lb == [problem[1]] and module_errors == [f"row 0: {problem[1]}"]


def test_task3_module_numbers_rows_across_batches():
    task3 = dm.load("task3")
    task3.add_batch(predictions=[None], references=REFS[:1])
    with pytest.raises(ValueError, match=r"row 1: prediction is a boolean \(true\)"):
        task3.add_batch(predictions=[True], references=REFS[1:])
