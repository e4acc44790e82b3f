"""The practitioner's path (issue 51): a workflow file, ``guard fit --workflow`` with no data, ``guard
replay`` and ``task3 predict --workflow`` on minimal transcripts, and the reasons of the alarms.

The workflow file, the transcripts and the commands are read from docs/guard.md ("From a workflow
file alone"), so the page shows what runs here. Also: a named workflow that does not load raises
(file, line, what) instead of giving another detector; every guard alarm gives a reason; the fit's
expected false-alarm rate is printed (a warning above 10%); ``workflow validate`` refuses what the
fit refuses.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GUARD_MD = ROOT / "docs" / "guard.md"
MAIN = {
    "dialfork_dataset": "dialfork_dataset.__main__",
    "dialfork_metrics.guard": "dialfork_metrics.guard.__main__",
    "dialfork_metrics.task3": "dialfork_metrics.task3.__main__",
}


def _docs_files() -> dict[str, str]:
    """The files docs/guard.md shows under ``<!-- practitioner-path: NAME -->``."""
    text = GUARD_MD.read_text(encoding="utf-8")
    found = re.findall(r"<!-- practitioner-path: (\S+) -->\n```\w*\n(.*?)```", text, flags=re.S)
    return dict(found)


def _docs_commands() -> list[list[str]]:
    """The commands of the page's block that this test runs (the one whose skip names this file)."""
    text = GUARD_MD.read_text(encoding="utf-8")
    m = re.search(
        r'<!-- skip: next "tests/test_practitioner_path.py[^"]*" -->\n```bash\n(.*?)```', text, re.S
    )
    assert m, "docs/guard.md lost the practitioner's path commands"
    return [shlex.split(line) for line in m.group(1).splitlines() if line.startswith("python -m ")]


def _run(argv: list[str]) -> tuple[int, str, str]:
    """``python -m MODULE ARGS`` in this process: (exit status, stdout, stderr)."""
    import importlib

    assert argv[:2] == ["python", "-m"], argv
    main = importlib.import_module(MAIN[argv[2]]).main
    out, err = io.StringIO(), io.StringIO()
    handler = logging.StreamHandler(err)
    logging.getLogger().addHandler(handler)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = main(argv[3:])
            except SystemExit as e:  # argparse
                rc = e.code
    finally:
        logging.getLogger().removeHandler(handler)
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def path_run(tmp_path_factory):
    """The page's files written to a folder, and its four commands run there, in order."""
    import os

    folder = tmp_path_factory.mktemp("practitioner")
    files = _docs_files()
    assert set(files) == {"car_service.yaml", "transcripts.jsonl"}, set(files)
    for name, body in files.items():
        (folder / name).write_text(body, encoding="utf-8")
    old = os.getcwd()
    os.chdir(folder)
    try:
        results = [(cmd, *_run(cmd)) for cmd in _docs_commands()]
    finally:
        os.chdir(old)
    return folder, results


def test_the_docs_path_runs_end_to_end(path_run):
    folder, results = path_run
    assert [c[3] for c, *_ in results] == ["workflow", "fit", "replay", "predict"]
    for cmd, rc, out, err in results:
        assert rc == 0, (cmd, out, err)
    (_, _, v_out, v_err), (_, _, f_out, f_err), (_, _, r_out, _), (_, _, p_out, p_err) = results
    assert "car_service.yaml: valid (2 task(s)" in v_out
    # guard fit: fitted on the workflow alone, with its expected false-alarm rate and what it rests on
    assert "on the workflow workflow:car_service.yaml alone" in f_out
    assert re.search(
        r"task 'book_appointment': expected false-alarm rate \d+\.\d% \(\d+ of \d+ pseudo", f_out + f_err
    )
    assert (folder / "my_detector.monitor").is_file()
    # guard replay: the correct booking is silent, the skip alarms at its turn, with its reason
    blocks = {b.split(" ", 1)[0]: b for b in r_out.strip().split("\n\n")}
    assert "first alarm: none" in blocks["ok1"] and "first alarm: none" in blocks["notask1"]
    assert "first alarm: system turn 4" in blocks["skip1"]
    assert (
        "<-- first alarm (skip-requires: outcome 'book_confirmed' before slot 'day' was collected "
        "(expected step 'book_ask_day'))" in blocks["skip1"]
    )
    assert "1 of 3 dialogue(s) alarmed" in r_out
    # task3 predict on the same transcripts: the same first alarm, its rule in the report
    preds = {
        r["dialogue_id"]: r["prediction"]
        for r in map(json.loads, (folder / "my_results" / "predictions.jsonl").read_text().splitlines())
    }
    assert preds == {"ok1": None, "skip1": 4, "notask1": None}
    report = json.loads((folder / "my_results" / "predictions.jsonl.report.json").read_text())
    assert report["alarms"]["skip1"]["rule"] == "skip-requires" and report["alarms"]["skip1"]["slot"] == "day"
    exp = report["expected_false_alarm_rate"]["book_appointment"]
    assert exp["n"] >= 1 and 0 <= exp["rate"] <= 1 and "pseudo-dialogues" in exp["how"]
    assert "fitting wf on the workflow workflow:car_service.yaml alone" in p_err
    assert "expected false-alarm rate" in p_err


