"""Seeded per-row sampling for lockstep batched decoding (pure functions over tensors).

:func:`turn_sampling_seed` gives each (dialogue seed, turn, role) its own random stream, and
:func:`sample_tokens` draws one token per row from that row's logits and uniform only, so a row's
text does not depend on the batch it was decoded in. Used by
:class:`generation.backends.hf.TransformersBackend`; :func:`turn_sampling_seed` also seeds the
requests of :class:`generation.backends.openai_backend.OpenAIBackend`.
"""

from __future__ import annotations

import hashlib

SAMPLER_VERSION = "dialfork-lockstep-1"
"""Identifies the sampling algorithm (:func:`sample_tokens` + :func:`turn_sampling_seed`)."""


def turn_sampling_seed(seed: int, turn_index: int, role: str) -> int:
    """The seed of one turn's random stream: BLAKE2b of ``(seed, turn_index, role)``, 63 bits.

    Stable across processes, machines and Python versions (no ``hash()``).

    Args:
        seed: the dialogue's seed.
        turn_index: the 0-based position of the turn in the dialogue.
        role: the speaking agent, ``"system"`` or ``"user"``.

    Returns:
        An integer in ``[0, 2**63)``.
    """
    key = f"dialfork-turn\x1f{int(seed)}\x1f{int(turn_index)}\x1f{role}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") >> 1


def sample_tokens(logits, uniforms, temperature: float, top_k: int, top_p: float):
    """Sample one token per row of ``logits`` (B, V) with the given uniforms (B,) in [0, 1).

    Temperature scaling, then top-k (``top_k <= 0`` or ``>= V``: all tokens), then top-p (nucleus:
    the smallest prefix of the probability-sorted tokens whose mass reaches ``top_p``; the most
    probable token is always kept), then the inverse CDF of the renormalised distribution at the
    row's uniform. ``temperature == 0`` is greedy (uniforms unused). Computed in float32/float64
    whatever the model's dtype; row ``i``'s result depends only on ``logits[i]`` and ``uniforms[i]``.

    Args:
        logits: a ``(B, V)`` tensor of next-token logits.
        uniforms: a ``(B,)`` tensor of numbers in [0, 1), one per row.
        temperature: >= 0; 0 is greedy.
        top_k: keep the ``top_k`` most probable tokens (``None``, <= 0 or >= V: all).
        top_p: nucleus mass in (0, 1] (``None`` or >= 1: no nucleus cut).

    Returns:
        A ``(B,)`` long tensor of token ids.
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


__all__ = ["SAMPLER_VERSION", "sample_tokens", "turn_sampling_seed"]
