"""Protocol options of the generator (issue 15): one variant per quartet (or per fork, on request)
and the scenario filters (T >= min_system_turns after generation, single-task scenarios only)."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from dialfork_dataset import taxonomy
from dialfork_dataset.forks import fork_turns
from dialfork_dataset.jsonl import read_jsonl
from dialfork_dataset.records import validate_record
from generation.engine import GenerationConfig, GenerationError, generate_corpus, plan_units
from generation.variants import draw_seed, draw_substitute_task, draw_variant, load_variants

TASKS = ("weather", "bank_balance", "hotel_book", "apartment_search")


def _records(out: Path) -> list[dict]:
    return [r for f in sorted(out.glob("*.jsonl")) for r in read_jsonl(f)]


def _quartets(recs: list[dict]) -> dict[tuple[str, str], dict[int, dict]]:
    q: dict[tuple[str, str], dict[int, dict]] = defaultdict(dict)
    for r in recs:
        if r["hallucination_type"] is not None:
            q[(r["source_id"], r["hallucination_type"])][r["fork_position"]] = r
    return q


@pytest.fixture(scope="module")
def runs(tmp_path_factory, star_dir):
    root = tmp_path_factory.mktemp("draws")
    for draw in ("quartet", "fork"):
        generate_corpus(
            GenerationConfig(
                star=str(star_dir), out=str(root / draw), tasks=TASKS, per_task=6, seed=4, variant_draw=draw
            ),
            progress=False,
        )
    return root


# ------------------------------------------------------------------ one variant per quartet


def test_one_variant_and_substitute_per_quartet_by_default(runs):
    pool = load_variants()
    recs = _records(runs / "quartet")
    src = {r["dialogue_id"]: r for r in recs if r["hallucination_type"] is None}
    for (sid, h), fk in _quartets(recs).items():
        assert sorted(fk) == [1, 2, 3, 4]
        scenario = src[sid]["scenario_id"]
        v = draw_variant(pool, 4, scenario, h)  # k=None: the quartet's draw
        assert {f["variant"] for f in fk.values()} == {v.id}
        assert len({f["instruction"] for f in fk.values()}) == 1
        subs = {f["substitute_task"] for f in fk.values()}
        if h == "WIC":
            assert len(subs) == 1 and None not in subs
        else:
            assert subs == {None}
        # the four forks differ in their fork turn only
        assert [f["fork_turn"] for f in (fk[k] for k in (1, 2, 3, 4))] == list(
            fork_turns(src[sid]["num_system_turns"])
        )
    m = json.loads((runs / "quartet" / "manifest.json").read_text())
    assert m["config"]["variant_draw"] == "quartet"


def test_per_fork_draws_on_request(runs):
    pool = load_variants()
    recs = _records(runs / "fork")
    src = {r["dialogue_id"]: r for r in recs if r["hallucination_type"] is None}
    mixed = 0
    for (sid, h), fk in _quartets(recs).items():
        scenario = src[sid]["scenario_id"]
        for k, f in fk.items():
            assert f["variant"] == draw_variant(pool, 4, scenario, h, k).id
        mixed += len({f["variant"] for f in fk.values()}) > 1
    assert mixed > 0  # per-fork draws do mix variants inside a quartet
    assert json.loads((runs / "fork" / "manifest.json").read_text())["config"]["variant_draw"] == "fork"
    # the conformant dialogues do not depend on how forks draw
    a = [r for r in _records(runs / "quartet") if r["hallucination_type"] is None]
    b = [r for r in recs if r["hallucination_type"] is None]
    assert [r["turns"] for r in a] == [r["turns"] for r in b]


def test_quartet_draws_cover_the_pool_and_keep_the_substitute_rule(star_dir):
    from dialfork_dataset.star import StarCorpus

    pool = load_variants()
    for h in taxonomy.names():
        seen = Counter(draw_variant(pool, 0, str(i), h).id for i in range(400))
        assert set(seen) == {v.id for v in pool[h]}
        assert max(seen.values()) < 2.5 * 400 / len(pool[h])
    domain_of = {n: t.domain for n, t in StarCorpus(star_dir).tasks.items()}
    assert {draw_substitute_task("hotel_book", domain_of, 0, str(i)) for i in range(40)} == {
        "hotel_search",
        "hotel_service_request",
    }
    assert all(
        domain_of[draw_substitute_task("weather", domain_of, 0, str(i))] != "weather" for i in range(20)
    )
    # quartet and fork seeds are distinct streams
    assert draw_seed(0, "1", "WIC", None) not in {draw_seed(0, "1", "WIC", k) for k in (1, 2, 3, 4)}


def test_variant_draw_is_part_of_the_configuration(runs, star_dir):
    with pytest.raises(GenerationError, match="variant_draw: existing 'quartet' vs requested 'fork'"):
        generate_corpus(
            GenerationConfig(
                star=str(star_dir),
                out=str(runs / "quartet"),
                tasks=TASKS,
                per_task=6,
                seed=4,
                variant_draw="fork",
            ),
            progress=False,
        )
    with pytest.raises(GenerationError, match="variant_draw 'each' is unknown"):
        generate_corpus(
            GenerationConfig(star=str(star_dir), out=str(runs / "z"), variant_draw="each"), progress=False
        )


# ------------------------------------------------------------------ scenario filters


def test_min_system_turns_filter(tmp_path, star_dir):
    base = tmp_path / "t4"
    m4 = generate_corpus(
        GenerationConfig(star=str(star_dir), out=str(base), tasks=TASKS, per_task=6, seed=4), progress=False
    )
    ts = sorted(r["num_system_turns"] for r in _records(base) if r["hallucination_type"] is None)
    cut = ts[len(ts) // 2]  # a threshold that drops some and keeps some
    out = tmp_path / "strict"
    m = generate_corpus(
        GenerationConfig(
            star=str(star_dir), out=str(out), tasks=TASKS, per_task=6, seed=4, min_system_turns=cut
        ),
        progress=False,
    )
    kept = [r for r in _records(out) if r["hallucination_type"] is None]
    assert all(r["num_system_turns"] >= cut for r in kept)
    assert len(kept) == sum(t >= cut for t in ts) == m.counts["total"]["kept"]
    assert m.counts["total"]["dropped"] == len(ts) - len(kept) + m4.counts["total"]["dropped"] > 0
    assert m["config"]["min_system_turns"] == cut
    # a stricter filter changes which dialogues are kept, not their text
    loose = {r["dialogue_id"]: r["turns"] for r in _records(base)}
    assert all(loose[r["dialogue_id"]] == r["turns"] for r in _records(out))


@pytest.mark.parametrize("bad", [3, 0, 4.5, "4"])
def test_min_system_turns_below_four_is_refused(tmp_path, star_dir, bad):
    with pytest.raises(GenerationError, match="min_system_turns must be an integer >= 4"):
        generate_corpus(
            GenerationConfig(
                star=str(star_dir), out=str(tmp_path / "o"), tasks=("weather",), min_system_turns=bad
            ),
            progress=False,
        )
    assert not (tmp_path / "o").exists()


def test_multitask_scenarios_on_request(tmp_path, star_dir):
    from dialfork_dataset.star import StarCorpus

    c = StarCorpus(star_dir)
    single = plan_units(c, GenerationConfig(star=str(star_dir), out="x", tasks=("weather",)))
    both = plan_units(c, GenerationConfig(star=str(star_dir), out="x", tasks=("weather",), multitask=True))
    assert all(u.scenario.single_task for u in single)
    assert len(both) == len(c.scenarios_for("weather", single_task=False)) > len(single)
    assert any(not u.scenario.single_task for u in both)
    # given scenarios: a multi-task one is role-played once per task (unit ids stay distinct)
    multi = [s for s in c.scenarios if not s.single_task and {"weather", "bank_balance"} <= set(s.tasks)][:2]
    cfg = GenerationConfig(
        star=str(star_dir),
        out=str(tmp_path / "mt"),
        tasks=("weather", "bank_balance"),
        multitask=True,
        seed=1,
    )
    units = plan_units(c, cfg, scenarios=multi)
    assert sorted(u.unit_id for u in units) == sorted(
        f"{t}-{s.scenario_id}" for s in multi for t in ("bank_balance", "weather")
    )
    m = generate_corpus(cfg, scenarios=multi, progress=False)
    recs = _records(tmp_path / "mt")
    for r in recs:
        validate_record(r)
    assert m["config"]["multitask"] is True
    assert {r["task"] for r in recs if r["hallucination_type"] is None} <= {"weather", "bank_balance"}
    assert m.counts["total"]["scenarios"] == 4


def test_cli_filter_and_draw_options(tmp_path, star_dir, capsys):
    from generation.cli import main

    args = ["--star", str(star_dir), "--tasks", "weather", "--per-task", "2", "--no-progress"]
    out = tmp_path / "cli"
    assert (
        main(args + ["--out", str(out), "--variant-draw", "fork", "--min-system-turns", "5", "--multitask"])
        == 0
    )
    cfg = json.loads((out / "manifest.json").read_text())["config"]
    assert (cfg["variant_draw"], cfg["min_system_turns"], cfg["multitask"]) == ("fork", 5, True)
    capsys.readouterr()
    assert main(args + ["--out", str(tmp_path / "bad"), "--min-system-turns", "3"]) == 2
    assert "min_system_turns must be an integer >= 4" in capsys.readouterr().err
