"""The streaming detector (:class:`StreamingDetector`): settings, node assignment, the streaming step
and the offline loops over whole dialogues. Fitting and persistence live in :mod:`.fitting` and
:mod:`.persistence` (mixins); the pure decision rules in :mod:`.decision`."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from numbers import Integral, Real
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils._param_validation import (
    HasMethods,
    Interval,
    StrOptions,
    validate_parameter_constraints,
)

from dialfork_dataset.turns import as_turns

from ._common import NotFittedError, _encoder_name, _task_of, _where, resolve_encoder
from .decision import (
    DEFAULT_CONFIDENCE,
    DEFAULT_FALSE_ALARM_RATE,
    DEFAULT_THRESHOLD_RULE,
    METHODS,
    THRESHOLD_RULES,
    calibration_statistic,
    system_turn_index,
)
from .fitting import FitMixin
from .persistence import PersistenceMixin
from .presets import (
    CALIBRATIONS,
    CROSS_FIT_NODES,
    DEFAULT_K,
    DEFAULT_TAU,
    PRESETS,
    SCOPES,
    SELECTABLE,
    SPEAKERS,
    preset_settings,
)
from .stream import StepResult, StepState, Stream

PERCENTILE_METHODS: tuple[str, ...] = (
    "inverted_cdf",
    "averaged_inverted_cdf",
    "closest_observation",
    "interpolated_inverted_cdf",
    "hazen",
    "weibull",
    "linear",
    "median_unbiased",
    "normal_unbiased",
    "lower",
    "higher",
    "midpoint",
    "nearest",
)
"""``numpy.percentile``'s methods (the valid ``percentile_method`` values)."""

logger = logging.getLogger("dialfork_metrics.task3.streaming")


