"""The dialogue state tracker and the step rules of :mod:`dialfork_metrics.task3.workflow.state`, on
hand-made dialogues against STAR's ``weather`` workflow (its derived roles and its structure), and
its pieces on hand-built inputs: volunteered values, the state's dict form, the requirement fit."""

from __future__ import annotations

import json

import pytest

from dialfork_dataset.workflow.roles import StepRole, TaskRoles, derive_roles
from dialfork_metrics.task3.workflow.rules import workflow_structure
from dialfork_metrics.task3.workflow.state import (
    NO_VERDICT,
    RULES,
    DialogueState,
    SlotFill,
    enforced_requirements,
    prune_requirements,
    state_dict_errors,
    state_flags,
    track_state,
    tracker_accuracy,
    volunteered_slots,
)


@pytest.fixture(scope="module")
def weather(star_dir):
    from dialfork_dataset.star import StarCorpus

    task = StarCorpus(str(star_dir)).task("weather")
    return task, derive_roles(task), workflow_structure(task)


def dialogue(*items):
    """Turns and system nodes from ``("user", text)`` and ``(node, text)`` items."""
    turns, nodes = [], []
    for who, text in items:
        if who == "user":
            turns.append({"speaker": "user", "text": text})
        else:
            turns.append({"speaker": "system", "text": text})
            nodes.append(who)
    return turns, nodes


def verdicts_of(weather, *items, **kw):
    _, roles, structure = weather
    turns, nodes = dialogue(*items)
    states, verdicts = track_state(turns, nodes, roles, structure, **kw)
    assert len(states) == len(verdicts) == len(nodes)
    return states, verdicts


ASK_DAY = [("user", "Hi, I need a forecast."), ("weather_ask_day", "Which day?"), ("user", "Monday please")]


# (a) ------------------------------------------------------------------------------------------------
def test_forecast_after_both_slots_answered_is_no_verdict(weather):
    states, verdicts = verdicts_of(
        weather,
        ("user", "Hello"),
        ("hello", "Hello, how can I help?"),
        ("user", "What's the weather going to be like?"),
        ("weather_ask_day", "For which day?"),
        ("user", "Monday please"),
        ("weather_ask_location", "And where?"),
        ("user", "Chicago"),
        ("weather_inform_forecast", "It will be sunny all day on Monday in Chicago."),
        ("user", "Thanks"),
        ("anything_else", "Anything else?"),
    )
    assert all(v == NO_VERDICT for v in verdicts)
    before_forecast = states[3]
    assert {s: (f.how, f.turn) for s, f in before_forecast.filled.items()} == {
        "day": ("answered", 4),
        "location": ("answered", 6),
    }
    assert before_forecast.filled["location"].value.lower() == "chicago"
    assert before_forecast.answered_by == {"day": 1, "location": 2}
    assert before_forecast.done == ["hello", "weather_ask_day", "weather_ask_location"]
    assert not before_forecast.outcome_said and states[4].outcome_said and states[4].last_outcome == 3


# (b) ------------------------------------------------------------------------------------------------
def test_forecast_before_the_city_is_a_skip_of_location(weather):
    states, verdicts = verdicts_of(
        weather, *ASK_DAY, ("weather_inform_forecast", "It will be sunny all day on Monday.")
    )
    assert verdicts[0] == NO_VERDICT
    v = verdicts[1]
    assert v.rule == "skip-requires" and v.rule in RULES
    assert v.node == "weather_inform_forecast" and v.role == "outcome"
    assert v.slot == "location" and v.expected == "weather_ask_location"
    assert "weather_inform_forecast" in v.message and "location" in v.message
    assert v.to_dict()["slot"] == "location"
    assert "location" not in states[1].filled and states[1].filled["day"].how == "answered"


# (c) ------------------------------------------------------------------------------------------------
def test_a_city_volunteered_in_the_first_turn_fills_location(weather):
    states, verdicts = verdicts_of(
        weather,
        ("user", "Hi, I need the weather in Chicago."),
        *ASK_DAY[1:],
        ("weather_inform_forecast", "It will be sunny all day on Monday in Chicago."),
    )
    assert all(v == NO_VERDICT for v in verdicts)
    f = states[1].filled["location"]
    assert (f.how, f.turn, f.value) == ("volunteered", 0, "chicago")


