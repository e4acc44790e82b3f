"""Loading a local ``transformers`` chat model and its tokenizer: the one loader of the project.

Used by the generator's :class:`~generation.backends.hf.TransformersBackend` and by the LLM
detector and judge (:class:`dialfork_metrics.task3.llm.detector.TransformersChat`). Every failure raises
:class:`ModelLoadError` or :class:`ChatTemplateError` with the model's name and what to do.

* :func:`load_config`: the model's config; a missing folder, a folder without ``config.json`` or
  an unknown Hub id (offline or not) is told apart.
* :func:`load_chat_tokenizer`: the tokenizer, with an optional chat-template override (Jinja text
  or a ``.jinja`` file); a tokenizer without a chat template is refused.
* :func:`resolve_device_dtype`: ``"auto"`` picks CUDA with bfloat16 (float16 on GPUs without
  bf16), else the CPU with float32.
* :func:`load_chat_model`: the weights on that device in that dtype, in eval mode; a model larger
  than ``gpu_fraction`` of one GPU is spread with ``device_map="auto"``; multimodal chat models
  (Gemma 3/4, ...) load through ``AutoModelForImageTextToText``.
* :func:`system_role_support`, :func:`context_window`, :func:`eos_token_ids`: what a chat model
  accepts, read from its template, config and vocabulary.

``torch`` and ``transformers`` are imported inside the functions.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from ..errors import GenerationError

logger = logging.getLogger(__name__)

DTYPE_NAMES = {
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
    "half": "float16",
    "float32": "float32",
    "fp32": "float32",
    "float": "float32",
}
"""Accepted ``dtype`` spellings (plus ``"auto"`` and ``torch.dtype`` objects)."""

END_OF_TURN_TOKENS = ("<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|end|>", "<|endoftext|>", "<turn|>")
"""End-of-turn markers of common chat templates, treated as end of sequence when in the vocabulary."""


class ModelLoadError(GenerationError):
    """The model id/path cannot be loaded (not a folder, not on the Hub, offline, no weights).

    Args:
        message: the model's name, what failed and what to do.
        errors: every problem, one line each; defaults to ``[message]``.
    """


class ChatTemplateError(GenerationError):
    """The tokenizer has no chat template, or the template rejects the conversation.

    Args:
        message: the model's name, what failed and what to do.
        errors: every problem, one line each; defaults to ``[message]``.
    """


def looks_like_path(s: str) -> bool:
    """A Hub id is ``name`` or ``org/name``; anything else with a slash is meant as a folder.

    Args:
        s: a model id or path as the user gave it.

    Returns:
        ``True`` when ``s`` starts with ``/``, ``.`` or ``~``, has more than one ``/``, or has a
            backslash.
    """
    return s.startswith(("/", ".", "~")) or s.count("/") > 1 or "\\" in s


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def dtype_errors(dtype: Any) -> list[str]:
    """``[]`` when ``dtype`` is ``"auto"``, a known name or a ``torch.dtype``.

    Args:
        dtype: the requested dtype (a name of :data:`DTYPE_NAMES`, ``"auto"`` or a ``torch.dtype``).

    Returns:
        An empty list, or one message naming the accepted values.
    """
    if dtype == "auto" or dtype in DTYPE_NAMES or type(dtype).__name__ == "dtype":
        return []
    return [f"dtype must be auto, bfloat16, float16 or float32, got {dtype!r}"]


def load_config(model: str, revision: str | None = None, trust_remote_code: bool = False):
    """The model's ``transformers`` config; :class:`ModelLoadError` says why it cannot be had.

    Args:
        model: a local model folder or a Hub model id.
        revision: the Hub revision (branch, tag or commit); ``None`` (default) for the default one.
        trust_remote_code: let ``transformers`` run the model repository's own code (default
            ``False``).

    Returns:
        The ``transformers`` ``PretrainedConfig``.

    Raises:
        ModelLoadError: ``model`` is an existing path that is not a folder with ``config.json``, a
            path-like name with no such folder, or a name that ``AutoConfig`` cannot load (mentions
            ``HF_HUB_OFFLINE`` when it is set).
    """
    from transformers import AutoConfig

    p = Path(model).expanduser()
    if p.exists():
        if not p.is_dir() or not (p / "config.json").is_file():
            raise ModelLoadError(
                f"model {model!r}: {p} is not a model folder (no config.json in it); "
                "pass a folder saved with save_pretrained or a Hub model id"
            )
    elif looks_like_path(model):
        raise ModelLoadError(f"model {model!r}: no such folder ({p.resolve()})")
    try:
        return AutoConfig.from_pretrained(model, revision=revision, trust_remote_code=trust_remote_code)
    except Exception as e:  # noqa: BLE001 - transformers raises OSError/ValueError/HF errors here
        offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False")
        raise ModelLoadError(
            f"cannot load model {model!r}: not a local model folder and not a Hub model id "
            f"that can be fetched now{' (HF_HUB_OFFLINE is set: only cached models load)' if offline else ''}; "
            f"check the spelling, the revision or your Hub access ({type(e).__name__}: {_first_line(e)})"
        ) from None


def load_chat_tokenizer(
    model: str,
    revision: str | None = None,
    trust_remote_code: bool = False,
    chat_template: str | os.PathLike | None = None,
):
    """The model's tokenizer, which must have a chat template (or get ``chat_template``: Jinja
    text, or the path of a ``.jinja`` file).

    Args:
        model: a local model folder or a Hub model id.
        revision: the Hub revision; ``None`` (default) for the default one.
        trust_remote_code: let ``transformers`` run the repository's own code (default ``False``).
        chat_template: a chat template to use instead of the tokenizer's: Jinja text, or the path
            of an existing file (read when the text holds no ``{``); ``None`` (default) keeps the
            tokenizer's.

    Returns:
        The ``transformers`` tokenizer, with a chat template.

    Raises:
        ModelLoadError: ``AutoTokenizer`` cannot load the tokenizer.
        ChatTemplateError: the tokenizer has no chat template and none is given.
    """
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(model, revision=revision, trust_remote_code=trust_remote_code)
    except Exception as e:  # noqa: BLE001
        raise ModelLoadError(
            f"cannot load the tokenizer of {model!r} ({type(e).__name__}: {_first_line(e)})"
        ) from None
    if chat_template is not None:
        text = str(chat_template)
        cp = Path(text).expanduser()
        tok.chat_template = cp.read_text(encoding="utf-8") if "{" not in text and cp.is_file() else text
    if not getattr(tok, "chat_template", None):
        raise ChatTemplateError(
            f"the tokenizer of {model!r} has no chat template (a base model, not a chat model?); "
            "use the model's instruction-tuned variant or pass chat_template= (a Jinja string or .jinja file)"
        )
    return tok


def apply_chat_template(tokenizer, messages: list[dict[str, Any]]) -> str:
    """The prompt text for ``messages``, with the generation prompt (the model's turn) appended.

    Args:
        tokenizer: a tokenizer with a chat template.
        messages: the conversation, ``[{"role", "content"}, ...]``.

    Returns:
        The rendered prompt (not tokenised).
    """
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def system_role_support(tokenizer, model: str = "the model") -> str:
    """``"native"`` when the chat template renders a system message, else ``"merge"`` (the template
    rejects or drops it: fold system messages into user ones).

    Args:
        tokenizer: a tokenizer with a chat template.
        model: the model's name, for the log message (default ``"the model"``).

    Returns:
        ``"native"`` or ``"merge"``.
    """
    probe = [{"role": "system", "content": "DIALFORK_SYSTEM_PROBE"}, {"role": "user", "content": "hello"}]
    try:
        text = apply_chat_template(tokenizer, probe)
    except Exception as e:  # noqa: BLE001 - jinja TemplateError raised by raise_exception()
        logger.info("%s: chat template rejects the system role (%s); merging system messages", model, e)
        return "merge"
    if "DIALFORK_SYSTEM_PROBE" not in text:
        logger.info("%s: chat template drops system messages; merging them into user messages", model)
        return "merge"
    return "native"


def context_window(config, tokenizer=None) -> int | None:
    """The context window in tokens, from the config (or the tokenizer's ``model_max_length``).

    Args:
        config: the model's config (its text config for a multimodal model).
        tokenizer: the tokenizer, consulted when the config names no window (default ``None``).

    Returns:
        The first positive ``max_position_embeddings``, ``n_positions``, ``max_sequence_length`` or
            ``seq_length`` of the config, else the tokenizer's ``model_max_length`` when below 10**7
            (larger values are placeholders), else ``None``.
    """
    cfg = config.get_text_config() if hasattr(config, "get_text_config") else config
    for attr in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        v = getattr(cfg, attr, None)
        if isinstance(v, int) and v > 0:
            return v
    v = getattr(tokenizer, "model_max_length", None)
    if isinstance(v, int) and 0 < v < 10**7:
        return v
    return None


def eos_token_ids(tokenizer, config=None, model: str = "the model") -> set[int]:
    """Token ids that end a turn: the tokenizer's and config's EOS plus :data:`END_OF_TURN_TOKENS`.

    Args:
        tokenizer: the model's tokenizer.
        config: the model's config (its ``eos_token_id``, an int or a list); default ``None``.
        model: the model's name, for the error message (default ``"the model"``).

    Returns:
        The set of non-negative token ids.

    Raises:
        ModelLoadError: neither the tokenizer nor the config gives any end token.
    """
    ids: set[int] = set()

    def add(v):
        if isinstance(v, int) and v >= 0:
            ids.add(v)
        elif isinstance(v, (list, tuple)):
            for x in v:
                add(x)

    add(tokenizer.eos_token_id)
    add(getattr(config, "eos_token_id", None))
    vocab = tokenizer.get_vocab()
    for t in END_OF_TURN_TOKENS:
        if t in vocab:
            add(vocab[t])
    if not ids:
        raise ModelLoadError(f"{model!r}: the tokenizer defines no end-of-sequence token")
    return ids


def resolve_device_dtype(device: Any = "auto", dtype: Any = "auto"):
    """``(device, torch dtype)`` after resolving ``"auto"`` (see the module docstring).

    Args:
        device: ``"auto"`` or ``None`` (CUDA when available, else the CPU), or a device string
            such as ``"cpu"`` or ``"cuda:1"`` (kept as is).
        dtype: ``"auto"`` (bfloat16 on CUDA with bf16 support, float16 on other CUDA GPUs, float32
            on the CPU), a name of :data:`DTYPE_NAMES`, or a ``torch.dtype`` (kept as is).

    Returns:
        ``(device, dtype)``: the device string and the ``torch.dtype``.

    Raises:
        ValueError: ``dtype`` is not ``"auto"``, a known name or a ``torch.dtype``.
    """
    import torch

    dev = (
        "cuda"
        if device in ("auto", None) and torch.cuda.is_available()
        else ("cpu" if device in ("auto", None) else device)
    )
    if isinstance(dtype, torch.dtype):
        return dev, dtype
    if dtype == "auto":
        if str(dev).startswith("cuda"):
            return dev, torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return dev, torch.float32
    if dtype not in DTYPE_NAMES:
        raise ValueError(dtype_errors(dtype)[0])
    return dev, getattr(torch, DTYPE_NAMES[dtype])


def model_bytes(config, dtype, trust_remote_code: bool = False) -> int:
    """Bytes of the weights in ``dtype``, sized on the meta device (0 when the config cannot say).

    Args:
        config: the model's config.
        dtype: the ``torch.dtype`` the weights will have.
        trust_remote_code: let ``transformers`` run the repository's own code (default ``False``).

    Returns:
        The parameter count times the dtype's element size, in bytes; 0 when a causal-LM model
            cannot be built from the config (e.g. a multimodal one).
    """
    import torch
    from accelerate import init_empty_weights
    from transformers import AutoModelForCausalLM

    try:
        with init_empty_weights():
            m = AutoModelForCausalLM.from_config(config, trust_remote_code=trust_remote_code)
    except Exception as e:  # noqa: BLE001 - e.g. a multimodal config: no size, no automatic device_map
        logger.debug("cannot size the model from its config (%s)", e)
        return 0
    return sum(p.numel() for p in m.parameters()) * torch.empty((), dtype=dtype).element_size()


def load_chat_model(
    model: str,
    *,
    config=None,
    device: Any = "auto",
    dtype: Any = "auto",
    device_map: str | dict | None = None,
    revision: str | None = None,
    trust_remote_code: bool = False,
    attn_implementation: str | None = None,
    gpu_fraction: float = 0.85,
):
    """Load the weights for generation; returns ``(model, input_device)``.

    ``input_device`` is where input tensors go (the first parameter's device under a
    ``device_map``). ``device_map=None`` on CUDA switches to ``"auto"`` when the weights exceed
    ``gpu_fraction`` of one GPU's memory.

    Args:
        model: a local model folder or a Hub model id.
        config: the model's config, used to size it; ``None`` (default) loads it when needed.
        device: as for :func:`resolve_device_dtype` (default ``"auto"``).
        dtype: as for :func:`resolve_device_dtype` (default ``"auto"``).
        device_map: a ``transformers`` device map (``"auto"``, a dict); ``None`` (default) puts the
            whole model on ``device`` unless it is too large for one GPU.
        revision: the Hub revision; ``None`` (default) for the default one.
        trust_remote_code: let ``transformers`` run the repository's own code (default ``False``).
        attn_implementation: the attention implementation passed to ``from_pretrained`` (e.g.
            ``"sdpa"``); ``None`` (default) lets ``transformers`` choose.
        gpu_fraction: the share of one GPU's memory above which ``device_map="auto"`` is used
            (default 0.85).

    Returns:
        ``(model, input_device)``: the model in eval mode and the ``torch.device`` for its inputs.

    Raises:
        ModelLoadError: the weights cannot be loaded (missing weights, no network or cache, an
            unsupported configuration), or the config cannot be loaded for sizing.
        ValueError: ``dtype`` is not valid.
    """
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    dev, dt = resolve_device_dtype(device, dtype)
    if device_map is None and str(dev).startswith("cuda") and torch.cuda.is_available():
        total = torch.cuda.get_device_properties(torch.device(dev).index or 0).total_memory
        need = model_bytes(
            config if config is not None else load_config(model, revision, trust_remote_code),
            dt,
            trust_remote_code,
        )
        if need > gpu_fraction * total:
            logger.warning(
                "%s needs %.1f GiB > %.0f%% of one GPU: device_map='auto' (%d GPU(s)%s)",
                model,
                need / 2**30,
                100 * gpu_fraction,
                torch.cuda.device_count(),
                ", the rest offloaded to the CPU" if torch.cuda.device_count() == 1 else "",
            )
            device_map = "auto"
    kw: dict[str, Any] = {"revision": revision, "trust_remote_code": trust_remote_code}
    if attn_implementation:
        kw["attn_implementation"] = attn_implementation
    if device_map is not None:
        kw["device_map"] = device_map
    new_kw = tuple(int(x) for x in transformers.__version__.split(".")[:2]) >= (4, 56)
    kw["dtype" if new_kw else "torch_dtype"] = dt
    t0 = time.perf_counter()
    try:
        m = AutoModelForCausalLM.from_pretrained(model, **kw)
    except ValueError as e:
        if "Unrecognized configuration class" not in str(e):
            raise ModelLoadError(f"cannot load the weights of {model!r}: {e}") from None
        from transformers import AutoModelForImageTextToText  # multimodal chat models (Gemma 3/4, ...)

        m = AutoModelForImageTextToText.from_pretrained(model, **kw)
    except OSError as e:
        raise ModelLoadError(
            f"cannot load the weights of {model!r}: {_first_line(e)} (a folder needs the weights "
            "saved by save_pretrained; a Hub id needs network access or the cache)"
        ) from None
    if device_map is None:
        m = m.to(dev)
    m.eval()
    input_device = next(m.parameters()).device if device_map is not None else torch.device(dev)
    logger.info("loaded %s on %s (%s) in %.1f s", model, input_device, dt, time.perf_counter() - t0)
    return m, input_device


__all__ = [
    "DTYPE_NAMES",
    "END_OF_TURN_TOKENS",
    "ChatTemplateError",
    "ModelLoadError",
    "apply_chat_template",
    "context_window",
    "dtype_errors",
    "eos_token_ids",
    "load_chat_model",
    "load_chat_tokenizer",
    "load_config",
    "looks_like_path",
    "model_bytes",
    "resolve_device_dtype",
    "system_role_support",
]
