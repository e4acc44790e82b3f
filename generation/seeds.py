"""Stable seeds and a tiny deterministic random generator.

Python's ``hash()`` is salted per process, so every seed here comes from BLAKE2b over a
canonical string of the parts: the same (base seed, scenario id, ...) gives the same seed on
any machine, in any process, in any Python version.

:class:`Rng` is a SplitMix64 generator (Steele, Lea & Flood 2014). It is used instead of
``random.Random`` on the template backend's hot path because seeding it costs one integer
assignment (seeding the Mersenne Twister costs ~10 us per turn, ~20 % of the corpus build);
its stream is fixed by its published constants, so it never changes with the Python version.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")

_MASK = (1 << 64) - 1


def stable_seed(*parts: object) -> int:
    """A 63-bit non-negative seed from ``parts`` (ints/strings), stable across processes.

    Args:
        *parts: the values the seed depends on; each is turned into ``str(part)`` and the strings
            are joined with the unit separator ``\\x1f`` before hashing with BLAKE2b (8-byte digest).

    Returns:
        An integer in ``[0, 2**63)``; the same ``parts`` always give the same seed.
    """
    key = "\x1f".join(str(p) for p in parts).encode("utf-8")
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") >> 1


def dialogue_seed(base_seed: int, scenario_id: str) -> int:
    """Seed of the conformant dialogue of a scenario (its forks reuse it; SPEC section 3).

    Args:
        base_seed: the run's base seed (``GenerationConfig.seed``).
        scenario_id: the STAR scenario's id (the source dialogue id).

    Returns:
        ``stable_seed("dialogue", base_seed, scenario_id)``: a 63-bit non-negative integer.
    """
    return stable_seed("dialogue", base_seed, scenario_id)


def fork_seed(base_seed: int, scenario_id: str, htype: str, k: int) -> int:
    """Seed of a fork's variant draw (and of its WIC substitute task).

    Args:
        base_seed: the run's base seed (``GenerationConfig.seed``).
        scenario_id: the STAR scenario's id (the source dialogue id).
        htype: the hallucination type (one of ``HALLUCINATION_TYPES``: ``"CSC"``, ``"GR"``,
            ``"SSPC"``, ``"WIC"``).
        k: the fork position, 1..4.

    Returns:
        ``stable_seed("fork", base_seed, scenario_id, htype, k)``: a 63-bit non-negative integer.
    """
    return stable_seed("fork", base_seed, scenario_id, htype, k)


class Rng:
    """SplitMix64. ``Rng(seed, *salt)`` mixes the salt in with :func:`stable_seed`-free integer math.

    Args:
        seed: the stream's seed (any int; reduced to 64 bits).
        *salt: integers mixed into the state one after the other (e.g. a turn index), so that
            ``Rng(seed, a)`` and ``Rng(seed, b)`` give unrelated streams.
    """

    __slots__ = ("_s",)

    def __init__(self, seed: int, *salt: int):
        s = seed & _MASK
        for x in salt:
            s = (s * 0x9E3779B97F4A7C15 + (x & _MASK) + 0x632BE59BD9B4E019) & _MASK
        self._s = s

    def next64(self) -> int:
        """The next 64-bit output of the stream.

        Returns:
            An integer in ``[0, 2**64)``.
        """
        self._s = s = (self._s + 0x9E3779B97F4A7C15) & _MASK
        z = ((s ^ (s >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
        return z ^ (z >> 31)

    def below(self, n: int) -> int:
        """Uniform integer in ``[0, n)`` (n <= 2**32: modulo bias < 2**-32).

        Args:
            n: the number of outcomes, >= 1.

        Returns:
            ``next64() % n``.

        Raises:
            ValueError: ``n`` is not positive.
        """
        if n <= 0:
            raise ValueError(f"Rng.below: n must be positive, got {n}")
        return self.next64() % n

    def random(self) -> float:
        """A uniform float in ``[0, 1)`` with 53 random bits.

        Returns:
            The top 53 bits of :meth:`next64` divided by ``2**53``.
        """
        return (self.next64() >> 11) * (1.0 / 9007199254740992.0)

    def choice(self, seq: Sequence[T]) -> T:
        """A uniformly chosen element of ``seq`` (one draw).

        Args:
            seq: a non-empty sequence.

        Returns:
            ``seq[self.below(len(seq))]``.

        Raises:
            ValueError: ``seq`` is empty.
        """
        return seq[self.below(len(seq))]

    def shuffle(self, items: list[T]) -> list[T]:
        """Fisher-Yates in place; returns ``items``.

        Args:
            items: the list to shuffle (changed in place).

        Returns:
            ``items`` itself, shuffled.
        """
        for i in range(len(items) - 1, 0, -1):
            j = self.below(i + 1)
            items[i], items[j] = items[j], items[i]
        return items
