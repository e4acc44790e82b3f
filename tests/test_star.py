"""Tests of the STAR reader (dialfork_dataset.star) on the shared copy, an original-layout copy
built here, a loopback HTTP server for download_star, and corrupted copies."""

from __future__ import annotations

import gzip
import http.server
import io
import json
import shutil
import threading
import zipfile
from collections import Counter
from pathlib import Path

import pytest

from dialfork_dataset.star import (
    STAR_ENV,
    Scenario,
    StarCorpus,
    StarError,
    StarTask,
    download_star,
    infer_branch_parents,
    node_kinds,
    resolve_star,
)

# ------------------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def corpus(star_dir: Path) -> StarCorpus:
    return StarCorpus(star_dir)


@pytest.fixture(scope="module")
def raw_rows(star_dir: Path) -> list[dict]:
    with open(star_dir / "scenarios.jsonl", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


ORIG_IDS = (
    1,
    4,
    29,
    1553,
)  # doctor_followup (no task folder copied), weather, trivia (null domain), multitask
ORIG_TASKS = ("apartment_schedule", "trivia", "weather")

_SNAKE_TO_CAMEL = {"api": "APIName", "action_label": "ActionLabel", "total_items": "TotalItems"}


def _camel(key: str) -> str:
    return _SNAKE_TO_CAMEL.get(key) or "".join(w.capitalize() for w in key.split("_"))


def _to_original(row: dict, dialogue: dict) -> dict:
    """A compact-layout scenario + dialogue written back in RasaHQ/STAR's per-file format."""
    events = [
        {_camel(k): v for k, v in e.items() if not (k == "text" and v is None)} for e in dialogue["events"]
    ]
    return {
        "AnonymizedUserWorkerID": "u",
        "AnonymizedWizardWorkerID": "w",
        "BatchID": "woz_test",
        "CompletionLevel": row["completion_level"],
        "DialogueID": row["dialogue_id"],
        "Events": events,
        "FORMAT-VERSION": 7,
        "Scenario": {
            "Domains": row["domains"],
            "Happy": row["happy"],
            "MultiTask": row["multitask"],
            "UserTask": row["user_task"],
            "WizardTask": row["wizard_task"],
            "WizardCapabilities": [
                {"Domain": t.split("_")[0], "SchemaImage": f"{t}.jpg", "Task": t} for t in row["tasks"]
            ],
        },
        "UserQuestionnaire": [],
        "WizardQuestionnaire": [],
    }


def _copy_tasks_and_apis(star_dir: Path, root: Path, tasks=ORIG_TASKS) -> None:
    (root / "apis" / "apis").mkdir(parents=True)
    (root / "apis" / "dbs").mkdir()
    for t in tasks:
        shutil.copytree(star_dir / "tasks" / t, root / "tasks" / t)
        shutil.copy(star_dir / "apis" / "apis" / f"{t}.json", root / "apis" / "apis")
    shutil.copy(star_dir / "apis" / "dbs" / "weather.json", root / "apis" / "dbs")


@pytest.fixture(scope="module")
def shared_dialogues(star_dir: Path) -> dict[int, dict]:
    out = {}
    with gzip.open(star_dir / "dialogues.jsonl.gz", "rt", encoding="utf-8") as fh:
        for line in fh:
            d = json.loads(line)
            if d["dialogue_id"] in ORIG_IDS:
                out[d["dialogue_id"]] = d
            if len(out) == len(ORIG_IDS):
                break
    return out


@pytest.fixture(scope="module")
def original_copy(tmp_path_factory, star_dir: Path, raw_rows, shared_dialogues) -> Path:
    root = tmp_path_factory.mktemp("orig") / "STAR"
    _copy_tasks_and_apis(star_dir, root)
    (root / "dialogues").mkdir()
    rows = {r["dialogue_id"]: r for r in raw_rows}
    for i in ORIG_IDS:
        (root / "dialogues" / f"{i}.json").write_text(
            json.dumps(_to_original(rows[i], shared_dialogues[i]), indent=2)
        )
    return root


@pytest.fixture()
def small_copy(tmp_path: Path, star_dir: Path) -> Path:
    """A compact-layout copy with two tasks, to corrupt."""
    root = tmp_path / "star"
    _copy_tasks_and_apis(star_dir, root, tasks=("apartment_schedule", "weather"))
    (root / "scenarios.jsonl").write_text(
        "\n".join(
            json.dumps(
                {
                    "dialogue_id": i,
                    "tasks": ["weather"],
                    "domains": ["weather"],
                    "happy": True,
                    "multitask": False,
                    "completion_level": "Complete",
                    "user_task": "u",
                    "wizard_task": "w",
                    "user_guide": [],
                    "n_user_utterances": i,
                    "n_system_utterances": i + 1,
                }
            )
            for i in (3, 1, 2)
        )
        + "\n"
    )
    return root


# ------------------------------------------------------------------------------------------ shared copy


def test_counts(corpus: StarCorpus, raw_rows):
    assert corpus.layout == "compact"
    assert len(corpus.tasks) == 24
    assert list(corpus.tasks) == sorted(corpus.tasks)
    assert len(corpus.scenarios) == 6652 == len(raw_rows)
    assert sum(s.single_task for s in corpus.scenarios) == 4671
    assert [s.scenario_id for s in corpus.scenarios] == [str(i) for i in range(1, 6653)]
    assert set(corpus.domains) == {
        "apartment",
        "bank",
        "doctor",
        "hotel",
        "meeting",
        "party",
        "plane",
        "restaurant",
        "ride",
        "spaceship",
        "trip",
        "trivia",
        "weather",
    }
    assert corpus.domains["ride"] == ["ride_book", "ride_change", "ride_status"]
    assert corpus.domains["weather"] == ["weather"]
    assert sum(len(v) for v in corpus.domains.values()) == 24
    t = corpus.task("apartment_schedule")
    assert (t.domain, t.function) == ("apartment", "book_apartment_viewing")
    assert t.api is not None and t.api.function == "book_apartment_viewing" and t.api.db == "schedule"
    assert t.api.categories("Day")[:2] == ["Sunday", "Monday"]
    assert t.api.categories("RenterName") == []
    with pytest.raises(StarError, match="no input slot"):
        t.api.categories("Colour")
    assert "movie_search" in corpus.apis and len(corpus.apis) == 25
    assert t.flowchart is not None and t.flowchart.name == "apartment_schedule.jpg"
    assert t.instructions is None and corpus.task("trip_directions").instructions
    assert len(t.nlu["hello"]) > 3 and all(isinstance(x, str) and x for x in t.nlu["hello"])
    # the NLU file's intents are the response nodes (STAR has one typo: "succesful")
    assert set(t.nlu) - (set(t.responses) | set(t.replies)) == {"apartment_inform_booking_succesful"}
    assert isinstance(corpus.dbs["weather"], list)


def test_scenario_fields_match_jsonl(corpus: StarCorpus, raw_rows):
    for row in raw_rows[:200] + raw_rows[-50:]:
        s = corpus.scenario(row["dialogue_id"])
        assert s.scenario_id == str(row["dialogue_id"])
        assert s.tasks == tuple(row["tasks"]) and s.user_guide == tuple(row["user_guide"])
        assert (s.happy, s.multitask, s.completion_level) == (
            row["happy"],
            row["multitask"],
            row["completion_level"],
        )
        assert (s.user_task, s.wizard_task) == (row["user_task"], row["wizard_task"])
        assert s.length == row["n_user_utterances"] + row["n_system_utterances"]
    # STAR's null domain of some trivia dialogues is filled from the task name
    s29 = corpus.scenario(29)
    assert s29.domains == ("trivia",) and s29.task == "trivia"
    multi = corpus.scenario(1553)
    assert multi.tasks == ("restaurant_book", "bank_balance", "weather") and not multi.single_task
    with pytest.raises(StarError, match="1553 has 3 tasks"):
        _ = multi.task
    with pytest.raises(StarError, match="no STAR scenario"):
        corpus.scenario("99999")


def test_length_budgets_computed_independently(corpus: StarCorpus, raw_rows):
    for task in ("apartment_schedule", "trivia", "ride_change"):
        single = [
            r["n_user_utterances"] + r["n_system_utterances"]
            for r in raw_rows
            if r["tasks"] == [task] and not r["multitask"]
        ]
        anyt = [r["n_user_utterances"] + r["n_system_utterances"] for r in raw_rows if task in r["tasks"]]
        assert corpus.length_budget(task) == max(single)
        assert corpus.length_budget(task, single_task_only=False) == max(anyt)
    assert corpus.length_budget("apartment_schedule") == 30
    assert corpus.length_budget("trivia") == 50


def test_scenarios_for(corpus: StarCorpus, raw_rows):
    w = corpus.scenarios_for("weather")
    assert len(w) == sum(r["tasks"] == ["weather"] for r in raw_rows) == 222
    assert all(s.tasks == ("weather",) for s in w)
    happy = corpus.scenarios_for("weather", happy=True)
    assert len(happy) == sum(r["tasks"] == ["weather"] and r["happy"] for r in raw_rows)
    assert len(corpus.scenarios_for("weather", single_task=False)) == sum(
        "weather" in r["tasks"] for r in raw_rows
    )
    assert len(corpus.scenarios_for()) == 4671
    with pytest.raises(StarError, match="unknown STAR task 'wether'.*weather"):
        corpus.scenarios_for("wether")


def test_summary(corpus: StarCorpus):
    s = corpus.summary()
    assert (s["tasks"], s["domains"], s["scenarios"], s["single_task_scenarios"]) == (24, 13, 6652, 4671)
    assert s["per_task"]["apartment_schedule"] == {
        "domain": "apartment",
        "single_task_scenarios": 340,
        "length_budget": 30,
    }
    assert sum(v["single_task_scenarios"] for v in s["per_task"].values()) == 4671


def test_human_dialogues(corpus: StarCorpus):
    it = corpus.human_dialogues()
    for _ in range(30):
        d = next(it)
        s = corpus.scenario(d["scenario_id"])
        assert d["tasks"] == list(s.tasks)
        n_user = sum(e["agent"] == "User" and e["action"] == "utter" for e in d["events"])
        n_sys = sum(
            e["agent"] == "Wizard" and e["action"] in ("utter", "pick_suggestion") for e in d["events"]
        )
        assert (n_user, n_sys) == (s.n_user_utterances, s.n_system_utterances)
    it.close()


# ------------------------------------------------------------------------------------------ workflows

EXPECTED_PARENTS = {
    "apartment_schedule": {
        "available": ["query_check"],
        "unavailable": ["query_check"],
        "yes": ["apartment_inform_viewing_available"],
        "no": ["apartment_inform_viewing_available"],
    },
    "bank_balance": {
        "info_missing": ["bank_ask_pin"],
        "info_missing2": ["bank_ask_childhood_pets_name"],
        "query_success": ["query"],
        "query_failure": ["query"],
    },
    "hotel_book": {
        "available": ["query_check"],
        "unavailable": ["query_check"],
        "yes": ["hotel_ask_confirm_booking"],
        "no": ["hotel_ask_confirm_booking"],
        "query_success": ["query_book"],
        "query_failure": ["query_book"],
    },
    "ride_book": {
        "query_success": ["query_check"],
        "query_failure": ["query_check"],
        "yes": ["ride_ask_confirm_booking"],
        "no": ["ride_ask_confirm_booking"],
    },
    "spaceship_access_codes": {"no": ["anything_else"]},
    "trip_directions": {
        "yes": ["trip_inform_simple_step_ask_proceed"],
        "no": ["trip_inform_simple_step_ask_proceed"],
        "done": ["trip_inform_simple_step_ask_proceed"],
    },
    "trivia": {
        "correct": ["trivia_ask_question"],
        "incorrect": ["trivia_ask_question"],
        "noanswer": ["trivia_ask_question"],
        "done": [
            "trivia_inform_answer_correct_ask_next",
            "trivia_inform_answer_incorrect_ask_next",
            "trivia_inform_answer_2_ask_next",
        ],
    },
    "weather": {},
}


@pytest.mark.parametrize("task", sorted(EXPECTED_PARENTS))
def test_branch_parents_match_flowcharts(corpus: StarCorpus, task: str):
    assert corpus.task(task).branch_parents == EXPECTED_PARENTS[task]


def _flatten(steps, branch_parents, numbers=None, gotos=None):
    numbers = [] if numbers is None else numbers
    gotos = [] if gotos is None else gotos
    for s in steps:
        (gotos if s.goto is not None else numbers).append(s)
        for b in s.branches:
            assert b.label in branch_parents
            _flatten(b.steps, branch_parents, numbers, gotos)
    return numbers, gotos


def test_digraph_invariants_all_tasks(corpus: StarCorpus):
    for name, t in corpus.tasks.items():
        g = t.digraph()
        kinds = Counter(d["kind"] for _, d in g.nodes(data=True))
        assert set(kinds) <= {"action", "query", "branch"}, name
        assert g.in_degree("hello") == 0 and g.nodes["hello"]["kind"] == "action"
        for n, d in g.nodes(data=True):
            if d["kind"] == "branch":  # every outcome is attached to a query or a question, and reachable
                assert d["attached"] and d["reachable"], (name, n)
                assert all(g.nodes[p]["kind"] in ("query", "action") for p in g.predecessors(n)), (name, n)
            if d["kind"] == "query":
                assert n.startswith("query") and d["template"] is None
        for src, dst in t.graph.items():
            assert g.edges[src, dst]["edge"] == "next"
        # every graph node is reachable from hello, except ride_status's never-linked update node
        # (ride_provide_booking_status_update -> anything_else, the only edge into anything_else there)
        unreachable = {n for n in set(t.graph) | set(t.graph.values()) if not g.nodes[n]["reachable"]}
        expected = {"ride_provide_booking_status_update", "anything_else"} if name == "ride_status" else set()
        assert unreachable == expected, name
        assert t.end_nodes and all(g.out_degree(n) == 0 for n in t.end_nodes)
        assert "out_of_scope" in t.other_nodes()
        # steps: terminate, number every reachable non-branch node exactly once, gotos point back
        numbers, gotos = _flatten(t.steps(), t.branch_parents)
        assert sorted(s.number for s in numbers) == list(range(1, len(numbers) + 1)), name
        assert len({s.node for s in numbers}) == len(numbers)
        reach = {n for n, d in g.nodes(data=True) if d["reachable"] and d["kind"] != "branch"}
        assert {s.node for s in numbers} == reach, name
        by_node = {s.node: s.number for s in numbers}
        assert all(s.goto == by_node[s.node] for s in gotos)


def test_apartment_schedule_digraph(corpus: StarCorpus):
    g = corpus.task("apartment_schedule").digraph()
    assert set(g.successors("query_check")) == {"available", "unavailable"}
    assert set(g.successors("apartment_inform_viewing_available")) == {"yes", "no"}
    assert list(g.successors("no")) == ["apartment_ask_apartment_name"]
    assert g.nodes["query_check"]["kind"] == "query" and g.nodes["yes"]["kind"] == "branch"
    assert g.nodes["apartment_inform_nothing_found"]["kind"] == "action"
    assert not g.nodes["apartment_inform_nothing_found"]["reachable"]
    assert g.nodes["ask_name"]["template"] == "Could you give me your name, please?"
    assert g.edges["query_check", "available"]["edge"] == "outcome"


APARTMENT_STEPS = """\
1. Greet the user and ask how you can help [hello]
2. Ask for the user's name [ask_name]
3. Ask the user for the apartment name [apartment_ask_apartment_name]
4. Ask the user for the day [apartment_ask_day]
5. Ask the user for the start time [apartment_ask_start_time]
6. Ask the user for the application fee paid [apartment_ask_application_fee_paid]
7. Ask the user for the custom message [apartment_ask_custom_message]
8. Query the knowledge base (book_apartment_viewing) to check availability [query_check]
   - If the outcome is "Unavailable" [unavailable]:
      9. Inform the user: viewing unavailable [apartment_inform_viewing_unavailable]
   - If the outcome is "Available" [available]:
      10. Inform the user: viewing available [apartment_inform_viewing_available]
         - If the outcome is "No" [no]:
            Go back to step 3.
         - If the outcome is "Yes" [yes]:
            11. Query the knowledge base (book_apartment_viewing) to make the booking [query_book]
            12. Inform the user: booking successful [apartment_inform_booking_successful]
            13. Ask whether there is anything else you can do [anything_else]"""


def test_render_steps_by_hand(corpus: StarCorpus):
    t = corpus.task("apartment_schedule")
    assert t.render_steps(with_templates=False, include_other=False) == APARTMENT_STEPS
    full = t.render_steps()
    assert '2. Ask for the user\'s name [ask_name]: "Could you give me your name, please?"' in full
    assert "Responses usable at any point:" in full and "[out_of_scope]" in full
    steps = t.steps()
    assert [s.number for s in steps] == list(range(1, 9))
    assert steps[7].kind == "query" and [b.label for b in steps[7].branches] == ["unavailable", "available"]
    avail = steps[7].branches[1].steps[0]
    assert (avail.number, avail.kind, avail.node) == (10, "branch", "apartment_inform_viewing_available")
    back = avail.branches[0].steps[0]
    assert (back.goto, back.node, back.text) == (3, "apartment_ask_apartment_name", "Go back to step 3")
    trip = corpus.task("trip_directions").render_steps(include_other=False)
    assert "Go back to step 7." in trip and "Additional instructions:" in trip


def test_bank_detour_rendering(corpus: StarCorpus):
    text = corpus.task("bank_balance").render_steps(with_templates=False, include_other=False)
    lines = text.splitlines()
    assert lines[3] == "4. Ask the user for the pin [bank_ask_pin]"
    assert "      Continue with step 9." in lines
    assert "9. Query the knowledge base (bank_balance) [query]" in lines


def test_inference_on_handmade_workflow():
    replies = {
        "hello": "Hi",
        "ask_x": "What x?",
        "inform_ok": "Done, {x:s}.",
        "inform_ko": "Sorry.",
        "yes": "Yes",
        "no": "No",
        "query": "Query",
        "available": "Available",
        "unavailable": "Unavailable",
    }
    graph = {
        "hello": "ask_x",
        "ask_x": "query",
        "available": "inform_ok",
        "unavailable": "inform_ko",
        "no": "ask_x",
    }
    kinds = node_kinds(replies, graph, responses=None)
    assert kinds == {
        "hello": "action",
        "ask_x": "action",
        "inform_ok": "action",
        "inform_ko": "action",
        "yes": "branch",
        "no": "branch",
        "query": "query",
        "available": "branch",
        "unavailable": "branch",
    }
    parents = infer_branch_parents(replies, graph, kinds)
    # inform_ko is not a question, inform_ok ends with "." -> yes/no fall back to... no open question
    assert parents["available"] == ["query"] and parents["unavailable"] == ["query"]
    assert parents["yes"] == [] and parents["no"] == []
    replies["inform_ok"] = "Found {x:s}. Book it?"
    parents = infer_branch_parents(replies, graph, kinds)
    assert parents["yes"] == ["inform_ok"] and parents["no"] == ["inform_ok"]


# ------------------------------------------------------------------------------------------ original layout


def test_original_layout_gives_same_scenarios(original_copy: Path, corpus: StarCorpus, shared_dialogues):
    orig = StarCorpus(original_copy)
    assert orig.layout == "original"
    assert list(orig.tasks) == list(ORIG_TASKS)
    assert [s.scenario_id for s in orig.scenarios] == [str(i) for i in ORIG_IDS]
    for s in orig.scenarios:
        assert s == corpus.scenario(s.scenario_id)
    assert orig.length_budget("weather") == corpus.scenario(4).length
    assert orig.length_budget("weather", single_task_only=False) == max(
        corpus.scenario(4).length, corpus.scenario(1553).length
    )
    dialogues = list(orig.human_dialogues())
    assert [d["scenario_id"] for d in dialogues] == [str(i) for i in ORIG_IDS]
    for d in dialogues:
        shared = shared_dialogues[int(d["scenario_id"])]
        assert d["events"] == shared["events"]
    assert orig.summary()["scenarios"] == 4
    assert orig.task("weather").render_steps() == corpus.task("weather").render_steps()


def test_original_layout_bad_dialogue(original_copy: Path, tmp_path: Path):
    root = tmp_path / "STAR"
    shutil.copytree(original_copy, root)
    (root / "dialogues" / "7.json").write_text(
        '{"DialogueID": 7, "Events": [],\n "Scenario": {"Happy": tru}}'
    )
    d = json.loads((root / "dialogues" / "4.json").read_text())
    del d["Scenario"]["UserTask"]
    (root / "dialogues" / "4.json").write_text(json.dumps(d))
    c = StarCorpus(root)
    with pytest.raises(StarError) as ei:
        _ = c.scenarios
    msg = str(ei.value)
    assert "7.json:2:" in msg and "malformed JSON" in msg
    assert "4.json: Scenario.UserTask missing" in msg
    assert len(ei.value.errors) == 2


# ------------------------------------------------------------------------------------------ bad input


def test_missing_task_file(small_copy: Path):
    (small_copy / "tasks" / "weather" / "weather.json").unlink()
    with pytest.raises(StarError, match=r"weather\.json: missing task file"):
        StarCorpus(small_copy)


def test_malformed_task_json_line_col(small_copy: Path):
    p = small_copy / "tasks" / "weather" / "weather.json"
    p.write_text('{\n  "task": "weather",\n  "replies": {,\n}')
    with pytest.raises(StarError, match=r"weather\.json:3:15: malformed JSON"):
        StarCorpus(small_copy)


def test_unknown_graph_node(small_copy: Path):
    p = small_copy / "tasks" / "apartment_schedule" / "apartment_schedule.json"
    data = json.loads(p.read_text())
    data["graph"]["apartment_ask_day"] = "apartment_ask_colour"
    p.write_text(json.dumps(data))
    with pytest.raises(StarError, match="unknown target node 'apartment_ask_colour'") as ei:
        StarCorpus(small_copy)
    assert "apartment_schedule.json: graph edge 'apartment_ask_day' -> 'apartment_ask_colour'" in str(
        ei.value
    )
    with pytest.raises(StarError, match="apartment_ask_colour"):
        StarTask.load(p.parent)


def test_all_problems_collected(small_copy: Path):
    (small_copy / "tasks" / "weather" / "weather.json").write_text("[1, 2")
    p = small_copy / "tasks" / "apartment_schedule" / "apartment_schedule.json"
    data = json.loads(p.read_text())
    del data["task"]
    data["graph"]["bogus_node"] = "hello"
    p.write_text(json.dumps(data))
    api = small_copy / "apis" / "apis" / "weather.json"
    a = json.loads(api.read_text())
    a["required"].append("Planet")
    api.write_text(json.dumps(a))
    with pytest.raises(StarError) as ei:
        StarCorpus(small_copy)
    errs = ei.value.errors
    assert any("weather.json:1:" in e and "malformed JSON" in e for e in errs)
    assert any("'task' (the API function name) missing" in e for e in errs)
    assert any("unknown source node 'bogus_node'" in e for e in errs)
    assert any("apis/weather.json: required slot(s) ['Planet']" in e for e in errs)
    assert str(ei.value).startswith(f"{len(errs)} problem(s) in STAR copy")


def test_unknown_task_name(small_copy: Path):
    c = StarCorpus(small_copy)
    with pytest.raises(
        StarError, match="unknown STAR task 'hotel_book'.*known tasks: apartment_schedule, weather"
    ):
        c.task("hotel_book")


def test_small_copy_scenarios_and_bad_jsonl(small_copy: Path):
    c = StarCorpus(small_copy)
    assert [s.scenario_id for s in c.scenarios] == ["1", "2", "3"]  # sorted by id
    assert c.length_budget("weather") == 7
    with pytest.raises(StarError, match="no single-task STAR dialogue"):
        c.length_budget("apartment_schedule")
    with pytest.raises(StarError, match="dialogues.jsonl.gz: missing"):
        next(c.human_dialogues())
    with open(small_copy / "scenarios.jsonl", "a") as fh:
        fh.write('{"dialogue_id": 9, "tasks": "weather"}\n{broken\n')
    c2 = StarCorpus(small_copy)
    with pytest.raises(StarError) as ei:
        _ = c2.scenarios
    errs = ei.value.errors
    assert any("scenarios.jsonl:5: malformed JSON" in e for e in errs)
    assert any("scenarios.jsonl:4: 'tasks' should be list" in e and "missing key 'happy'" in e for e in errs)


def test_not_a_star_folder(tmp_path: Path):
    with pytest.raises(StarError, match="no such folder"):
        StarCorpus(tmp_path / "nope")
    with pytest.raises(StarError, match="not a STAR copy.*download_star"):
        StarCorpus(tmp_path)


def test_tasks_only_copy(small_copy: Path):
    (small_copy / "scenarios.jsonl").unlink()
    c = StarCorpus(small_copy)
    assert c.layout == "tasks-only" and len(c.tasks) == 2
    with pytest.raises(StarError, match="tasks only"):
        _ = c.scenarios


def test_resolve_star(monkeypatch, star_dir: Path, tmp_path: Path):
    assert resolve_star(star_dir) == star_dir.resolve()
    monkeypatch.delenv(STAR_ENV, raising=False)
    with pytest.raises(StarError, match="download_star"):
        resolve_star(None)
    with pytest.raises(StarError, match="DIALFORK_STAR_DIR is not set"):
        StarCorpus()
    monkeypatch.setenv(STAR_ENV, str(star_dir))
    assert resolve_star(None) == star_dir.resolve()
    assert StarCorpus().path == star_dir.resolve()
    monkeypatch.setenv(STAR_ENV, str(tmp_path))
    with pytest.raises(StarError, match=r"\$DIALFORK_STAR_DIR\) is not a STAR copy"):
        resolve_star()


def test_scenario_is_frozen(corpus: StarCorpus):
    s = corpus.scenario(4)
    assert isinstance(s, Scenario)
    with pytest.raises(AttributeError):
        s.happy = False  # type: ignore[misc]


# ------------------------------------------------------------------------------------------ download


class _Handler(http.server.BaseHTTPRequestHandler):
    files: dict[str, bytes] = {}
    hits: list[str] = []

    def do_GET(self):  # noqa: N802 (http.server API)
        type(self).hits.append(self.path)
        body = self.files.get(self.path)
        if body is None:
            self.send_error(404, "Not Found")
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture()
def server(monkeypatch, original_copy: Path):
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for f in sorted(original_copy.rglob("*")):
            if f.is_file() and f.suffix != ".jpg":
                zf.write(f, "STAR-abc123/" + f.relative_to(original_copy).as_posix())
    _Handler.files = {"/star.zip": buf.getvalue(), "/junk.zip": b"this is not a zip archive"}
    _Handler.hits = []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def test_download_star(server: str, tmp_path: Path):
    dest = tmp_path / "data" / "star"
    out = download_star(dest, f"{server}/star.zip", progress=False)
    assert out == dest.resolve()
    c = StarCorpus(out)
    assert list(c.tasks) == list(ORIG_TASKS) and len(c.scenarios) == len(ORIG_IDS)
    assert [p.name for p in dest.parent.iterdir()] == ["star"]  # no temporary leftovers
    # a local copy given: nothing downloads (the URL would 404)
    assert download_star(dest, f"{server}/missing.zip") == dest.resolve()
    assert _Handler.hits == ["/star.zip"]
    # force: downloaded again and replaced atomically
    (dest / "marker").write_text("old")
    download_star(dest, f"{server}/star.zip", force=True, progress=False)
    assert not (dest / "marker").exists() and _Handler.hits == ["/star.zip", "/star.zip"]


def test_download_star_errors(server: str, tmp_path: Path):
    dest = tmp_path / "star"
    with pytest.raises(StarError, match=r"missing\.zip failed: HTTP 404"):
        download_star(dest, f"{server}/missing.zip")
    assert not dest.exists() and list(tmp_path.iterdir()) == []
    with pytest.raises(StarError, match="not a zip archive"):
        download_star(dest, f"{server}/junk.zip")
    assert list(tmp_path.iterdir()) == []
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(StarError, match="exists and is not a STAR copy"):
        download_star(other, f"{server}/star.zip")
    assert _Handler.hits == ["/missing.zip", "/junk.zip"]
    with pytest.raises(StarError, match="failed"):
        download_star(tmp_path / "x", "http://127.0.0.1:9/star.zip", timeout=5)


def test_cli(star_dir: Path, capsys):
    from dialfork_dataset.star import main

    assert main(["steps", "weather", "--path", str(star_dir), "--no-templates"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("1. Greet the user and ask how you can help [hello]\n")
    assert "4. Query the knowledge base (weather) [query]" in out
    assert main(["summary", str(star_dir)]) == 0
    assert json.loads(capsys.readouterr().out)["single_task_scenarios"] == 4671
    assert main(["steps", "nope", "--path", str(star_dir)]) == 2
    assert "unknown STAR task 'nope'" in capsys.readouterr().err
