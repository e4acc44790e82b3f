import json
import re
from collections import Counter
from unittest import mock

import pytest

from corpus_factory import make_records
from dialfork_dataset import (
    build_dataset,
    export_hub_layout,
    load_blind,
    load_blind_pairs,
    load_gold,
    load_records,
    normalize_record,
    push_to_hub,
    split_sources,
    task1_sets,
    task2_quartets,
    task3_examples,
    taxonomy,
    write_jsonl,
)
from dialfork_dataset.builder import CONFIGS, sort_key
from dialfork_dataset.taxonomy import forks_per_source

PER_TASK = {"weather": 5, "trivia": 4, "bank_balance": 1}
HIDDEN_PER_TASK = {"weather": 4, "trivia": 4}


def hidden_records(per_task=HIDDEN_PER_TASK):
    """A hidden corpus: other scenarios, other texts (as `--split hidden` with a secret seed makes)."""
    out = []
    for task, n in per_task.items():
        for r in make_records(tasks=(task,), per_task=n, T=6):
            r = dict(r)
            for k in ("dialogue_id", "source_id"):
                r[k] = "h" + r[k]
            r["scenario_id"] = "9" + r["scenario_id"]
            r["turns"] = [{**t, "text": "hidden " + t["text"]} for t in r["turns"]]
            out.append(r)
    return out


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    recs = []
    for task, n in PER_TASK.items():
        recs += make_records(tasks=(task,), per_task=n, T=5)
    # split over two shard files, shuffled, to check the canonical ordering
    write_jsonl(root / "src" / "shard-1.jsonl", recs[::2])
    write_jsonl(root / "src" / "shard-0.jsonl", recs[1::2])
    write_jsonl(root / "hidden" / "h.jsonl", hidden_records())
    info = export_hub_layout(root / "src", root / "hub", hidden=root / "hidden", blind_key="5a" * 32)
    return root, recs, info


