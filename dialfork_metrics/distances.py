"""Task 2 distances between two dialogues at the embedding level (SPEC section 7).

Inputs are turn-embedding matrices ``E_ref (n, d)`` and ``E_cand (m, d)`` (one row per turn).
Rows are L2-normalised here (``normalize=True``, idempotent for encoder outputs) so that dot
products are cosines. All functions validate their inputs and raise ``ValueError`` for an empty
matrix, mismatched dimensions, a non-finite value or a zero row, naming the dialogue.

- FlowScore: S = E E'^T; P = mean_j max_i S_ij, R = mean_i max_j S_ij, both clipped at 0,
  F = 2PR/(P+R), distance 1 - F (ours: F = 0 when P <= 0 or R <= 0, so dialogues whose turns
  point away from each other are at distance 1, never 0).
- FlowDTW: c(i,j) = 1 - S_ij, Gamma(i,j) = c(i,j) + min(Gamma(i-1,j-1), Gamma(i-1,j),
  Gamma(i,j-1)), ties broken diagonal > (i-1,j) > (i,j-1); distance Gamma(n,m) / L with L the
  number of cells on that optimal path. Compiled with numba.
- Mean-turn: 1 - cos(mean_i e_i, mean_j e'_j).

Batched forms score many pairs at once: FlowScore on padded similarity blocks masked with
``-inf`` (padding never wins a max, cosines can be negative), FlowDTW with a compiled numba
kernel looping over the pairs of the same blocks.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

try:  # numba is a hard dependency; the guard only keeps `import dialfork_metrics` cheap
    import numba
except ImportError as e:  # pragma: no cover
    raise ImportError("dialfork_metrics.distances needs numba (pip install numba)") from e

#: Values per chunk when validating many pairs at once (small enough to stay in cache and below
#: the allocator's mmap threshold, large enough to amortise numpy's per-call overhead).
CHECK_CHUNK = 1 << 16

#: Maximum number of similarity cells (B x N x M, float64) per padded block in the batched forms.
BLOCK_CELLS = 1 << 22


# ---------------------------------------------------------------------------- validation
def _row_norms(A: np.ndarray) -> np.ndarray:
    """``(n, 1)`` L2 norms of the rows (one formula for the single and the batched paths)."""
    return np.sqrt(np.einsum("ij,ij->i", A, A))[:, None]


def _check(E: Any, what: str, normalize: bool) -> np.ndarray:
    try:
        A = np.asarray(E, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{what}: embeddings must be a numeric (n_turns, dim) array ({e})") from e
    if A.ndim != 2:
        raise ValueError(f"{what}: embeddings must be 2-D (n_turns, dim), got shape {A.shape}")
    if A.shape[0] == 0:
        raise ValueError(f"{what}: empty dialogue (0 turn embeddings)")
    if A.shape[1] == 0:
        raise ValueError(f"{what}: embeddings have dimension 0")
    finite = np.isfinite(A).all(axis=1)
    if not finite.all():
        raise ValueError(f"{what}: turn {int(np.flatnonzero(~finite)[0])} embedding contains NaN or inf")
    if normalize:
        # the same arithmetic as the batched path (_check_pairs), bit for bit: FlowDTW breaks exact
        # ties, so a 1-ulp difference in a row norm could change the path and L
        norms = _row_norms(A)
        if (norms == 0).any():
            raise ValueError(
                f"{what}: turn {int(np.flatnonzero(norms[:, 0] == 0)[0])} embedding is all zeros"
            )
        A = A / norms
    return A


def _check_pair(E_ref: Any, E_cand: Any, where: str | None, normalize: bool) -> tuple[np.ndarray, np.ndarray]:
    pre = f"{where}: " if where else ""
    A = _check(E_ref, f"{pre}reference", normalize)
    B = _check(E_cand, f"{pre}candidate", normalize)
    if A.shape[1] != B.shape[1]:
        raise ValueError(
            f"{pre}embedding dimensions differ: reference {A.shape[1]}, candidate {B.shape[1]} "
            "(encode both dialogues with the same encoder)"
        )
    return A, B


def _f_from_pr(P: np.ndarray | float, R: np.ndarray | float) -> np.ndarray:
    """Harmonic mean of P and R clipped at 0 (SPEC section 7, ours): F = 0 when P <= 0 or R <= 0.

    Without the clip, P < 0 < R with P + R < 0 gives F > 1 and two dialogues whose turns point
    away from each other would be reported at distance 0, the distance of identical dialogues."""
    P = np.maximum(np.asarray(P, dtype=np.float64), 0.0)
    R = np.maximum(np.asarray(R, dtype=np.float64), 0.0)
    den = P + R
    with np.errstate(divide="ignore", invalid="ignore"):
        F = np.where(den == 0, 0.0, 2.0 * P * R / np.where(den == 0, 1.0, den))
    return F


def _distance_from_pr(P, R) -> np.ndarray:
    # 1 - F with 0 <= F <= max(P, R) <= 1 (+ float noise: cosines are <= 1), clipped into [0, 1]
    return np.clip(1.0 - _f_from_pr(P, R), 0.0, 1.0)


# ---------------------------------------------------------------------------- single pair
def flowscore_from_embeddings(
    E_ref: Any, E_cand: Any, *, normalize: bool = True, where: str | None = None
) -> float:
    """FlowScore distance 1 - F between two dialogues' turn embeddings (SPEC section 7).

    S = E E'^T; P = mean_j max_i S_ij, R = mean_i max_j S_ij; F = 2PR/(P+R) with P and R clipped
    at 0 (F = 0 when either is <= 0), computed in float64.

    Args:
        E_ref: Turn embeddings of the reference dialogue, shape ``(n, d)``.
        E_cand: Turn embeddings of the candidate dialogue, shape ``(m, d)``.
        normalize: L2-normalise the rows first (idempotent for encoder output).
        where: A label (e.g. a pair or dialogue id) prefixed to error messages.

    Returns:
        The distance in [0, 1].

    Raises:
        ValueError: An empty matrix, mismatched dimensions, NaN/inf or an all-zero row (the message
            names ``where``, the side and the turn).

    Example:
        >>> import numpy as np
        >>> E = np.array([[1.0, 0.0], [0.0, 1.0]])
        >>> F = np.array([[1.0, 0.0], [1.0, 1.0]])
        >>> flowscore_from_embeddings(E, E)
        0.0
        >>> round(flowscore_from_embeddings(E, F), 4)
        0.1464
    """
    A, B = _check_pair(E_ref, E_cand, where, normalize)
    S = A @ B.T
    P = S.max(axis=0).mean()  # each candidate turn's best match in the reference
    R = S.max(axis=1).mean()  # each reference turn's best match in the candidate
    return float(_distance_from_pr(P, R))


@numba.njit(cache=True, nogil=True)
def _dtw_core(S, n, m):  # pragma: no cover - compiled
    """DTW on cost 1 - S[:n, :m]; returns (Gamma(n, m), L). Two rolling rows of Gamma and L."""
    inf = np.inf
    g_prev = np.full(m + 1, inf)
    g_cur = np.full(m + 1, inf)
    l_prev = np.zeros(m + 1, dtype=np.int64)
    l_cur = np.zeros(m + 1, dtype=np.int64)
    g_prev[0] = 0.0  # Gamma(0, 0) = 0; Gamma(0, j>0) = inf
    for i in range(1, n + 1):
        g_cur[0] = inf
        l_cur[0] = 0
        for j in range(1, m + 1):
            d = g_prev[j - 1]
            u = g_prev[j]
            lft = g_cur[j - 1]
            if d <= u and d <= lft:  # ties: diagonal first
                best = d
                lb = l_prev[j - 1]
            elif u <= lft:  # then (i-1, j)
                best = u
                lb = l_prev[j]
            else:  # then (i, j-1)
                best = lft
                lb = l_cur[j - 1]
            c = 1.0 - S[i - 1, j - 1]
            g_cur[j] = (c if c > 0.0 else 0.0) + best  # cosine <= 1: clip float noise below 0
            l_cur[j] = lb + 1
        g_prev, g_cur = g_cur, g_prev
        l_prev, l_cur = l_cur, l_prev
    return g_prev[m], l_prev[m]


@numba.njit(cache=True, nogil=True)
def _dtw_padded(S, n_lens, m_lens, out):  # pragma: no cover - compiled
    # serial on purpose: about 2 us per 20 x 20 pair, far below the cost of waking a thread pool
    for b in range(S.shape[0]):
        g, L = _dtw_core(S[b], n_lens[b], m_lens[b])
        out[b] = g / L


def flowdtw_from_embeddings(
    E_ref: Any, E_cand: Any, *, normalize: bool = True, where: str | None = None
) -> float:
    """FlowDTW distance Gamma(n, m) / L between two dialogues' turn embeddings (SPEC section 7).

    Cost 1 - cosine; ties broken diagonal, then (i-1, j), then (i, j-1); L = cells on the optimal path.

    Args:
        E_ref: Turn embeddings of the reference dialogue, shape ``(n, d)``.
        E_cand: Turn embeddings of the candidate dialogue, shape ``(m, d)``.
        normalize: L2-normalise the rows first (idempotent for encoder output).
        where: A label (e.g. a pair or dialogue id) prefixed to error messages.

    Returns:
        The distance (>= 0).

    Raises:
        ValueError: An empty matrix, mismatched dimensions, NaN/inf or an all-zero row (the message
            names ``where``, the side and the turn).

    Example:
        >>> import numpy as np
        >>> E = np.array([[1.0, 0.0], [0.0, 1.0]])
        >>> round(flowdtw_from_embeddings(E, np.array([[1.0, 0.0], [1.0, 1.0]])), 4)
        0.1464
    """
    A, B = _check_pair(E_ref, E_cand, where, normalize)
    S = np.ascontiguousarray(A @ B.T)
    g, L = _dtw_core(S, S.shape[0], S.shape[1])
    return float(g / L)


def flowdtw_path_length(E_ref: Any, E_cand: Any, *, normalize: bool = True) -> tuple[float, int]:
    """(Gamma(n, m), L): the accumulated cost and the number of cells on the optimal path.

    Args:
        E_ref: The reference's turn embeddings, ``(n, d)``.
        E_cand: The candidate's turn embeddings, ``(m, d)``.
        normalize: L2-normalise the rows first (False: they must already be unit rows).

    Returns:
        ``(cost, length)``: the float ``Gamma(n, m)`` and the int ``L`` (FlowDTW is their ratio).

    Example:
        >>> import numpy as np
        >>> cost, length = flowdtw_path_length(np.eye(2), np.array([[1.0, 0.0], [1.0, 1.0]]))
        >>> round(cost, 4), length
        (0.2929, 2)
    """
    A, B = _check_pair(E_ref, E_cand, None, normalize)
    S = np.ascontiguousarray(A @ B.T)
    g, L = _dtw_core(S, S.shape[0], S.shape[1])
    return float(g), int(L)


def mean_turn_distance(E_ref: Any, E_cand: Any, *, normalize: bool = True, where: str | None = None) -> float:
    """Mean-turn distance 1 - cos(mean e, mean e') (SPEC section 7).

    Args:
        E_ref: Turn embeddings of the reference dialogue, shape ``(n, d)``.
        E_cand: Turn embeddings of the candidate dialogue, shape ``(m, d)``.
        normalize: L2-normalise the rows first (idempotent for encoder output).
        where: A label (e.g. a pair or dialogue id) prefixed to error messages.

    Returns:
        The distance in [0, 2].

    Raises:
        ValueError: An empty matrix, mismatched dimensions, NaN/inf or an all-zero row (the message
            names ``where``, the side and the turn).

    Example:
        >>> import numpy as np
        >>> round(mean_turn_distance(np.eye(2), np.array([[1.0, 0.0], [1.0, 1.0]])), 4)
        0.0761
    """
    A, B = _check_pair(E_ref, E_cand, where, normalize)
    return cosine_distance(A.mean(axis=0), B.mean(axis=0), where=where, what="mean turn embedding")


def cosine_distance(u: Any, v: Any, *, where: str | None = None, what: str = "embedding") -> float:
    """1 - cos(u, v) of two vectors (Full-dialog on transcript embeddings, Mean-turn).

    Args:
        u: The first vector (any shape; flattened).
        v: The second vector, as many values.
        where: Names the pair in errors (e.g. the dialogue ids).
        what: Names the vectors in errors.

    Returns:
        The distance in [0, 2].

    Raises:
        ValueError: The dimensions differ, a vector holds NaN or inf, or has zero norm.

    Example:
        >>> cosine_distance([1.0, 0.0], [0.0, 1.0])
        1.0
    """
    pre = f"{where}: " if where else ""
    a = np.asarray(u, dtype=np.float64).ravel()
    b = np.asarray(v, dtype=np.float64).ravel()
    if a.shape != b.shape:
        raise ValueError(f"{pre}{what} dimensions differ: {a.shape[0]} vs {b.shape[0]}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError(f"{pre}{what} contains NaN or inf")
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    if na == 0 or nb == 0:
        raise ValueError(f"{pre}{what} has zero norm: cosine undefined")
    return float(1.0 - np.clip(a @ b / (na * nb), -1.0, 1.0))


# ---------------------------------------------------------------------------- batched
def _check_pairs(pairs: Any, normalize: bool, names: Sequence[str] | None):
    """Validate many pairs at once: shapes per pair, then one pass over all rows for NaN/inf and
    zero rows (the error still names the pair, the side and the turn), then unit rows (float64)."""
    if isinstance(pairs, str) or not isinstance(pairs, Sequence):
        raise ValueError(f"pairs must be a list of (E_ref, E_cand), got {type(pairs).__name__}")
    if names is not None and len(names) != len(pairs):
        raise ValueError(f"names holds {len(names)} entries for {len(pairs)} pairs (one name per pair)")
    arrays: list[np.ndarray] = []
    labels: list[str] = []
    dim = None
    for k, p in enumerate(pairs):
        where = names[k] if names is not None else f"pair {k}"
        if isinstance(p, str) or not isinstance(p, Sequence) or len(p) != 2:
            raise ValueError(f"{where}: expected a (E_ref, E_cand) pair")
        sides = []
        for side, E in (("reference", p[0]), ("candidate", p[1])):
            A = np.asarray(E)
            if A.dtype.kind not in "fiub":
                A = _check(E, f"{where}: {side}", False)  # raises with the reason (non-numeric...)
            if A.ndim != 2:
                raise ValueError(
                    f"{where}: {side}: embeddings must be 2-D (n_turns, dim), got shape {A.shape}"
                )
            if A.shape[0] == 0:
                raise ValueError(f"{where}: {side}: empty dialogue (0 turn embeddings)")
            if A.shape[1] == 0:
                raise ValueError(f"{where}: {side}: embeddings have dimension 0")
            sides.append(A)
        if sides[0].shape[1] != sides[1].shape[1]:
            raise ValueError(
                f"{where}: embedding dimensions differ: reference {sides[0].shape[1]}, candidate "
                f"{sides[1].shape[1]} (encode both dialogues with the same encoder)"
            )
        if dim is None:
            dim = sides[0].shape[1]
        elif sides[0].shape[1] != dim:
            raise ValueError(f"{where}: embedding dimension {sides[0].shape[1]} differs from pair 0's {dim}")
        arrays.extend(sides)
        labels.extend((f"{where}: reference", f"{where}: candidate"))
    if not arrays:
        return [], []
    parts: list[np.ndarray] = []
    # bulk checks in cache-sized chunks (CHECK_CHUNK values each): one concatenation, one isfinite,
    # one norm per chunk instead of several numpy calls per matrix
    start = 0
    while start < len(arrays):
        stop, size = start, 0
        while stop < len(arrays) and (stop == start or size + arrays[stop].size <= CHECK_CHUNK):
            size += arrays[stop].size
            stop += 1
        chunk = arrays[start:stop]
        flat = np.concatenate(chunk, axis=0).astype(np.float64, copy=False)
        bounds = np.cumsum([0] + [a.shape[0] for a in chunk])

        def locate(row: int, bounds=bounds, start=start) -> str:
            i = int(np.searchsorted(bounds, row, side="right") - 1)
            return f"{labels[start + i]}: turn {row - bounds[i]}"

        finite = np.isfinite(flat).all(axis=1)
        if not finite.all():
            raise ValueError(f"{locate(int(np.flatnonzero(~finite)[0]))} embedding contains NaN or inf")
        if normalize:
            norms = _row_norms(flat)
            if (norms == 0).any():
                raise ValueError(f"{locate(int(np.flatnonzero(norms[:, 0] == 0)[0]))} embedding is all zeros")
            flat = flat / norms
        parts.extend(flat[bounds[i] : bounds[i + 1]] for i in range(len(chunk)))
        start = stop
    return parts[0::2], parts[1::2]


def similarity_blocks(
    refs: Sequence[np.ndarray], cands: Sequence[np.ndarray], block_cells: int | None = None
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """Padded cosine-similarity blocks over pairs ``(refs[k], cands[k])`` (unit rows, same dim).

    Pairs are sorted by size so that padding stays small.

    Args:
        refs: Reference turn embeddings, one ``(n_k, d)`` unit-row array per pair.
        cands: Candidate turn embeddings, one ``(m_k, d)`` unit-row array per pair.
        block_cells: At most this many cells (pairs x N x M) per block; None: ``BLOCK_CELLS``.

    Yields:
        ``(pair_indices (B,), S (B, N, M) float64 with -inf in padded cells, n_lens (B,), m_lens (B,))``.
    """
    block_cells = BLOCK_CELLS if block_cells is None else block_cells
    n = np.array([r.shape[0] for r in refs], dtype=np.int64)
    m = np.array([c.shape[0] for c in cands], dtype=np.int64)
    order = np.lexsort((m, n))
    s = 0
    K = len(order)
    while s < K:
        e = s + 1
        N, M = n[order[s]], m[order[s]]
        while e < K:
            N2, M2 = max(N, n[order[e]]), max(M, m[order[e]])
            if (e - s + 1) * N2 * M2 > block_cells:
                break
            N, M = N2, M2
            e += 1
        idx = order[s:e]
        # per-pair products straight into a -inf block: padding never wins a max, and no padded
        # copy of the (much larger) embedding matrices is ever made
        S = np.full((len(idx), N, M), -np.inf)
        for b, k in enumerate(idx):
            np.matmul(refs[k], cands[k].T, out=S[b, : n[k], : m[k]])
        yield idx, S, n[idx], m[idx]
        s = e


def _flowscore_block(S: np.ndarray, n_lens: np.ndarray, m_lens: np.ndarray) -> np.ndarray:
    # max over padded axes: padded cells are -inf, so they never win; padded rows/cols themselves
    # give -inf maxima, zeroed before the masked mean.
    col_max = S.max(axis=1)  # (B, M): best reference turn for each candidate turn
    row_max = S.max(axis=2)  # (B, N): best candidate turn for each reference turn
    col_valid = np.arange(S.shape[2])[None, :] < m_lens[:, None]
    row_valid = np.arange(S.shape[1])[None, :] < n_lens[:, None]
    P = np.where(col_valid, col_max, 0.0).sum(axis=1) / m_lens
    R = np.where(row_valid, row_max, 0.0).sum(axis=1) / n_lens
    return _distance_from_pr(P, R)


def flowscore_batch_from_embeddings(
    pairs: Sequence[tuple[Any, Any]], *, normalize: bool = True, names: Sequence[str] | None = None
) -> np.ndarray:
    """FlowScore of many ``(E_ref, E_cand)`` pairs at once (padded, ``-inf``-masked blocks).

    Equal to ``flowscore_from_embeddings`` pair by pair; pairs are sorted by size so padding stays small.

    Args:
        pairs: ``(E_ref, E_cand)`` pairs of turn-embedding matrices, ``(n_i, d)`` and ``(m_i, d)``.
        normalize: L2-normalise the rows first (idempotent for encoder output).
        names: One label per pair for error messages (default: the pair's index).

    Returns:
        A ``(n_pairs,)`` float64 array of distances in [0, 1], in the order of ``pairs``.

    Raises:
        ValueError: An empty matrix, mismatched dimensions, NaN/inf or an all-zero row (the message
            names ``where``, the side and the turn).
    """
    refs, cands = _check_pairs(pairs, normalize, names)
    return _flowscore_many(refs, cands)


def _flowscore_many(refs, cands) -> np.ndarray:
    out = np.empty(len(refs), dtype=np.float64)
    for idx, S, nl, ml in similarity_blocks(refs, cands):
        out[idx] = _flowscore_block(S, nl, ml)
    return out


def flowdtw_batch_from_embeddings(
    pairs: Sequence[tuple[Any, Any]], *, normalize: bool = True, names: Sequence[str] | None = None
) -> np.ndarray:
    """FlowDTW of many ``(E_ref, E_cand)`` pairs (compiled numba kernel over padded blocks).

    Equal to ``flowdtw_from_embeddings`` pair by pair.

    Args:
        pairs: ``(E_ref, E_cand)`` pairs of turn-embedding matrices, ``(n_i, d)`` and ``(m_i, d)``.
        normalize: L2-normalise the rows first (idempotent for encoder output).
        names: One label per pair for error messages (default: the pair's index).

    Returns:
        A ``(n_pairs,)`` float64 array of distances, in the order of ``pairs``.

    Raises:
        ValueError: An empty matrix, mismatched dimensions, NaN/inf or an all-zero row (the message
            names ``where``, the side and the turn).
    """
    refs, cands = _check_pairs(pairs, normalize, names)
    return _flowdtw_many(refs, cands)


def _flowdtw_many(refs, cands) -> np.ndarray:
    out = np.empty(len(refs), dtype=np.float64)
    for idx, S, nl, ml in similarity_blocks(refs, cands):
        res = np.empty(len(idx), dtype=np.float64)
        _dtw_padded(S, nl, ml, res)
        out[idx] = res
    return out


def mean_turn_many(
    refs: Sequence[np.ndarray], cands: Sequence[np.ndarray], names: Sequence[str] | None = None
) -> np.ndarray:
    """Mean-turn distance of many validated pairs, vectorised over the pairs.

    Args:
        refs: Reference turn embeddings, one ``(n_k, d)`` array per pair.
        cands: Candidate turn embeddings, one ``(m_k, d)`` array per pair.
        names: ``names[k]`` names pair ``k`` in errors; None: ``"pair k"``.

    Returns:
        A ``(K,)`` float64 array of ``1 - cos(mean e, mean e')``.

    Raises:
        ValueError: A dialogue's mean turn embedding is zero (its cosine is undefined).
    """
    K = len(refs)
    if K == 0:
        return np.zeros(0)
    mr = np.stack([r.mean(axis=0) for r in refs])
    mc = np.stack([c.mean(axis=0) for c in cands])
    nr, nc = np.linalg.norm(mr, axis=1), np.linalg.norm(mc, axis=1)
    bad = np.flatnonzero((nr == 0) | (nc == 0))
    if bad.size:
        k = int(bad[0])
        side = "reference" if nr[k] == 0 else "candidate"
        where = names[k] if names is not None else f"pair {k}"
        raise ValueError(
            f"{where}: the {side}'s mean turn embedding has zero norm (its turn embeddings cancel "
            "out): Mean-turn cosine undefined"
        )
    return 1.0 - np.clip(np.einsum("kd,kd->k", mr, mc) / (nr * nc), -1.0, 1.0)


def flowscore_block(S: np.ndarray, n_lens: np.ndarray, m_lens: np.ndarray) -> np.ndarray:
    """FlowScore distances of one padded similarity block (the registry's ``"similarity"`` core).

    Args:
        S: ``(B, N, M)`` cosine similarities, ``-inf`` in padded cells (:func:`similarity_blocks`).
        n_lens: ``(B,)`` reference turn counts.
        m_lens: ``(B,)`` candidate turn counts.

    Returns:
        A ``(B,)`` float64 array of distances in [0, 1].
    """
    return _flowscore_block(S, n_lens, m_lens)


def flowdtw_block(S: np.ndarray, n_lens: np.ndarray, m_lens: np.ndarray) -> np.ndarray:
    """FlowDTW distances of one padded similarity block (the registry's ``"similarity"`` core).

    Args:
        S: ``(B, N, M)`` cosine similarities, ``-inf`` in padded cells (:func:`similarity_blocks`).
        n_lens: ``(B,)`` reference turn counts.
        m_lens: ``(B,)`` candidate turn counts.

    Returns:
        A ``(B,)`` float64 array of distances.
    """
    res = np.empty(S.shape[0], dtype=np.float64)
    _dtw_padded(S, n_lens, m_lens, res)
    return res


def unit_cosine_distances(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Row-wise ``1 - cos`` of unit rows (Full-dialog over transcript embeddings), clipped to [0, 2].

    Args:
        A: ``(K, d)`` unit rows.
        B: ``(K, d)`` unit rows.

    Returns:
        A ``(K,)`` float64 array.
    """
    return 1.0 - np.clip(np.einsum("kd,kd->k", A, B), -1.0, 1.0)


def block_scores(
    refs: Sequence[np.ndarray], cands: Sequence[np.ndarray], kernels: dict[str, Any]
) -> dict[str, np.ndarray]:
    """Several block kernels ``kernel(S, n_lens, m_lens) -> (B,)`` over one pass of the padded
    similarity blocks of validated, unit-row pairs.

    Args:
        refs: Reference turn embeddings, one ``(n_k, d)`` matrix per pair.
        cands: Candidate turn embeddings, one ``(m_k, d)`` matrix per pair.
        kernels: Name -> kernel (e.g. :func:`flowscore_block`, :func:`flowdtw_block`).

    Returns:
        ``{name: (K,) float64 array}`` in the order of the pairs.
    """
    out = {m: np.empty(len(refs)) for m in kernels}
    if kernels:
        for idx, S, nl, ml in similarity_blocks(refs, cands):
            for m, kernel in kernels.items():
                out[m][idx] = kernel(S, nl, ml)
    return out


def task2_embedding_scores(
    refs: Sequence[np.ndarray],
    cands: Sequence[np.ndarray],
    names: Sequence[str] | None = None,
    methods: Sequence[str] | None = None,
) -> dict[str, np.ndarray]:
    """The registry's turn-embedding pair metrics (input ``"similarity"`` or ``"turn_embeddings"``:
    FlowScore, FlowDTW, Mean-turn, ...) of validated, unit-row pairs, the similarity-block ones
    from one pass over the blocks (used by the dialogue-level batched API).

    Args:
        refs: Reference turn embeddings, one unit-row ``(n_k, d)`` matrix per pair.
        cands: Candidate turn embeddings, one unit-row ``(m_k, d)`` matrix per pair.
        names: ``names[k]`` names pair ``k`` in errors.
        methods: The methods; None: every such registered metric.

    Returns:
        ``{method: (K,) float64 array}``.

    Raises:
        ValueError: A method is not a registered turn-embedding pair metric.
    """
    from .registry import get
    from .registry import names as registered

    known = registered("pair", inputs=("similarity", "turn_embeddings"))
    methods = known if methods is None else methods
    unknown = sorted(set(methods) - set(known))
    if unknown:
        raise ValueError(f"unknown embedding-level method(s) {unknown}; known: {', '.join(known)}")
    specs = [get(m) for m in methods]
    out = block_scores(refs, cands, {s.name: s.core_fn() for s in specs if s.input == "similarity"})
    for s in specs:
        if s.input == "turn_embeddings":
            out[s.name] = np.asarray(s.core_fn()(refs, cands, names), dtype=np.float64)
    return {m: out[m] for m in methods}


__all__ = [
    "BLOCK_CELLS",
    "block_scores",
    "cosine_distance",
    "flowdtw_batch_from_embeddings",
    "flowdtw_block",
    "flowdtw_from_embeddings",
    "flowdtw_path_length",
    "flowscore_batch_from_embeddings",
    "flowscore_block",
    "flowscore_from_embeddings",
    "mean_turn_distance",
    "mean_turn_many",
    "similarity_blocks",
    "task2_embedding_scores",
    "unit_cosine_distances",
]
