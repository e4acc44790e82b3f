"""Node assignment with rejection and the workflow-aware Task 3 detector (issue 39)."""

from __future__ import annotations

import numpy as np
import pytest

from dialfork_metrics.task3.workflow.detector import (
    WorkflowDetector,
    WorkflowStructure,
    first_alarm,
    order_flags,
    order_pairs,
    repeat_flags,
    turn_deviations,
)
from dialfork_metrics.task3.workflow.nodes import (
    NodeAssigner,
    WorkflowTextError,
    assign_rows,
    node_similarities,
    node_texts,
)

# -- pure functions on arrays ------------------------------------------------------------------------


def test_node_similarities_is_the_best_text_of_each_node():
    rng = np.random.default_rng(0)
    E = rng.normal(size=(5, 8))
    P = rng.normal(size=(7, 8))
    E /= np.linalg.norm(E, axis=1, keepdims=True)
    P /= np.linalg.norm(P, axis=1, keepdims=True)
    owners = np.array([2, 0, 2, 1, 0, 2, 1])
    S = node_similarities(E, P, owners, 4)
    naive = np.array(
        [
            [max((E[i] @ P[r] for r in range(7) if owners[r] == n), default=-np.inf) for n in range(4)]
            for i in range(5)
        ]
    )
    np.testing.assert_allclose(S, naive)
    assert np.isneginf(S[:, 3]).all()  # a node without texts


def test_assign_rows_rejects_unfamiliar_and_off_task_turns():
    own = np.array([True, True, False, False])
    rival = np.array([False, False, True, False])  # node 3: another task's generic node
    S = np.array(
        [
            [0.9, 0.1, 0.2, 0.95],  # generic rival ignored: assigned to 0
            [0.6, 0.2, 0.75, 0.0],  # rival better by 0.15 >= 0.1: rejected
            [0.6, 0.2, 0.65, 0.0],  # rival better by 0.05 < 0.1: kept
            [0.3, 0.2, 0.1, 0.0],
        ]
    )  # below the floor: rejected
    node, own_sim, rival_sim, rival_node = assign_rows(S, own, rival, 0.45, 0.1)
    assert node.tolist() == [0, -1, 0, -1]
    np.testing.assert_allclose(own_sim, [0.9, 0.6, 0.6, 0.3])
    assert rival_node.tolist() == [2, 2, 2, 2]


def test_turn_deviations_and_first_alarm_hand_worked():
    own = np.array([0.9, 0.5, 0.6, 0.3])
    rival = np.array([0.1, 0.7, 0.65, -np.inf])
    d = turn_deviations(
        own, rival, np.array([0, 0, 1, 0]), min_similarity=0.45, reject_margin=0.1, repeat_weight=1.0
    )
    np.testing.assert_allclose(d, [-0.45, 0.1, 0.95, 0.15], atol=1e-12)
    assert first_alarm(d, 0.12) == 3
    assert first_alarm(d, 0.0) == 2
    assert first_alarm(d, 5.0) is None


def test_repeat_flags_clarification_loops_and_dead_ends():
    st = WorkflowStructure(
        asks=frozenset({"ask_day", "ask_city"}),
        leads_to={
            "ask_day": frozenset({"ask_city", "inform", "unavailable"}),
            "ask_city": frozenset({"inform", "unavailable", "ask_day"}),
            "inform": frozenset(),
            "unavailable": frozenset({"ask_day", "ask_city", "inform"}),
            "sorry": frozenset(),
        },
        resets=frozenset({"sorry"}),
        failures=frozenset({"unavailable"}),
    )
    days = ["ask_day", "ask_city", "ask_day"]
    # the graph leads back from ask_city to ask_day, but that loop was not taken: a repeat
    assert repeat_flags(days, [True] * 3, st).tolist() == [0, 0, 1]
    assert repeat_flags(["ask_day", "ask_day"], [True] * 2, st).tolist() == [0, 0]  # clarification
    assert repeat_flags(days, [False, True, True], st).tolist() == [0, 0, 0]
    assert repeat_flags(["ask_day", "sorry", "ask_day"], [True] * 3, st).tolist() == [0, 0, 0]  # start over
    assert repeat_flags(days, [True] * 3, st, {"ask_day"}).tolist() == [0, 0, 0]
    # the loop taken: a failure outcome in between, or the user said no from the question on
    assert repeat_flags(["ask_day", "unavailable", "ask_day"], [True] * 3, st).tolist() == [0, 0, 0]
    assert repeat_flags(days, [True] * 3, st, declined=[False, True, False]).tolist() == [0, 0, 0]
    assert repeat_flags(days, [True] * 3, st, declined=[True, False, False]).tolist() == [0, 0, 0]
    assert repeat_flags(days, [True] * 3, st, declined=[False, False, True]).tolist() == [0, 0, 1]