@pytest.fixture(scope="module")
def monitor(path_run):
    from dialfork_metrics.guard import Monitor

    folder, _ = path_run
    return Monitor.load(folder / "my_detector.monitor")


def test_every_alarm_gives_a_reason(monitor):
    """An alarm that breaks no dialogue-state rule still says why (off-task / unfamiliar)."""
    cases = [
        "What is your booking reference?",  # a step of the cancel task
        "Would you like to hear about our car insurance? It is very cheap this month.",
        "The capital of France is Paris and the Seine flows through it.",
    ]
    alarmed = 0
    for text in cases:
        s = monitor.session()
        s.observe("user", "Hi, I'd like to book a service for my car.")
        s.observe("system", "Hello, this is the car service. How can I help you?")
        s.observe("user", "I want to book.")
        v = s.observe("system", text)
        if v.raised:
            alarmed += 1
            assert v.rule is not None and v.rule["rule"] in ("off-task", "unfamiliar", "repeat", "order")
            assert v.rule["message"].startswith("system turn 2 ")
            if v.rule["rule"] == "unfamiliar":
                assert "fits no step of any task" in v.rule["message"]
            if v.rule["rule"] == "off-task":
                assert "'cancel_appointment:" in v.rule["message"]
    assert alarmed >= 1


def test_replay_fits_from_the_workflow_and_skips_other_tasks(path_run, tmp_path):
    folder, _ = path_run
    rows = [json.loads(x) for x in (folder / "transcripts.jsonl").read_text().splitlines()]
    rows.append({**rows[0], "dialogue_id": "cancel1", "task": "cancel_appointment"})
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    wf = f"workflow:{folder / 'car_service.yaml'}"
    rc, out, err = _run(
        ["python", "-m", "dialfork_metrics.guard", "replay", "--workflow", wf, "--task", "book_appointment",
         "--data", str(tmp_path / "t.jsonl"), "--dialogue", "skip1", "--dialogue", "cancel1"]
    )  # fmt: skip
    assert rc == 1, (out, err)  # a transcript of another task is not replayed: listed, exit 1
    assert "expected false-alarm rate" in out + err and "(not saved: no --monitor)" in out
    assert "first alarm: system turn 4" in out and "1 of 1 dialogue(s) alarmed" in out
    assert "not replayed: 1 dialogue(s) of another task" in err and "cancel1" in err


# -- a named workflow that does not load raises -------------------------------------------------------
@pytest.fixture(scope="module")
def broken(path_run, tmp_path_factory):
    folder, _ = path_run
    good = (folder / "car_service.yaml").read_text(encoding="utf-8")
    d = tmp_path_factory.mktemp("broken")
    (d / "badreq.yaml").write_text(
        good.replace(
            "requires: [customer_name, booking_reference]", "requires: [customer_name, booking_ref]"
        ),
        encoding="utf-8",
    )
    (d / "badyaml.yaml").write_text("format: dialfork-workflow/1\ntasks:\n  - name: x\n    steps: [a: b\n")
    lines = good.splitlines(keepends=True)
    i = lines.index("        say: What is your booking reference?\n")
    (d / "nosay.yaml").write_text("".join(lines[:i] + lines[i + 2 :]), encoding="utf-8")
    return {
        "missing": (d / "missing.yaml", r"missing\.yaml: no such workflow file"),
        "badyaml": (d / "badyaml.yaml", r"badyaml\.yaml:5: malformed YAML"),
        "badreq": (
            d / "badreq.yaml",
            r"badreq\.yaml:\d+: tasks\[1\]\.steps\[3\]\.requires: slot 'booking_ref'",
        ),
        "nosay": (
            d / "nosay.yaml",
            r"nosay\.yaml:\d+: tasks\[1\]\.steps\[2\]\.id: .*'cancel_ask_reference': no text",
        ),
    }


@pytest.mark.parametrize("case", ["missing", "badyaml", "badreq"])
def test_monitor_fit_raises_for_a_named_workflow_that_does_not_load(broken, case, path_run):
    from dialfork_metrics.guard import Monitor

    path, where = broken[case]
    folder, _ = path_run
    rows = [json.loads(x) for x in (folder / "transcripts.jsonl").read_text().splitlines()][:1]
    for dialogues in (rows, None):  # with dialogues or from the workflow alone: never another detector
        with pytest.raises(ValueError, match=where):
            Monitor.fit(dialogues, task="book_appointment", workflow=f"workflow:{path}", encoder=None)


