"""A supervised streaming Task 3 detector (``wf-sup``): a per-turn classifier over workflow features.

Where ``wf`` (:mod:`.workflow_detector`) alarms on a hand-set rule calibrated on conformant dialogues
alone, ``wf-sup`` learns the rule from *forked* train dialogues. Each system turn ``j`` of a dialogue
of task ``t`` gets task-independent features (:data:`FEATURES`, :func:`turn_features`), all causal
(they read turns ``1..j`` only, so the detector streams):

* the :class:`~.workflow_nodes.NodeAssigner`'s view: own-workflow similarity, best rival-workflow
  similarity, their difference, ``wf``'s raw deviation, whether the turn was rejected (off-workflow),
  the similarity to the nearest system turn of the task's conformant train dialogues;
* the workflow graph's view: the answered question asked again (:func:`~.workflow_detector.repeat_flags`),
  the number of question steps that dominate the turn's node in the graph
  (``networkx.immediate_dominators`` from the start node) and were not said yet ("a query before its
  slots were collected"), the same node as the previous system turn, the node a possible next step of
  the previous one (through non-action nodes), a node that may come anywhere (greeting, closing, a
  dead end);
* the position: ``log j``, the previous turns' largest deviation and the change of the deviation.

Labels (:func:`turn_labels`): the fork turn ``t_k`` of a fork is positive, the turns before it and
every turn of a conformant dialogue negative, the turns after ``t_k`` are dropped. The classifier
(:func:`fit_turn_classifier`) is a class-balanced logistic regression on standardised features
(``model="logistic"``) or a histogram gradient boosting (``"hgb"``). A dialogue alarms at the first
system turn whose probability exceeds the threshold, calibrated at ``false_alarm_rate`` on the
conformant dialogues' largest *out-of-fold* probability (folds by source dialogue, so that a fork and
its source are never on two sides; the features of a fold are computed with the node texts of the
other folds' conformant dialogues, as a test dialogue is).

The classifier never sees a task's name: fitted on the forks of some tasks, it scores the dialogues of
any task of the workflow source (the leave-task-out protocol of issue 39). A task without conformant
fit dialogues is read off the workflow's own texts alone.

Saved folders hold arrays and JSON only (the logistic model's scaler and coefficients); a detector
with ``model="hgb"`` cannot be saved (no pickle).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from numbers import Integral, Real
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions

from dialfork_dataset.turns import as_turns

from ..workflow.detector import (
    ROUTE_MARGIN,
    THRESHOLD_RULES,
    WorkflowDetector,
    _task,
    _unit,
    auto_min_similarity,
    resolve_workflow,
)
from ..workflow.nodes import NodeAssigner
from .classifier import (
    FEATURES,
    FORMAT,
    MODELS,
    THRESHOLD_SCOPES,
    TaskGraph,
    TurnClassifier,
    fit_turn_classifier,
    out_of_fold_probabilities,
    source_of,
    task_graph,
    turn_features,
    turn_labels,
)

logger = logging.getLogger("dialfork_metrics.task3.supervised.detector")


class SupervisedWorkflowDetector(WorkflowDetector):
    """Supervised streaming Task 3 detector (registry name ``wf-sup``; see the module doc).

    It reuses :class:`~.workflow_detector.WorkflowDetector`'s machinery (encoding, node assignment,
    routing of a dialogue without ``task``) and replaces its rule by a per-turn classifier.

    Args:
        workflow: The dialogues' workflow source (object, spec or path); None: ``$DIALFORK_STAR_DIR``.
        encoder: Encoder alias/path or object; None: pass ``embeddings`` everywhere.
        model: ``"logistic"`` (default) or ``"hgb"``.
        C: Inverse regularisation strength of the logistic model.
        false_alarm_rate: Target share of conformant dialogues that alarm (default 5%).
        min_similarity: The own-similarity floor of the deviation feature; ``"auto"``: read off the
            workflow's texts (:func:`~.workflow_detector.auto_min_similarity`).
        auto_quantile: The quantile of ``min_similarity="auto"``.
        reject_margin: The rival margin of the node assigner and the deviation feature.
        use_train_texts: Add the conformant fit dialogues' system turns to their nodes' texts.
        folds: Folds (by source dialogue) of the out-of-fold features and probabilities (>= 2).
        seed: Seed of ``hgb``.
        threshold_rule: ``"upper_bound"`` (default), ``"conformal"`` or ``"percentile"``.
        confidence: Confidence of ``upper_bound``.
        threshold_scope: ``"task"`` (default): a threshold per task with conformant fit dialogues,
            calibrated on them (a task whose conformant dialogues the classifier finds odd, e.g. STAR
            trivia's question loop, does not silence the others), the global one for other tasks;
            ``"global"``: one threshold over all conformant fit dialogues.

    Fitted attributes: ``assigner_``, ``classifier_`` (:class:`TurnClassifier`), ``threshold_``
    (global), ``thresholds_`` (task -> threshold), ``calibration_stats_`` (task -> the conformant fit
    dialogues' largest out-of-fold probability),
    ``fitted_tasks_``, ``forked_tasks_`` (tasks with forks in the fit set), ``train_turns_`` (task ->
    conformant system-turn embeddings), ``repeatable_``, ``user_centroids_``, ``min_similarity_``,
    ``source_``, ``n_train_``, ``n_forks_``.
    """

    name = "wf-sup"
    FORMAT = FORMAT

    def __init__(
        self,
        workflow: Any = None,
        encoder: Any = "minilm",
        model: str = "logistic",
        C: float = 1.0,
        false_alarm_rate: float = 0.05,
        min_similarity: float | str = "auto",
        auto_quantile: float = 0.05,
        reject_margin: float = 0.1,
        use_train_texts: bool = True,
        folds: int = 5,
        seed: int = 0,
        threshold_rule: str = "upper_bound",
        confidence: float = 0.95,
        threshold_scope: str = "task",
    ):
        self.workflow = workflow
        self.encoder = encoder
        self.model = model
        self.C = C
        self.false_alarm_rate = false_alarm_rate
        self.min_similarity = min_similarity
        self.auto_quantile = auto_quantile
        self.reject_margin = reject_margin
        self.use_train_texts = use_train_texts
        self.folds = folds
        self.seed = seed
        self.threshold_rule = threshold_rule
        self.confidence = confidence
        self.threshold_scope = threshold_scope

    def __repr__(self) -> str:
        fitted = f", tasks={self.fitted_tasks_}" if hasattr(self, "classifier_") else ""
        return f"SupervisedWorkflowDetector(model={self.model!r}, false_alarm_rate={self.false_alarm_rate}{fitted})"

    _parameter_constraints: dict = {
        "workflow": "no_validation",  # a source object, spec or path: resolve_workflow checks it
        "encoder": [None, str, HasMethods(["encode_dialogues"])],
        "model": [StrOptions(set(MODELS))],
        "C": [Interval(Real, 0, None, closed="neither")],
        "false_alarm_rate": [Interval(Real, 0, 1, closed="neither")],
        "min_similarity": [StrOptions({"auto"}), Interval(Real, -1, 1, closed="both")],
        "auto_quantile": [Interval(Real, 0, 1, closed="neither")],
        "reject_margin": [Interval(Real, -2, 2, closed="both")],
        "use_train_texts": ["boolean"],
        "folds": [Interval(Integral, 2, None, closed="left")],
        "seed": [Interval(Integral, None, None, closed="neither")],
        "threshold_rule": [StrOptions(set(THRESHOLD_RULES))],
        "confidence": [Interval(Real, 0, 1, closed="neither")],
        "threshold_scope": [StrOptions(set(THRESHOLD_SCOPES))],
    }

    # -- per-task pieces ----------------------------------------------------------------------------------
    def _graph(self, task: str) -> TaskGraph:
        cache = self.__dict__.setdefault("_graphs", {})
        if task not in cache:
            cache[task] = task_graph(self.source_.tasks[task])
        return cache[task]

    def _features(
        self,
        assigner: NodeAssigner,
        task: str,
        turns: Sequence[Mapping[str, str]],
        E: np.ndarray,
        train_turns: Mapping[str, np.ndarray],
    ) -> np.ndarray:
        rows = self._system_rows(turns)
        if not rows:
            return np.zeros((0, len(FEATURES)))
        answered = [
            any(
                x["speaker"] == "user"
                for x in turns[r + 1 : (rows[j + 1] if j + 1 < len(rows) else len(turns))]
            )
            for j, r in enumerate(rows)
        ]
        a = assigner.assign(task, E[rows])
        T = train_turns.get(task)
        train_sim = (E[rows] @ T.T).max(axis=1) if T is not None and len(T) else np.full(len(rows), np.nan)
        return turn_features(
            a.own_similarity,
            a.rival_similarity,
            train_sim,
            a.nodes,
            answered,
            self._graph(task),
            repeatable=self.repeatable_.get(task, frozenset()),
            min_similarity=self.min_similarity_,
            reject_margin=self.reject_margin,
        )

    def _threshold_of(self, task: str) -> float:
        return self.thresholds_.get(task, self.threshold_)

    def _probabilities(self, task: str | None, turns, E: np.ndarray, subtract: bool = False) -> np.ndarray:
        """Per-system-turn probabilities (minus the task's threshold with ``subtract``); routed like
        ``wf`` when ``task`` is None (while unsure, the smallest over the fitted tasks)."""
        rows = self._system_rows(turns)
        if not rows:
            return np.zeros(0)

        def score(t: str) -> np.ndarray:
            p = self.classifier_.probability(self._features(self.assigner_, t, turns, E, self.train_turns_))
            return p - self._threshold_of(t) if subtract else p

        if task is not None:
            return score(task)
        routes = [
            self.route(E[[k for k in range(r) if turns[k]["speaker"] == "user"]], ROUTE_MARGIN) for r in rows
        ]
        per_task = {t: score(t) for t in (self.tasks if None in routes else dict.fromkeys(routes))}
        return np.array(
            [
                per_task[rt][j] if rt is not None else min(v[j] for v in per_task.values())
                for j, rt in enumerate(routes)
            ]
        )

    def _known_task(self, d: Any) -> str | None:
        t = _task(d)
        return t if t is not None and t in self.source_.tasks else None

    # -- fitting ------------------------------------------------------------------------------------------
    def fit(
        self,
        dialogues: Sequence[Any],
        embeddings: Sequence[np.ndarray] | None = None,
        show_progress: bool = False,
    ) -> SupervisedWorkflowDetector:
        """Fit on forked and conformant dialogues: node texts, the per-turn classifier, its threshold.

        Args:
            dialogues: Records with ``task``, ``turns``, ``hallucination_type`` (None: conformant) and,
                for forks, ``fork_turn`` (1-based system turn). Both kinds are needed.
            embeddings: One ``(n_turns, d)`` array per dialogue; None: encoded.
            show_progress: Unused (kept for the detectors' common signature).

        Returns:
            self.

        Raises:
            InvalidParameterError: A parameter breaks ``_parameter_constraints`` (a ``ValueError``).
            ValueError: No dialogues, no forks (``wf-sup`` learns
                from forks; ``wf`` fits on conformant dialogues alone), no conformant dialogues,
                records without ``task`` or with a bad ``fork_turn`` (listed), a task the workflow
                source lacks, or no workflow source.
        """
        del show_progress
        self._validate_params()
        rows = list(dialogues)
        if not rows:
            raise ValueError("SupervisedWorkflowDetector.fit: no dialogues")
        name = [
            str(d.get("dialogue_id", i)) if isinstance(d, Mapping) else str(i) for i, d in enumerate(rows)
        ]
        missing = [name[i] for i, d in enumerate(rows) if _task(d) is None]
        if missing:
            raise ValueError(
                f"SupervisedWorkflowDetector.fit: {len(missing)} dialogue(s) without a 'task' field "
                f"(e.g. {', '.join(missing[:3])}); the detector needs each dialogue's task"
            )
        is_fork = [bool(d.get("hallucination_type")) for d in rows]
        if not any(is_fork):
            raise ValueError(
                "SupervisedWorkflowDetector.fit: no forked dialogues; wf-sup learns from forked train "
                "dialogues (records with hallucination_type and fork_turn, e.g. a corpus's task3 test "
                "split or the star-human track's train split); to fit on conformant dialogues alone "
                "use the wf detector (make_detector('wf'))"
            )
        if all(is_fork):
            raise ValueError(
                "SupervisedWorkflowDetector.fit: no conformant dialogues (hallucination_type None); "
                "they give the negatives, the node texts and the threshold"
            )
        turns = [as_turns(d["turns"]) for d in rows]
        sys_rows = [self._system_rows(t) for t in turns]
        labels, bad = [], []
        for i, d in enumerate(rows):
            try:
                labels.append(turn_labels(len(sys_rows[i]), d.get("fork_turn") if is_fork[i] else None))
            except (TypeError, ValueError) as e:
                bad.append(f"{name[i]}: {e}")
        if bad:
            raise ValueError(
                f"SupervisedWorkflowDetector.fit: {len(bad)} fork(s) without a valid fork_turn "
                f"(1-based system turn): {'; '.join(bad[:5])}"
            )
        source = resolve_workflow(self.workflow)
        task_of = [_task(d) for d in rows]
        unknown = sorted({t for t in task_of if t not in source.tasks})
        if unknown:
            raise ValueError(
                f"SupervisedWorkflowDetector.fit: task(s) {', '.join(unknown)} not in the workflow "
                f"source; pass the source they come from as workflow="
            )
        self.__dict__.pop("_graphs", None)
        self.source_ = source
        emb = self._embed(turns, embeddings)
        base = NodeAssigner(None, 0.0, self.reject_margin)
        base.encoder = self.get_encoder()
        base.fit(source)
        self.min_similarity_ = (
            auto_min_similarity(base, self.auto_quantile)
            if self.min_similarity == "auto"
            else float(self.min_similarity)
        )
        base.min_similarity = self.min_similarity_
        conf = [i for i in range(len(rows)) if not is_fork[i]]
        self.repeatable_ = self._repeatable(base, [(task_of[i], emb[i][sys_rows[i]]) for i in conf])
        # folds by source: a fork and its source on one side; each fold's features use the others' texts
        groups = [source_of(d, i) for i, d in enumerate(rows)]
        uniq = sorted(set(groups))
        k = min(self.folds, len(uniq))
        if k < 2:
            raise ValueError(
                "SupervisedWorkflowDetector.fit: the dialogues come from one source dialogue; "
                "out-of-fold calibration needs at least two"
            )
        from sklearn.model_selection import GroupKFold

        dlg_fold = np.empty(len(rows), dtype=np.int64)
        for f, (_, te) in enumerate(GroupKFold(n_splits=k).split(np.zeros(len(rows)), groups=groups)):
            dlg_fold[te] = f
        X_parts, y_parts, f_parts, d_parts = [], [], [], []
        for f in range(k):
            parts = [(task_of[i], emb[i][sys_rows[i]]) for i in conf if dlg_fold[i] != f]
            assigner = self._with_train_texts(base, parts)
            train = self._train_turns(parts)
            for i in np.flatnonzero(dlg_fold == f):
                X = self._features(assigner, task_of[i], turns[i], emb[i], train)
                keep = labels[i] >= 0
                X_parts.append(X[keep])
                y_parts.append(labels[i][keep])
                f_parts.append(np.full(int(keep.sum()), f))
                d_parts.append(np.full(int(keep.sum()), i))
        X, y = np.concatenate(X_parts), np.concatenate(y_parts)
        fold, dlg = np.concatenate(f_parts), np.concatenate(d_parts)
        oof = out_of_fold_probabilities(X, y, fold, self.model, C=self.C, seed=self.seed)
        stats: dict[str, list[float]] = {}
        for i in conf:
            if (dlg == i).any():
                stats.setdefault(task_of[i], []).append(float(oof[dlg == i].max()))
        self.calibration_stats_ = {t: np.asarray(v) for t, v in sorted(stats.items())}
        self.classifier_ = fit_turn_classifier(X, y, self.model, C=self.C, seed=self.seed)
        all_parts = [(task_of[i], emb[i][sys_rows[i]]) for i in conf]
        self.assigner_ = self._with_train_texts(base, all_parts)
        self.train_turns_ = self._train_turns(all_parts)
        self.fitted_tasks_ = sorted(set(task_of))
        self.forked_tasks_ = sorted({task_of[i] for i in range(len(rows)) if is_fork[i]})
        self.user_centroids_ = self._centroids(turns, emb, task_of)
        self._set_thresholds()
        self.n_train_ = len(rows)
        self.n_forks_ = int(sum(is_fork))
        self.oof_probabilities_ = oof
        self.oof_labels_ = y
        logger.info(
            "wf-sup (%s): %d dialogues (%d forks), %d turns (%d positive), threshold %.4f",
            self.model,
            len(rows),
            self.n_forks_,
            len(y),
            int(y.sum()),
            self.threshold_,
        )
        return self

    def _set_thresholds(self) -> None:
        stats = self.calibration_stats_
        self.threshold_ = self._threshold(np.concatenate(list(stats.values())) if stats else np.zeros(0))
        self.thresholds_ = (
            {t: self._threshold(v) for t, v in stats.items()} if self.threshold_scope == "task" else {}
        )

    @staticmethod
    def _repeatable(base: NodeAssigner, parts: list[tuple[str, np.ndarray]]) -> dict[str, frozenset[str]]:
        out: dict[str, set[str]] = {}
        for t, E in parts:
            seen: set[str] = set()
            for n in (x for x in base.assign(t, E).nodes if x is not None):
                if n in seen:
                    out.setdefault(t, set()).add(n)
                seen.add(n)
        return {t: frozenset(v) for t, v in out.items()}

    @staticmethod
    def _train_turns(parts: list[tuple[str, np.ndarray]]) -> dict[str, np.ndarray]:
        out: dict[str, list[np.ndarray]] = {}
        for t, E in parts:
            if len(E):
                out.setdefault(t, []).append(E)
        return {t: np.concatenate(v) for t, v in out.items()}

    def _centroids(self, turns, emb, task_of) -> dict[str, np.ndarray | None]:
        cents: dict[str, np.ndarray | None] = {}
        for t in sorted(set(task_of)):
            U = [
                e[[k for k, x in enumerate(tt) if x["speaker"] == "user"]]
                for tt, e, tk in zip(turns, emb, task_of)
                if tk == t
            ]
            U = [u for u in U if len(u)]
            cents[t] = _unit(np.concatenate(U).mean(axis=0)) if U else None
        return cents

    def _threshold(self, stats: np.ndarray) -> float:
        from ..streaming.decision import calibrate_threshold

        finite = np.asarray(stats, dtype=np.float64)
        finite = finite[np.isfinite(finite)]
        if finite.size == 0:
            return 0.5
        return float(
            calibrate_threshold(
                finite, "ss", self.false_alarm_rate, rule=self.threshold_rule, confidence=self.confidence
            )
        )

    # -- scoring -----------------------------------------------------------------------------------------
    def check_is_fitted(self) -> None:
        """Raise unless :meth:`fit` (or :meth:`load`) has run.

        Raises:
            NotFittedError: Not fitted.
        """
        if not self.__sklearn_is_fitted__():
            from ..streaming._common import NotFittedError

            raise NotFittedError(
                "SupervisedWorkflowDetector is not fitted: call fit(forked_and_conformant_dialogues) first"
            )

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, "classifier_")

    @property
    def tasks(self) -> list[str]:
        """The tasks of the fit dialogues (any task of the workflow source can be scored)."""
        self.check_is_fitted()
        return list(self.fitted_tasks_)

    def turn_features(self, dialogue: Any, embeddings: np.ndarray | None = None) -> np.ndarray:
        """The feature matrix of a dialogue's system turns (columns :data:`FEATURES`).

        Args:
            dialogue: A record with a ``task`` of the workflow source.
            embeddings: ``(n_turns, d)``; None: encoded.

        Returns:
            np.ndarray: shape ``(T, len(FEATURES))``.

        Raises:
            ValueError: The record has no ``task`` of the workflow source.
        """
        self.check_is_fitted()
        task = self._known_task(dialogue)
        if task is None:
            raise ValueError("turn_features needs a record with a 'task' of the workflow source")
        turns = as_turns(dialogue["turns"])
        E = self._embed([turns], None if embeddings is None else [embeddings])[0]
        return self._features(self.assigner_, task, turns, E, self.train_turns_)

    def turn_probabilities(
        self, dialogues: Sequence[Any], embeddings: Sequence[np.ndarray] | None = None
    ) -> list[np.ndarray]:
        """The classifier's probability of a deviation at every system turn of each dialogue.

        Args:
            dialogues: Records (``task`` of the workflow source used when present, else routed
                among the fitted tasks as ``wf`` does) or turn lists.
            embeddings: One ``(n_turns, d)`` array per dialogue; None: encoded.

        Returns:
            list[np.ndarray]: One array per dialogue, one value per system turn.
        """
        self.check_is_fitted()
        dialogues = list(dialogues)
        turns, emb = self._turns_and_embeddings(dialogues, embeddings)
        return [self._probabilities(self._known_task(d), t, e) for d, t, e in zip(dialogues, turns, emb)]

    def turn_deviations(
        self, dialogues: Sequence[Any], embeddings: Sequence[np.ndarray] | None = None
    ) -> list[np.ndarray]:
        """Each system turn's probability minus its task's threshold (alarm where > 0; ``wf``'s contract).

        Args:
            dialogues: Records or turn lists (as :meth:`turn_probabilities`).
            embeddings: One ``(n_turns, d)`` array per dialogue; None: encoded.

        Returns:
            list[np.ndarray]: One array per dialogue, one value per system turn.
        """
        self.check_is_fitted()
        dialogues = list(dialogues)
        turns, emb = self._turns_and_embeddings(dialogues, embeddings)
        return [
            self._probabilities(self._known_task(d), t, e, subtract=True)
            for d, t, e in zip(dialogues, turns, emb)
        ]

    # -- streaming ----------------------------------------------------------------------------------------
    def start(self, task: str | None = None) -> SupervisedStream:
        """A streaming session: feed turns one at a time with :meth:`SupervisedStream.update`.

        Args:
            task: The conversation's task (any task of the workflow source); None: routed from its
                user turns among the fitted tasks.

        Returns:
            SupervisedStream: The session.

        Raises:
            KeyError: ``task`` is not a task of the workflow source.
        """
        self.check_is_fitted()
        if task is not None and task not in self.source_.tasks:
            raise KeyError(
                f"task {task!r} is not in the workflow source (it has {', '.join(sorted(self.source_.tasks))})"
            )
        return SupervisedStream(self, task)

    def step(
        self, state: Any, speaker: str, embedding: np.ndarray, task: str, text: str | None = None
    ) -> Any:
        """Not supported: the guard's per-turn state machine is ``wf``'s (use :meth:`start`).

        Args:
            state: Unused.
            speaker: Unused.
            embedding: Unused.
            task: Unused.
            text: Unused.

        Returns:
            Never returns.

        Raises:
            NotImplementedError: Always.
        """
        raise NotImplementedError(
            "wf-sup has no guard step(): stream a conversation with start(task).update(turn), "
            "or monitor with the wf detector"
        )

    def fingerprint_arrays(self) -> dict[str, Any]:
        """Not supported (the guard's monitor fingerprint is ``wf``'s).

        Returns:
            Never returns.

        Raises:
            NotImplementedError: Always.
        """
        raise NotImplementedError("wf-sup is not a guard monitor detector; use the wf detector there")

    # -- persistence --------------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> Path:
        """Write the fitted detector to a folder (``config.json`` + ``arrays.npz``; no pickle).

        The workflow source is saved by reference (its spec); loading reads it again.

        Args:
            path: The folder (created).

        Returns:
            Path: The folder.

        Raises:
            NotFittedError: Not fitted.
            ValueError: ``model="hgb"``: a boosted model would need pickle (refit with
                ``model="logistic"`` to save, or keep the object in memory).
        """
        self.check_is_fitted()
        if self.classifier_.model == "hgb":
            raise ValueError(
                "SupervisedWorkflowDetector.save: a model='hgb' detector cannot be saved without "
                "pickle (which runs code on load); refit with model='logistic' to save it"
            )
        arrays = {
            **{f"clf/{k}": v for k, v in self.classifier_.arrays.items()},
            **{f"train/{t}": v for t, v in self.train_turns_.items()},
        }
        return self._write(
            path,
            arrays,
            {
                "threshold": self.threshold_,
                "thresholds": self.thresholds_,
                "classifier": self.classifier_.model,
                "features": list(FEATURES),
                "fitted_tasks": self.fitted_tasks_,
                "forked_tasks": self.forked_tasks_,
                "n_forks": self.n_forks_,
            },
        )

    @classmethod
    def load(
        cls, path: str | os.PathLike, encoder: Any = None, workflow: Any = None
    ) -> SupervisedWorkflowDetector:
        """Load a folder written by :meth:`save`.

        Args:
            path: The folder.
            encoder: Encoder override (alias/path/object); None: the saved name.
            workflow: Workflow source override; None: the saved spec (or ``$DIALFORK_STAR_DIR``).

        Returns:
            SupervisedWorkflowDetector: The fitted detector.

        Raises:
            ValueError: Not a saved ``wf-sup`` detector, features of another version, or arrays that
                do not match the config.
            FileNotFoundError: A file is missing.
        """
        det, meta, arrays, det.source_ = cls._read(path, encoder, workflow)
        if meta.get("features") != list(FEATURES):
            raise ValueError(
                f"{path}: saved with features {meta.get('features')}, this version computes "
                f"{list(FEATURES)}; refit the detector"
            )
        det.classifier_ = TurnClassifier(
            meta["classifier"], {k[4:]: v for k, v in arrays.items() if k.startswith("clf/")}
        )
        if det.classifier_.model == "logistic" and det.classifier_.arrays["coef"].shape != (len(FEATURES),):
            raise ValueError(
                f"{path}: the saved coefficients do not match {len(FEATURES)} features (a corrupt or "
                "edited file: refit and save again)"
            )
        det.threshold_ = float(meta["threshold"])
        det.thresholds_ = {t: float(v) for t, v in meta.get("thresholds", {}).items()}
        det.calibration_stats_ = {k[6:]: v for k, v in arrays.items() if k.startswith("stats/")}
        det.fitted_tasks_ = list(meta["fitted_tasks"])
        det.forked_tasks_ = list(meta.get("forked_tasks", []))
        det.train_turns_ = {k[6:]: v for k, v in arrays.items() if k.startswith("train/")}
        det.user_centroids_ = {t: arrays.get(f"user/{t}") for t in det.fitted_tasks_}
        det.n_forks_ = int(meta.get("n_forks", 0))
        return det


class SupervisedStream:
    """One conversation watched by a :class:`SupervisedWorkflowDetector` (see :meth:`~SupervisedWorkflowDetector.start`).

    Args:
        detector: The fitted detector.
        task: The conversation's task; None: routed from its user turns at each system turn.

    Attributes:
        turns: The turns seen so far.
        deviations: Probability minus the task's threshold, per system turn.
        flag: The first alarm's system turn, or None.
    """

    def __init__(self, detector: SupervisedWorkflowDetector, task: str | None = None):
        self._det = detector
        self.task = task
        self.turns: list[dict[str, str]] = []
        self._E: list[np.ndarray] = []
        self.deviations: list[float] = []
        self.flag: int | None = None

    def update(self, turn: Any, embedding: np.ndarray | None = None) -> int | None:
        """Feed the next turn; a system turn gets its deviation (probability minus threshold).

        Args:
            turn: ``{"speaker", "text"}``.
            embedding: Its embedding; None: encoded with the detector's encoder.

        Returns:
            int | None: The system turn index of the alarm this turn raises (:attr:`flag` keeps
            the first), or None.

        Raises:
            ValueError: No embedding and a detector without an encoder.
        """
        t = as_turns([turn], where=f"turn {len(self.turns)}")[0]
        det = self._det
        if embedding is None:
            enc = det.get_encoder()
            if enc is None:
                raise ValueError("update() without an embedding needs a detector built with an encoder")
            embedding = enc.encode([t["text"]])[0]
        self.turns.append(t)
        self._E.append(_unit(np.asarray(embedding, dtype=np.float64).reshape(-1)))
        if t["speaker"] != "system":
            return None
        # the features are causal: the last row over the turns so far is the offline row
        dev = float(det._probabilities(self.task, self.turns, np.stack(self._E), subtract=True)[-1])
        self.deviations.append(dev)
        if dev > 0:
            j = len(self.deviations)
            if self.flag is None:
                self.flag = j
            return j
        return None


__all__ = [
    "FEATURES",
    "MODELS",
    "SupervisedStream",
    "SupervisedWorkflowDetector",
    "TaskGraph",
    "TurnClassifier",
    "fit_turn_classifier",
    "out_of_fold_probabilities",
    "source_of",
    "task_graph",
    "turn_features",
    "turn_labels",
]