def test_workflow_structure_names_the_failure_steps(star):
    from dialfork_metrics.task3.workflow.rules import workflow_structure

    st = workflow_structure(star.task("weather"))
    assert st.failures == {"weather_inform_nothing_found"}
    st = workflow_structure(star.task("meeting_schedule"))
    assert "meeting_inform_unavailable_ask_different_time" in st.failures
    assert not st.failures & {"meeting_ask_day", "hello", "anything_else"}


_ORDER = WorkflowStructure(
    asks=frozenset({"ask_day", "ask_city"}),
    leads_to={
        "hello": frozenset({"ask_day", "ask_city", "query", "inform", "bye"}),
        "ask_day": frozenset({"ask_city", "query", "inform", "bye"}),
        "ask_city": frozenset({"query", "inform", "bye"}),
        "query": frozenset({"inform", "bye"}),
        "inform": frozenset({"bye"}),
        "bye": frozenset(),
        "sorry": frozenset(),
    },
    resets=frozenset({"sorry", "bye"}),
)


def test_order_flags_hand_worked():
    # the workflow's order, and its two questions swapped (slots may come in any order): nothing
    assert order_flags(["hello", "ask_day", "ask_city", "inform", "bye"], _ORDER).tolist() == [0] * 5
    assert order_flags(["hello", "ask_city", "ask_day", "inform"], _ORDER).tolist() == [0] * 4
    # SSPC reverse / jump: the outcome first, then the questions it needed
    assert order_flags(["hello", "inform", "ask_city", "ask_day"], _ORDER).tolist() == [0, 0, 1, 1]
    # a greeting after two steps goes back; after one it is only late; off-workflow turns are skipped
    assert order_flags(["ask_day", None, "ask_city", "hello"], _ORDER).tolist() == [0, 0, 0, 1]
    assert order_flags(["ask_day", "hello", "ask_city"], _ORDER).tolist() == [0, 0, 0]
    assert order_flags(["ask_day", "hello"], _ORDER, min_before_start=1).tolist() == [0, 1]
    # a dead end starts the conversation over; an allowed back step never counts
    assert order_flags(["hello", "inform", "sorry", "ask_day"], _ORDER).tolist() == [0, 0, 0, 0]
    assert order_flags(["hello", "inform", "ask_day"], _ORDER, {("inform", "ask_day")}).tolist() == [0, 0, 0]
    # a repeat of the same step is the repeat rule's, not this one's
    assert order_flags(["ask_day", "ask_city", "ask_day"], _ORDER).tolist() == [0, 0, 0]


def test_order_pairs_are_what_order_flags_flags():
    nodes = ["hello", "ask_day", "inform", "ask_city", "ask_day", "sorry", "ask_day"]
    pairs = order_pairs(nodes, _ORDER)
    assert pairs == {("inform", "ask_city"), ("inform", "ask_day")}
    assert order_flags(nodes, _ORDER).tolist() == [0, 0, 0, 1, 1, 0, 0]
    assert order_flags(nodes, _ORDER, pairs).tolist() == [0] * 7
    assert order_pairs(["hello", "ask_day", "inform", "bye"], _ORDER) == set()


