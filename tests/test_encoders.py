"""Encoder: alias resolution (no download), de-duplication, caches, packaged MiniLM (offline)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from dialfork_metrics import ENCODER_ALIASES, Encoder, resolve_encoder_name
from dialfork_metrics.encoders import get_encoder, packaged_minilm_path

PAPER_IDS = {
    "D2F": "sergioburdisso/dialog2flow-joint-bert-base",
    "SBERT": "sentence-transformers/all-mpnet-base-v2",
    "LaBSE": "sentence-transformers/LaBSE",
    "BGE-M3": "BAAI/bge-m3",
    "Qwen3-Embedding": "Qwen/Qwen3-Embedding-0.6B",
    "EmbeddingGemma": "google/embeddinggemma-300m",
    "DSE": "aws-ai/dse-bert-base",
}

TEXTS = [
    "Hello, I would like to book an apartment viewing.",
    "What is your name?",
    "Mark.",
    "Which apartment would you like to see?",
    "What is your name?",
    "Mark.",
]


@pytest.fixture(scope="module")
def minilm() -> Encoder:
    """The packaged MiniLM, loaded once for the module (shared with the dialogue-level API)."""
    enc = get_encoder("minilm")
    enc.model  # noqa: B018 - load now
    return enc


def fresh(minilm: Encoder, **kw) -> Encoder:
    """A new encoder (empty caches) sharing the already loaded model."""
    return Encoder(minilm.name, model=minilm.model, **kw)


# ------------------------------------------------------------------ names
@pytest.mark.parametrize("alias,hub_id", sorted(PAPER_IDS.items()))
def test_paper_aliases_resolve_to_hub_ids(alias, hub_id):
    assert resolve_encoder_name(alias) == hub_id
    assert resolve_encoder_name(alias.lower()) == hub_id
    assert resolve_encoder_name(alias.upper().replace("-", "_")) == hub_id


def test_alias_table_has_the_seven_paper_encoders_and_minilm():
    assert set(ENCODER_ALIASES.values()) >= set(PAPER_IDS.values())
    assert "minilm" in ENCODER_ALIASES and len(ENCODER_ALIASES) == 8


def test_minilm_is_the_packaged_folder():
    path = resolve_encoder_name("minilm")
    assert path == packaged_minilm_path() == resolve_encoder_name("MiniLM")
    assert (Path(path) / "config.json").is_file() and (Path(path) / "model.safetensors").is_file()


def test_paths_and_hub_ids_pass_through(tmp_path):
    assert resolve_encoder_name(str(tmp_path)) == str(tmp_path.resolve())
    assert resolve_encoder_name("org/some-model_v1.5") == "org/some-model_v1.5"


@pytest.mark.parametrize("bad", ["nope", "", "   ", "a/b/c", None, 3])
def test_unknown_encoder_name_lists_aliases(bad):
    with pytest.raises(
        ValueError, match="minilm, d2f, sbert, labse, bge-m3, qwen3-embedding, embeddinggemma, dse"
    ):
        resolve_encoder_name(bad)
    with pytest.raises(ValueError):
        Encoder(bad)


def test_bad_options():
    with pytest.raises(ValueError, match="batch_size"):
        Encoder("minilm", batch_size=0)
    with pytest.raises(ValueError, match="max_seq_length"):
        Encoder("minilm", max_seq_length=-1)


# ------------------------------------------------------------------ encoding (packaged MiniLM)
def test_encode_unit_float32_and_matches_the_model(minilm):
    enc = fresh(minilm)
    E = enc.encode(TEXTS)
    assert E.dtype == np.float32 and E.shape == (6, 384) and enc.dim == 384
    np.testing.assert_allclose(np.linalg.norm(E, axis=1), 1.0, atol=1e-6)
    direct = minilm.model.encode(TEXTS, convert_to_numpy=True)
    direct = direct / np.linalg.norm(direct, axis=1, keepdims=True)
    np.testing.assert_allclose(E, direct, atol=1e-5)
    # duplicates map to the same row; input order is kept
    np.testing.assert_array_equal(E[1], E[4])
    np.testing.assert_array_equal(E[2], E[5])


def test_each_unique_text_is_encoded_once(minilm):
    enc = fresh(minilm)
    enc.encode(TEXTS)
    assert enc.stats["encoded"] == 4 and len(enc) == 4
    again = enc.encode(list(reversed(TEXTS)) + ["A new sentence."])
    assert enc.stats["encoded"] == 5  # only the new text
    np.testing.assert_array_equal(again[0], enc.encode([TEXTS[-1]])[0])


def test_encode_dialogues_one_pass_and_transcripts(minilm):
    enc = fresh(minilm)
    d1 = TEXTS[:3]
    d2 = [{"speaker": "user", "text": TEXTS[0]}, {"speaker": "system", "text": TEXTS[3]}]
    record = {"dialogue_id": "x-1", "turns": d2}
    out = enc.encode_dialogues([d1, d2, record])
    assert [e.shape[0] for e in out] == [3, 2, 2]
    assert enc.stats["encoded"] == 4
    np.testing.assert_array_equal(out[0], enc.encode(d1))
    np.testing.assert_array_equal(out[1], out[2])
    T = enc.encode_transcripts([d1, record])
    expected = enc.encode([f"user: {TEXTS[0]}\nsystem: {TEXTS[1]}\nuser: {TEXTS[2]}"])
    np.testing.assert_array_equal(T[0], expected[0])


def test_bad_texts(minilm):
    enc = fresh(minilm)
    with pytest.raises(ValueError, match="text 1 must be a string, got int"):
        enc.encode(["ok", 3])
    with pytest.raises(ValueError, match="text 0 is empty"):
        enc.encode(["  "])
    with pytest.raises(ValueError, match="sequence of strings"):
        enc.encode("not a list")
    with pytest.raises(ValueError, match=r"dialogue 1 \('bad'\): turn 0 is empty"):
        enc.encode_dialogues([["fine"], {"dialogue_id": "bad", "turns": [""]}])
    with pytest.raises(ValueError, match="dialogue 0: empty dialogue"):
        enc.encode_dialogues([[]])
    with pytest.raises(ValueError, match="must be a list"):
        enc.encode_dialogues("text")
    assert enc.encode([]).shape == (0, 384)


def test_disk_cache_roundtrip(minilm, tmp_path, caplog):
    a = fresh(minilm, cache_dir=tmp_path, show_progress=True)
    Ea = a.encode(TEXTS)
    shards = list(tmp_path.rglob("*.npz"))
    assert len(shards) == 1 and not list(tmp_path.rglob(".tmp-*"))  # atomic: no temporary left
    b = fresh(minilm, cache_dir=tmp_path)
    Eb = b.encode(TEXTS)
    assert b.stats["disk_hits"] == 4 and b.stats["encoded"] == 0
    np.testing.assert_array_equal(Ea, Eb)
    # another model key -> another folder, no hits
    c = Encoder("other/model", model=minilm.model, cache_dir=tmp_path)
    c.encode(TEXTS[:1])
    assert c.stats["disk_hits"] == 0 and len({p.parent for p in tmp_path.rglob("*.npz")}) == 2
    # a damaged shard is skipped with a warning, never a crash
    (shards[0].parent / "zz-damaged.npz").write_bytes(b"garbage")
    d = fresh(minilm, cache_dir=tmp_path)
    with caplog.at_level(logging.WARNING, logger="dialfork_metrics.encoders"):
        Ed = d.encode(TEXTS)
    assert "unreadable shard" in caplog.text and d.stats["disk_hits"] == 4
    np.testing.assert_array_equal(Ed, Ea)


def test_the_environment_names_a_shared_disk_cache(minilm, tmp_path, monkeypatch):
    """$DIALFORK_EMBEDDING_CACHE: encoders built without cache_dir share one disk cache (make demo's
    commands reuse each other's embeddings); an explicit cache_dir still wins."""
    monkeypatch.setenv("DIALFORK_EMBEDDING_CACHE", str(tmp_path / "env"))
    a = fresh(minilm)
    Ea = a.encode(TEXTS)
    assert a.cache_dir == str(tmp_path / "env") and list((tmp_path / "env").rglob("*.npz"))
    b = fresh(minilm)
    np.testing.assert_array_equal(b.encode(TEXTS), Ea)
    assert b.stats["disk_hits"] == 4 and b.stats["encoded"] == 0
    c = fresh(minilm, cache_dir=tmp_path / "own")
    c.encode(TEXTS[:1])
    assert c.stats["disk_hits"] == 0 and list((tmp_path / "own").rglob("*.npz"))
    monkeypatch.setenv("DIALFORK_EMBEDDING_CACHE", "")
    assert fresh(minilm).cache_dir is None


def test_get_encoder_shares_instances(minilm):
    assert get_encoder("minilm") is minilm
    assert get_encoder("MiniLM") is minilm
    assert get_encoder(minilm) is minilm


def test_disk_cache_compacts_many_shards(tmp_path):
    from dialfork_metrics.encoders.cache import _DiskCache, _text_key

    rows = np.eye(4, dtype=np.float32)
    for i in range(4):  # four writers, four shards
        _DiskCache(tmp_path, "m|x").put([_text_key(f"t{i}")], rows[i : i + 1])
    assert len(list(tmp_path.rglob("*.npz"))) == 4
    cache = _DiskCache(tmp_path, "m|x", max_shards=2)
    got = cache.get([_text_key(f"t{i}") for i in range(4)] + [_text_key("missing")])
    assert len(got) == 4 and len(list(tmp_path.rglob("*.npz"))) == 1  # merged into one shard
    np.testing.assert_array_equal(got[_text_key("t2")], rows[2])


def test_transcript_truncation_is_reported(minilm, caplog):
    enc = fresh(minilm)
    long_dialogue = [
        f"This is a rather long turn number {i} about booking a doctor appointment." for i in range(60)
    ]
    with caplog.at_level(logging.WARNING, logger="dialfork_metrics.encoders"):
        enc.encode_transcripts([long_dialogue, TEXTS[:2]])
    assert enc.stats["truncated"] == 1 and "1 of 2 transcripts exceed" in caplog.text


# ------------------------------------------------------------------ bounded memory (LRU)
class _HashModel:
    """A deterministic stand-in for a sentence-transformers model: each text's embedding is a
    fixed function of its bytes (so a recomputed text gives the same row bit for bit)."""

    def __init__(self, dim: int = 16):
        self.dim = dim
        self.calls = 0

    def get_sentence_embedding_dimension(self) -> int:
        return self.dim

    def encode(self, texts, **kw):
        self.calls += 1
        import hashlib

        seeds = [int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "little") for t in texts]
        return np.stack([np.random.default_rng(s).normal(size=self.dim) for s in seeds]).astype(np.float32)


