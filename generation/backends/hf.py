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
3. The requests are sorted by prompt length and cut into chunks of ``batch_size``; each chunk runs
   ONE lockstep decoding loop: a left-padded prefill, then one forward pass per new token for all
   rows still running, with the KV cache; a row that emits an end-of-turn token, a stop string or
   ``max_new_tokens`` tokens leaves the batch (its rows are dropped from the cache).
4. Sampling is our own (:func:`sample_tokens`), not ``model.generate``: temperature, then top-k,
   then top-p, then an inverse-CDF draw with ONE uniform number per row and token taken from the
   row's own ``torch.Generator``, seeded by :func:`turn_sampling_seed` from (dialogue seed, turn
   index, role). A row's tokens therefore depend only on its own logits and its own random stream,
   never on the other rows, the batch size or the chunking.
5. CUDA out of memory halves the chunk and retries it (the random streams are re-created from the
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
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import GenerationError
from .base import TurnRequest, decoding_errors

logger = logging.getLogger(__name__)

CONTEXT_OVERFLOW_MODES = ("truncate", "error")
_DTYPE_NAMES = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16",
                "half": "float16", "float32": "float32", "fp32": "float32", "float": "float32"}
SYSTEM_ROLE_MODES = ("auto", "native", "merge")
#: End-of-turn markers of common chat templates, treated as end of sequence when in the vocabulary.
END_OF_TURN_TOKENS = ("<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|end|>", "<|endoftext|>", "<turn|>")
SAMPLER_VERSION = "dialfork-lockstep-1"
"""Identifies the sampling algorithm (:func:`sample_tokens` + :func:`turn_sampling_seed`)."""


class ModelLoadError(GenerationError):
    """The model id/path cannot be loaded (not a folder, not on the Hub, offline, no weights)."""


class ChatTemplateError(GenerationError):
    """The tokenizer has no chat template, or the template rejects the conversation."""


class ContextOverflowError(GenerationError):
    """A prompt does not fit the model's context window (``context_overflow="error"``, or nothing left to drop)."""


# ---------------------------------------------------------------------------------------------
# Pure helpers
# ---------------------------------------------------------------------------------------------
def turn_sampling_seed(seed: int, turn_index: int, role: str) -> int:
    """The seed of one turn's random stream: BLAKE2b of ``(seed, turn_index, role)``, 63 bits.

    Stable across processes, machines and Python versions (no ``hash()``)."""
    key = f"dialfork-turn\x1f{int(seed)}\x1f{int(turn_index)}\x1f{role}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") >> 1


def sample_tokens(logits, uniforms, temperature: float, top_k: int, top_p: float):
    """Sample one token per row of ``logits`` (B, V) with the given uniforms (B,) in [0, 1).

    Temperature scaling, then top-k (``top_k <= 0`` or ``>= V``: all tokens), then top-p (nucleus:
    the smallest prefix of the probability-sorted tokens whose mass reaches ``top_p``; the most
    probable token is always kept), then the inverse CDF of the renormalised distribution at the
    row's uniform. ``temperature == 0`` is greedy (uniforms unused). Computed in float32/float64
    whatever the model's dtype; row ``i``'s result depends only on ``logits[i]`` and ``uniforms[i]``.
    """
    import torch

    logits = logits.float()
    if temperature == 0:
        return logits.argmax(dim=-1)
    vocab = logits.shape[-1]
    k = vocab if top_k is None or top_k <= 0 or top_k >= vocab else int(top_k)
    vals, idx = torch.topk(logits / float(temperature), k, dim=-1)  # sorted, descending
    probs = torch.softmax(vals, dim=-1)
    if top_p is not None and top_p < 1.0:
        before = probs.cumsum(dim=-1) - probs  # mass of the strictly more probable tokens
        keep = before < float(top_p)
        keep[:, 0] = True
        probs = probs * keep
    cdf = probs.double().cumsum(dim=-1)
    u = uniforms.to(device=cdf.device, dtype=torch.float64).reshape(-1, 1) * cdf[:, -1:]
    choice = torch.searchsorted(cdf, u, right=True)
    last_kept = (probs > 0).sum(dim=-1, keepdim=True) - 1
    choice = torch.minimum(choice, last_kept.clamp(min=0))
    return idx.gather(1, choice).squeeze(1)