def test_turn_deviations_adds_the_order_weight():
    own, rival = np.array([0.9, 0.8, 0.7]), np.array([0.1, 0.1, -np.inf])
    d = turn_deviations(
        own,
        rival,
        np.array([0, 1, 0]),
        order=np.array([0, 1, 1]),
        min_similarity=0.45,
        reject_margin=0.1,
        repeat_weight=0.5,
        order_weight=1.0,
    )
    np.testing.assert_allclose(d, [-0.45, -0.35 + 1.5, -0.25 + 1.0], atol=1e-12)
    off = turn_deviations(
        own,
        rival,
        np.array([0, 1, 0]),
        order=np.array([0, 1, 1]),
        min_similarity=0.45,
        reject_margin=0.1,
        repeat_weight=0.0,
        order_weight=0.0,
    )
    np.testing.assert_allclose(off, [-0.45, -0.35, -0.25], atol=1e-12)


class _Task:
    def __init__(self, name, texts, kinds=None):
        self.name = name
        self.kinds = kinds or {n: "action" for n in texts}
        self.replies = {n: t for n, t in texts.items() if t}
        self.nlu = {}

    def template(self, node):
        return None


def test_node_texts_names_every_node_without_text():
    t = _Task(
        "demo",
        {"hello": "Hi!", "ask_day": "", "ask_city": None, "query": None},
        kinds={"hello": "action", "ask_day": "action", "ask_city": "action", "query": "query"},
    )
    with pytest.raises(WorkflowTextError) as e:
        node_texts(t)
    msg = str(e.value)
    assert "'ask_day'" in msg and "'ask_city'" in msg and "'query'" not in msg
    assert "responses.json" in msg and "`say`" in msg


# -- on STAR, with the packaged MiniLM ------------------------------------------------------------------


@pytest.fixture(scope="module")
def star(star_dir):
    from dialfork_dataset.star import StarCorpus

    return StarCorpus(star_dir)


@pytest.fixture(scope="module")
def assigner(star):
    return NodeAssigner("minilm").fit(star)


@pytest.fixture(scope="module")
def human(star_dir):
    from dialfork_dataset.tracks.star_human import conformant_human_dialogues

    return conformant_human_dialogues(star_dir, tasks=["weather", "bank_balance", "doctor_schedule"])


def test_node_assigner_accuracy_on_held_out_human_turns(assigner, human):
    """STAR's action labels are gold nodes: the assigner recovers most of them from the workflow alone."""
    acc, rejected = [], []
    for d in human:
        texts = [t["text"] for t in d.turns if t["speaker"] == "system"]
        a = assigner.assign_texts(d.task, texts)
        acc += [n == g for n, g in zip(a.nodes, d.system_nodes)]
        rejected += [n is None for n in a.nodes]
    assert len(acc) > 300
    assert np.mean(acc) >= 0.8, np.mean(acc)  # 0.88 over all 24 tasks (docs/task3_detectors.md)
    assert np.mean(rejected) <= 0.05


def test_node_assigner_rejects_another_tasks_turns(assigner, human):
    bank = [
        t["text"]
        for d in human
        if d.task == "bank_balance"
        for t, n in zip([x for x in d.turns if x["speaker"] == "system"], d.system_nodes)
        if n not in assigner.generic_ and "bye" not in n
    ]
    a = assigner.assign_texts("weather", bank)
    assert np.mean([n is None for n in a.nodes]) >= 0.9
    assert {r for r in a.reasons if r} <= {"off-task", "unfamiliar"}
    assert a.reasons.count("off-task") > a.reasons.count("unfamiliar")


def test_node_assigner_bad_input(star):
    with pytest.raises(ValueError, match="unknown task"):
        NodeAssigner("minilm").fit(star, tasks=["weather", "nope"])
    with pytest.raises(ValueError, match="min_similarity"):
        NodeAssigner("minilm", min_similarity=3).fit(star)
    with pytest.raises(KeyError, match="not among"):
        NodeAssigner("minilm").fit(star, tasks=["weather"]).assign_texts("bank_balance", ["hi"])


@pytest.fixture(scope="module")
def wf(star, template_corpus):
    from dialfork_metrics.task3 import load_examples

    train = load_examples(template_corpus, "train")
    return WorkflowDetector(workflow=star).fit(train), load_examples(template_corpus, "test")


