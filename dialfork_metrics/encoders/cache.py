"""Embedding caches of an encoder: a byte-bounded in-memory LRU and an append-only disk store."""

from __future__ import annotations

import hashlib
import logging
import os
import re
import sys
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dialfork_dataset.atomic import atomic_path

logger = logging.getLogger("dialfork_metrics.encoders")


def _text_key(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


#: Default bound of an :class:`Encoder`'s (and a ``PairEncoder``'s) in-memory embedding cache.
DEFAULT_MEMORY_CACHE_BYTES = 1 << 30


def _key_nbytes(key: Any) -> int:
    """Memory held by a cache key: a text, or a tuple of texts (a turn pair)."""
    if isinstance(key, tuple):
        return sys.getsizeof(key) + sum(sys.getsizeof(k) for k in key)
    return sys.getsizeof(key)


class EmbeddingLRU:
    """In-memory least-recently-used cache of embedding rows, bounded in bytes.

    Rows live in one preallocated float32 slab (a gather is one fancy index); ``nbytes`` counts
    the rows in use plus the keys (``sys.getsizeof``), and the least recently used entries are
    evicted to keep it at or below ``max_bytes``. The slab grows by doubling up to
    ``max_bytes // row_bytes`` rows, so it never holds more than ``max_bytes`` either.
    ``max_bytes=0`` disables the cache.

    Args:
        max_bytes: Most bytes held (rows plus keys), a non-negative int; 0 disables the cache.
            Default: :data:`DEFAULT_MEMORY_CACHE_BYTES` (1 GiB).

    Raises:
        ValueError: ``max_bytes`` is not a non-negative int (bools rejected).
    """

    def __init__(self, max_bytes: int = DEFAULT_MEMORY_CACHE_BYTES):
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
            raise ValueError(f"memory cache size must be a non-negative number of bytes, got {max_bytes!r}")
        self.max_bytes = max_bytes
        self._slots: OrderedDict[Any, int] = OrderedDict()  # key -> slab row, oldest first
        self._slab = np.zeros((0, 0), dtype=np.float32)
        self._free: list[int] = []
        self._key_bytes = 0
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._slots)

    def __contains__(self, key: Any) -> bool:
        return key in self._slots

    @property
    def dim(self) -> int | None:
        """The embedding dimension of the cached rows; None before the first :meth:`put`."""
        return int(self._slab.shape[1]) if self._slab.shape[1] else None

    @property
    def nbytes(self) -> int:
        """Bytes held: the rows in use (``len(self) * row bytes``) plus the keys."""
        return len(self._slots) * self._slab.shape[1] * 4 + self._key_bytes

    def lookup(self, keys: Sequence[Any]) -> np.ndarray:
        """Slab rows of ``keys`` (``int64``, ``-1`` for a miss); hits become the most recently
        used. Read the rows with :meth:`take` before the next :meth:`put`.

        Args:
            keys: The keys to look up (any hashables).

        Returns:
            One slab row index per key, shape ``(len(keys),)``, dtype ``int64``; ``-1`` for a miss.
        """
        get, touch = self._slots.get, self._slots.move_to_end
        slots = np.fromiter((get(k, -1) for k in keys), dtype=np.int64, count=len(keys))
        for k, s in zip(keys, slots.tolist()):
            if s >= 0:
                touch(k)
        return slots

    def take(self, slots: np.ndarray) -> np.ndarray:
        """The rows at ``slots`` (from :meth:`lookup`), copied.

        Args:
            slots: Slab row indices (no ``-1``), as returned by :meth:`lookup`.

        Returns:
            The rows, shape ``(len(slots), dim)``, float32.
        """
        return self._slab[slots]

    def get(self, keys: Sequence[Any]) -> tuple[np.ndarray, np.ndarray | None]:
        """``(hit mask (len(keys),), rows of the hits (n_hits, dim) or None)``; hits become the
        most recently used.

        Args:
            keys: The keys to look up.

        Returns:
            ``(hit, rows)``: a boolean mask of shape ``(len(keys),)`` and the rows of the hits in
            key order, shape ``(n_hits, dim)`` float32, or None when nothing hit.
        """
        slots = self.lookup(keys)
        hit = slots >= 0
        return hit, (self._slab[slots[hit]] if hit.any() else None)

    def put(self, keys: Sequence[Any], rows: np.ndarray) -> None:
        """Insert (or refresh) ``keys`` with ``rows``, evicting the least recently used entries.

        When more new rows are given than the cache can hold, only the last ones are kept; an
        entry larger than ``max_bytes`` on its own is skipped. Does nothing when the cache is
        disabled.

        Args:
            keys: One key per row.
            rows: The embeddings, shape ``(len(keys), dim)`` (stored as float32).

        Raises:
            ValueError: ``dim`` differs from that of the rows already cached.
        """
        if not len(keys) or self.max_bytes == 0:
            return
        rows = np.asarray(rows, dtype=np.float32)
        d = rows.shape[1]
        if self._slab.shape[1] != d:
            if self._slots:
                raise ValueError(f"embedding dimension {d} differs from the cached {self._slab.shape[1]}")
            self._slab = np.zeros((0, d), dtype=np.float32)
            self._free = []
        row_bytes = 4 * d
        max_rows = self.max_bytes // row_bytes
        if max_rows == 0:
            return
        start = max(0, len(keys) - max_rows)  # more new rows than fit: keep the last ones
        for k, row in zip(keys[start:], rows[start:]):
            s = self._slots.get(k)
            if s is not None:  # already cached (a duplicate key): refresh
                self._slots.move_to_end(k)
                self._slab[s] = row
                continue
            kb = _key_nbytes(k)
            if row_bytes + kb > self.max_bytes:
                continue
            while self._slots and self.nbytes + row_bytes + kb > self.max_bytes:
                self._evict_one()
            if not self._free:
                self._grow(max_rows)
            s = self._free.pop()
            self._slab[s] = row
            self._slots[k] = s
            self._key_bytes += kb

    def _evict_one(self) -> None:
        k, s = self._slots.popitem(last=False)
        self._key_bytes -= _key_nbytes(k)
        self._free.append(s)
        self.evicted += 1

    def _grow(self, max_rows: int) -> None:
        cap = self._slab.shape[0]
        new = min(max(2 * cap, 1024), max_rows)
        if new <= cap:  # at the row cap: make room (only reached with tiny keys and a full slab)
            self._evict_one()
            return
        grown = np.zeros((new, self._slab.shape[1]), dtype=np.float32)
        grown[:cap] = self._slab
        self._slab = grown
        self._free.extend(range(new - 1, cap - 1, -1))

    def clear(self) -> None:
        """Drop every entry and the slab (the next :meth:`put` may use another dimension)."""
        self._slots.clear()
        self._slab = np.zeros((0, 0), dtype=np.float32)
        self._free = []
        self._key_bytes = 0


