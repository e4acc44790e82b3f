"""Seeded per-row sampling for lockstep batched decoding (pure functions over tensors).

:func:`turn_sampling_seed` gives each (dialogue seed, turn, role) its own random stream, and
:func:`sample_tokens` draws one token per row from that row's logits and uniform only, so a row's
text does not depend on the batch it was decoded in. Used by
:class:`generation.backends.hf.TransformersBackend`; :func:`turn_sampling_seed` also seeds the
requests of :class:`generation.backends.openai_backend.OpenAIBackend`. In ``reword`` prefix mode a
fork's prefix turn is, at a set hazard (:func:`prefix_turn_reworded`), drawn from another stream
(:func:`request_salt`), so the LLM realises the same dialogue act with another surface form.
"""

from __future__ import annotations

import hashlib

SAMPLER_VERSION = "dialfork-lockstep-1"
"""Identifies the sampling algorithm (:func:`sample_tokens` + :func:`turn_sampling_seed`)."""


def turn_sampling_seed(seed: int, turn_index: int, role: str, salt: str = "") -> int:
    """The seed of one turn's random stream: BLAKE2b of ``(seed, turn_index, role[, salt])``, 63 bits.

    Stable across processes, machines and Python versions (no ``hash()``).

    Args:
        seed: the dialogue's seed.
        turn_index: the 0-based position of the turn in the dialogue.
        role: the speaking agent, ``"system"`` or ``"user"``.
        salt: empty for the dialogue's own stream (a replayed fork prefix draws D+'s numbers);
            a fork's :func:`reword_salt` for a reworded prefix turn (another stream, so another
            surface form).

    Returns:
        An integer in ``[0, 2**63)``.
    """
    key = f"dialfork-turn\x1f{int(seed)}\x1f{int(turn_index)}\x1f{role}"
    if salt:
        key += f"\x1f{salt}"
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big") >> 1


def _reword_uniform(seed: int, turn_index: int, salt: str) -> float:
    """A number in [0, 1) drawn from ``(seed, turn_index, salt)`` alone (BLAKE2b, 53 bits)."""
    key = f"dialfork-reword\x1f{int(seed)}\x1f{int(turn_index)}\x1f{salt}".encode()
    return (int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") >> 11) / float(1 << 53)


def reword_salt(htype: str, k: int) -> str:
    """The salt of one fork's rewording draws: its type and k (the 16 forks of a source are
    reworded independently of one another).

    Args:
        htype: The fork's type code.
        k: The fork position (1..4).

    Returns:
        ``"<htype>-k<k>"``, e.g. ``"GR-k2"``.
    """
    return f"{htype}-k{int(k)}"


def prefix_turn_reworded(seed: int, turn_index: int, rate: float, salt: str) -> bool:
    """Whether a fork's prefix turn (before t_k) is realised with another surface form in ``reword``
    mode: the turn's own draw or any earlier prefix turn's draw falls below ``rate``.

    A rewording cascades, as in a real replay (one changed turn changes the context of every later
    one), so ``rate`` is the per-turn hazard of the FIRST reworded turn, the same law as the
    template backend's. Stateless (recomputed from the seed), so it survives a resume.

    Args:
        seed: the dialogue's seed (a fork's is its source's).
        turn_index: the 0-based position of the turn.
        rate: the per-turn probability in [0, 1].
        salt: the fork's :func:`reword_salt`.

    Returns:
        bool: True when the turn is reworded.
    """
    if rate <= 0:
        return False
    return any(_reword_uniform(seed, j, salt) < rate for j in range(int(turn_index) + 1))


def request_salt(request) -> str:
    """The sampling salt of a :class:`~generation.backends.base.TurnRequest`: the fork's
    :func:`reword_salt` when the request is a prefix turn of a fork in ``reword`` mode that
    :func:`prefix_turn_reworded` rewords, else ``""`` (the dialogue's own stream: D+'s turns,
    replayed prefixes, turns from t_k on).

    Reads ``request.state`` (the engine's ``Dialogue``: ``fork``, ``injected``, ``reword_rate``);
    a request without one is never reworded.

    Args:
        request: The turn request (``seed``, ``turn_index``, ``state``).

    Returns:
        The salt, or ``""``.
    """
    d = getattr(request, "state", None)
    fork = getattr(d, "fork", None)
    rate = getattr(d, "reword_rate", 0.0) or 0.0
    if fork is None or not rate or getattr(d, "injected", True):
        return ""
    salt = reword_salt(fork.htype, fork.k)
    return salt if prefix_turn_reworded(request.seed, request.turn_index, rate, salt) else ""


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


__all__ = [
    "SAMPLER_VERSION",
    "prefix_turn_reworded",
    "request_salt",
    "reword_salt",
    "sample_tokens",
    "turn_sampling_seed",
]
