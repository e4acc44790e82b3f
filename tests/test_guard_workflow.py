"""The guard with the workflow-aware detector (issue 39 item 6): alarms where the docs say, warns
when a conversation looks like another task, and keeps the monitor file and session state exact."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dialfork_metrics.guard import Monitor


@pytest.fixture(scope="module")
def star(star_dir):
    from dialfork_dataset.star import StarCorpus

    return StarCorpus(star_dir)


@pytest.fixture(scope="module")
def data(template_corpus):
    from dialfork_metrics.task3 import load_examples

    return load_examples(template_corpus, "train"), load_examples(template_corpus, "test")


@pytest.fixture(scope="module")
def monitor(star, data):
    train, _ = data
    return Monitor.fit([d for d in train if d["task"] == "weather"], workflow=star)


def test_default_monitor_is_workflow_aware_when_the_workflow_is_known(monitor, data, star, monkeypatch):
    assert monitor.workflow_aware and monitor.task == "weather"
    assert "wf" in repr(monitor)
    train, _ = data
    # no workflow to be found: the workflow-free detector, as before (Monitor.fit(records) keeps working)
    monkeypatch.delenv("DIALFORK_STAR_DIR", raising=False)
    plain = Monitor.fit([d for d in train if d["task"] == "weather"], order=3)
    assert not plain.workflow_aware
    monkeypatch.setenv("DIALFORK_STAR_DIR", str(star.path))
    assert Monitor.fit([d for d in train if d["task"] == "weather"]).workflow_aware


def test_loyalty_programme_offer_alarms(monitor):
    """docs/guard.md's in-process example: the agent offers a loyalty programme instead of asking."""
    s = monitor.session()
    s.observe("user", "Hi, what's the weather in Paris tomorrow?")
    v = s.observe("system", "Would you like to join our loyalty programme?")
    assert v.alarm and v.raised and v.first_alarm == 1
    assert v.score > v.threshold


def test_conformant_turns_do_not_alarm(monitor):
    s = monitor.session()
    for speaker, text in [
        ("user", "Hi there."),
        ("system", "Hello, how can I help?"),
        ("user", "I'd like the weather, please."),
        ("system", "For what day would you like the weather forecast?"),
        ("user", "Tuesday."),
        ("system", "For what location would you like the weather forecast?"),
        ("user", "Detroit."),
    ]:
        v = s.observe(speaker, text)
    assert not v.alarm and v.warning is None


def test_another_tasks_conversation_alarms_and_warns(monitor, data):
    """Replaying doctor_schedule dialogues through the weather monitor: alarms, and a warning naming
    the task they look like."""
    _, test = data
    doctor = [d for d in test if d["task"] == "doctor_schedule" and d["hallucination_type"] is None]
    assert doctor
    warned = 0
    for d in doctor:
        verdicts = monitor.replay(d)
        assert verdicts[-1].alarm
        warned += any(v.warning and "doctor" in v.warning for v in verdicts)
    assert warned >= len(doctor) // 2


def test_session_equals_the_detector_and_state_restores_exactly(monitor, data):
    _, test = data
    weather = [d for d in test if d["task"] == "weather"][:12]
    preds = monitor.detector.predict_many(weather)
    for d, p in zip(weather, preds):
        s = monitor.session()
        for i, t in enumerate(d["turns"]):
            if i == len(d["turns"]) // 2:  # save and resume halfway
                s = monitor.session(json.dumps(s.state()))
            s.observe(t["speaker"], t["text"])
        assert s.first_alarm == p


def test_monitor_file_round_trip(monitor, data, tmp_path):
    path = monitor.save(tmp_path / "weather.monitor")
    back = Monitor.load(path)
    assert back.workflow_aware and back.fingerprint == monitor.fingerprint and back.task == "weather"
    _, test = data
    d = next(d for d in test if d["task"] == "weather" and d["hallucination_type"] == "WIC")
    assert [v.to_dict() for v in back.replay(d)] == [v.to_dict() for v in monitor.replay(d)]


