"""The supervised streaming Task 3 detector ``wf-sup`` (issue 39, item 3(b))."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from dialfork_metrics.task3.supervised.detector import (
    FEATURES,
    SupervisedWorkflowDetector,
    TaskGraph,
    fit_turn_classifier,
    out_of_fold_probabilities,
    source_of,
    task_graph,
    turn_features,
    turn_labels,
)
from dialfork_metrics.task3.workflow.detector import WorkflowStructure

log = logging.getLogger(__name__)

# -- the array core -------------------------------------------------------------------------------------


def test_classifier_core_recovers_a_separable_rule():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, len(FEATURES)))
    y = (X[:, 3] - 0.5 * X[:, 7] > 0.2).astype(int)
    clf = fit_turn_classifier(X, y)
    X2 = rng.normal(size=(400, len(FEATURES)))
    y2 = (X2[:, 3] - 0.5 * X2[:, 7] > 0.2).astype(int)
    assert np.mean((clf.probability(X2) > 0.5) == y2) >= 0.95
    coef = clf.arrays["coef"]
    assert np.argmax(np.abs(coef)) == 3 and coef[3] > 0 and coef[7] < 0
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):  # a small fit: OpenMP threads only contend on a shared machine
        hgb = fit_turn_classifier(X[:200], y[:200], "hgb")
    assert np.mean((hgb.probability(X2) > 0.5) == y2) >= 0.8
    # out of fold: every row scored by a model that did not see its fold
    fold = np.arange(400) % 4
    oof = out_of_fold_probabilities(X, y, fold)
    assert oof.shape == (400,) and np.mean((oof > 0.5) == y) >= 0.95
    # one class only: a constant
    assert fit_turn_classifier(X[:5], np.zeros(5, int)).probability(X[:3]).tolist() == [0.0] * 3
    with pytest.raises(ValueError, match="model must be one of"):
        fit_turn_classifier(X, y, "svm")


def test_labels_sources_and_features_by_hand():
    assert turn_labels(5, 3).tolist() == [0, 0, 1, -1, -1]
    assert turn_labels(2, None).tolist() == [0, 0]
    with pytest.raises(ValueError, match="outside 1..2"):
        turn_labels(2, 3)
    assert source_of({"dialogue_id": "doctor_schedule-12-CSC-k3"}) == "doctor_schedule-12"
    assert source_of({"dialogue_id": "x-GR-k1", "source_id": "s"}) == "s"
    assert source_of([], 4) == "#4"
    st = WorkflowStructure(
        frozenset({"ask_day", "ask_city"}),
        {
            "hello": frozenset({"ask_day", "ask_city", "inform"}),
            "ask_day": frozenset({"ask_city", "inform"}),
            "ask_city": frozenset({"inform"}),
            "inform": frozenset(),
        },
        frozenset(),
    )
    g = TaskGraph(
        st,
        {
            "hello": frozenset(),
            "ask_day": frozenset(),
            "ask_city": frozenset({"ask_day"}),
            "inform": frozenset({"ask_day", "ask_city"}),
        },
        {
            "hello": frozenset({"ask_day"}),
            "ask_day": frozenset({"ask_city"}),
            "ask_city": frozenset({"inform"}),
            "inform": frozenset(),
        },
        frozenset({"hello"}),
    )
    nodes = ["hello", "ask_day", "inform", None, "ask_day"]
    own = np.array([0.9, 0.8, 0.7, 0.2, 0.9])
    X = turn_features(
        own,
        np.array([0.1, 0.2, -np.inf, 0.6, 0.1]),
        np.full(5, np.nan),
        nodes,
        [True] * 5,
        g,
        min_similarity=0.45,
        reject_margin=0.1,
    )
    col = {f: X[:, i].tolist() for i, f in enumerate(FEATURES)}
    assert col["missing_asks"] == [0, 0, 1, 0, 0]  # inform before ask_city was asked
    assert col["allowed_transition"] == [0, 1, 0, 0, 0]
    assert col["off_workflow"] == [0, 0, 0, 1, 0]
    assert col["anywhere_node"] == [1, 0, 0, 0, 0]
    assert col["repeat"] == [0, 0, 0, 0, 1]  # ask_day answered, asked again
    assert col["rival"][2] == -1.0 and col["train_similarity"] == own.tolist()
    assert col["previous_max_deviation"][0] == -1.0
    np.testing.assert_allclose(col["previous_max_deviation"][4], 0.6 - 0.2 - 0.1)  # rival beats own
    np.testing.assert_allclose(col["log_turn"], np.log(np.arange(1, 6)))
    # causal: the rows of a prefix do not change when turns are added
    Xp = turn_features(
        own[:3],
        np.array([0.1, 0.2, -np.inf]),
        np.full(3, np.nan),
        nodes[:3],
        [True] * 3,
        g,
        min_similarity=0.45,
        reject_margin=0.1,
    )
    np.testing.assert_allclose(Xp, X[:3])


def test_task_graph_on_star(star):
    g = task_graph(star.tasks["weather"])
    assert g.dominating_asks["weather_inform_forecast"] == {"weather_ask_day", "weather_ask_location"}
    assert g.next_actions["weather_ask_location"] == {"weather_inform_forecast"}  # through the query node
    assert {"hello", "weather_bye", "out_of_scope"} <= g.anywhere
    d = task_graph(star.tasks["doctor_schedule"])
    assert "doctor_ask_doctor_name" in d.dominating_asks["doctor_inform_booking_successful"]


# -- on the template corpus -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def star(star_dir):
    from dialfork_dataset.star import StarCorpus

    return StarCorpus(star_dir)


@pytest.fixture(scope="module")
def halves(template_corpus):
    """The labelled test split, half of the source dialogues (with their forks) on each side."""
    from dialfork_metrics.task3 import load_examples

    test = load_examples(template_corpus, "test")
    sources = sorted({source_of(r) for r in test})
    fit_sources = set(sources[::2])
    return (
        [r for r in test if source_of(r) in fit_sources],
        [r for r in test if source_of(r) not in fit_sources],
        load_examples(template_corpus, "train"),
    )


@pytest.fixture(scope="module")
def sup(star, halves):
    fit, held, _ = halves
    return SupervisedWorkflowDetector(workflow=star).fit(fit)


def _recall(rows, preds):
    forks = [(r["fork_turn"], p) for r, p in zip(rows, preds) if r["hallucination_type"]]
    at = np.mean([p == t for t, p in forks])
    after = np.mean([p is not None and p >= t for t, p in forks])
    fa = np.mean([p is not None for r, p in zip(rows, preds) if r["hallucination_type"] is None])
    return at, after, fa


def test_wf_sup_beats_wf_at_the_fork_turn_on_held_out_sources(star, sup, halves):
    from dialfork_metrics.task3 import make_detector

    fit, held, train = halves
    at, after, fa = _recall(held, sup.predict_many(held))
    wf = make_detector("wf", workflow=star).fit(train)
    wf_at, wf_after, wf_fa = _recall(held, wf.predict_many(held))
    log.info(
        "wf-sup: at t_k %.3f, at or after %.3f, false alarms %.3f; wf: %.3f, %.3f, %.3f",
        at,
        after,
        fa,
        wf_at,
        wf_after,
        wf_fa,
    )
    assert sup.n_forks_ > 0 and 0 < sup.threshold_ < 1
    assert sum(v.size for v in sup.calibration_stats_.values()) == sum(
        r["hallucination_type"] is None for r in fit
    )
    assert set(sup.thresholds_) == {"weather", "doctor_schedule"}
    assert at >= 0.6, at  # measured 0.81 (wf 0.53)
    assert at >= wf_at, (at, wf_at)
    assert after >= 0.7, after


def test_wf_sup_streaming_equals_offline(sup, halves):
    _, held, _ = halves
    rows = held[:10]
    dev = sup.turn_deviations(rows)
    for d, v in zip(rows, dev):
        s = sup.start(d["task"])
        for t in d["turns"]:
            s.update(t)
        np.testing.assert_allclose(s.deviations, v, atol=1e-9)
        assert s.flag == sup.predict(d)
    # without a task: routed among the fitted tasks, the stream still equals offline
    no_task = {"dialogue_id": rows[1]["dialogue_id"], "turns": rows[1]["turns"]}
    s = sup.start()
    for t in no_task["turns"]:
        s.update(t)
    assert s.flag == sup.predict(no_task)
    np.testing.assert_allclose(s.deviations, sup.turn_deviations([no_task])[0], atol=1e-9)
    with pytest.raises(KeyError, match="not in the workflow source"):
        sup.start("no_such_task")


def test_wf_sup_save_load_round_trip(sup, halves, tmp_path, star):
    from dialfork_metrics.task3 import load_detector

    _, held, _ = halves
    sup.save(tmp_path / "sup")
    back = load_detector(tmp_path / "sup")
    assert isinstance(back, SupervisedWorkflowDetector)
    assert back.threshold_ == sup.threshold_ and back.thresholds_ == sup.thresholds_
    assert back.predict_many(held[:20]) == sup.predict_many(held[:20])
    for a, b in zip(back.turn_deviations(held[:5]), sup.turn_deviations(held[:5])):
        np.testing.assert_allclose(a, b, atol=1e-12)
    assert not list((tmp_path / "sup").glob("*.pkl"))


def test_wf_sup_recalibrates_its_operating_point(sup, tmp_path):
    """``recalibrate`` (inherited from wf) moves wf-sup's thresholds too; it has no floor to set."""
    from dialfork_metrics.task3 import load_detector

    sup.save(tmp_path / "sup")
    det = load_detector(tmp_path / "sup")  # a copy: the module's fixture stays as fitted
    low, high = det.recalibrate(0.01).threshold_, det.recalibrate(0.5).threshold_
    assert high < low  # a higher false-alarm rate: a lower probability threshold
    assert det.false_alarm_rate == 0.5
    with pytest.raises(TypeError, match="has no threshold_floor"):
        det.recalibrate(0.1, threshold_floor=0.0)
    with pytest.raises(ValueError, match="false_alarm_rate"):
        det.recalibrate(2.0)
    assert det.false_alarm_rate == 0.5 and det.threshold_ == high  # a refused call changes nothing