def merge_system_messages(messages: Sequence[Mapping[str, str]], joiner: str = "\n\n") -> list[dict[str, str]]:
    """Fold ``system`` messages into user messages, for chat templates without a system role.

    Each run of consecutive system messages (joined with ``joiner``) goes to a user message
    adjacent to the place where it was given, so an instruction injected before turn t_k is read at
    turn t_k and not earlier or later:

    * if a ``user`` message follows it, the text is prepended to that message;
    * else (an ``assistant`` message follows, or the conversation ends there) it is appended to the
      ``user`` message just before it, when there is one;
    * else it becomes a ``user`` message of its own at that place.

    Examples: ``[S, U1, A1, U2, S_inj]`` -> ``[U1', A1, U2 + S_inj]`` with ``U1' = S + U1``;
    ``[S, A1, U1]`` -> ``[S (as user), A1, U1]``. The result never holds two consecutive user messages.
    """
    out: list[dict[str, str]] = []
    pending: list[str] = []
    for m in messages:
        role, content = m["role"], m["content"]
        if role == "system":
            pending.append(content)
            continue
        if pending:
            text = joiner.join(pending)
            pending = []
            if role == "user":
                content = text + joiner + content if content else text
            elif out and out[-1]["role"] == "user":
                out[-1] = {"role": "user", "content": out[-1]["content"] + joiner + text}
            else:
                out.append({"role": "user", "content": text})
        out.append({"role": role, "content": content})
    if pending:
        text = joiner.join(pending)
        if out and out[-1]["role"] == "user":
            out[-1] = {"role": "user", "content": out[-1]["content"] + joiner + text}
        else:
            out.append({"role": "user", "content": text})
    return out


def drop_oldest_turn(messages: Sequence[Mapping[str, str]]) -> list[dict[str, str]] | None:
    """``messages`` without its oldest non-system message; ``None`` when only the last message
    (the one being answered) and system messages remain."""
    non_system = [i for i, m in enumerate(messages) if m["role"] != "system"]
    if len(non_system) <= 1:
        return None
    drop = non_system[0]
    return [dict(m) for i, m in enumerate(messages) if i != drop]


def _looks_like_path(s: str) -> bool:
    """A Hub id is ``name`` or ``org/name``; anything else with a slash is meant as a folder."""
    return s.startswith(("/", ".", "~")) or s.count("/") > 1 or "\\" in s


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
            if not isinstance(m, Mapping) or m.get("role") not in ("system", "user", "assistant") or not isinstance(
                m.get("content"), str
            ):
                errs.append(f"{where}, message {j}: expected {{'role': system|user|assistant, 'content': str}}, got {m!r}")
        if not isinstance(r.seed, int) or isinstance(r.seed, bool):
            errs.append(f"{where}: seed must be an int, got {r.seed!r}")
    return errs


def _output_cache(out):
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


@dataclass
class _Prepared:
    index: int
    ids: list[int]
    rng_seed: int
    truncated: int


