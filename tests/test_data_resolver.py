"""dialfork_dataset.hub.resolve_data: what a --data-like argument names (issue 31)."""

from __future__ import annotations

import pytest

from corpus_factory import make_records
from dialfork_dataset import write_jsonl
from dialfork_dataset.hub import DataNotFoundError, DataSourceError, load_split, resolve_data
from dialfork_dataset.hub.resolve import looks_like_hub_id


@pytest.fixture
def folders(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out" / "hub" / "data").mkdir(parents=True)
    (tmp_path / "out" / "hub" / "README.md").write_text("---\n---\n")
    write_jsonl(
        tmp_path / "out" / "corpus" / "r.jsonl", make_records(tasks=("weather",), per_task=1, T=4)[:1]
    )
    (tmp_path / "out" / "hub-gold").mkdir()
    (tmp_path / "out" / "hub-gold" / "task3_gold.jsonl").write_text("")
    (tmp_path / "out" / "hub-gold" / "gold_manifest.json").write_text("{}")
    (tmp_path / "out" / "notes").mkdir()
    (tmp_path / "out" / "notes" / "a.txt").write_text("x")
    return tmp_path


def test_kinds(folders):
    assert resolve_data("out/hub").kind == "layout"
    assert resolve_data("out/corpus").kind == "corpus"
    assert resolve_data("out/corpus/r.jsonl").kind == "corpus"
    assert resolve_data("out/hub-gold", accept=("gold",)).kind == "gold"
    assert resolve_data("out/hub-gold/task3_gold.jsonl", accept=("gold",)).kind == "gold"
    src = resolve_data(folders / "out" / "hub", accept=("layout",))
    assert src.is_local and src.path == folders / "out" / "hub"


def test_missing_folders(folders, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DataNotFoundError) as e:
        resolve_data("out/hbu", option="--data")
    assert str(e.value) == (
        "--data out/hbu: no such folder (did you mean out/hub?); read as a Hub dataset id it "
        "cannot be loaded either: the Hub is offline (HF_HUB_OFFLINE=1) and no copy of it is cached"
    )
    assert isinstance(e.value, FileNotFoundError) and isinstance(e.value, ValueError)
    with pytest.raises(DataNotFoundError, match=r"^out/a/b: no such folder or file; give "):
        resolve_data("out/a/b")
    with pytest.raises(
        DataNotFoundError, match=r"^org/name: no local folder of that name, and as a Hub dataset id"
    ):
        resolve_data("org/name")
    with pytest.raises(DataNotFoundError, match="empty"):
        resolve_data(" ")
    # a Hub id is not what a layout-only command takes
    with pytest.raises(DataNotFoundError, match=r"no such folder or file \(did you mean out/hub\?\)"):
        resolve_data("out/hbu", accept=("layout",))


def test_hub_ids_when_online_or_cached(folders, monkeypatch, tmp_path):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    assert resolve_data("idiap/dialfork").kind == "hub"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hubcache"))
    (tmp_path / "hubcache" / "datasets--idiap--dialfork").mkdir(parents=True)
    assert resolve_data("idiap/dialfork").kind == "hub"  # offline, but cached: datasets reads it
    assert (
        looks_like_hub_id("idiap/dialfork")
        and not looks_like_hub_id("./x/y")
        and not looks_like_hub_id("a/b/c")
    )
    assert not looks_like_hub_id("out/x.jsonl")


def test_wrong_kinds(folders):
    with pytest.raises(
        DataSourceError,
        match=r"^--data out/hub-gold is a gold folder \(labels and keys: "
        r"gold_manifest.json, task3_gold.jsonl\), not the dialogues: give the "
        r"public Hub layout \(out/hub here\)",
    ):
        resolve_data("out/hub-gold", option="--data")
    with pytest.raises(
        DataSourceError,
        match=r"out/hub is a public Hub layout, not a gold folder: give the gold "
        r"folder \(.*hub-gold here\)",
    ):
        resolve_data("out/hub", accept=("gold",))
    with pytest.raises(
        DataSourceError,
        match=r"out/corpus is a generator output folder, not a Hub layout: export it "
        r"first \(python -m dialfork_dataset export out/corpus DEST\)",
    ):
        resolve_data("out/corpus", accept=("layout", "hub"))
    with pytest.raises(
        DataSourceError, match=r"out/notes: not a DialFork corpus \(no data/ folder, no \*.jsonl"
    ):
        resolve_data("out/notes")
    with pytest.raises(ValueError, match="accept must name kinds"):
        resolve_data("out/hub", accept=("nope",))


def test_load_split_says_no_such_folder(folders, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(FileNotFoundError, match="no such folder"):
        load_split("out/hbu", "task3")
    with pytest.raises(ValueError, match="is a gold folder"):
        load_split("out/hub-gold", "task3")
