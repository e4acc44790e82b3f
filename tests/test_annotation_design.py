"""Study design: cue / foil assignment, mini-block sampling, presentation order, workflow view."""

from __future__ import annotations

import json
from collections import Counter

import pytest

pytest.importorskip("sqlalchemy")

from annotation.design import (  # noqa: E402
    BLOCK_SLOTS,
    CUE_FOIL,
    CUE_TRUE,
    Block,
    SamplingError,
    TaskPool,
    assign_cue,
    block_order,
    derive_seed,
    draw_blocks,
    foil_substitute,
    latin_types,
    wic_cue_text,
)
from annotation.simulate import synthetic_records  # noqa: E402
from dialfork_dataset import taxonomy  # noqa: E402
from dialfork_dataset.taxonomy import forks_per_source  # noqa: E402
from generation.variants import load_variants  # noqa: E402


@pytest.fixture(scope="module")
def pool():
    return load_variants()


@pytest.fixture(scope="module")
def records(pool):
    return synthetic_records("weather", 20, seed=3, pool=pool)


def test_synthetic_records_are_valid_and_complete(records):
    conf = [r for r in records if r["hallucination_type"] is None]
    forks = [r for r in records if r["hallucination_type"] is not None]
    assert len(conf) == 20 and len(forks) == 20 * forks_per_source()
    assert not any("fork" in t["text"].lower() for r in records for t in r["turns"])


def test_cue_is_deterministic_and_independent_of_everything_but_the_conversation(records, pool):
    a = [assign_cue(r, 11, pool) for r in records]
    b = [assign_cue(r, 11, pool) for r in reversed(records)][::-1]
    assert a == b  # order of assignment does not matter
    c = [assign_cue(r, 12, pool) for r in records]
    assert a != c  # another study seed draws other foils


def test_conformant_always_foil_forks_about_twenty_percent(records, pool):
    kinds = Counter()
    for r in records:
        cue = assign_cue(r, 5, pool)
        if r["hallucination_type"] is None:
            assert cue.kind == CUE_FOIL
            assert cue.htype in taxonomy.names()
        else:
            kinds[cue.kind] += 1
            if cue.kind == CUE_FOIL:
                assert cue.htype != r["hallucination_type"]  # a variant of *another* type
                assert cue.text != pool.by_id(r["variant"]).cue
                assert cue.text in {v.cue for v in pool[cue.htype]}
            else:
                assert cue.htype == r["hallucination_type"] and cue.variant == r["variant"]
                expected = (
                    wic_cue_text(r["substitute_task"])
                    if r["hallucination_type"] == "WIC"
                    else pool.by_id(r["variant"]).cue
                )
                assert cue.text == expected
    share = kinds[CUE_FOIL] / (kinds[CUE_FOIL] + kinds[CUE_TRUE])
    assert 0.14 < share < 0.26, share  # 320 forks, Bernoulli(0.2): 3 sd ~ 0.067


def test_foil_share_extremes(records, pool):
    forks = [r for r in records if r["hallucination_type"]]
    assert all(assign_cue(r, 1, pool, foil_share=0.0).kind == CUE_TRUE for r in forks)
    assert all(assign_cue(r, 1, pool, foil_share=1.0).kind == CUE_FOIL for r in forks)
    with pytest.raises(ValueError, match="foil_share"):
        assign_cue(forks[0], 1, pool, foil_share=1.5)


def test_latin_square_covers_every_type_position_once():
    types = taxonomy.names()
    n = len(types)  # rows of the square: 4 for the paper's types
    cells = [(h, k) for row in range(n) for k, h in latin_types(row).items()]
    assert sorted(cells) == sorted((h, k) for h in types for k in (1, 2, 3, 4))
    assert latin_types(n + 1) == latin_types(1)


def test_block_order_is_a_reproducible_permutation():
    o = block_order(derive_seed("x", 1))
    assert sorted(o) == list(range(len(BLOCK_SLOTS)))
    assert o == block_order(derive_seed("x", 1))


def _pool_rows(records):
    return TaskPool.from_rows("weather", records)