@pytest.fixture(scope="module")
def wf_order(star, template_corpus):
    """The detector with the order rule on (``order_weight=1``; off by default)."""
    from dialfork_metrics.task3 import load_examples

    return WorkflowDetector(workflow=star, order_weight=1.0).fit(load_examples(template_corpus, "train"))


def test_workflow_detector_detects_template_forks(wf):
    det, test = wf
    pred = det.predict_many(test)
    conf = [p for g, p in zip(test, pred) if g["hallucination_type"] is None]
    wic = [(g["fork_turn"], p) for g, p in zip(test, pred) if g["hallucination_type"] == "WIC"]
    assert np.mean([p is not None for p in conf]) <= 0.2
    assert np.mean([p is not None and p >= t for t, p in wic]) >= 0.8  # caught at or after t_k
    assert np.mean([p == t for t, p in wic]) >= 0.4  # at t_k (doctor -> doctor_followup is ambiguous there)
    assert 0.3 <= det.min_similarity_ <= 0.6


def test_workflow_detector_catches_sspc_at_or_after_the_fork(wf, wf_order, star, template_corpus):
    from dialfork_metrics.task3 import load_examples

    _, test = wf
    sspc = [d for d in test if d["hallucination_type"] == "SSPC"]

    def caught(detector):
        return np.mean(
            [p is not None and p >= d["fork_turn"] for d, p in zip(sspc, detector.predict_many(sspc))]
        )

    det = wf_order
    assert caught(det) >= 0.3  # the similarities alone catch almost none (every turn is a workflow step)
    # the rules off: the similarities' verdicts only; the default (the repeat rule) lies in between
    off = WorkflowDetector(workflow=star, repeat_weight=0.0, order_weight=0.0).fit(
        load_examples(template_corpus, "train")
    )
    assert caught(off) < caught(wf[0]) < caught(det)
    # what the conformant fit dialogues do is never flagged: fitted in-sample, none of their turns is
    train = load_examples(template_corpus, "train")
    for d in train:
        a = det.assign(d)
        st = det.structures_[d["task"]]
        assert not order_flags(a.nodes, st, det.order_allowed_[d["task"]]).any()
    assert set(det.looping_) <= set(det.tasks)
    with pytest.raises(ValueError, match="order_weight"):
        WorkflowDetector(workflow=star, order_weight=-1).fit(train)


def test_workflow_detector_step_equals_offline_with_the_order_rules(wf, wf_order):
    _, test = wf
    det = wf_order
    for d in [d for d in test if d["hallucination_type"] in ("SSPC", None)][:16]:
        _assert_step_equals_offline(det, d)


def _assert_step_equals_offline(det, d):
    """Fed one turn at a time through ``det.step`` (as the guard does), dialogue ``d``'s system turns
    deviate as :meth:`WorkflowDetector.turn_deviations` says offline."""
    E = det.get_encoder().encode([t["text"] for t in d["turns"]])
    state, devs = None, []
    for t, e in zip(d["turns"], E):
        state, r = det.step(state, t["speaker"], e, d["task"], text=t["text"])
        if r.deviation is not None:
            devs.append(r.deviation - r.threshold)
    np.testing.assert_allclose(devs, det.turn_deviations([d], [E])[0], atol=1e-6)


def test_workflow_detector_streaming_equals_offline_and_routes(wf):
    det, test = wf
    for d in test[:12]:
        s = det.start(d["task"])
        for t in d["turns"]:
            s.update(t)
        assert s.flag == det.predict(d)
        np.testing.assert_allclose(s.deviations, det.turn_deviations([d])[0], atol=1e-9)
    # without a task (the blind set): routed by the user turns; until sure, a turn may fit any task
    no_task = [{"dialogue_id": d["dialogue_id"], "turns": d["turns"]} for d in test]
    agree = np.mean([a == b for a, b in zip(det.predict_many(no_task), det.predict_many(test))])
    assert agree >= 0.75, agree
    s = det.start()
    for t in test[0]["turns"]:
        s.update(t)
    assert s.flag == det.predict(no_task[0])