def test_task3_split_sizes_floor_ceil(corpus):
    _, recs, info = corpus
    assign = split_sources(recs)
    for task, n in PER_TASK.items():
        sides = Counter(
            assign[r["dialogue_id"]] for r in recs if r["task"] == task and r["hallucination_type"] is None
        )
        assert sides["train"] == n // 2 and sides["test"] == n - n // 2
    n_test_src = sum(n - n // 2 for n in PER_TASK.values())
    n_train_src = sum(n // 2 for n in PER_TASK.values())
    c = info["counts"]
    forks = forks_per_source()  # 16 for the paper's four types
    assert c["task3"] == {"train": n_train_src, "test": n_test_src * (1 + forks)}
    assert c["conformant"] == {"train": n_train_src, "test": n_test_src}
    assert c["forked"] == {"train": n_train_src * forks, "test": n_test_src * forks}
    # 8 hidden sources: per task 2 to the metric track (all their pairs: one per fork), 2 give one blind dialogue
    assert c["blind"] == {"test": 4}
    assert c["blind_task2"] == {"test": 4 * forks}
    mix = info["hidden"]["mix"]
    assert mix["dialogues"] == 4 and mix["conformant"] == 2 and mix["forked"] == 2
    assert mix["subsets"] == {"private": 2, "public": 2} and mix["metric_units"] == 4 * len(taxonomy.names())


def test_split_is_deterministic_and_seeded():
    recs = make_records(tasks=("weather",), per_task=9)
    a, b = split_sources(recs), split_sources(list(reversed(recs)))
    assert a == b
    # another seed gives another (still floor/ceil) partition for at least one of a few seeds
    others = [split_sources(recs, split_seed=s) for s in (1, 2, 3)]
    assert any(o != a for o in others)
    assert all(Counter(o.values()) == {"train": 4, "test": 5} for o in others)
    assert Counter(a.values()) == {"train": 4, "test": 5}


def test_load_dataset_roundtrip_every_config(corpus):
    from datasets import load_dataset

    from dialfork_dataset import record_features

    root, recs, _ = corpus
    canon = sorted((normalize_record(r) for r in recs), key=sort_key)
    by_id = {r["dialogue_id"]: r for r in canon}
    assign = split_sources(recs)
    seen = set()
    for cfg in CONFIGS:
        dd = load_dataset(str(root / "hub"), cfg, cache_dir=str(root / "hf_cache"))
        assert set(dd) == {"train", "test"}
        for split, ds in dd.items():
            assert ds.features == record_features()
            rows = list(ds)
            assert [r["dialogue_id"] for r in rows] == [
                r["dialogue_id"] for r in canon if r["dialogue_id"] in {x["dialogue_id"] for x in rows}
            ]
            for r in rows:
                assert r == by_id[r["dialogue_id"]]
                assert assign[r["source_id"]] == split
                seen.add(r["dialogue_id"])
            if cfg == "task3" and split == "train":
                assert all(r["hallucination_type"] is None for r in rows)
    assert seen == set(by_id)
    ds = load_dataset(str(root / "hub"), "forked", split="test", cache_dir=str(root / "hf_cache"))
    assert ds.features["turns"].feature["speaker"].dtype == "string"


def test_builder_matches_export(corpus):
    from datasets import load_dataset

    root, _, _ = corpus
    for cfg in CONFIGS:
        built = build_dataset(root / "src", cfg, cache_dir=str(root / "cache"))
        hub = load_dataset(str(root / "hub"), cfg, cache_dir=str(root / "hf_cache"))
        for split in ("train", "test"):
            assert list(built[split]) == list(hub[split])
            assert built[split].features == hub[split].features


def test_blind_ids_opaque_and_gold_outside(corpus):
    root, recs, info = corpus
    blind = load_blind(root / "hub")
    pairs = load_blind_pairs(root / "hub")
    gold = load_gold(info["gold_dir"])
    # ids carry no information: fixed-length hex tokens, no task/type/k/seed, random order
    real_ids = {r["dialogue_id"] for r in recs}
    words = {
        w for r in recs for w in (r["task"], r["hallucination_type"], str(r["seed"]), r["scenario_id"]) if w
    }
    for b in blind:
        assert re.fullmatch(r"d[0-9a-f]{20}", b["dialogue_id"])
        assert b["dialogue_id"] not in real_ids
        assert not any(w in b["dialogue_id"] for w in words if not re.fullmatch(r"[0-9a-f]+", w))
        assert set(b) == {"dialogue_id", "turns", "num_system_turns"}
    assert [b["dialogue_id"] for b in blind] == sorted(b["dialogue_id"] for b in blind)
    # gold matches blind; the metric track's dialogues are not blind dialogues (tracks are disjoint)
    assert {g["dialogue_id"] for g in gold["task3"]} == {b["dialogue_id"] for b in blind}
    ids = {b["dialogue_id"] for b in blind}
    assert not any(p["reference_id"] in ids or p["candidate_id"] in ids for p in pairs)
    assert {g["pair_id"] for g in gold["task2"]} == {p["pair_id"] for p in pairs}
    assert set(Counter(g["subset"] for g in gold["task3"])) <= {"public", "private"}
    # a metric unit's pairs share their reference and their subset
    ref_of = {p["pair_id"]: p["reference_id"] for p in pairs}
    by_unit = {}
    for g in gold["task2"]:
        by_unit.setdefault(g["unit_id"], set()).add((ref_of[g["pair_id"]], g["subset"]))
    assert all(len(v) == 1 for v in by_unit.values())
    # no blind dialogue and no metric pair occurs in a public config (and no hidden text at all)
    hub = root / "hub"
    assert info["gold_dir"] != str(hub) and not str(info["gold_dir"]).startswith(str(hub) + "/")
    public_bytes = b"".join(
        p.read_bytes() for p in (hub / "data").rglob("*.parquet") if "blind" not in p.parts[-2]
    )
    assert b"hidden " not in public_bytes
    all_public = b"".join(p.read_bytes() for p in hub.rglob("*") if p.is_file())
    gold_lines = (root / "hub-gold" / "task3_gold.jsonl").read_bytes().splitlines()
    for name in (b"task3_gold", b"task2_gold", b"blind_key", *gold_lines):
        assert name not in all_public
    blind_files = b"".join(p.read_bytes() for p in (hub / "data" / "blind").rglob("*.parquet"))
    for w in ("fork_turn", "fork_position", "hallucination_type", "source_id", "weather-", "trivia-"):
        assert w.encode() not in blind_files


def test_blind_key_reproducible(corpus, tmp_path):
    root, _, info = corpus
    key = json.loads((root / "hub-gold" / "blind_key.json").read_text())["key"]
    info2 = export_hub_layout(root / "src", tmp_path / "hub2", hidden=root / "hidden", blind_key=key)
    assert info2["gold_revision"] == info["gold_revision"]
    assert load_blind(tmp_path / "hub2") == load_blind(root / "hub")


def test_export_refuses_bad_destinations(corpus, tmp_path):
    root, _, _ = corpus
    with pytest.raises(ValueError, match="inside the public layout"):
        export_hub_layout(root / "src", tmp_path / "h", gold_dir=tmp_path / "h" / "gold")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("keep me")
    with pytest.raises(FileExistsError, match="overwrite"):
        export_hub_layout(root / "src", tmp_path / "full")
    assert (tmp_path / "full" / "x").read_text() == "keep me"


class _Report:
    """What an export's audit returns (as leaderboard.leakcheck.AuditReport): ok, worst, to_dict, format_text."""

    def __init__(self, ok):
        self.ok = ok

    def worst(self):
        return "pass" if self.ok else "detector: a cheat (FAIL)"

    def to_dict(self):
        return {"ok": self.ok}

    def format_text(self):
        return f"audit ok={self.ok}"


def test_export_runs_the_given_audit_on_the_staged_layout(corpus, tmp_path):
    """The export takes its audit as a callable (dialfork_dataset does not import the leaderboard):
    it sees the staged folders, its report goes into the gold, a failing one publishes nothing."""
    from dialfork_dataset.hub import AUDIT_FILE, AuditFailed

    root, _, _ = corpus
    seen = []

    def audit(ok):
        def run(hub, gold):
            seen.append(
                (
                    hub,
                    gold,
                    sorted(p.name for p in (hub / "data").iterdir()),
                    (gold / "blind_key.json").is_file(),
                )
            )
            return _Report(ok)

        return run

    info = export_hub_layout(
        root / "src", tmp_path / "hub", hidden=root / "hidden", blind_key="5a" * 32, audit=audit(True)
    )
    hub, gold, configs, has_key = seen[0]
    assert hub.parent == tmp_path and hub.name.startswith(".hub.tmp-") and has_key and "blind" in configs
    assert info["audit"] == {"ok": True, "worst": "pass"}
    assert json.loads((tmp_path / "hub-gold" / AUDIT_FILE).read_text()) == {"ok": True}
    with pytest.raises(AuditFailed, match="ok=False"):
        export_hub_layout(
            root / "src", tmp_path / "bad", hidden=root / "hidden", blind_key="5a" * 32, audit=audit(False)
        )
    assert not (tmp_path / "bad").exists() and not (tmp_path / "bad-gold").exists()
    with pytest.raises(TypeError, match="callable"):
        export_hub_layout(root / "src", tmp_path / "old", hidden=root / "hidden", audit=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hub", "hub-gold"]


def test_export_refuses_invalid_records_listing_all(tmp_path):
    recs = make_records(tasks=("weather",), per_task=2)
    recs[1]["fork_turn"] = 99
    recs[5]["turns"] = []
    recs.append(dict(recs[3]))  # duplicate id
    write_jsonl(tmp_path / "src" / "r.jsonl", recs)
    with pytest.raises(ValueError) as ei:
        export_hub_layout(tmp_path / "src", tmp_path / "hub")
    msg = str(ei.value)
    assert "r.jsonl:2:" in msg and "r.jsonl:6:" in msg
    assert not (tmp_path / "hub").exists()


def test_cross_record_checks(tmp_path):
    recs = make_records(tasks=("weather",), per_task=1)
    orphan = [r for r in recs if r["hallucination_type"]]
    with pytest.raises(ValueError, match="is not a conformant record of this corpus"):
        load_records(orphan)
    bad = make_records(tasks=("weather",), per_task=1)
    bad[1]["fork_turn"] = 2  # k=1 must be t_1 = 1
    with pytest.raises(ValueError, match="fork_turn 2 != t_1"):
        load_records(bad)


def test_push_to_hub_with_mocked_client(corpus, tmp_path):
    root, _, _ = corpus
    api = mock.MagicMock()
    push_to_hub(root / "hub", "idiap/dialfork-test", api=api, private=True)
    api.create_repo.assert_called_once_with(
        repo_id="idiap/dialfork-test", repo_type="dataset", private=True, exist_ok=True
    )
    kw = api.upload_folder.call_args.kwargs
    assert kw["repo_id"] == "idiap/dialfork-test" and kw["repo_type"] == "dataset"
    assert kw["folder_path"] == str(root / "hub")
    # a folder holding gold is refused
    leak = tmp_path / "leak"
    (leak / "data").mkdir(parents=True)
    (leak / "README.md").write_text("x")
    (leak / "data" / "task3_gold.jsonl").write_text("{}")
    with pytest.raises(ValueError, match="gold"):
        push_to_hub(leak, "x/y", api=mock.MagicMock())


def test_views(corpus):
    from datasets import load_dataset

    root, recs, _ = corpus
    dd = load_dataset(str(root / "hub"), "task3", cache_dir=str(root / "hf_cache"))
    ex = task3_examples(dd["test"])
    assert len(ex) == len(dd["test"]) and set(ex[0]) >= {
        "dialogue_id",
        "turns",
        "fork_turn",
        "num_system_turns",
    }
    skipped = []
    sets = task1_sets(recs, skipped=skipped)
    n_types = len(taxonomy.names())  # 4 for the paper's types
    # bank_balance has a single conformant dialogue: its units (one per type) are skipped, with a warning each
    assert {t for t, _ in sets} == {"weather", "trivia"} and len(sets) == 2 * n_types
    assert len(skipped) == n_types and all("bank_balance" in s for s in skipped)
    unit = sets[("weather", "GR")]
    assert len(unit["reference"]) == 5 and all(len(unit[k]) == 5 for k in (1, 2, 3, 4))
    quartets = task2_quartets(recs)
    assert len(quartets) == sum(PER_TASK.values()) * n_types
    q = quartets[0]
    assert [q["forks"][k]["fork_position"] for k in (1, 2, 3, 4)] == [1, 2, 3, 4]
    incomplete = [r for r in recs if not (r["hallucination_type"] == "CSC" and r["fork_position"] == 3)]
    sk = []
    assert len(task2_quartets(incomplete, skipped=sk)) == sum(PER_TASK.values()) * (n_types - 1)
    assert len(sk) == sum(PER_TASK.values()) and "missing fork position(s) [3]" in sk[0]
