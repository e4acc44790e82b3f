"""``torchmetrics`` metrics for training and evaluation loops on several processes (issue 37).

:class:`FlowScore` and :class:`FlowDTW` score (reference, prediction) pairs of dialogues;
:class:`FlowKL` and :class:`FBD` compare the set of predictions with the set of references. Each
is a ``torchmetrics.Metric``: ``update(predictions, references)`` once per batch, ``compute()``
at the end, and under ``torch.distributed`` (DDP, ``accelerate``, Lightning) ``compute()`` first
gathers the state of every process, so N processes that each saw part of the data give the value
of one process that saw all of it. The math and the input checks are the library's
(:func:`~dialfork_metrics.dialogue.score_pairs`, :func:`~dialfork_metrics.flowgraph.flowkl`,
:func:`~dialfork_metrics.setlevel.fbd_from_embeddings`); the ``evaluate`` modules
(:func:`dialfork_metrics.load`) call the same functions.

States, all ``dist_reduce_fx="cat"`` lists of 1-D float64 tensors (plus ``dim``, reduced by
``"max"``), so that a process that saw no batch still joins the gather:

- per pair (:class:`FlowScore`, :class:`FlowDTW`): the distance of every pair. The mean does not
  depend on the order in which the processes' pairs are gathered;
- FlowKL: the turn embeddings, speakers and turn counts of every reference and every predicted
  dialogue. The graph is fitted on all gathered references at ``compute()``: a graph fitted per
  process and merged would not be the graph of the whole set;
- FBD: the turn-pair embeddings of each set (the Gaussians are fitted at ``compute()``).

Embeddings are computed in ``update`` (the encoder runs where the batch is); ``compute()`` needs
no encoder. This module imports ``torch`` and ``torchmetrics`` (``pip install
"dialfork[torchmetrics]"``); ``import dialfork_metrics`` does not load it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torchmetrics import Metric

from .modules import module_encoder


def _cat(state: Any) -> torch.Tensor:
    """A list state (before a sync) or a gathered tensor (after one) as one 1-D tensor."""
    if isinstance(state, list):
        return torch.cat([t.reshape(-1) for t in state]) if state else torch.zeros(0, dtype=torch.float64)
    return state.reshape(-1)


class _DialForkMetric(Metric):
    """Shared settings: distances (lower is closer), not differentiable, float64 states."""

    is_differentiable = False
    higher_is_better = False
    full_state_update = False
    _label = "dialfork"

    def _float64(self) -> None:
        # set after add_state: casts the defaults, and makes the empty tensor torchmetrics gathers
        # for a process without data float64 too (same dtype as the other processes' states)
        self.set_dtype(torch.float64)

    def _tensor(self, values: Any) -> torch.Tensor:
        return torch.as_tensor(np.ascontiguousarray(values, dtype=np.float64).reshape(-1), device=self.device)

    def _where(self) -> str:
        return f"{self._label}, update {self._update_count}"

    @property
    def encoder(self) -> Any:
        """The encoder that ``update`` embeds turns with (not a submodule: not in ``state_dict``)."""
        return self.__dict__["_dialfork_encoder"]

    def _set_encoder(self, encoder: Any) -> None:
        # kept out of nn.Module's registry: a torch model passed as the encoder must not be moved,
        # cast or saved with the metric's state
        self.__dict__["_dialfork_encoder"] = encoder


# ---------------------------------------------------------------------------- per pair
class _PairMetric(_DialForkMetric):
    _method = ""

    def __init__(
        self,
        encoder: Any = None,
        *,
        batch_size: int = 64,
        device: str | None = None,
        embedding_cache_dir: str | None = None,
        return_scores: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._set_encoder(module_encoder(encoder, None, batch_size, device, embedding_cache_dir))
        self.return_scores = bool(return_scores)
        self.add_state("scores", default=[], dist_reduce_fx="cat")
        self._float64()

    def update(self, predictions: Any, references: Any) -> None:
        """Score a batch of pairs: row ``i`` is (``references[i]``, ``predictions[i]``).

        Args:
            predictions: The candidate dialogues D', one per pair: lists of turn strings (speakers
                alternate, user first), lists of ``{"speaker", "text"}`` dicts or DialFork records.
            references: The reference dialogues D, as many, in the same forms.

        Raises:
            ValueError: Different lengths, or a malformed dialogue (the message names the update,
                the pair and the side).
        """
        from .dialogue import score_pairs

        try:
            scores = score_pairs(references, predictions, [self._method], self.encoder)[self._method]
        except ValueError as e:
            raise ValueError(f"{self._where()}: {e}") from e
        if len(scores):
            self.scores.append(self._tensor(scores))

    def compute(self) -> torch.Tensor | dict[str, torch.Tensor]:
        """The mean distance over every pair of every process.

        Returns:
            A float64 scalar tensor; with ``return_scores=True`` a dict with it under the metric's
            name and ``"scores"``, the distance of each pair (the processes' pairs one after the
            other under ``torch.distributed``).

        Raises:
            ValueError: No pair was scored.
        """
        scores = _cat(self.scores)
        if scores.numel() == 0:
            raise ValueError(f"{self._label}: no (reference, prediction) pair to score: call update() first")
        mean = scores.mean()
        return {self._method: mean, "scores": scores} if self.return_scores else mean


class FlowScore(_PairMetric):
    """FlowScore distance 1 - F (SPEC section 7) of (reference, prediction) pairs, averaged.

    The same values as :func:`dialfork_metrics.flowscore` and the ``flowscore`` evaluate module.

    Args:
        encoder: As the evaluate module's: an alias (default ``"minilm"``, packaged, offline), a
            local folder, a Hub id, a :class:`~dialfork_metrics.Encoder` or any object with
            ``encode(texts) -> (n, d)``.
        batch_size: Encoder batch size (for a name).
        device: The encoder's torch device (for a name); the metric's states follow ``.to()``.
        embedding_cache_dir: Persistent embedding cache folder (for a name).
        return_scores: ``compute()`` also returns the distance of each pair.
        **kwargs: ``torchmetrics.Metric`` options (``sync_on_compute``, ``process_group``, ...).

    Raises:
        ValueError: An unknown encoder name.

    Example:
        >>> from dialfork_metrics.torchmetrics import FlowScore  # doctest: +SKIP
        >>> m = FlowScore()  # doctest: +SKIP
        >>> m.update(predictions=[["hi", "your name?"]], references=[["hi", "your name?"]])  # doctest: +SKIP
        >>> float(m.compute())  # doctest: +SKIP
        0.0
    """

    _method = _label = "flowscore"


class FlowDTW(_PairMetric):
    """FlowDTW distance Gamma(n, m) / L (SPEC section 7) of (reference, prediction) pairs, averaged.

    The same values as :func:`dialfork_metrics.flowdtw` and the ``flowdtw`` evaluate module.

    Args:
        encoder: As :class:`FlowScore`.
        batch_size: Encoder batch size (for a name).
        device: The encoder's torch device (for a name).
        embedding_cache_dir: Persistent embedding cache folder (for a name).
        return_scores: ``compute()`` also returns the distance of each pair.
        **kwargs: ``torchmetrics.Metric`` options.

    Raises:
        ValueError: An unknown encoder name.
    """

    _method = _label = "flowdtw"


# ---------------------------------------------------------------------------- set level
class _SetMetric(_DialForkMetric):
    _sides = ("ref", "tgt")

    def _add_set_states(self, *names: str) -> None:
        for side in self._sides:
            for name in names:
                self.add_state(f"{side}_{name}", default=[], dist_reduce_fx="cat")
        self.add_state("dim", default=torch.zeros(()), dist_reduce_fx="max")
        self._float64()

    def forward(self, *args: Any, **kwargs: Any) -> None:
        """``update``: a set-level distance has no value per batch (call ``compute()`` at the end).

        Args:
            *args: As ``update``.
            **kwargs: As ``update``.
        """
        self.update(*args, **kwargs)

    def _check_dim(self, d: int) -> None:
        have = int(self.dim.item())
        if have and have != d:
            raise ValueError(
                f"{self._where()}: embeddings of dimension {d}, earlier updates gave {have} "
                "(one encoder for every update)"
            )
        self.dim = torch.tensor(float(d), dtype=torch.float64, device=self.device)

    def _rows(self, side: str, name: str) -> np.ndarray:
        flat = _cat(getattr(self, f"{side}_{name}")).detach().cpu().numpy()
        d = int(self.dim.item())
        return flat.reshape(-1, d) if d else flat.reshape(0, 0)


class FlowKL(_SetMetric):
    """FlowKL (SPEC section 7) of the set of predictions against the set of references.

    ``compute()`` fits the flow graph on every reference dialogue seen (all processes) and returns
    :func:`dialfork_metrics.flowkl` of the two sets on the turn embeddings ``update`` computed:
    the value of the core function (and of the ``flowkl`` evaluate module on one row) on the whole
    sets. The sets need not be paired nor of equal size; either side of an update may be empty.

    Args:
        encoder: As :class:`FlowScore`.
        batch_size: Encoder batch size (for a name).
        device: The encoder's torch device (for a name).
        embedding_cache_dir: Persistent embedding cache folder (for a name).
        distance_threshold: The graph's clustering cut (cosine distance).
        use_only_known_edges: As :func:`dialfork_metrics.flowkl` (None: the paper's reading).
        node_confidence: As :func:`dialfork_metrics.flowkl`.
        include_end: Count the last turn -> ``[end]`` transition.
        compat: None or ``"sdialog"`` (sdialog 0.5.3's numbers).
        **kwargs: ``torchmetrics.Metric`` options.

    Raises:
        ValueError: An unknown encoder name or ``compat``.
    """

    _label = "flowkl"

    def __init__(
        self,
        encoder: Any = None,
        *,
        batch_size: int = 64,
        device: str | None = None,
        embedding_cache_dir: str | None = None,
        distance_threshold: float = 0.55,
        use_only_known_edges: bool | None = None,
        node_confidence: bool | None = None,
        include_end: bool = False,
        compat: str | None = None,
        **kwargs: Any,
    ) -> None:
        if compat not in (None, "sdialog"):
            raise ValueError(f"flowkl: unknown compat {compat!r}; expected None or 'sdialog'")
        super().__init__(**kwargs)
        self._set_encoder(module_encoder(encoder, None, batch_size, device, embedding_cache_dir))
        self.flowkl_options = {
            "distance_threshold": float(distance_threshold),
            "use_only_known_edges": use_only_known_edges,
            "node_confidence": node_confidence,
            "include_end": bool(include_end),
            "compat": compat,
        }
        # per side: turn embeddings (flattened rows), speaker per turn (1 = system), turns per dialogue
        self._add_set_states("emb", "system", "turns")

    def update(self, predictions: Any, references: Any) -> None:
        """Add dialogues to the two sets (one encoder pass over their turns).

        Args:
            predictions: Dialogues of the target set (lists of turn strings, lists of
                ``{"speaker", "text"}`` dicts or records); may be empty.
            references: Dialogues of the reference set, in the same forms; may be empty.

        Raises:
            ValueError: A malformed dialogue (the message names the update, the set and the
                dialogue), or an encoder whose dimension differs from earlier updates'.
        """
        from .flowgraph.graph import _encode_sets, _prepare_set

        try:
            sets = [_prepare_set(references, "reference set"), _prepare_set(predictions, "target set")]
            embedded = _encode_sets(self.encoder, sets)
        except ValueError as e:
            raise ValueError(f"{self._where()}: {e}") from e
        for side, dialogues, embs in zip(self._sides, sets, embedded):
            if not dialogues:
                continue
            E = np.concatenate(embs, axis=0)
            self._check_dim(E.shape[1])
            getattr(self, f"{side}_emb").append(self._tensor(E))
            getattr(self, f"{side}_system").append(
                self._tensor([t["speaker"] == "system" for d in dialogues for t in d])
            )
            getattr(self, f"{side}_turns").append(self._tensor([len(d) for d in dialogues]))

    def _set(self, side: str) -> tuple[list[list[dict[str, str]]], list[np.ndarray]]:
        # DialFork encoders give float32: back to it, so that the graph clusters what the core would
        E = self._rows(side, "emb").astype(np.float32)
        system = _cat(getattr(self, f"{side}_system")).cpu().numpy()
        bounds = np.concatenate([[0], np.cumsum(_cat(getattr(self, f"{side}_turns")).cpu().numpy())]).astype(
            np.int64
        )
        # the texts only name the graph's nodes: FlowKL reads the speakers and the embeddings
        dialogues = [
            [{"speaker": "system" if s else "user", "text": "-"} for s in system[a:b]]
            for a, b in zip(bounds[:-1], bounds[1:])
        ]
        return dialogues, [E[a:b] for a, b in zip(bounds[:-1], bounds[1:])]

    def compute(self) -> torch.Tensor:
        """FlowKL(references, predictions) over every dialogue of every process.

        Returns:
            A float64 scalar tensor (>= 0 up to the KDE's float noise; 0 for the same sets).

        Raises:
            ValueError: A set with fewer than 2 dialogues, or as :func:`dialfork_metrics.flowkl`.
        """
        from .flowgraph import flowkl

        (ref, E_ref), (tgt, E_tgt) = self._set("ref"), self._set("tgt")
        try:
            value = flowkl(ref, tgt, ref_embeddings=E_ref, tgt_embeddings=E_tgt, **self.flowkl_options)
        except ValueError as e:
            raise ValueError(f"{self._label}: {e}") from e
        return torch.tensor(value, dtype=torch.float64, device=self.device)


class FBD(_SetMetric):
    """FBD (Xiang et al. 2021; SPEC section 7) of the set of predictions against the set of references.

    ``update`` embeds the turn pairs of each dialogue (``[CLS]`` of the pair, as
    :func:`dialfork_metrics.fbd`); ``compute()`` fits the two Gaussians on every pair of every
    process: :func:`dialfork_metrics.fbd_from_embeddings`, the value of :func:`dialfork_metrics.fbd`
    on the whole sets.

    Args:
        encoder: As :class:`FlowScore` (a transformer-based sentence-transformers model: its
            transformer embeds the pairs), or a :class:`~dialfork_metrics.pair_encoder.PairEncoder`.
        batch_size: Pairs per forward pass.
        device: The encoder's torch device (for a name).
        embedding_cache_dir: Persistent embedding cache folder (for a name).
        pairing: ``"system_user"`` (default, SPEC), ``"user_system"`` or ``"sliding"``.
        compat: None or ``"sdialog"`` (sliding pairs, as sdialog 0.5.3).
        **kwargs: ``torchmetrics.Metric`` options.

    Raises:
        ValueError: An unknown encoder name, ``pairing`` or ``compat``.
    """

    _label = "fbd"

    def __init__(
        self,
        encoder: Any = None,
        *,
        batch_size: int = 64,
        device: str | None = None,
        embedding_cache_dir: str | None = None,
        pairing: str | None = None,
        compat: str | None = None,
        **kwargs: Any,
    ) -> None:
        from .pair_encoder import PairEncoder, pair_encoder_for
        from .setlevel import fbd_pairing

        pairing = fbd_pairing(pairing, compat)
        super().__init__(**kwargs)
        self.pairing = pairing
        if not isinstance(encoder, PairEncoder):
            encoder = pair_encoder_for(
                module_encoder(encoder, None, batch_size, device, embedding_cache_dir), batch_size=batch_size
            )
        self._set_encoder(encoder)
        self._add_set_states("pairs")

    def update(self, predictions: Any, references: Any) -> None:
        """Add the turn pairs of dialogues to the two sets.

        Args:
            predictions: Dialogues of the target set (lists of turn strings, lists of
                ``{"speaker", "text"}`` dicts or records); may be empty.
            references: Dialogues of the reference set, in the same forms; may be empty.

        Raises:
            ValueError: A malformed dialogue (the message names the update, the set and the
                dialogue), or an encoder whose dimension differs from earlier updates'.
        """
        from .pair_encoder import set_turn_pairs
        from .setlevel import _as_list

        for side, dialogues, name in (
            ("ref", references, "reference set"),
            ("tgt", predictions, "target set"),
        ):
            try:
                pairs = set_turn_pairs(_as_list(dialogues, name), self.pairing, name)
                if not pairs:
                    continue
                X = self.encoder.encode_pairs([a for a, _ in pairs], [b for _, b in pairs])
            except ValueError as e:
                raise ValueError(f"{self._where()}: {e}") from e
            self._check_dim(X.shape[1])
            getattr(self, f"{side}_pairs").append(self._tensor(X))

    def compute(self) -> torch.Tensor:
        """FBD(references, predictions) over every turn pair of every process.

        Returns:
            A float64 scalar tensor (>= 0).

        Raises:
            ValueError: A set with fewer than 2 turn pairs (as
                :func:`dialfork_metrics.fbd_from_embeddings`).
        """
        from .setlevel import fbd_from_embeddings

        try:
            value = fbd_from_embeddings(self._rows("ref", "pairs"), self._rows("tgt", "pairs"))
        except ValueError as e:
            raise ValueError(f"{self._label}: {e}") from e
        return torch.tensor(value, dtype=torch.float64, device=self.device)


__all__ = ["FBD", "FlowDTW", "FlowKL", "FlowScore"]