def test_wf_sup_bad_input(star, halves):
    from dialfork_metrics.task3 import make_detector
    from dialfork_metrics.task3.streaming import NotFittedError

    fit, _, train = halves
    with pytest.raises(ValueError, match="no forked dialogues.*wf detector"):
        SupervisedWorkflowDetector(workflow=star).fit(train)
    with pytest.raises(ValueError, match="no conformant dialogues"):
        SupervisedWorkflowDetector(workflow=star).fit([r for r in fit if r["hallucination_type"]])
    for bad in ({"model": "svm"}, {"C": -1}, {"folds": 1}, {"false_alarm_rate": 0}, {"threshold_scope": "x"}):
        ((k, v),) = bad.items()
        with pytest.raises(ValueError, match=f"'{k}' parameter of SupervisedWorkflowDetector .* Got {v!r} "):
            make_detector("wf-sup", workflow=star, **bad).fit(fit)
    bad = [dict(r) for r in fit[:20]]
    fork = next(r for r in bad if r["hallucination_type"])
    fork["fork_turn"] = 99
    with pytest.raises(ValueError, match="valid fork_turn"):
        SupervisedWorkflowDetector(workflow=star).fit(bad)
    with pytest.raises(ValueError, match="without a 'task'"):
        SupervisedWorkflowDetector(workflow=star).fit(
            [{"turns": r["turns"], "hallucination_type": "GR"} for r in fit[:3]]
        )
    with pytest.raises(NotFittedError):
        SupervisedWorkflowDetector(workflow=star).predict(fit[0])


