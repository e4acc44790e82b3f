"""Task 1 set-to-set distances on embeddings of turn pairs: FBD and PRD, and the length controls
(SPEC sections 5 and 7). FlowKL lives in :mod:`dialfork_metrics.flowgraph`.

- **FBD** (Xiang et al. 2021): Frechet distance between Gaussians fitted to the two sets of pair
  embeddings, ``||mu1 - mu2||^2 + Tr(S1 + S2 - 2 (S1 S2)^(1/2))`` with ``Tr (S1 S2)^(1/2)``
  computed as ``sum sqrt(eig(S1^(1/2) S2 S1^(1/2)))``: ``S1^(1/2)`` from the symmetric
  eigendecomposition of ``S1`` (negative eigenvalues clipped at 0), then the eigenvalues of the
  symmetric PSD ``S1^(1/2) S2 S1^(1/2)`` (clipped at 0). Covariances are unbiased (``ddof=1``,
  as ``np.cov``); the result is clipped at 0 (float noise). The estimate is biased at small
  ``n``: :func:`fbd` reports ``n`` with ``return_details=True`` and warns when ``n <= d``.
- **PRD** (Sajjadi et al. 2018, reference implementation ``prd_score.compute_prd_from_embedding``):
  per run, k-means (``MiniBatchKMeans``, ``n_init=10``, 20 clusters) on the union ``[target;
  reference]``, normalised cluster histograms of each set, the PRD curve over ``num_angles``
  slopes ``lambda = tan(angle)``, ``angle`` in ``linspace(eps, pi/2 - eps)`` (``alpha(lambda) =
  sum min(lambda ref, tgt)``, ``beta = alpha / lambda``, both clipped to [0, 1]); precision and
  recall are **averaged over the** ``num_runs`` **runs point by point** (as the reference code),
  and the distance is ``1 - max over the averaged curve of 2PR/(P+R)``. Run ``r`` uses the
  ``random_state`` ``np.random.SeedSequence(seed).generate_state(num_runs)[r]``.
- Controls: ``|mean length of tgt - mean length of ref|`` in turns or in words
  (whitespace-separated tokens).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from dialfork_dataset.turns import as_turns

from .pair_encoder import PAIRINGS, PairEncoder, dialogue_name, pair_encoder_for

logger = logging.getLogger(__name__)


def _check_pair_sets(X_ref: Any, X_tgt: Any, min_n: int = 2) -> tuple[np.ndarray, np.ndarray]:
    out = []
    for name, X in (("reference set", X_ref), ("target set", X_tgt)):
        X = np.asarray(X)
        if X.ndim != 2:
            raise ValueError(f"{name}: expected a 2-D array (n, d) of embeddings, got shape {X.shape}")
        if not np.issubdtype(X.dtype, np.number):
            raise ValueError(f"{name}: expected numbers, got dtype {X.dtype}")
        if X.shape[0] < min_n:
            raise ValueError(f"{name}: needs at least {min_n} embeddings, got {X.shape[0]}")
        if not np.all(np.isfinite(X)):
            bad = np.argwhere(~np.isfinite(X))[0]
            raise ValueError(
                f"{name}: embeddings contain NaN or inf (first at row {bad[0]}, column {bad[1]})"
            )
        out.append(X.astype(np.float64, copy=False))
    if out[0].shape[1] != out[1].shape[1]:
        raise ValueError(
            f"mismatched dimensions: reference set {out[0].shape[1]}, target set {out[1].shape[1]}"
        )
    return out[0], out[1]


def _psd_sqrt(S: np.ndarray) -> np.ndarray:
    w, V = np.linalg.eigh((S + S.T) / 2.0)
    return (V * np.sqrt(np.clip(w, 0.0, None))) @ V.T


def frechet_distance(mu1: Any, S1: Any, mu2: Any, S2: Any) -> float:
    """Frechet distance between N(mu1, S1) and N(mu2, S2), via symmetric eigendecompositions.

    ``|mu1 - mu2|^2 + Tr S1 + Tr S2 - 2 Tr (S1^(1/2) S2 S1^(1/2))^(1/2)``, clipped at 0.

    Args:
        mu1: Mean of the first Gaussian, ``d`` values.
        S1: Covariance of the first Gaussian, ``(d, d)``.
        mu2: Mean of the second Gaussian, ``d`` values.
        S2: Covariance of the second Gaussian, ``(d, d)``.

    Returns:
        The distance (>= 0).

    Raises:
        ValueError: The shapes do not match, or an input holds NaN or inf.
    """
    mu1, mu2 = (
        np.atleast_1d(np.asarray(mu1, dtype=np.float64)),
        np.atleast_1d(np.asarray(mu2, dtype=np.float64)),
    )
    S1, S2 = np.atleast_2d(np.asarray(S1, dtype=np.float64)), np.atleast_2d(np.asarray(S2, dtype=np.float64))
    d = mu1.shape[0]
    if mu2.shape != (d,) or S1.shape != (d, d) or S2.shape != (d, d):
        raise ValueError(
            f"shapes do not match: mu1 {mu1.shape}, S1 {S1.shape}, mu2 {mu2.shape}, S2 {S2.shape}"
        )
    for name, a in (("mu1", mu1), ("S1", S1), ("mu2", mu2), ("S2", S2)):
        if not np.all(np.isfinite(a)):
            raise ValueError(f"{name} contains NaN or inf")
    R = _psd_sqrt(S1)
    M = R @ S2 @ R
    ev = np.linalg.eigvalsh((M + M.T) / 2.0)
    tr_covmean = float(np.sqrt(np.clip(ev, 0.0, None)).sum())
    diff = mu1 - mu2
    value = float(diff @ diff + np.trace(S1) + np.trace(S2) - 2.0 * tr_covmean)
    return max(value, 0.0)


def fbd_from_embeddings(X_ref: Any, X_tgt: Any) -> float:
    """FBD between two sets of pair embeddings (Frechet distance of their Gaussians).

    Covariances by ``np.cov`` (ddof 1); ``Tr (S1 S2)^(1/2)`` from the eigenvalues of
    ``S1^(1/2) S2 S1^(1/2)``; the result is clipped at 0.

    Args:
        X_ref: Reference embeddings, shape ``(n_ref, d)``, ``n_ref >= 2``.
        X_tgt: Target embeddings, shape ``(n_tgt, d)``, ``n_tgt >= 2``.

    Returns:
        The distance (>= 0).

    Raises:
        ValueError: Fewer than 2 rows, mismatched dimensions, or NaN/inf values.
    """
    X1, X2 = _check_pair_sets(X_ref, X_tgt)
    d = X1.shape[1]
    for name, X in (("reference", X1), ("target", X2)):
        if X.shape[0] <= d:
            logger.warning(
                "FBD: the %s set has n=%d <= d=%d embeddings: its covariance is singular and the "
                "estimate strongly biased",
                name,
                X.shape[0],
                d,
            )
    mu1, mu2 = X1.mean(axis=0), X2.mean(axis=0)
    S1, S2 = np.cov(X1, rowvar=False), np.cov(X2, rowvar=False)
    return frechet_distance(mu1, S1, mu2, S2)


def prd_curve(
    ref_hist: Any, tgt_hist: Any, num_angles: int = 1001, epsilon: float = 1e-10
) -> tuple[np.ndarray, np.ndarray]:
    """Sajjadi et al.'s PRD curve of two histograms over the same bins.

    Args:
        ref_hist: The reference distribution's bin masses, 1-D.
        tgt_hist: The target distribution's bin masses, same shape.
        num_angles: Points on the curve (slopes ``tan`` of evenly spaced angles), in ``[3, 1e6]``.
        epsilon: Keeps the angles off 0 and pi/2, in (0, 0.1).

    Returns:
        ``(precision, recall)``: two arrays of ``num_angles`` values in [0, 1].

    Raises:
        ValueError: ``epsilon`` or ``num_angles`` out of range, or the histograms are not 1-D of
            equal length.
    """
    if not 0 < epsilon < 0.1:
        raise ValueError(f"epsilon must be in (0, 0.1), got {epsilon}")
    if not 3 <= num_angles <= 1_000_000:
        raise ValueError(f"num_angles must be in [3, 1e6], got {num_angles}")
    ref = np.asarray(ref_hist, dtype=np.float64)
    tgt = np.asarray(tgt_hist, dtype=np.float64)
    if ref.shape != tgt.shape or ref.ndim != 1:
        raise ValueError(f"histograms must be 1-D of equal length, got {ref.shape} and {tgt.shape}")
    slopes = np.tan(np.linspace(epsilon, np.pi / 2 - epsilon, num=num_angles))
    precision = np.minimum(ref[None, :] * slopes[:, None], tgt[None, :]).sum(axis=1)
    recall = precision / slopes
    return np.clip(precision, 0, 1), np.clip(recall, 0, 1)


def _max_f1(precision: np.ndarray, recall: np.ndarray) -> float:
    s = precision + recall
    f1 = np.divide(2 * precision * recall, s, out=np.zeros_like(s), where=s > 0)
    return float(f1.max())


def prd_from_embeddings(
    X_ref: Any,
    X_tgt: Any,
    num_clusters: int = 20,
    num_angles: int = 1001,
    num_runs: int = 10,
    seed: int = 0,
    *,
    kmeans: str = "minibatch",
    n_init: int = 10,
    epsilon: float = 1e-10,
) -> float:
    """PRD distance ``1 - max F1`` of the run-averaged PRD curve (module docstring).

    Per run, k-means on ``[target; reference]``, the two cluster histograms and the PRD curve over
    ``num_angles`` angles (Sajjadi et al.); precision and recall are averaged over the runs point by
    point. Run ``r`` uses ``random_state = np.random.SeedSequence(seed).generate_state(num_runs)[r]``.

    Args:
        X_ref: Reference embeddings, shape ``(n_ref, d)``.
        X_tgt: Target embeddings, shape ``(n_tgt, d)``.
        num_clusters: k-means clusters per run.
        num_angles: Points of the PRD curve.
        num_runs: Clusterings averaged.
        seed: Seed of the runs.
        kmeans: ``"minibatch"`` (scikit-learn ``MiniBatchKMeans``, as the reference code) or
            ``"full"`` (``KMeans``).
        n_init: k-means restarts per run.
        epsilon: Floor of the histograms' ratios.

    Returns:
        The distance in [0, 1].

    Raises:
        ValueError: ``num_clusters`` or ``num_runs`` below 1, more clusters than embeddings, an
            unknown ``kmeans``, or bad embeddings (fewer than 2 rows, mismatched dimensions, NaN).
    """
    from sklearn.cluster import KMeans, MiniBatchKMeans

    X1, X2 = _check_pair_sets(X_ref, X_tgt)
    if num_clusters < 1 or num_runs < 1:
        raise ValueError(f"num_clusters and num_runs must be >= 1, got {num_clusters}, {num_runs}")
    n = X1.shape[0] + X2.shape[0]
    if num_clusters > n:
        raise ValueError(f"num_clusters={num_clusters} exceeds the {n} embeddings of both sets together")
    if kmeans not in ("minibatch", "full"):
        raise ValueError(f"kmeans must be 'minibatch' or 'full', got {kmeans!r}")
    if X1.shape[0] != X2.shape[0]:
        logger.info(
            "PRD: %d reference vs %d target embeddings (unbalanced sets bias the clustering towards the "
            "larger one)",
            X1.shape[0],
            X2.shape[0],
        )
    data = np.vstack([X2, X1])
    seeds = np.random.SeedSequence(seed).generate_state(num_runs)
    precisions, recalls = [], []
    for r in range(num_runs):
        cls = MiniBatchKMeans if kmeans == "minibatch" else KMeans
        labels = cls(n_clusters=num_clusters, n_init=n_init, random_state=int(seeds[r])).fit(data).labels_
        tgt_hist = np.bincount(labels[: X2.shape[0]], minlength=num_clusters) / X2.shape[0]
        ref_hist = np.bincount(labels[X2.shape[0] :], minlength=num_clusters) / X1.shape[0]
        p, rc = prd_curve(ref_hist, tgt_hist, num_angles, epsilon)
        precisions.append(p)
        recalls.append(rc)
    return 1.0 - _max_f1(np.mean(precisions, axis=0), np.mean(recalls, axis=0))


# --------------------------------------------------------------------------------------------
# dialogue-set level


def _pair_encoder(encoder: Any, batch_size: int) -> PairEncoder:
    return pair_encoder_for(encoder, batch_size=batch_size)


def _set_pairs(pe: PairEncoder, ref_set: Any, tgt_set: Any, pairing: str) -> tuple[np.ndarray, np.ndarray]:
    if pairing not in PAIRINGS:
        raise ValueError(f"unknown pairing {pairing!r}; expected one of {PAIRINGS}")
    X_ref = pe.encode_sets(_as_list(ref_set, "reference set"), pairing, "reference set")
    X_tgt = pe.encode_sets(_as_list(tgt_set, "target set"), pairing, "target set")
    return X_ref, X_tgt


def _as_list(dialogues: Any, set_name: str) -> list:
    if isinstance(dialogues, (str, bytes)) or not hasattr(dialogues, "__iter__"):
        raise ValueError(f"{set_name}: expected a list of dialogues, got {type(dialogues).__name__}")
    return list(dialogues)


def fbd_pairing(pairing: str | None = None, compat: str | None = None) -> str:
    """The turn pairing FBD uses for ``pairing`` and ``compat`` (:func:`fbd`'s rule, shared with
    :class:`dialfork_metrics.torchmetrics.FBD`).

    Args:
        pairing: ``"system_user"``, ``"user_system"``, ``"sliding"`` or None (the default of ``compat``).
        compat: None or ``"sdialog"`` (sliding pairs).

    Returns:
        The pairing: ``pairing`` if given, else ``"sliding"`` with ``compat="sdialog"`` and
        ``"system_user"`` (SPEC) without.

    Raises:
        ValueError: An unknown ``compat`` or ``pairing``, or a pairing other than ``"sliding"``
            with ``compat="sdialog"``.
    """
    if compat not in (None, "sdialog"):
        raise ValueError(f"unknown compat {compat!r}; expected None or 'sdialog'")
    if pairing is None:
        return "sliding" if compat == "sdialog" else "system_user"
    if compat == "sdialog" and pairing != "sliding":
        raise ValueError("compat='sdialog' pairs every turn with its successor (pairing='sliding')")
    if pairing not in PAIRINGS:
        raise ValueError(f"unknown pairing {pairing!r}; expected one of {PAIRINGS}")
    return pairing


def fbd(
    ref_set: Any,
    tgt_set: Any,
    encoder: Any = None,
    *,
    pairing: str | None = None,
    compat: str | None = None,
    batch_size: int = 64,
    return_details: bool = False,
) -> float | dict:
    """FBD between two sets of dialogues on their turn-pair embeddings (``dialfork_metrics.pair_encoder``).

    ``||mu1 - mu2||^2 + Tr(S1 + S2 - 2 (S1 S2)^(1/2))`` over the ``[CLS]`` embeddings of consecutive
    turn pairs. The estimate is biased at small n: a warning is logged when a set has n <= d pairs.

    Args:
        ref_set: The reference set: a list of dialogues (turn strings, ``{"speaker", "text"}``
            lists or DialFork records), at least 2.
        tgt_set: The target set, in the same forms, at least 2.
        encoder: ``None`` (packaged MiniLM), an alias or path, an ``Encoder`` or a ``PairEncoder``.
        pairing: ``"system_user"`` (default, SPEC), ``"user_system"`` or ``"sliding"`` (every turn
            with its successor).
        compat: ``"sdialog"`` reproduces sdialog 0.5.3's ``FrechetBERTDistanceEvaluator`` (sliding pairs).
        batch_size: Pairs per forward pass of the pair encoder.
        return_details: Return a dict instead of the float.

    Returns:
        The distance (>= 0); with ``return_details=True``
        ``{"fbd", "n_ref", "n_tgt", "dim", "encoder", "pairing"}``.

    Raises:
        ValueError: An unknown ``compat``, a ``pairing`` other than ``"sliding"`` with
            ``compat="sdialog"``, or bad sets (fewer than 2 dialogues, empty dialogue or turn; the
            message names the set and the dialogue).
    """
    pairing = fbd_pairing(pairing, compat)
    pe = _pair_encoder(encoder, batch_size)
    X_ref, X_tgt = _set_pairs(pe, ref_set, tgt_set, pairing)
    value = fbd_from_embeddings(X_ref, X_tgt)
    logger.info(
        "FBD = %.6g (n_ref=%d, n_tgt=%d pairs, d=%d)", value, X_ref.shape[0], X_tgt.shape[0], X_ref.shape[1]
    )
    if return_details:
        return {
            "fbd": value,
            "n_ref": int(X_ref.shape[0]),
            "n_tgt": int(X_tgt.shape[0]),
            "dim": int(X_ref.shape[1]),
            "encoder": pe.name,
            "pairing": pairing,
        }
    return value


def prd(
    ref_set: Any,
    tgt_set: Any,
    encoder: Any = None,
    *,
    pairing: str = "system_user",
    num_clusters: int = 20,
    num_angles: int = 1001,
    num_runs: int = 10,
    seed: int = 0,
    kmeans: str = "minibatch",
    batch_size: int = 64,
    return_details: bool = False,
) -> float | dict:
    """PRD distance between two sets of dialogues on their turn-pair embeddings.

    ``1 - max F1`` of the PRD curve averaged over ``num_runs`` clusterings (see ``prd_from_embeddings``).

    Args:
        ref_set: The reference set: a list of dialogues (turn strings, ``{"speaker", "text"}``
            lists or DialFork records), at least 2.
        tgt_set: The target set, in the same forms, at least 2.
        encoder: ``None`` (packaged MiniLM), an alias or path, an ``Encoder`` or a ``PairEncoder``.
        pairing: ``"system_user"`` (default), ``"user_system"`` or ``"sliding"``.
        num_clusters: k-means clusters per run.
        num_angles: Points of the PRD curve.
        num_runs: Clusterings averaged point by point.
        seed: Seed of the runs' ``random_state`` sequence.
        kmeans: ``"minibatch"`` (``MiniBatchKMeans``, the reference code) or ``"full"`` (``KMeans``).
        batch_size: Pairs per forward pass of the pair encoder.
        return_details: Return a dict instead of the float.

    Returns:
        The distance in [0, 1]; with ``return_details=True``
        ``{"prd", "n_ref", "n_tgt", "encoder", "pairing"}``.

    Raises:
        ValueError: A set with fewer than 2 dialogues, an empty dialogue or turn, or an unknown
            speaker, more clusters than pairs (the message names the set and the dialogue).
    """
    pe = _pair_encoder(encoder, batch_size)
    X_ref, X_tgt = _set_pairs(pe, ref_set, tgt_set, pairing)
    value = prd_from_embeddings(X_ref, X_tgt, num_clusters, num_angles, num_runs, seed, kmeans=kmeans)
    if return_details:
        return {
            "prd": value,
            "n_ref": int(X_ref.shape[0]),
            "n_tgt": int(X_tgt.shape[0]),
            "encoder": pe.name,
            "pairing": pairing,
        }
    return value


def _set_lengths(dialogues: Any, set_name: str, words: bool) -> np.ndarray:
    dialogues = _as_list(dialogues, set_name)
    if not dialogues:
        raise ValueError(f"{set_name}: empty set of dialogues")
    out = []
    for i, d in enumerate(dialogues):
        turns = as_turns(d, dialogue_name(d, i, set_name))
        out.append(sum(len(t["text"].split()) for t in turns) if words else len(turns))
    return np.asarray(out, dtype=np.float64)


def set_turn_count_diff(ref_set: Sequence[Any], tgt_set: Sequence[Any]) -> float:
    """Turn-count control of Task 1: ``|mean number of turns of tgt - that of ref|`` (SPEC section 5).

    Args:
        ref_set: The reference set: a list of dialogues (turn strings, ``{"speaker", "text"}``
            lists or DialFork records), at least 2.
        tgt_set: The target set, in the same forms, at least 2.

    Returns:
        The absolute difference of the mean turn counts.

    Raises:
        ValueError: A set with fewer than 2 dialogues, an empty dialogue or turn, or an unknown
            speaker (the message names the set and the dialogue).
    """
    return float(
        abs(
            _set_lengths(tgt_set, "target set", False).mean()
            - _set_lengths(ref_set, "reference set", False).mean()
        )
    )


def set_word_count_diff(ref_set: Sequence[Any], tgt_set: Sequence[Any]) -> float:
    """Word-count control of Task 1: ``|mean number of words of tgt - that of ref|``.

    Words are the whitespace-separated tokens of all turns (ours).

    Args:
        ref_set: The reference set: a list of dialogues (turn strings, ``{"speaker", "text"}``
            lists or DialFork records), at least 2.
        tgt_set: The target set, in the same forms, at least 2.

    Returns:
        The absolute difference of the mean word counts.

    Raises:
        ValueError: A set with fewer than 2 dialogues, an empty dialogue or turn, or an unknown
            speaker (the message names the set and the dialogue).
    """
    return float(
        abs(
            _set_lengths(tgt_set, "target set", True).mean()
            - _set_lengths(ref_set, "reference set", True).mean()
        )
    )


__all__ = [
    "fbd",
    "fbd_from_embeddings",
    "fbd_pairing",
    "frechet_distance",
    "prd",
    "prd_curve",
    "prd_from_embeddings",
    "set_turn_count_diff",
    "set_word_count_diff",
]
