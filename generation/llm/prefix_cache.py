"""Prefix KV caching across turns for :class:`~generation.backends.hf.TransformersBackend`.

In a role-play each agent's prompt at its next turn is its previous prompt plus its own reply and
the other agent's answer: without a cache every turn pays a prefill of the whole conversation
(the role prompt with its workflow is already ~700 tokens), which dominates generation on a CPU.
The backend keeps, per ``(dialogue key, role)``, the token ids it fed last time and their
key/value tensors; the next request of that agent reuses the longest common token prefix and
prefills only the rest (typically the other agent's new message).

A prompt may also share a prefix with *another* dialogue's entry: a fork's replayed prefix is its
D+'s conversation, token for token, and every dialogue of a task starts with the same role prompt.
So a request whose own entry is missing or shorter is matched against the entries of the same
agent role that start with the same :data:`MIN_REUSE_TOKENS` tokens, and the longest common prefix
wins: a fork's first prompt reuses its D+'s keys and values instead of prefilling ~700 tokens.

This module is the store: :class:`PrefixCache` (lookup by longest common prefix, a byte budget with
least-recently-used eviction) and the pure helper :func:`common_prefix_length`. The batch assembly
(left-padded pasts, masks and positions) is the backend's.

Exactness: a reused key/value tensor was computed in another forward pass (another batch, other
padding) than a full prefill would compute it in, so it differs by floating-point reassociation
only, as batching already does (the module docstring of :mod:`generation.backends.hf`); on CPU in
float32 the replies are the same text (``tests/test_gen_hf.py`` checks cache on vs off).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

MIN_REUSE_TOKENS = 16
"""A shorter common prefix is not worth a padded past: the request is prefilled in full. Entries
are also indexed by their first this many tokens, to find another dialogue's shared prefix."""


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token-id sequences.

    Args:
        a: token ids (a sequence or a 1-d integer array).
        b: token ids.

    Returns:
        The number of leading positions where ``a`` and ``b`` hold the same id.
    """
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(diff[0]) if diff.size else n


@dataclass
class Entry:
    """One agent's cached prefix: the ids fed and, per layer, ``(keys, values)`` of shape
    ``(1, heads, len(ids), head_dim)``.

    Attributes:
        ids: The prompt's token ids (int64) whose keys and values are cached.
        layers: Per layer, the ``(keys, values)`` tensors.
        nbytes: Bytes the tensors take (counted against the cache's ``max_bytes``).
        last_call: The ``generate`` call that last stored or used it (older entries are evicted
            first).
        head: ``(role, first min_reuse token ids)``: the bucket where prompts of other dialogues
            with the same start find it; ``()`` when unset.
    """

    ids: np.ndarray
    layers: list[tuple[Any, Any]]
    nbytes: int
    last_call: int
    head: tuple[str, tuple[int, ...]] = ()


class PrefixCache:
    """Cached key/value prefixes per ``(dialogue key, role)``, within a byte budget.

    Args:
        max_bytes: the most bytes of key/value tensors kept: storing beyond it drops the entries
            least recently used (never those used in the current call), and an entry that still does
            not fit is not stored; 0 disables the cache.
        min_reuse: the shortest common prefix that is reused (default :data:`MIN_REUSE_TOKENS`).

    Raises:
        ValueError: ``max_bytes`` is negative or ``min_reuse`` is below 1.
    """

    def __init__(self, max_bytes: int, min_reuse: int = MIN_REUSE_TOKENS):
        if not isinstance(max_bytes, int) or max_bytes < 0:
            raise ValueError(f"max_bytes must be an integer >= 0, got {max_bytes!r}")
        if not isinstance(min_reuse, int) or min_reuse < 1:
            raise ValueError(f"min_reuse must be an integer >= 1, got {min_reuse!r}")
        self.max_bytes = max_bytes
        self.min_reuse = min_reuse
        self.entries: dict[tuple[str, str], Entry] = {}
        self._by_head: dict[tuple[str, tuple[int, ...]], set[tuple[str, str]]] = {}
        self.nbytes = 0
        self.call = 0
        self.stats = {
            "hits": 0,
            "shared_hits": 0,
            "misses": 0,
            "reused_tokens": 0,
            "stored": 0,
            "not_stored": 0,
            "evicted": 0,
        }
        self._warned = False

    @property
    def enabled(self) -> bool:
        """Whether anything can be cached (``max_bytes > 0``).

        Returns:
            ``True`` unless the budget is 0.
        """
        return self.max_bytes > 0

    def new_call(self) -> None:
        """Start a ``generate`` call (entries used in it are not evicted by its stores)."""
        self.call += 1

    def _drop(self, key: tuple[str, str]) -> None:
        e = self.entries.pop(key)
        self.nbytes -= e.nbytes
        self.stats["evicted"] += 1
        bucket = self._by_head.get(e.head)
        if bucket is not None:
            bucket.discard(key)
            if not bucket:
                del self._by_head[e.head]

    def _head(self, role: str, ids: Sequence[int]) -> tuple[str, tuple[int, ...]]:
        return role, tuple(int(x) for x in ids[: self.min_reuse])

    def lookup(self, key: tuple[str, str], ids: Sequence[int]) -> tuple[int, list[tuple[Any, Any]] | None]:
        """The reusable prefix of a prompt.

        Args:
            key: ``(dialogue key, role)``.
            ids: the prompt's token ids.

        Returns:
            ``(length, layers)``: the number of leading prompt tokens whose keys/values are cached
                (at most ``len(ids) - 1``: the last token is always fed, for its logits), from the
                agent's own entry or, when another entry of the same role shares more, from that
                one; per layer, ``(keys, values)`` cut to that length; ``(0, None)`` on a miss.
        """
        if not self.enabled or len(ids) <= self.min_reuse:
            self.stats["misses"] += 1
            return 0, None
        q = np.asarray(ids, dtype=np.int64)
        best, best_c = None, 0
        own = self.entries.get(key)
        if own is not None:
            best, best_c = own, common_prefix_length(own.ids, q)
        if best_c < len(ids) - 1:
            for k in self._by_head.get(self._head(key[1], ids), ()):
                if k != key:
                    c = common_prefix_length(self.entries[k].ids, q)
                    if c > best_c:
                        best, best_c = self.entries[k], c
        c = min(best_c, len(ids) - 1)
        if best is None or c < self.min_reuse:
            self.stats["misses"] += 1
            return 0, None
        best.last_call = self.call
        self.stats["hits"] += 1
        self.stats["shared_hits"] += best is not own
        self.stats["reused_tokens"] += c
        return c, [(k[:, :, :c, :], v[:, :, :c, :]) for k, v in best.layers]

    def store(self, key: tuple[str, str], ids: Sequence[int], layers: list[tuple[Any, Any]]) -> bool:
        """Keep ``ids`` and their per-layer keys/values for the agent's next request.

        Args:
            key: ``(dialogue key, role)``.
            ids: the token ids that were fed (prompt and reply tokens), as many as the tensors' length.
            layers: per layer, ``(keys, values)`` of shape ``(1, heads, len(ids), head_dim)``.

        Returns:
            Whether it was stored (``False``: the cache is disabled or the budget is full).
        """
        if not self.enabled:
            return False
        nbytes = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in layers)
        if key in self.entries:
            self._drop(key)
            self.stats["evicted"] -= 1  # replaced, not evicted
        if self.nbytes + nbytes > self.max_bytes:
            for old in sorted(
                (k for k, e in self.entries.items() if e.last_call < self.call),
                key=lambda k: self.entries[k].last_call,
            ):
                self._drop(old)
                if self.nbytes + nbytes <= self.max_bytes:
                    break
        if self.nbytes + nbytes > self.max_bytes:
            self.stats["not_stored"] += 1
            if not self._warned:
                self._warned = True
                logger.warning(
                    "prefix cache full (%.0f MiB): some prompts are prefilled in full; raise "
                    "prefix_cache_mb or lower batch_size",
                    self.max_bytes / 2**20,
                )
            return False
        head = self._head(key[1], ids)
        self.entries[key] = Entry(np.asarray(ids, dtype=np.int64), layers, nbytes, self.call, head)
        self._by_head.setdefault(head, set()).add(key)
        self.nbytes += nbytes
        self.stats["stored"] += 1
        return True

    def clear(self) -> None:
        """Drop every entry."""
        self.entries.clear()
        self._by_head.clear()
        self.nbytes = 0


__all__ = ["MIN_REUSE_TOKENS", "Entry", "PrefixCache", "common_prefix_length"]