def test_lru_keeps_the_cache_at_its_cap_with_unchanged_results():
    from dialfork_metrics.encoders import EmbeddingLRU

    texts = [f"generation {i}: the assistant offers something else" for i in range(10_000)]
    unbounded = Encoder("hash", model=_HashModel())
    expected = np.concatenate([unbounded.encode(texts[s : s + 500]) for s in range(0, 10_000, 500)])
    assert len(unbounded) == 10_000
    cap = 64 * 1024  # 64 KiB: a few hundred 16-d rows with their texts
    enc = Encoder("hash", model=_HashModel(), memory_cache_bytes=cap)
    sizes = []
    for s in range(0, 10_000, 500):  # a training loop scoring 500 new generations per step
        np.testing.assert_array_equal(enc.encode(texts[s : s + 500]), expected[s : s + 500])
        sizes.append(enc.memory_cache_bytes)
    assert max(sizes) <= cap and sizes[-1] > cap * 0.9  # full, never over
    assert enc._memory._slab.nbytes <= cap  # the slab itself stays within the bound
    assert 0 < len(enc) < 10_000 and enc.stats["evicted"] == 10_000 - len(enc)
    # the most recent texts are cached, the oldest were evicted and are recomputed identically
    encoded = enc.stats["encoded"]
    np.testing.assert_array_equal(enc.encode(texts[-5:]), expected[-5:])
    assert enc.stats["encoded"] == encoded
    np.testing.assert_array_equal(
        enc.encode(texts[:5] + texts[-1:]), np.concatenate([expected[:5], expected[-1:]])
    )
    assert enc.stats["encoded"] == encoded + 5
    # one job larger than the cap: the result is still complete and correct
    big = Encoder("hash", model=_HashModel(), memory_cache_bytes=cap)
    np.testing.assert_array_equal(big.encode(texts + texts[:3]), np.concatenate([expected, expected[:3]]))
    assert big.memory_cache_bytes <= cap
    # a recently used entry survives eviction (LRU, not FIFO)
    lru = EmbeddingLRU(3 * (4 * 2) + 3 * 60)
    rows = np.eye(2, dtype=np.float32)
    lru.put(["a", "b"], rows)
    lru.get(["a"])
    lru.put(["c", "d"], rows)
    assert "a" in lru and "b" not in lru and "d" in lru and lru.nbytes <= lru.max_bytes
    with pytest.raises(ValueError, match="memory cache size"):
        EmbeddingLRU(-1)