def test_the_skip_rule_reads_the_requirements_it_is_given(weather):
    """A detector passes the requirements it enforces: without ``location`` there is no skip."""
    items = (*ASK_DAY, ("weather_inform_forecast", "Sunny on Monday."))
    _, verdicts = verdicts_of(weather, *items, requires={"weather_inform_forecast": ("day",)})
    assert all(v == NO_VERDICT for v in verdicts)
    _, verdicts = verdicts_of(weather, *items, requires={})
    assert all(v == NO_VERDICT for v in verdicts)


# (d) ------------------------------------------------------------------------------------------------
def test_goodbye_before_the_forecast_is_a_skip_of_closing(weather):
    _, verdicts = verdicts_of(
        weather,
        *ASK_DAY,
        ("weather_ask_location", "Which city?"),
        ("user", "Detroit"),
        ("weather_bye", "Goodbye!"),
    )
    assert [v.rule for v in verdicts] == [None, None, "skip-closing"]
    v = verdicts[-1]
    assert v.node == "weather_bye" and v.role == "closing" and v.slot is None
    assert v.expected == "weather_inform_forecast" and "weather_bye" in v.message


def test_goodbye_after_the_forecast_is_no_skip(weather):
    _, verdicts = verdicts_of(
        weather,
        ("user", "Weather in Detroit on Friday?"),
        ("weather_inform_forecast", "Sunny."),
        ("user", "Thanks"),
        ("weather_bye", "Goodbye!"),
    )
    assert all(v == NO_VERDICT for v in verdicts)


def test_a_closing_as_the_very_first_step_is_no_skip(weather):
    """The rule needs an earlier step with a role: a dialogue that only says goodbye skipped nothing."""
    _, verdicts = verdicts_of(weather, ("user", "Never mind"), ("weather_bye", "Goodbye!"))
    assert verdicts == [NO_VERDICT]


# (e) ------------------------------------------------------------------------------------------------
def test_asking_again_for_an_answered_location_is_a_repeat(weather):
    _, verdicts = verdicts_of(
        weather,
        *ASK_DAY,
        ("weather_ask_location", "Which city?"),
        ("user", "Detroit"),
        ("weather_inform_forecast", "Sunny on Monday in Detroit."),
        ("user", "ok"),
        ("weather_ask_location", "Which city was it again?"),
    )
    assert [v.rule for v in verdicts] == [None, None, None, "repeat-slot"]
    v = verdicts[-1]
    assert v.node == "weather_ask_location" and v.role == "question" and v.slot == "location"
    assert "weather_ask_location" in v.message and "location" in v.message


def test_an_immediate_reask_after_an_unclear_answer_is_a_clarification(weather):
    _, verdicts = verdicts_of(
        weather,
        ("user", "Weather please"),
        ("weather_ask_location", "Which city?"),
        ("user", "the big one by the lake"),
        ("weather_ask_location", "Sorry, which city did you say?"),
    )
    assert verdicts == [NO_VERDICT, NO_VERDICT]


def test_an_immediate_reask_after_a_clear_answer_is_a_repeat(weather):
    """The user named a city the API knows; asking for it again right away repeats the step."""
    states, verdicts = verdicts_of(
        weather,
        ("user", "Weather please"),
        ("weather_ask_location", "Which city?"),
        ("user", "Detroit"),
        ("weather_ask_location", "Which city?"),
    )
    assert verdicts[0] == NO_VERDICT
    assert verdicts[1].rule == "repeat-slot" and verdicts[1].slot == "location"
    assert states[1].valued == ["location"]


