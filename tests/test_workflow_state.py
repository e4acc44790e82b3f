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


def test_a_reask_the_graph_leads_back_to_is_a_repeat_unless_the_loop_was_taken(weather):
    """Issue 51 item 3 / 50 item 5: that the graph *can* lead back to a question is no excuse; the
    loop's branch must have been taken (a failure outcome said, the user said no)."""
    # weather_ask_day leads to weather_ask_location in the graph; the city was answered: a repeat
    _, verdicts = verdicts_of(
        weather,
        ("user", "Weather please"),
        ("weather_ask_location", "Which city?"),
        ("user", "Detroit"),
        ("weather_ask_day", "Which day?"),
        ("user", "Monday"),
        ("weather_ask_location", "Which city?"),
    )
    assert [v.rule for v in verdicts] == [None, None, "repeat-slot"] and verdicts[-1].slot == "location"
    # the lookup failed in between ("nothing found"): asking again is the workflow's loop
    _, verdicts = verdicts_of(
        weather,
        ("user", "Weather please"),
        ("weather_ask_location", "Which city?"),
        ("user", "Atlantis"),
        ("weather_inform_nothing_found", "I could not find that place."),
        ("user", "oh"),
        ("weather_ask_location", "Which city?"),
    )
    assert verdicts[-1] == NO_VERDICT  # (the outcome before the day is a skip of its own)
    # the user said no in between
    _, verdicts = verdicts_of(
        weather,
        ("user", "Weather please"),
        ("weather_ask_location", "Which city?"),
        ("user", "Detroit"),
        ("weather_ask_day", "Which day?"),
        ("user", "No wait, not Detroit"),
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


# (k) issue 50 item 5 / 51 items 2-3: a hand-written car-service workflow --------------------------
CAR = """\
format: dialfork-workflow/1
name: car_service
tasks:
  - name: car_book_service
    slots:
      plate_number: {type: text, examples: [AB12 CDE]}
    steps:
      - id: hello
        say: Hello, welcome to the garage. How can I help?
        next: car_ask_plate_number
      - id: car_ask_plate_number
        say: What is the plate number of your car?
        next: car_ask_symptoms
      - id: car_ask_symptoms
        say: What seems to be the problem with the car?
        next: car_ask_day
      - id: car_ask_day
        say: Which day would you like to bring it in?
        next: query_slots
      - id: query_slots
        kind: query
        branches:
          - {outcome: available, text: Available, next: car_confirm_booking}
          - {outcome: unavailable, text: Unavailable, next: car_inform_day_unavailable}
      - id: car_inform_day_unavailable
        say: Sorry, that day is fully booked.
        next: car_ask_day
      - id: car_confirm_booking
        say: Shall I book the service for {day}?
        branches:
          - {outcome: "yes", text: "Yes", next: car_booking_done}
          - {outcome: "no", text: "No", next: car_ask_day}
      - id: car_booking_done
        say: Your service is booked for {day}.
        next: anything_else
      - id: anything_else
        say: Is there anything else I can help with?
      - id: car_bye
        say: Goodbye!
  - name: car_cancel_service
    steps:
      - id: hello
        say: Hello, welcome to the garage. How can I help?
        next: car_ask_customer_name
      - id: car_ask_customer_name
        say: What is your full name, please?
        next: car_ask_booking_reference
      - id: car_ask_booking_reference
        say: What is your booking reference?
        next: car_cancel_done
      - id: car_cancel_done
        role: outcome
        say: Your booking has been cancelled.
        requires: [customer_name, booking_reference]
        next: anything_else
      - id: anything_else
        say: Is there anything else I can help with?
      - id: car_bye
        say: Goodbye!
"""


def car_source(tmp_path, text=CAR):
    from dialfork_dataset.sources import open_source
    from dialfork_dataset.workflow.files import validate_workflow

    tmp_path.mkdir(parents=True, exist_ok=True)
    f = tmp_path / "car.yaml"
    f.write_text(text)
    assert validate_workflow(f) == []
    return open_source(f"workflow:{f}")


@pytest.fixture
def car(tmp_path):
    task = car_source(tmp_path).task("car_book_service")
    return task, derive_roles(task), workflow_structure(task)


BOOKED = [
    ("user", "Hi, I'd like to book a service for my car."),
    ("hello", "Hello, welcome to the garage. How can I help?"),
    ("user", "I need a service."),
    ("car_ask_plate_number", "What is the plate number of your car?"),
    ("user", "AB12 CDE"),
    ("car_ask_symptoms", "What seems to be the problem with the car?"),
    ("user", "It makes a grinding noise when I brake."),
    ("car_ask_day", "Which day would you like to bring it in?"),
    ("user", "Monday"),
]


def test_a_declared_slot_type_wins_over_the_name(tmp_path, car):
    """Issue 51 item 2: ``plate_number`` is text when the file says so (its name says a number)."""
    _, roles, _ = car
    assert roles.value_types["plate_number"] == "text" and roles.declared_types == {"plate_number"}
    assert roles.examples["plate_number"] == ("AB12 CDE",)
    assert roles.value_types["day"] == "weekday" and "day" not in roles.declared_types  # guessed
    # a plate with letters is tracked as given: asked again right away, it is a repeat
    items = (*BOOKED[:5], ("car_ask_plate_number", "What is the plate number of your car?"))
    states, verdicts = verdicts_of(car, *items)
    assert states[-1].filled["plate_number"].value == "AB12 CDE" and "plate_number" in states[-1].valued
    assert verdicts[-1].rule == "repeat-slot" and verdicts[-1].slot == "plate_number"
    # without the declaration the name makes it a number: "AB12 CDE" carries none, a re-ask clarifies
    plain = car_source(
        tmp_path / "plain",
        CAR.replace("    slots:\n      plate_number: {type: text, examples: [AB12 CDE]}\n", ""),
    )
    t = plain.task("car_book_service")
    untyped = (t, derive_roles(t), workflow_structure(t))
    assert untyped[1].value_types["plate_number"] == "number" and not untyped[1].declared_types
    assert verdicts_of(untyped, *items)[1][-1] == NO_VERDICT


def test_a_slot_declaration_is_checked(tmp_path):
    (tmp_path / "a").mkdir()
    bad = tmp_path / "a" / "car.yaml"
    bad.write_text(CAR.replace("plate_number: {type: text", "plate_numbr: {type: text"))
    from dialfork_dataset.workflow.files import validate_workflow

    (err,) = validate_workflow(bad)
    assert f"{bad}:6: tasks[0].slots.plate_numbr" in err and "collected or required by no step" in err
    bad.write_text(CAR.replace("{type: text", "{type: licence"))
    assert any("licence" in e and ":6:" in e for e in validate_workflow(bad))


def test_the_day_asked_again_after_a_yes_is_a_repeat_after_a_failure_or_a_no_is_not(car):
    """Issue 51 item 3: the graph loops back to the day (the day unavailable; the user said no)."""
    yes = (
        *BOOKED,
        ("car_confirm_booking", "Shall I book the service for Monday?"),
        ("user", "Yes please"),
        ("car_ask_day", "Which day would you like to bring it in?"),
    )
    _, verdicts = verdicts_of(car, *yes)
    assert [v.rule for v in verdicts][-2:] == [None, "repeat-slot"] and verdicts[-1].slot == "day"
    full = (
        *BOOKED,
        ("car_inform_day_unavailable", "Sorry, that day is fully booked."),
        ("user", "Oh, too bad."),
        ("car_ask_day", "Which day would you like to bring it in?"),
    )
    assert all(v == NO_VERDICT for v in verdicts_of(car, *full)[1])
    no = (
        *BOOKED,
        ("car_confirm_booking", "Shall I book the service for Monday?"),
        ("user", "No, Monday does not suit me after all."),
        ("car_ask_day", "Which day would you like to bring it in?"),
        ("user", "Tuesday"),
        ("car_confirm_booking", "Shall I book the service for Tuesday?"),
    )
    states, verdicts = verdicts_of(car, *no)
    assert all(v == NO_VERDICT for v in verdicts)
    assert states[-1].declined == [4]


def test_a_confirmation_asked_again_after_a_yes_is_a_repeat(car):
    """Issue 50 item 5: "Shall I book it?" asked again after the user said yes."""
    items = (
        *BOOKED,
        ("car_confirm_booking", "Shall I book the service for Monday?"),
        ("user", "Yes, go ahead."),
        ("car_confirm_booking", "Shall I book the service for Monday?"),
    )
    states, verdicts = verdicts_of(car, *items)
    v = verdicts[-1]
    assert v.rule == "repeat-confirmation" and v.rule in RULES and v.node == "car_confirm_booking"
    assert v.role == "confirmation" and "said yes at system turn 5" in v.message
    assert states[-1].confirmed == {"car_confirm_booking": 4}
    # after the outcome, asked again: still a repeat
    later = (
        *items[:-1],
        ("car_booking_done", "Your service is booked for Monday."),
        ("user", "ok"),
        items[-1],
    )
    assert verdicts_of(car, *later)[1][-1].rule == "repeat-confirmation"
    # the user changed the booking since: confirming it again is the workflow's
    changed = (
        *items[:-1],
        ("car_booking_done", "Booked."),
        ("user", "Can we make it Friday instead?"),
        items[-1],
    )
    assert verdicts_of(car, *changed)[1][-1] == NO_VERDICT
    # an unclear answer is no yes: asking again is a clarification
    unclear = (*items[:-3], items[-3], ("user", "Hmm, what does it cost?"), items[-1])
    assert verdicts_of(car, *unclear)[1][-1] == NO_VERDICT


def test_free_text_and_dates_are_tracked_as_given_by_their_answer(car):
    """Issue 50 item 5: symptoms (free text) and dates asked again are repeats."""
    items = (*BOOKED[:7], ("car_ask_symptoms", "What seems to be the problem with the car?"))
    states, verdicts = verdicts_of(car, *items)
    assert verdicts[-1].rule == "repeat-slot" and verdicts[-1].slot == "symptoms"
    assert states[-1].filled["symptoms"].value == "It makes a grinding noise when I brake."
    # asked again later, after the plate was asked (the graph's order): a repeat too
    later = (
        *BOOKED[:3],
        ("car_ask_symptoms", "What seems to be the problem with the car?"),
        ("user", "The brakes squeal."),
        ("car_ask_plate_number", "What is the plate number of your car?"),
        ("user", "AB12 CDE"),
        ("car_ask_symptoms", "What seems to be the problem with the car?"),
    )
    assert verdicts_of(car, *later)[1][-1].rule == "repeat-slot"
    # a question back is no answer: asking again clarifies
    back = (*BOOKED[:5], BOOKED[5], ("user", "What do you mean?"), BOOKED[5])
    assert verdicts_of(car, *back)[1][-1] == NO_VERDICT
    # a date the patterns do not read is still the answer
    day = (*BOOKED[:7], BOOKED[7], ("user", "as soon as you can"), BOOKED[7])
    states, verdicts = verdicts_of(car, *day)
    assert verdicts[-1].rule == "repeat-slot" and verdicts[-1].slot == "day" and "day" in states[-1].valued


def test_yes_no_answers():
    from dialfork_metrics.task3.workflow.state import answer_polarity, answers_the_question

    assert [answer_polarity(t) for t in ("Yes please", "yeah", "Sure, go ahead", "Okay")] == ["yes"] * 4
    assert [answer_polarity(t) for t in ("No", "Nope.", "Not really", "Actually, make it Friday")] == [
        "no"
    ] * 4
    assert answer_polarity("Monday at 10") is None
    assert answers_the_question("AB12 CDE") and not answers_the_question("Sorry?")
    assert not answers_the_question("I don't know") and not answers_the_question("no")


def test_the_new_state_fields_round_trip_and_are_checked():
    st = DialogueState(said=["a", "b"], declined=[1], confirmed={"b": 1}, updated=0)
    d = json.loads(json.dumps(st.to_dict()))
    assert DialogueState.from_dict(d) == st and state_dict_errors(d, 2) == []
    errs = state_dict_errors({"declined": ["1"], "confirmed": {"b": True}, "updated": "x"}, 0)
    assert errs == [
        "dialogue.declined must list system turn indices",
        "dialogue.confirmed must map confirmation steps to system turn indices",
        "dialogue.updated must be a system turn index or null",
    ]


# (l) issue 50 item 4: the learned slot reader in the tracker ---------------------------------------
CAR_REQUIRES_SYMPTOMS = CAR.replace(
    "        say: Your service is booked for {day}.\n",
    "        say: Your service is booked for {day}.\n        requires: [symptoms, day]\n",
)
VOLUNTEERED_SYMPTOMS = [
    ("user", "Hi, my car's symptoms are a grinding noise when I brake."),
    ("hello", "Hello, welcome to the garage. How can I help?"),
    ("user", "I'd like to book it in."),
    ("car_ask_plate_number", "What is the plate number of your car?"),
    ("user", "AB12 CDE"),
    ("car_ask_day", "Which day would you like to bring it in?"),
    ("user", "Monday"),
    ("car_confirm_booking", "Shall I book the service for Monday?"),
    ("user", "Yes please."),
    ("car_booking_done", "Your service is booked for Monday."),
]


@pytest.fixture
def car_symptoms(tmp_path):
    task = car_source(tmp_path, CAR_REQUIRES_SYMPTOMS).task("car_book_service")
    return task, derive_roles(task), workflow_structure(task)


def test_the_slot_reader_sees_a_volunteered_free_text_value_the_patterns_miss(car_symptoms):
    """A booking that requires the symptoms, given in the opening request: the shipped slot reader
    reads them (no skip), the hand patterns cannot (a free-text slot has none: a skip alarm)."""
    import functools

    from dialfork_metrics.task3.workflow.reader.slots import default_slot_reader, given_slots

    read = functools.partial(given_slots, default_slot_reader())
    states, verdicts = verdicts_of(car_symptoms, *VOLUNTEERED_SYMPTOMS, read=read)
    assert [v.rule for v in verdicts] == [None] * 5
    assert states[-1].filled["symptoms"].how == "volunteered"
    _, verdicts = verdicts_of(car_symptoms, *VOLUNTEERED_SYMPTOMS)
    assert verdicts[-1].rule == "skip-requires" and verdicts[-1].slot == "symptoms"
    # never given: the reader does not invent it
    never = [("user", "Hi, I'd like to book a service for my car."), *VOLUNTEERED_SYMPTOMS[1:]]
    _, verdicts = verdicts_of(car_symptoms, *never, read=read)
    assert verdicts[-1].rule == "skip-requires" and verdicts[-1].slot == "symptoms"


def test_with_a_reader_a_question_is_answered_only_by_what_it_reads(car):
    """``read`` decides which pending slots a turn answers; a free-text, date or time answer still
    counts (issue 50 item 5); the reader gets the system turn before the user turn and the pending slots."""
    calls = []

    def read(text, roles, prev_system, pending):
        calls.append((text, prev_system, tuple(pending)))
        return {"plate_number": "AB12 CDE"} if "AB12" in text else {}

    items = (*BOOKED[:5], BOOKED[5], ("user", "What do you mean?"))
    states, _ = verdicts_of(
        car, *items, ("car_ask_day", "Which day would you like to bring it in?"), read=read
    )
    assert states[-1].filled["plate_number"].how == "answered" and "symptoms" not in states[-1].filled
    assert calls[2] == ("AB12 CDE", "What is the plate number of your car?", ("plate_number",))
    assert calls[0][1] is None  # the opening user turn follows no system turn
    # a free-text answer the reader does not read is the value (the question's own answer)
    states, _ = verdicts_of(car, *BOOKED[:7], BOOKED[7], read=read)
    assert states[-1].filled["symptoms"].value == "It makes a grinding noise when I brake."
    # a number slot answered with something the reader does not read stays open
    from dialfork_metrics.task3.workflow.state import observe_user

    tr = TaskRoles("t", {}, {"party": "People"}, {}, {"party": "number"})
    st = observe_user(DialogueState(pending=["party"]), "a few of us", 1, tr, read=lambda *a: {})
    assert "party" not in st.filled
    st = observe_user(DialogueState(pending=["party"]), "a few of us", 1, tr)  # patterns: answered
    assert st.filled["party"].how == "answered"


def test_the_last_system_text_is_kept_round_trips_and_is_checked():
    st = DialogueState(said=["a"], system_text="Which day?")
    d = json.loads(json.dumps(st.to_dict()))
    assert DialogueState.from_dict(d) == st and state_dict_errors(d, 1) == []
    assert state_dict_errors({**d, "system_text": 3}, 1) == [
        "dialogue.system_text must be the last system turn's text or null"
    ]


def test_a_step_that_says_only_values_is_an_outcome_and_each_round_is_new(star_dir):
    """STAR's ``trivia_ask_question`` is ``"{question:s}"``: the system says a question read from
    the API (a new one each round), it collects no slot and its next round is no repeat. Read as a
    question it made 17 of the 23 false alarms of the default ``wf`` on the human-picked track."""
    from dialfork_dataset.star import StarCorpus
    from dialfork_dataset.workflow.roles import says_only_values

    task = StarCorpus(str(star_dir)).task("trivia")
    roles, structure = derive_roles(task), workflow_structure(task)
    assert says_only_values(task, "trivia_ask_question")
    assert not says_only_values(task, "trivia_ask_question_number")
    step = roles.steps["trivia_ask_question"]
    assert "question" not in step.roles and "outcome" in step.roles and step.collects == ()
    assert "trivia_ask_question" not in structure.asks and "trivia_ask_question_number" in structure.asks
    game = (
        ("user", "Let's play trivia"),
        ("trivia_ask_question_number", "At what question would you like to start?"),
        ("user", "3"),
        ("trivia_ask_question", "A ____ takes 33 hours to crawl one mile"),
        ("user", "snail"),
        (
            "trivia_inform_answer_correct_ask_next",
            "Your answer was correct! Would you like to continue playing?",
        ),
        ("user", "yes please"),
        ("trivia_ask_question", "A ____ written to celebrate a wedding is called a epithalamium"),
    )
    _, verdicts = verdicts_of((task, roles, structure), *game)
    assert [v.rule for v in verdicts] == [None] * 4
    # the number asked again after it was answered is still a repeat
    again = (
        *game,
        ("user", "poem"),
        ("trivia_ask_question_number", "At what question would you like to start?"),
    )
    assert verdicts_of((task, roles, structure), *again)[1][-1].rule == "repeat-slot"


def test_a_date_answer_without_a_date_is_a_clarification(car):
    """On STAR's human hotel dialogues the wizard asked the day again right after "The blog is really
    dope and I trust it": no date, so the re-ask clarifies. "as soon as you can" says when."""
    from dialfork_metrics.task3.workflow.state import answer_has_value

    vague = (*BOOKED[:7], BOOKED[7], ("user", "The blog is really dope and I trust it"), BOOKED[7])
    states, verdicts = verdicts_of(car, *vague)
    assert verdicts[-1] == NO_VERDICT and "day" not in states[-1].valued
    assert answer_has_value("next week", "date", False) and answer_has_value("5 pm", "time", True)
    assert not answer_has_value("What do you mean?", "date", False)
    assert not answer_has_value("I really like your shop", "time", False)


def test_an_earlier_value_said_again_answers_no_new_question(car):
    """STAR star-2513: asked for the PIN, the user gave the account number again; the wizard asked
    for the PIN again right away, a clarification. A new value is an answer."""
    repeated = (*BOOKED[:5], BOOKED[5], ("user", "AB12 CDE"), BOOKED[5])
    states, verdicts = verdicts_of(car, *repeated)
    assert verdicts[-1] == NO_VERDICT and "symptoms" not in states[-1].valued
    fresh = (*BOOKED[:5], BOOKED[5], ("user", "The brakes squeal, plate AB12 CDE"), BOOKED[5])
    assert verdicts_of(car, *fresh)[1][-1].rule == "repeat-slot"


def test_the_slot_reader_adds_to_the_patterns():
    """A reader that reads nothing no longer hides what the patterns read: on STAR's doctor dialogues
    the SGD-trained reader missed clock times ("Wednesday 1pm") and the outcome was called a skip."""
    from dialfork_metrics.task3.workflow.state import observe_user

    tr = TaskRoles(
        "t",
        {},
        {"start_time": "Time", "symptoms": "Symptoms"},
        {},
        {"start_time": "time", "symptoms": "text"},
    )
    st = observe_user(DialogueState(), "Dr Johnson Wednesday 1pm please", 0, tr, read=lambda *a: {})
    assert st.filled["start_time"].how == "volunteered"
    st = observe_user(
        DialogueState(), "I have a runny nose", 0, tr, read=lambda *a: {"symptoms": "runny nose"}
    )
    assert st.filled["symptoms"].value == "runny nose" and "start_time" not in st.filled


def test_a_turn_that_asks_two_questions_tells_the_reader_both(car):
    """SGD agents ask "Where from, and where to?" in one turn; the assigner picks one step, and
    ``also`` names the other. With a slot reader, its slot is asked too: the reader is told so and
    what it reads is volunteered (not answered: asking it later is no repeat of this turn)."""
    calls = []

    def read(text, roles, prev_system, pending):
        calls.append(tuple(pending))
        return {"day": "Monday"} if "day" in pending and "Monday" in text else {}

    turns, nodes = dialogue(
        *BOOKED[:5],
        ("car_ask_symptoms", "What is the problem, and which day would you like to bring it in?"),
        ("user", "It squeals; Monday works."),
        BOOKED[7],
    )
    also = [(), (), ("car_ask_day",), ()]
    _, roles, structure = car
    states, verdicts = track_state(turns, nodes, roles, structure, read=read, also=also)
    assert calls[-1] == ("symptoms", "day")
    assert states[-1].filled["day"].how == "volunteered" and states[-1].asked_too == []
    assert verdicts[-1] == NO_VERDICT  # the day asked later is no repeat
    # without a reader, ``also`` is ignored (any answer would fill every pending slot)
    from dialfork_metrics.task3.workflow.state import run_state

    asked = turns[: turns.index(next(t for t in turns if t["text"].startswith("What is the problem"))) + 1]
    assert run_state(asked, nodes, roles, structure, also=also)[0].asked_too == []
    assert run_state(asked, nodes, roles, structure, read=read, also=also)[0].asked_too == ["day"]
    # the field round-trips and is checked
    st = DialogueState(asked_too=["day"])
    assert DialogueState.from_dict(st.to_dict()).asked_too == ["day"]
    assert state_dict_errors({"said": [], "asked_too": "day"}, 0)


def test_a_slot_description_is_what_the_slot_reader_reads(tmp_path, star_dir):
    """A declared ``description`` names the slot for the slot reader; without one, the API input's
    readable name (STAR's), else the slot's name alone; an empty one is refused at its line."""
    from dialfork_dataset.workflow.files import validate_workflow
    from dialfork_metrics.task3.workflow.reader.slots import slots_from_roles

    text = CAR.replace(
        "plate_number: {type: text, examples: [AB12 CDE]}",
        "plate_number: {type: text, description: the car's registration, examples: [AB12 CDE]}",
    )
    task = car_source(tmp_path / "described", text).task("car_book_service")
    roles = derive_roles(task)
    assert roles.descriptions["plate_number"] == "the car's registration"
    by = {s.name: s for s in slots_from_roles(roles)}
    assert by["plate_number"].text == "plate number: the car's registration"
    assert by["day"].text == "day"  # nothing declared, no API input: the name's words
    assert by["plate_number"].value_type == "text" and by["plate_number"].values == ()
    # STAR's API inputs carry readable names
    from dialfork_dataset.star import StarCorpus

    doctor = derive_roles(StarCorpus(star_dir).task("doctor_schedule"))
    assert doctor.descriptions["doctor_name"] == "Doctor Name"
    # an explicit mapping replaces the roles' own
    given = {s.name: s.text for s in slots_from_roles(roles, {"day": "the day"})}
    assert given["day"] == "day: the day" and given["plate_number"] == "plate number"
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("description: the car's registration", 'description: ""'))
    assert any(":6:" in e and "description" in e for e in validate_workflow(bad))
