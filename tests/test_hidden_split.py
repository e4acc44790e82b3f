"""The hidden split (SPEC section 4): keys, keyed reservation, the blind draw, disjointness, the
crash-safe export, the dataset card and the gold revision check."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import toy_extensions
from hidden_factory import llm_like_records

from dialfork_dataset.hidden import (
    HiddenKey,
    HiddenKeyError,
    LeakError,
    assert_disjoint,
    corpus_types,
    draw_hidden_tracks,
    n_reserved,
    parse_key,
    parse_seed,
    read_key_file,
    reserve,
    star_scenario_split,
    type_cells,
    write_key_file,
)
from dialfork_dataset.hub import export_hub_layout, load_blind, load_blind_pairs, load_gold, recover_export
from dialfork_dataset.taxonomy import FORK_POSITIONS, forks_per_source

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "workflows" / "insurance.yaml"
KEY = bytes(range(32))
#: The paper's four types (literal on purpose: a corpus made before any other type existed).
PAPER = ("WIC", "SSPC", "GR", "CSC")


def paper_corpus(tasks, per_task, seed=3):
    """LLM-like hidden records with the paper's four types only, whatever else is registered."""
    recs = llm_like_records(tasks=tasks, per_task=per_task, seed=seed)
    return [r for r in recs if r["hallucination_type"] in (None, *PAPER)]


# ---- keys ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad, msg",
    [
        (None, "empty"),
        ("", "empty"),
        (b"", "empty"),
        ("ab" * 31, "31 bytes"),
        ("zz" * 32, "not a hex"),
        (b"k" * 16, "16 bytes"),
        (12, "hex string or bytes"),
    ],
)
def test_parse_key_refuses_empty_short_and_malformed(bad, msg):
    with pytest.raises(HiddenKeyError, match=msg):
        parse_key(bad)


def test_keys_and_seeds():
    assert parse_key("ab" * 32) == bytes([0xAB]) * 32 and parse_key(KEY) == KEY
    assert parse_seed("01" * 16) == int("01" * 16, 16)
    for bad in ("ab" * 15, "", 2**200):  # 120 bits, nothing, an integer (its bit count is unknowable)
        with pytest.raises(HiddenKeyError):
            parse_seed(bad)
    k = HiddenKey.generate()
    assert len(k.key) == 32 and len(bytes.fromhex(k.hidden_seed_hex)) == 16 and k.hidden_fraction == 0.2
    assert k.key.hex() not in repr(k) and k.hidden_seed_hex not in repr(k)
    assert HiddenKey.generate().key != k.key
    with pytest.raises(HiddenKeyError, match="hidden_fraction"):
        HiddenKey(KEY, None, 1.0)


def test_key_file_roundtrip_mode_and_no_overwrite(tmp_path):
    k = HiddenKey.generate(0.25)
    p = write_key_file(tmp_path / "s" / "key.json", k)
    assert oct(p.stat().st_mode & 0o777) == "0o600"
    assert read_key_file(p) == k
    with pytest.raises(FileExistsError, match="never replaced"):
        write_key_file(p, HiddenKey.generate())
    (tmp_path / "short.json").write_text(json.dumps({"key": "ab" * 8}))
    with pytest.raises(HiddenKeyError, match="short.json.*8 bytes"):
        read_key_file(tmp_path / "short.json")
    with pytest.raises(FileNotFoundError, match="keygen"):
        read_key_file(tmp_path / "missing.json")