def test_draw_blocks_sampling_rules(records):
    pool = _pool_rows(records)
    draws = draw_blocks(pool, ["a", "b", "c", "d"], 3, seed=7, overlap_share=0.3)
    by_id = {r["dialogue_id"]: r for r in records}
    seen: dict[str, list[str]] = {}
    judges: Counter[str] = Counter()
    fresh_cells = []
    for d in draws:
        recs = [by_id[i] for i in d.block.dialogue_ids]
        # one fork per position k=1..4 and one conformant dialogue, five distinct sources
        assert [r["fork_position"] for r in recs] == [1, 2, 3, 4, None]
        assert len({r["source_id"] for r in recs}) == 5
        seen.setdefault(d.annotator, []).extend(r["source_id"] for r in recs)
        for i in d.block.dialogue_ids:
            judges[i] += 1
        if d.fresh:
            fresh_cells.append([(r["hallucination_type"], r["fork_position"]) for r in recs[:4]])
    # no annotator sees two versions of one source
    for a, srcs in seen.items():
        assert len(srcs) == len(set(srcs)), a
    # two or three judges at most, and some overlap with overlap_share=0.3
    assert max(judges.values()) <= 3
    assert any(not d.fresh for d in draws)
    # every n consecutive fresh blocks (n types: four for the paper's) cover each type x position exactly once
    n = len(taxonomy.names())
    for i in range(0, len(fresh_cells) - (n - 1), n):
        cells = [c for b in fresh_cells[i : i + n] for c in b]
        assert len(set(cells)) == forks_per_source()


def test_draw_blocks_is_reproducible_and_respects_history(records):
    pool = _pool_rows(records)
    a = draw_blocks(pool, ["x", "y"], 2, seed=1)
    b = draw_blocks(pool, ["x", "y"], 2, seed=1)
    assert [d.block.dialogue_ids for d in a] == [d.block.dialogue_ids for d in b]
    seen = {"x": set(pool.sources[:10])}
    c = draw_blocks(pool, ["x"], 2, seed=1, seen_sources=seen)
    for d in c:
        assert not set(d.block.sources) & seen["x"]


def test_copy_never_reuses_own_or_full_blocks(records):
    pool = _pool_rows(records)
    full = Block(
        99, "weather", 0, ["weather-1000-WIC-k1"] * 5, ["s1", "s2", "s3", "s4", "s5"], ["p", "q", "r"]
    )
    draws = draw_blocks(pool, ["z"], 1, seed=3, existing=[full], overlap_share=1.0, next_key=100)
    assert draws[0].fresh  # the only existing block already has three judges


def test_sampling_error_names_the_annotator_and_slot(records):
    pool = _pool_rows(records[: (1 + forks_per_source()) * 3])  # three sources
    with pytest.raises(SamplingError, match="annotator 'solo'.*not seen"):
        draw_blocks(pool, ["solo"], 1, seed=0)


def test_workflow_view_from_star(star_dir):
    from annotation.corpus import task_workflow

    wf = task_workflow(str(star_dir), "hotel_book")
    assert wf.goal == "Help the user reserve a hotel room."
    assert wf.flowchart is not None and wf.flowchart.suffix == ".jpg"
    assert wf.steps[0].number == "1" and wf.steps[0].template == "Hello, how can I help?"
    text = wf.plain_text()
    assert 'If the outcome is "Available":' in text and "Go back to step 3." in text
    branching = [s for s in wf.steps if s.children]
    assert branching and all(c.kind == "branch" for c in branching[0].children)


def test_load_corpus_collects_every_error(tmp_path, records):
    from annotation.corpus import load_corpus
    from dialfork_dataset.jsonl import write_jsonl
    from dialfork_dataset.records import RecordError

    bad = [
        dict(records[0]),
        dict(records[1], fork_position=9),
        dict(records[2], num_system_turns=99),
        records[0],
    ]
    write_jsonl(tmp_path / "a.jsonl", bad)
    with pytest.raises(RecordError) as e:
        load_corpus(tmp_path)
    errs = e.value.errors
    assert any("a.jsonl:2" in x and "fork_position" in x for x in errs)
    assert any("a.jsonl:3" in x and "num_system_turns" in x for x in errs)
    assert any("a.jsonl:4" in x and "duplicate id" in x for x in errs)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no \\*.jsonl"):
        load_corpus(tmp_path / "empty")


