"""Turn-pair embeddings for FBD and PRD (Xiang et al. 2021; SPEC section 7).

The embedding of a pair of consecutive turns ``(a, b)`` is the transformer's ``[CLS]`` output
(``last_hidden_state[:, 0]``, no pooling, no normalisation) on the tokenized *text pair*
``[CLS] a [SEP] b [SEP]``, as in Xiang et al. (2021) and sdialog's ``SentencePairTransformer``.
The transformer is the one inside the sentence-transformers model of a
:class:`dialfork_metrics.Encoder` (its first module's ``auto_model``), so that FBD/PRD and the
turn-level metrics share one loaded model. The tokenizer is loaded with
``transformers.AutoTokenizer`` from the same resolved path, like sdialog does (the
sentence-transformers copy of the tokenizer has its ``model_max_length`` lowered to the
encoder's ``max_seq_length``; sdialog truncates pairs at the tokenizer's own limit).

Every unique pair is encoded once (memory cache keyed by the two texts; optionally a disk cache
keyed by model, truncation length and the hash of the two texts, shared with the encoder's
``cache_dir``), pairs are sorted by length before batching (less padding), and a progress bar
shows on large jobs. :func:`pair_encoder_for` gives one ``PairEncoder`` per ``Encoder``, so that
repeated :func:`~dialfork_metrics.fbd` / :func:`~dialfork_metrics.prd` calls against the same
reference set (a training loop, a benchmark) encode its pairs once.

Pairings (``pairing=``):

- ``"system_user"`` (default, SPEC section 7): each system turn with the user turn that follows it;
- ``"user_system"``: each user turn with the system turn that follows it (a query/response pair,
  sdialog's ``ai_speaker="system"`` mode);
- ``"sliding"``: every turn with its successor, whoever speaks (sdialog's default, used by
  ``compat="sdialog"``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from dialfork_dataset.turns import as_turns

logger = logging.getLogger(__name__)

PAIRINGS = ("system_user", "user_system", "sliding")


def as_encoder(encoder: Any = None) -> Any:
    """A fresh (unshared) :func:`~dialfork_metrics.encoders.get_encoder`.

    Args:
        encoder: ``None`` (the packaged MiniLM), an alias/path, or a ready encoder object
            (anything with ``encode(texts) -> (n, d)``), returned as is.

    Returns:
        The encoder.
    """
    from .encoders import get_encoder

    return get_encoder(encoder, shared=False)


def dialogue_name(dialogue: Any, index: int, set_name: str) -> str:
    """``"reference set dialogue 3 ('weather-4')"``: how errors name a dialogue of a set.

    Args:
        dialogue: The dialogue (its ``dialogue_id`` is quoted when it has one).
        index: Its index in the set.
        set_name: The set's name.

    Returns:
        The name.
    """
    did = None
    if isinstance(dialogue, dict):
        did = dialogue.get("dialogue_id")
    elif hasattr(dialogue, "dialogue_id"):
        did = getattr(dialogue, "dialogue_id", None)
    return f"{set_name} dialogue {index}" + (f" ({did!r})" if did is not None else "")


def turn_pairs(
    dialogue: Any, pairing: str = "system_user", where: str | None = None
) -> list[tuple[str, str]]:
    """The consecutive turn pairs of one dialogue (any input :func:`as_turns` accepts).

    Args:
        dialogue: The dialogue.
        pairing: ``"system_user"`` (a system turn and the user's answer), ``"user_system"`` or
            ``"sliding"`` (every two consecutive turns).
        where: Names the dialogue in errors.

    Returns:
        The ``(first text, second text)`` pairs, in order.

    Raises:
        ValueError: An unknown pairing, or a malformed dialogue.
    """
    if pairing not in PAIRINGS:
        raise ValueError(f"unknown pairing {pairing!r}; expected one of {PAIRINGS}")
    turns = as_turns(dialogue, where)
    out = []
    for a, b in zip(turns[:-1], turns[1:]):
        if pairing == "sliding":
            out.append((a["text"], b["text"]))
        elif pairing == "system_user" and a["speaker"] == "system" and b["speaker"] == "user":
            out.append((a["text"], b["text"]))
        elif pairing == "user_system" and a["speaker"] == "user" and b["speaker"] == "system":
            out.append((a["text"], b["text"]))
    return out


def set_turn_pairs(
    dialogues: Sequence[Any], pairing: str = "system_user", set_name: str = "set"
) -> list[tuple[str, str]]:
    """All turn pairs of a set of dialogues, in order.

    Args:
        dialogues: The set.
        pairing: As :func:`turn_pairs`.
        set_name: Names the set in errors.

    Returns:
        The pairs of every dialogue, concatenated.

    Raises:
        ValueError: ``dialogues`` is not a list of dialogues, or one is malformed.
    """
    if isinstance(dialogues, (str, bytes)) or not isinstance(dialogues, Sequence):
        raise ValueError(f"{set_name}: expected a list of dialogues, got {type(dialogues).__name__}")
    pairs: list[tuple[str, str]] = []
    for i, d in enumerate(dialogues):
        pairs.extend(turn_pairs(d, pairing, where=dialogue_name(d, i, set_name)))
    return pairs


def _pair_key(a: str, b: str) -> bytes:
    """sha256 of the two texts, length-prefixed so that ``("ab", "c")`` and ``("a", "bc")`` differ."""
    ab = a.encode("utf-8")
    return hashlib.sha256(len(ab).to_bytes(8, "little") + ab + b.encode("utf-8")).digest()


class PairEncoder:
    """``[CLS]`` embeddings of text pairs with the transformer of a sentence-transformers encoder.

    Args:
        encoder: ``None`` (packaged MiniLM), an alias/path for :class:`~dialfork_metrics.Encoder`,
            or an ``Encoder`` instance (its ``.model`` is reused, no second load).
        batch_size: Pairs per forward pass.
        max_length: Truncation length in tokens of a pair (``"longest_first"``). ``None``: the
            tokenizer's own ``model_max_length`` as saved with the model (what sdialog uses; 512
            for MiniLM).
        show_progress: Progress bar; ``None``: only for more than 2,000 new pairs.
        cache_dir: Folder of a persistent pair-embedding cache (the same atomic shard store as
            :class:`~dialfork_metrics.Encoder`'s, under its own key: model, ``"pairs"``, truncation
            length). ``None``: the encoder's own ``cache_dir``, if it has one; ``False``: memory only.
        memory_cache_bytes: Bound of the in-memory pair-embedding cache, an LRU
            (:class:`~dialfork_metrics.encoders.EmbeddingLRU`). ``None``: the encoder's own bound
            (default 1 GiB); ``0``: no memory cache.
        runtime: ``"torch"``, ``"onnx"`` or ``"onnx-int8"`` (see :mod:`dialfork_metrics.runtimes`);
            ``None``: the encoder's own ``runtime`` (``"torch"`` for an encoder without one).

    Raises:
        ValueError: ``batch_size`` is not a positive int, ``max_length`` not an int >= 2, or an
            unknown runtime.
    """

    def __init__(
        self,
        encoder: Any = None,
        batch_size: int = 64,
        max_length: int | None = None,
        show_progress: bool | None = None,
        cache_dir: str | os.PathLike | None | bool = None,
        memory_cache_bytes: int | None = None,
        runtime: str | None = None,
    ):
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        if max_length is not None and (not isinstance(max_length, int) or max_length < 2):
            raise ValueError(f"max_length must be an int >= 2 or None, got {max_length!r}")
        self.encoder = as_encoder(encoder)
        from .runtimes import cache_key_suffix, check_runtime

        self.runtime = check_runtime(
            getattr(self.encoder, "runtime", "torch") if runtime is None else runtime
        )
        self.batch_size = batch_size
        self.max_length = max_length
        self.show_progress = show_progress
        if cache_dir is None:
            cache_dir = getattr(self.encoder, "cache_dir", None)
        self.cache_dir = None if cache_dir is False else cache_dir
        self._disk: Any = None
        if self.cache_dir is not None:  # keyed by the requested length: a hit needs no model load
            from .encoders.cache import _DiskCache

            self._disk = _DiskCache(
                self.cache_dir,
                f"{self.name}|pairs-cls|max_length={max_length or 'model'}"
                + cache_key_suffix(self.runtime, getattr(self.encoder, "dtype", None)),
            )
        from .encoders import DEFAULT_MEMORY_CACHE_BYTES, EmbeddingLRU

        if memory_cache_bytes is None:
            memory = getattr(self.encoder, "_memory", None)
            memory_cache_bytes = memory.max_bytes if memory is not None else DEFAULT_MEMORY_CACHE_BYTES
        self._cache = EmbeddingLRU(memory_cache_bytes)  # (first, second) -> [CLS] embedding
        self._model = None
        self._tokenizer = None
        self.stats = {"requested": 0, "memory_hits": 0, "disk_hits": 0, "encoded": 0}

    @property
    def name(self) -> str:
        return str(getattr(self.encoder, "name", type(self.encoder).__name__))

    def _load(self) -> None:
        if self._model is not None:
            return
        from transformers import AutoTokenizer

        st = getattr(self.encoder, "model", None)
        if st is None:
            raise ValueError(
                "the encoder has no .model (a SentenceTransformer); cannot build pair embeddings"
            )
        first = st[0]
        auto_model = getattr(first, "auto_model", None)
        tok = getattr(first, "tokenizer", None)
        if auto_model is None or tok is None:
            raise ValueError(
                f"the encoder's first module ({type(first).__name__}) has no auto_model/tokenizer: "
                "FBD/PRD need a transformer-based sentence-transformers model"
            )
        path = getattr(tok, "name_or_path", None) or self.name
        try:
            self._tokenizer = AutoTokenizer.from_pretrained(path)
        except (OSError, ValueError) as e:  # a tokenizer not saved on disk: use the module's own
            logger.warning(
                "could not reload the tokenizer from %s (%s); using the encoder's tokenizer", path, e
            )
            self._tokenizer = tok
        self._model = auto_model
        if self.runtime != "torch":  # onnxruntime, called like the torch model
            from .runtimes import runner_for

            self._model = runner_for(st, self.name, self.runtime)
        if self.max_length is None:
            ml = int(getattr(self._tokenizer, "model_max_length", 512))
            mp = getattr(auto_model.config, "max_position_embeddings", None)
            if ml > 100_000:  # tokenizers without a saved limit report 1e30
                ml = int(mp) if mp else 512
            self.max_length = ml

    def encode_pairs(self, firsts: Sequence[str], seconds: Sequence[str]) -> np.ndarray:
        """``[CLS]`` embeddings of the pairs ``(firsts[i], seconds[i])``, from the caches when there.

        Args:
            firsts: The first texts.
            seconds: The second texts, one per first text.

        Returns:
            ``(n, hidden)`` float32 embeddings (``(0, 0)`` for no pair).

        Raises:
            ValueError: The two lists differ in length, a text is empty or not a string, or the
                encoder is not a transformer-based sentence-transformers model.
        """
        if len(firsts) != len(seconds):
            raise ValueError(f"{len(firsts)} first texts but {len(seconds)} second texts")
        keys = list(zip(firsts, seconds))
        for i, (a, b) in enumerate(keys):
            if not isinstance(a, str) or not isinstance(b, str) or not a.strip() or not b.strip():
                raise ValueError(f"pair {i}: both texts must be non-empty strings, got {a!r}, {b!r}")
        self.stats["requested"] += len(keys)
        if not keys:
            return np.zeros((0, 0), dtype=np.float32)
        index: dict[tuple[str, str], int] = {}
        inverse = np.fromiter(
            (index.setdefault(k, len(index)) for k in keys), dtype=np.int64, count=len(keys)
        )
        unique = list(index)
        hit, rows = self._cache.get(unique)
        self.stats["memory_hits"] += int(np.count_nonzero(hit[inverse]))
        if hit.all():
            return rows[inverse]
        missing = [k for k, h in zip(unique, hit) if not h]
        new: dict[tuple[str, str], np.ndarray] = {}
        hashes = {k: _pair_key(*k) for k in missing} if self._disk is not None else {}
        if hashes:
            found = self._disk.get(list(hashes.values()))
            for k, h in hashes.items():
                if h in found:
                    new[k] = np.asarray(found[h], dtype=np.float32)
            self.stats["disk_hits"] += len(new)
        todo = sorted(
            k for k in missing if k not in new
        )  # a fixed order: batches do not depend on input order
        if todo:
            emb = self._encode_new(todo)
            new.update(zip(todo, emb))
            self.stats["encoded"] += len(todo)
            if self._disk is not None:
                self._disk.put([hashes[k] for k in todo], emb)
        new_rows = np.stack([new[k] for k in missing])
        out = np.empty((len(unique), new_rows.shape[1]), dtype=np.float32)
        if rows is not None:
            out[hit] = rows
        out[~hit] = new_rows
        # assembled before caching: a job larger than the cache bound evicts its own first rows
        self._cache.put(missing, new_rows)
        return out[inverse]

    def _encode_new(self, todo: list[tuple[str, str]]) -> np.ndarray:
        """``(len(todo), hidden)`` float32 ``[CLS]`` embeddings, batched by token length; the
        progress bar counts pairs."""
        import torch
        from tqdm.auto import tqdm

        self._load()
        model, tok = self._model, self._tokenizer
        device = next(model.parameters()).device
        was_training = model.training
        model.eval()
        from dialfork_dataset.console import progress_disabled

        show = self.show_progress if self.show_progress is not None else len(todo) > 2000
        show = show and not progress_disabled()
        # tokenize once, then batch by token length: each batch pads to its own longest pair
        toks = tok([a for a, _ in todo], [b for _, b in todo], truncation=True, max_length=self.max_length)
        names = list(toks.keys())
        order = sorted(range(len(todo)), key=lambda i: len(toks["input_ids"][i]))
        out: np.ndarray | None = None
        try:
            with (
                torch.inference_mode(),
                tqdm(
                    total=len(todo), desc="pair embeddings", unit="pair", disable=not show, leave=False
                ) as bar,
            ):
                for s in range(0, len(order), self.batch_size):
                    idx = order[s : s + self.batch_size]
                    enc = tok.pad(
                        {n: [toks[n][i] for i in idx] for n in names}, padding=True, return_tensors="pt"
                    )
                    enc = {k: v.to(device) for k, v in enc.items()}
                    cls = model(**enc).last_hidden_state[:, 0].float().cpu().numpy()
                    if out is None:
                        out = np.empty((len(todo), cls.shape[1]), dtype=np.float32)
                    out[idx] = cls
                    bar.update(len(idx))
        finally:
            if was_training:
                model.train()
        logger.debug("encoded %d new text pairs with %s", len(todo), self.name)
        assert out is not None
        return out

    def encode_sets(
        self, dialogues: Sequence[Any], pairing: str = "system_user", set_name: str = "set"
    ) -> np.ndarray:
        """Pair embeddings of all the turn pairs of a set of dialogues.

        Args:
            dialogues: The set.
            pairing: As :func:`turn_pairs`.
            set_name: Names the set in errors.

        Returns:
            ``(n_pairs, hidden)`` float32 embeddings.

        Raises:
            ValueError: The set has no such turn pair, or a dialogue is malformed.
        """
        pairs = set_turn_pairs(dialogues, pairing, set_name)
        if not pairs:
            raise ValueError(f"{set_name}: no {pairing} turn pairs in {len(dialogues)} dialogues")
        return self.encode_pairs([a for a, _ in pairs], [b for _, b in pairs])


_PAIR_ENCODERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def pair_encoder_for(
    encoder: Any = None, batch_size: int = 64, show_progress: bool | None = None
) -> PairEncoder:
    """The :class:`PairEncoder` of ``encoder``, created once per encoder object and batch size.

    Args:
        encoder: A ``PairEncoder`` (returned as is), an ``Encoder`` (its pair encoder is
            remembered for as long as the encoder lives, so pair embeddings are reused across
            calls), or ``None``/a name (a new encoder and pair encoder each call).
        batch_size: Pairs per forward pass.
        show_progress: Progress bar; ``None``: unchanged (new: only for many new pairs).

    Returns:
        The pair encoder.
    """
    if isinstance(encoder, PairEncoder):
        return encoder
    if encoder is None or isinstance(encoder, str):
        return PairEncoder(encoder, batch_size=batch_size, show_progress=show_progress)
    enc = as_encoder(encoder)
    try:
        per_enc = _PAIR_ENCODERS.setdefault(enc, {})
    except TypeError:  # an encoder object that cannot be weakly referenced: no memo
        return PairEncoder(enc, batch_size=batch_size, show_progress=show_progress)
    pe = per_enc.get(batch_size)
    if pe is None:
        pe = per_enc[batch_size] = PairEncoder(enc, batch_size=batch_size, show_progress=show_progress)
    elif show_progress is not None:
        pe.show_progress = show_progress
    return pe