def test_bad_session_state_is_refused(monitor):
    s = monitor.session()
    s.observe("system", "Hello, how can I help?")
    st = s.state()
    bad = json.loads(json.dumps(st))
    bad["workflow"]["nodes"] = ["not_a_node"]
    with pytest.raises(ValueError, match="nodes must list nodes"):
        monitor.session(bad)
    bad = json.loads(json.dumps(st))
    bad["workflow"]["answered"] = [True, True]
    with pytest.raises(ValueError, match="answered"):
        monitor.session(bad)
    with pytest.raises(ValueError, match="embedding"):
        monitor.session().observe("system", "hi", embedding=np.zeros(3))


def test_readme_quickstart_4_fork_is_flagged_at_its_fork_turn(template_hub, star_dir, monkeypatch):
    """README Quickstart 4 plays the first weather WIC fork of the hub's test split through the proxy,
    with the monitor `guard replay --fit --data HUB --task weather` writes: the first alarm is the
    fork turn (the proxy's verdicts equal the in-process session's, tests/test_guard_proxy.py)."""
    from dialfork_metrics.task3 import load_examples

    monkeypatch.setenv("DIALFORK_STAR_DIR", str(star_dir))
    hub, _ = template_hub
    train = [d for d in load_examples(hub, "train") if d["task"] == "weather"]
    mon = Monitor.fit(train)  # what `guard replay --fit` does (wf: the workflow from $DIALFORK_STAR_DIR)
    assert mon.workflow_aware
    fork = next(d for d in load_examples(hub) if d["task"] == "weather" and d["hallucination_type"] == "WIC")
    assert mon.replay(fork)[-1].first_alarm == fork["fork_turn"]
    # and every weather WIC fork of the test split is caught, nearly all at its fork turn
    wic = [d for d in load_examples(hub) if d["task"] == "weather" and d["hallucination_type"] == "WIC"]
    firsts = [mon.replay(d)[-1].first_alarm for d in wic]
    assert all(f is not None and f >= d["fork_turn"] for f, d in zip(firsts, wic))
    assert np.mean([f == d["fork_turn"] for f, d in zip(firsts, wic)]) >= 0.75


#: docs/guard.md's and README Quickstart 4's procedure example: the forecast before the day was asked.
SKIPPED_DAY = [
    ("user", "Hi, I need a weather forecast."),
    ("system", "For what location would you like the weather forecast?"),
    ("user", "Chicago, please."),
    ("system", "It will be sunny all day in Chicago, with temperatures of around 20 degrees celsius."),
]


def test_a_skipped_question_alarms_and_names_the_rule_step_and_slot(monitor):
    """Issue 43 item 5: the verdict names the rule, the step expected and the slot missing."""
    s = monitor.session()
    for speaker, text in SKIPPED_DAY:
        v = s.observe(speaker, text)
    assert v.alarm and v.raised and v.first_alarm == 2
    assert v.rule["rule"] == "skip-requires"
    assert v.rule["node"] == "weather_inform_forecast"
    assert v.rule["slot"] == "day" and v.rule["expected"] == "weather_ask_day"
    assert "before slot 'day' was collected" in v.rule["message"]
    assert json.loads(json.dumps(v.to_dict()))["rule"]["rule"] == "skip-requires"
    # the detector says the same offline, and the whole dialogue alarms at the same turn
    det = monitor.detector
    rec = {"task": "weather", "turns": [{"speaker": a, "text": b} for a, b in SKIPPED_DAY]}
    (why,) = det.explain_many([rec])
    assert why["rule"] == "skip-requires" and why["system_turn"] == 2 and why["slot"] == "day"


def test_the_same_forecast_after_the_day_was_given_does_not_alarm(monitor):
    s = monitor.session()
    turns = [("user", "Hi, I need a weather forecast for Tuesday."), *SKIPPED_DAY[1:]]
    for speaker, text in turns:
        v = s.observe(speaker, text)
    assert not v.alarm and v.rule is None  # the day was volunteered