def test_workflow_detector_save_load_round_trip(wf, tmp_path, star):
    from dialfork_metrics.task3 import load_detector

    det, test = wf
    det.save(tmp_path / "wf")
    back = load_detector(tmp_path / "wf")
    assert isinstance(back, WorkflowDetector)
    assert back.predict_many(test[:20]) == det.predict_many(test[:20])
    assert back.thresholds_ == det.thresholds_
    # the dialogue state's rules survive: roles derived again, the pruned requirements as saved
    assert back.requires_ == det.requires_ and set(back.roles_) == set(det.roles_)
    sspc = [d for d in test if d["hallucination_type"] == "SSPC"]
    assert back.predict_many(sspc) == det.predict_many(sspc)
    assert back.explain_many(sspc[:10]) == det.explain_many(sspc[:10])
    # the saved detector records which readers it read with (the slot reader by default, the step
    # reader opt-in); a folder saved with others loads with them, and a folder saved before the
    # parameters loads without either (as it was fitted)
    import json

    assert back.slot_reader == "auto" and back.step_reader is None and back.rule_min_prob == det.rule_min_prob
    cfg_path = tmp_path / "wf" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    assert cfg["config"]["slot_reader"] == "auto" and cfg["config"]["step_reader"] is None
    cfg["config"].update(slot_reader=None)
    cfg_path.write_text(json.dumps(cfg))
    assert WorkflowDetector.load(tmp_path / "wf").slot_reader is None
    cfg["config"].update(slot_reader="auto", step_reader="auto")
    cfg_path.write_text(json.dumps(cfg))
    on = WorkflowDetector.load(tmp_path / "wf")
    assert on.slot_reader == on.step_reader == "auto" and on.assigner_.reader == "auto"
    del cfg["config"]["slot_reader"], cfg["config"]["step_reader"]
    cfg_path.write_text(json.dumps(cfg))
    old = WorkflowDetector.load(tmp_path / "wf")
    assert old.slot_reader is None and old.step_reader is None


def test_workflow_detector_bad_input(star, template_corpus, monkeypatch):
    from dialfork_metrics.task3 import load_examples

    train = load_examples(template_corpus, "train")
    with pytest.raises(ValueError, match="'calibration' parameter of WorkflowDetector .* Got 'nope' "):
        WorkflowDetector(workflow=star, false_alarm_rate=2, calibration="nope").fit(train)
    with pytest.raises(ValueError, match="'false_alarm_rate' parameter of WorkflowDetector .* Got 2 "):
        WorkflowDetector(workflow=star, false_alarm_rate=2).fit(train)
    with pytest.raises(ValueError, match="without a 'task'"):
        WorkflowDetector(workflow=star).fit([{"turns": train[0]["turns"]}])
    monkeypatch.delenv("DIALFORK_STAR_DIR", raising=False)
    with pytest.raises(ValueError, match="DIALFORK_STAR_DIR"):
        WorkflowDetector().fit(train)
    from dialfork_metrics.task3.streaming import NotFittedError

    with pytest.raises(NotFittedError):
        WorkflowDetector(workflow=star).predict(train[0])


def test_a_statement_is_not_a_question_step(assigner):
    """Issue 39: the audit credited "Tuesday is a great day to talk about the weather." as the ask-day
    step (similarity 0.63). With its text, the assigner does not take a statement for a question."""
    turn = "Tuesday is a great day to talk about the weather."
    E = assigner.encode([turn])
    assert assigner.assign("weather", E).nodes[0] == "weather_ask_day"  # embeddings alone: fooled
    assert assigner.assign("weather", E, texts=[turn]).nodes[0] != "weather_ask_day"
    asked = assigner.assign_texts("weather", ["For what day would you like the weather forecast?"])
    assert asked.nodes == ["weather_ask_day"]


def test_audit_matcher_uses_the_assigner(assigner, star):
    from dialfork_metrics.audit.user import AssignerStepMatcher

    m = AssignerStepMatcher(assigner, "weather", model=None)
    e = assigner.encode(["Could I get your PIN, please?"])[0]
    assert m.match(e, "Could I get your PIN, please?").node is None  # another task's step
    e = assigner.encode(["Which city do you want the forecast for?"])[0]
    assert m.match(e, "Which city do you want the forecast for?").node == "weather_ask_location"


