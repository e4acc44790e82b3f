"""The audit demo's side-by-side comparison marks rows whose intervals overlap as not a ranking, and the
faithful fake agent answers with the values the user gave (issue 37 item 5). No server: the fake's
policy is called directly."""

from __future__ import annotations

import json

import pytest

from dialfork_metrics.audit.demo import (
    NOT_A_RANKING,
    RANKING_LEGEND,
    RANKS,
    comparison_json,
    comparison_rows,
    intervals_overlap,
    side_by_side,
)
from dialfork_metrics.audit.report import AuditReport


def _task(name, flowkl, ci, **figs):
    base = {
        "task": name,
        "completion": 1.0,
        "coverage": 1.0,
        "skipped": 0.0,
        "repeated": 0.0,
        "out_of_order": 0.0,
        "alarm_rate": 0.0,
        "flowscore": 0.2,
        "flowkl": flowkl,
        "flowkl_ci": ci,
        "flowkl_note": None,
    }
    return {**base, **figs}


def _reports():
    # weather: disjoint intervals (a ranking); doctor_schedule: lower value but overlapping intervals
    # (the demo's case, issue 37); bank_balance: one agent has no FlowKL (nothing to compare)
    faithful = AuditReport(
        "http://x/v1",
        "fake-faithful",
        "wf",
        [
            _task("weather", 0.169, [0.042, 0.772]),
            _task("doctor_schedule", 0.915, [0.395, 4.252]),
            _task("bank_balance", None, None, flowkl_note="3 audited dialogues (FlowKL needs at least 5)"),
        ],
    )
    derailed = AuditReport(
        "http://x/v1",
        "fake-derailed",
        "wf",
        [
            _task("weather", 2.369, [1.316, 9.104], completion=0.0),
            _task("doctor_schedule", 0.650, [0.349, 7.037], completion=0.2),
            _task("bank_balance", 1.2, [0.5, 3.0]),
        ],
    )
    return {"faithful": faithful, "derailed": derailed}


def test_intervals_overlap():
    assert intervals_overlap([[0.0, 1.0], [0.5, 2.0]]) is True
    assert intervals_overlap([[0.0, 1.0], [1.0, 2.0]]) is True  # touching ends: not separated
    assert intervals_overlap([[0.0, 1.0], [1.5, 2.0]]) is False
    assert intervals_overlap([[0.0, 1.0], [1.5, 2.0], [0.9, 1.6]]) is True  # any pair
    assert intervals_overlap([[0.0, 1.0], None]) is None
    assert intervals_overlap([]) is None
    with pytest.raises(ValueError, match=r"interval 1: expected \[low, high\]"):
        intervals_overlap([[0.0, 1.0], [2.0, 1.0]])


def test_rows_mark_overlapping_intervals_as_not_a_ranking():
    rows = {(r["task"], r["score"]): r for r in comparison_rows(_reports())}
    assert rows[("weather", "flowkl")]["ranks"] is True
    assert rows[("doctor_schedule", "flowkl")]["ranks"] is False
    assert rows[("bank_balance", "flowkl")]["ranks"] is None  # one interval only
    assert rows[("weather", "completion")]["ranks"] is None  # no interval at all
    assert rows[("doctor_schedule", "flowkl")]["intervals"] == {
        "faithful": [0.395, 4.252],
        "derailed": [0.349, 7.037],
    }


def test_markdown_and_json_carry_the_marker_and_its_legend():
    reps = _reports()
    md = side_by_side(reps)
    header = md.splitlines()[0]
    assert header.endswith("| ranks |")
    line = {
        tuple(c.strip() for c in ln.strip("|").split("|")[:2]): ln
        for ln in md.splitlines()
        if ln.startswith("| ")
    }
    assert line[("doctor_schedule", "FlowKL")].rstrip().endswith(f"| {NOT_A_RANKING} |")
    assert line[("weather", "FlowKL")].rstrip().endswith(f"| {RANKS} |")
    assert line[("bank_balance", "FlowKL")].rstrip().endswith("| - |")
    assert line[("weather", "completion")].rstrip().endswith("| - |")
    assert RANKING_LEGEND in md and "not a ranking" in RANKING_LEGEND
    assert "FlowKL of bank_balance: 3 audited dialogues" in md  # the n/a reason stays
    data = json.loads(comparison_json(reps))
    assert data["agents"] == ["faithful", "derailed"] and data["legend"] == RANKING_LEGEND
    js = {(r["task"], r["score"]): r["ranks"] for r in data["rows"]}
    assert js[("doctor_schedule", "flowkl")] is False and js[("weather", "flowkl")] is True


# ---- the faithful fake answers with what the user asked for ------------------------------------------

PROMPT = 'You are the assistant (the "system") of a {} service, talking with a user in a text chat.'


def _converse(policy, service, opening, answer, stop, turns=10):
    """Talk to the fake's policy as a user would: ``answer(system_text)`` gives the user's reply."""
    msgs = [{"role": "system", "content": PROMPT.format(service)}, {"role": "user", "content": opening}]
    for _ in range(turns):
        text = policy.reply(msgs)
        msgs.append({"role": "assistant", "content": text})
        if stop(text):
            return text
        msgs.append({"role": "user", "content": answer(text)})
    raise AssertionError(f"no outcome in {turns} turns: {msgs}")


@pytest.fixture(scope="module")
def faithful(star_dir):
    from dialfork_dataset.sources import open_source
    from dialfork_metrics.audit.fakes import AgentPolicy

    return AgentPolicy(open_source(str(star_dir)), "faithful")


