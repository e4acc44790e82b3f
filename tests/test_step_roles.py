"""Step roles and slots derived from the STAR workflows (:mod:`dialfork_dataset.workflow.roles`): what the rule
gives on every task, the known answer on ``weather``, the problem line of a step without a role, and
docs/step_roles.md kept equal to what benchmarks/step_roles_table.py generates."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import networkx as nx
import pytest

from dialfork_dataset.workflow.roles import REQUIRING_ROLES, ROLES, StepRole, derive_roles

ROOT = Path(__file__).resolve().parents[1]

#: The search tasks: their questions hang off the graph (the criteria are given in any order), so no
#: question dominates their query and their outcome steps require no slot.
SEARCH_TASKS = {"apartment_search", "hotel_search", "restaurant_search"}


@pytest.fixture(scope="module")
def corpus(star_dir):
    from dialfork_dataset.star import StarCorpus

    return StarCorpus(str(star_dir))


@pytest.fixture(scope="module")
def all_roles(corpus):
    return {name: (corpus.task(name), derive_roles(corpus.task(name))) for name in sorted(corpus.tasks)}


def test_star_has_24_tasks_and_every_one_is_complete(all_roles):
    assert len(all_roles) == 24
    problems = [p for _, tr in all_roles.values() for p in tr.problems]
    assert not problems, "\n".join(problems)
    assert all(tr.complete for _, tr in all_roles.values())


def test_every_step_has_known_roles_and_the_start_is_the_greeting(all_roles):
    for name, (task, tr) in all_roles.items():
        assert set(tr.steps) == {n for n, k in task.kinds.items() if k in ("action", "query")}, name
        for node, r in tr.steps.items():
            assert r.roles and r.roles <= set(ROLES), (name, node, r.roles)
        assert tr.steps[task.start_node].roles == {"greeting"}, name
        queries = [n for n, k in task.kinds.items() if k == "query"]
        assert queries, name
        assert all(tr.steps[q].roles == {"action"} for q in queries), name


def test_every_question_step_collects_a_slot(all_roles):
    for name, (_, tr) in all_roles.items():
        for node, r in tr.steps.items():
            if "question" in r.roles:
                assert r.collects, (name, node)
            else:
                assert not r.collects, (name, node)  # only question steps collect (no declarations in STAR)


def test_requirements_are_collected_slots_of_requiring_steps(all_roles):
    for name, (_, tr) in all_roles.items():
        collected = set(tr.slots)
        for node, r in tr.steps.items():
            assert set(r.requires) <= collected, (name, node, r.requires)
            assert not set(r.requires) & set(r.collects), (name, node)
            if r.requires:
                assert r.roles & REQUIRING_ROLES, (name, node, r.roles)
        # every slot a step collects or requires has an API-input entry and a value type
        slots = {s for r in tr.steps.values() for s in (*r.collects, *r.requires)}
        assert set(tr.api_slots) == slots == set(tr.value_types), name


def test_outcome_steps_require_slots_except_the_search_tasks(all_roles):
    free = {}
    for name, (_, tr) in all_roles.items():
        outs = [n for n, r in tr.steps.items() if "outcome" in r.roles]
        assert outs, name
        free[name] = [n for n in outs if not tr.steps[n].requires]
        acts = [n for n, r in tr.steps.items() if "action" in r.roles]
        assert all(bool(tr.steps[a].requires) == (name not in SEARCH_TASKS) for a in acts), name
    assert {n for n, f in free.items() if f} == SEARCH_TASKS
    for name in SEARCH_TASKS:
        assert len(free[name]) == len(
            [n for n, r in all_roles[name][1].steps.items() if "outcome" in r.roles]
        )


def test_search_tasks_have_no_question_on_the_way_to_the_query(all_roles):
    """Why the search tasks' outcomes require nothing: no question dominates their query in the graph
    (a question on a loop back to it, "continue searching?", is on some paths only)."""
    for name in SEARCH_TASKS:
        task, tr = all_roles[name]
        g = task.digraph()
        dom = nx.immediate_dominators(g, task.start_node)
        for q in (n for n, k in task.kinds.items() if k == "query"):
            chain, cur = [], q
            while dom.get(cur, cur) != cur:
                cur = dom[cur]
                chain.append(cur)
            assert task.start_node in chain, (name, q)
            assert not [n for n in chain if "question" in tr.steps.get(n, StepRole(n, frozenset())).roles], (
                name
            )


def test_weather_roles_are_the_known_answer(corpus):
    tr = derive_roles(corpus.task("weather"))
    got = {n: (set(r.roles), r.collects, r.requires) for n, r in tr.steps.items()}
    assert got == {
        "hello": ({"greeting"}, (), ()),
        "weather_ask_day": ({"question"}, ("day",), ()),
        "weather_ask_location": ({"question"}, ("location",), ()),
        "weather_inform_forecast": ({"outcome"}, (), ("day", "location")),
        # not reached in the graph: it requires what every query requires
        "weather_inform_nothing_found": ({"outcome"}, (), ("day", "location")),
        "weather_bye": ({"closing"}, (), ()),
        "anything_else": ({"closing"}, (), ()),
        "out_of_scope": ({"fallback"}, (), ()),
        "query": ({"action"}, (), ("day", "location")),
    }
    assert not any(r.declared for r in tr.steps.values())
    assert tr.slots == ["day", "location"]
    assert tr.with_role("question") == ["weather_ask_day", "weather_ask_location"]
    assert tr.role_of(None) is None and tr.role_of("no_such_step") is None


def test_weather_slots_map_to_the_api_inputs(corpus):
    tr = derive_roles(corpus.task("weather"))
    assert dict(tr.api_slots) == {"location": "City", "day": "Day"}
    assert tr.value_types["day"] == "weekday" and tr.value_types["location"] == "categorical"
    assert "Chicago" in tr.values["location"] and "Monday" in tr.values["day"]


class FakeTask:
    """The least a workflow task offers :func:`derive_roles`."""

    name = "fake"
    start_node = "hello"
    kinds = {
        "hello": "action",
        "fake_ask_city": "action",
        "query": "query",
        "fake_inform_result": "action",
        "fake_shrug": "action",
    }

    def digraph(self) -> nx.DiGraph:
        return nx.DiGraph(
            [
                ("hello", "fake_ask_city"),
                ("fake_ask_city", "query"),
                ("query", "fake_inform_result"),
                ("fake_inform_result", "fake_shrug"),
            ]
        )

    def template(self, node: str) -> str:
        return {"fake_inform_result": "It is sunny in {city:s}."}.get(node, "")


def test_a_step_without_a_role_word_is_a_problem_naming_task_and_step():
    tr = derive_roles(FakeTask())
    assert not tr.complete
    assert len(tr.problems) == 1
    (line,) = tr.problems
    assert "'fake'" in line and "'fake_shrug'" in line and "no role" in line
    assert tr.steps["fake_shrug"].roles == frozenset()
    # the rest is derived as usual (the result is an outcome: reached from the query)
    assert tr.steps["fake_ask_city"].collects == ("city",)
    assert tr.steps["fake_inform_result"].roles == {"outcome"}
    assert tr.steps["fake_inform_result"].requires == ("city",)
    assert tr.api_slots == {"city": None}  # no API: nothing to map to


def test_a_task_without_question_or_outcome_is_a_problem():
    class Bare(FakeTask):
        name = "bare"
        kinds = {"hello": "action", "bare_bye": "action"}

        def digraph(self) -> nx.DiGraph:
            return nx.DiGraph([("hello", "bare_bye")])

    tr = derive_roles(Bare())
    assert any("no question step" in p for p in tr.problems)
    assert any("no outcome step" in p for p in tr.problems)


def _script():
    spec = importlib.util.spec_from_file_location(
        "step_roles_table", ROOT / "benchmarks" / "step_roles_table.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_docs_table_is_what_the_script_generates_now(star_dir):
    page = (ROOT / "docs" / "step_roles.md").read_text(encoding="utf-8")
    assert page == _script().render(star_dir), (
        "docs/step_roles.md is stale: run `python benchmarks/step_roles_table.py`"
    )
    assert page.count("\n### ") == 24 and "Problem:" not in page


def test_the_page_is_in_the_docs_nav():
    assert "step_roles.md" in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