def test_keygen_cli(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "dialfork_dataset", "keygen", str(tmp_path / "k.json")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert r.returncode == 0 and "128-bit" in r.stdout
    assert read_key_file(tmp_path / "k.json").hidden_seed.bit_length() <= 128
    r = subprocess.run(
        [sys.executable, "-m", "dialfork_dataset", "keygen", str(tmp_path / "k.json")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert r.returncode == 2 and "never replaced" in r.stderr and "Traceback" not in r.stderr


# ---- reservation -----------------------------------------------------------------------------


def test_n_reserved():
    assert [n_reserved(n, 0.2) for n in (0, 1, 2, 3, 5, 10, 12, 200)] == [0, 0, 1, 1, 1, 2, 2, 40]
    assert n_reserved(4, 0.9) == 3  # never every source: the task keeps a public side


def test_reserve_is_keyed_per_task_and_stable():
    items = {"a": [str(i) for i in range(50)], "b": ["x", "y"], "c": ["only"]}
    r = reserve(items, KEY, 0.2)
    assert len(r["a"]) == 10 and len(r["b"]) == 1 and r["c"] == set()
    assert reserve({"a": list(reversed(items["a"]))}, KEY, 0.2)["a"] == r["a"]  # order-free
    assert reserve(items, bytes(32), 0.2)["a"] != r["a"]  # another key, another selection
    # a growing universe moves few reserved items (rank by keyed hash): none of the old public ones
    grown = reserve({"a": items["a"] + [str(i) for i in range(50, 55)]}, KEY, 0.2)["a"]
    assert len(grown) == 11


def test_star_scenario_split(star_dir):
    from dialfork_dataset.star import StarCorpus

    corpus = StarCorpus(star_dir)
    k = HiddenKey(KEY, None, 0.2)
    split = star_scenario_split(corpus, k, ["weather", "doctor_schedule"])
    for task, parts in split.items():
        universe = [s.scenario_id for s in corpus.scenarios_for(task=task, single_task=True)]
        assert not set(parts["public"]) & set(parts["hidden"])
        assert sorted(parts["public"] + parts["hidden"]) == sorted(universe)
        assert len(parts["hidden"]) == n_reserved(len(universe), 0.2) >= 1


# ---- the blind draw --------------------------------------------------------------------------


@pytest.mark.parametrize("n_types", [1, 2, 3, 4, 5, 6])
@pytest.mark.parametrize("n_sources", [1, 5, 8, 13, 40])
def test_type_cells_balance_the_types_and_each_types_positions(n_types, n_sources):
    types, sids = [f"T{i}" for i in range(n_types)], [f"s{i}" for i in range(n_sources)]
    cells = type_cells(sids, KEY, types)
    assert sorted(cells) == sorted(sids)  # every forked source gives one fork
    per_type = Counter(t for t, _ in cells.values())
    assert max(per_type[t] for t in types) - min(per_type[t] for t in types) <= 1
    for t in types:
        ks = Counter(k for h, k in cells.values() if h == t)
        assert max(ks[k] for k in FORK_POSITIONS) - min(ks[k] for k in FORK_POSITIONS) <= 1
    assert type_cells(sids, KEY, types) == cells and type_cells(sids, KEY, []) == {}


@pytest.mark.parametrize("n_types", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("n_sources", [4, 9, 18, 40])
def test_a_type_added_at_the_end_takes_its_share_from_the_others_tails(n_types, n_sources):
    """Issue 52: each type's ranking and positions are seeded by the key and the type alone, so with
    one more type every other type keeps the same fork of every source it keeps, and gives up about
    n / (t (t + 1)) sources; pinning the types (the same list) keeps the draw exactly."""
    types, sids = [f"T{i}" for i in range(n_types)], [f"s{i}" for i in range(n_sources)]
    before, after = type_cells(sids, KEY, types), type_cells(sids, KEY, [*types, "NEW"])
    kept = {s: c for s, c in after.items() if c[0] != "NEW"}
    assert all(before[s] == c for s, c in kept.items())
    lost = Counter(before[s][0] for s in sids if after[s][0] == "NEW")
    bound = -(-n_sources // (n_types * (n_types + 1))) + 1
    assert all(v <= bound for v in lost.values()), (lost, bound)
    assert type_cells(sids, KEY, types) == before  # pinned: the same types draw the same cells


def test_corpus_types_are_the_records_types_in_seed_order():
    recs = paper_corpus(("weather",), 2)
    assert corpus_types(recs) == PAPER
    assert corpus_types([r for r in recs if r["hallucination_type"] != "SSPC"]) == ("WIC", "GR", "CSC")
    assert corpus_types([{"hallucination_type": "ZZ_GONE"}, *recs]) == (
        *PAPER,
        "ZZ_GONE",
    )  # unregistered: last


def test_a_keys_blind_set_does_not_change_when_a_type_is_registered():
    """Issue 45: the draw shares the forks between the types the corpus carries, not the registry's,
    so a fixed corpus drawn with its key gives the same blind set after a type is registered."""
    from dialfork_dataset import taxonomy
    from dialfork_dataset.taxonomy import HallucinationType

    recs = paper_corpus(("weather", "trivia", "bank_balance"), 12)
    before = draw_hidden_tracks(recs, KEY)
    assert [r["dialogue_id"] for r in before.detector] == [
        r["dialogue_id"] for r in draw_hidden_tracks(recs, KEY, types=PAPER).detector
    ]
    taxonomy.register(HallucinationType("ZZ_FIFTH", "a type registered after the corpus was made"))
    try:
        after = draw_hidden_tracks(recs, KEY)
    finally:
        taxonomy.unregister("ZZ_FIFTH")
    ids = [r["dialogue_id"] for r in before.detector]
    assert [r["dialogue_id"] for r in after.detector] == ids and after.mix == before.mix
    assert [r["dialogue_id"] for r in after.metric] == [r["dialogue_id"] for r in before.metric]


def _toy_type():
    """The toy type of tests/toy_extensions.py, as its ``register`` builds it."""
    from dialfork_dataset.taxonomy import HallucinationType

    return HallucinationType(
        toy_extensions.TYPE,
        "premature closing",
        breaks_task=True,
        planner="toy_extensions:plan_premature",
        variants=toy_extensions._variants(),
        example_line="That is all done, goodbye!",
    )


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory):
    """The example workflow file's corpus generated with the built-in types, then regenerated with the
    toy type appended (unregistered and registered again here, whether or not the suite runs with
    the toys; the registry is left as it was)."""
    from dialfork_dataset import taxonomy
    from generation import GenerationConfig, generate_corpus

    root = tmp_path_factory.mktemp("regenerated")
    toy = toy_extensions.TYPE
    spec = taxonomy.unregister(toy) if toy in taxonomy.names() else None
    was_registered = spec is not None
    out = {"types": taxonomy.names()}  # the built-in types (the paper's four first)
    try:
        assert out["types"][:4] == PAPER and toy not in out["types"]
        for name in ("before", "after"):
            if name == "after":
                taxonomy.register(spec or _toy_type())
            corpus = root / name
            config = GenerationConfig(star=f"workflow:{EXAMPLE}", out=str(corpus), per_task=24)
            generate_corpus(config, progress=False)
            out[name] = [
                json.loads(x) for f in sorted(corpus.glob("*.jsonl")) for x in f.open(encoding="utf-8")
            ]
    finally:
        if toy in taxonomy.names() and not was_registered:
            taxonomy.unregister(toy)
        elif toy not in taxonomy.names() and was_registered:
            taxonomy.register(spec)
    return out


def test_a_corpus_regenerated_with_one_more_type_keeps_the_other_types_blind_ids(regenerated):
    """Issue 52: each type's blind draw is seeded by the key and the type alone. Regenerated with one
    more type, the corpus keeps every record of the others; with the same key, the conformant blind
    dialogues and the metric track stay, each existing type keeps its blind forks except the few it
    gives up to the new type (about n / (t (t + 1)) of n forked sources, t types before), and none
    is swapped for another; pinning the earlier types keeps the blind set exactly."""
    before, after, types = regenerated["before"], regenerated["after"], regenerated["types"]
    by_id = {r["dialogue_id"]: r for r in after}
    assert all(by_id[r["dialogue_id"]]["turns"] == r["turns"] for r in before)  # appended: same seeds
    assert {r["hallucination_type"] for r in after} == {None, *types, toy_extensions.TYPE}
    a, b = draw_hidden_tracks(before, KEY), draw_hidden_tracks(after, KEY)

    def ids(rows, htype):
        return {r["dialogue_id"] for r in rows if r["hallucination_type"] == htype}

    assert ids(b.detector, None) == ids(a.detector, None)
    assert {r["dialogue_id"] for r in a.metric} <= {r["dialogue_id"] for r in b.metric}
    n_forked = sum(1 for r in a.detector if r["hallucination_type"])
    t = len(types)
    bound = -(-n_forked // (t * (t + 1))) + 2  # two subsets, each a fold of its own
    for htype in types:
        kept, was = ids(b.detector, htype), ids(a.detector, htype)
        assert kept <= was and len(was - kept) <= bound, (htype, was - kept)
    assert ids(b.detector, toy_extensions.TYPE)  # the new type has its share
    pinned = draw_hidden_tracks(after, KEY, types=types)
    assert [r["dialogue_id"] for r in pinned.detector] == [r["dialogue_id"] for r in a.detector]


def test_the_export_pins_the_blind_types(regenerated, tmp_path):
    """``export_hub_layout(blind_types=...)`` (``python -m leaderboard export --blind-types``): the
    release of the regenerated corpus, pinned to the earlier release's types, has its blind set."""
    from dialfork_dataset import taxonomy

    added = toy_extensions.TYPE not in taxonomy.names()
    if added:  # the suite runs without the toys: the regenerated records need their type registered
        taxonomy.register(_toy_type())
    gold = {}
    try:
        for name, pin in (("before", None), ("after", list(regenerated["types"]))):
            info = export_hub_layout(
                regenerated[name],
                tmp_path / name,
                tmp_path / f"{name}-gold",
                blind_key="7b" * 32,
                hidden_fraction=0.5,
                blind_types=pin,
            )
            assert info["hidden"]["blind_types"] == list(regenerated["types"])
            gold[name] = load_gold(info["gold_dir"])
    finally:
        if added:
            taxonomy.unregister(toy_extensions.TYPE)
    assert [r["dialogue_id"] for r in gold["after"]["task3"]] == [
        r["dialogue_id"] for r in gold["before"]["task3"]
    ]


def test_draw_one_dialogue_per_source_balanced_and_tracks_disjoint():
    recs = llm_like_records(tasks=("weather", "trivia", "bank_balance"), per_task=24, seed=3)
    tr = draw_hidden_tracks(recs, KEY)
    det_src = Counter(r["source_id"] for r in tr.detector)
    assert max(det_src.values()) == 1  # at most one dialogue per source
    met_src = {r["source_id"] for r in tr.metric}
    assert not met_src & set(det_src)  # no source feeds both tracks
    assert len(met_src) == 3 * 12 and len(det_src) == 3 * 12
    assert len(tr.metric) == len(met_src) * (1 + forks_per_source())  # whole families on the metric track
    mix = tr.mix
    assert mix["dialogues"] == 36 and mix["subsets"] == {"private": 18, "public": 18}
    # conformant share 0.2 per subset (round(3.6) = 4 of 18), forks balanced over types and k
    assert mix["conformant"] == 8 and mix["forked"] == 28
    assert max(mix["types"].values()) - min(mix["types"].values()) <= 1
    for htype in mix["types"]:  # each type's positions: within one (the subsets walk them both ways)
        ks = Counter(r["fork_position"] for r in tr.detector if r["hallucination_type"] == htype)
        assert max(ks[k] for k in FORK_POSITIONS) - min(ks[k] for k in FORK_POSITIONS) <= 1
    assert max(mix["fork_positions"].values()) - min(mix["fork_positions"].values()) <= len(mix["types"])
    for part in ("public", "private"):
        kinds = {r["hallucination_type"] is None for r in tr.detector if r["subset"] == part}
        assert kinds == {True, False}  # the Score needs both kinds in each part
    # secret but reproducible: the same key draws the same set, another key another one
    assert [r["dialogue_id"] for r in draw_hidden_tracks(recs, KEY).detector] == [
        r["dialogue_id"] for r in tr.detector
    ]
    assert {r["dialogue_id"] for r in draw_hidden_tracks(recs, bytes(32)).detector} != {
        r["dialogue_id"] for r in tr.detector
    }


def test_assert_disjoint_by_scenario_and_by_turns_hash():
    pub = llm_like_records(tasks=("weather",), per_task=3, seed=1)
    hid = llm_like_records(tasks=("weather",), per_task=3, seed=2, prefix="h")
    assert assert_disjoint(pub, hid)["hidden_records"] == len(hid)
    same_scenario = [{**hid[0], "scenario_id": pub[0]["scenario_id"]}]
    with pytest.raises(LeakError, match="1 scenario id"):
        assert_disjoint(pub, same_scenario)
    same_text = [{**hid[0], "turns": pub[5]["turns"]}]
    with pytest.raises(LeakError, match="turn sequence"):
        assert_disjoint(pub, same_text)


# ---- the export ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def corpora():
    return (
        llm_like_records(tasks=("weather", "trivia"), per_task=8, seed=1),
        llm_like_records(tasks=("weather", "trivia"), per_task=16, seed=2, prefix="h", reword=0.1),
    )


def _public_rows(hub: Path) -> list[dict]:
    from leaderboard.leakcheck import read_public_configs

    return [r for rows in read_public_configs(hub).values() for r in rows]


def test_export_publishes_nothing_hidden(corpora, tmp_path):
    pub, hid = corpora
    info = export_hub_layout(pub, tmp_path / "hub", hidden=hid, blind_key=KEY.hex())
    public = _public_rows(tmp_path / "hub")
    hidden_scen = {r["scenario_id"] for r in hid}
    assert public and not hidden_scen & {r["scenario_id"] for r in public}
    from dialfork_dataset.hidden import turns_hash

    pub_hashes = {turns_hash(r["turns"]) for r in public}
    blind = load_blind(tmp_path / "hub")
    pairs = load_blind_pairs(tmp_path / "hub")
    assert not any(turns_hash(b["turns"]) in pub_hashes for b in blind)
    assert not any(
        turns_hash(p["candidate"]) in pub_hashes or turns_hash(p["reference"]) in pub_hashes for p in pairs
    )
    assert len(blind) == info["hidden"]["mix"]["dialogues"] == 16 and len(pairs) == 16 * forks_per_source()
    gold = load_gold(info["gold_dir"])
    key = json.loads((Path(info["gold_dir"]) / "blind_key.json").read_text())
    assert (
        key["key"] == KEY.hex()
        and oct((Path(info["gold_dir"]) / "blind_key.json").stat().st_mode & 0o777) == "0o600"
    )
    assert gold["manifest"]["hidden"]["mode"].startswith("separate hidden corpus")
    assert oct((tmp_path / "hub").stat().st_mode & 0o777) == "0o755"


def test_export_refuses_leaks_and_public_seeds(corpora, tmp_path):
    pub, hid = corpora
    with pytest.raises(LeakError, match="scenario id"):
        export_hub_layout(pub, tmp_path / "hub", hidden=pub[: 1 + forks_per_source()], blind_key=KEY.hex())
    assert not (tmp_path / "hub").exists()
    from dialfork_dataset.jsonl import write_json_atomic, write_jsonl

    write_jsonl(tmp_path / "hid" / "r.jsonl", hid)
    write_json_atomic(tmp_path / "hid" / "manifest.json", {"config": {"seed": 0}})
    with pytest.raises(ValueError, match="public seed 0"):
        export_hub_layout(pub, tmp_path / "hub", hidden=tmp_path / "hid", blind_key=KEY.hex())
    k = HiddenKey.generate()
    write_json_atomic(tmp_path / "hid" / "manifest.json", {"config": {"seed": k.hidden_seed + 1}})
    with pytest.raises(ValueError, match="not generated with the key file's secret seed"):
        export_hub_layout(pub, tmp_path / "hub", hidden=tmp_path / "hid", key=k)
    with pytest.raises(HiddenKeyError, match="31 bytes"):
        export_hub_layout(pub, tmp_path / "hub", hidden=hid, blind_key="ab" * 31)


def test_dataset_card(corpora, tmp_path):
    from huggingface_hub import DatasetCard

    pub, hid = corpora
    info = export_hub_layout(pub, tmp_path / "hub", hidden=hid, blind_key=KEY.hex())
    card = DatasetCard.load(tmp_path / "hub" / "README.md")
    d = card.data.to_dict()
    assert d["source_datasets"] == ["extended|other-star"]
    assert d["annotations_creators"] == ["machine-generated"] and d["language_creators"] == [
        "machine-generated"
    ]
    assert "synthetic" in d["tags"] and d["gold_revision"] == info["gold_revision"]
    for ci in d["dataset_info"]:
        assert ci["download_size"] > 0 and ci["dataset_size"] == sum(s["num_bytes"] for s in ci["splits"]) > 0
        assert all(s["num_examples"] > 0 for s in ci["splits"])
    text = card.text
    assert "## What is public and what is hidden" in text and "one dialogue per hidden source" in text
    assert '"hallucination_type":' in text and "huggingface.co/spaces/idiap/dialfork-leaderboard" in text
    mix = info["hidden"]["mix"]
    assert f"{mix['dialogues']:,} dialogues, of which\n  {mix['conformant']:,} conformant" in text
    from datasets import load_dataset

    ds = load_dataset(str(tmp_path / "hub"), "blind_task2", split="test", cache_dir=str(tmp_path / "cache"))
    assert set(ds.features) == {"pair_id", "reference_id", "candidate_id", "reference", "candidate"}


def _state(hub: Path, gold: Path) -> tuple[str, str]:
    from dialfork_dataset.hub import read_card_gold_revision

    return read_card_gold_revision(hub), json.loads((gold / "gold_manifest.json").read_text())["revision"]


def test_swap_is_all_or_nothing_and_recovers(corpora, tmp_path, monkeypatch):
    import dialfork_dataset.hub as hub_mod

    pub, hid = corpora
    hub, gold = tmp_path / "hub", tmp_path / "hub-gold"
    first = export_hub_layout(pub, hub, hidden=hid, blind_key=KEY.hex())
    # 1. a crash while staging (before the swap): nothing changes, no staging folder is left
    monkeypatch.setattr(hub_mod, "build_card", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        export_hub_layout(pub, hub, hidden=hid, blind_key="cd" * 32, overwrite=True)
    monkeypatch.undo()
    assert _state(hub, gold) == (first["gold_revision"],) * 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hub", "hub-gold"]
    # 2. a crash in the middle of the swap (public moved, gold not yet): the next run completes it
    real_replace = os.replace

    def crashing_replace(a, b):
        if Path(a) == gold.resolve():  # the public side is already swapped, the gold not yet: crash
            raise OSError("power cut")
        return real_replace(a, b)

    monkeypatch.setattr(hub_mod.os, "replace", crashing_replace)
    with pytest.raises(OSError, match="power cut"):
        export_hub_layout(pub, hub, hidden=hid, blind_key="cd" * 32, overwrite=True)
    monkeypatch.undo()
    card_rev, gold_rev = _state(hub, gold)
    assert card_rev != gold_rev  # half swapped: scoring refuses this pair (test_score_refuses_other_gold)
    done = recover_export(hub, gold)
    assert any("completed" in d for d in done)
    card_rev, gold_rev = _state(hub, gold)
    assert card_rev == gold_rev != first["gold_revision"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hub", "hub-gold"]
    # 3. leftover staging folders of a killed run are removed by the next export
    (tmp_path / ".hub.tmp-dead").mkdir()
    (tmp_path / ".hub-gold.tmp-dead").mkdir()
    export_hub_layout(pub, hub, hidden=hid, blind_key=KEY.hex(), overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hub", "hub-gold"]
    assert _state(hub, gold) == (first["gold_revision"],) * 2


def test_score_refuses_other_gold(corpora, tmp_path):
    from leaderboard.score import GoldError
    from leaderboard.submissions import evaluate
    from leaderboard.synthetic import write_metadata, write_predictions

    pub, hid = corpora
    a = export_hub_layout(pub, tmp_path / "a", hidden=hid, blind_key=KEY.hex())
    b = export_hub_layout(pub, tmp_path / "b", hidden=hid, blind_key="cd" * 32)
    preds = {r["dialogue_id"]: 1 for r in load_blind(tmp_path / "a")}
    sub = write_predictions(preds, tmp_path / "p.jsonl")
    write_metadata(tmp_path / "p.metadata.json", method="First")
    ev = evaluate(sub, track="detector", gold=a["gold_dir"], blind=tmp_path / "a")
    assert ev.public["gold_revision"] == a["gold_revision"]
    # the same blind set with a gold of another revision (another release, or a half-finished export)
    import shutil

    shutil.copytree(a["gold_dir"], tmp_path / "g2")
    m = json.loads((tmp_path / "g2" / "gold_manifest.json").read_text())
    m["revision"] = b["gold_revision"]
    (tmp_path / "g2" / "gold_manifest.json").write_text(json.dumps(m))
    with pytest.raises(GoldError, match="does not match"):
        evaluate(sub, track="detector", gold=tmp_path / "g2", blind=tmp_path / "a")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "leaderboard",
            "score",
            str(sub),
            "--gold",
            str(tmp_path / "g2"),
            "--blind",
            str(tmp_path / "a"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert r.returncode == 2 and "does not match" in r.stderr and "Traceback" not in r.stderr


# ---- the generation CLI ----------------------------------------------------------------------


def test_generation_cli_public_and_hidden_sides(star_dir, tmp_path):
    from dialfork_dataset.builder import load_records
    from generation.cli import main

    key = write_key_file(tmp_path / "key.json", HiddenKey(bytes(range(3, 35)), "2e" * 16))  # fixed: no flakes
    common = [
        "--star",
        str(star_dir),
        "--tasks",
        "weather",
        "--per-task",
        "3",
        "--no-progress",
        "--hidden-key",
        str(key),
    ]
    assert main([*common, "--out", str(tmp_path / "pub"), "--split", "public"]) == 0
    assert main([*common, "--out", str(tmp_path / "hid"), "--split", "hidden"]) == 0
    pub, hid = load_records(tmp_path / "pub"), load_records(tmp_path / "hid")
    assert assert_disjoint(pub, hid)
    from dialfork_dataset.star import StarCorpus

    split = star_scenario_split(StarCorpus(star_dir), read_key_file(key), ["weather"])["weather"]
    assert {r["scenario_id"] for r in pub} <= set(split["public"])
    assert {r["scenario_id"] for r in hid} == set(split["hidden"][:3])
    seed = json.loads((tmp_path / "hid" / "manifest.json").read_text())["config"]["seed"]
    assert seed == read_key_file(key).hidden_seed and seed.bit_length() > 100
    # a public seed for the hidden side, or half of the options, is refused with a message
    assert main([*common, "--out", str(tmp_path / "x"), "--split", "hidden", "--seed", "3"]) == 2
    assert main(["--star", str(star_dir), "--out", str(tmp_path / "y"), "--hidden-key", str(key)]) == 2
