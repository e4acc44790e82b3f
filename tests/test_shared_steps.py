"""Issue 44: rivals that share steps, generic turns, an operating point that holds, fitting from what
the user has (the workflow alone, labelled logs), and one detector for the guard and Task 3."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from dialfork_dataset.workflow.roles import StepRole, TaskRoles, slot_concept, step_signatures
from dialfork_metrics.task3.workflow.fit import gold_labels
from dialfork_metrics.task3.workflow.generic import GENERIC_TURNS, as_task_step

# Turns any agent says, none of them a phrasing of workflow_generic.GENERIC_TURNS. Closings go after an
# outcome (before one, a closing is the skip-closing rule's); the others anywhere.
CLOSINGS = [
    "Goodbye",
    "Goodbye!",
    "Bye!",
    "Bye bye!",
    "Have a great day!",
    "Have a wonderful day!",
    "Take care, bye!",
    "Thanks for chatting, goodbye!",
    "Have a nice evening!",
    "Cheers, bye!",
    "All the best!",
    "Okay, thanks.",
    "Great, thanks!",
]
ANYWHERE = [
    "Let me check that for you.",
    "One moment please, I'm looking that up.",
    "Please hold on a second.",
    "Just a sec.",
    "I'll look that up now.",
    "Checking now...",
    "Let me pull that up.",
    "Bear with me for a moment.",
    "Got it!",
    "Ok, got it.",
    "Sounds good.",
    "Alright, noted.",
    "Thank you.",
    "Thanks!",
    "Sure thing.",
    "Of course.",
    "Noted.",
    "Absolutely.",
    "Thanks for your patience.",
]


# -- pure parts ------------------------------------------------------------------------------------
def test_slot_concepts_and_signatures():
    assert slot_concept("to_location") == slot_concept("destination") == "place"
    assert slot_concept("leaving_date", "date") == slot_concept("day", "weekday") == "date"
    assert slot_concept("number_of_adults") == slot_concept("travelers") == "count"
    assert slot_concept("cuisine") == "cuisine"
    roles = TaskRoles(
        "ride",
        {
            "hello": StepRole("hello", frozenset({"greeting"})),
            "ask_destination": StepRole("ask_destination", frozenset({"question"}), ("destination",)),
            "inform_booked": StepRole("inform_booked", frozenset({"outcome"}), (), ("destination",)),
            "confirm": StepRole("confirm", frozenset({"confirmation"}), (), ("destination",)),
        },
    )
    sig = step_signatures(roles)
    assert sig["ask_destination"] == {("question", "place")}
    assert sig["hello"] == {("greeting", "")} and sig["confirm"] == {("confirmation", "")}
    assert sig["inform_booked"] == frozenset()  # an outcome is its workflow's own


def test_a_generic_closing_is_the_tasks_closing_step():
    assert as_task_step("generic_closing", ["anything_else", "ride_bye"]) == "ride_bye"
    assert as_task_step("generic_closing", ["anything_else"]) == "anything_else"
    assert as_task_step("generic_filler", ["ride_bye"]) == "generic_filler"
    assert not set(CLOSINGS + ANYWHERE) & {t for v in GENERIC_TURNS.values() for t in v}
    assert len(CLOSINGS + ANYWHERE) >= 30


def test_gold_labels_keep_only_the_tasks_own_steps():
    r = {"system_nodes": ["a", "b", "zz"], "system_node_tasks": ["t", "u", "t"]}
    assert gold_labels(r, "t", 3, frozenset({"a", "b"})) == ["a", None, None]
    assert gold_labels({"system_nodes": ["a"]}, "t", 2, frozenset({"a"})) is None  # length mismatch
    assert gold_labels({"turns": []}, "t", 0, frozenset()) is None


# -- on STAR ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def star(star_dir):
    from dialfork_dataset.star import StarCorpus

    return StarCorpus(star_dir)


@pytest.fixture(scope="module")
def workflow_only(star):
    """The default detector fitted on STAR's workflows alone (no dialogue)."""
    from dialfork_metrics.task3.workflow.detector import WorkflowDetector

    return WorkflowDetector(workflow=star).fit(None)


@pytest.fixture(scope="module")
def data(template_corpus):
    from dialfork_metrics.task3 import load_examples

    return load_examples(template_corpus, "train"), load_examples(template_corpus, "test")