class _OneOddStep:
    """A workflow source: STAR's tasks, with one extra weather step whose role cannot be derived."""

    def __init__(self, star):
        import dataclasses

        w = star.task("weather")
        odd = dataclasses.replace(w, responses={**w.responses, "weather_shrug": "Hmm, let me see."})
        self.tasks = {**{t: star.task(t) for t in star.tasks}, "weather": odd}
        self.path = star.path

    def task(self, name):
        return self.tasks[name]


def test_a_task_whose_roles_cannot_be_derived_keeps_todays_rules_with_a_warning(
    star, template_corpus, caplog
):
    """Issue 43, bad input: one line naming the task and the step; that task falls back, never a crash."""
    import logging

    from dialfork_metrics.task3 import load_examples

    train, test = load_examples(template_corpus, "train"), load_examples(template_corpus, "test")
    with caplog.at_level(logging.WARNING, logger="dialfork_metrics.task3.workflow.detector"):
        det = WorkflowDetector(workflow=_OneOddStep(star)).fit(train)
    lines = [r.getMessage() for r in caplog.records if "weather_shrug" in r.getMessage()]
    assert len(lines) == 1 and "'weather'" in lines[0] and "role-free rules" in lines[0]
    assert "weather" not in det.roles_ and "doctor_schedule" in det.roles_
    # the weather dialogues are judged by today's rules only: as with the state rules switched off
    weather = [d for d in test if d["task"] == "weather"]
    before = WorkflowDetector(workflow=_OneOddStep(star), state_rules=False).fit(train)
    assert det.predict_many(weather) == before.predict_many(weather)
    assert all(
        w is None or w["rule"] not in ("skip-requires", "skip-closing", "repeat-slot")
        for w in det.explain_many(weather)
    )


def test_state_rules_raise_the_skip_recall_on_the_template_forks(wf, star, template_corpus):
    """The dialogue state is what catches a skipped step: with its rules off, fewer SSPC forks alarm at
    or after their fork turn, and the conformant dialogues alarm no more with them on."""
    from dialfork_metrics.task3 import load_examples

    det, test = wf
    off = WorkflowDetector(workflow=star, state_rules=False).fit(load_examples(template_corpus, "train"))
    sspc = [d for d in test if d["hallucination_type"] == "SSPC"]
    conf = [d for d in test if d["hallucination_type"] is None]

    def caught(d, rows):
        return sum(p is not None and p >= r["fork_turn"] for r, p in zip(rows, d.predict_many(rows)))

    assert caught(det, sspc) > caught(off, sspc)
    assert (
        sum(p is not None for p in det.predict_many(conf))
        <= sum(p is not None for p in off.predict_many(conf)) + 1
    )
    assert det.roles_ and all(isinstance(v, dict) for v in det.requires_.values())


# -- issue 51 items 2 and 4 / issue 50 item 5: a hand-written workflow, from its file and a few logs ------
def _car_dialogue(i, *items):
    """A record of ``car_book_service`` from ``(step, text)`` / ``("user", text)`` items, step-labelled."""
    turns = [{"speaker": "user" if w == "user" else "system", "text": t} for w, t in items]
    nodes = [w for w, _ in items if w != "user"]
    return {"dialogue_id": f"car-{i}", "task": "car_book_service", "turns": turns, "system_nodes": nodes}


_GREET = ("hello", "Hello, welcome to the garage. How can I help?")
_ASKS = [
    ("car_ask_plate_number", "What is the plate number of your car?"),
    ("car_ask_symptoms", "What seems to be the problem with the car?"),
    ("car_ask_day", "Which day would you like to bring it in?"),
]


def _booking(i, day="Monday", *, closing_first=False):
    answers = ["AB12 CDE", "The brakes squeal.", day]
    items = [("user", "Hi, I'd like to book a service."), _GREET, ("user", "A service please.")]
    for q, a in zip(_ASKS, answers):
        items += [q, ("user", a)]
    if closing_first:  # "anything else?" before the outcome (a conformant agent's habit)
        items += [
            ("anything_else", "Is there anything else I can help with?"),
            ("user", "No, just the booking."),
        ]
    items += [
        ("car_confirm_booking", f"Shall I book the service for {day}?"),
        ("user", "Yes please."),
        ("car_booking_done", f"Your service is booked for {day}."),
        ("user", "Thanks."),
        ("car_bye", "Goodbye!"),
    ]
    return _car_dialogue(i, *items)