class StreamingDetector(FitMixin, PersistenceMixin, BaseEstimator):
    """IT or SS detector, with or without node confidence (see the module doc).

    Args:
        method: ``"it"`` or ``"ss"``.
        node_confidence: Weight ``p_t`` by the node confidence ``c_t`` (the ``+NC`` variants).
        order: N of the N-gram LM (>= 1; paper: 6 in Table 4, 3 in Table 9).
        K: The node confidence is a softmax over the ``K`` nearest centroids (sdialog: 64).
        tau: The temperature of that softmax (sdialog: 0.05).
        distance_threshold: Cosine distance threshold of the node clustering (FlowKL default 0.55, tuned
            for D2F; the selection picks one per encoder).
        false_alarm_rate: The operating point: target share of conformant dialogues that raise an
            alarm (default 5%, the paper's). The threshold is read off the calibration statistic
            by ``threshold_rule``; :meth:`recalibrate` moves it without refitting.
        percentile_method: ``numpy.percentile`` interpolation method (default ``"linear"``).
        backoff: N-gram back-off for unseen contexts (ours; off = the paper's Laplace N-gram).
        calibration: ``"in_sample"`` (SPEC: the percentile of the statistic of the train dialogues
            under the LM fitted on them) or ``"cross_fit"`` (ours: the statistic of each train
            dialogue under an LM fitted on the other ``calibration_folds`` folds, seeded by
            ``calibration_seed``). In-sample, every train context has been seen, so a test dialogue's
            unseen context (``p = 1/(count + V)``) falls below thresholds calibrated on seen ones; the
            out-of-fold statistic sees unseen contexts as test data does, so the false-alarm target
            holds on held-out dialogues.
        calibration_folds: Folds of ``calibration="cross_fit"`` (>= 2; default 5).
        calibration_seed: Seed of the permutation that deals train dialogues into those folds.
        cross_fit_nodes: How ``cross_fit`` gets each fold's nodes (ours): ``"restrict"`` (default: the
            split's clusters, centroids and node confidences from the other folds' utterances only),
            ``"recluster"`` (cluster the other folds anew; exact, one clustering per fold) or
            ``"fixed"`` (the whole split's nodes, only the LM refitted; held-out dialogues then look
            more familiar than test ones and the target is exceeded on test).
        threshold_rule: How the threshold is read off the calibration statistics
            (:func:`~dialfork_metrics.task3.streaming.calibrate_threshold`): ``"percentile"`` (the
            paper's; the ``paper`` preset's default), ``"conformal"`` (the split-conformal
            ``(n + 1)`` quantile: a new conformant dialogue alarms with probability at most
            ``false_alarm_rate``) or ``"upper_bound"`` (the ``selected`` preset's default: at most as
            many calibration dialogues alarm as keep the one-sided Clopper-Pearson upper bound of the
            false-alarm rate, at ``confidence``, within ``false_alarm_rate``).
        confidence: The confidence of ``threshold_rule="upper_bound"`` (default 0.95).
        scope: ``"task"`` (one model per STAR task, read from each dialogue's ``task`` field; the
            paper's, whose nodes are FlowKL's per-task clustering) or ``"pooled"`` (one model over all
            train dialogues). Train dialogues without a ``task`` field form one group; a dialogue to
            predict without one (the blind leaderboard set) is routed at its first turn
            (:meth:`route_task`).
        preset: Where unset settings (``None``) come from: ``"selected"`` (default; chosen on train data
            by cross-validation, per detector and encoder) or ``"paper"`` (the paper's literal settings).
        encoder: Alias/path for :class:`dialfork_metrics.encoders.Encoder`, an encoder object, or
            ``None`` (then every call must pass precomputed ``embeddings``).
        position_weight: ``gamma >= 0`` (ours; ``paper`` preset 0): at system turn ``j`` IT alarms
            when ``p_t / j^gamma`` falls below the threshold and SS when ``Delta_t + gamma log j``
            rises above it (:func:`~dialfork_metrics.task3.streaming.turn_scores`), and the threshold
            is calibrated on the same weighted statistic, so the false-alarm target is unchanged. An
            early alarm then needs stronger evidence: a false alarm at system turn ``j`` interrupts
            the ``T + 1 - j`` turns left (what MAE_c charges).

    A scikit-learn estimator (``BaseEstimator``: ``get_params``, ``set_params``, ``clone``). The
    constructor only stores its parameters, as given (a setting left to the preset stays ``None``,
    so :meth:`get_params` and ``clone`` round-trip). :meth:`fit` checks the parameters against the
    class's constraint table (``_parameter_constraints``), resolves the presets, checks the resolved
    settings against the same table and sets the fitted attributes, whose names end in ``_``: the
    settings it runs with (``order_``, ``distance_threshold_``, ``backoff_``, ``calibration_``,
    ``scope_``, ``position_weight_``, ``threshold_rule_``, ``settings_source_``; :meth:`settings`
    reads them), ``centroids_`` (per speaker, the ``(n_nodes, d)`` unit centroids of one model),
    ``node_offsets_`` (per speaker, the global id of its first node), ``lm_`` (the fitted
    :class:`~dialfork_metrics.task3.baselines.ngram.NgramLM` of one model), ``threshold_`` (the alarm threshold
    of one model), ``calibration_stats_`` (the calibration statistic of each train dialogue of one
    model), ``train_false_alarm_rate_`` (the share of train dialogues that alarm), ``n_train_``,
    ``task_models_`` (``scope="task"`` with several tasks: one fitted single-model detector per task;
    ``{}`` otherwise, and then ``centroids_``, ``lm_``, ``threshold_``... are empty or None on the
    detector itself) and ``tasks_`` (the task(s) it was fitted on, ``[None]`` for dialogues without
    a task).

    Raises:
        InvalidParameterError: From :meth:`fit` (or :meth:`resolved_settings`): an invalid parameter
            or preset-resolved setting (scikit-learn's; a ``ValueError`` and a ``TypeError``).
        ValueError: From :meth:`fit`: no selected settings for the detector and encoder.
        TypeError: ``encoder`` is neither ``None``, a string nor an encoder object (when it is resolved).
    """

    _parameter_constraints: dict = {
        "method": [StrOptions(set(METHODS))],
        "node_confidence": ["boolean"],
        "preset": [StrOptions(set(PRESETS))],
        "order": [Interval(Integral, 1, None, closed="left"), None],
        "K": [Interval(Integral, 1, None, closed="left")],
        "tau": [Interval(Real, 0, None, closed="neither")],
        "distance_threshold": [Interval(Real, 0, 2, closed="right"), None],
        "false_alarm_rate": [Interval(Real, 0, 1, closed="neither")],
        "percentile_method": [StrOptions(set(PERCENTILE_METHODS))],
        "backoff": ["boolean", None],
        "calibration": [StrOptions(set(CALIBRATIONS)), None],
        "calibration_folds": [Interval(Integral, 2, None, closed="left")],
        "calibration_seed": [Interval(Integral, None, None, closed="neither")],
        "encoder": [None, str, HasMethods(["encode_dialogues"])],
        "position_weight": [Interval(Real, 0, None, closed="left"), None],
        "scope": [StrOptions(set(SCOPES)), None],
        "threshold_rule": [StrOptions(set(THRESHOLD_RULES)), None],
        "cross_fit_nodes": [StrOptions(set(CROSS_FIT_NODES))],
        "confidence": [Interval(Real, 0, 1, closed="neither")],
    }
    """The constraint table :meth:`fit` checks, on the parameters and on the preset-resolved
    settings (:meth:`resolved_settings`); ``None`` (left to the preset) is a valid parameter only."""

    def __init__(
        self,
        method: str = "it",
        node_confidence: bool = False,
        order: int | None = None,
        K: int = DEFAULT_K,
        tau: float = DEFAULT_TAU,
        distance_threshold: float | None = None,
        false_alarm_rate: float = DEFAULT_FALSE_ALARM_RATE,
        percentile_method: str = "linear",
        backoff: bool | None = None,
        calibration: str | None = None,
        calibration_folds: int = 5,
        calibration_seed: int = 0,
        encoder: Any = "minilm",
        scope: str | None = None,
        preset: str = "selected",
        threshold_rule: str | None = None,
        confidence: float = DEFAULT_CONFIDENCE,
        cross_fit_nodes: str = "restrict",
        position_weight: float | None = None,
    ):
        # scikit-learn's convention: store the parameters as given; fit() checks them, resolves the
        # presets (_resolve_params), and the values it runs with are the fitted order_, scope_, ...
        self.method = method
        self.node_confidence = node_confidence
        self.order = order
        self.K = K
        self.tau = tau
        self.distance_threshold = distance_threshold
        self.false_alarm_rate = false_alarm_rate
        self.percentile_method = percentile_method
        self.threshold_rule = threshold_rule
        self.confidence = confidence
        self.cross_fit_nodes = cross_fit_nodes
        self.backoff = backoff
        self.calibration = calibration
        self.calibration_folds = calibration_folds
        self.calibration_seed = calibration_seed
        self.scope = scope
        self.position_weight = position_weight
        self.preset = preset
        self.encoder = encoder
        self._encoder: tuple[Any, Any] | None = None  # (the encoder parameter, the object it resolved to)
        self._parent: StreamingDetector | None = None

    # -- parameters --------------------------------------------------------------------------
    def resolved_settings(self) -> tuple[dict[str, Any], dict[str, str]]:
        """The settings the parameters resolve to (presets filled in), each checked against the
        constraint table; reads the parameters only (what :meth:`fit` runs with).

        Returns:
            ``(settings, source)``: the six :data:`SELECTABLE` settings plus ``threshold_rule``,
            and for each selectable setting ``"explicit"`` or ``"preset:<preset>"``.

        Raises:
            InvalidParameterError: An invalid parameter or resolved setting (scikit-learn's, a
                ``ValueError``; the message names it and its value).
            ValueError: No selected settings for the detector.
        """
        self._validate_params()
        explicit = {k: getattr(self, k) for k in SELECTABLE}
        defaults = preset_settings(self.preset, self.name, _encoder_name(self.encoder))
        settings = {k: (defaults[k] if explicit[k] is None else explicit[k]) for k in SELECTABLE}
        rule = self.threshold_rule
        settings["threshold_rule"] = (
            rule if rule is not None else ("percentile" if self.preset == "paper" else DEFAULT_THRESHOLD_RULE)
        )
        validate_parameter_constraints(
            self._parameter_constraints,
            {**self.get_params(deep=False), **settings},
            caller_name=f"{type(self).__name__} (with the {self.preset!r} preset's settings)",
        )
        settings["distance_threshold"] = float(settings["distance_threshold"])
        settings["backoff"] = bool(settings["backoff"])
        settings["position_weight"] = float(settings["position_weight"])
        source = {k: ("explicit" if explicit[k] is not None else f"preset:{self.preset}") for k in SELECTABLE}
        return settings, source

    def _resolve_params(self) -> StreamingDetector:
        """Check the parameters and set the settings the detector runs with (``order_``, ``scope_``,
        ..., ``settings_source_``); returns ``self``."""
        settings, source = self.resolved_settings()
        for k, v in settings.items():
            setattr(self, k + "_", v)
        self.settings_source_ = source
        return self

    @property
    def settings_source(self) -> dict[str, str]:
        """Where each selectable setting comes from: ``"explicit"`` or ``"preset:<preset>"`` (after
        :meth:`fit` or :meth:`load`: those it was fitted with).

        Raises:
            InvalidParameterError: Not fitted, and the parameters are invalid (a ``ValueError``).
        """
        source = self.__dict__.get("settings_source_")
        return dict(source) if source is not None else self.resolved_settings()[1]

    # -- names, encoder ----------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.method + ("+nc" if self.node_confidence else "")

    def __repr__(self) -> str:
        fitted = f"fitted on {self.n_train_}, V={self.vocab_size}" if self.is_fitted else "not fitted"
        models = self.__dict__.get("task_models_")
        scope = f", {len(models)} task models" if models else ""
        return (
            f"StreamingDetector({self.name!r}, N={self.__dict__.get('order_', self.order)}, {fitted}{scope})"
        )

    def get_encoder(self):
        """The encoder object the detector embeds turns with (a task model: its parent's).

        Returns:
            ``None`` (``encoder=None``: embeddings must be passed), the shared instance of an alias
            or path, or the encoder object given; resolved once per ``encoder`` value.

        Raises:
            TypeError: ``encoder`` is neither ``None``, a string nor an encoder object.
        """
        if self._parent is not None:
            return self._parent.get_encoder()
        if self._encoder is None or self._encoder[0] is not self.encoder:
            self._encoder = (self.encoder, resolve_encoder(self.encoder))
        return self._encoder[1]

    @property
    def is_fitted(self) -> bool:
        """Whether :meth:`fit` (or :meth:`load`) has run."""
        d = self.__dict__
        return bool(d.get("task_models_")) or (d.get("lm_") is not None and d.get("threshold_") is not None)

    def __sklearn_is_fitted__(self) -> bool:
        return self.is_fitted

    @property
    def vocab_size(self) -> int:
        """The number of nodes (all task models together); 0 before :meth:`fit`."""
        models = self.__dict__.get("task_models_")
        if models:
            return sum(m.vocab_size for m in models.values())
        return sum(len(c) for c in self.__dict__.get("centroids_", {}).values())

    @property
    def node_names(self) -> list[str]:
        """Global node names (``"user:0"``, ..., ``"system:0"``, ...), indexed by node id (one model)."""
        cents = self.__dict__.get("centroids_", {})
        return [f"{sp}:{i}" for sp in SPEAKERS if sp in cents for i in range(len(cents[sp]))]

    @property
    def thresholds(self) -> dict[str | None, float]:
        """The threshold of each model, by task (``{task: threshold_}``; one entry for one model)."""
        return {k: m.threshold_ for k, m in self.models().items()}

    def models(self) -> dict[str | None, StreamingDetector]:
        """The fitted single models by task: ``task_models_``, or ``{task: self}`` for one model.

        Returns:
            dict: task (``None`` for a pooled model or dialogues without a task) -> single-model detector.

        Raises:
            NotFittedError: The detector is not fitted.
        """
        self.check_is_fitted()
        if self.task_models_:
            return dict(self.task_models_)
        return {(self.tasks_[0] if len(self.tasks_) == 1 else None): self}

    def for_task(self, task: str | None = None) -> StreamingDetector:
        """The single model that watches dialogues of ``task`` (``self`` when there is one model).
        Its :meth:`start`, :meth:`step` and thresholds are those of that task.

        Args:
            task: The STAR task; ``None`` for a pooled model or dialogues without a task field.

        Returns:
            The single-model detector of that task.

        Raises:
            NotFittedError: The detector is not fitted.
            ValueError: No model was fitted for ``task``; the message lists the fitted tasks.
        """
        self.check_is_fitted()
        if not self.task_models_:
            if task is not None and self.scope_ == "task" and self.tasks_ not in ([None], [task]):
                raise ValueError(f"this detector was fitted on task(s) {self.tasks_}, not {task!r}")
            return self
        if task not in self.task_models_:
            known = ", ".join(sorted(str(t) for t in self.task_models_))
            raise ValueError(
                f"no model for task {task!r} (scope='task'; fitted tasks: {known}); give each "
                "dialogue its 'task' field, or fit with scope='pooled'"
            )
        return self.task_models_[task]

    def route_task(self, speaker: str, embedding: np.ndarray) -> str | None:
        """The task whose model should watch a dialogue with no ``task`` field (e.g. the blind
        leaderboard set), decided at its first turn only (so streaming stays causal): the task
        model with the node most similar (cosine) to that turn among ``speaker``'s nodes; ties
        go to the first task in sorted order.

        Args:
            speaker: The first turn's speaker, ``"user"`` or ``"system"``.
            embedding: The first turn's embedding, ``d`` values.

        Returns:
            The task (of one model: its only task, or ``None`` when pooled).

        Raises:
            NotFittedError: The detector is not fitted.
            ValueError: No task model has a node for ``speaker``.
        """
        self.check_is_fitted()
        if not self.task_models_:
            return self.tasks_[0] if len(self.tasks_) == 1 else None
        e = np.asarray(embedding, dtype=np.float64).reshape(-1)
        e = e / (np.linalg.norm(e) or 1.0)
        best, best_sim = None, -np.inf
        for task in sorted(self.task_models_, key=str):
            C = self.task_models_[task].centroids_.get(speaker)
            if C is None:
                continue
            sim = float(np.max(C @ e))
            if sim > best_sim:
                best, best_sim = task, sim
        if best is None:
            raise ValueError(f"no task model has a node for speaker {speaker!r}")
        return best

    def check_is_fitted(self) -> None:
        """Raise unless :meth:`fit` (or :meth:`load`) has run (scikit-learn's ``check_is_fitted``).

        Raises:
            NotFittedError: Not fitted; the message says how to fit or load one.
        """
        if not self.is_fitted:
            raise NotFittedError(
                f"this {self.name!r} detector is not fitted yet: call fit(conformant_train_dialogues) "
                "or load a saved detector with load_detector(path)"
            )

    # -- embeddings --------------------------------------------------------------------------
    def _embeddings(
        self,
        turns_list: list[list[dict[str, str]]],
        embeddings: Any,
        names: list[str],
        show_progress: bool = False,
    ) -> list[np.ndarray]:
        if embeddings is None:
            encoder = self.get_encoder()
            if encoder is None:
                raise ValueError(
                    "no encoder: pass embeddings= (one (n_turns, d) array per dialogue) or build "
                    "the detector with encoder='minilm' (or another alias/path)"
                )
            embeddings = encoder.encode_dialogues(turns_list)
        embeddings = list(embeddings)
        if len(embeddings) != len(turns_list):
            raise ValueError(f"embeddings holds {len(embeddings)} arrays for {len(turns_list)} dialogues")
        out, errs = [], []
        dim = None
        models = self.__dict__.get("task_models_")  # read during fit too (a refit keeps the dimension)
        cents = next(iter(models.values())).centroids_ if models else self.__dict__.get("centroids_")
        if cents:
            dim = next(iter(cents.values())).shape[1]
        for name, turns, e in zip(names, turns_list, embeddings):
            e = np.asarray(e, dtype=np.float64)
            if e.ndim != 2 or e.shape[0] != len(turns):
                errs.append(
                    f"{name}: embeddings of shape {e.shape} for {len(turns)} turns (expected (n_turns, d))"
                )
            elif dim is not None and e.shape[1] != dim:
                errs.append(
                    f"{name}: embedding dimension {e.shape[1]} but the detector was fitted with {dim} "
                    "(use the same encoder as at fit time)"
                )
            elif not np.all(np.isfinite(e)):
                errs.append(f"{name}: embeddings contain NaN or inf")
            out.append(e)
        if errs:
            raise ValueError(f"{len(errs)} bad embedding array(s):\n  " + "\n  ".join(errs[:20]))
        return out

    def assign(self, speaker: str, E: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Global node ids and node confidences of the rows of ``E`` (one fitted model; all rows
        spoken by ``speaker``).

        Args:
            speaker: ``"user"`` or ``"system"``.
            E: Turn embeddings, shape ``(n, d)``.

        Returns:
            ``(nodes, confidences)``: int64 global node ids (the nearest centroid by cosine, offset
            by the speaker's first node id) and float64 node confidences (all 1.0 without node
            confidence), each of length ``n``.

        Raises:
            ValueError: ``speaker`` never spoke in the train dialogues (the model has no node for it).
        """
        from dialfork_metrics.flowgraph import cosine_similarities, node_confidence

        C = self.centroids_.get(speaker)
        if C is None:
            raise ValueError(
                f"speaker {speaker!r} never spoke in the train dialogues; the detector has no node for it"
            )
        S = cosine_similarities(
            E, C
        )  # (n, n_nodes); the nearest node is the argmax (flowgraph.nearest_nodes)
        idx = np.argmax(S, axis=1).astype(np.int64)
        if self.node_confidence:
            conf = np.asarray(node_confidence(S, K=self.K, tau=self.tau), dtype=np.float64)
        else:
            conf = np.ones(len(E))
        return idx + self.node_offsets_[speaker], conf

    def _assign_many(self, turns_list: list[list[dict[str, str]]], emb: list[np.ndarray]):
        """Per dialogue: (node ids, confidences), with one batched assignment per speaker."""
        nodes = [np.empty(len(t), dtype=np.int64) for t in turns_list]
        confs = [np.empty(len(t), dtype=np.float64) for t in turns_list]
        for sp in SPEAKERS:
            where = [
                (i, j)
                for i, turns in enumerate(turns_list)
                for j, t in enumerate(turns)
                if t["speaker"] == sp
            ]
            if not where:
                continue
            E = np.stack([emb[i][j] for i, j in where])
            idx, conf = self.assign(sp, E)
            for (i, j), n, c in zip(where, idx.tolist(), conf.tolist()):
                nodes[i][j] = n
                confs[i][j] = c
        return nodes, confs

    # -- fitting -----------------------------------------------------------------------------

    def start(self, task: str | None = None) -> Stream:
        """Begin monitoring a new dialogue of ``task`` (needed only when the detector holds one model
        per task); the stream is also kept for :meth:`update`.

        Args:
            task: The dialogue's STAR task; ``None`` with one model.

        Returns:
            The new :class:`Stream`.

        Raises:
            NotFittedError: The detector is not fitted.
            ValueError: No model for ``task``.
        """
        self.check_is_fitted()
        model = self.for_task(task)
        self._stream = Stream(model)
        return self._stream

    def update(self, turn: Any, embedding: np.ndarray | None = None) -> int | None:
        """:meth:`Stream.update` on the stream opened by the last :meth:`start`.

        Args:
            turn: A ``{"speaker", "text"}`` turn.
            embedding: The turn's embedding, ``d`` values; None: encoded with the detector's encoder.

        Returns:
            The system turn index (1-based) of the alarm this turn raises, or ``None``.

        Raises:
            RuntimeError: :meth:`start` was not called.
            ValueError: A malformed turn, or no embedding and no encoder.
        """
        stream = getattr(self, "_stream", None)
        if stream is None:
            raise RuntimeError("call start() before update()")
        return stream.update(turn, embedding)

    def step(
        self, state: StepState, speaker: str, node: int, confidence: float = 1.0
    ) -> tuple[StepState, StepResult]:
        """One turn of the streaming loop, as a pure function of the carried state: the decision
        rule of every streaming prediction (``predict``, ``update``, ``dialfork_metrics.guard``).
        Constant cost per turn: only the last ``N-1`` nodes and ``p_{t-1}`` are read.

        Args:
            state: The state carried from the previous turn (``StepState()`` at a dialogue's start).
            speaker: The turn's speaker, ``"user"`` or ``"system"``.
            node: The turn's global node id (:meth:`assign`).
            confidence: The turn's node confidence (used by the ``+NC`` variants only).

        Returns:
            ``(next_state, result)``: the :class:`StepState` to carry to the next turn and this turn's
            :class:`StepResult` (``p_t``, the compared score, whether it alarms, its system turn).
        """
        lm = self.lm_
        p = lm.prob(lm.context_of(state.context), node)
        if self.node_confidence:
            p *= confidence
        n_system = state.n_system + (speaker == "system")
        gamma = self.position_weight_
        offset = gamma * math.log(max(n_system, 1)) if gamma else 0.0
        if self.method == "it":  # the same expressions as decision.turn_scores
            score: float | None = p * math.exp(-offset) if gamma else p
            alarm = score < self.threshold_
        else:  # the same expression as surprisal_jumps
            score = None if state.prev_p is None else (-math.log(p)) - (-math.log(state.prev_p))
            if score is not None and gamma:
                score = score + offset
            alarm = score is not None and score > self.threshold_
        k = self.order_ - 1
        context = (*state.context, int(node))[-k:] if k else ()
        return (
            StepState(context, p, state.n_turns + 1, n_system),
            StepResult(p, score, bool(alarm), max(n_system, 1)),
        )

    # -- offline convenience (the streaming loop run over whole dialogues) ----------------------
    def _prepare(self, dialogues: Sequence[Any], embeddings: Any, show_progress: bool = False):
        """Validated turns, embeddings and, per model, the indices of the dialogues it watches."""
        self.check_is_fitted()
        names = [_where(d, i) for i, d in enumerate(dialogues)]
        turns_list = [as_turns(d, where=n) for d, n in zip(dialogues, names)]
        emb = self._embeddings(turns_list, embeddings, names, show_progress)
        groups: dict[int, tuple[StreamingDetector, list[int]]] = {}
        if not self.task_models_:
            groups[id(self)] = (self, list(range(len(dialogues))))
        else:
            errs = []
            for i, d in enumerate(dialogues):
                try:
                    task = _task_of(d)
                    if task is None and None not in self.task_models_ and len(turns_list[i]):
                        task = self.route_task(turns_list[i][0]["speaker"], emb[i][0])
                    m = self.for_task(task)
                except ValueError as e:
                    errs.append(f"{names[i]}: {e}")
                    continue
                groups.setdefault(id(m), (m, []))[1].append(i)
            if errs:
                raise ValueError(
                    f"{len(errs)} dialogue(s) without a task model:\n  " + "\n  ".join(errs[:20])
                )
        return turns_list, emb, list(groups.values())

    def turn_probabilities(
        self, dialogues: Sequence[Any], embeddings: Sequence[np.ndarray] | None = None
    ) -> list[np.ndarray]:
        """``p_t`` (``p_t^NC`` for NC detectors) of every turn of every dialogue.

        Args:
            dialogues: Records or lists of turns (with ``task`` when the detector has one model per task).
            embeddings: One ``(n_turns, d)`` array per dialogue; None: encoded.

        Returns:
            One float array per dialogue, one value per turn.

        Raises:
            NotFittedError: The detector is not fitted.
            ValueError: A malformed dialogue, bad embeddings, or no model for a dialogue's task.
        """
        turns_list, emb, groups = self._prepare(dialogues, embeddings)
        out: list[np.ndarray] = [np.empty(0)] * len(turns_list)
        for m, idx in groups:
            nodes, confs = m._assign_many([turns_list[i] for i in idx], [emb[i] for i in idx])
            for i, n, c in zip(idx, nodes, confs):
                out[i] = m._sequence_p(n, c)
        return out

    def dialogue_statistics(
        self, dialogues: Sequence[Any], embeddings: Sequence[np.ndarray] | None = None
    ) -> tuple[np.ndarray, list[str | None]]:
        """Per dialogue, the calibration statistic (IT ``min_t p_t``, SS ``max_t Delta_t``; ``-inf``
        for a one-turn dialogue under SS) and the task of the model that watched it. A dialogue
        raises an alarm at operating point ``a`` exactly when its statistic crosses
        ``calibrate_threshold(model.calibration_stats_, method, a)`` (IT below, SS above): the
        trade-off curve (:func:`dialfork_metrics.task3.selection.tradeoff_curve`) sweeps ``a``.

        Args:
            dialogues: Records or lists of turns.
            embeddings: One ``(n_turns, d)`` array per dialogue; None: encoded.

        Returns:
            ``(stats, tasks)``: a float array of one statistic per dialogue, and the task key of the
            model that watched each dialogue.

        Raises:
            NotFittedError: The detector is not fitted.
            ValueError: A malformed dialogue, bad embeddings, or no model for a dialogue's task.
        """
        turns_list, emb, groups = self._prepare(dialogues, embeddings)
        stats = np.empty(len(turns_list))
        keys: list[str | None] = [None] * len(turns_list)
        key_of = {id(m): k for k, m in self.models().items()}
        for m, idx in groups:
            nodes, confs = m._assign_many([turns_list[i] for i in idx], [emb[i] for i in idx])
            for i, n, c in zip(idx, nodes, confs):
                p = m._sequence_p(n, c)
                stats[i] = (
                    -np.inf
                    if (m.method == "ss" and len(p) < 2)
                    else calibration_statistic(
                        p, m.method, system_turn_index(turns_list[i]), m.position_weight_
                    )
                )
                keys[i] = key_of[id(m)]
        return stats, keys

    def predict(self, dialogue: Any, embeddings: np.ndarray | None = None) -> int | None:
        """The first alarm of the streaming loop over ``dialogue``.

        Args:
            dialogue: A record, a list of ``{"speaker", "text"}`` dicts or of turn strings.
            embeddings: The dialogue's turn embeddings, shape ``(n_turns, d)``; None: encoded.

        Returns:
            The 1-based system turn index of the first alarm, or ``None`` (no alarm: conformant).

        Raises:
            NotFittedError: The detector is not fitted.
            ValueError: A malformed dialogue, bad embeddings, or no model for its task.
        """
        return self.predict_many([dialogue], None if embeddings is None else [embeddings])[0]

    def predict_many(
        self,
        dialogues: Sequence[Any],
        embeddings: Sequence[np.ndarray] | None = None,
        show_progress: bool = False,
    ) -> list[int | None]:
        """:meth:`predict` for many dialogues: one encoder pass, batched node assignment.

        Args:
            dialogues: Records or lists of turns.
            embeddings: One ``(n_turns, d)`` array per dialogue; None: encoded.
            show_progress: Show a progress bar.

        Returns:
            Per dialogue, the 1-based system turn index of the first alarm or ``None``, in order.

        Raises:
            NotFittedError: The detector is not fitted.
            ValueError: Malformed dialogues or bad embeddings (each named), or no model for a task.
        """
        from tqdm.auto import tqdm

        turns_list, emb, groups = self._prepare(dialogues, embeddings, show_progress)
        out: list[int | None] = [None] * len(turns_list)
        with tqdm(
            total=len(turns_list), desc=f"task3 {self.name}", disable=not show_progress, unit="dlg"
        ) as bar:
            for m, idx in groups:
                nodes, confs = m._assign_many([turns_list[i] for i in idx], [emb[i] for i in idx])
                for i, n, c in zip(idx, nodes, confs):
                    stream = Stream(m)
                    for t, ni, ci in zip(turns_list[i], n.tolist(), c.tolist()):
                        stream.update_node(t, ni, ci)
                        if stream.flag is not None:
                            break  # the first alarm is final: later turns cannot change it
                    out[i] = stream.flag
                    bar.update(1)
        return out

    # -- persistence (JSON + npz; no pickle) --------------------------------------------------