def test_fit_from_the_workflow_alone_reports_its_operating_point(workflow_only, star):
    det = workflow_only
    assert det.fit_kind_ == "workflow" and det.n_train_ == 0
    assert set(det.tasks) == set(star.tasks)
    op = det.operating_point_["weather"]
    assert op["estimate"].startswith("share of pseudo-dialogues")
    assert op["expected_false_alarm_rate"] is not None and 0 <= op["expected_false_alarm_rate"] <= 1
    assert op["threshold"] == det.thresholds_["weather"] == 0  # the default floor 0, applied as it is
    assert op["calibrated_on"] in ("own", "pooled")


@pytest.mark.parametrize("task", ["weather", "doctor_schedule", "bank_balance"])
def test_generic_turns_never_alarm(workflow_only, star, task):
    """At least 30 turns any agent says, replayed through monitors of three tasks: no alarm."""
    from dialfork_dataset.workflow.roles import derive_roles
    from dialfork_metrics.guard import Monitor
    from dialfork_metrics.task3.workflow.nodes import node_texts

    mon = Monitor(workflow_only, task=task)
    roles, texts = derive_roles(star.tasks[task]), node_texts(star.tasks[task])
    hello, outcome = texts[roles.with_role("greeting")[0]][0], texts[roles.with_role("outcome")[0]][0]
    raised = []
    for kind, turns in (("closing", CLOSINGS), ("anywhere", ANYWHERE)):
        for g in turns:
            s = mon.session()
            s.observe("user", "Hi")
            s.observe("system", hello)
            s.observe("user", "I need some help, please.")
            if kind == "closing":
                s.observe("system", outcome)
                s.observe("user", "Thanks, that's all.")
            v = s.observe("system", g)
            if v.raised or v.score > v.threshold:
                raised.append((g, round(v.score, 3), v.rule))
    assert raised == []


def test_generic_turns_alarmed_without_shared_steps(star):
    """The same turns through a detector without shared steps: the alarms this issue removed."""
    from dialfork_metrics.guard import Monitor
    from dialfork_metrics.task3.workflow.detector import WorkflowDetector

    det = WorkflowDetector(workflow=star, shared_steps=False).fit(None)
    mon = Monitor(det, task="weather")
    raised = 0
    for g in ANYWHERE:
        s = mon.session()
        s.observe("user", "Hi")
        s.observe("system", "Hello, how can I help?")
        s.observe("user", "I need some help, please.")
        raised += s.observe("system", g).score > 0
    assert raised >= 5


def test_a_shared_question_is_not_off_task(workflow_only):
    """Asking for a time is a step of many workflows: through the weather monitor, another task's
    time question is no evidence of another workflow, while an API-specific question is."""
    a = workflow_only.assigner_
    E = a.encode(["What time would you like the appointment?", "Could I get your PIN number, please?"])
    asg = a.assign("meeting_schedule", E)
    # the first is the meeting's own time question; the PIN question belongs to the bank tasks only
    assert asg.reasons[0] is None
    assert asg.reasons[1] == "off-task" and asg.rival[1].startswith("bank_")


def test_recalibrate_moves_the_threshold_both_ways_without_a_floor(data, star, caplog):
    """Fitted on template dialogues every calibrated threshold is below 0: with the floor (the
    default) a warning says it took over; without it the rate moves the thresholds and predictions."""
    from dialfork_metrics.task3.workflow.detector import WorkflowDetector

    train, test = data
    conformant = [d for d in train if d["hallucination_type"] is None]
    # 4 conformant fit dialogues a task here: a rate of at least 1 in 8 can be calibrated
    with caplog.at_level(logging.WARNING, logger="dialfork_metrics.task3.workflow.detector"):
        det = WorkflowDetector(workflow=star, false_alarm_rate=0.25).fit(conformant)
    op = det.operating_point_
    assert all(v["calibrated"] < 0 and v["floored"] and v["threshold"] == 0 for v in op.values())
    assert any("threshold floor" in r.getMessage() for r in caplog.records)
    strict = [det.predict(d) for d in test]
    det.recalibrate(0.2, threshold_floor=None)
    t_low = dict(det.thresholds_)
    p_low = [det.predict(d) for d in test]
    det.recalibrate(0.6)
    t_high = dict(det.thresholds_)
    p_high = [det.predict(d) for d in test]
    assert all(t_high[t] < t_low[t] < 0 for t in t_low)
    assert sum(p is not None for p in p_high) > sum(p is not None for p in p_low)
    assert p_low != strict or p_high != strict
    det.recalibrate(0.2)  # and back: the same thresholds as before
    assert det.thresholds_ == t_low


