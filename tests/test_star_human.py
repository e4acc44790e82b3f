"""The star-human track of Task 3 (issue 39, item 1): STAR's human dialogues, forked by editing them.

On three tasks: weather (alone in its domain: no GR fork), doctor_schedule and doctor_followup (a
same-domain pair for GR, another domain than weather for WIC).
"""

from __future__ import annotations

import dataclasses
import os
from collections import Counter

import pytest

from dialfork_dataset import taxonomy
from dialfork_dataset.forks import fork_turns, system_turn_positions
from dialfork_dataset.records import record_errors
from dialfork_dataset.star import StarCorpus, StarError, task_domain
from dialfork_dataset.tracks.engine import EDIT_TYPES, EDITS, TRACK_FIELDS, core_record
from dialfork_dataset.tracks.star_human import (
    CONFORMANCE_RULE,
    build_star_human_track,
    conformant_human_dialogues,
    ensure_star_human_track,
    exclusion_reason,
    human_dialogue,
    read_track_manifest,
)

TASKS = ("weather", "doctor_schedule", "doctor_followup")


@pytest.fixture(scope="module")
def corpus(star_dir):
    return StarCorpus(star_dir)


@pytest.fixture(scope="module")
def picked(corpus):
    return build_star_human_track(corpus, tasks=TASKS, variant="picked", seed=0)


@pytest.fixture(scope="module")
def typed(corpus):
    return build_star_human_track(corpus, tasks=TASKS, variant="typed", seed=0)


def _by_id(track):
    return {r["dialogue_id"]: r for r in track.records}


def _sys(r):
    return [t for t in r["turns"] if t["speaker"] == "system"]


# ----------------------------------------------------------------------------- fork positions
def test_every_fork_deviates_first_at_its_fork_turn(picked, typed):
    for track in (picked, typed):
        by_id = _by_id(track)
        forks = [r for r in track.records if r["edit"] is not None]
        assert forks
        for r in forks:
            src = by_id[r["source_id"]]
            T, tk, k = src["num_system_turns"], r["fork_turn"], r["fork_position"]
            assert tk == fork_turns(T)[k - 1], r["dialogue_id"]
            pf, ps = system_turn_positions(r["turns"]), system_turn_positions(src["turns"])
            assert r["turns"][: pf[tk - 1]] == src["turns"][: ps[tk - 1]], r[
                "dialogue_id"
            ]  # identical prefix
            assert r["turns"][pf[tk - 1]]["text"] != src["turns"][ps[tk - 1]]["text"], r["dialogue_id"]
            assert len(r["system_nodes"]) == len(r["system_node_tasks"]) == r["num_system_turns"] == len(pf)
            assert r["system_nodes"][: tk - 1] == src["system_nodes"][: tk - 1]
            assert r["hallucination_type"] == EDIT_TYPES[r["edit"]] and r["variant"] == r["edit"]
            suffix = f"-{r['edit']}" if r["edit"] in ("skip", "repeat") else ""
            assert r["dialogue_id"] == f"{src['dialogue_id']}-{r['hallucination_type']}-k{k}{suffix}"
            assert r["split"] == src["split"] and r["track"] == "star-human"
        made = {(r["edit"], r["fork_position"]) for r in forks}
        # every edit at every k, but no repeat at k=1 (no earlier question before system turn 1)
        assert made == {(e, k) for e in EDITS for k in (1, 2, 3, 4)} - {("repeat", 1)}


