"""``task3 predict --data FILE.jsonl``: your own transcripts into Task 3 (issue 46, item 2).

A file of transcripts needs only ``dialogue_id`` and ``turns`` (``task`` optional); every dialogue
in it is predicted and none is fitted on; every problem of the file is listed at its file:line;
``score`` reports the file's problems and those against the gold in one pass."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from dialfork_metrics.task3.io import TranscriptError, json_lines, read_predictions, read_transcripts

TURNS = [
    {"speaker": "user", "text": "Hi, what's the weather?"},
    {"speaker": "system", "text": "Which city?"},
    {"speaker": "user", "text": "Detroit."},
    {"speaker": "system", "text": "Sunny in Detroit."},
]


def _cli(*args: object) -> tuple[int, str, str]:
    from dialfork_metrics.task3.__main__ import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([str(a) for a in args])
    return rc, out.getvalue(), err.getvalue()


def _write(path: Path, rows: list[object]) -> Path:
    path.write_text(
        "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8"
    )
    return path


def test_minimal_records_are_all_predicted_without_corpus_fields(tmp_path):
    data = _write(
        tmp_path / "mine.jsonl",
        [
            {"dialogue_id": "a", "task": "weather", "turns": TURNS},
            {"dialogue_id": "b", "turns": [t["text"] for t in TURNS]},  # strings alternate from the user
        ],
    )
    out = tmp_path / "p.jsonl"
    rc, _, err = _cli("predict", "--data", data, "--detector", "first", "--out", out, "--no-progress")
    assert rc == 0, err
    assert [json.loads(x) for x in out.read_text().splitlines()] == [
        {"dialogue_id": "a", "prediction": 1},
        {"dialogue_id": "b", "prediction": 1},
    ]
    report = json.loads((tmp_path / "p.jsonl.report.json").read_text())
    assert report["n"] == 2 and report["skipped"] == {} and report["fit_data"] is None


def test_every_problem_is_listed_at_its_line_malformed_lines_first(tmp_path):
    rows: list[object] = [{"dialogue_id": f"d{i}", "turns": "not a list"} for i in range(25)]
    rows += ['{"dialogue_id": "x", "turns": [', {"dialogue_id": "d0", "turns": TURNS}]
    f = _write(tmp_path / "bad.jsonl", rows)
    with pytest.raises(TranscriptError) as ei:
        read_transcripts(f)
    errs = ei.value.errors
    # the malformed line: the column on that line (the end of the text, 32), not "column 1" of a next line
    assert errs[0] == f"{f}:26: malformed JSON (Expecting value at column 32); one JSON object per line"
    assert sum("expected a list of turns" in e for e in errs) == 25
    assert f"{f}:27: duplicate dialogue_id 'd0' (first at {f}:1)" in errs[-1]
    # the CLI lists them all (no "... and 7 more (see the exception's .errors)")
    rc, _, err = _cli("predict", "--data", f, "--detector", "first", "--out", tmp_path / "p.jsonl")
    listed = [x for x in err.splitlines() if x.startswith(f"  {f}:")]
    assert rc == 2 and len(listed) == 27 and "malformed JSON" in listed[0] and ".errors" not in err
    rc, _, err = _cli(
        "predict", "--data", f, "--detector", "first", "--out", tmp_path / "p.jsonl", "--max-errors", "5"
    )
    listed = [x for x in err.splitlines() if x.startswith(f"  {f}:")]
    assert rc == 2 and len(listed) == 5 and "22 more: run again with --max-errors 0" in err
    assert "malformed JSON" in listed[0]  # shown first, whatever the cap


def test_a_record_without_system_turn_or_with_a_bad_task_is_named(tmp_path):
    f = _write(
        tmp_path / "t.jsonl",
        [
            {"dialogue_id": "u", "turns": [{"speaker": "user", "text": "hello?"}]},
            {"dialogue_id": "v", "task": 3, "turns": TURNS},
            {"turns": TURNS},
        ],
    )
    with pytest.raises(TranscriptError) as ei:
        read_transcripts(f)
    assert [e.split(": ", 1)[0] for e in ei.value.errors] == [f"{f}:1", f"{f}:2", f"{f}:3"]
    assert "has no system turn" in ei.value.errors[0] and "task must be a task name" in ei.value.errors[1]


def test_json_lines_columns_and_byte_order_mark(tmp_path):
    f = tmp_path / "x.jsonl"
    f.write_bytes(b'\xef\xbb\xbf{"a": 1}\r\n{"b": ,}\r\n')
    got = list(json_lines(f))
    assert got[0] == (1, {"a": 1}, None)
    assert got[1][2] == f"{f}:2: malformed JSON (Expecting value at column 7); one JSON object per line"


def test_a_file_without_fit_data_is_refused_for_a_detector_that_learns(tmp_path):
    data = _write(tmp_path / "mine.jsonl", [{"dialogue_id": "a", "task": "weather", "turns": TURNS}])
    rc, _, err = _cli("predict", "--data", data, "--detector", "wf", "--out", tmp_path / "p.jsonl")
    assert rc == 2 and "none is fitted on" in err and "--fit-data CORPUS" in err and "--load-detector" in err
    assert not (tmp_path / "p.jsonl").exists()
    rc, _, err = _cli(
        "predict", "--data", data, "--detector", "first", "--split", "test", "--out", tmp_path / "p"
    )
    assert rc == 2 and "file of transcripts" in err and "drop --split" in err


class PerTaskDetector:
    """A detector with one model per fitted task (as a per-task streaming detector): always turn 1."""

    def __init__(self, **_: object):
        self.task_models_: dict[str, object] = {}  # the fitted attribute the CLI reads (trailing _)

    def fit(self, dialogues, **_: object):
        self.task_models_ = {d["task"]: object() for d in dialogues}
        return self

    def predict_many(self, dialogues, **_: object):
        for d in dialogues:  # a skipped dialogue never reaches the detector
            assert d.get("task") in (None, *self.task_models_), d
        return [1 for _ in dialogues]


@pytest.fixture
def per_task_detector():
    from dialfork_metrics.task3 import DetectorSpec
    from dialfork_metrics.task3 import registry as detector_registry

    detector_registry.register(DetectorSpec("per-task-test", "Per task", "other", PerTaskDetector))
    yield
    detector_registry.unregister("per-task-test")


def test_fit_data_fits_and_an_unknown_task_is_skipped_with_a_warning(tmp_path, per_task_detector, caplog):
    fit = _write(tmp_path / "fit.jsonl", [{"dialogue_id": "f1", "task": "weather", "turns": TURNS}])
    data = _write(
        tmp_path / "mine.jsonl",
        [
            {"dialogue_id": "w", "task": "weather", "turns": TURNS},
            {"dialogue_id": "p", "task": "pizza_order", "turns": TURNS},
            {"dialogue_id": "r", "turns": TURNS},  # no task: routed by the detector, predicted
        ],
    )
    out = tmp_path / "p.jsonl"
    with caplog.at_level("WARNING", logger="dialfork_metrics.task3"):
        rc, _, err = _cli(
            "predict", "--data", data, "--fit-data", fit, "--detector", "per-task-test", "--out", out
        )
    assert rc == 1, err
    assert [json.loads(x)["prediction"] for x in out.read_text().splitlines()] == [1, None, 1]
    report = json.loads((tmp_path / "p.jsonl.report.json").read_text())
    assert list(report["skipped"]) == ["p"] and "pizza_order" in report["skipped"]["p"]
    assert report["fit_data"] == str(fit)
    warning = "\n".join(r.getMessage() for r in caplog.records)
    assert "1 dialogue(s) not predicted" in warning and ": p (task(s) pizza_order)" in warning
    assert "--fit-data" in warning and "leave the 'task' field out" in warning
    # forks are no fit data
    forks = _write(
        tmp_path / "forks.jsonl",
        [{"dialogue_id": "f1", "task": "weather", "turns": TURNS, "hallucination_type": "GR"}],
    )
    rc, _, err = _cli(
        "predict", "--data", data, "--fit-data", forks, "--detector", "per-task-test", "--out", out
    )
    assert rc == 2 and f"{forks}:1: dialogue 'f1'" in err and "conformant dialogues only" in err


def test_score_reports_every_problem_in_one_pass_with_lines(tmp_path):
    gold = _write(
        tmp_path / "task3_gold.jsonl",
        [
            {"dialogue_id": i, "num_system_turns": 3, "hallucination_type": None, "fork_turn": None}
            for i in ("a", "b", "c")
        ],
    )
    preds = _write(
        tmp_path / "p.jsonl",
        [
            {"dialogue_id": "a", "prediction": 9},
            {"dialogue_id": "zz", "prediction": 1},
            '{"dialogue_id": "b", "prediction": 1,}',
            {"dialogue_id": "a", "prediction": None},
        ],
    )
    rc, _, err = _cli("score", preds, "--gold", gold)
    assert rc == 2
    lines = [x.strip() for x in err.splitlines()[1:]]
    assert lines[0].startswith(f"{preds}:3: malformed JSON")
    assert any(x.startswith(f"{preds}:1: dialogue 'a': prediction 9 outside 1..T (T=3") for x in lines)
    assert any(x.startswith(f"{preds}:2: unknown dialogue_id 'zz'") for x in lines)
    assert any(x.startswith(f"{preds}:4: duplicate dialogue_id 'a'") for x in lines)
    assert any(x.startswith(f"{preds}: no line for 2 of the 3 gold dialogue(s) ('b', 'c')") for x in lines)
    gold_rows = [json.loads(x) for x in gold.read_text().splitlines()]
    with pytest.raises(ValueError, match="outside 1..T"):
        read_predictions(preds, gold=gold_rows)


def test_a_corpus_too_small_to_split_says_so(tmp_path):
    from dialfork_metrics.task3 import load_examples

    rec = {
        "dialogue_id": "weather-1",
        "source_id": "weather-1",
        "scenario_id": "1",
        "task": "weather",
        "domain": "weather",
        "hallucination_type": None,
        "variant": None,
        "instruction": None,
        "substitute_task": None,
        "fork_position": None,
        "fork_turn": None,
        "num_system_turns": 4,
        "turns": TURNS * 2,
        "seed": 1,
        "generator": "template",
    }
    folder = tmp_path / "corpus"
    folder.mkdir()
    _write(folder / "weather.jsonl", [rec])
    with pytest.raises(ValueError) as ei:
        load_examples(folder, "train")
    assert "corresponds to no data" not in str(ei.value) and "split is empty" in str(ei.value)
    assert "--fit-data" in str(ei.value)


def test_malformed_json_names_its_column_without_a_doubled_at(tmp_path):
    """Issue 51: "Unterminated string starting at at column 17" (Python's message ends in "at")."""
    from dialfork_dataset.jsonl import json_error_text

    p = _write(tmp_path / "t.jsonl", ['{"dialogue_id": "a', {"dialogue_id": "b", "turns": TURNS}])
    with pytest.raises(TranscriptError) as e:
        read_transcripts(p)
    (err,) = e.value.errors
    assert (
        err == f"{p}:1: malformed JSON (Unterminated string starting at column 17); one JSON object per line"
    )
    try:
        json.loads('{"a": 1,\n  ')
    except json.JSONDecodeError as x:
        assert (
            json_error_text(x, line=True)
            == "Expecting property name enclosed in double quotes at line 2 column 3"
        )
    rc, _, err_text = _cli("predict", "--data", p, "--detector", "first", "--out", tmp_path / "p.jsonl")
    assert rc == 2 and "starting at column 17" in err_text and "at at" not in err_text