def test_a_reask_after_a_step_that_leads_back_to_it_or_a_repeatable_step_is_no_repeat(weather):
    # weather_ask_day leads to weather_ask_location in the graph: asking the city again after it is
    # the workflow's own order, not a repeat
    _, verdicts = verdicts_of(
        weather,
        ("user", "Weather please"),
        ("weather_ask_location", "Which city?"),
        ("user", "Detroit"),
        ("weather_ask_day", "Which day?"),
        ("user", "Monday"),
        ("weather_ask_location", "Which city?"),
    )
    assert all(v == NO_VERDICT for v in verdicts)
    items = (
        *ASK_DAY,
        ("weather_ask_location", "Which city?"),
        ("user", "Detroit"),
        ("weather_inform_forecast", "Sunny."),
        ("user", "ok"),
        ("weather_ask_location", "Which city?"),
    )
    _, verdicts = verdicts_of(weather, *items, repeatable=frozenset({"weather_ask_location"}))
    assert all(v == NO_VERDICT for v in verdicts)
    # without a structure there is no repeat rule
    _, roles, _ = weather
    turns, nodes = dialogue(*items)
    assert all(v == NO_VERDICT for v in track_state(turns, nodes, roles)[1])


def test_state_flags_are_one_per_system_turn(weather):
    _, roles, structure = weather
    turns, nodes = dialogue(
        *ASK_DAY, ("weather_inform_forecast", "Sunny."), ("user", "ok"), ("weather_bye", "Bye")
    )
    flags, verdicts = state_flags(turns, nodes, roles, structure)
    assert set(flags) == set(RULES)
    assert flags["skip-requires"].tolist() == [0, 1, 0]
    # the forecast, though a skip, is an outcome said: the goodbye after it is no skip-closing
    assert flags["skip-closing"].tolist() == [0, 0, 0]
    assert flags["repeat-slot"].tolist() == [0, 0, 0]
    assert [v.rule for v in verdicts] == [None, "skip-requires", None]


def test_an_off_workflow_turn_changes_nothing_but_said(weather):
    states, verdicts = verdicts_of(
        weather,
        ("user", "hi"),
        (None, "Let me tell you a joke."),
        ("user", "ok"),
        ("weather_ask_day", "Day?"),
    )
    assert verdicts == [NO_VERDICT, NO_VERDICT]
    assert states[1].said == [None] and states[1].done == [] and not states[1].filled


# (f) ------------------------------------------------------------------------------------------------
@pytest.fixture
def hand_roles():
    return TaskRoles(
        "hand",
        {},
        {"start_time": "StartTimeHour", "day": "Day", "size": "Guests", "name": "Name", "city": "City"},
        {"city": ("Chicago", "New York City")},
        {"start_time": "time", "day": "weekday", "size": "number", "name": "name", "city": "categorical"},
    )


@pytest.mark.parametrize(
    "text, expected",
    [
        ("noon on Tuesdays", {"start_time": "noon", "day": "Tuesdays"}),
        ("Friday works", {"day": "Friday"}),
        ("I want to go to NYC tomorrow", {"day": "tomorrow", "city": "nyc"}),
        ("a table for four people", {"size": "four"}),
        ("we are 6", {"size": "6"}),
        ("my name is Ann", {"name": "my name is Ann"}),
        ("Ann Smith", {"name": "Ann Smith"}),
        ("in new york city", {"city": "new york city"}),
        ("hello there", {}),
        ("I'm fine thanks", {}),
        ("I may come", {}),  # "may" is no date here: weekday patterns only
    ],
)
def test_volunteered_slots_by_value_type(hand_roles, text, expected):
    assert volunteered_slots(text, hand_roles) == expected


def test_a_clock_time_is_volunteered_as_a_time(hand_roles):
    got = volunteered_slots("Can we do it at 3 pm on Friday?", hand_roles)
    assert got["day"] == "Friday"
    assert "3" in got["start_time"]
    assert volunteered_slots("10:30 is fine", hand_roles)["start_time"] == "10:30"
    assert volunteered_slots("around 7pm", hand_roles)["start_time"] == "7pm"


def test_a_clock_time_is_not_a_number_of_people(hand_roles):
    assert "size" not in volunteered_slots("Can we do it at 3 pm?", hand_roles)
    assert "size" not in volunteered_slots("10:30 is fine", hand_roles)
    assert volunteered_slots("for 4 people at 7pm", hand_roles)["size"] == "4"
    assert volunteered_slots("Can we do it at 3 pm?", hand_roles)["start_time"] == "3 pm"