def test_few_fit_dialogues_borrow_strength(data, star):
    from dialfork_metrics.task3.workflow.detector import WorkflowDetector

    train, _ = data
    conformant = [d for d in train if d["hallucination_type"] is None]
    det = WorkflowDetector(
        workflow=star, threshold_floor=None, min_task_dialogues=1000, false_alarm_rate=0.25
    ).fit(conformant)
    assert {v["calibrated_on"] for v in det.operating_point_.values()} == {"pooled"}
    # the tail's shape is every task's, the level each task's own (its median)
    stats = det.calibration_stats_
    shift = np.median(stats["weather"]) - np.median(stats["doctor_schedule"])
    op = det.operating_point_
    assert op["weather"]["calibrated"] - op["doctor_schedule"]["calibrated"] == pytest.approx(shift, abs=1e-9)
    own = WorkflowDetector(
        workflow=star, threshold_floor=None, min_task_dialogues=1, false_alarm_rate=0.25
    ).fit(conformant)
    assert {v["calibrated_on"] for v in own.operating_point_.values()} == {"own"}


def test_system_nodes_change_the_fit(star, star_dir):
    """Labelled fit dialogues (system_nodes) join the labelled steps: the fit differs from the same
    dialogues unlabelled, and the labels are counted."""
    from dialfork_dataset.tracks.star_human import build_star_human_track
    from dialfork_metrics.task3.workflow.detector import WorkflowDetector

    track = build_star_human_track(star, tasks="weather,bank_balance", seed=0)
    fit = [r for r in track.split("train") if r["edit"] is None][:30]
    bare = [{k: v for k, v in r.items() if k not in ("system_nodes", "system_node_tasks")} for r in fit]
    labelled = WorkflowDetector(workflow=star).fit(fit)
    unlabelled = WorkflowDetector(workflow=star).fit(bare)
    n_sys = sum(len(r["system_nodes"]) for r in fit)
    assert labelled.fit_labels_["gold"] > 0.8 * n_sys and unlabelled.fit_labels_["gold"] == 0
    assert unlabelled.fit_labels_["self_trained"] + unlabelled.fit_labels_["unsure"] == n_sys
    a, b = labelled.assigner_, unlabelled.assigner_
    assert len(a.owners_) != len(b.owners_) or not np.array_equal(a.owners_, b.owners_)


def test_monitor_over_several_tasks_is_the_task3_detector(data, star):
    """Monitor.fit on the records of two tasks fits the same detector as the Task 3 wf fit on them."""
    from dialfork_metrics.guard import Monitor
    from dialfork_metrics.task3.workflow.detector import WorkflowDetector

    train, test = data
    conformant = [d for d in train if d["hallucination_type"] is None]
    det = WorkflowDetector(workflow=star).fit(conformant)
    with pytest.raises(ValueError, match="pass task=NAME"):
        Monitor.fit(conformant, workflow=star)
    for task in ("weather", "doctor_schedule"):
        mon = Monitor.fit(conformant, task=task, workflow=star)
        assert mon.detector.thresholds_ == det.thresholds_
        for d in [x for x in test if x["task"] == task][:12]:
            verdicts = mon.replay(d)
            assert verdicts[-1].first_alarm == det.predict(d), d["dialogue_id"]


def test_monitor_from_the_workflow_alone(star):
    from dialfork_metrics.guard import Monitor

    mon = Monitor.fit(task="weather", workflow=star)
    assert mon.workflow_aware and mon.task == "weather" and mon.detector.fit_kind_ == "workflow"
    s = mon.session()
    s.observe("user", "Hi, what's the weather in Paris tomorrow?")
    assert s.observe("system", "Would you like to join our loyalty programme?").alarm
    with pytest.raises(ValueError, match="learns from dialogues"):
        Monitor.fit(detector="ss+nc")
