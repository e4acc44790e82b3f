"""A Laplace-smoothed N-gram language model over node-id sequences (SPEC section 8).

``p_t = P(n_t | n_{t-N+1..t-1}) = (count(context, n_t) + 1) / (count(context) + V)`` with ``V``
the number of nodes (the vocabulary the model predicts over; the padding symbol ``[start]`` is
never predicted), the smoothing FlowKL uses for its transitions (SPEC section 7). Each sequence
is left-padded with ``N - 1`` ``[start]`` symbols, so the first turns are conditioned on the
dialogue opening. The probabilities over the ``V`` nodes of any context sum to 1.

Why hand-written: the model is a few dictionary look-ups; what matters is that the smoothing is
exactly FlowKL's and that a single next-node probability can be read incrementally (streaming)
without rebuilding any state. NLTK's ``nltk.lm.Laplace`` adds ``<UNK>``/``</s>`` to the
vocabulary (a different ``V``) and is not a dependency of the project.

``backoff=True`` (ours, off by default, not in the paper) replaces an *unseen* full context by
its longest seen suffix (down to the empty context, i.e. the unigram model), still Laplace-
smoothed at that order; with ``backoff=False`` an unseen context gives ``1 / V``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np


class NgramLM:
    """Counts of every order ``1..N`` over padded node sequences.

    Args:
        order: ``N`` (>= 1). ``N = 1`` is the unigram model; ``N = 2`` a first-order Markov chain.
        vocab_size: ``V`` (>= 1), the number of nodes; node ids are ``0..V-1`` and ``V`` is the
            ``[start]`` symbol.
        backoff: Back off to the longest seen suffix of an unseen context (see the module doc).

    Raises:
        ValueError: ``order`` or ``vocab_size`` is not an integer >= 1 (bools rejected).
    """

    def __init__(self, order: int, vocab_size: int, backoff: bool = False):
        if isinstance(order, bool) or not isinstance(order, int | np.integer) or order < 1:
            raise ValueError(f"N-gram order N must be an integer >= 1, got {order!r}")
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int | np.integer) or vocab_size < 1:
            raise ValueError(f"vocab_size V must be an integer >= 1, got {vocab_size!r}")
        self.order = int(order)
        self.vocab_size = int(vocab_size)
        self.start = self.vocab_size
        self.backoff = bool(backoff)
        self.ngram_counts: Counter[tuple[int, ...]] = Counter()
        self.context_counts: Counter[tuple[int, ...]] = Counter()

    # -- fitting ---------------------------------------------------------------------------
    def _check(self, seq: Sequence[int], where: str) -> list[int]:
        out = [int(x) for x in seq]
        bad = [x for x in out if not 0 <= x < self.vocab_size]
        if bad:
            raise ValueError(f"{where}: node id(s) {sorted(set(bad))[:5]} outside 0..{self.vocab_size - 1}")
        return out

    def fit(self, sequences: Iterable[Sequence[int]]) -> NgramLM:
        """Count every n-gram of order 1..N of the padded sequences (adds to existing counts).

        Args:
            sequences: Node-id sequences, ids in ``0..V-1``.

        Returns:
            The model itself.

        Raises:
            ValueError: A sequence holds an id outside ``0..V-1`` (the sequences before it are
                already counted).
        """
        n = self.order
        for i, seq in enumerate(sequences):
            s = [self.start] * (n - 1) + self._check(seq, f"sequence {i}")
            m = len(s)
            # the n-grams with a context of length k end at positions n-1..m-1: s[t-k : t+1]
            for k in range(n):
                cols = [s[n - 1 - k + j : m - k + j] for j in range(k + 1)]
                self.ngram_counts.update(zip(*cols))
                if k:
                    self.context_counts.update(zip(*cols[:-1]))
                else:
                    self.context_counts[()] += m - (n - 1)
        return self

    # -- probabilities ------------------------------------------------------------------------
    def context_of(self, history: Sequence[int]) -> tuple[int, ...]:
        """The length-``N-1`` context after ``history`` (left-padded with ``[start]``).

        Args:
            history: The node ids seen so far (only the last ``N-1`` are used).

        Returns:
            The context tuple (``()`` for ``N = 1``).
        """
        k = self.order - 1
        if k == 0:
            return ()
        h = tuple(int(x) for x in history[-k:]) if len(history) else ()
        return (self.start,) * (k - len(h)) + h

    def prob(self, context: Sequence[int], node: int) -> float:
        """``P(node | context)`` for a full-length context (see :meth:`context_of`).

        Args:
            context: The ``N-1`` preceding ids (``[start]`` padded).
            node: The next node id.

        Returns:
            The Laplace-smoothed probability, in (0, 1).
        """
        ctx = tuple(context)
        c = self.context_counts.get(ctx, 0)
        if c == 0 and self.backoff:
            for i in range(1, len(ctx) + 1):
                c = self.context_counts.get(ctx[i:], 0)
                if c:
                    ctx = ctx[i:]
                    break
        return (self.ngram_counts.get((*ctx, int(node)), 0) + 1) / (c + self.vocab_size)

    def sequence_probs(self, seq: Sequence[int]) -> np.ndarray:
        """``p_t`` for every position of ``seq`` (float64, shape ``(len(seq),)``); the same numbers
        as :meth:`prob` at each position's :meth:`context_of`.

        Args:
            seq: A node-id sequence (not checked against ``V``).

        Returns:
            The probabilities, shape ``(len(seq),)``, float64.
        """
        seq = [int(x) for x in seq]
        k = self.order - 1
        s = [self.start] * k + seq
        ctxs = zip(*(s[j : j + len(seq)] for j in range(k))) if k else (() for _ in seq)
        cc, ng, V = self.context_counts, self.ngram_counts, self.vocab_size
        out = np.empty(len(seq), dtype=np.float64)
        for t, (ctx, node) in enumerate(zip(ctxs, seq)):
            c = cc.get(ctx, 0)
            if c == 0 and self.backoff:
                out[t] = self.prob(ctx, node)
            else:
                out[t] = (ng.get((*ctx, node), 0) + 1) / (c + V)
        return out

    # -- (de)serialisation: plain arrays, no pickle ----------------------------------------------
    def to_arrays(self) -> dict[str, np.ndarray]:
        """The n-gram counts as arrays: one ``(m_k, k)`` int32 table and ``(m_k,)`` counts per order.

        Returns:
            A dict with ``ngrams_k`` and ``counts_k`` (int64) for k = 1..N, n-grams sorted.
        """
        out: dict[str, np.ndarray] = {}
        by_len: dict[int, list[tuple[tuple[int, ...], int]]] = {}
        for g, c in self.ngram_counts.items():
            by_len.setdefault(len(g), []).append((g, c))
        for k in range(1, self.order + 1):
            items = sorted(by_len.get(k, []))
            out[f"ngrams_{k}"] = np.asarray([g for g, _ in items], dtype=np.int32).reshape(len(items), k)
            out[f"counts_{k}"] = np.asarray([c for _, c in items], dtype=np.int64)
        return out

    @classmethod
    def from_arrays(
        cls, order: int, vocab_size: int, arrays: dict[str, np.ndarray], backoff: bool = False
    ) -> NgramLM:
        """A model from :meth:`to_arrays` output (the context counts are rebuilt from the n-grams).

        Args:
            order: ``N``.
            vocab_size: ``V``.
            arrays: ``ngrams_k``/``counts_k`` for k = 1..N.
            backoff: As the constructor's.

        Returns:
            The model.

        Raises:
            ValueError: Bad ``order``/``vocab_size``, or a table's shape does not match its counts.
            KeyError: An order's arrays are missing.
        """
        lm = cls(order, vocab_size, backoff)
        for k in range(1, lm.order + 1):
            grams, counts = arrays[f"ngrams_{k}"], arrays[f"counts_{k}"]
            if grams.shape != (len(counts), k):
                raise ValueError(f"corrupt N-gram arrays for order {k}: {grams.shape} vs {counts.shape}")
            for g, c in zip(grams.tolist(), counts.tolist()):
                lm.ngram_counts[tuple(g)] = int(c)
                lm.context_counts[tuple(g[:-1])] += int(c)
        return lm
