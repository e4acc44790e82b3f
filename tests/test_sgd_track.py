"""The sgd track of Task 3 (issue 44, item 1): SGD dialogues that follow their service's workflow, forked
by editing them at a known turn; the workflow files of examples/workflows/sgd.

Known answers on hand-made turns, dialogues and folders; then the track on the real SGD subset
(``$DIALFORK_SGD_DIR``, else ``../shared/sgd``; skipped when absent) with four tasks and at most six
dialogues each: services_2 and services_3 share a domain (GR), the others give WIC donors.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

from dialfork_dataset.forks import fork_turns, system_turn_positions
from dialfork_dataset.records import record_errors
from dialfork_dataset.tracks.engine import EDIT_TYPES, TRACK_FIELDS, core_record
from dialfork_dataset.tracks.sgd import (
    ACT_PRIORITY,
    CONFORMANCE_RULE,
    EXCLUSION_REASONS,
    SGD_TASKS,
    WORKFLOWS_DIR,
    SgdError,
    build_sgd_track,
    ensure_sgd_track,
    exclusion_reason,
    read_sgd,
    read_sgd_manifest,
    sgd_dialogue,
    step_for_turn,
    turn_act,
)

ROOT = Path(__file__).resolve().parents[1]
BY_NAME = {t.name: t for t in SGD_TASKS}
BUSES = BY_NAME["buses_buy_bus_ticket"]
BUS_ASKS = {
    "from_location": "buses_ask_from_location",
    "to_location": "buses_ask_to_location",
    "leaving_date": "buses_ask_leaving_date",
    "leaving_time": "buses_ask_leaving_time",
    "travelers": "buses_ask_travelers",
}
TASKS = ("buses_buy_bus_ticket", "media_play_movie", "dentist_book_appointment", "doctor_book_appointment")


def _sgd_dir() -> Path:
    return Path(os.environ.get("DIALFORK_SGD_DIR") or ROOT.parent / "shared" / "sgd")


@pytest.fixture(scope="module")
def sgd_dir() -> Path:
    p = _sgd_dir()
    if not (p / "dialogues.jsonl.gz").is_file() or not (p / "schema.json").is_file():
        pytest.skip(f"no SGD subset at {p} (set DIALFORK_SGD_DIR)")
    return p


# ----------------------------------------------------------------------------- acts -> steps
def _a(act, slot="", *values):
    return {"act": act, "slot": slot, "values": list(values)}


def test_the_act_priority_picks_the_step_of_a_turn():
    step = lambda *acts: step_for_turn(list(acts), BUSES, BUS_ASKS)  # noqa: E731
    assert step(_a("REQUEST", "to_location"), _a("REQUEST", "from_location")) == (
        "buses_ask_to_location",
        "REQUEST",
    )
    assert step(_a("OFFER", "leaving_time", "7 am"), _a("INFORM_COUNT", "count", "9")) == (
        "buses_offer_bus",
        "OFFER",
    )
    assert step(_a("INFORM", "to_station", "x"), _a("NOTIFY_SUCCESS")) == (
        "buses_purchase_succeeded",
        "NOTIFY_SUCCESS",
    )
    assert step(_a("NOTIFY_FAILURE"), _a("REQ_MORE")) == ("buses_purchase_failed", "NOTIFY_FAILURE")
    assert step(_a("CONFIRM", "travelers", "2"), _a("REQUEST", "travelers")) == (
        "buses_confirm_purchase",
        "CONFIRM",
    )
    assert step(_a("OFFER_INTENT", "intent", "BuyBusTicket")) == ("buses_offer_purchase", "OFFER_INTENT")
    assert step(_a("INFORM", "from_station", "x")) == ("buses_inform_details", "INFORM")
    assert step(_a("REQ_MORE")) == ("anything_else", "REQ_MORE")
    assert step(_a("GOODBYE")) == ("goodbye", "GOODBYE")
    assert step(_a("REQUEST", "fare")) == (None, "REQUEST")  # no step asks for it
    assert step(_a("THANK_YOU")) == (None, None) and turn_act([]) is None
    assert ACT_PRIORITY[:4] == ("NOTIFY_SUCCESS", "NOTIFY_FAILURE", "CONFIRM", "OFFER_INTENT")
    assert all(set(t.steps) == set(ACT_PRIORITY) - {"REQUEST"} for t in SGD_TASKS)


# ----------------------------------------------------------------------------- conformance
def _turn(speaker, *actions, intent=None, service="Buses_1", text=None):
    frame = {"service": service, "actions": list(actions)}
    if speaker == "USER":
        frame["state"] = {"active_intent": intent}
    said = " ".join(f"{a['act']}({a['slot']})" for a in actions)
    return {"speaker": speaker, "utterance": text or f"  {speaker.lower()}: {said}  ", "frames": [frame]}


def _dialogue(*turns, did="1_00001", services=("Buses_1",)):
    return {"dialogue_id": did, "services": list(services), "split": "train", "turns": list(turns)}


def _bus_dialogue(**kw):
    return _dialogue(
        _turn("USER", _a("INFORM_INTENT", "intent", "FindBus"), intent="FindBus"),
        _turn("SYSTEM", _a("REQUEST", "from_location")),
        _turn("USER", _a("INFORM", "from_location", "LA"), intent="FindBus"),
        _turn("SYSTEM", _a("OFFER", "leaving_time", "7 am"), _a("INFORM_COUNT", "count", "3")),
        _turn("USER", _a("SELECT"), intent="FindBus"),
        _turn("SYSTEM", _a("OFFER_INTENT", "intent", "BuyBusTicket")),
        _turn("USER", _a("AFFIRM_INTENT"), intent="BuyBusTicket"),
        _turn("SYSTEM", _a("REQUEST", "travelers")),
        _turn("USER", _a("INFORM", "travelers", "2"), intent="BuyBusTicket"),
        _turn("SYSTEM", _a("CONFIRM", "travelers", "2")),
        _turn("USER", _a("AFFIRM"), intent="BuyBusTicket"),
        _turn("SYSTEM", _a("NOTIFY_SUCCESS")),
        _turn("USER", _a("THANK_YOU"), intent="NONE"),
        _turn("SYSTEM", _a("GOODBYE")),
        **kw,
    )


def test_the_conformance_rule_on_hand_made_dialogues():
    d = _bus_dialogue()
    assert exclusion_reason(d, BUSES, BUS_ASKS) is None
    h = sgd_dialogue(d, BUSES, BUS_ASKS, "buses")
    assert h.dialogue_id == "sgd-train-1_00001" and h.scenario_id == "train-1_00001"
    assert h.system_nodes == (
        "buses_ask_from_location",
        "buses_offer_bus",
        "buses_offer_purchase",
        "buses_ask_travelers",
        "buses_confirm_purchase",
        "buses_purchase_succeeded",
        "goodbye",
    )
    assert [t["speaker"] for t in h.turns] == ["user", "system"] * 7
    assert (
        h.turns[0]["text"] == "user: INFORM_INTENT(intent)" and h.variant == "crowd" and h.domain == "buses"
    )

    def edited(i, turn=None, **kw):
        x = _bus_dialogue(**kw)
        if turn is not None:
            x["turns"][i] = turn
        return x

    tx = "BuyBusTicket"
    cases = {
        "other service": edited(3, _turn("SYSTEM", _a("OFFER", "x", "y"), service="Trains_1")),
        "other intent": edited(2, _turn("USER", _a("INFORM", "x", "y"), intent="FindTrains")),
        "no transaction": _dialogue(*_bus_dialogue()["turns"][:6]),
        "search after the transaction": edited(10, _turn("USER", _a("REQUEST_ALTS"), intent="FindBus")),
        "transaction failed": edited(11, _turn("SYSTEM", _a("NOTIFY_FAILURE"), _a("REQ_MORE"))),
        "no success": edited(11, _turn("SYSTEM", _a("REQ_MORE"))),
        "unmapped turn": edited(7, _turn("SYSTEM", _a("REQUEST", "fare"))),
        "T < 4": _dialogue(
            _turn("USER", _a("INFORM_INTENT", "intent", tx), intent=tx),
            _turn("SYSTEM", _a("CONFIRM", "travelers", "1")),
            _turn("USER", _a("AFFIRM"), intent=tx),
            _turn("SYSTEM", _a("NOTIFY_SUCCESS")),
            _turn("USER", _a("THANK_YOU"), intent="NONE"),
            _turn("SYSTEM", _a("GOODBYE")),
        ),
    }
    assert set(cases) == set(EXCLUSION_REASONS)
    for reason, dialogue in cases.items():
        assert exclusion_reason(dialogue, BUSES, BUS_ASKS) == reason, reason
        assert sgd_dialogue(dialogue, BUSES, BUS_ASKS, "buses") is None
    two_services = _bus_dialogue(services=("Buses_1", "Trains_1"))
    assert exclusion_reason(two_services, BUSES, BUS_ASKS) == "other service"
    # straight to the transaction (no search) is conformant; NONE between the intents is no intent
    direct = _dialogue(
        _turn("USER", _a("INFORM_INTENT", "intent", tx), intent=tx),
        *_bus_dialogue()["turns"][7:],
    )
    assert exclusion_reason(direct, BUSES, BUS_ASKS) is None
    with_none = edited(6, _turn("USER", _a("AFFIRM_INTENT"), intent="NONE"))
    assert exclusion_reason(with_none, BUSES, BUS_ASKS) is None
    assert "T >= 4" in CONFORMANCE_RULE and "NOTIFY_SUCCESS" in CONFORMANCE_RULE


# ----------------------------------------------------------------------------- reading the folder
def _write_sgd(folder: Path, dialogues, schema):
    folder.mkdir(parents=True, exist_ok=True)
    with gzip.open(folder / "dialogues.jsonl.gz", "wt", encoding="utf-8") as fh:
        for d in dialogues:
            fh.write((d if isinstance(d, str) else json.dumps(d)) + "\n")
    (folder / "schema.json").write_text(json.dumps(schema), encoding="utf-8")


def _schema(**intents):
    return [
        {
            "service_name": s,
            "slots": [],
            "intents": [
                {"name": n, "is_transactional": tr, "required_slots": req, "optional_slots": opt}
                for n, tr, req, opt in ints
            ],
        }
        for s, ints in intents.items()
    ]


def test_a_missing_folder_or_file_is_one_line_naming_it(tmp_path):
    with pytest.raises(SgdError) as e:
        read_sgd(tmp_path / "nowhere")
    assert len(str(e.value).splitlines()) == 1 and str(tmp_path / "nowhere") in str(e.value)
    assert "--sgd" in str(e.value)
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "schema.json").write_text("[]")
    with pytest.raises(SgdError) as e:
        read_sgd(tmp_path / "half")
    msg = str(e.value)
    assert len(msg.splitlines()) == 1 and "dialogues.jsonl.gz" in msg and "schema.json (looked" not in msg
    assert str(tmp_path / "half" / "dialogues.jsonl.gz") in msg
    (tmp_path / "empty").mkdir()
    with pytest.raises(SgdError, match="lacks dialogues.jsonl.gz and schema.json"):
        read_sgd(tmp_path / "empty")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "dialogues.jsonl.gz").write_bytes(b"")
    (tmp_path / "bad" / "schema.json").write_text('{"not": "a list"}')
    with pytest.raises(SgdError, match="not a list of SGD service schemas"):
        read_sgd(tmp_path / "bad")


def test_an_intent_without_required_slots_is_reported_and_bad_lines_are_named(tmp_path, caplog):
    schema = _schema(
        Buses_1=[("FindBus", False, ["from_location"], {}), ("BuyBusTicket", True, ["travelers"], {})],
        Music_1=[("LookupSong", False, [], {"year": "dontcare"}), ("PlaySong", True, ["song_name"], {})],
        Weather_1=[("GetWeather", False, ["city"], {})],
    )
    _write_sgd(tmp_path / "sgd", [_bus_dialogue(), "{not json", json.dumps([1])], schema)
    with caplog.at_level("INFO", logger="dialfork_dataset.tracks.sgd"):
        corpus = read_sgd(tmp_path / "sgd")
    notes = corpus.schema_notes()
    assert len(notes) == 1 and "Music_1: intent LookupSong has no required slots" in notes[0]
    assert "year" in notes[0] and "LookupSong" in caplog.text
    assert corpus.transactional == {"Buses_1": ["BuyBusTicket"], "Music_1": ["PlaySong"], "Weather_1": []}
    with pytest.raises(SgdError) as e:
        list(corpus.dialogues())
    f = tmp_path / "sgd" / "dialogues.jsonl.gz"
    assert e.value.errors[0].startswith(f"{f}:2: bad JSON") and e.value.errors[1].startswith(
        f"{f}:3: not an SGD"
    )


def test_a_hand_made_folder_gives_the_known_track(tmp_path):
    schema = _schema(
        Buses_1=[("FindBus", False, ["from_location"], {}), ("BuyBusTicket", True, ["travelers"], {})],
        Weather_1=[("GetWeather", False, ["city"], {})],
    )
    good = [_bus_dialogue(did=f"1_{i:05d}") for i in range(6)]
    failed = _bus_dialogue(did="2_00000")
    failed["turns"][11] = _turn("SYSTEM", _a("NOTIFY_FAILURE"))
    weather = _dialogue(_turn("USER", _a("INFORM_INTENT"), intent="GetWeather"), services=("Weather_1",))
    _write_sgd(tmp_path / "sgd", [*good, failed, weather], schema)
    track = build_sgd_track(tmp_path / "sgd", tasks="buses_buy_bus_ticket", seed=0, max_dialogues_per_task=4)
    s = track.stats
    assert (
        s["conformant_before_cap"] == {"buses_buy_bus_ticket": 6}
        and s["conformant"]["buses_buy_bus_ticket"] == 4
    )
    assert s["excluded"] == {"transaction failed": 1} and s["dialogues_of_the_services"] == 7
    assert s["services_without_task"]["Weather_1"] == {
        "transactional_intents": [],
        "reason": "no transactional intent",
        "dialogues": 1,
    }
    assert s["act_share"]["system_turns"] == 6 * 7  # of every conformant dialogue, before the cap
    assert s["act_share"]["picking_the_step"]["REQUEST"] == round(2 / 7, 4)
    assert s["act_share"]["carried"]["INFORM_COUNT"] == round(1 / 7, 4)
    assert (
        sum(s["split"]["buses_buy_bus_ticket"].values()) == 4
        and s["split"]["buses_buy_bus_ticket"]["train"] == 2
    )
    # one task alone: no WIC, GR or CSC donor; skip and repeat only (repeat asks an ask step again)
    forks = [r for r in track.records if r["edit"] is not None]
    assert {r["edit"] for r in forks} == {"skip", "repeat"}
    assert s["dropped"]["no_donor"] == {"wic": 16, "csc": 16}
    questions = {"buses_ask_from_location", "buses_offer_purchase", "buses_ask_travelers"}
    assert {r["system_nodes"][r["fork_turn"] - 1] for r in forks if r["edit"] == "repeat"} <= questions
    again = build_sgd_track(
        tmp_path / "sgd", tasks=["buses_buy_bus_ticket"], seed=0, max_dialogues_per_task=4
    )
    assert again.records == track.records
    with pytest.raises(SgdError, match="unknown sgd task"):
        build_sgd_track(tmp_path / "sgd", tasks="buses")
    with pytest.raises(ValueError, match="max_dialogues_per_task"):
        build_sgd_track(tmp_path / "sgd", max_dialogues_per_task=0)
    with pytest.raises(ValueError, match="fit_fraction"):
        build_sgd_track(tmp_path / "sgd", fit_fraction=1)


# ----------------------------------------------------------------------------- the workflow files
def test_every_workflow_file_validates_and_its_roles_are_complete():
    from dialfork_dataset.sources import open_source
    from dialfork_dataset.workflow.files import validate_workflow, workflow_files
    from dialfork_dataset.workflow.roles import derive_roles
    from dialfork_metrics.task3.workflow.nodes import node_texts

    files = workflow_files(WORKFLOWS_DIR)
    assert len(files) == 10 and (WORKFLOWS_DIR / "README.md").is_file()
    for f in files:
        assert validate_workflow(f) == [], f
    src = open_source(f"workflow:{WORKFLOWS_DIR}")
    assert sorted(src.tasks) == sorted(t.name for t in SGD_TASKS)
    assert src.domains["services"] == ["dentist_book_appointment", "doctor_book_appointment"]
    assert src.scenarios == [] and sorted(src.watch_only_tasks()) == sorted(src.tasks)
    for t in SGD_TASKS:
        task = src.task(t.name)
        roles = derive_roles(task)
        assert roles.problems == (), (t.name, roles.problems)
        texts = node_texts(task)
        assert set(t.steps.values()) <= set(texts), t.name
        assert roles.role_of(t.steps["CONFIRM"]).has("confirmation")
        assert roles.role_of(t.steps["NOTIFY_SUCCESS"]).has("outcome")
        assert roles.role_of(t.steps["OFFER_INTENT"]).has("question")
        assert task.api.function == t.transaction
        # the confirmation requires the transaction's required slots, each asked by a step
        assert set(roles.role_of(t.steps["CONFIRM"]).requires) == set(task.api.required)
        assert set(task.api.required) <= set(task.asks.values())
        assert all(len([x for x in texts[n]]) <= 2 for n in texts), t.name  # say + at most one alternative


def test_the_workflows_cover_every_slot_the_sgd_system_requests(sgd_dir):
    corpus = read_sgd(sgd_dir)
    from dialfork_dataset.sources import open_source

    src = open_source(f"workflow:{WORKFLOWS_DIR}")
    by_service = {t.service: t for t in SGD_TASKS}
    requested: dict[str, set] = {}
    for d in corpus.dialogues():
        t = by_service.get(d["services"][0])
        if t is None:
            continue
        for turn in d["turns"]:
            for a in turn["frames"][0]["actions"]:
                if turn["speaker"] == "SYSTEM" and a["act"] == "REQUEST":
                    requested.setdefault(t.name, set()).add(a["slot"])
    for name, slots in requested.items():
        assert slots <= set(src.task(name).asks.values()), (name, slots)
    for t in SGD_TASKS:  # the schema's intents are the tasks' and the transaction is transactional
        assert corpus.transactional[t.service] == [t.transaction]
        assert t.search in {i["name"] for i in corpus.schema[t.service]["intents"]}


# ----------------------------------------------------------------------------- the real subset
@pytest.fixture(scope="module")
def track(sgd_dir):
    return build_sgd_track(sgd_dir, tasks=TASKS, seed=0, max_dialogues_per_task=6)


def test_records_pass_the_record_validation_and_forks_deviate_first_at_t_k(track):
    by_id = {r["dialogue_id"]: r for r in track.records}
    assert track.stats["conformant"] == dict.fromkeys(TASKS, 6)
    bad = [(r["dialogue_id"], e) for r in track.records for e in record_errors(core_record(r))]
    assert not bad, bad[:5]
    assert len(by_id) == len(track.records)
    assert all(list(r)[-len(TRACK_FIELDS) :] == list(TRACK_FIELDS) for r in track.records)
    assert all(r["track"] == "sgd" and r["text_variant"] == "crowd" for r in track.records)
    forks = [r for r in track.records if r["edit"] is not None]
    for r in forks:
        src = by_id[r["source_id"]]
        T, tk, k = src["num_system_turns"], r["fork_turn"], r["fork_position"]
        assert tk == fork_turns(T)[k - 1]
        pf, ps = system_turn_positions(r["turns"]), system_turn_positions(src["turns"])
        assert r["turns"][: pf[tk - 1]] == src["turns"][: ps[tk - 1]], r["dialogue_id"]
        assert r["turns"][pf[tk - 1]]["text"] != src["turns"][ps[tk - 1]]["text"], r["dialogue_id"]
        assert len(r["system_nodes"]) == len(r["system_node_tasks"]) == r["num_system_turns"]
        assert r["hallucination_type"] == EDIT_TYPES[r["edit"]] and r["split"] == src["split"]
    assert {r["edit"] for r in forks} == {"wic", "gr", "csc", "skip", "repeat"}
    gr = [r for r in forks if r["edit"] == "gr"]
    assert gr and {r["task"] for r in gr} == {"dentist_book_appointment", "doctor_book_appointment"}


def test_no_text_crosses_the_split_and_nodes_are_steps_of_the_workflow(track):
    from dialfork_dataset.sources import open_source

    by_id = {r["dialogue_id"]: r for r in track.records}
    for r in track.records:
        if r["donor_id"] is not None:
            assert by_id[r["donor_id"]]["split"] == r["split"]
    conf_train = {t["text"] for r in track.split("train") if r["edit"] is None for t in r["turns"]}
    assert {t["text"] for r in track.split("train") for t in r["turns"]} <= conf_train
    src = open_source(f"workflow:{WORKFLOWS_DIR}")
    for r in track.records:
        for node, task in zip(r["system_nodes"], r["system_node_tasks"], strict=True):
            assert src.task(task).kinds.get(node) == "action", (r["dialogue_id"], node)
    share = track.stats["act_share"]["picking_the_step"]
    assert abs(sum(share.values()) - 1) < 1e-3 and share["NOTIFY_FAILURE"] == 0


def test_written_track_reads_with_load_examples_and_names_its_workflows(track, sgd_dir, tmp_path, capsys):
    from dialfork_dataset.__main__ import main
    from dialfork_metrics.task3 import load_examples
    from dialfork_metrics.task3.workflow.rules import workflow_for_data

    out = tmp_path / "sgd-data"
    args = ["sgd-track", "--sgd", str(sgd_dir), "--out", str(out), "--tasks", ",".join(TASKS)]
    assert main([*args, "--max-per-task", "6"]) == 0
    said = capsys.readouterr().out
    assert "sgd track, 24 conformant dialogues of 4 task(s), capped at 6 per task" in said
    m = read_sgd_manifest(out)
    assert m["rule"] == CONFORMANCE_RULE and m["max_dialogues_per_task"] == 6 and m["tasks"] == list(TASKS)
    assert workflow_for_data(out) == f"workflow:{WORKFLOWS_DIR}"
    train, test = load_examples(out, "train"), load_examples(out, "test")
    assert {e["dialogue_id"] for e in train} == {
        r["dialogue_id"] for r in track.split("train") if r["edit"] is None
    }
    assert {e["dialogue_id"] for e in test} == {r["dialogue_id"] for r in track.split("test")}
    assert len((out / "sgd.jsonl").read_text().splitlines()) == len(track.records)
    assert main([*args, "--max-per-task", "6"]) == 2 and "--overwrite" in capsys.readouterr().err
    # ensure reuses a track of the same settings and rebuilds one of others
    stamp = (out / "manifest.json").stat().st_mtime_ns
    assert ensure_sgd_track(str(sgd_dir), out, tasks=TASKS, max_dialogues_per_task=6) == out
    assert (out / "manifest.json").stat().st_mtime_ns == stamp
    ensure_sgd_track(str(sgd_dir), out, tasks=TASKS[:2], max_dialogues_per_task=2)
    assert read_sgd_manifest(out)["stats"]["conformant"] == dict.fromkeys(TASKS[:2], 2)


def test_the_benchmark_takes_the_sgd_track_without_data_or_star(capsys):
    from dialfork_metrics.bench.cli import main

    assert main(["--track", "sgd", "--data", "x", "--tasks", "3"]) == 2
    assert "--track sgd builds its data from --sgd" in capsys.readouterr().err
    assert main(["--max-per-task", "3", "--data", "x", "--tasks", "3"]) == 2
    assert "--max-per-task N needs --track sgd" in capsys.readouterr().err