@pytest.fixture(scope="module")
def car_file(tmp_path_factory):
    from test_workflow_state import CAR

    f = tmp_path_factory.mktemp("car") / "car.yaml"
    f.write_text(CAR)
    return f"workflow:{f}"


@pytest.fixture(scope="module")
def car_from_file(car_file):
    return WorkflowDetector(workflow=car_file).fit(None)


def test_a_declared_requirement_is_enforced_from_the_file_alone(car_from_file, tmp_path):
    """Issue 51 item 2: ``requires: [customer_name, booking_reference]`` survives ``fit(None)``; a
    cancellation without the reference alarms at that turn, naming the slot."""
    det = car_from_file
    assert det.requires_["car_cancel_service"]["car_cancel_done"] == ("customer_name", "booking_reference")
    turns = [
        {"speaker": "user", "text": "Hi, I want to cancel my service booking."},
        {"speaker": "system", "text": "Hello, welcome to the garage. How can I help?"},
        {"speaker": "user", "text": "Cancel my booking please."},
        {"speaker": "system", "text": "What is your full name, please?"},
        {"speaker": "user", "text": "Ann Smith"},
        {"speaker": "system", "text": "Your booking has been cancelled."},
    ]
    d = {"dialogue_id": "cancel-1", "task": "car_cancel_service", "turns": turns}
    assert det.predict(d) == 3
    (why,) = det.explain_many([d])
    assert why["rule"] == "skip-requires" and why["slot"] == "booking_reference" and why["system_turn"] == 3
    ok = {
        **d,
        "turns": turns[:5]
        + [
            {"speaker": "system", "text": "What is your booking reference?"},
            {"speaker": "user", "text": "XK-2291"},
            turns[5],
        ],
    }
    assert det.predict(ok) is None
    # saved and loaded, the requirements and the (empty) switches are kept
    det.save(tmp_path / "car")
    back = WorkflowDetector.load(tmp_path / "car")
    assert back.requires_ == det.requires_ and back.rules_off_ == {} and back.predict(d) == 3


def test_a_rule_misfiring_once_on_six_logs_stays_on(car_file, car_from_file, caplog, tmp_path):
    """Issue 51 item 4: six correct dialogues, one of which says "anything else?" before the outcome:
    no rule is switched off (too little evidence), and the logs detect what the file alone detects."""
    import logging

    logs = [_booking(i, day) for i, day in enumerate(["Monday", "Tuesday", "Friday", "Monday", "Wednesday"])]
    logs.append(_booking(5, closing_first=True))
    with caplog.at_level(logging.INFO, logger="dialfork_metrics.task3.workflow.detector"):
        det = WorkflowDetector(workflow=car_file).fit(logs)
    assert det.rules_off_ == {}
    kept = [r.getMessage() for r in caplog.records if "'skip-closing'" in r.getMessage()]
    assert len(kept) == 1 and "car-5" in kept[0] and "kept" in kept[0] and "1 of its 6" in kept[0]
    assert not [
        r for r in caplog.records if r.levelno >= logging.WARNING and "switched off" in r.getMessage()
    ]
    # the kept rule's misfire does not lift the threshold; the fit's expected false-alarm rate counts it
    assert det.rule_misfires_["car_book_service"] == [False] * 5 + [True]
    assert det.operating_point_["car_book_service"]["expected_false_alarm_rate"] >= 1 / 6 - 1e-9
    det.save(tmp_path / "six")
    back = WorkflowDetector.load(tmp_path / "six")
    assert (back.rules_off_, back.rule_misfires_) == (det.rules_off_, det.rule_misfires_)
    assert back.recalibrate(0.05).operating_point_ == det.operating_point_
    # a skipped day and an early goodbye: caught with the logs as from the file alone
    skip = _booking(10)
    skip["turns"] = skip["turns"][:7] + skip["turns"][9:]  # the day question and its answer removed
    skip["system_nodes"] = None
    for d in (skip,):
        assert det.predict(d) == car_from_file.predict(d) == 4
        assert det.explain_many([d])[0]["rule"] == "skip-requires"