def test_a_volunteered_value_does_not_overwrite_an_answer(weather):
    _, roles, _ = weather
    states, _ = track_state(
        *dialogue(
            ("weather_ask_location", "Which city?"),
            ("user", "Detroit"),
            ("user", "or maybe Chicago"),
            ("weather_ask_day", "Day?"),
        ),
        roles,
    )
    f = states[-1].filled["location"]
    assert (f.how, f.value) == ("answered", "detroit")


# (g) ------------------------------------------------------------------------------------------------
def test_dialogue_state_round_trips_through_json():
    st = DialogueState(
        filled={
            "day": SlotFill("day", "answered", 2, "monday"),
            "location": SlotFill("location", "volunteered", 0, "chicago"),
        },
        done=["hello", "weather_ask_day"],
        said=["hello", None, "weather_ask_day"],
        pending=["location"],
        pending_node="weather_ask_location",
        outcome_said=True,
        last_outcome=1,
        answered_by={"day": 2},
    )
    d = json.loads(json.dumps(st.to_dict()))
    assert state_dict_errors(d, 3) == []
    assert DialogueState.from_dict(d) == st
    assert DialogueState.from_dict(None) == DialogueState() == DialogueState.from_dict({})
    assert state_dict_errors(DialogueState().to_dict(), 0) == []


def test_state_dict_errors_lists_each_problem():
    assert state_dict_errors(["not", "a", "dict"], 0) == ["dialogue must be the dialogue state (an object)"]
    bad = {
        "said": ["hello", 3],
        "filled": {"day": ["told", 0, "monday"], "city": ["answered", True, "x"], "ok": ["answered", 1, "v"]},
        "done": "hello",
        "pending": [1],
        "answered_by": {"day": False},
        "pending_node": 7,
        "last_outcome": "2",
    }
    errs = state_dict_errors(bad, 2)
    assert errs == [
        "dialogue.said must list step names (or null)",
        "dialogue.filled['day'] must be [how ('answered'|'volunteered'|'offered'), user turn index, value]",
        "dialogue.filled['city'] must be [how ('answered'|'volunteered'|'offered'), user turn index, value]",
        "dialogue.done must be a list of strings",
        "dialogue.pending must be a list of strings",
        "dialogue.answered_by must map slots to system turn indices",
        "dialogue.pending_node must be a step name or null",
        "dialogue.last_outcome must be a system turn index or null",
    ]
    assert state_dict_errors({"said": ["hello", None]}, 3) == [
        "dialogue.said holds 2 steps for 3 system turns"
    ]
    assert state_dict_errors({"filled": []}, 0) == ["dialogue.filled must map slots to [how, turn, value]"]
    assert state_dict_errors({"filled": {"x": ["answered", 0]}}, 0) == [
        "dialogue.filled['x'] must be [how ('answered'|'volunteered'|'offered'), user turn index, value]"
    ]


# (h) ------------------------------------------------------------------------------------------------
def _state(*slots):
    return DialogueState(filled={s: SlotFill(s, "answered", 0, "v") for s in slots})


def test_prune_requirements_drops_a_slot_rarely_filled():
    requires = {"forecast": ("day", "location"), "bye": ("day",)}
    # 4 fit dialogues say the forecast: day always filled, location in 2 of them
    tracked = [
        ([_state("day", "location"), _state("day", "location")], ["ask", "forecast"]),
        ([_state("day", "location")], ["forecast"]),
        ([_state("day")], ["forecast"]),
        ([_state(), _state("day")], [None, "forecast"]),
    ]
    assert prune_requirements(requires, tracked) == {"forecast": ("day",), "bye": ("day",)}  # bye: never seen
    assert prune_requirements(requires, tracked, support=0.5) == requires
    assert prune_requirements(requires, tracked, min_count=5) == requires  # too few turns to read
    assert prune_requirements(requires, tracked, declared={"forecast"}) == requires
    # a step whose every slot is dropped is left out
    assert prune_requirements({"forecast": ("location",)}, tracked) == {}


