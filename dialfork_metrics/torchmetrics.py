"""``torchmetrics`` metrics for training and evaluation loops on several processes (issue 37).

Every registered metric that computes from the dialogues has a class, made from its entry in the
metric registry (:mod:`dialfork_metrics.registry`) by :func:`metric_class`: a pair metric's
scores (reference, prediction) pairs of dialogues and averages them (:class:`FlowScore`,
:class:`FlowDTW`, ``metric_class("mean_turn")``, and any metric registered at run time); a set
metric's compares the set of predictions with the set of references (:class:`FlowKL` and
:class:`FBD`, classes of their own; ``metric_class("turn_count_diff", "set")``, ...). Each is a
``torchmetrics.Metric``: ``update(predictions, references)`` once per batch, ``compute()`` at the
end, and under ``torch.distributed`` (DDP, ``accelerate``, Lightning) ``compute()`` first gathers
the state of every process, so N processes that each saw part of the data give the value of one
process that saw all of it. The math and the input checks are the library's
(:func:`~dialfork_metrics.dialogue.score_pairs`, :func:`~dialfork_metrics.flowgraph.flowkl`,
:func:`~dialfork_metrics.setlevel.fbd_from_embeddings`, a set metric's ``fn``); the ``evaluate``
modules (:func:`dialfork_metrics.load`) call the same functions.

States, all ``dist_reduce_fx="cat"`` lists of 1-D float64 tensors (plus ``dim``, reduced by
``"max"``), so that a process that saw no batch still joins the gather:

- per pair: the value of every pair. The mean does not depend on the order in which the
  processes' pairs are gathered;
- FlowKL: the turn embeddings, speakers and turn counts of every reference and every predicted
  dialogue. The graph is fitted on all gathered references at ``compute()``: a graph fitted per
  process and merged would not be the graph of the whole set;
- FBD: the turn-pair embeddings of each set (the Gaussians are fitted at ``compute()``);
- another set metric: the dialogues of each set as UTF-8 text (its ``fn`` runs at ``compute()``).

Embeddings of pairs, FlowKL and FBD are computed in ``update`` (the encoder runs where the batch
is); their ``compute()`` needs no encoder. This module imports ``torch`` and ``torchmetrics`` (``pip
install "dialfork[torchmetrics]"``); ``import dialfork_metrics`` does not load it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torchmetrics import Metric

from . import registry
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
    """A registered pair metric (:func:`metric_class` makes one subclass per registry entry)."""

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
        needs_encoder = "encoder" in registry.get(self._method, "pair").needs
        self._set_encoder(
            module_encoder(encoder, None, batch_size, device, embedding_cache_dir)
            if needs_encoder
            else encoder
        )
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
        """The mean value over every pair of every process.

        Returns:
            A float64 scalar tensor; with ``return_scores=True`` a dict with it under the metric's
            name and ``"scores"``, the value of each pair (the processes' pairs one after the
            other under ``torch.distributed``).

        Raises:
            ValueError: No pair was scored.
        """
        scores = _cat(self.scores)
        if scores.numel() == 0:
            raise ValueError(f"{self._label}: no (reference, prediction) pair to score: call update() first")
        mean = scores.mean()
        return {self._method: mean, "scores": scores} if self.return_scores else mean


_PAIR_DOC = """{label} (the registered Task 2 metric ``{name}``) of (reference, prediction) pairs, averaged.

    The same values as :func:`dialfork_metrics.dialogue.score_pairs` with ``["{name}"]``{fn}; {direction}.
    Made from the metric registry (:func:`dialfork_metrics.torchmetrics.metric_class`).

    Args:
        encoder: {encoder}
        batch_size: Encoder batch size (for a name).
        device: The encoder's torch device (for a name); the metric's states follow ``.to()``.
        embedding_cache_dir: Persistent embedding cache folder (for a name).
        return_scores: ``compute()`` also returns the value of each pair.
        **kwargs: ``torchmetrics.Metric`` options (``sync_on_compute``, ``process_group``, ...).

    Raises:
        ValueError: An unknown encoder name.
    """

_ENCODER_DOC = (
    'As the evaluate modules\': an alias (default ``"minilm"``, packaged, offline), a local folder, a '
    "Hub id, a :class:`~dialfork_metrics.Encoder` or any object with ``encode(texts) -> (n, d)``."
)
_NO_ENCODER_DOC = "Unused: the metric reads the turns' texts, not their embeddings."


# ---------------------------------------------------------------------------- set level
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


class _SetDialogueMetric(_SetMetric):
    """A registered set metric computed by its function on the two gathered sets of dialogues
    (:func:`metric_class` makes one subclass per registry entry without a class of its own)."""

    _method = ""

    def __init__(
        self,
        encoder: Any = None,
        *,
        batch_size: int = 64,
        device: str | None = None,
        embedding_cache_dir: str | None = None,
        options: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        needs = registry.get(self._method, "set").needs
        encoded = "encoder" in needs or "pair_encoder" in needs
        self._set_encoder(
            module_encoder(encoder, None, batch_size, device, embedding_cache_dir) if encoded else encoder
        )
        self._encoded = encoded
        self.options = dict(options or {})
        # per side: the dialogues' JSON as UTF-8 byte values, and the byte count of each dialogue
        self._add_set_states("text", "sizes")

    def update(self, predictions: Any, references: Any) -> None:
        """Add dialogues to the two sets.

        Args:
            predictions: Dialogues of the target set (lists of turn strings, lists of
                ``{"speaker", "text"}`` dicts or records); may be empty.
            references: Dialogues of the reference set, in the same forms; may be empty.

        Raises:
            ValueError: A malformed dialogue (the message names the update, the set and the dialogue).
        """
        from .flowgraph.graph import _prepare_set

        try:
            sets = [_prepare_set(references, "reference set"), _prepare_set(predictions, "target set")]
        except ValueError as e:
            raise ValueError(f"{self._where()}: {e}") from e
        for side, dialogues in zip(self._sides, sets):
            if not dialogues:
                continue
            blobs = [json.dumps(d, ensure_ascii=False).encode("utf-8") for d in dialogues]
            getattr(self, f"{side}_text").append(self._tensor(np.frombuffer(b"".join(blobs), dtype=np.uint8)))
            getattr(self, f"{side}_sizes").append(self._tensor([len(b) for b in blobs]))

    def _dialogues(self, side: str) -> list[list[dict[str, str]]]:
        data = _cat(getattr(self, f"{side}_text")).cpu().numpy().astype(np.uint8).tobytes()
        sizes = _cat(getattr(self, f"{side}_sizes")).cpu().numpy().astype(np.int64)
        bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        return [json.loads(data[a:b].decode("utf-8")) for a, b in zip(bounds[:-1], bounds[1:])]

    def compute(self) -> torch.Tensor:
        """The metric's function on the reference and target sets of every process.

        Returns:
            A float64 scalar tensor.

        Raises:
            ValueError: As the metric's function (e.g. a set too small), prefixed with its name.
        """
        fn = registry.get(self._method, "set").fn_callable()
        args = (self.encoder,) if self._encoded else ()
        try:
            value = fn(self._dialogues("ref"), self._dialogues("tgt"), *args, **self.options)
        except ValueError as e:
            raise ValueError(f"{self._label}: {e}") from e
        return torch.tensor(float(value), dtype=torch.float64, device=self.device)


_SET_DOC = """{label} (the registered Task 1 metric ``{name}``) of the set of predictions against the set of references.

    ``compute()`` calls ``{fn}`` on every reference and every prediction seen (all processes:
    the dialogues are gathered as text){encoded}; {direction}. Made from the metric registry
    (:func:`dialfork_metrics.torchmetrics.metric_class`).

    Args:
        encoder: {encoder}
        batch_size: Encoder batch size (for a name).
        device: The encoder's torch device (for a name).
        embedding_cache_dir: Persistent embedding cache folder (for a name).
        options: Keyword arguments of the metric's function.
        **kwargs: ``torchmetrics.Metric`` options.

    Raises:
        ValueError: An unknown encoder name.
    """

#: The set metrics with a class of their own (their embeddings are computed in ``update``).
_OWN_CLASSES: dict[tuple[str, str], type[_DialForkMetric]] = {("set", "flowkl"): FlowKL, ("set", "fbd"): FBD}
_MADE: dict[tuple[str, str], tuple[Any, type[_DialForkMetric]]] = {}


def class_name(name: str, level: str = "pair") -> str:
    """The class name of a registered metric's ``torchmetrics`` class.

    Args:
        name: The metric's name.
        level: ``"pair"`` or ``"set"``.

    Returns:
        Its label when the label spells the name (``FlowScore``, ``FBD``), else the name in
        CamelCase (``MeanTurn``), prefixed ``Set`` for a set metric whose name is also a pair
        metric's (``SetTurnCountDiff``).

    Raises:
        RegistryError: No such metric (a ``ValueError``).
    """
    spec = registry.get(name, level)
    own = _OWN_CLASSES.get((level, spec.name))
    if own is not None:
        return own.__name__
    if spec.label.isidentifier() and spec.label.lower() == spec.name.lower():
        return spec.label
    camel = "".join(p[:1].upper() + p[1:] for p in re.split(r"[^0-9A-Za-z]+", spec.name) if p)
    if not camel[:1].isalpha():
        camel = "Metric" + camel
    return "Set" + camel if level == "set" and spec.name in registry.view("pair") else camel


def metric_class(name: str, level: str = "pair") -> type[Metric]:
    """The ``torchmetrics`` class of a registered metric, made from its registry entry.

    A pair metric's class scores each (reference, prediction) pair with
    :func:`~dialfork_metrics.dialogue.score_pairs` (its ``core``) and averages; a set metric's class
    calls its ``fn`` on the two gathered sets (FlowKL and FBD have classes of their own, which
    embed in ``update``). ``higher_is_better`` follows the entry's ``direction``. The class is made
    once per entry: the same object while the entry is registered.

    Args:
        name: The metric's name.
        level: ``"pair"`` (Task 2) or ``"set"`` (Task 1).

    Returns:
        The class (a ``torchmetrics.Metric`` subclass).

    Raises:
        RegistryError: No such metric (a ``ValueError``; the message lists the registered ones).
        ValueError: The metric computes nothing from the dialogues: a pair metric whose values are
            drawn from a seed (Random), or a set metric without a public ``fn``.
    """
    spec = registry.get(name, level)
    own = _OWN_CLASSES.get((level, spec.name))
    if own is not None:
        return own
    made = _MADE.get((level, spec.name))
    if made is not None and made[0] is spec:
        return made[1]
    where = f"{level} metric {spec.name!r}"
    if level == "pair" and spec.core is None:
        raise ValueError(f"{where} has no torchmetrics class: its values are drawn from a seed, not computed")
    if level == "set" and spec.fn is None:
        raise ValueError(
            f"{where} has no torchmetrics class: its entry names no fn (the function over two sets "
            "of dialogues); give the MetricSpec an fn"
        )
    cname = class_name(spec.name, level)
    base, doc = (_PairMetric, _PAIR_DOC) if level == "pair" else (_SetDialogueMetric, _SET_DOC)
    encoded = bool({"encoder", "pair_encoder"} & set(spec.needs))
    fn_text = spec.fn if isinstance(spec.fn, str) else getattr(spec.fn, "__qualname__", repr(spec.fn))
    cls = type(
        cname,
        (base,),
        {
            "__doc__": doc.format(
                label=spec.label,
                name=spec.name,
                fn=f" and ``{fn_text}``" if level == "pair" and spec.fn else fn_text,
                encoded=" with the encoder" if encoded else "",
                direction="a higher value is closer"
                if spec.direction == "higher"
                else "a lower value is closer",
                encoder=_ENCODER_DOC if encoded else _NO_ENCODER_DOC,
            ),
            "__module__": __name__,
            "__qualname__": cname,
            "_method": spec.name,
            "_label": spec.name,
            "higher_is_better": spec.direction == "higher",
        },
    )
    _MADE[(level, spec.name)] = (spec, cls)
    return cls


def metric_classes(level: str = "pair") -> dict[str, type[Metric]]:
    """The ``torchmetrics`` classes of every registered metric of a level that computes from the
    dialogues (:func:`metric_class`).

    Args:
        level: ``"pair"`` or ``"set"``.

    Returns:
        ``{name: class}`` in registration (table) order.
    """
    out = {}
    for spec in registry.specs(level):
        try:
            out[spec.name] = metric_class(spec.name, level)
        except ValueError:  # drawn from a seed, or no fn: nothing to compute
            continue
    return out


FlowScore = metric_class("flowscore")
"""FlowScore distance 1 - F (SPEC section 7) of (reference, prediction) pairs, averaged: the class
:func:`metric_class` makes from the registry's ``flowscore`` entry (the same values as
:func:`dialfork_metrics.flowscore` and the ``flowscore`` evaluate module). ``FlowScore(encoder="minilm",
*, batch_size=64, device=None, embedding_cache_dir=None, return_scores=False, **kwargs)``."""

FlowDTW = metric_class("flowdtw")
"""FlowDTW distance Gamma(n, m) / L (SPEC section 7) of (reference, prediction) pairs, averaged: the
class :func:`metric_class` makes from the registry's ``flowdtw`` entry (the same values as
:func:`dialfork_metrics.flowdtw` and the ``flowdtw`` evaluate module); arguments as :data:`FlowScore`."""


def __getattr__(name: str) -> Any:
    """The class of any registered metric by its :func:`class_name` (``MeanTurn``, ...), made on access."""
    for level in registry.LEVELS:
        for spec in registry.specs(level):
            if class_name(spec.name, level) == name:
                try:
                    return metric_class(spec.name, level)
                except ValueError:
                    break
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["FBD", "FlowDTW", "FlowKL", "FlowScore", "class_name", "metric_class", "metric_classes"]