class _DiskCache:
    """Append-only embedding store under ``root/<model key>/``: shards ``<uuid>.npz`` holding
    ``keys`` (sha256 of the text, 32 bytes each) and ``emb`` (float32). Each write is a new shard
    written atomically (:mod:`dialfork_dataset.atomic`; concurrent writers never clash); reading
    merges all shards. Past ``max_shards`` shards they are compacted into one."""

    def __init__(self, root: str | os.PathLike, model_key: str, max_shards: int = 64):
        digest = hashlib.sha256(model_key.encode("utf-8")).hexdigest()[:16]
        slug = re.sub(r"[^A-Za-z0-9._-]+", "_", model_key.split("|", 1)[0])[-60:]
        self.dir = Path(root).expanduser() / f"{slug}-{digest}"
        self.max_shards = max_shards
        self._index: dict[bytes, np.ndarray] | None = None

    def _shards(self) -> list[Path]:
        # a shard being written is a hidden temporary file (dialfork_dataset.atomic): not read
        return (
            sorted(p for p in self.dir.glob("*.npz") if not p.name.startswith("."))
            if self.dir.is_dir()
            else []
        )

    def _load(self) -> dict[bytes, np.ndarray]:
        if self._index is None:
            index: dict[bytes, np.ndarray] = {}
            shards = self._shards()
            for shard in shards:
                try:
                    with np.load(shard) as z:
                        keys, emb = z["keys"], z["emb"]
                except Exception as e:  # a foreign or damaged file: skip it, never crash
                    logger.warning("embedding cache: skipping unreadable shard %s (%s)", shard, e)
                    continue
                for k, row in zip(keys, emb):
                    index[bytes(k)] = row
            self._index = index
            if len(shards) > self.max_shards and index:
                self._compact(shards)
        return self._index

    def _write_shard(self, keys: list[bytes], emb: np.ndarray) -> Path:
        final = self.dir / f"{uuid.uuid4().hex}.npz"
        with atomic_path(final, suffix=".npz") as tmp, open(tmp, "wb") as f:
            np.savez(f, keys=np.array(keys, dtype="S32"), emb=np.ascontiguousarray(emb, dtype=np.float32))
        return final

    def _compact(self, shards: list[Path]) -> None:
        assert self._index is not None
        keys = list(self._index)
        self._write_shard(keys, np.stack([self._index[k] for k in keys]))
        for s in shards:
            s.unlink(missing_ok=True)

    def get(self, keys: list[bytes]) -> dict[bytes, np.ndarray]:
        index = self._load()
        return {k: index[k] for k in keys if k in index}

    def put(self, keys: list[bytes], emb: np.ndarray) -> None:
        if not keys:
            return
        self._write_shard(keys, emb)
        index = self._load()
        for k, row in zip(keys, emb):
            index[k] = row
