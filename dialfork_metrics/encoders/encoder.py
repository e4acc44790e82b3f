"""The :class:`Encoder` (de-duplicating, cached, L2-normalised sentence embeddings) and
:func:`get_encoder`, the one function that turns an encoder name or object into an encoder."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from .cache import DEFAULT_MEMORY_CACHE_BYTES, EmbeddingLRU, _DiskCache, _text_key
from .names import resolve_encoder_name

logger = logging.getLogger("dialfork_metrics.encoders")


#: Jobs with more texts to encode than this show a tqdm progress bar (unless show_progress=False).
PROGRESS_MIN_TEXTS = 2048

#: A call with at most this many texts new to the caches is a small job (a live turn, a request's few
#: turns): on the CPU it runs with :attr:`Encoder.small_job_threads` intra-op threads.
SMALL_JOB_TEXTS = 8

#: Default of :attr:`Encoder.small_job_threads`: one intra-op thread per small job. One MiniLM turn
#: gains little from a second thread on an idle machine, and when another process keeps a core busy,
#: torch's threads wait for each other at every operator (issue 46: p95 760 ms per turn with the
#: default 2 threads on 2 cores, 21 ms with 1; docs/guard.md, "Latency").
SMALL_JOB_THREADS = 1


@contextmanager
def intra_op_threads(n: int | None) -> Iterator[None]:
    """Run the block with at most ``n`` torch intra-op threads, then restore the previous count.

    ``torch.set_num_threads`` is process-wide in name, but torch and OpenMP keep the count per
    thread (a thread reads the process setting when it first runs an operator): the block changes
    the calling thread's count, and threads that start running torch operators while it runs begin
    with ``n``. The count is never raised: with ``n`` at or above the current count nothing changes.

    Args:
        n: The most intra-op threads; None: leave the count as it is.

    Yields:
        Nothing; the block runs with ``min(n, current)`` threads.

    Raises:
        ValueError: ``n`` is not None or a positive integer.
    """
    if n is None:
        yield
        return
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"thread count must be a positive integer or None, got {n!r}")
    import torch

    prev = torch.get_num_threads()
    if prev <= n:
        yield
        return
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(prev)


def _validate_texts(texts: Any, what: str = "text") -> list[str]:
    if isinstance(texts, str) or not isinstance(texts, Sequence | np.ndarray):
        raise ValueError(f"expected a sequence of strings, got {type(texts).__name__}")
    out = list(texts)
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise ValueError(f"{what} {i} must be a string, got {type(t).__name__}")
        if not t.strip():
            raise ValueError(f"{what} {i} is empty")
    return out


#: environment variable naming a persistent embedding cache folder for encoders built without one
EMBEDDING_CACHE_ENV = "DIALFORK_EMBEDDING_CACHE"


class Encoder:
    """A sentence-transformers encoder with de-duplication and caching.

    Args:
        name_or_path: an alias of :data:`ENCODER_ALIASES` (default ``"minilm"``, the packaged
            all-MiniLM-L6-v2, offline), a local sentence-transformers folder or a Hub id.
        device: torch device (``None``: sentence-transformers' choice, GPU when available).
        batch_size: texts per forward pass.
        cache_dir: optional folder for a persistent embedding cache keyed by (model, text hash);
            ``None``: the folder in ``$DIALFORK_EMBEDDING_CACHE`` when it is set (so that the
            commands of one pipeline, e.g. ``make demo``'s, share their embeddings), else the
            cache stays in memory only.
        show_progress: ``True``/``False`` to force the progress bar on/off; ``None`` shows it for
            jobs of more than :data:`PROGRESS_MIN_TEXTS` new texts.
        max_seq_length: override the model's truncation length (tokens); part of the cache key.
        prompt_name: a prompt of the model's configuration to prepend (e.g. for instruction
            models); ``None`` (default) encodes the raw text. Part of the cache key.
        model: an already loaded ``SentenceTransformer`` to use instead of loading
            ``name_or_path`` (e.g. to share one model between encoders); ``name_or_path`` then
            only names it (cache key).
        memory_cache_bytes: bound of the in-memory embedding cache, an LRU (default
            :data:`DEFAULT_MEMORY_CACHE_BYTES`, 1 GiB: about 650,000 MiniLM turns of 100
            characters); ``0`` turns it off. A training loop that scores new generations every
            step stays within it.
        runtime: ``"torch"`` (default), ``"onnx"`` (the transformer exported to ONNX fp32 and run
            by onnxruntime: equal values; about as fast as torch on an idle CPU, faster under CPU
            contention) or ``"onnx-int8"`` (dynamically quantised, opt-in, values drift); see
            :mod:`dialfork_metrics.runtimes`.
        dtype: ``None`` (the model's fp32) or, on CUDA with the torch runtime, ``"bf16"``/``"fp16"``.
        small_job_threads: torch intra-op threads for a small job, a call with at most
            :data:`SMALL_JOB_TEXTS` texts new to the caches, on the CPU with the torch runtime
            (default :data:`SMALL_JOB_THREADS`, 1: a live turn's latency then holds when other
            processes keep cores busy); never more than torch's current count. ``None``: torch's
            setting for every job. Larger jobs always use torch's setting (``torch.set_num_threads``,
            ``OMP_NUM_THREADS``). The thread count can change an embedding's last bits (about 1e-7,
            as a batch's padding does); with a fixed count, a turn encoded alone gets the same bits
            on machines with different numbers of cores. Not part of the disk-cache key.
    """

    def __init__(
        self,
        name_or_path: str = "minilm",
        device: str | None = None,
        batch_size: int = 64,
        cache_dir: str | os.PathLike | None = None,
        show_progress: bool | None = None,
        max_seq_length: int | None = None,
        prompt_name: str | None = None,
        model: Any = None,
        memory_cache_bytes: int = DEFAULT_MEMORY_CACHE_BYTES,
        runtime: str = "torch",
        dtype: str | None = None,
        small_job_threads: int | None = SMALL_JOB_THREADS,
    ):
        from ..runtimes import cache_key_suffix, check_dtype, check_runtime

        self.runtime = check_runtime(runtime)
        self.dtype = check_dtype(dtype, runtime, device)
        if model is None:
            self.name = resolve_encoder_name(name_or_path)
        else:
            if not isinstance(name_or_path, str) or not name_or_path.strip():
                raise ValueError("name_or_path must name the given model (a non-empty string)")
            self.name = name_or_path
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        if max_seq_length is not None and (not isinstance(max_seq_length, int) or max_seq_length < 1):
            raise ValueError(f"max_seq_length must be a positive integer or None, got {max_seq_length!r}")
        if small_job_threads is not None and (
            isinstance(small_job_threads, bool)
            or not isinstance(small_job_threads, int)
            or small_job_threads < 1
        ):
            raise ValueError(
                f"small_job_threads must be a positive integer or None, got {small_job_threads!r}"
            )
        self.small_job_threads = small_job_threads
        self.alias = name_or_path
        self.device = device
        self.batch_size = batch_size
        self.show_progress = show_progress
        self.max_seq_length = max_seq_length
        self.prompt_name = prompt_name
        if cache_dir is None:
            cache_dir = os.environ.get(EMBEDDING_CACHE_ENV) or None
        self.cache_dir = cache_dir
        self._model = model
        if model is not None and max_seq_length is not None:
            model.max_seq_length = max_seq_length
        if model is not None and self.dtype is not None:
            from ..runtimes import cast_model

            self._model = cast_model(model, self.dtype)
        self._memory = EmbeddingLRU(memory_cache_bytes)  # text -> embedding, bounded in bytes
        self._disk = (
            _DiskCache(
                cache_dir,
                f"{self.name}|msl={max_seq_length}|prompt={prompt_name}"
                + cache_key_suffix(self.runtime, self.dtype),
            )
            if cache_dir is not None
            else None
        )
        self.stats = {
            "requested": 0,
            "unique": 0,
            "memory_hits": 0,
            "disk_hits": 0,
            "encoded": 0,
            "evicted": 0,
        }

    def __repr__(self) -> str:
        return f"Encoder({self.name!r}, cached={len(self._memory)})"

    @property
    def model_id(self) -> str:
        """The encoder's portable id (:func:`~dialfork_metrics.encoders.names.portable_encoder_id`):
        an alias's Hub id (``minilm``: ``sentence-transformers/all-MiniLM-L6-v2``), never the
        absolute path of a packaged or local folder; what results and reports record."""
        from .names import portable_encoder_id

        return portable_encoder_id(self.alias if isinstance(self.alias, str) else self.name, self.name)

    # ------------------------------------------------------------------ model
    @property
    def model(self):
        """The ``SentenceTransformer`` (loaded on first use).

        Raises:
            ValueError: The model cannot be loaded (e.g. a Hub model offline and not cached).
        """
        if self._model is None:
            from sentence_transformers import SentenceTransformer

            logger.info("loading sentence encoder %s", self.name)
            try:
                self._model = SentenceTransformer(self.name, device=self.device)
            except OSError as e:
                raise ValueError(
                    f"could not load encoder {self.name!r} ({e}). Hub models need network access or a "
                    "local copy (HF_HUB_OFFLINE=1 only finds models already in the HF cache); "
                    "'minilm' is packaged and always works offline"
                ) from e
            if self.max_seq_length is not None:
                self._model.max_seq_length = self.max_seq_length
            if self.dtype is not None:
                from ..runtimes import cast_model

                self._model = cast_model(self._model, self.dtype)
        return self._model

    @property
    def dim(self) -> int:
        """Embedding dimension."""
        if self._memory.dim is not None:
            return self._memory.dim
        m = self.model
        get = getattr(m, "get_embedding_dimension", None) or m.get_sentence_embedding_dimension
        return int(get())

    def __len__(self) -> int:
        """Number of texts in the memory cache."""
        return len(self._memory)

    @property
    def memory_cache_bytes(self) -> int:
        """Bytes held by the in-memory cache (rows in use plus texts); at most its bound."""
        return self._memory.nbytes

    # ------------------------------------------------------------------ caching
    def _encode_new(self, texts: list[str]) -> np.ndarray:
        """Encode texts not in any cache: sorted by length, in chunks, with a progress bar."""
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]), reverse=True)
        from dialfork_dataset.console import progress_disabled

        show = self.show_progress if self.show_progress is not None else len(texts) > PROGRESS_MIN_TEXTS
        show = show and not progress_disabled()
        chunk = max(self.batch_size * 16, 1024)
        out: np.ndarray | None = None
        bar = None
        threads = self._job_threads(len(texts))
        if show:
            from tqdm.auto import tqdm

            label = (
                self.alias if isinstance(self.alias, str) and "/" not in self.alias else Path(self.name).name
            )
            bar = tqdm(total=len(texts), desc=f"encoding ({label})", unit="text")
        try:
            for s in range(0, len(order), chunk):
                idx = order[s : s + chunk]
                kwargs: dict[str, Any] = {
                    "batch_size": self.batch_size,
                    "show_progress_bar": False,
                    "convert_to_numpy": True,
                    "normalize_embeddings": False,
                }
                if self.prompt_name is not None:
                    kwargs["prompt_name"] = self.prompt_name
                with intra_op_threads(threads):
                    emb = np.asarray(self._forward([texts[i] for i in idx], kwargs), dtype=np.float32)
                if out is None:
                    out = np.empty((len(texts), emb.shape[1]), dtype=np.float32)
                out[idx] = emb
                if bar is not None:
                    bar.update(len(idx))
        finally:
            if bar is not None:
                bar.close()
        assert out is not None
        return _l2_normalise(out, self.name, texts)

    def _job_threads(self, n_texts: int) -> int | None:
        """The intra-op thread bound for a job of ``n_texts`` new texts (None: torch's setting)."""
        if self.small_job_threads is None or n_texts > SMALL_JOB_TEXTS or self.runtime != "torch":
            return None
        device = getattr(self.model, "device", None)
        if device is not None and getattr(device, "type", str(device)) != "cpu":
            return None
        return self.small_job_threads

    def _forward(self, texts: list[str], kwargs: dict[str, Any]) -> np.ndarray:
        """Sentence embeddings of ``texts`` (not normalised) with the encoder's runtime."""
        if self.runtime == "torch":
            return self.model.encode(texts, **kwargs)
        from ..runtimes import runner_for, st_encode

        return st_encode(
            self.model,
            runner_for(self.model, self.name, self.runtime),
            texts,
            batch_size=self.batch_size,
            prompt_name=self.prompt_name,
        )

    # ------------------------------------------------------------------ public API
    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embeddings of ``texts``, shape ``(len(texts), dim)``, float32, unit L2 norm.

        Each distinct text is encoded at most once per encoder (memory cache, then disk cache).
        Raises ``ValueError`` for a non-string or empty text (with its position).

        Args:
            texts: Non-empty strings.

        Returns:
            The embeddings, shape ``(len(texts), dim)``, float32, one row per text in order
            (``(0, dim)`` for no text).

        Raises:
            ValueError: ``texts`` holds a non-string or empty text, or the model cannot be loaded.
        """
        texts = _validate_texts(texts)
        self.stats["requested"] += len(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        index: dict[str, int] = {}
        inverse = np.fromiter(
            (index.setdefault(t, len(index)) for t in texts), dtype=np.int64, count=len(texts)
        )
        unique = list(index)
        self.stats["unique"] += len(unique)
        slots = self._memory.lookup(unique)
        hit = slots >= 0
        n_hits = int(np.count_nonzero(hit))
        self.stats["memory_hits"] += n_hits
        if n_hits == len(unique):  # one gather straight from the cache
            return self._memory.take(slots[inverse])
        # otherwise the result is assembled here, not read back from the cache: a job larger than
        # the cache bound evicts its own first rows while it inserts the last ones
        rows = self._memory.take(slots[hit]) if n_hits else None
        missing = [t for t, h in zip(unique, hit) if not h]
        new: np.ndarray | None = None  # rows of `missing`, from the disk cache and the model
        todo = list(range(len(missing)))
        if self._disk is not None:
            keys = [_text_key(t) for t in missing]
            found = self._disk.get(keys)
            if found:
                new = np.empty((len(missing), next(iter(found.values())).shape[0]), dtype=np.float32)
                todo = []
                for j, k in enumerate(keys):
                    if k in found:
                        new[j] = found[k]
                    else:
                        todo.append(j)
                self.stats["disk_hits"] += len(missing) - len(todo)
        if todo:
            fresh = self._encode_new([missing[j] for j in todo])
            self.stats["encoded"] += len(todo)
            if self._disk is not None:
                self._disk.put([_text_key(missing[j]) for j in todo], fresh)
            if new is None:
                new = fresh
            else:
                new[np.asarray(todo, dtype=np.int64)] = fresh
        assert new is not None
        out = np.empty((len(unique), new.shape[1]), dtype=np.float32)
        if rows is not None:
            out[hit] = rows
        out[~hit] = new
        self._memory.put(missing, new)
        self.stats["evicted"] = self._memory.evicted
        return out[inverse]

    def encode_dialogues(
        self, dialogues: Sequence[Any], names: Sequence[str] | None = None
    ) -> list[np.ndarray]:
        """Turn embeddings of many dialogues in one encoder pass: one ``(n_turns, dim)`` array each.

        A dialogue is a list of turn strings, a list of ``{speaker, text}`` or a record; invalid
        input raises ``ValueError`` naming the dialogue (``names[i]`` when given).

        Args:
            dialogues: A list of dialogues.
            names: A name per dialogue for error messages; None: its ``dialogue_id`` or index.

        Returns:
            One float32 array of shape ``(n_turns, dim)`` per dialogue, in order.

        Raises:
            ValueError: ``dialogues`` is not a list, or a dialogue or turn text is invalid.
        """
        from dialfork_dataset.turns import turn_texts

        dialogues = _as_list(dialogues, "dialogues")
        per = [turn_texts(d, _where(d, i, names)) for i, d in enumerate(dialogues)]
        flat = [t for turns in per for t in turns]
        emb = self.encode(flat)
        bounds = np.cumsum([0] + [len(t) for t in per])
        return [emb[bounds[i] : bounds[i + 1]] for i in range(len(per))]

    def encode_transcripts(self, dialogues: Sequence[Any], names: Sequence[str] | None = None) -> np.ndarray:
        """One embedding per dialogue of its transcript ``"user: ...\\nsystem: ..."`` (Full-dialog,
        SPEC section 7), truncated by the encoder's ``max_seq_length``; shape ``(n, dim)``.

        Args:
            dialogues: A list of dialogues.
            names: A name per dialogue for error messages; None: its ``dialogue_id`` or index.

        Returns:
            The embeddings, shape ``(n, dim)``, float32.

        Raises:
            ValueError: ``dialogues`` is not a list, or a dialogue is invalid.
        """
        from dialfork_dataset.turns import transcript

        dialogues = _as_list(dialogues, "dialogues")
        texts = [transcript(d, _where(d, i, names)) for i, d in enumerate(dialogues)]
        self._report_truncation([t for t in dict.fromkeys(texts) if t not in self._memory])
        return self.encode(texts)

    def _report_truncation(self, texts: list[str]) -> None:
        """Log how many (new) transcripts exceed the encoder's ``max_seq_length`` (Full-dialog then
        sees only their opening); counted in ``stats["truncated"]``."""
        if not texts:
            return
        try:
            limit = int(self.model.max_seq_length)
            lengths = [len(ids) for ids in self.model.tokenizer(texts, truncation=False)["input_ids"]]
        except Exception:  # a model without a standard tokenizer: nothing to report
            return
        n = sum(ln > limit for ln in lengths)
        self.stats["truncated"] = self.stats.get("truncated", 0) + n
        if n:
            logger.warning(
                "Full-dialog: %d of %d transcripts exceed %s's max_seq_length (%d tokens) and are "
                "truncated to their opening",
                n,
                len(texts),
                Path(self.name).name,
                limit,
            )

    def clear_cache(self) -> None:
        """Forget the memory cache (the disk cache, if any, is kept)."""
        self._memory.clear()


def _as_list(x: Any, what: str) -> list:
    from collections.abc import Iterable, Mapping

    if isinstance(x, str | Mapping) or not isinstance(x, Iterable):
        raise ValueError(f"{what} must be a list, got {type(x).__name__}")
    return list(x)


def _where(dialogue: Any, i: int, names: Sequence[str] | None) -> str:
    if names is not None:
        return names[i]
    if isinstance(dialogue, dict) and "dialogue_id" in dialogue:
        return f"dialogue {i} ({dialogue['dialogue_id']!r})"
    return f"dialogue {i}"


def _l2_normalise(emb: np.ndarray, model: str, texts: list[str]) -> np.ndarray:
    if not np.isfinite(emb).all():
        bad = int(np.flatnonzero(~np.isfinite(emb).all(axis=1))[0])
        raise ValueError(f"encoder {model!r} returned a non-finite embedding for text {texts[bad][:80]!r}")
    norms = np.linalg.norm(emb.astype(np.float64), axis=1, keepdims=True)
    if (norms == 0).any():
        bad = int(np.flatnonzero(norms[:, 0] == 0)[0])
        raise ValueError(f"encoder {model!r} returned a zero embedding for text {texts[bad][:80]!r}")
    return (emb / norms).astype(np.float32)


_SHARED: dict[tuple, Encoder] = {}


def get_encoder(encoder: Any = "minilm", *, shared: bool = True, **kwargs: Any) -> Any:
    """The one way DialFork turns an encoder argument into an encoder.

    Args:
        encoder: ``None`` (the packaged MiniLM), an alias, a local folder or a Hub id
            (:func:`~dialfork_metrics.encoders.names.resolve_encoder_name`), or a ready encoder:
            an :class:`Encoder` or any object with ``encode(texts) -> (n, d)``, returned as is.
        shared: for a name, return one shared instance per (resolved name, options) for the
            process, so that repeated calls reuse the model and its cache (default); ``False``
            builds a fresh :class:`Encoder` that the caller owns (and may drop to free memory).
        **kwargs: :class:`Encoder` options (``device``, ``batch_size``, ``cache_dir``, ...).

    Returns:
        ``encoder`` itself when it is already an encoder; else an :class:`Encoder` of the
        resolved name (``minilm`` for None): the process's shared instance for those options, or
        a new one with ``shared=False``.

    Raises:
        ValueError: an unknown name or option, or an object that cannot encode.
    """
    if isinstance(encoder, Encoder) or (
        encoder is not None and not isinstance(encoder, str) and hasattr(encoder, "encode")
    ):
        return encoder
    if encoder is not None and not isinstance(encoder, str):
        raise ValueError(
            f"encoder must be None, an encoder name/path or an object with .encode(texts), "
            f"got {type(encoder).__name__}"
        )
    import inspect

    defaults = {k: p.default for k, p in inspect.signature(Encoder.__init__).parameters.items()}
    unknown = set(kwargs) - set(defaults) - {"self", "name_or_path"}
    if unknown:
        raise ValueError(f"unknown Encoder option(s) {sorted(unknown)}")
    if not shared:
        return Encoder("minilm" if encoder is None else encoder, **kwargs)
    name = resolve_encoder_name("minilm" if encoder is None else encoder)
    kwargs = {k: v for k, v in kwargs.items() if v != defaults[k]}  # defaults do not split the pool
    key = (name, tuple(sorted((k, repr(v)) for k, v in kwargs.items())))
    enc = _SHARED.get(key)
    if enc is None:
        enc = _SHARED[key] = Encoder(name, **kwargs)
    return enc