def test_generator_output_is_a_valid_study_corpus(tmp_path, star_dir, pool):
    """The template backend's output folder imports as is (records, variants, cues)."""
    import subprocess
    import sys

    from annotation.corpus import load_corpus
    from annotation.store import Study

    out = tmp_path / "gen"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "generation",
            "--backend",
            "template",
            "--star",
            str(star_dir),
            "--out",
            str(out),
            "--tasks",
            "weather",
            "--per-task",
            "6",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if proc.returncode != 0:
        pytest.skip(f"template generator unavailable: {proc.stderr[-300:]}")
    recs = load_corpus(out)
    study = Study(f"sqlite:///{tmp_path / 's.db'}", study_seed=1, variants=pool)
    assert study.import_records(recs) == len(recs) > forks_per_source()
    a = study.create_annotator("g")
    assert study.draw_batch("weather", [a["id"]], 1, seed=2)["assignments"] == 5
    forks = [r for r in recs if r["hallucination_type"]]
    generic = {v.cue for vs in pool.types.values() for v in vs}
    for r in forks:
        text = assign_cue(r, 1, pool).text
        assert text in generic or (
            r["hallucination_type"] == "WIC" and text == wic_cue_text(r["substitute_task"])
        )


def test_corpus_files_follow_the_manifest(tmp_path, records):
    from annotation.corpus import load_corpus
    from dialfork_dataset.jsonl import write_jsonl

    family = 1 + forks_per_source()  # one source's records: 17 for the paper's types
    write_jsonl(tmp_path / "weather.jsonl", records[:family])
    write_jsonl(tmp_path / "predictions.jsonl", [{"dialogue_id": "x", "prediction": 3}])  # not records
    (tmp_path / "manifest.json").write_text(json.dumps({"files": {"weather.jsonl": {"records": family}}}))
    assert [r["dialogue_id"] for r in load_corpus(tmp_path)] == [r["dialogue_id"] for r in records[:family]]
    (tmp_path / "manifest.json").write_text('{"files": {"gone.jsonl": {}}}')
    with pytest.raises(FileNotFoundError, match="gone.jsonl"):
        load_corpus(tmp_path)


def test_wic_cues_carry_the_substitute_task_description(records, pool, star_dir):
    """Issue 15: the WIC cue is the substitute task's description (STAR's wizard_task), for true
    cues and foils alike, so that a foil cannot be told from a true cue by its form."""
    from annotation.corpus import task_descriptions
    from annotation.design import WIC_CUE_TEMPLATE

    tasks = task_descriptions(star_dir)
    assert tasks["restaurant_book"] and tasks["hotel_book"] == "Help the user reserve a hotel room."
    prefix = WIC_CUE_TEMPLATE.split("{description}")[0]
    wic_true = wic_foil = 0
    for r in records:
        cue = assign_cue(r, 3, pool, tasks=tasks)
        if cue.htype != "WIC":
            assert cue.text in {v.cue for v in pool[cue.htype]}
            continue
        assert cue.text.startswith(prefix)
        desc = cue.text[len(prefix) :]
        assert desc in tasks.values()
        if cue.kind == CUE_TRUE:
            wic_true += 1
            assert desc == tasks[r["substitute_task"]]  # the fork's own substitute task
        else:
            wic_foil += 1
            assert desc != tasks["weather"]  # never the dialogue's own task
    assert wic_true > 40 and wic_foil > 5
    # foils draw another task of the same domain when there is one, else of any other domain
    for u in (0.0, 0.5, 0.99):
        assert foil_substitute("hotel_book", tasks, u).startswith("hotel_")
        assert foil_substitute("hotel_book", tasks, u) != "hotel_book"
    assert foil_substitute("weather", {"weather": "x"}, 0.3) is None
    assert wic_cue_text("car_rent", {}) == prefix + "Help the user with car rent."


def test_study_uses_its_stored_task_catalog(tmp_path, records, pool, star_dir):
    from annotation.corpus import task_descriptions
    from annotation.store import Study, recompute_cue

    tasks = task_descriptions(star_dir)
    study = Study(f"sqlite:///{tmp_path / 's.db'}", study_seed=3, variants=pool, task_descriptions=tasks)
    study.import_records(records)
    assert study.task_catalog()["restaurant_book"] == tasks["restaurant_book"]
    again = Study(f"sqlite:///{tmp_path / 's.db'}", variants=pool)  # no STAR this time
    for r in records[:40]:
        cue = recompute_cue(again, r["dialogue_id"])
        assert cue == assign_cue(r, 3, pool, tasks=tasks)
