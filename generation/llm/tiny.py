"""A tiny randomly initialised chat model, built locally from a config (nothing is downloaded),
for benchmarks and offline dry runs of the pipeline on the CPU (``benchmarks/bench_lockstep.py``,
``benchmarks/gpu_generation.py``); the tests build theirs from ``tests/fixtures/``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

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

    Args:
        path: the folder to write (created if needed); model and tokenizer files are saved there.
        chat_template: the Jinja chat template (default :data:`CHATML_TEMPLATE`; ``None``: none).
            Its end token is ``<|im_end|>`` for ChatML or no template, else ``<end_of_turn>``.
        hidden_size: the model width (default 32; the MLP is twice as wide).
        num_layers: transformer layers (default 2).
        num_heads: attention heads (default 4; key/value heads are half as many, at least 1).
        max_positions: the context window in tokens (default 4096).
        seed: the torch seed of the random weights (default 0; the global torch RNG is left alone).
        train_texts: texts to learn BPE merges from; ``None`` (default): no merges.
        vocab_size: the BPE vocabulary size when ``train_texts`` is given (default 2000).

    Returns:
        ``path`` as a :class:`~pathlib.Path`.
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
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size, initial_alphabet=alphabet, show_progress=False, special_tokens=[]
        )
        tok.train_from_iterator(list(train_texts), trainer=trainer)
    else:
        tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(specials)
    kw = {"chat_template": chat_template} if chat_template else {}
    eos = "<|im_end|>" if chat_template is None or "im_end" in chat_template else "<end_of_turn>"
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token=eos, **kw
    )
    cfg = LlamaConfig(
        vocab_size=len(fast),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=max(1, num_heads // 2),
        max_position_embeddings=max_positions,
        pad_token_id=fast.pad_token_id,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        tie_word_embeddings=False,
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


__all__ = ["CHATML_TEMPLATE", "NO_SYSTEM_TEMPLATE", "build_tiny_chat_model"]
