"""Two local Hub-layout folders of the same name never share rows (datasets caches a named config of
a local folder under the folder's base name: ``dialfork_dataset.hub.load_layout`` keys the cache by
content)."""

import pyarrow as pa
import pyarrow.parquet as pq

from dialfork_dataset.hub import load_layout, load_split, local_layout_cache_dir

CARD = """---
configs:
- config_name: conformant
  data_files:
  - split: train
    path: data/conformant/train-*.parquet
---
# a minimal layout
"""


def _layout(root, ids):
    (root / "data" / "conformant").mkdir(parents=True)
    (root / "README.md").write_text(CARD)
    pq.write_table(
        pa.table({"dialogue_id": ids}), root / "data" / "conformant" / "train-00000-of-00001.parquet"
    )
    return root


def test_same_named_folders_read_their_own_rows(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    import datasets.config

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")
    a = _layout(tmp_path / "a" / "hub", ["a1", "a2", "a3"])
    b = _layout(tmp_path / "b" / "hub", ["b1"])
    assert local_layout_cache_dir(a) != local_layout_cache_dir(b)
    assert load_split(a, "conformant", split="train")["dialogue_id"] == ["a1", "a2", "a3"]
    assert load_split(b, "conformant", split="train")["dialogue_id"] == ["b1"]
    # a rewritten file is a new cache entry, an unchanged folder the same one
    key = local_layout_cache_dir(b)
    assert local_layout_cache_dir(b) == key
    pq.write_table(
        pa.table({"dialogue_id": ["b1", "b2"]}), b / "data" / "conformant" / "train-00000-of-00001.parquet"
    )
    assert local_layout_cache_dir(b) != key
    assert load_layout(b, "conformant", split="train")["dialogue_id"] == ["b1", "b2"]
