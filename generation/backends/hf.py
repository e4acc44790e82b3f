"""Local chat LLMs through ``transformers``: lockstep batching with exact per-dialogue seeded sampling.

How a call to :meth:`TransformersBackend.generate` works
--------------------------------------------------------
1. Each request's chat ``messages`` are rendered with the model's chat template
   (:meth:`TransformersBackend.render_prompt`). A template without a system role gets the system
   messages merged into user messages by :func:`merge_system_messages` (documented there), so an
   injected instruction stays at the turn where it was given.
2. A prompt that does not fit the context window together with ``max_new_tokens`` loses its
   oldest non-system messages, one at a time, until it fits (``context_overflow="truncate"``,
   the default; the count is recorded in ``request.extra["truncated_messages"]``), or the call
   raises :class:`ContextOverflowError` naming the dialogue (``context_overflow="error"``).
3. Each prompt's longest prefix already in the prefix cache (:mod:`generation.llm.prefix_cache`:
   the agent's own last prompt and reply, or another dialogue's, e.g. a replayed fork's D+) is
   looked up; only the rest is prefilled.
4. The requests are sorted by the length still to prefill and cut into chunks of ``batch_size``;
   each chunk runs ONE lockstep decoding loop: a left-padded prefill (each row laid out as
   ``[pad, cached prefix, pad, rest]``, padding masked, positions counting real tokens), then one
   forward pass per new token for all rows still running, with the KV cache; a row that emits an
   end-of-turn token, a stop string or ``max_new_tokens`` tokens leaves the batch (its rows are
   dropped from the cache, its keys/values kept for its agent's next turn).
5. Sampling is our own (:func:`sample_tokens`), not ``model.generate``: temperature, then top-k,
   then top-p, then an inverse-CDF draw with ONE uniform number per row and token taken from the
   row's own ``torch.Generator``, seeded by :func:`turn_sampling_seed` from (dialogue seed, turn
   index, role; plus the fork's salt for a prefix turn that ``reword`` mode rewords). A row's tokens therefore depend only on its own logits and its own random stream,
   never on the other rows, the batch size or the chunking.
6. CUDA out of memory halves the chunk and retries it (the random streams are re-created from the
   seeds, so the retry gives the same text); the smaller batch size is kept for later calls.

Exactness. The logits of a row computed in a batch equal those computed alone up to floating-point
reassociation (left padding is masked and position ids follow the attention mask, so the maths is
the same; only the reduction order of batched kernels can differ). With float32 on CPU the
difference is ~1e-6 (``tests/test_gen_hf.py`` measures it), so a draw flips only when its uniform
falls within that distance of a CDF boundary: in practice never. In bf16 on a GPU, batched kernels
differ by ~1e-2 and a rare flip can reword a turn; ``replay`` forks record this in
``prefix_divergence``. Use ``dtype="float32"`` for bit-stable replays at twice the memory.

Device and dtype (``device="auto"``, ``dtype="auto"``): CUDA when available with bfloat16
(float16 on GPUs without bf16), else CPU with float32. A model whose weights exceed
``gpu_fraction`` of one GPU's memory is loaded with ``device_map="auto"`` (spread over all visible
GPUs, then the CPU) unless ``device_map`` is given.

Where the parts live: loading (config, tokenizer and chat template, device and dtype, weights) is
:mod:`generation.llm.loader`, shared with the Task 3 LLM detector and the judge; the sampler is
:mod:`generation.llm.sampling`, the message rewrites :mod:`generation.llm.messages`, the tiny test
model :mod:`generation.llm.tiny`. This module keeps the lockstep decoding loop and re-exports them.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import GenerationError
from ..llm import loader
from ..llm.loader import END_OF_TURN_TOKENS, ChatTemplateError, ModelLoadError
from ..llm.messages import drop_oldest_turn, merge_system_messages
from ..llm.prefix_cache import PrefixCache
from ..llm.sampling import SAMPLER_VERSION, request_salt, sample_tokens, turn_sampling_seed
from ..llm.tiny import CHATML_TEMPLATE, NO_SYSTEM_TEMPLATE, build_tiny_chat_model
from .base import TurnRequest, decoding_errors

logger = logging.getLogger(__name__)

CONTEXT_OVERFLOW_MODES = ("truncate", "error")
_DTYPE_NAMES = loader.DTYPE_NAMES
SYSTEM_ROLE_MODES = ("auto", "native", "merge")


class ContextOverflowError(GenerationError):
    """A prompt does not fit the model's context window (``context_overflow="error"``, or nothing left to drop).

    Args:
        message: the dialogue, turn, prompt size and context window, and how to fix it.
        errors: every problem, one line each; defaults to ``[message]``.
    """


def _requests_errors(requests: Sequence[Any]) -> list[str]:
    errs = []
    for i, r in enumerate(requests):
        if not isinstance(r, TurnRequest):
            errs.append(f"request {i}: expected a TurnRequest, got {type(r).__name__}")
            continue
        where = f"request {i} (dialogue {r.dialogue_key!r}, turn {r.turn_index})"
        if not isinstance(r.messages, Sequence) or not r.messages:
            errs.append(f"{where}: messages must be a non-empty list")
            continue
        for j, m in enumerate(r.messages):
            if (
                not isinstance(m, Mapping)
                or m.get("role") not in ("system", "user", "assistant")
                or not isinstance(m.get("content"), str)
            ):
                errs.append(
                    f"{where}, message {j}: expected {{'role': system|user|assistant, 'content': str}}, got {m!r}"
                )
        if not isinstance(r.seed, int) or isinstance(r.seed, bool):
            errs.append(f"{where}: seed must be an int, got {r.seed!r}")
    return errs


def _output_cache(out):
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


def _cache_layers(cache):
    """Per layer ``(keys, values)`` of a plain full-attention ``DynamicCache``; ``None`` for any
    other cache (sliding-window, recurrent or hybrid layers), which is not prefix-cached."""
    if type(cache).__name__ != "DynamicCache" or any(getattr(cache, "is_sliding", None) or ()):
        return None
    layers = getattr(cache, "layers", None)
    if layers is not None:  # transformers >= 4.56
        if not layers or any(
            type(layer).__name__ != "DynamicLayer" or getattr(layer, "keys", None) is None for layer in layers
        ):
            return None
        return [(layer.keys, layer.values) for layer in layers]
    keys, values = getattr(cache, "key_cache", None), getattr(cache, "value_cache", None)
    return list(zip(keys, values)) if keys else None


def _make_cache(layers):
    """A ``DynamicCache`` holding the given per-layer ``(keys, values)``."""
    from transformers import DynamicCache

    try:
        return DynamicCache(ddp_cache_data=layers)
    except TypeError:  # older transformers
        return DynamicCache.from_legacy_cache(tuple(layers))


@dataclass
class _Prepared:
    index: int
    ids: list[int]
    rng_seed: int
    truncated: int
    key: tuple[str, str] = ("", "")
    cached: int = 0
    past: list | None = None


# ---------------------------------------------------------------------------------------------
# The backend
# ---------------------------------------------------------------------------------------------
class TransformersBackend:
    """Chat generation with a local or Hub ``transformers`` model (see the module docstring).

    ``backend.generate(requests)`` returns one utterance per :class:`TurnRequest` and writes, per
    request, ``extra["finish_reason"]`` (``eos``/``stop``/``length``), ``extra["truncated_messages"]``,
    ``extra["prompt_tokens"]`` and ``extra["new_tokens"]``; ``backend.stats`` sums the work done.

    Args:
        model: Hub id or local folder of a causal chat LM (its tokenizer must have a chat template,
            or pass ``chat_template``).
        temperature: sampling temperature, >= 0 (SPEC section 3 default 1.3; 0 is greedy).
        top_p: nucleus mass in (0, 1] (default 0.95; 1 disables top-p).
        top_k: top-k cut-off, integer >= 0 (default 64; 0 disables top-k).
        max_new_tokens: the most tokens per turn, integer >= 1 (default 256).
        stop: stop strings: generation of a turn ends at the first one, which is cut from the text
            (e.g. ``"\\nUser:"`` for a model that starts writing the other side's turn); default none.
        end_strings: strings that end generation but stay in the text (``None``, the default: the
            engine's closing token ``[END]``, which the engine needs to see to end the dialogue).
        batch_size: rows per lockstep chunk, integer >= 1 (default 32; halved automatically on CUDA
            out-of-memory).
        max_batch_tokens: also cap a chunk's rows so that rows x (longest prompt +
            ``max_new_tokens``) stays under this many tokens (bounds the KV cache and prefill
            memory); ``None`` (default): no cap.
        device: ``"auto"`` (default: CUDA when available, else the CPU) or a device string.
        dtype: ``"auto"`` (default: bfloat16 on CUDA, float16 on GPUs without bf16, float32 on the
            CPU) or ``bfloat16``/``float16``/``float32`` (:data:`~generation.llm.loader.DTYPE_NAMES`).
        device_map: passed to ``from_pretrained``; ``None`` (default): automatic (see the module
            docstring).
        chat_template: a Jinja template string, or a path to a ``.jinja`` file, overriding the
            tokenizer's; ``None`` (default) keeps the tokenizer's.
        system_role: ``"auto"`` (default: probe the template), ``"native"`` (pass system messages
            through) or ``"merge"`` (always :func:`merge_system_messages`).
        context_overflow: ``"truncate"`` (default: drop the oldest non-system messages, recorded)
            or ``"error"``.
        max_context: context window in tokens, integer > 1 (``None``, the default: from the model
            config, e.g. ``max_position_embeddings``).
        revision: the Hub revision of the model; ``None`` (default) for the default one.
        trust_remote_code: let ``transformers`` run the model repository's own code (default
            ``False``).
        attn_implementation: the attention implementation for ``from_pretrained`` (e.g.
            ``"sdpa"``); ``None`` (default) lets ``transformers`` choose.
        gpu_fraction: share of one GPU's memory above which the weights are spread with
            ``device_map="auto"`` (default 0.85).
        name: recorded as the records' ``generator`` (``None``, the default: ``model`` as given,
            ``model/gguf_file`` for a GGUF file in a folder).
        gguf_file: a GGUF file (llama.cpp's format) inside the folder or Hub repository ``model``;
            ``None`` (default): ``model`` is an ordinary ``transformers`` model, a registry name of
            an installed GGUF model (``"smollm2"``, :data:`generation.llm.gguf.REGISTRY`) or the
            path of a ``.gguf`` file. A GGUF model is dequantised to ``dtype`` once and cached
            (:func:`generation.llm.gguf.materialise`).
        gguf_cache: the folder of converted GGUF models (``None``, the default:
            ``$DIALFORK_GGUF_CACHE``, else ``~/.cache/dialfork/gguf``).
        prefix_cache_mb: memory for the keys/values of each agent's last prompt and reply, reused
            by its next turn so that only the new messages are prefilled
            (:mod:`generation.llm.prefix_cache`); ``None`` (default): a quarter of the machine's
            RAM on the CPU, of the GPU's memory on CUDA; 0 disables it. Models with sliding-window
            or recurrent layers are never prefix-cached.

    Raises:
        ValueError: a parameter is invalid (every problem is listed).
        ModelLoadError: the config or tokenizer cannot be loaded, the tokenizer defines no end
            token, or the context window cannot be told (pass ``max_context``); a GGUF file is
            missing, unreadable, of an unsupported architecture or quantisation
            (:func:`generation.llm.gguf.inspect_gguf`).
        ChatTemplateError: the tokenizer has no chat template and none is given.
    """

    def __init__(
        self,
        model: str,
        *,
        temperature: float = 1.3,
        top_p: float = 0.95,
        top_k: int = 64,
        max_new_tokens: int = 256,
        stop: Sequence[str] = (),
        end_strings: Sequence[str] | None = None,
        batch_size: int = 32,
        max_batch_tokens: int | None = None,
        device: str = "auto",
        dtype: str = "auto",
        device_map: str | dict | None = None,
        chat_template: str | None = None,
        system_role: str = "auto",
        context_overflow: str = "truncate",
        max_context: int | None = None,
        revision: str | None = None,
        trust_remote_code: bool = False,
        attn_implementation: str | None = None,
        gpu_fraction: float = 0.85,
        name: str | None = None,
        gguf_file: str | None = None,
        gguf_cache: str | None = None,
        prefix_cache_mb: int | None = None,
    ):
        errs = []
        if not isinstance(model, str) or not model.strip():
            errs.append(f"model must be a Hub id or a folder, got {model!r}")
        errs += decoding_errors(temperature, top_p, top_k, max_new_tokens, stop)
        if end_strings is None:
            from ..prompts import END_TOKEN

            end_strings = (END_TOKEN,)
        if isinstance(end_strings, str) or not all(isinstance(s, str) and s for s in end_strings):
            errs.append(f"end_strings must be a list of non-empty strings, got {end_strings!r}")
        if not (isinstance(batch_size, int) and batch_size >= 1):
            errs.append(f"batch_size must be an integer >= 1, got {batch_size!r}")
        errs += loader.dtype_errors(dtype)
        if max_batch_tokens is not None and not (isinstance(max_batch_tokens, int) and max_batch_tokens >= 1):
            errs.append(f"max_batch_tokens must be an integer >= 1 or None, got {max_batch_tokens!r}")
        if system_role not in SYSTEM_ROLE_MODES:
            errs.append(f"system_role must be one of {SYSTEM_ROLE_MODES}, got {system_role!r}")
        if context_overflow not in CONTEXT_OVERFLOW_MODES:
            errs.append(f"context_overflow must be one of {CONTEXT_OVERFLOW_MODES}, got {context_overflow!r}")
        if max_context is not None and not (isinstance(max_context, int) and max_context > 1):
            errs.append(f"max_context must be an integer > 1, got {max_context!r}")
        if prefix_cache_mb is not None and not (isinstance(prefix_cache_mb, int) and prefix_cache_mb >= 0):
            errs.append(f"prefix_cache_mb must be an integer >= 0 or None, got {prefix_cache_mb!r}")
        if gguf_file is not None and not (isinstance(gguf_file, str) and gguf_file.strip()):
            errs.append(f"gguf_file must be a file name or path, got {gguf_file!r}")
        if errs:
            raise ValueError("TransformersBackend: " + "; ".join(errs))
        from ..llm.gguf import resolve_model

        resolved = resolve_model(
            model, gguf_file, dtype=dtype, device=device, revision=revision, cache_dir=gguf_cache
        )
        self.model_id = model
        self.gguf_file = gguf_file
        self.gguf_source = resolved.gguf
        self._load_path = resolved.path
        self.name = name or resolved.name
        self.temperature = float(temperature)
        self.top_p = float(top_p)
        self.top_k = int(top_k)
        self.max_new_tokens = int(max_new_tokens)
        self.stop = tuple(stop)
        self.end_strings = tuple(end_strings)
        self.batch_size = int(batch_size)
        self.max_batch_tokens = max_batch_tokens
        self.context_overflow = context_overflow
        self.revision = revision
        self.trust_remote_code = trust_remote_code
        self.attn_implementation = attn_implementation
        self.gpu_fraction = gpu_fraction
        self._device_req, self._dtype_req, self._device_map_req = device, dtype, device_map
        self._model = None
        self.uses_messages = True
        self.rewords = True  # reword prefix mode: another random stream for a reworded prefix turn
        self.exact = False  # LLM forks are not guaranteed to differ at t_k (the engine only warns)
        self.stats = {
            "prompt_tokens": 0,
            "new_tokens": 0,
            "forward_passes": 0,
            "rows": 0,
            "seconds": 0.0,
            "oom_retries": 0,
            "prefilled_tokens": 0,
            "reused_tokens": 0,
            "prefill_seconds": 0.0,
        }
        self._prefix_cache_mb = prefix_cache_mb
        self.prefix_cache = None  # a PrefixCache once the weights are loaded (load())

        self.config = self._load_config()
        self.tokenizer = self._load_tokenizer(chat_template)
        self.system_role = self._resolve_system_role(system_role)
        self.max_context = max_context or self._window_from_config()
        self.eos_ids = self._eos_ids()
        self._watch = self.stop + self.end_strings
        self._watch_window = 4 * max((len(s) for s in self._watch), default=0) + 8
        self.pad_id = (
            self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else min(self.eos_ids)
        )

    # -- loading (generation.llm.loader) ------------------------------------------------------
    def _load_config(self):
        return loader.load_config(self._load_path, self._revision_for_load, self.trust_remote_code)

    def _load_tokenizer(self, chat_template: str | None):
        return loader.load_chat_tokenizer(
            self._load_path, self._revision_for_load, self.trust_remote_code, chat_template
        )

    @property
    def _revision_for_load(self) -> str | None:
        return None if self.gguf_source is not None else self.revision  # a converted GGUF is a local folder

    def _apply_template(self, messages: list[dict[str, str]]) -> str:
        return loader.apply_chat_template(self.tokenizer, messages)

    def _resolve_system_role(self, mode: str) -> str:
        return mode if mode != "auto" else loader.system_role_support(self.tokenizer, self.model_id)

    def _window_from_config(self) -> int:
        window = loader.context_window(self.config, self.tokenizer)
        if window is None:
            raise ModelLoadError(
                f"{self.model_id!r}: cannot tell the context window from its config; pass max_context="
            )
        return window

    def _eos_ids(self) -> set[int]:
        return loader.eos_token_ids(self.tokenizer, self.config, self.model_id)

    def resolved_device_dtype(self):
        """``(device, torch dtype)`` after resolving ``"auto"``.

        Returns:
            :func:`~generation.llm.loader.resolve_device_dtype` of the requested device and dtype.
        """
        return loader.resolve_device_dtype(self._device_req, self._dtype_req)

    def load(self):
        """Load the weights (done lazily by the first :meth:`generate`); returns the model.

        Returns:
            The ``transformers`` model in eval mode (the same object on every later call).

        Raises:
            ModelLoadError: the weights cannot be loaded
                (:func:`~generation.llm.loader.load_chat_model`).
        """
        if self._model is not None:
            return self._model
        import inspect

        model, self._input_device = loader.load_chat_model(
            self._load_path,
            config=self.config,
            device=self._device_req,
            dtype=self._dtype_req,
            device_map=self._device_map_req,
            trust_remote_code=self.trust_remote_code,
            revision=self._revision_for_load,
            attn_implementation=self.attn_implementation,
            gpu_fraction=self.gpu_fraction,
        )
        self._model = model
        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"  # renamed in transformers 5.x
        # compute the prefill's logits at the last position only (the full (B, L, V) tensor is large)
        keep_kw = next((k for k in ("logits_to_keep", "num_logits_to_keep") if k in params), None)
        self._prefill_kw = {keep_kw: 1} if keep_kw else {}
        self.prefix_cache = PrefixCache(self._prefix_cache_bytes())
        return model

    def _prefix_cache_bytes(self) -> int:
        if self._prefix_cache_mb is not None:
            return self._prefix_cache_mb * 2**20
        import torch

        dev = self._input_device
        if dev.type == "cuda":
            return torch.cuda.get_device_properties(dev.index or 0).total_memory // 4
        try:
            return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4
        except (ValueError, OSError, AttributeError):  # not POSIX
            return 2 * 2**30

    # -- Backend interface ---------------------------------------------------------------------
    def decoding(self) -> dict[str, Any]:
        """The record's ``decoding`` fields (SPEC section 4).

        Returns:
            ``{"temperature", "top_p", "top_k", "max_new_tokens"}`` with this backend's values.
        """
        return {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "max_new_tokens": self.max_new_tokens,
        }

    def describe(self) -> dict[str, Any]:
        """Everything that determines the text, for a run manifest.

        Returns:
            :meth:`decoding` plus ``backend``, ``model``, ``revision``, ``stop``, ``end_strings``,
                ``system_role`` (resolved), ``context_overflow``, ``max_context``, the resolved
                ``device`` and ``dtype`` (as strings), ``sampler`` (the sampler's version) and, for a
                GGUF model, ``gguf`` (the file's name and size in bytes).
        """
        device, dtype = self.resolved_device_dtype()
        gguf = (
            None
            if self.gguf_source is None
            else {"file": self.gguf_source.name, "bytes": self.gguf_source.stat().st_size}
        )
        return {
            **self.decoding(),
            "backend": "transformers",
            "model": self.model_id,
            "gguf": gguf,
            "revision": self.revision,
            "stop": list(self.stop),
            "end_strings": list(self.end_strings),
            "system_role": self.system_role,
            "context_overflow": self.context_overflow,
            "max_context": self.max_context,
            "device": str(device),
            "dtype": str(dtype).replace("torch.", ""),
            "sampler": SAMPLER_VERSION,
        }

    def render_prompt(self, messages: Sequence[Mapping[str, str]]) -> str:
        """The exact text the model reads for ``messages`` (chat template + generation prompt).

        Args:
            messages: the chat context (``role`` and ``content`` of each message are used); system
                messages are merged into user ones when :attr:`system_role` is ``"merge"``.

        Returns:
            The rendered prompt text.

        Raises:
            ChatTemplateError: the chat template rejects the conversation.
        """
        msgs = [{"role": m["role"], "content": m["content"]} for m in messages]
        if self.system_role == "merge":
            msgs = merge_system_messages(msgs)
        try:
            return self._apply_template(msgs)
        except Exception as e:  # noqa: BLE001 - jinja2.TemplateError and template-raised errors
            raise ChatTemplateError(
                f"the chat template of {self.model_id!r} rejects the conversation: {e}"
            ) from None

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def prepare(self, request: TurnRequest) -> tuple[list[int], int]:
        """Token ids of the request's prompt and how many oldest messages were dropped to fit.

        The prompt must leave ``max_new_tokens`` of the context window free; with
        ``context_overflow="truncate"`` the oldest non-system messages are dropped one at a time
        until it does.

        Args:
            request: the turn request (its ``messages``).

        Returns:
            ``(ids, dropped)``: the prompt's token ids and the number of messages dropped.

        Raises:
            ChatTemplateError: the template rejects the conversation as given.
            ContextOverflowError: the prompt does not fit and ``context_overflow="error"``, or
                nothing is left to drop.
        """
        msgs = [dict(m) for m in request.messages]
        budget = self.max_context - self.max_new_tokens
        dropped = 0
        while True:
            try:
                ids = self._encode(self.render_prompt(msgs))
                fits = len(ids) <= budget
            except ChatTemplateError:
                if dropped == 0:
                    raise
                ids, fits = [], False  # e.g. alternation broken by a drop: drop one more
            if fits:
                return ids, dropped
            shorter = drop_oldest_turn(msgs) if self.context_overflow == "truncate" else None
            if shorter is None:
                raise ContextOverflowError(
                    f"dialogue {request.dialogue_key!r}, turn {request.turn_index}: the prompt "
                    f"({len(ids) or 'unrenderable'} tokens after dropping {dropped} messages) + max_new_tokens "
                    f"{self.max_new_tokens} exceeds the context window of {self.max_context} tokens"
                    + ("" if self.context_overflow == "truncate" else "; use context_overflow='truncate'")
                    + " (shorten the role prompts, lower max_new_tokens or use a model with a longer window)"
                )
            msgs, dropped = shorter, dropped + 1

    def generate(self, requests: Sequence[TurnRequest]) -> list[str]:
        """One utterance per request, in order (see the module docstring).

        Loads the weights on first use. Writes ``extra["truncated_messages"]``,
        ``extra["finish_reason"]`` (``eos``/``stop``/``length``), ``extra["prompt_tokens"]`` and
        ``extra["new_tokens"]`` into each request.

        Args:
            requests: the batch; each must be a :class:`TurnRequest` with a non-empty list of
                ``system``/``user``/``assistant`` messages with string content and an ``int`` seed.

        Returns:
            The utterances in request order (cut at a stop string, kept through an end string,
                stripped); empty for an empty batch.

        Raises:
            ValueError: a request is malformed (every problem is listed).
            ChatTemplateError: the chat template rejects a conversation.
            ContextOverflowError: a prompt cannot be fitted into the context window.
            ModelLoadError: the weights cannot be loaded.
            torch.OutOfMemoryError: a single row does not fit in memory (larger chunks are halved
                and retried).
        """
        requests = list(requests)
        errs = _requests_errors(requests)
        if errs:
            raise ValueError("TransformersBackend.generate: invalid requests: " + "; ".join(errs))
        if not requests:
            return []
        prepared = []
        for i, r in enumerate(requests):
            ids, dropped = self.prepare(r)
            if dropped:
                logger.warning(
                    "dialogue %s turn %d: dropped the %d oldest messages to fit %d tokens",
                    r.dialogue_key,
                    r.turn_index,
                    dropped,
                    self.max_context,
                )
            prepared.append(
                _Prepared(
                    i,
                    ids,
                    turn_sampling_seed(r.seed, r.turn_index, r.role, request_salt(r)),
                    dropped,
                    key=(str(r.dialogue_key), str(r.role)),
                )
            )
        self.load()
        self.prefix_cache.new_call()
        for p in prepared:
            p.cached, p.past = self.prefix_cache.lookup(p.key, p.ids)
        # similar lengths of what is prefilled (the uncached part) together: little padding
        order = sorted(prepared, key=lambda p: (-(len(p.ids) - p.cached), -p.cached))
        results: dict[int, tuple[list[int], str]] = {}
        t0 = time.perf_counter()
        start = 0
        while start < len(order):
            n = min(self.batch_size, len(order) - start)
            if self.max_batch_tokens:  # rows x (widest past + widest prefill + new tokens) under the cap
                past = fill = 0
                for j in range(n):
                    p = order[start + j]
                    past, fill = max(past, p.cached), max(fill, len(p.ids) - p.cached)
                    if j and (j + 1) * (past + fill + self.max_new_tokens) > self.max_batch_tokens:
                        n = j
                        break
            chunk = order[start : start + n]
            results.update(self._run_chunk_with_oom_retry(chunk))
            start += len(chunk)
        self.stats["seconds"] += time.perf_counter() - t0
        texts = []
        for p in prepared:
            toks, finish = results[p.index]
            text = self._finish_text(toks)
            r = requests[p.index]
            r.extra["truncated_messages"] = p.truncated
            r.extra["finish_reason"] = finish
            r.extra["prompt_tokens"] = len(p.ids)
            r.extra["new_tokens"] = len(toks)
            texts.append(text)
        return texts

    # -- decoding ------------------------------------------------------------------------------
    def _finish_text(self, toks: list[int]) -> str:
        text = self.tokenizer.decode(toks, skip_special_tokens=True)
        cuts = [i for i in (text.find(s) for s in self.stop) if i >= 0]
        cuts += [i + len(s) for s, i in ((s, text.find(s)) for s in self.end_strings) if i >= 0]
        if cuts:
            text = text[: min(cuts)]
        return text.strip()

    def _run_chunk_with_oom_retry(self, chunk: list[_Prepared]) -> dict[int, tuple[list[int], str]]:
        import torch

        try:
            return self._run_chunk(chunk)
        except torch.OutOfMemoryError:
            if len(chunk) == 1:
                raise torch.OutOfMemoryError(
                    f"{self.model_id}: out of memory with a single row of {len(chunk[0].ids)} prompt tokens; "
                    "lower max_new_tokens/max_context, use a smaller dtype or spread the model (device_map='auto')"
                ) from None
        # Out of the except block so the traceback's tensors are freed before retrying.
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        half = max(1, len(chunk) // 2)
        self.stats["oom_retries"] += 1
        if half < self.batch_size:
            logger.warning(
                "out of memory with %d rows: batch_size %d -> %d", len(chunk), self.batch_size, half
            )
            self.batch_size = half
        out: dict[int, tuple[list[int], str]] = {}
        for i in range(0, len(chunk), half):
            out.update(self._run_chunk_with_oom_retry(chunk[i : i + half]))
        return out

    def _stop_hit(self, toks: list[int]) -> bool:
        """Whether the tail of ``toks`` holds a stop or end string (a character is at most 4
        byte-level tokens, so the last ``4 len(longest string) + 8`` tokens hold one that just completed)."""
        if not self._watch:
            return False
        tail = self.tokenizer.decode(toks[-self._watch_window :], skip_special_tokens=True)
        return any(s in tail for s in self._watch)

    def _prefill_inputs(self, chunk: list[_Prepared]):
        """The prefill's tensors: ``(input_ids, mask, positions, past)``.

        Row ``i`` is laid out as ``[pad, cached prefix (c_i tokens), pad, uncached tokens]``: the
        pasts are left-padded to the longest cached prefix P, the uncached parts to the longest S;
        ``mask`` (rows x (P + S)) is 1 on real tokens, positions count real tokens only, so a row's
        maths is the same as alone. ``past`` is ``None`` when no row has a cached prefix.
        """
        import torch

        n = len(chunk)
        P = max(p.cached for p in chunk)
        S = max(len(p.ids) - p.cached for p in chunk)
        input_ids = torch.full((n, S), self.pad_id, dtype=torch.long)
        mask = torch.zeros((n, P + S), dtype=torch.long)
        for row, p in enumerate(chunk):
            tail = p.ids[p.cached :]
            input_ids[row, S - len(tail) :] = torch.tensor(tail, dtype=torch.long)
            mask[row, P - p.cached : P] = 1
            mask[row, P + S - len(tail) :] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, P:]
        if P == 0:
            return input_ids, mask, positions, None
        ref = next(p.past for p in chunk if p.past is not None)
        layers = []
        for li, (k0, v0) in enumerate(ref):
            k = k0.new_zeros((n, k0.shape[1], P, k0.shape[3]))
            v = v0.new_zeros((n, v0.shape[1], P, v0.shape[3]))
            for row, p in enumerate(chunk):
                if p.cached:
                    pk, pv = p.past[li]
                    k[row, :, P - p.cached :] = pk[0]
                    v[row, :, P - p.cached :] = pv[0]
            layers.append((k, v))
        return input_ids, mask, positions, _make_cache(layers)

    def _keep_prefix(self, p: _Prepared, cache, row: int, mask, fed: list[int]) -> None:
        """Store row ``row``'s keys/values (its real positions) for the agent's next turn."""
        layers = _cache_layers(cache)
        valid = mask[row].bool()
        if int(valid.sum()) != len(fed) or layers is None:
            return
        self.prefix_cache.store(
            p.key,
            fed,
            [
                (
                    k[row : row + 1][:, :, valid.to(k.device)].clone(),
                    v[row : row + 1][:, :, valid.to(v.device)].clone(),
                )
                for k, v in layers
            ],
        )

    def _run_chunk(self, chunk: list[_Prepared]) -> dict[int, tuple[list[int], str]]:
        """One lockstep decoding loop over ``chunk``; returns ``{index: (new token ids, finish reason)}``."""
        import torch

        model = self._model
        dev = self._input_device
        n = len(chunk)
        input_ids, mask, positions, past = self._prefill_inputs(chunk)
        input_ids, mask, positions = input_ids.to(dev), mask.to(dev), positions.to(dev)
        gens = [torch.Generator().manual_seed(p.rng_seed) for p in chunk]
        new: list[list[int]] = [[] for _ in chunk]
        finish: list[str | None] = [None] * n
        active = list(range(n))
        self.stats["prompt_tokens"] += int(sum(len(p.ids) for p in chunk))
        self.stats["prefilled_tokens"] += int(sum(len(p.ids) - p.cached for p in chunk))
        self.stats["reused_tokens"] += int(sum(p.cached for p in chunk))
        self.stats["rows"] += n
        keep_prefix = self.prefix_cache is not None and self.prefix_cache.enabled
        with torch.inference_mode():
            kw = {self._cache_kw: past} if past is not None else {}
            t_prefill = time.perf_counter()
            out = model(
                input_ids=input_ids,
                attention_mask=mask,
                position_ids=positions,
                use_cache=True,
                **self._prefill_kw,
                **kw,
            )
            self.stats["prefill_seconds"] += time.perf_counter() - t_prefill
            self.stats["forward_passes"] += 1
            cache = _output_cache(out)
            if keep_prefix and _cache_layers(cache) is None:
                logger.info(
                    "%s: its cache has sliding-window or recurrent layers; no prefix caching", self.model_id
                )
                self.prefix_cache.max_bytes = 0
                keep_prefix = False
            last_pos = positions[:, -1]
            while True:
                uniforms = torch.tensor(
                    [torch.rand((), generator=gens[j], dtype=torch.float64).item() for j in active],
                    dtype=torch.float64,
                )
                tokens = sample_tokens(
                    out.logits[:, -1, :], uniforms, self.temperature, self.top_k, self.top_p
                )
                keep = []
                for r, (j, t) in enumerate(zip(active, tokens.tolist())):
                    fed = len(new[j])  # tokens of the reply already fed to the model (in the cache)
                    if t in self.eos_ids:
                        finish[j] = "eos"
                    else:
                        new[j].append(t)
                        if self._stop_hit(new[j]):
                            finish[j] = "stop"
                        elif len(new[j]) >= self.max_new_tokens:
                            finish[j] = "length"
                        else:
                            keep.append(r)
                            continue
                    if keep_prefix:
                        self._keep_prefix(chunk[j], cache, r, mask, chunk[j].ids + new[j][:fed])
                self.stats["new_tokens"] += len(active)
                if not keep:
                    break
                if len(keep) < len(active):
                    # a CPU index works for cache layers on any device (device_map may spread them)
                    cache.batch_select_indices(torch.tensor(keep, dtype=torch.long))
                    sel = torch.tensor(keep, dtype=torch.long, device=dev)
                    mask, tokens, last_pos = mask[sel], tokens.to(dev)[sel], last_pos[sel]
                    active = [active[r] for r in keep]
                mask = torch.cat([mask, mask.new_ones((len(active), 1))], dim=1)
                last_pos = last_pos + 1
                out = model(
                    input_ids=tokens.to(dev).reshape(-1, 1),
                    attention_mask=mask,
                    position_ids=last_pos.reshape(-1, 1),
                    use_cache=True,
                    **{self._cache_kw: cache},
                )
                self.stats["forward_passes"] += 1
        return {p.index: (new[row], finish[row] or "length") for row, p in enumerate(chunk)}

    def __repr__(self) -> str:
        return f"TransformersBackend({self.model_id!r}, {self.decoding()})"


__all__ = [
    "CHATML_TEMPLATE",
    "END_OF_TURN_TOKENS",
    "NO_SYSTEM_TEMPLATE",
    "SAMPLER_VERSION",
    "ChatTemplateError",
    "ContextOverflowError",
    "ModelLoadError",
    "TransformersBackend",
    "build_tiny_chat_model",
    "drop_oldest_turn",
    "merge_system_messages",
    "sample_tokens",
    "turn_sampling_seed",
]