def test_each_edit_does_what_it_says(picked, corpus):
    by_id = _by_id(picked)
    seen = Counter()
    for r in picked.records:
        if r["edit"] is None:
            assert r["system_node_tasks"] == [r["task"]] * r["num_system_turns"]
            continue
        src, tk, e = by_id[r["source_id"]], r["fork_turn"], r["edit"]
        ps, pf = system_turn_positions(src["turns"]), system_turn_positions(r["turns"])
        T, Tf = src["num_system_turns"], r["num_system_turns"]
        seen[e] += 1
        if e in ("wic", "gr"):
            donor = by_id[r["donor_id"]]
            dtask = donor["task"]
            assert (
                (task_domain(dtask) != src["domain"])
                if e == "wic"
                else (dtask != src["task"] and task_domain(dtask) == src["domain"])
            )
            assert r["substitute_task"] == (dtask if e == "wic" else None)
            assert r["turns"][pf[tk - 1] :] == donor["turns"][system_turn_positions(donor["turns"])[1] :]
            assert r["system_nodes"][tk - 1 :] == donor["system_nodes"][1:]
            assert r["system_node_tasks"] == [src["task"]] * (tk - 1) + [dtask] * (
                donor["num_system_turns"] - 1
            )
        elif e == "csc":
            donor = by_id[r["donor_id"]]
            dp = system_turn_positions(donor["turns"])
            assert donor["task"] != src["task"] and Tf == T + 2
            assert r["turns"][pf[tk - 1] : pf[tk + 1]] == donor["turns"][dp[1] : dp[3]]
            assert r["turns"][pf[tk + 1] :] == src["turns"][ps[tk - 1] :]  # the source resumes at t_k
            assert r["system_node_tasks"][tk - 1 : tk + 1] == [donor["task"]] * 2
        elif e == "skip":
            assert tk < T and Tf == T - 1 and r["donor_id"] is None
            assert r["turns"] == src["turns"][: ps[tk - 1]] + src["turns"][ps[tk] :]
            assert r["system_nodes"] == src["system_nodes"][: tk - 1] + src["system_nodes"][tk:]
        else:  # repeat
            assert Tf == T + 1 and r["donor_id"] is None
            q = r["turns"][pf[tk - 1]]
            label = r["system_nodes"][tk - 1]
            j = next(j for j in range(1, tk) if _sys(src)[j - 1] == q and src["system_nodes"][j - 1] == label)
            assert {"ask", "request"} & set(label.split("_"))
            assert (
                r["turns"][pf[tk - 1] : pf[tk]] == src["turns"][ps[j - 1] : ps[j]]
            )  # the question and its answer
            assert len(r["turns"][pf[tk - 1] : pf[tk]]) >= 2
            assert r["turns"][pf[tk] :] == src["turns"][ps[tk - 1] :]
    assert set(seen) == set(EDITS)


def test_records_pass_the_record_validation_and_ids_are_unique(picked, typed):
    for track in (picked, typed):
        bad = [(r["dialogue_id"], e) for r in track.records for e in record_errors(core_record(r))]
        assert not bad, bad[:5]
        assert len({r["dialogue_id"] for r in track.records}) == len(track.records)
        assert all(list(r)[-len(TRACK_FIELDS) :] == list(TRACK_FIELDS) for r in track.records)
        conf = [r for r in track.records if r["edit"] is None]
        assert all(r["dialogue_id"] == r["source_id"] == f"star-{r['scenario_id']}" for r in conf)
        assert all(
            r["prefix_mode"] == "reuse" and r["prefix_divergence"] == 0 and r["instruction"]
            for r in track.records
            if r["edit"] is not None
        )


def test_stats_count_forks_and_drops_and_no_gr_for_a_task_alone_in_its_domain(picked):
    s = picked.stats
    forks = [r for r in picked.records if r["edit"] is not None]
    assert s["forks"] == {h: sum(r["hallucination_type"] == h for r in forks) for h in taxonomy.names()}
    assert s["forks_by_edit"] == dict(Counter(r["edit"] for r in forks))
    assert s["conformant"] == dict(Counter(r["task"] for r in picked.records if r["edit"] is None))
    assert s["gr_single_task_domain_tasks"] == ["weather"]
    assert s["dropped"]["gr_single_task_domain"] == 4 * s["conformant"]["weather"]
    assert not [r for r in forks if r["task"] == "weather" and r["edit"] == "gr"]
    assert s["excluded"]["wizard utter"] > 0 and s["excluded"]["multi-task"] > 0
    assert s["forks_per_task"]["weather"]["GR"] == 0