# ---------------------------------------------------------------------------------------------
# The backend
# ---------------------------------------------------------------------------------------------
class TransformersBackend:
    """Chat generation with a local or Hub ``transformers`` model (see the module docstring).

    ``backend.generate(requests)`` returns one utterance per :class:`TurnRequest` and writes, per
    request, ``extra["finish_reason"]`` (``eos``/``stop``/``length``), ``extra["truncated_messages"]``,
    ``extra["prompt_tokens"]`` and ``extra["new_tokens"]``; ``backend.stats`` sums the work done.

    Parameters
    ----------
    model:
        Hub id or local folder of a causal chat LM (its tokenizer must have a chat template, or
        pass ``chat_template``).
    temperature, top_p, top_k, max_new_tokens:
        Decoding (SPEC section 3 defaults 1.3 / 0.95 / 64). ``top_k=0`` disables top-k,
        ``top_p=1`` disables top-p, ``temperature=0`` is greedy.
    stop:
        Stop strings: generation of a turn ends at the first one, which is cut from the text
        (e.g. ``"\nUser:"`` for a model that starts writing the other side's turn).
    end_strings:
        Strings that end generation but stay in the text (default: the engine's closing token
        ``[END]``, which the engine needs to see to end the dialogue).
    batch_size:
        Rows per lockstep chunk (halved automatically on CUDA out-of-memory).
    max_batch_tokens:
        Also cap a chunk's rows so that rows x (longest prompt + ``max_new_tokens``) stays under
        this many tokens (bounds the KV cache and prefill memory; ``None``: no cap).
    device, dtype, device_map:
        ``"auto"`` picks CUDA + bfloat16 when available, else CPU + float32; ``device_map`` is
        passed to ``from_pretrained`` (``None``: automatic, see the module docstring).
    chat_template:
        A Jinja template string, or a path to a ``.jinja`` file, overriding the tokenizer's.
    system_role:
        ``"auto"`` (probe the template), ``"native"`` (pass system messages through) or
        ``"merge"`` (always :func:`merge_system_messages`).
    context_overflow:
        ``"truncate"`` (drop the oldest non-system messages, recorded) or ``"error"``.
    max_context:
        Context window in tokens (default: the model config's ``max_position_embeddings``).
    name:
        Recorded as the records' ``generator`` (default: ``model`` as given).
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
        if dtype != "auto" and dtype not in _DTYPE_NAMES and type(dtype).__name__ != "dtype":
            errs.append(f"dtype must be auto, bfloat16, float16 or float32, got {dtype!r}")
        if max_batch_tokens is not None and not (isinstance(max_batch_tokens, int) and max_batch_tokens >= 1):
            errs.append(f"max_batch_tokens must be an integer >= 1 or None, got {max_batch_tokens!r}")
        if system_role not in SYSTEM_ROLE_MODES:
            errs.append(f"system_role must be one of {SYSTEM_ROLE_MODES}, got {system_role!r}")
        if context_overflow not in CONTEXT_OVERFLOW_MODES:
            errs.append(f"context_overflow must be one of {CONTEXT_OVERFLOW_MODES}, got {context_overflow!r}")
        if max_context is not None and not (isinstance(max_context, int) and max_context > 1):
            errs.append(f"max_context must be an integer > 1, got {max_context!r}")
        if errs:
            raise ValueError("TransformersBackend: " + "; ".join(errs))
        self.model_id = model
        self.name = name or model
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
        self.exact = False  # LLM forks are not guaranteed to differ at t_k (the engine only warns)
        self.stats = {"prompt_tokens": 0, "new_tokens": 0, "forward_passes": 0, "rows": 0, "seconds": 0.0, "oom_retries": 0}

        self.config = self._load_config()
        self.tokenizer = self._load_tokenizer(chat_template)
        self.system_role = self._resolve_system_role(system_role)
        self.max_context = max_context or self._window_from_config()
        self.eos_ids = self._eos_ids()
        self._watch = self.stop + self.end_strings
        self._watch_window = 4 * max((len(s) for s in self._watch), default=0) + 8
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else min(self.eos_ids)

    # -- loading -------------------------------------------------------------------------------
    def _load_config(self):
        from transformers import AutoConfig

        p = Path(self.model_id).expanduser()
        if p.exists():
            if not p.is_dir() or not (p / "config.json").is_file():
                raise ModelLoadError(
                    f"model {self.model_id!r}: {p} is not a model folder (no config.json in it); "
                    "pass a folder saved with save_pretrained or a Hub model id"
                )
        elif _looks_like_path(self.model_id):
            raise ModelLoadError(f"model {self.model_id!r}: no such folder ({p.resolve()})")
        try:
            return AutoConfig.from_pretrained(
                self.model_id, revision=self.revision, trust_remote_code=self.trust_remote_code
            )
        except Exception as e:  # noqa: BLE001 - transformers raises OSError/ValueError/HF errors here
            offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False")
            raise ModelLoadError(
                f"cannot load model {self.model_id!r}: not a local model folder and not a Hub model id "
                f"that can be fetched now{' (HF_HUB_OFFLINE is set: only cached models load)' if offline else ''}; "
                f"check the spelling, the revision or your Hub access ({type(e).__name__}: {str(e).splitlines()[0]})"
            ) from None

    def _load_tokenizer(self, chat_template: str | None):
        from transformers import AutoTokenizer

        try:
            tok = AutoTokenizer.from_pretrained(
                self.model_id, revision=self.revision, trust_remote_code=self.trust_remote_code
            )
        except Exception as e:  # noqa: BLE001
            raise ModelLoadError(
                f"cannot load the tokenizer of {self.model_id!r} ({type(e).__name__}: {str(e).splitlines()[0]})"
            ) from None
        if chat_template is not None:
            cp = Path(chat_template).expanduser()
            tok.chat_template = cp.read_text(encoding="utf-8") if "{" not in chat_template and cp.is_file() else chat_template
        if not getattr(tok, "chat_template", None):
            raise ChatTemplateError(
                f"the tokenizer of {self.model_id!r} has no chat template (a base model, not a chat model?); "
                "use the model's instruction-tuned variant or pass chat_template= (a Jinja string or .jinja file)"
            )
        return tok

    def _apply_template(self, messages: list[dict[str, str]]) -> str:
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def _resolve_system_role(self, mode: str) -> str:
        if mode != "auto":
            return mode
        probe = [{"role": "system", "content": "DIALFORK_SYSTEM_PROBE"}, {"role": "user", "content": "hello"}]
        try:
            text = self._apply_template(probe)
        except Exception as e:  # noqa: BLE001 - jinja TemplateError raised by raise_exception()
            logger.info("%s: chat template rejects the system role (%s); merging system messages", self.model_id, e)
            return "merge"
        if "DIALFORK_SYSTEM_PROBE" not in text:
            logger.info("%s: chat template drops system messages; merging them into user messages", self.model_id)
            return "merge"
        return "native"

    def _window_from_config(self) -> int:
        cfg = self.config.get_text_config() if hasattr(self.config, "get_text_config") else self.config
        for attr in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
            v = getattr(cfg, attr, None)
            if isinstance(v, int) and v > 0:
                return v
        v = getattr(self.tokenizer, "model_max_length", None)
        if isinstance(v, int) and 0 < v < 10**7:
            return v
        raise ModelLoadError(f"{self.model_id!r}: cannot tell the context window from its config; pass max_context=")

    def _eos_ids(self) -> set[int]:
        ids: set[int] = set()

        def add(v):
            if isinstance(v, int) and v >= 0:
                ids.add(v)
            elif isinstance(v, (list, tuple)):
                for x in v:
                    add(x)

        add(self.tokenizer.eos_token_id)
        add(getattr(self.config, "eos_token_id", None))
        vocab = self.tokenizer.get_vocab()
        for t in END_OF_TURN_TOKENS:
            if t in vocab:
                add(vocab[t])
        if not ids:
            raise ModelLoadError(f"{self.model_id!r}: the tokenizer defines no end-of-sequence token")
        return ids

    def resolved_device_dtype(self):
        """``(device, torch dtype)`` after resolving ``"auto"``."""
        import torch

        dev = self._device_req
        if dev == "auto":
            dev = "cuda" if torch.cuda.is_available() else "cpu"
        dt = self._dtype_req
        if isinstance(dt, torch.dtype):
            return dev, dt
        if dt == "auto":
            if str(dev).startswith("cuda"):
                return dev, torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
            return dev, torch.float32
        return dev, getattr(torch, _DTYPE_NAMES[dt])

    def _model_bytes(self, dtype) -> int:
        import torch
        from accelerate import init_empty_weights
        from transformers import AutoModelForCausalLM

        try:
            with init_empty_weights():
                m = AutoModelForCausalLM.from_config(self.config, trust_remote_code=self.trust_remote_code)
        except Exception as e:  # noqa: BLE001 - e.g. a multimodal config: no size, no automatic device_map
            logger.debug("cannot size %s from its config (%s)", self.model_id, e)
            return 0
        n = sum(p.numel() for p in m.parameters())
        return n * torch.empty((), dtype=dtype).element_size()

    def load(self):
        """Load the weights (done lazily by the first :meth:`generate`); returns the model."""
        if self._model is not None:
            return self._model
        import torch
        from transformers import AutoModelForCausalLM

        device, dtype = self.resolved_device_dtype()
        device_map = self._device_map_req
        if device_map is None and str(device).startswith("cuda") and torch.cuda.is_available():
            idx = torch.device(device).index or 0
            total = torch.cuda.get_device_properties(idx).total_memory
            need = self._model_bytes(dtype)
            if need > self.gpu_fraction * total:
                logger.warning("%s needs %.1f GiB > %.0f%% of one GPU: device_map='auto' (%d GPU(s)%s)",
                               self.model_id, need / 2**30, 100 * self.gpu_fraction, torch.cuda.device_count(),
                               ", the rest offloaded to the CPU" if torch.cuda.device_count() == 1 else "")
                device_map = "auto"
        kw: dict[str, Any] = {"revision": self.revision, "trust_remote_code": self.trust_remote_code}
        if self.attn_implementation:
            kw["attn_implementation"] = self.attn_implementation
        if device_map is not None:
            kw["device_map"] = device_map
        import transformers

        dtype_kw = "dtype" if tuple(int(x) for x in transformers.__version__.split(".")[:2]) >= (4, 56) else "torch_dtype"
        kw[dtype_kw] = dtype
        t0 = time.perf_counter()
        try:
            model = AutoModelForCausalLM.from_pretrained(self.model_id, **kw)
        except ValueError as e:
            if "Unrecognized configuration class" not in str(e):
                raise ModelLoadError(f"cannot load the weights of {self.model_id!r}: {e}") from None
            from transformers import AutoModelForImageTextToText  # multimodal chat models (Gemma 3/4, ...)

            model = AutoModelForImageTextToText.from_pretrained(self.model_id, **kw)
        except OSError as e:
            raise ModelLoadError(f"cannot load the weights of {self.model_id!r}: {str(e).splitlines()[0]}") from None
        if device_map is None:
            model = model.to(device)
        model.eval()
        self._model = model
        import inspect

        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"  # renamed in transformers 5.x
        # compute the prefill's logits at the last position only (the full (B, L, V) tensor is large)
        keep_kw = next((k for k in ("logits_to_keep", "num_logits_to_keep") if k in params), None)
        self._prefill_kw = {keep_kw: 1} if keep_kw else {}
        self._input_device = next(model.parameters()).device if device_map is not None else torch.device(device)
        logger.info("loaded %s on %s (%s) in %.1f s", self.model_id, self._input_device, dtype,
                    time.perf_counter() - t0)
        return model

    # -- Backend interface ---------------------------------------------------------------------
    def decoding(self) -> dict[str, Any]:
        """The record's ``decoding`` fields (SPEC section 4)."""
        return {"temperature": self.temperature, "top_p": self.top_p, "top_k": self.top_k,
                "max_new_tokens": self.max_new_tokens}

    def describe(self) -> dict[str, Any]:
        """Everything that determines the text, for a run manifest."""
        device, dtype = self.resolved_device_dtype()
        return {**self.decoding(), "backend": "transformers", "model": self.model_id, "revision": self.revision,
                "stop": list(self.stop), "end_strings": list(self.end_strings), "system_role": self.system_role, "context_overflow": self.context_overflow,
                "max_context": self.max_context, "device": str(device), "dtype": str(dtype).replace("torch.", ""),
                "sampler": SAMPLER_VERSION}

    def render_prompt(self, messages: Sequence[Mapping[str, str]]) -> str:
        """The exact text the model reads for ``messages`` (chat template + generation prompt)."""
        msgs = [{"role": m["role"], "content": m["content"]} for m in messages]
        if self.system_role == "merge":
            msgs = merge_system_messages(msgs)
        try:
            return self._apply_template(msgs)
        except Exception as e:  # noqa: BLE001 - jinja2.TemplateError and template-raised errors
            raise ChatTemplateError(f"the chat template of {self.model_id!r} rejects the conversation: {e}") from None

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def prepare(self, request: TurnRequest) -> tuple[list[int], int]:
        """Token ids of the request's prompt and how many oldest messages were dropped to fit."""
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
        """One utterance per request, in order (see the module docstring)."""
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
                logger.warning("dialogue %s turn %d: dropped the %d oldest messages to fit %d tokens",
                               r.dialogue_key, r.turn_index, dropped, self.max_context)
            prepared.append(_Prepared(i, ids, turn_sampling_seed(r.seed, r.turn_index, r.role), dropped))
        self.load()
        order = sorted(prepared, key=lambda p: -len(p.ids))  # similar lengths together: little padding
        results: dict[int, tuple[list[int], str]] = {}
        t0 = time.perf_counter()
        start = 0
        while start < len(order):
            n = self.batch_size
            if self.max_batch_tokens:  # order is longest first: this chunk's width is its first prompt
                n = max(1, min(n, self.max_batch_tokens // (len(order[start].ids) + self.max_new_tokens)))
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
            logger.warning("out of memory with %d rows: batch_size %d -> %d", len(chunk), self.batch_size, half)
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

    def _run_chunk(self, chunk: list[_Prepared]) -> dict[int, tuple[list[int], str]]:
        """One lockstep decoding loop over ``chunk``; returns ``{index: (new token ids, finish reason)}``."""
        import torch

        model = self._model
        dev = self._input_device
        n = len(chunk)
        width = max(len(p.ids) for p in chunk)
        input_ids = torch.full((n, width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((n, width), dtype=torch.long)
        for row, p in enumerate(chunk):
            input_ids[row, width - len(p.ids) :] = torch.tensor(p.ids, dtype=torch.long)
            mask[row, width - len(p.ids) :] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        input_ids, mask, positions = input_ids.to(dev), mask.to(dev), positions.to(dev)
        gens = [torch.Generator().manual_seed(p.rng_seed) for p in chunk]
        new: list[list[int]] = [[] for _ in chunk]
        finish: list[str | None] = [None] * n
        active = list(range(n))
        self.stats["prompt_tokens"] += int(sum(len(p.ids) for p in chunk))
        self.stats["rows"] += n
        with torch.inference_mode():
            out = model(input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=True,
                        **self._prefill_kw)
            self.stats["forward_passes"] += 1
            cache = _output_cache(out)
            last_pos = positions[:, -1]
            while True:
                uniforms = torch.tensor(
                    [torch.rand((), generator=gens[j], dtype=torch.float64).item() for j in active], dtype=torch.float64
                )
                tokens = sample_tokens(out.logits[:, -1, :], uniforms, self.temperature, self.top_k, self.top_p)
                keep = []
                for r, (j, t) in enumerate(zip(active, tokens.tolist())):
                    if t in self.eos_ids:
                        finish[j] = "eos"
                        continue
                    new[j].append(t)
                    if self._stop_hit(new[j]):
                        finish[j] = "stop"
                    elif len(new[j]) >= self.max_new_tokens:
                        finish[j] = "length"
                    else:
                        keep.append(r)
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
                out = model(input_ids=tokens.to(dev).reshape(-1, 1), attention_mask=mask,
                            position_ids=last_pos.reshape(-1, 1), use_cache=True, **{self._cache_kw: cache})
                self.stats["forward_passes"] += 1
        return {p.index: (new[row], finish[row] or "length") for row, p in enumerate(chunk)}

    def __repr__(self) -> str:
        return f"TransformersBackend({self.model_id!r}, {self.decoding()})"


__all__ = [
    "CHATML_TEMPLATE",
    "NO_SYSTEM_TEMPLATE",
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


# ---------------------------------------------------------------------------------------------
# A tiny random chat model, for tests, benchmarks and offline dry runs of the pipeline
# ---------------------------------------------------------------------------------------------
CHATML_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""ChatML (system, user and assistant roles)."""

NO_SYSTEM_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}"
    "{% if m['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
    "{% if (m['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "<start_of_turn>{{ 'model' if m['role'] == 'assistant' else 'user' }}\n{{ m['content'] }}<end_of_turn>\n"
    "{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)
"""A Gemma-2-like template: no system role, strict user/assistant alternation starting with user."""


def build_tiny_chat_model(
    path: str | os.PathLike,
    chat_template: str | None = CHATML_TEMPLATE,
    hidden_size: int = 32,
    num_layers: int = 2,
    num_heads: int = 4,
    max_positions: int = 4096,
    seed: int = 0,
    train_texts: Sequence[str] | None = None,
    vocab_size: int = 2000,
) -> Path:
    """Save a randomly initialised Llama model with a byte-level BPE tokenizer to ``path``.

    The tokenizer has the 256 byte symbols plus special tokens (``<pad>``, ``<s>``, ``<|im_start|>``,
    ``<|im_end|>``, ``<start_of_turn>``, ``<end_of_turn>``); without ``train_texts`` it has no merges
    (one token per UTF-8 byte), with them it learns BPE merges up to ``vocab_size`` tokens from those
    texts (shorter prompts, faster tests). ``chat_template=None`` saves it without a chat template.
    Nothing is downloaded. The model writes random tokens: it exercises shapes, padding, caching,
    sampling and timing, not language.
    """
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    path = Path(path)
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    specials = ["<pad>", "<s>", "<|im_start|>", "<|im_end|>", "<start_of_turn>", "<end_of_turn>"]
    if train_texts:
        from tokenizers import trainers

        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=alphabet, show_progress=False,
                                      special_tokens=[])
        tok.train_from_iterator(list(train_texts), trainer=trainer)
    else:
        tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(specials)
    kw = {"chat_template": chat_template} if chat_template else {}
    eos = "<|im_end|>" if chat_template is None or "im_end" in chat_template else "<end_of_turn>"
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token=eos, **kw)
    cfg = LlamaConfig(
        vocab_size=len(fast), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers, num_attention_heads=num_heads, num_key_value_heads=max(1, num_heads // 2),
        max_position_embeddings=max_positions, pad_token_id=fast.pad_token_id, bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id, tie_word_embeddings=False,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(cfg)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    fast.save_pretrained(path)
    if not chat_template:
        for f in ("chat_template.jinja", "chat_template.json"):
            (path / f).unlink(missing_ok=True)
    return path