def test_memory_cache_can_be_off_and_defaults_to_one_gib(minilm):
    from dialfork_metrics.encoders import DEFAULT_MEMORY_CACHE_BYTES

    assert DEFAULT_MEMORY_CACHE_BYTES <= 1 << 30 and minilm._memory.max_bytes == DEFAULT_MEMORY_CACHE_BYTES
    off = Encoder("hash", model=_HashModel(), memory_cache_bytes=0)
    a = off.encode(["x", "y", "x"])
    assert len(off) == 0 and off.stats["encoded"] == 2
    np.testing.assert_array_equal(off.encode(["x"])[0], a[0])
    assert off.stats["encoded"] == 3  # recomputed: nothing is kept


def test_get_encoder_is_the_one_resolver():
    """Every caller (bench, task3 CLI, pair encoders, FlowGraph, Task 2) resolves through get_encoder:
    an object that encodes is returned as is, a name gives a shared or (shared=False) a fresh Encoder."""

    class Fake:
        def encode(self, texts):
            return np.ones((len(texts), 2), dtype=np.float32)

    fake = Fake()
    assert get_encoder(fake) is fake
    with pytest.raises(ValueError, match="object with .encode"):
        get_encoder(3.5)
    with pytest.raises(ValueError, match="unknown Encoder option"):
        get_encoder("minilm", shared=False, colour="red")
    fresh = get_encoder("minilm", shared=False, batch_size=8)
    assert isinstance(fresh, Encoder) and fresh is not get_encoder("minilm", shared=False, batch_size=8)
    assert fresh.batch_size == 8
    from dialfork_metrics.pair_encoder import as_encoder

    assert as_encoder(fake) is fake and isinstance(as_encoder("minilm"), Encoder)