# ----------------------------------------------------------------------------- conformance rule
def _ev(agent, action, text, label=None):
    e = {"agent": agent, "action": action, "text": text}
    if label is not None:
        e["action_label"] = label
    return e


def _events(n_system=4, *, drafts=True):
    ev = []
    for i in range(1, n_system + 1):
        ev.append(_ev("User", "utter", f"user says {i}"))
        if drafts:
            ev.append(_ev("Wizard", "request_suggestions", f"early draft {i}"))
            ev.append(_ev("Wizard", "request_suggestions", f"draft {i}"))
        ev.append(_ev("Wizard", "pick_suggestion", f"picked {i}", f"ask_thing_{i}"))
    return ev


@pytest.fixture(scope="module")
def scenario(corpus):
    s = corpus.scenario(next(h.scenario_id for h in conformant_human_dialogues(corpus, ["weather"])))
    assert s.single_task and s.happy and s.completion_level == "Complete"
    return s


def test_the_conformance_rule_on_hand_made_dialogues(scenario):
    assert exclusion_reason(scenario, _events(4)) is None
    h = human_dialogue(scenario, _events(4))
    assert h.num_system_turns == 4 and h.system_nodes == tuple(f"ask_thing_{i}" for i in range(1, 5))
    assert [t["speaker"] for t in h.turns] == ["user", "system"] * 4
    utter = _events(4)
    utter.insert(3, _ev("Wizard", "utter", "typed by hand"))
    cases = {
        "wizard utter": (scenario, utter),
        "multi-task": (
            dataclasses.replace(scenario, tasks=("weather", "trivia"), multitask=True),
            _events(4),
        ),
        "not Complete": (
            dataclasses.replace(scenario, completion_level="EarlyDisconnectDuringDialogue"),
            _events(4),
        ),
        "not happy": (dataclasses.replace(scenario, happy=False), _events(4)),
        "T < 4": (scenario, _events(3)),
        "unlabelled pick": (scenario, _events(3) + [_ev("Wizard", "pick_suggestion", "no label")]),
    }
    for reason, (s, ev) in cases.items():
        assert exclusion_reason(s, ev) == reason
        assert human_dialogue(s, ev) is None
    # empty-text events are no turns; consecutive turns of one speaker are kept as they are
    ev = _events(4)
    ev.insert(1, _ev("User", "utter", "  "))
    ev.insert(1, _ev("User", "utter", "and another thing"))
    ev.append(_ev("Wizard", "pick_suggestion", "", "goodbye_1"))
    h = human_dialogue(scenario, ev)
    assert [t["text"] for t in h.turns[:3]] == ["user says 1", "and another thing", "picked 1"]
    assert h.num_system_turns == 4
    with pytest.raises(ValueError, match="variant"):
        human_dialogue(scenario, ev, variant="spoken")
    assert "single-task" in CONFORMANCE_RULE and "T >= 4" in CONFORMANCE_RULE


def test_typed_variant_takes_the_last_draft_before_each_pick_and_counts_fallbacks(
    scenario, picked, typed, corpus
):
    ev = _events(4)
    del ev[9:11]  # no draft before the third pick: the picked text, counted
    h = human_dialogue(scenario, ev, variant="typed")
    assert [t["text"] for t in h.turns if t["speaker"] == "system"] == [
        "draft 1",
        "draft 2",
        "picked 3",
        "draft 4",
    ]
    assert h.typed_fallbacks == 1
    assert h.system_nodes == human_dialogue(scenario, ev).system_nodes
    assert human_dialogue(scenario, ev).typed_fallbacks == 0
    # a draft typed before an earlier pick does not carry over
    assert human_dialogue(scenario, _events(4, drafts=False), variant="typed").typed_fallbacks == 4
    # on STAR: the same dialogues and gold nodes, other system text
    cp = {r["dialogue_id"]: r for r in picked.records if r["edit"] is None}
    ct = {r["dialogue_id"]: r for r in typed.records if r["edit"] is None}
    assert cp.keys() == ct.keys()
    assert all(
        cp[i]["system_nodes"] == ct[i]["system_nodes"] and cp[i]["split"] == ct[i]["split"] for i in cp
    )
    assert sum(_sys(cp[i]) != _sys(ct[i]) for i in cp) > 0.9 * len(cp)
    assert all(r["text_variant"] == "typed" and r["generator"] == "star-human:typed" for r in typed.records)
    assert typed.stats["typed_fallbacks"] == sum(
        h.typed_fallbacks for h in conformant_human_dialogues(corpus, TASKS, "typed")
    )
    assert picked.stats["typed_fallbacks"] == 0