def test_a_saved_session_keeps_the_dialogue_state(monitor):
    s = monitor.session()
    for speaker, text in SKIPPED_DAY[:3]:
        s.observe(speaker, text)
    state = json.loads(json.dumps(s.state()))
    assert state["workflow"]["dialogue"]["filled"]["location"][0] == "answered"
    # what the slot reader reads the next user turn against travels with the session
    assert state["workflow"]["dialogue"]["system_text"] == SKIPPED_DAY[1][1]
    s2 = monitor.session(state=state)
    assert s2.state()["workflow"]["dialogue"] == state["workflow"]["dialogue"]
    v = s2.observe(*SKIPPED_DAY[3])
    assert v.rule["slot"] == "day"
    assert s2.state()["workflow"]["dialogue"]["system_text"] == SKIPPED_DAY[3][1]
    bad = json.loads(json.dumps(state))
    bad["workflow"]["dialogue"]["filled"]["location"] = ["told", "x", 3]
    with pytest.raises(ValueError, match="dialogue.filled"):
        monitor.session(state=bad)
    bad = json.loads(json.dumps(state))
    bad["workflow"]["dialogue"]["system_text"] = ["For what location?"]
    with pytest.raises(ValueError, match="dialogue.system_text"):
        monitor.session(state=bad)


def test_fit_refuses_forks_with_the_ids_and_the_fix(star, data):
    """Issue 46 item 5: docs/guard.md says forks are refused; the wf monitor took them silently."""
    train, test = data
    fork = next(d for d in test if d["task"] == "weather" and d["hallucination_type"] is not None)
    conf = [d for d in train if d["task"] == "weather"]
    with pytest.raises(ValueError, match="forks") as e:
        Monitor.fit([*conf, fork], workflow=star)
    assert fork["dialogue_id"] in str(e.value) and "hallucination_type is None" in str(e.value)


def test_guard_cli_without_a_workflow_names_the_flag(template_hub, monkeypatch, capsys, tmp_path):
    """Issue 46 item 5: the CLI's message names --workflow, not the Python argument workflow=."""
    from dialfork_metrics.guard.__main__ import main

    hub, _ = template_hub
    monkeypatch.delenv("DIALFORK_STAR_DIR", raising=False)
    rc = main(["fit", "--data", str(hub), "--task", "weather", "--out", str(tmp_path / "m.monitor")])
    err = capsys.readouterr().err
    assert rc == 2 and "--workflow star:PATH" in err and "workflow=" not in err


def test_an_off_task_alarm_gives_its_reason(monitor):
    """Issue 51 item 6: every alarm gives a reason; docs/guard.md's loyalty-programme offer names the
    rule (off-task: another task's step fits better, named; unfamiliar: no step of any task does)."""
    s = monitor.session()
    s.observe("user", "Hi, what's the weather in Paris tomorrow?")
    v = s.observe("system", "Would you like to join our loyalty programme?")
    assert v.raised and v.rule is not None
    assert v.rule["rule"] in ("off-task", "unfamiliar") and v.rule["message"].startswith("system turn 1 ")
    if v.rule["rule"] == "off-task":
        assert "of another task better than any step of 'weather'" in v.rule["message"]
    else:
        assert "fits no step of any task" in v.rule["message"]
    from dialfork_metrics.guard import Verdict

    assert Verdict.from_dict(v.to_dict()).rule == v.rule  # it travels in the proxy's JSON verdict


def test_a_named_workflow_that_does_not_load_raises_from_monitor_fit(data, tmp_path):
    train, _ = data
    weather = [d for d in train if d["task"] == "weather"]
    with pytest.raises(ValueError, match=r"missing\.yaml: no such workflow file"):
        Monitor.fit(weather, workflow=f"workflow:{tmp_path / 'missing.yaml'}")
    (tmp_path / "bad.yaml").write_text("format: dialfork-workflow/1\ntasks: [\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad\.yaml:\d+: malformed YAML"):
        Monitor.fit(weather, workflow=f"workflow:{tmp_path / 'bad.yaml'}")
