"""Cached sentence encoders for turn embeddings (SPEC section 7).

Every unique text is encoded once per :class:`Encoder`: texts are de-duplicated, looked up in a
memory cache (and optionally a disk cache keyed by model and text hash), the missing ones are
sorted by length and encoded in batches, and the output is float32 with unit L2 norm. A fork
shares its prefix with its parent, so Task 2 mostly re-reads cached turns.

Turn embeddings carry no speaker prefix (as in sdialog / dialog2flow). The Full-dialog method
encodes the transcript ``"user: ...\\nsystem: ..."`` once (:meth:`Encoder.encode_transcripts`),
truncated by the encoder's ``max_seq_length``.

Modules: :mod:`.names` (aliases, :func:`resolve_encoder_name`), :mod:`.cache` (memory LRU, disk
store), :mod:`.encoder` (:class:`Encoder`, :func:`get_encoder`); every name is re-exported here.
"""

from __future__ import annotations

from .cache import DEFAULT_MEMORY_CACHE_BYTES, EmbeddingLRU
from .encoder import (  # noqa: F401
    PROGRESS_MIN_TEXTS,
    SMALL_JOB_TEXTS,
    SMALL_JOB_THREADS,
    Encoder,
    get_encoder,
    intra_op_threads,
)
from .names import ENCODER_ALIASES, packaged_minilm_path, portable_encoder_id, resolve_encoder_name

__all__ = [
    "DEFAULT_MEMORY_CACHE_BYTES",
    "ENCODER_ALIASES",
    "EmbeddingLRU",
    "Encoder",
    "get_encoder",
    "packaged_minilm_path",
    "portable_encoder_id",
    "resolve_encoder_name",
]