# ----------------------------------------------------------------------------- split
def test_split_is_disjoint_stratified_seeded_and_donors_stay_on_their_side(picked, corpus):
    by_id = _by_id(picked)
    conf = [r for r in picked.records if r["edit"] is None]
    assert {r["split"] for r in picked.records} == {"train", "test"}
    for task, n in picked.stats["conformant"].items():
        assert sum(r["split"] == "train" for r in conf if r["task"] == task) == n // 2
    for r in picked.records:
        if r["donor_id"] is not None:
            assert by_id[r["donor_id"]]["split"] == r["split"], r["dialogue_id"]
    texts = {
        s: {t["text"] for r in picked.split(s) if r["edit"] is None for t in r["turns"]}
        for s in ("train", "test")
    }
    train_forks = {t["text"] for r in picked.split("train") for t in r["turns"]}
    assert train_forks <= texts["train"]  # no test text in a train record (forks included)
    again = build_star_human_track(corpus, tasks=TASKS, seed=0)
    assert again.records == picked.records and again.stats == picked.stats
    other = build_star_human_track(corpus, tasks=TASKS, seed=1, fit_fraction=0.25)
    split1 = {r["dialogue_id"]: r["split"] for r in other.records if r["edit"] is None}
    assert split1 != {r["dialogue_id"]: r["split"] for r in conf}
    assert sum(v == "train" for v in split1.values()) == sum(
        int(n * 0.25) for n in other.stats["conformant"].values()
    )


# ----------------------------------------------------------------------------- writing, CLI, bad input
def test_cli_round_trip_through_load_examples(tmp_path, star_dir, capsys):
    from dialfork_dataset.__main__ import main
    from dialfork_metrics.task3 import load_examples

    out = tmp_path / "track"
    star_arg = os.path.relpath(star_dir)
    args = [
        "star-human",
        "--star",
        star_arg,
        "--out",
        str(out),
        "--tasks",
        "weather,doctor_schedule",
        "--variant",
        "typed",
        "--seed",
        "3",
    ]
    assert main(args) == 0
    assert "star-human track (typed text)" in capsys.readouterr().out
    m = read_track_manifest(out)
    assert (
        m["star"] == star_arg and m["variant"] == "typed" and m["seed"] == 3 and m["rule"] == CONFORMANCE_RULE
    )
    assert m["tasks"] == ["weather", "doctor_schedule"] and m["stats"]["forks"]["WIC"] > 0
    track = build_star_human_track(star_dir, tasks=["weather", "doctor_schedule"], variant="typed", seed=3)
    train, test = load_examples(out, "train"), load_examples(out, "test")
    assert {e["dialogue_id"] for e in train} == {
        r["dialogue_id"] for r in track.split("train") if r["edit"] is None
    }
    assert {e["dialogue_id"] for e in test} == {r["dialogue_id"] for r in track.split("test")}
    ex = {e["dialogue_id"]: e for e in test}
    for r in track.split("test"):
        assert (
            ex[r["dialogue_id"]]["turns"] == r["turns"]
            and ex[r["dialogue_id"]]["fork_turn"] == r["fork_turn"]
        )
    assert len((out / "star_human.jsonl").read_text().splitlines()) == len(track.records)
    # no silent replacement; --overwrite replaces; a folder of something else is never replaced
    assert main(args) == 2 and "--overwrite" in capsys.readouterr().err
    assert main(args + ["--overwrite"]) == 0
    other = tmp_path / "other"
    other.mkdir()
    (other / "keep.txt").write_text("x")
    assert main(args[:4] + [str(other), "--overwrite"]) == 2 and (other / "keep.txt").exists()
    # the benchmark's reuse: same settings keep the folder, other settings rebuild it
    stamp = (out / "manifest.json").stat().st_mtime_ns
    ensure_star_human_track(star_arg, out, tasks=["weather", "doctor_schedule"], variant="typed", seed=3)
    assert (out / "manifest.json").stat().st_mtime_ns == stamp
    ensure_star_human_track(star_arg, out, tasks=["weather", "doctor_schedule"], variant="picked", seed=3)
    assert read_track_manifest(out)["variant"] == "picked"