def _node_of(policy, task):
    """The workflow node a system text says (the template phrasings, exact), for the test's user."""
    m = policy.backend.model(policy.corpus.task(task))
    table = {p: n for n, phr in m.phr.items() for p in phr}
    return lambda text: table.get(text.strip())


@pytest.mark.parametrize(
    ("opening", "day", "city", "day_line", "city_line"),
    [
        ("Hello.", "Tuesday", "Detroit", "Sure: {}.", "It's {}."),
        ("Hi there.", "Wednesday", "San Francisco", "It's {}.", "That would be {}."),
        ("Hey, good morning.", "Friday", "Chicago", "{}, please.", "{}"),
        ("Hi!", "Sunday", "Los Angeles", "That would be {}.", "Sure: {}."),
        ("Hello there!", "Monday", "New York City", "{}", "The city is {}."),
    ],
)
def test_faithful_forecast_is_for_the_users_day_and_city(faithful, opening, day, city, day_line, city_line):
    node = _node_of(faithful, "weather")
    lines = {"weather_ask_day": day_line.format(day), "weather_ask_location": city_line.format(city)}
    forecast = _converse(
        faithful,
        "weather",
        opening,
        lambda t: lines.get(node(t), "I need you to tell me the weather."),
        lambda t: "degrees" in t,
    )
    assert f" on {day} " in forecast and f" in {city}," in forecast, forecast


def test_faithful_booking_is_with_the_users_doctor(faithful):
    node = _node_of(faithful, "doctor_schedule")
    for opening, doctor in (("Hello.", "Dr. Morgan"), ("Hi there.", "Dr. Alexis"), ("Hi!", "Dr. Johnson")):
        lines = {
            "ask_name": "The name is Alex Smith.",
            "doctor_ask_doctor_name": f"It's {doctor}.",
            "doctor_ask_day": "Monday.",
            "doctor_ask_start_time": "3 pm",
            "doctor_ask_symptoms": "A sore throat.",
        }
        text = _converse(
            faithful,
            "doctor schedule",
            opening,
            lambda t, lines=lines: lines.get(node(t), "I'd like to book an appointment with my doctor."),
            lambda t: "is available at" in t or "is booked for you" in t,
        )
        assert doctor in text, (doctor, text)


def test_read_answer_records_what_the_reply_states(star_dir):
    from dialfork_dataset.sources import open_source
    from generation.api import Sim, TemplateBackend, read_answer

    class Happy:
        happy, user_task, user_guide = True, "", ()

    b = TemplateBackend()
    src = open_source(str(star_dir))
    b.bind_corpus(src)
    sim = Sim(b.model(src.task("doctor_schedule")), Happy(), 1, b.data)
    assert read_answer(sim, "doctor_ask_doctor_name", "Sure, it's Dr. Alexis.") == "Dr. Alexis"
    assert read_answer(sim, "ask_name", "The name is Alex Smith.") == "Alex Smith"
    assert read_answer(sim, "ask_name", "Alex Smith") == "Alex Smith"
    assert read_answer(sim, "doctor_ask_day", "Sorry, I got distracted for a second.") is None  # chit-chat
    assert read_answer(sim, "doctor_ask_day", "I'd rather not say.") is None  # no category named
    assert read_answer(sim, "hello", "Hi!") is None and read_answer(sim, None, "Monday") is None
    assert sim.given == {"Name": "Dr. Alexis", "PatientName": "Alex Smith"}


def test_faithful_booking_follows_the_users_correction(faithful):
    """Issue 46 item 4: the user declines Dr. Alexis and names Dr. Johnson; the booking is with Dr.
    Johnson (the fake booked the doctor it had first offered)."""
    node = _node_of(faithful, "doctor_schedule")
    state = {"doctor": "Dr. Alexis", "offers": 0}

    def answer(t):
        n = node(t)
        if "is available at" in t:  # the offer (its filled text is no template phrasing)
            state["offers"] += 1
            state["doctor"] = "Dr. Johnson"
            return "No."
        lines = {
            "ask_name": "The name is Alex Smith.",
            "doctor_ask_doctor_name": f"It's {state['doctor']}.",
            "doctor_ask_day": "Monday.",
            "doctor_ask_start_time": "3 pm",
            "doctor_ask_symptoms": "A sore throat.",
        }
        return lines.get(n, "I'd like to book an appointment with my doctor.")

    text = _converse(
        faithful,
        "doctor schedule",
        "Hi!",
        answer,
        # the second offer (after the user's "No." and the new name), or a booking
        lambda t: ("is available at" in t and state["offers"] >= 1) or "is booked for you" in t,
        turns=16,
    )
    assert "Dr. Johnson" in text and "Alexis" not in text, text


def test_repeated_steps_row_is_diagnostic_not_a_ranking():
    from dialfork_metrics.audit.demo import DIAGNOSTIC

    rows = {(r["task"], r["score"]): r for r in comparison_rows(_reports())}
    assert rows[("weather", "repeated")]["ranks"] is False and rows[("weather", "repeated")]["diagnostic"]
    md = side_by_side(_reports())
    line = next(x for x in md.splitlines() if x.startswith("| weather | repeated |"))
    assert (
        line.rstrip().endswith(f"| {DIAGNOSTIC['repeated']} |") and "not a ranking" in DIAGNOSTIC["repeated"]
    )