def test_a_rule_misfiring_with_evidence_is_switched_off_for_that_task_only_and_named(car_file, caplog):
    import logging

    from dialfork_metrics.task3.workflow.fit import misfire_evidence

    logs = [_booking(i) for i in range(3)] + [_booking(i, closing_first=True) for i in range(3, 6)]
    with caplog.at_level(logging.WARNING, logger="dialfork_metrics.task3.workflow.detector"):
        det = WorkflowDetector(workflow=car_file).fit(logs)
    assert det.rules_off_ == {"car_book_service": frozenset({"skip-closing"})}
    (line,) = [r.getMessage() for r in caplog.records if "switched off" in r.getMessage()]
    assert "'car_book_service'" in line and "'skip-closing'" in line and "3 of its 6" in line
    assert "car-3, car-4, car-5" in line and "at least 3" in line
    assert misfire_evidence(3, 6, 0.05, 3) and not misfire_evidence(2, 6, 0.05, 3)
    # the task's other rules stay on: a skipped day still alarms, an early goodbye no longer does
    skip = _booking(10)
    skip["turns"] = skip["turns"][:7] + skip["turns"][9:]
    del skip["system_nodes"]
    assert det.explain_many([skip])[0]["rule"] == "skip-requires"
    early = _booking(11, closing_first=True)
    del early["system_nodes"]
    assert det.predict(early) is None


def test_the_state_rules_gate_on_the_step_readers_probability():
    """Issue 50 item 4: with a step reader the sureness gate also reads its calibrated probability
    (``rule_min_prob``), on top of the cosine cut: the reader alone was sure of some step for STAR's
    typed drafts ("unavail", "9202") and the rules then alarmed on 47% of those conformant dialogues."""
    from types import SimpleNamespace

    from dialfork_metrics.task3.workflow.detector import WorkflowDetector
    from dialfork_metrics.task3.workflow.state import DEFAULT_RULE_MIN_PROB, sure_steps

    a = SimpleNamespace(
        nodes=["a", "b", "c", None],
        prob=np.array([0.9, 0.4, np.nan, 0.6]),
        own_similarity=np.array([0.5, 0.9, 0.5, 0.9]),
        second_similarity=np.array([0.45, 0.1, 0.45, 0.1]),
    )
    det = WorkflowDetector(encoder=None)
    assert DEFAULT_RULE_MIN_PROB == det.rule_min_prob == 0.5
    det.assigner_ = SimpleNamespace(reader_=object())
    # sure when the reader is (prob >= 0.5, or NaN: a turn it does not read) and so is cosine
    assert det._confident(a).tolist() == [False, False, False, True]
    a.own_similarity = np.array([0.9, 0.9, 0.9, 0.9])
    assert det._confident(a).tolist() == [True, False, True, True]
    det.rule_min_prob = 0.95
    assert det._confident(a).tolist() == [False, False, True, False]
    a.own_similarity = np.array([0.5, 0.9, 0.5, 0.9])
    # no reader: the cosine cut (0.75 similarity or 0.1 margin)
    det.assigner_ = SimpleNamespace(reader_=None)
    assert det._confident(a).tolist() == [False, True, False, True]
    assert sure_steps(np.array([0.5, 0.49])).tolist() == [True, False]
    with pytest.raises(ValueError, match="rule_min_prob"):
        WorkflowDetector(rule_min_prob=1.5)._validate_params()


def test_with_the_slot_reader_streaming_equals_offline_and_encodes_each_system_turn_once(car_file):
    """The guard hands each system turn's embedding to the slot reader (it reads the next user turn
    against it): streaming gives the offline deviations, and the reader holds those turns."""
    det = WorkflowDetector(workflow=car_file, slot_reader="auto").fit(None)
    reader = det._slot_read().args[0]
    for d in [_booking(1), _booking(2, "Friday", closing_first=True)]:
        _assert_step_equals_offline(det, d)
        for t in d["turns"]:
            if t["speaker"] == "system":
                assert t["text"] in reader.memo