# (i) ------------------------------------------------------------------------------------------------
def test_enforced_requirements_of_weather(weather):
    task, roles, _ = weather
    every = enforced_requirements(roles, task, "all")
    assert every == {
        "weather_inform_forecast": ("day", "location"),
        "weather_inform_nothing_found": ("day", "location"),
        "query": ("day", "location"),
    }
    # "required": recognisable slots whose API input the API lists as required (weather: Day only)
    assert list(task.api.required) == ["Day"]
    required = enforced_requirements(roles, task, "required")
    assert required == {n: ("day",) for n in every}
    # "template" (the default): of those, the ones the step's own template names by a placeholder
    template = enforced_requirements(roles, task, "template")
    assert template == enforced_requirements(roles, task) == {"weather_inform_forecast": ("day",)}
    assert "{day" in task.template("weather_inform_forecast")
    for n in every:
        assert set(template.get(n, ())) <= set(required.get(n, ())) <= set(every[n])
    with pytest.raises(ValueError, match="skip_slots"):
        enforced_requirements(roles, task, "some")


def test_declared_requirements_are_enforced_as_written(weather):
    task, roles, _ = weather
    steps = dict(roles.steps)
    steps["weather_inform_forecast"] = StepRole(
        "weather_inform_forecast", frozenset({"outcome"}), (), ("location",), declared=True
    )
    declared = TaskRoles(roles.task, steps, roles.api_slots, roles.values, roles.value_types)
    for mode in ("all", "required", "template"):
        assert enforced_requirements(declared, task, mode)["weather_inform_forecast"] == ("location",)


# (j) ------------------------------------------------------------------------------------------------
def _record(*items):
    turns, nodes = dialogue(*items)
    return {"task": "weather", "turns": turns, "system_nodes": nodes}


def test_tracker_accuracy_on_a_known_answer(weather):
    _, roles, _ = weather
    full = _record(
        ("user", "Hi"),
        ("weather_ask_day", "Which day?"),
        ("user", "Monday"),
        ("weather_ask_location", "Which city?"),
        ("user", "Chicago"),
        ("weather_inform_forecast", "Sunny."),
    )
    gold = [[(5, {"City": "Chicago", "Day": "Monday", "Weather": "Sunny"})]]  # Weather: no slot maps to it
    acc = tracker_accuracy([full], {"weather": roles}, gold)
    assert acc == {
        "n_queries": 1,
        "n_slots": 2,
        "filled": 1.0,
        "value_match": 1.0,
        "by_how": {"answered": 2, "volunteered": 0},
    }
    no_city = _record(
        ("user", "Hi"),
        ("weather_ask_day", "Which day?"),
        ("user", "Monday"),
        ("weather_inform_forecast", "Sunny."),
    )
    acc = tracker_accuracy([no_city], {"weather": roles}, [[(3, {"City": "Chicago", "Day": "Monday"})]])
    assert (acc["n_slots"], acc["filled"], acc["value_match"]) == (2, 0.5, 0.5)
    # a wrong value is filled but does not match; a volunteered one counts as such
    wrong = _record(
        ("user", "Weather in Detroit"),
        ("weather_ask_day", "Which day?"),
        ("user", "Monday"),
        ("weather_inform_forecast", "Sunny."),
    )
    acc = tracker_accuracy([wrong], {"weather": roles}, [[(3, {"City": "Chicago", "Day": "Monday"})]])
    assert (acc["filled"], acc["value_match"], acc["by_how"]) == (1.0, 0.5, {"answered": 1, "volunteered": 1})
    # both dialogues together; a task without roles is skipped
    other = {**full, "task": "bank_balance"}
    acc = tracker_accuracy(
        [full, no_city, other],
        {"weather": roles},
        [gold[0], [(3, {"City": "Chicago", "Day": "Monday"})], gold[0]],
    )
    assert (acc["n_queries"], acc["n_slots"], acc["filled"], acc["value_match"]) == (2, 4, 0.75, 0.75)
    empty = tracker_accuracy([], {"weather": roles}, [])
    assert empty["n_queries"] == 0 and empty["filled"] != empty["filled"]  # nan