def test_a_star_copy_without_human_dialogues_is_one_clear_line(tmp_path, star_dir, capsys):
    from dialfork_dataset.__main__ import main

    bare = tmp_path / "star"
    bare.mkdir()
    for name in ("tasks", "apis", "scenarios.jsonl"):
        os.symlink(star_dir / name, bare / name)
    with pytest.raises(StarError) as e:
        build_star_human_track(bare, tasks=["weather"])
    msg = str(e.value)
    assert "\n" not in msg and "needs STAR's human dialogues" in msg
    assert str(bare.resolve() / "dialogues.jsonl.gz") in msg and "dialogues/" in msg
    assert main(["star-human", "--star", str(bare), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert (
        err.count("\n") == 1
        and err.startswith("error: the star-human track needs")
        and not (tmp_path / "o").exists()
    )


def test_unknown_tasks_are_listed_with_the_known_ones(star_dir, capsys):
    from dialfork_dataset.__main__ import main

    with pytest.raises(
        StarError, match=r"unknown STAR task\(s\) nope, wether; known tasks: apartment_schedule.*weather"
    ):
        build_star_human_track(star_dir, tasks=["nope", "weather", "wether"])
    assert main(["star-human", "--star", str(star_dir), "--out", "unused", "--tasks", "nope"]) == 2
    assert "known tasks:" in capsys.readouterr().err
    with pytest.raises(ValueError, match="fit_fraction"):
        build_star_human_track(star_dir, tasks=["weather"], fit_fraction=1.0)
    with pytest.raises(ValueError, match="variant"):
        build_star_human_track(star_dir, tasks=["weather"], variant="spoken")


def test_the_benchmark_needs_data_unless_the_track_is_star_human(capsys):
    from dialfork_metrics.bench.cli import main

    assert main(["--tasks", "3"]) == 2
    assert "--data is required" in capsys.readouterr().err
    assert main(["--track", "star-human", "--tasks", "3"]) == 2
    assert "--star" in capsys.readouterr().err


def test_the_writer_refuses_records_that_break_the_record_rules(picked, tmp_path):
    from dialfork_dataset.records import RecordError
    from dialfork_dataset.tracks.engine import StarHumanTrack
    from dialfork_dataset.tracks.star_human import write_star_human_track

    bad = [dict(r) for r in picked.records[:3]]
    bad[0]["turns"] = []
    bad[1]["split"] = "validation"
    del bad[2]["system_nodes"]
    with pytest.raises(RecordError) as e:
        write_star_human_track(StarHumanTrack(bad, picked.stats), tmp_path / "o", star="x")
    assert "turns" in str(e.value)
    with pytest.raises(RecordError) as e:
        write_star_human_track(StarHumanTrack(bad[1:], picked.stats), tmp_path / "o", star="x")
    assert "validation" in str(e.value) and "system_nodes" in str(e.value)
    assert not (tmp_path / "o").exists()