@pytest.mark.parametrize("case", ["missing", "badreq"])
def test_the_clis_refuse_a_named_workflow_that_does_not_load(broken, case, path_run, tmp_path):
    folder, _ = path_run
    path, where = broken[case]
    rc, out, err = _run(
        ["python", "-m", "dialfork_metrics.guard", "fit", "--workflow", f"workflow:{path}",
         "--task", "book_appointment", "--out", str(tmp_path / "m.monitor")]
    )  # fmt: skip
    assert rc == 2 and re.search(where, err) and not (tmp_path / "m.monitor").exists()
    rc, out, err = _run(
        ["python", "-m", "dialfork_metrics.task3", "predict", "--workflow", f"workflow:{path}", "--data",
         str(folder / "transcripts.jsonl"), "--out", str(tmp_path / "p.jsonl"), "--no-progress"]
    )  # fmt: skip
    assert rc == 2 and re.search(where, err) and not (tmp_path / "p.jsonl").exists()


def test_workflow_validate_refuses_what_the_fit_refuses(broken):
    from dialfork_dataset.workflow.files import WorkflowCorpus
    from dialfork_metrics.task3.workflow.nodes import WorkflowTextError, node_texts

    path, where = broken["nosay"]
    rc, out, err = _run(["python", "-m", "dialfork_dataset", "workflow", "validate", str(path)])
    assert rc == 2 and re.search(where, err), err
    src = WorkflowCorpus(path)  # it opens (a backend writing its own turns can use it) ...
    with pytest.raises(WorkflowTextError, match="'cancel_ask_reference': no text"):  # ... the fit refuses it
        node_texts(src.task("cancel_appointment"))


def test_without_a_workflow_the_error_names_the_right_cause(monkeypatch, caplog):
    from dialfork_metrics.guard import Monitor
    from dialfork_metrics.guard.fitting import default_detector

    monkeypatch.delenv("DIALFORK_STAR_DIR", raising=False)
    with pytest.raises(ValueError, match="no dialogues and no workflow: fit from a workflow file alone"):
        Monitor.fit(None, task="book_appointment")
    with caplog.at_level(logging.WARNING, logger="dialfork_metrics.guard.monitor"):
        assert default_detector("book_appointment", None, has_dialogues=True) == "ss+nc"
    assert any("no workflow was named" in r.getMessage() for r in caplog.records)


# -- the expected false-alarm rate --------------------------------------------------------------------
def test_expected_false_alarm_rate_lines_warn_above_ten_percent():
    from dialfork_metrics.task3.fit_report import fit_report_lines, too_high

    class Wf:
        fit_kind_ = "cross_fit"
        operating_point_ = {
            "book": {"expected_false_alarm_rate": 0.5, "n": 6},
            "cancel": {"expected_false_alarm_rate": 0.0, "n": 6},
        }

    lines = fit_report_lines(Wf())
    assert lines[0].startswith(
        "task 'book': expected false-alarm rate 50.0% (3 of 6 conformant fit dialogues"
    )
    assert "WARNING: above 10%" in lines[0] and "WARNING" not in lines[1]
    assert too_high(Wf()) and not too_high(Wf(), ["cancel"])


def test_the_guard_refuses_a_registry_entry_without_guard():
    from dialfork_metrics.guard import Monitor

    class NotGuarded:  # named as the supervised reader, whose registry entry has guard=False
        name = "wf-sup"

        def step(self, state, speaker, embedding, task, text=None):
            raise NotImplementedError

    with pytest.raises(
        TypeError, match="'wf-sup' cannot run in the guard \\(its registry entry has guard=False\\)"
    ):
        Monitor(NotGuarded())


def test_guard_fit_reads_minimal_transcripts(path_run, tmp_path):
    """``guard fit --data FILE.jsonl`` reads the transcripts ``task3 predict`` reads (no source_id...);
    one without ``task`` is taken as ``--task``'s; the fit prints its expected false-alarm rate."""
    folder, _ = path_run
    rows = [json.loads(x) for x in (folder / "transcripts.jsonl").read_text().splitlines()]
    conformant = [r for r in rows if r["dialogue_id"] != "skip1"]
    assert [sorted(r) for r in conformant] == [["dialogue_id", "task", "turns"], ["dialogue_id", "turns"]]
    (tmp_path / "fit.jsonl").write_text("".join(json.dumps(r) + "\n" for r in conformant), encoding="utf-8")
    rc, out, err = _run(
        ["python", "-m", "dialfork_metrics.guard", "fit", "--workflow", f"workflow:{folder / 'car_service.yaml'}",
         "--data", str(tmp_path / "fit.jsonl"), "--task", "book_appointment", "--out", str(tmp_path / "m.monitor")]
    )  # fmt: skip
    assert rc == 0, (out, err)
    assert "on 2 dialogues of book_appointment; saved to" in out
    assert re.search(r"expected false-alarm rate \d+\.\d% \(\d+ of \d+ conformant fit dialogues", out + err)
    # forks are refused, at their line
    (tmp_path / "forks.jsonl").write_text(json.dumps({**rows[0], "hallucination_type": "SKIP"}) + "\n")
    rc, out, err = _run(
        ["python", "-m", "dialfork_metrics.guard", "fit", "--workflow", f"workflow:{folder / 'car_service.yaml'}",
         "--data", str(tmp_path / "forks.jsonl"), "--out", str(tmp_path / "f.monitor")]
    )  # fmt: skip
    assert rc == 2 and "forks.jsonl:1: 'ok1'" in err and "conformant dialogues only" in err