def test_wf_sup_hgb_is_not_saved_and_has_no_guard_step(sup, tmp_path):
    import copy

    from dialfork_metrics.task3.supervised.detector import TurnClassifier

    hgb = copy.copy(sup)
    hgb.classifier_ = TurnClassifier("hgb")  # a boosted model: saving it would need pickle
    with pytest.raises(ValueError, match="model='logistic'"):
        hgb.save(tmp_path / "hgb")
    assert not (tmp_path / "hgb").exists()
    with pytest.raises(NotImplementedError, match="start"):
        sup.step(None, "system", np.zeros(3), "weather")


def test_wf_sup_leave_task_out(star, halves):
    """Fitted on weather's forks, it scores doctor_schedule (never seen) from the workflow alone."""
    fit, held, _ = halves
    det = SupervisedWorkflowDetector(workflow=star).fit([r for r in fit if r["task"] == "weather"])
    assert det.forked_tasks_ == ["weather"]
    rows = [r for r in held if r["task"] == "doctor_schedule"]
    at, after, fa = _recall(rows, det.predict_many(rows))
    log.info(
        "leave-task-out weather -> doctor_schedule: at t_k %.3f, at or after %.3f, false alarms %.3f",
        at,
        after,
        fa,
    )
    assert after >= 0.6, after  # measured 0.94 (at t_k 0.94)
