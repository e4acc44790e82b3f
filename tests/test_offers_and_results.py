"""Issue 44, what a workflow a user wrote needs beyond its phrasings: a value the agent offers fills
its slot (SGD's offered slots), and the steps any transactional workflow has (an answer about the
item at hand, "Shall I book it?") are no evidence of another workflow."""

from __future__ import annotations

from pathlib import Path

import pytest

from dialfork_dataset.workflow.files import WorkflowCorpus
from dialfork_dataset.workflow.roles import StepRole, TaskRoles, derive_roles, placeholders, step_signatures
from dialfork_metrics.task3.workflow.state import DialogueState, run_state, state_dict_errors

ROOT = Path(__file__).resolve().parents[1]
SGD_WORKFLOWS = ROOT / "examples" / "workflows" / "sgd"


@pytest.fixture(scope="module")
def buses():
    return WorkflowCorpus(SGD_WORKFLOWS / "buses_1.yaml").task("buses_buy_bus_ticket")


def test_placeholders_of_a_step(buses):
    assert placeholders(buses, "buses_offer_bus") == ["count", "leaving_time", "transfers", "fare"]
    assert placeholders(buses, "buses_ask_from_location") == []


def test_an_offer_names_the_slot_a_question_collects(buses):
    roles = derive_roles(buses)
    offer = roles.steps["buses_offer_bus"]
    # leaving_time is collected by buses_ask_leaving_time and the offer's text names it; count,
    # transfers and fare are outputs no question collects
    assert offer.offers == ("leaving_time",)
    assert offer.mentions == ("count", "leaving_time", "transfers", "fare")
    assert roles.steps["buses_inform_details"].offers == ()  # names stations, which nobody asks
    assert roles.steps["buses_ask_leaving_time"].offers == ()  # a question collects, never offers
    assert roles.steps["buses_confirm_purchase"].offers == ()  # a read-back requires what it names


def _dialogue(with_offer: bool) -> tuple[list[dict], list[str]]:
    turns, nodes = [], []
    script = [
        ("buses_ask_from_location", "Where will you be leaving from?", "From Fresno."),
        ("buses_ask_to_location", "Where are you going?", "To Los Angeles."),
        ("buses_ask_leaving_date", "What day do you want to leave?", "March 3rd."),
        ("buses_offer_bus", "I found 4 buses. One leaves at 8:40 am and costs $27.", "That works."),
        ("buses_ask_travelers", "How many tickets do you need?", "Two."),
        (
            "buses_confirm_purchase",
            "Please confirm: 2 tickets from Fresno to Los Angeles at 8:40 am.",
            "Yes.",
        ),
    ]
    for node, system, user in script:
        if node == "buses_offer_bus" and not with_offer:
            continue
        turns += [{"speaker": "system", "text": system}, {"speaker": "user", "text": user}]
        nodes.append(node)
    return [{"speaker": "user", "text": "I need a bus."}, *turns], nodes


def test_the_user_taking_an_offer_fills_its_slot(buses):
    roles = derive_roles(buses)
    turns, nodes = _dialogue(with_offer=True)
    final, states, verdicts = run_state(turns, nodes, roles)
    assert [v.rule for v in verdicts] == [None] * len(nodes)
    fill = final.filled["leaving_time"]
    assert fill.how == "offered" and fill.value == "That works." and turns[fill.turn]["speaker"] == "user"
    assert "leaving_time" not in states[nodes.index("buses_offer_bus")].filled  # not before the offer
    # the guard keeps the state between turns: an offered fill round-trips and passes the check
    d = final.to_dict()
    assert DialogueState.from_dict(d).filled["leaving_time"] == fill
    assert state_dict_errors(d, len(nodes)) == []


def test_a_read_back_before_any_time_was_offered_or_asked_is_a_skip(buses):
    roles = derive_roles(buses)
    turns, nodes = _dialogue(with_offer=False)
    _, _, verdicts = run_state(turns, nodes, roles)
    v = verdicts[nodes.index("buses_confirm_purchase")]
    assert v.rule == "skip-requires" and v.slot == "leaving_time"


def test_steps_every_transactional_workflow_has_are_shared():
    roles = TaskRoles(
        "bus",
        {
            "bus_inform_details": StepRole(
                "bus_inform_details", frozenset({"inform"}), mentions=("phone_number", "to_station")
            ),
            "bus_purchase_succeeded": StepRole("bus_purchase_succeeded", frozenset({"outcome"})),
            "bus_purchase_failed": StepRole("bus_purchase_failed", frozenset({"outcome"})),
            "bus_offer_bus": StepRole("bus_offer_bus", frozenset({"outcome"}), mentions=("fare",)),
            "bus_offer_purchase": StepRole("bus_offer_purchase", frozenset({"question"})),
            "bus_ask_city": StepRole("bus_ask_city", frozenset({"question"}), ("city",)),
        },
    )
    sig = step_signatures(roles)
    assert sig["bus_inform_details"] == {("inform", "phone_number"), ("inform", "to_station")}
    # a result or an offer of the workflow's own items is its own
    assert sig["bus_purchase_succeeded"] == sig["bus_purchase_failed"] == sig["bus_offer_bus"] == frozenset()
    assert sig["bus_offer_purchase"] == {("question", "")}  # a yes/no question collecting nothing
    assert sig["bus_ask_city"] == {("question", "place")}


def test_another_services_details_are_no_rival():
    """Through a files-only fit of the SGD workflows, a bus's stations told in the train's words are
    no evidence of the train workflow, while the hotel's own offer still is."""
    from dialfork_dataset.sources import open_source
    from dialfork_metrics.task3.workflow.nodes import NodeAssigner

    source = open_source(f"workflow:{SGD_WORKFLOWS}")
    a = NodeAssigner(encoder="minilm", shared_steps=True, realise=0).fit(source)
    E = a.encode(
        [
            "You'll be leaving from Anaheim Intermodal Center station.",
            "Cambria Hotel North Scottsdale is a nice 3 star hotel.",
        ]
    )
    asg = a.assign("buses_buy_bus_ticket", E)
    assert asg.reasons[0] is None
    assert asg.reasons[1] in ("off-task", "unfamiliar")
