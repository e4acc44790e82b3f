"""The workflow-aware streaming detector (``wf``): alarms when a system turn leaves its workflow.

Each system turn is mapped to its task's workflow by the :class:`~.workflow_nodes.NodeAssigner`
(the workflow's own texts, plus the system turns of the conformant train dialogues) and gets a
*deviation* (:func:`turn_deviations`), in cosine units:

* ``max(rival - own - reject_margin, min_similarity - own)``: how far the turn falls short of
  its own workflow, against another workflow's best node (a turn of another task: WIC, GR, an
  inserted sub-goal) or an absolute floor (a turn that says nothing the workflow says);
* ``+ repeat_weight`` when the turn asks again a question step that was answered, with other
  steps in between, and the loop back to it was not taken (no failure outcome or dead end since,
  no "no" from the user: :func:`repeat_flags`; an immediate re-ask is a clarification, not a
  repeat), unless the task's conformant fit dialogues repeat that step (``repeatable_``: STAR
  trivia's next question);
* ``+ order_weight`` when the turn's step comes before a step already said in the workflow graph
  (:func:`order_flags`: a question after the outcome it leads to, an outcome before another that
  precedes it, a greeting in mid-conversation; two question steps may come in any order), unless
  the task's conformant fit dialogues take that back step too (:func:`order_pairs`).

The last two are what catch SSPC (a step skipped, repeated, reversed or jumped over): such a turn
is a step of the task's own workflow, so the similarities alone never reject it.

A dialogue alarms at the first system turn whose deviation exceeds the task's threshold. The
threshold is ``max(0, t)``, ``t`` calibrated on the conformant train dialogues at
``false_alarm_rate`` with the streaming detectors' rules (``threshold_rule``; each train dialogue's
statistic, its largest deviation, computed with the texts of the *other* folds' dialogues:
``calibration="cross_fit"``). The floor 0 is the assigner's own rejection rule: a turn the workflow
explains at least ``min_similarity`` well and no worse than another workflow never alarms, so
text unlike the train dialogues (human, another LLM) does not alarm for being unlike them.

The workflow comes from ``workflow=`` (a source object, a ``star:PATH`` / ``workflow:PATH`` spec
or a path), else from ``$DIALFORK_STAR_DIR`` (STAR). The assigner reads every task of the source
(the other tasks are the rivals that reject another workflow's turns).

A scikit-learn estimator (``BaseEstimator``): ``__init__`` stores parameters, :meth:`fit` validates
them against ``_parameter_constraints``, fitted attributes end in ``_``; :meth:`check_is_fitted` and
:meth:`assign` are public.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Mapping, Sequence
from numbers import Integral, Real
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions

from dialfork_dataset.turns import as_turns

from .nodes import NodeAssigner
from .rules import (  # the pure rules, re-exported here
    CALIBRATIONS,
    DEFAULT_ORDER_WEIGHT,
    DEFAULT_REJECT_MARGIN,
    DEFAULT_REPEAT_WEIGHT,
    REPEAT_RULES,
    ROUTE_MARGIN,
    SWITCHABLE_RULES,
    THRESHOLD_RULES,
    WorkflowStepResult,
    WorkflowStructure,
    _task,
    _unit,
    auto_min_similarity,
    first_alarm,
    order_flags,
    order_pairs,
    repeat_flags,
    resolve_workflow,
    turn_deviations,
    workflow_for_data,
    workflow_structure,
)
from .state import (
    DEFAULT_CLOSING_WEIGHT,
    DEFAULT_REQUIRE_SUPPORT,
    DEFAULT_RULE_MIN_MARGIN,
    DEFAULT_RULE_MIN_PROB,
    DEFAULT_RULE_MIN_SIMILARITY,
    DEFAULT_SKIP_SLOTS,
    DEFAULT_SKIP_WEIGHT,
    SKIP_SLOTS,
    DialogueState,
    StepVerdict,
    confident_steps,
    declined_turns,
    observe_system,
    observe_user,
    state_flags,
    sure_steps,
)

logger = logging.getLogger("dialfork_metrics.task3.workflow.detector")

FORMAT = "dialfork-task3-workflow"

# -- the detector ------------------------------------------------------------------------------------


class WorkflowDetector(BaseEstimator):
    """Workflow-aware streaming Task 3 detector (registry name ``wf``; see the module doc).

    Args:
        workflow: The dialogues' workflow source (object, spec or path); None: ``$DIALFORK_STAR_DIR``.
        encoder: Encoder alias/path or object (unit-norm rows); None: pass ``embeddings`` everywhere.
        false_alarm_rate: Target share of conformant dialogues that alarm (default 5%).
        min_similarity: The own-workflow similarity floor; ``"auto"`` (default): the
            ``auto_quantile`` quantile of the workflow's own texts' leave-one-out similarity to their
            task (:func:`auto_min_similarity`; about 0.44 on STAR), i.e. the floor lets all but that
            share of the workflow's own phrasings through. No dialogue enters it.
        auto_quantile: The quantile of ``min_similarity="auto"`` (ours, 0.05).
        reject_margin: How much better another workflow must fit a turn (ours, 0.1).
        repeat_weight: Deviation of an answered question asked again (ours, 1.0; 0: off; see
            :data:`DEFAULT_REPEAT_WEIGHT`).
        use_train_texts: Add the conformant train dialogues' system turns to their nodes' texts.
        calibration: ``"cross_fit"`` (each train dialogue scored with the texts of the other folds)
            or ``"in_sample"``.
        calibration_folds: Folds of ``cross_fit`` (>= 2).
        calibration_seed: Seed of the fold permutation.
        threshold_rule: ``"conformal"`` (default: the alarm rate asked for, in expectation),
            ``"upper_bound"`` (at most that rate with ``confidence``: stricter, on few dialogues far
            stricter) or ``"percentile"`` (:func:`~dialfork_metrics.task3.streaming.calibrate_threshold`).
        confidence: Confidence of ``upper_bound``.
        order_weight: Deviation of a step said after a later step of the workflow (ours; default
            0: off; 1.0: such a turn alarms; :func:`order_flags`, :data:`DEFAULT_ORDER_WEIGHT`
            says what it costs on human text).
        skip_weight: Deviation of an action, outcome or confirmation step said while a slot it
            requires was neither answered nor volunteered (the dialogue state's skip rule,
            :mod:`.workflow_state`; ours, 1.0; 0: off).
        closing_weight: Deviation of a closing said before any outcome (ours, 1.0; 0: off).
        skip_slots: Which required slots the skip rule enforces (``"template"``, ``"required"``,
            ``"all"``: :func:`~.workflow_state.enforced_requirements`).
        require_support: A required slot stays enforced for a step when the conformant fit
            dialogues had it filled at least this share of the times they said the step.
        state_rules: Track the dialogue state and apply its rules (False: the role-free rules
            only, the detector before the state tracker: what benchmarks compare against).
        rule_min_prob: With the step reader (``step_reader``), the dialogue-state rules judge a
            system turn only while it and every system turn before it have a calibrated step
            probability of at least this (ours, 0.5: more likely right than wrong;
            :data:`~.workflow_state.DEFAULT_RULE_MIN_PROB`) *and* pass the cosine cut below: a rule
            on a wrongly assigned step, or a state built on one, raises false alarms, and the
            reader alone is sure of some step even for STAR's typed drafts ("unavail", "9202").
        rule_min_similarity: The cosine gate (with or without a step reader): sure when a turn
            matched its step at least this well (cosine; ours;
            :data:`~.workflow_state.DEFAULT_RULE_MIN_SIMILARITY`).
        rule_min_margin: ... or when its step beats the task's next best step by at least this
            (cosine; ours): a turn full of slot values ("It will be
            sunny all day on Tuesday in Chicago") matches no phrasing closely but no other step
            either (:func:`~.workflow_state.confident_steps`).
        shared_steps: Steps several workflows share (a question for the same kind of slot, a
            confirmation, a closing) and the generic phrasings any agent says are no evidence of
            another workflow (:class:`~.workflow_nodes.NodeAssigner`; False: the detector before).
        threshold_floor: The least threshold (default 0: a turn the workflow explains at least
            ``min_similarity`` well and no worse than another workflow never alarms, whatever
            the calibration says; what keeps a detector fitted on template text from alarming on
            human text for being unlike it). None: the calibrated thresholds as they are, so
            ``false_alarm_rate`` and :meth:`recalibrate` move them both ways. Where the floor
            overrides a calibrated threshold a warning says so; ``operating_point_`` lists both.
        min_task_dialogues: A task with fewer fit dialogues calibrates on every task's statistics
            pooled (borrows strength; ours, 50).
        self_training: Unlabelled fit turns join only the step the assigner is sure of
            (:func:`~.workflow_fit.fit_labels`); False: each joins its nearest step.
        self_train_margin: How far a fit turn's best step must lead its second for self-training
            (cosine; ours).
        realise_values: Each step text with ``{placeholders}`` also says its step in this many
            variants filled with the slot's values (the API field's categories or examples;
            :func:`~.workflow_nodes.realise`; 0: spelled placeholders only). ``"auto"`` (default): 2
            when fitting on the workflow alone, 0 with dialogues (their turns say the steps with
            real values; the variants then only add rivals: on the sgd track they cost 2 points of
            false alarms).
        rule_budget: Switch off, per task and per rule, a step rule that alarms on too many of the
            task's conformant fit dialogues (at least ``rule_min_misfires`` of them and more than
            half ``false_alarm_rate`` of them), instead of lifting the task's threshold over every
            similarity deviation (:func:`~.workflow_fit.rule_budget`; the warning names the rule,
            the task, the count and the dialogues).
        rule_min_misfires: The fewest conformant fit dialogues a rule must misfire on before it is
            switched off for a task (ours, 3): with fewer fit dialogues than that, nothing is
            switched off, so a few logs never make detection worse than the file alone. The same
            evidence makes a question or confirmation step *repeatable* (never a repeat).
        step_reader: Which step a system turn says: None (default) the cosine assigner with its
            sureness cut; ``"auto"`` the shipped learned step reader (:mod:`.reader.steps`: 92.6% of
            held-out SGD services' turns against 80.4%, and a calibrated probability that then gates
            the rules, ``rule_min_prob``), or a folder of a saved reader. Opt-in: wired into wf with
            the slot reader it raised false alarms on every track (docs/task3_detectors.md, "The
            learned reader").
        slot_reader: Which slots a user turn gives, for the dialogue state: ``"auto"`` (default)
            the shipped learned slot reader (:func:`~.reader.slots.default_slot_reader`, on the
            packaged MiniLM whatever the detector's encoder: it reads a free-text answer or a
            volunteered value the patterns miss, against the system turn before it, and adds to
            what the patterns read; missing or corrupt weights are an error with the rebuild
            command, never a silent fallback), a folder of
            :meth:`~.reader.slots.SlotReader.save_pretrained`, or None: the hand patterns alone
            (:func:`~.workflow_state.volunteered_slots`). Chosen on the held-out figures
            (docs/task3_detectors.md, "The learned reader": on the sgd track from the files alone,
            false alarms 35.9% -> 29.2% with switches, inserted sub-goals and repeats caught more;
            STAR's tracks within a dialogue of the patterns). A saved detector records which; a
            folder saved before this parameter loads with None (as it was fitted).

    Fitted attributes: ``assigner_`` (:class:`NodeAssigner`), ``structures_`` (task ->
    :class:`WorkflowStructure`), ``thresholds_`` (task -> threshold), ``calibration_stats_`` (task ->
    statistics), ``user_centroids_`` (task -> mean user-turn embedding, to route a dialogue without a
    ``task``), ``repeatable_`` (task -> question and confirmation steps its conformant dialogues repeat, by
    the repeat rules, in at least ``rule_min_misfires`` of them), ``looping_`` (the tasks with such
    a step; informative: the task's other steps keep the repeat rules), ``rules_off_`` (task -> the
    rules switched off for it, :func:`~.workflow_fit.rule_budget`), ``rule_misfires_`` (task -> per
    conformant fit dialogue whether a rule left on flags it: counted in the expected false-alarm
    rate), ``order_allowed_`` (task -> the
    back steps its conformant dialogues take, :func:`order_pairs`), ``roles_`` (task -> its step
    roles and slots, :func:`~dialfork_dataset.workflow.roles.derive_roles`; a task whose roles cannot be
    derived is left out and keeps the role-free rules), ``requires_`` (task -> node -> the slots
    the skip rule enforces), ``n_train_``, ``fit_kind_`` (``cross_fit``, ``in_sample`` or
    ``workflow``: how the statistics were made), ``fit_labels_`` (counts of fit turns labelled,
    self-trained and left out), ``operating_point_`` (task -> calibrated and applied threshold,
    whether the floor took over, pooled or own statistics, the expected false-alarm rate and how
    it was estimated).
    """

    name = "wf"
    FORMAT = FORMAT

    def __init__(
        self,
        workflow: Any = None,
        encoder: Any = "minilm",
        false_alarm_rate: float = 0.05,
        min_similarity: float | str = "auto",
        reject_margin: float = DEFAULT_REJECT_MARGIN,
        repeat_weight: float = DEFAULT_REPEAT_WEIGHT,
        use_train_texts: bool = True,
        auto_quantile: float = 0.05,
        calibration: str = "cross_fit",
        calibration_folds: int = 5,
        calibration_seed: int = 0,
        threshold_rule: str = "conformal",
        confidence: float = 0.95,
        order_weight: float = DEFAULT_ORDER_WEIGHT,
        skip_weight: float = DEFAULT_SKIP_WEIGHT,
        closing_weight: float = DEFAULT_CLOSING_WEIGHT,
        skip_slots: str = DEFAULT_SKIP_SLOTS,
        require_support: float = DEFAULT_REQUIRE_SUPPORT,
        state_rules: bool = True,
        rule_min_similarity: float = DEFAULT_RULE_MIN_SIMILARITY,
        rule_min_margin: float = DEFAULT_RULE_MIN_MARGIN,
        rule_min_prob: float = DEFAULT_RULE_MIN_PROB,
        shared_steps: bool = True,
        threshold_floor: float | None = 0.0,
        min_task_dialogues: int = 50,
        self_training: bool = True,
        self_train_margin: float = 0.03,
        realise_values: int | str = "auto",
        rule_budget: bool = True,
        rule_min_misfires: int = 3,
        slot_reader: str | None = "auto",
        step_reader: str | None = None,
    ):
        self.workflow = workflow
        self.encoder = encoder
        self.false_alarm_rate = false_alarm_rate
        self.min_similarity = min_similarity
        self.reject_margin = reject_margin
        self.repeat_weight = repeat_weight
        self.use_train_texts = use_train_texts
        self.auto_quantile = auto_quantile
        self.calibration = calibration
        self.calibration_folds = calibration_folds
        self.calibration_seed = calibration_seed
        self.threshold_rule = threshold_rule
        self.confidence = confidence
        self.order_weight = order_weight
        self.skip_weight = skip_weight
        self.closing_weight = closing_weight
        self.skip_slots = skip_slots
        self.require_support = require_support
        self.state_rules = state_rules
        self.rule_min_similarity = rule_min_similarity
        self.rule_min_margin = rule_min_margin
        self.rule_min_prob = rule_min_prob
        self.shared_steps = shared_steps
        self.threshold_floor = threshold_floor
        self.min_task_dialogues = min_task_dialogues
        self.self_training = self_training
        self.self_train_margin = self_train_margin
        self.realise_values = realise_values
        self.rule_budget = rule_budget
        self.rule_min_misfires = rule_min_misfires
        self.slot_reader = slot_reader
        self.step_reader = step_reader

    def __repr__(self) -> str:
        fitted = f", tasks={sorted(self.thresholds_)}" if hasattr(self, "thresholds_") else ""
        return f"WorkflowDetector(false_alarm_rate={self.false_alarm_rate}{fitted})"

    # -- parameters (fit checks them: scikit-learn's _validate_params) ------------------------------
    _parameter_constraints: dict = {
        "workflow": "no_validation",  # a source object, spec or path: resolve_workflow checks it
        "encoder": [None, str, HasMethods(["encode_dialogues"])],
        "false_alarm_rate": [Interval(Real, 0, 1, closed="neither")],
        "min_similarity": [StrOptions({"auto"}), Interval(Real, -1, 1, closed="both")],
        "auto_quantile": [Interval(Real, 0, 1, closed="neither")],
        "reject_margin": [Interval(Real, -2, 2, closed="both")],
        "repeat_weight": [Interval(Real, 0, None, closed="left")],
        "use_train_texts": ["boolean"],
        "calibration": [StrOptions(set(CALIBRATIONS))],
        "calibration_folds": [Interval(Integral, 2, None, closed="left")],
        "calibration_seed": [Interval(Integral, None, None, closed="neither")],
        "threshold_rule": [StrOptions(set(THRESHOLD_RULES))],
        "confidence": [Interval(Real, 0, 1, closed="neither")],
        "order_weight": [Interval(Real, 0, None, closed="left")],
        "skip_weight": [Interval(Real, 0, None, closed="left")],
        "closing_weight": [Interval(Real, 0, None, closed="left")],
        "skip_slots": [StrOptions(set(SKIP_SLOTS))],
        "require_support": [Interval(Real, 0, 1, closed="both")],
        "state_rules": ["boolean"],
        "rule_min_similarity": [Interval(Real, -1, 1, closed="both")],
        "rule_min_margin": [Interval(Real, 0, 2, closed="both")],
        "rule_min_prob": [Interval(Real, 0, 1, closed="both")],
        "shared_steps": ["boolean"],
        "threshold_floor": [None, Interval(Real, -2, 2, closed="both")],
        "min_task_dialogues": [Interval(Integral, 1, None, closed="left")],
        "self_training": ["boolean"],
        "self_train_margin": [Interval(Real, 0, 2, closed="both")],
        "realise_values": [StrOptions({"auto"}), Interval(Integral, 0, None, closed="left")],
        "rule_budget": ["boolean"],
        "rule_min_misfires": [Interval(Integral, 1, None, closed="left")],
        "slot_reader": [None, str],
        "step_reader": [None, str],
    }

    # -- encoding -----------------------------------------------------------------------------------
    def get_encoder(self):
        """The encoder object the detector embeds turns with.

        Returns:
            ``None`` (``encoder=None``: embeddings must be passed), the shared instance of an
            alias or path, or the encoder object given.

        Raises:
            TypeError: ``encoder`` is neither ``None``, a string nor an encoder object.
        """
        from ..streaming._common import resolve_encoder

        return resolve_encoder(self.encoder)

    def _embed(self, dialogues: list[list[dict[str, str]]], embeddings: Any) -> list[np.ndarray]:
        if embeddings is not None:
            embeddings = list(embeddings)
            if len(embeddings) != len(dialogues):
                raise ValueError(f"{len(embeddings)} embedding arrays for {len(dialogues)} dialogues")
            out = []
            for i, (t, e) in enumerate(zip(dialogues, embeddings)):
                e = np.asarray(e, dtype=np.float64)
                if e.ndim != 2 or e.shape[0] != len(t):
                    raise ValueError(f"dialogue #{i}: embeddings of shape {e.shape} for {len(t)} turns")
                out.append(_unit(e))
            return out
        enc = self.get_encoder()
        if enc is None:
            raise ValueError("WorkflowDetector without an encoder: pass embeddings=")
        return [_unit(e) for e in enc.encode_dialogues(dialogues)]

    def _turns_and_embeddings(
        self, dialogues: Sequence[Any], embeddings: Any
    ) -> tuple[list[list[dict[str, str]]], list[np.ndarray]]:
        turns = [as_turns(d["turns"] if isinstance(d, Mapping) and "turns" in d else d) for d in dialogues]
        return turns, self._embed(turns, embeddings)

    # -- fitting ------------------------------------------------------------------------------------
    def fit(
        self,
        dialogues: Sequence[Any] | None = None,
        embeddings: Sequence[np.ndarray] | None = None,
        show_progress: bool = False,
    ) -> WorkflowDetector:
        """Fit on conformant dialogues (or on the workflow alone): the step texts, what the task's
        dialogues do that its graph does not draw, the step roles and each task's threshold.

        Args:
            dialogues: Conformant records with ``task`` and ``turns``; records with ``system_nodes``
                (and ``system_node_tasks``) label their system turns, which then join those steps
                (:func:`~.workflow_fit.fit_labels`; unlabelled turns are self-trained). None or empty:
                fit from the workflow source alone, every task of it (no logs needed; the thresholds
                come from the workflow's own phrasings, :func:`~.workflow_fit.workflow_statistics`).
            embeddings: One ``(n_turns, d)`` array per dialogue; None: encoded.
            show_progress: Unused (kept for the detectors' common signature).

        Returns:
            self.

        Raises:
            InvalidParameterError: A parameter breaks ``_parameter_constraints`` (a ``ValueError``).
            ValueError: A dialogue without ``task``, a task the workflow source lacks, or no
                workflow source.
        """
        del show_progress
        self._validate_params()
        self.__dict__.pop("thresholds_", None)  # a refit calibrates raw deviations
        self.rules_off_ = {}
        self.rule_misfires_ = {}
        rows = list(dialogues) if dialogues is not None else []
        missing = [
            str(d.get("dialogue_id", i)) if isinstance(d, Mapping) else str(i)
            for i, d in enumerate(rows)
            if _task(d) is None
        ]
        if missing:
            raise ValueError(
                f"WorkflowDetector.fit: {len(missing)} dialogue(s) without a 'task' field "
                f"(e.g. {', '.join(missing[:3])}); the detector needs each dialogue's task"
            )
        source = resolve_workflow(self.workflow)
        tasks = sorted({_task(d) for d in rows}) if rows else sorted(source.tasks)
        unknown = [t for t in tasks if t not in source.tasks]
        if unknown:
            raise ValueError(
                f"WorkflowDetector.fit: task(s) {', '.join(unknown)} not in the workflow source "
                f"(it has {', '.join(sorted(source.tasks)[:30])}); pass the source they come from as workflow="
            )
        turns = [as_turns(d["turns"] if isinstance(d, Mapping) else d) for d in rows]
        emb = self._embed(turns, embeddings) if rows else []
        realise = self.realise_values if self.realise_values != "auto" else (0 if rows else 2)
        base = NodeAssigner(
            None,
            0.0,
            self.reject_margin,
            self.shared_steps,
            realise,
            reader=getattr(self, "step_reader", None),
        )
        base.encoder = self.get_encoder()
        base.fit(source, tasks=None)
        self.min_similarity_ = (
            auto_min_similarity(base, self.auto_quantile)
            if self.min_similarity == "auto"
            else float(self.min_similarity)
        )
        base.min_similarity = self.min_similarity_
        self.structures_ = {t: workflow_structure(source.tasks[t]) for t in tasks}
        task_of = [_task(d) for d in rows]
        sys_rows = [self._system_rows(t) for t in turns]
        from . import fit as wfit

        labels, self.fit_labels_ = wfit.fit_labels(self, base, rows, task_of, turns, emb, sys_rows)
        final = self._with_train_texts(
            base, wfit.labelled_parts(range(len(rows)), task_of, emb, sys_rows, labels)
        )
        # what the task's conformant dialogues do that its graph does not draw: repeated question
        # steps (a loop: the repeat rule is off for the task) and back steps (never flagged); read
        # on the steps the fit is sure of (labels, self-training)
        repeated: dict[str, dict[str, set[int]]] = {t: {} for t in tasks}  # step -> fit dialogues
        allowed: dict[str, set[tuple[str, str]]] = {t: set() for t in tasks}
        from dialfork_dataset.workflow.roles import derive_roles

        task_roles = {t: derive_roles(source.tasks[t]) for t in tasks} if self.state_rules else {}
        for i in range(len(rows)):
            t = task_of[i]
            tr = task_roles.get(t)
            flags = repeat_flags(
                labels[i],
                self._answered(turns[i], sys_rows[i]),
                self.structures_[t],
                declined=declined_turns(turns[i], labels[i], tr) if tr is not None and tr.complete else None,
            )
            for j in np.flatnonzero(flags):
                repeated[t].setdefault(labels[i][j], set()).add(i)
            allowed[t] |= order_pairs(labels[i], self.structures_[t])
        from .explain import fit_roles, repeatable_steps

        fit_roles(self, source, tasks, task_of, turns, labels, repeated)
        self.repeatable_ = repeatable_steps(self, repeated, task_of, rows)
        self.looping_ = frozenset(t for t, v in self.repeatable_.items() if v)
        self.order_allowed_ = {t: frozenset(v) for t, v in allowed.items()}
        self.assigner_ = final
        if rows:
            self.fit_kind_ = (
                self.calibration if self.calibration == "in_sample" or len(rows) < 2 else "cross_fit"
            )

            def cross(hits: dict[str, list[set[str]]] | None = None) -> dict[str, list[float]]:
                return wfit.cross_fit_statistics(
                    self, base, final, task_of, turns, emb, sys_rows, labels, hits
                )

            ids = [
                str(d.get("dialogue_id", f"#{i}")) if isinstance(d, Mapping) else f"#{i}"
                for i, d in enumerate(rows)
            ]
            stats = wfit.rule_budget(self, cross, task_of, ids) if self.rule_budget else cross()
        else:
            self.fit_kind_ = "workflow"
            stats = wfit.workflow_statistics(self, final, tasks)
        self.calibration_stats_ = {t: np.asarray(v, dtype=np.float64) for t, v in stats.items()}
        self._set_thresholds()
        cents = {}
        for t in tasks:
            U = [
                e[[k for k, x in enumerate(tt) if x["speaker"] == "user"]]
                for tt, e, tk in zip(turns, emb, task_of)
                if tk == t
            ]
            U = [u for u in U if len(u)]
            cents[t] = _unit(np.concatenate(U).mean(axis=0)) if U else None
        self.user_centroids_ = cents
        self.n_train_ = len(rows)
        logger.info(
            "wf detector (%s fit): %d tasks, thresholds %s",
            self.fit_kind_,
            len(tasks),
            {t: round(v, 4) for t, v in self.thresholds_.items()},
        )
        return self

    @staticmethod
    def _system_rows(turns: Sequence[Mapping[str, str]]) -> list[int]:
        return [k for k, x in enumerate(turns) if x["speaker"] == "system"]

    @staticmethod
    def _answered(turns: Sequence[Mapping[str, str]], rows: list[int]) -> list[bool]:
        """Whether a user turn follows each system turn (before the next one)."""
        return [
            any(
                x["speaker"] == "user"
                for x in turns[r + 1 : (rows[j + 1] if j + 1 < len(rows) else len(turns))]
            )
            for j, r in enumerate(rows)
        ]

    def _confident(self, a: Any) -> np.ndarray:
        """Per system turn of assignment ``a``: its step is sure enough for the state rules: by
        cosine (:func:`confident_steps`; the assignment carries the best and second best
        similarities) and, when the assigner reads with a step reader, also by its calibrated
        probability (:func:`sure_steps`, ``rule_min_prob``)."""
        by_cosine = confident_steps(
            a.own_similarity, a.second_similarity, self.rule_min_similarity, self.rule_min_margin
        )
        if getattr(getattr(self, "assigner_", None), "reader_", None) is not None:
            prob = getattr(a, "prob", None)
            if prob is not None and len(prob) == len(a.nodes):
                # both must be sure: the reader is sure of some step even for STAR's typed drafts
                # ("unavail", "9202"), where cosine is not
                return by_cosine & sure_steps(prob, getattr(self, "rule_min_prob", DEFAULT_RULE_MIN_PROB))
        return by_cosine

    def _slot_read(self) -> Any:
        """The tracker's slot reader (``read`` of :func:`~.workflow_state.observe_user`), or None for
        the hand patterns; loaded once per detector."""
        spec = getattr(self, "slot_reader", None)
        if spec is None:
            return None
        cached = getattr(self, "_slot_read_cache", None)
        if cached is not None and cached[0] == spec:
            return cached[1]
        import functools

        from .reader.slots import SlotReader, default_slot_reader, given_slots

        reader = default_slot_reader() if spec in ("auto", "default") else SlotReader.from_pretrained(spec)
        read = functools.partial(given_slots, reader)
        self._slot_read_cache = (spec, read)
        return read

    def _slot_memo(self) -> Any:
        """The slot reader when it reads with this detector's encoder (it may then hold the
        detector's system-turn embeddings, :meth:`~.reader.slots.SlotReader.remember`), else None;
        decided once per slot reader."""
        read = self._slot_read()
        if read is None:
            return None
        cached = getattr(self, "_slot_memo_cache", None)
        if cached is None or cached[0] is not read:
            reader = read.args[0]
            same = getattr(self.get_encoder(), "model_id", None) == reader.fingerprint.get("encoder")
            cached = self._slot_memo_cache = (read, reader if same else None)
        return cached[1]

    def _remember_rows(self, turns, E: np.ndarray, rows: Sequence[int]) -> None:
        """Hand the slot reader the embeddings of a dialogue's system turns ``rows`` (:meth:`_slot_memo`),
        so that a user turn answering one is the only text a read encodes."""
        reader = self._slot_memo()
        if reader is None:
            return
        for r in rows:
            if turns[r].get("text"):
                reader.remember(turns[r]["text"], E[r])

    def _state_args(self, task: str) -> tuple[Any, frozenset[str], Mapping[str, Any]]:
        """What the dialogue-state rules read of a fitted task: its structure, the steps never
        flagged as repeats, the enforced requirements."""
        return (
            self.structures_.get(task),
            self.repeatable_.get(task, frozenset()),
            self.requires_.get(task, {}),
        )

    def _rules_off_json(self) -> dict[str, list[str]]:
        """``rules_off_`` as JSON-safe lists (saved and fingerprinted)."""
        return {t: sorted(v) for t, v in sorted(getattr(self, "rules_off_", {}).items()) if v}

    def _requires_json(self) -> dict[str, dict[str, list[str]]]:
        """``requires_`` as JSON-safe lists (saved and fingerprinted)."""
        return {t: {n: list(v) for n, v in r.items()} for t, r in getattr(self, "requires_", {}).items()}

    def _state_flags(
        self, task: str, turns, nodes, sure: np.ndarray | None = None, also: Any = None
    ) -> tuple[dict[str, np.ndarray] | None, list[StepVerdict]]:
        """The dialogue-state rules' flags and verdicts of one task's system turns (None: no roles);
        a turn is judged only while it and every earlier system turn are ``sure`` (:meth:`_confident`);
        ``also``: per turn, the other question steps it asks (:attr:`~.nodes.NodeAssignment.also`;
        read only with the slot reader)."""
        roles = getattr(self, "roles_", {}).get(task)
        if roles is None or turns is None:
            return None, []
        flags, verdicts = state_flags(
            turns, nodes, roles, *self._state_args(task), read=self._slot_read(), also=also
        )
        if sure is not None:
            # judged only while it and every earlier system turn matched their steps surely
            sure = np.logical_and.accumulate(np.asarray(sure, dtype=bool))
            flags = {k: v * sure for k, v in flags.items()}
            verdicts = [v if ok else StepVerdict(None) for v, ok in zip(verdicts, sure)]
        return flags, verdicts

    def _flag_deviations(
        self,
        task: str,
        a: Any,
        answered: Sequence[bool],
        turns=None,
        hits: dict[str, np.ndarray] | None = None,
    ) -> np.ndarray:
        """The raw deviations (threshold not subtracted) of one task's assignment ``a``, rules
        included; ``hits`` (when given) receives rule -> 0/1 per system turn of each rule that is on."""
        st = self.structures_.get(task)
        n = len(a.nodes)
        w = self._rule_weights(task)
        zero = np.zeros(n)
        raw: dict[str, np.ndarray] = {}
        roles = getattr(self, "roles_", {}).get(task)
        if st is not None:
            declined = (
                declined_turns(turns, a.nodes, roles) if turns is not None and roles is not None else None
            )
            raw["repeat"] = repeat_flags(
                a.nodes, answered, st, self.repeatable_.get(task, frozenset()), declined
            )
            raw["order"] = order_flags(
                a.nodes, st, getattr(self, "order_allowed_", {}).get(task, frozenset())
            )
        flags, _ = self._state_flags(task, turns, a.nodes, self._confident(a), getattr(a, "also", None))
        raw.update(flags or {})
        on = {r: np.asarray(v, dtype=np.float64) * w[r] for r, v in raw.items() if w.get(r, 0.0) > 0}
        if hits is not None:
            hits.update({r: (v > 0).astype(np.int64) for r, v in on.items()})
        # a turn the repeat rules flag adds one repeat, whichever flag it; the other rules add theirs
        rep = np.max([on.get(r, zero) for r in REPEAT_RULES], axis=0)
        extra = rep + sum((on[r] for r in on if r not in REPEAT_RULES), zero)
        return extra + turn_deviations(
            a.own_similarity,
            a.rival_similarity,
            min_similarity=self.min_similarity_,
            reject_margin=self.reject_margin,
        )

    def _rule_weights(self, task: str) -> dict[str, float]:
        """rule -> its deviation weight for ``task`` (0 for a rule switched off for it:
        ``rules_off_``, :func:`~.workflow_fit.rule_budget`)."""
        off = getattr(self, "rules_off_", {}).get(task, frozenset())
        rep = getattr(self, "repeat_weight", DEFAULT_REPEAT_WEIGHT)  # (a subclass may lack the weights)
        w = {
            "repeat": rep,
            "order": getattr(self, "order_weight", DEFAULT_ORDER_WEIGHT),
            "skip-requires": getattr(self, "skip_weight", DEFAULT_SKIP_WEIGHT),
            "skip-closing": getattr(self, "closing_weight", DEFAULT_CLOSING_WEIGHT),
            "repeat-slot": rep,
            "repeat-confirmation": rep,
        }
        return {r: (0.0 if r in off else float(v)) for r, v in w.items()}

    def _with_train_texts(self, base: NodeAssigner, parts: list[tuple[str, np.ndarray]]) -> NodeAssigner:
        if not self.use_train_texts:
            return base
        return base.with_examples(parts)

    def _statistic(
        self,
        assigner: NodeAssigner,
        task: str,
        turns,
        E: np.ndarray,
        sys_rows: list[int],
        hits: set[str] | None = None,
    ) -> float:
        """A fit dialogue's statistic (its largest deviation); ``hits`` receives the rules that
        flag one of its turns."""
        rows = self._system_rows(turns)
        if not rows:
            return -math.inf
        got: dict[str, np.ndarray] = {}
        self._remember_rows(turns, E, rows)
        a = assigner.assign(task, E[rows])
        d = self._flag_deviations(task, a, self._answered(turns, rows), turns, got) - self._threshold_of(task)
        if hits is not None:
            hits.update(r for r, v in got.items() if v.any())
        return float(d.max())

    def recalibrate(self, false_alarm_rate: float, threshold_floor: Any = "keep") -> WorkflowDetector:
        """Move the operating point without refitting (the calibration statistics are kept).

        Args:
            false_alarm_rate: The new target in (0, 1).
            threshold_floor: The new floor (a number, or None: none); ``"keep"`` (default): unchanged.
                With a floor, a rate whose calibrated threshold falls below it moves nothing (a
                warning says so).

        Returns:
            self.

        Raises:
            InvalidParameterError: An invalid rate or floor (a ``ValueError``).
            TypeError: A floor for a detector without one (``wf-sup``).
            NotFittedError: Not fitted.
        """
        self.check_is_fitted()
        old = self.get_params(deep=False)
        if threshold_floor != "keep" and "threshold_floor" not in old:
            raise TypeError(
                f"{type(self).__name__} has no threshold_floor; recalibrate it with the rate alone"
            )
        self.false_alarm_rate = false_alarm_rate
        if threshold_floor != "keep":
            self.threshold_floor = threshold_floor
        try:
            self._validate_params()
        except ValueError:
            self.set_params(**old)
            raise
        self._set_thresholds()
        return self

    def _set_thresholds(self) -> None:
        from .fit import operating_point

        operating_point(self, self.calibration_stats_)

    # -- scoring --------------------------------------------------------------------------------------
    def check_is_fitted(self) -> None:
        """Raise unless :meth:`fit` (or :meth:`load`) has run.

        Raises:
            NotFittedError: Not fitted.
        """
        if not self.__sklearn_is_fitted__():
            from ..streaming._common import NotFittedError

            raise NotFittedError("WorkflowDetector is not fitted: call fit(conformant_dialogues) first")

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, "thresholds_")

    @property
    def tasks(self) -> list[str]:
        """The tasks the detector was fitted on."""
        self.check_is_fitted()
        return sorted(self.thresholds_)

    def route(self, user_embeddings: np.ndarray, margin: float = 0.0) -> str | None:
        """The fitted task whose train user turns the given user turns resemble most.

        Args:
            user_embeddings: The user turns seen so far, shape ``(n, d)`` (may be empty).
            margin: Least lead (in summed cosine similarity) of the best task over the second for
                a route; below it None (not sure yet).

        Returns:
            str | None: A fitted task, or None when unsure (or nothing is known yet).
        """
        self.check_is_fitted()
        tasks = [t for t in self.tasks if self.user_centroids_.get(t) is not None]
        U = np.asarray(user_embeddings, dtype=np.float64)
        if len(tasks) == 1:
            return tasks[0]
        if not tasks or U.size == 0:
            return None
        C = np.stack([self.user_centroids_[t] for t in tasks])
        s = (_unit(U.reshape(-1, C.shape[1])) @ C.T).sum(axis=0)
        order = np.argsort(-s)
        return tasks[int(order[0])] if s[order[0]] - s[order[1]] >= margin else None

    def _deviations(
        self, assigner: NodeAssigner, task: str | None, turns, E: np.ndarray, routes: list[str] | None = None
    ) -> np.ndarray:
        rows = self._system_rows(turns)
        if not rows:
            return np.zeros(0)
        answered = self._answered(turns, rows)
        self._remember_rows(turns, E, rows)
        if task is None:
            routes = routes or [
                self.route(E[[k for k in range(r) if turns[k]["speaker"] == "user"]], ROUTE_MARGIN)
                for r in rows
            ]
        else:
            routes = [task] * len(rows)
        out = np.empty(len(rows))
        per_task: dict[str, np.ndarray] = {}
        # one assignment per task needed; an unsure route (None) takes the task that fits best
        for t in self.tasks if None in routes else dict.fromkeys(routes):
            a = assigner.assign(t, E[rows])
            per_task[t] = self._flag_deviations(t, a, answered, turns) - self._threshold_of(t)
        for j, rt in enumerate(routes):
            out[j] = per_task[rt][j] if rt is not None else min(v[j] for v in per_task.values())
        return out

    def _threshold_of(self, task: str) -> float:
        return getattr(self, "thresholds_", {}).get(task, 0.0)

    def assign(self, dialogue: Any, embeddings: np.ndarray | None = None):
        """The node assignment of a dialogue's system turns (:class:`~.workflow_nodes.NodeAssignment`).

        Args:
            dialogue: A record (with ``task``; else routed) or a list of turns.
            embeddings: ``(n_turns, d)``; None: encoded.

        Returns:
            NodeAssignment: Nodes (None: off-workflow), similarities, rivals, reasons.
        """
        self.check_is_fitted()
        turns = as_turns(
            dialogue["turns"] if isinstance(dialogue, Mapping) and "turns" in dialogue else dialogue
        )
        E = self._embed([turns], None if embeddings is None else [embeddings])[0]
        task = _task(dialogue) or self.route(E[[k for k, x in enumerate(turns) if x["speaker"] == "user"]])
        return self.assigner_.assign(task, E[self._system_rows(turns)])

    def turn_deviations(
        self, dialogues: Sequence[Any], embeddings: Sequence[np.ndarray] | None = None
    ) -> list[np.ndarray]:
        """How far every system turn of each dialogue deviates beyond its task's threshold (alarm where > 0).

        Args:
            dialogues: Records (``task`` used when present, else routed) or turn lists.
            embeddings: One ``(n_turns, d)`` array per dialogue; None: encoded.

        Returns:
            list[np.ndarray]: One array per dialogue, one value per system turn: the turn's deviation
            (:func:`turn_deviations`) minus the threshold of its task; for a dialogue without a
            ``task``, of the task its user turns route to (:meth:`route`), and while the route is
            unsure the smallest over the fitted tasks.
        """
        self.check_is_fitted()
        turns, emb = self._turns_and_embeddings(dialogues, embeddings)
        return [
            self._deviations(self.assigner_, _task(d) if _task(d) in self.structures_ else None, t, e)
            for d, t, e in zip(dialogues, turns, emb)
        ]

    def predict(self, dialogue: Any, embeddings: np.ndarray | None = None) -> int | None:
        """The first deviating system turn (1-based) of one dialogue, or None.

        Args:
            dialogue: A record or a list of turns.
            embeddings: ``(n_turns, d)``; None: encoded.

        Returns:
            int | None: The alarm's system turn.
        """
        return self.predict_many([dialogue], None if embeddings is None else [embeddings])[0]

    def predict_many(
        self,
        dialogues: Sequence[Any],
        embeddings: Sequence[np.ndarray] | None = None,
        show_progress: bool = False,
    ) -> list[int | None]:
        """:meth:`predict` of many dialogues (encoded in one batch).

        Args:
            dialogues: Records or turn lists.
            embeddings: One ``(n_turns, d)`` array per dialogue; None: encoded.
            show_progress: Unused (kept for the detectors' common signature).

        Returns:
            list[int | None]: One prediction per dialogue.
        """
        del show_progress
        dialogues = list(dialogues)
        return [first_alarm(dev, 0.0) for dev in self.turn_deviations(dialogues, embeddings)]

    def explain_many(
        self, dialogues: Sequence[Any], embeddings: Sequence[np.ndarray] | None = None
    ) -> list[dict[str, Any] | None]:
        """Why each dialogue alarms: the rule behind its first alarm (None: no alarm).

        Args:
            dialogues: Records (``task`` used when present, else routed) or turn lists.
            embeddings: One ``(n_turns, d)`` array per dialogue; None: encoded.

        Returns:
            list[dict | None]: Per dialogue, ``system_turn`` (the first alarm), ``rule``
            (``skip-requires``, ``skip-closing``, ``repeat-slot``, ``repeat``, ``order``,
            ``off-task``, ``unfamiliar``), ``node`` (the step the turn was taken for), ``expected``
            (the step that should have come first), ``slot`` (missing or asked again), ``rival``
            (``task:node`` of another workflow that fits it better) and a one-line ``message``
            (:func:`~.workflow_explain.explain_many`).
        """
        from .explain import explain_many

        return explain_many(self, dialogues, embeddings)

    # -- streaming --------------------------------------------------------------------------------------
    def start(self, task: str | None = None) -> WorkflowStream:
        """A streaming session: feed turns one at a time with :meth:`WorkflowStream.update`.

        Args:
            task: The conversation's task; None: routed from its user turns.

        Returns:
            WorkflowStream: The session.

        Raises:
            KeyError: ``task`` was not fitted.
        """
        self.check_is_fitted()
        if task is not None and task not in self.thresholds_:
            raise KeyError(f"task {task!r} was not fitted (fitted: {', '.join(self.tasks)})")
        return WorkflowStream(self, task)

    def step(
        self,
        state: Mapping[str, Any] | None,
        speaker: str,
        embedding: np.ndarray | None,
        task: str,
        text: str | None = None,
    ) -> tuple[dict[str, Any], WorkflowStepResult]:
        """Advance one conversation of a known task by one turn (what the guard runs per turn).

        The state is a small JSON-safe dict: turn counters, the node of each system turn so far and
        whether a user answered it (what the repeat rule reads), the off-task counts per rival
        task, and the dialogue state (``dialogue``: the slots filled and how, the steps done;
        :class:`~.workflow_state.DialogueState`). The deviation of a system turn equals the offline
        one (:meth:`turn_deviations`) when every user turn's ``text`` is given.

        Args:
            state: The previous state (None: a new conversation).
            speaker: ``"user"`` or ``"system"``.
            embedding: The turn's embedding, shape ``(d,)`` (a user turn's is not read).
            task: The conversation's task (fitted).
            text: The turn's text: a user turn's fills slots (without it the turn answers the
                pending question but volunteers nothing); a system turn's is what the slot reader
                reads the next user turn against (kept in the state's ``dialogue``).

        Returns:
            ``(state, result)``: the new state and the :class:`WorkflowStepResult` of the turn.

        Raises:
            KeyError: ``task`` was not fitted.
        """
        self.check_is_fitted()
        if task not in self.thresholds_:
            raise KeyError(f"task {task!r} was not fitted (fitted: {', '.join(self.tasks)})")
        st = {"turn": 0, "system_turn": 0, "nodes": [], "answered": [], "off_task": {}, "unfamiliar": 0}
        if state:
            st.update(
                {
                    k: (list(v) if isinstance(v, list) else dict(v) if isinstance(v, dict) else v)
                    for k, v in state.items()
                }
            )
        thr = self._threshold_of(task)
        st["turn"] += 1
        roles = getattr(self, "roles_", {}).get(task)
        dstate = DialogueState.from_dict(st.get("dialogue"))
        if speaker != "system":
            if st["answered"]:
                st["answered"][-1] = True
            if roles is not None:
                read = self._slot_read() if text else None  # no text: answers, as before
                st["dialogue"] = observe_user(dstate, text or "", st["turn"] - 1, roles, read).to_dict()
            return st, WorkflowStepResult(None, False, None, thr, None, None, None)
        a = self.assigner_.assign(task, np.asarray(embedding, dtype=np.float64).reshape(1, -1))
        if roles is not None and text and (reader := self._slot_memo()) is not None:
            reader.remember(text, embedding)
        st["system_turn"] += 1
        st["nodes"].append(a.nodes[0])
        st["answered"].append(False)
        st_ = self.structures_[task]
        declined = [k in dstate.declined for k in range(len(st["nodes"]))] if roles is not None else None
        w = self._rule_weights(task)
        rep = repeat_flags(
            st["nodes"], st["answered"], st_, self.repeatable_.get(task, frozenset()), declined
        )
        order = order_flags(st["nodes"], st_, getattr(self, "order_allowed_", {}).get(task, frozenset()))
        verdict = StepVerdict(None)
        if roles is not None:
            more = a.also[0] if a.also and self._slot_read() is not None else ()
            dstate, verdict = observe_system(
                dstate, a.nodes[0], roles, *self._state_args(task), text=text, also=more
            )
            st["dialogue"] = dstate.to_dict()
            if not self._confident(a)[0]:
                st["unsure"] = True
            if st.get("unsure"):
                verdict = StepVerdict(None)
        if verdict.rule is not None and w.get(verdict.rule, 0.0) <= 0:
            verdict = StepVerdict(None)  # a rule switched off for the task gives no reason
        rep_dev = max(w["repeat"] * float(rep[-1]), *(w[r] * (verdict.rule == r) for r in REPEAT_RULES[1:]))
        extra = (
            rep_dev
            + w["order"] * float(order[-1])
            + sum(w[r] * (verdict.rule == r) for r in ("skip-requires", "skip-closing"))
        )
        dev = extra + float(
            turn_deviations(
                a.own_similarity,
                a.rival_similarity,
                min_similarity=self.min_similarity_,
                reject_margin=self.reject_margin,
            )[0]
        )
        reason, rival_task = a.reasons[0], (a.rival[0].split(":")[0] if a.rival[0] else None)
        if reason == "off-task" and rival_task:
            st["off_task"][rival_task] = st["off_task"].get(rival_task, 0) + 1
        elif reason == "unfamiliar":
            st["unfamiliar"] += 1
        return st, WorkflowStepResult(
            st["system_turn"], dev > thr, dev, thr, a.nodes[0], reason, rival_task, *_rule_fields(verdict)
        )

    @property
    def dim(self) -> int:
        """The embedding size it reads."""
        self.check_is_fitted()
        return int(self.assigner_.P_.shape[1])

    def fingerprint_arrays(self) -> dict[str, Any]:
        """What decides a verdict besides the turns: the guard's monitor fingerprint hashes it.

        Returns:
            dict[str, Any]: Parameters, thresholds, node keys, repeatable nodes and the arrays.
        """
        self.check_is_fitted()
        return {
            "params": {
                "min_similarity": self.min_similarity_,
                "reject_margin": self.reject_margin,
                "repeat_weight": self.repeat_weight,
                "order_weight": self.order_weight,
                "skip_weight": self.skip_weight,
                "closing_weight": self.closing_weight,
                "slot_reader": getattr(self, "slot_reader", None),
                "rule_min_prob": getattr(self, "rule_min_prob", DEFAULT_RULE_MIN_PROB),
            },
            "rules_off": self._rules_off_json(),
            "requires": self._requires_json(),
            "thresholds": self.thresholds_,
            "keys": [list(k) for k in self.assigner_.keys_],
            "repeatable": {t: sorted(v) for t, v in self.repeatable_.items()},
            "looping": sorted(getattr(self, "looping_", ())),
            "order_allowed": {
                t: sorted(map(list, v)) for t, v in getattr(self, "order_allowed_", {}).items()
            },
            "P": self.assigner_.P_,
            "owners": self.assigner_.owners_,
        }

    # -- persistence ------------------------------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        """The detector's parameters as JSON-safe values (the workflow as its spec string).

        Returns:
            dict[str, Any]: The configuration.
        """
        p = self.get_params(deep=False)
        p["workflow"] = self._workflow_spec()
        enc = self.encoder
        p["encoder"] = (
            enc
            if isinstance(enc, str) or enc is None
            else (getattr(enc, "alias", None) or getattr(enc, "name", None))
        )
        return p

    def _workflow_spec(self) -> str | None:
        from dialfork_dataset.sources import source_spec_of

        return source_spec_of(self.workflow)  # a spec as given, or KIND:PATH of a registered kind's object

    def save(self, path: str | os.PathLike) -> Path:
        """Write the fitted detector to a folder (``config.json`` + ``arrays.npz``), atomically per file.

        The workflow source is saved by reference (its spec); loading reads it again.

        Args:
            path: The folder (created).

        Returns:
            Path: The folder.

        Raises:
            NotFittedError: Not fitted.
        """
        self.check_is_fitted()
        return self._write(path, {}, {"thresholds": self.thresholds_, "fitted_tasks": self.tasks})

    def _write(
        self, path: str | os.PathLike, arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any]
    ) -> Path:
        """Write what every workflow-aware detector keeps (node texts, statistics, routing, config)
        plus a subclass's ``arrays`` and ``meta``, each file atomically."""
        import io

        from dialfork_dataset.atomic import write_bytes_atomic, write_text_atomic

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        a = self.assigner_
        out = {
            "P": a.P_,
            "owners": a.owners_,
            **{f"stats/{t}": v for t, v in self.calibration_stats_.items()},
            **{f"user/{t}": c for t, c in self.user_centroids_.items() if c is not None},
            **arrays,
        }
        buf = io.BytesIO()
        np.savez(buf, **out)
        write_bytes_atomic(path / "arrays.npz", buf.getvalue())
        full = {
            "format": self.FORMAT,
            "format_version": 1,
            "config": self.config(),
            "keys": [list(k) for k in a.keys_],
            "tasks": {t: [n for _, n in ks] for t, ks in a.tasks_.items()},
            "n_train": self.n_train_,
            "min_similarity": self.min_similarity_,
            "repeatable": {t: sorted(v) for t, v in self.repeatable_.items()},
            "looping": sorted(getattr(self, "looping_", ())),
            "order_allowed": {
                t: sorted(map(list, v)) for t, v in getattr(self, "order_allowed_", {}).items()
            },
            "requires": self._requires_json(),
            "fit_kind": getattr(self, "fit_kind_", None),
            "rules_off": self._rules_off_json(),
            "rule_misfires": {
                t: [bool(x) for x in v] for t, v in getattr(self, "rule_misfires_", {}).items()
            },
            "fit_labels": getattr(self, "fit_labels_", None),
            "operating_point": getattr(self, "operating_point_", None),
            **meta,
        }
        write_text_atomic(path / "config.json", json.dumps(full, indent=2) + "\n")
        return path

    @classmethod
    def load(cls, path: str | os.PathLike, encoder: Any = None, workflow: Any = None) -> WorkflowDetector:
        """Load a folder written by :meth:`save`.

        Args:
            path: The folder.
            encoder: Encoder override (alias/path/object); None: the saved name.
            workflow: Workflow source override; None: the saved spec (or ``$DIALFORK_STAR_DIR``).

        Returns:
            WorkflowDetector: The fitted detector.

        Raises:
            ValueError: Not a saved workflow detector, or its arrays do not match its config.
            FileNotFoundError: A file is missing.
        """
        det, meta, arrays, source = cls._read(path, encoder, workflow)
        tasks = list(meta["fitted_tasks"])
        det.structures_ = {t: workflow_structure(source.tasks[t]) for t in tasks}
        det.thresholds_ = {t: float(meta["thresholds"][t]) for t in tasks}
        det.calibration_stats_ = {t: arrays.get(f"stats/{t}", np.zeros(0)) for t in tasks}
        det.user_centroids_ = {t: arrays.get(f"user/{t}") for t in tasks}
        return det

    @classmethod
    def _read(
        cls, path: str | os.PathLike, encoder: Any, workflow: Any
    ) -> tuple[Any, dict[str, Any], dict[str, np.ndarray], Any]:
        """Read what :meth:`_write` wrote: ``(detector, meta, arrays, workflow source)``, the detector
        constructed from the saved config (``encoder``/``workflow`` override it) with its node
        assigner, floor, training size and repeatable nodes restored."""
        path = Path(path)
        meta = json.loads((path / "config.json").read_text(encoding="utf-8"))
        if meta.get("format") != cls.FORMAT:
            raise ValueError(f"{path}: not a saved {cls.name} detector (format {meta.get('format')!r})")
        cfg = dict(meta["config"])
        if "shared_steps" in cls._parameter_constraints:
            cfg.setdefault("shared_steps", False)  # a folder saved before shared steps
        if "slot_reader" in cls._parameter_constraints:
            cfg.setdefault("slot_reader", None)  # a folder saved before the slot reader: the patterns
        if "step_reader" in cls._parameter_constraints:
            cfg.setdefault("step_reader", None)  # a folder saved before the parameter: cosine
        if encoder is not None:
            cfg["encoder"] = encoder
        if workflow is not None:
            cfg["workflow"] = workflow
        det = cls(**cfg)
        source = resolve_workflow(det.workflow)
        with np.load(path / "arrays.npz") as z:
            arrays = {k: z[k] for k in z.files}
        det.min_similarity_ = float(meta["min_similarity"])
        a = NodeAssigner(
            det.get_encoder(),
            det.min_similarity_,
            det.reject_margin,
            getattr(det, "shared_steps", False),
            reader=getattr(det, "step_reader", None),
        )
        a.restore(source, [tuple(k) for k in meta["keys"]], meta["tasks"], arrays["P"], arrays["owners"])
        det.assigner_ = a
        det.n_train_ = int(meta.get("n_train", 0))
        det.fit_kind_ = meta.get("fit_kind") or getattr(det, "calibration", None)
        off = meta.get("rules_off") or {}
        # a folder saved before the per-rule switch lists the tasks whose every rule is off
        det.rules_off_ = (
            {t: frozenset(v) for t, v in off.items()}
            if isinstance(off, Mapping)
            else {t: frozenset(SWITCHABLE_RULES) for t in off}
        )
        det.fit_labels_ = meta.get("fit_labels") or {}
        det.operating_point_ = meta.get("operating_point") or {}
        det.repeatable_ = {t: frozenset(v) for t, v in meta.get("repeatable", {}).items()}
        # a folder saved before the order rule: every task with a repeated node loops
        det.looping_ = frozenset(
            meta["looping"] if "looping" in meta else (t for t, v in det.repeatable_.items() if v)
        )
        det.order_allowed_ = {
            t: frozenset(tuple(p) for p in v) for t, v in meta.get("order_allowed", {}).items()
        }
        det.rule_misfires_ = {t: [bool(x) for x in v] for t, v in (meta.get("rule_misfires") or {}).items()}
        if not isinstance(off, Mapping):  # saved before: a looping task had no repeat rule at all
            for t in det.looping_:
                det.rules_off_[t] = det.rules_off_.get(t, frozenset()) | {"repeat", "repeat-slot"}
        # the step roles are derived again from the source; the pruned requirements are saved
        from dialfork_dataset.workflow.roles import derive_roles

        det.requires_ = {t: {n: tuple(v) for n, v in r.items()} for t, r in meta.get("requires", {}).items()}
        det.roles_ = {t: derive_roles(source.tasks[t]) for t in det.requires_ if t in source.tasks}
        return det, meta, arrays, source


def _rule_fields(v: StepVerdict) -> tuple[str | None, str | None, str | None, str | None]:
    """``(rule, expected, slot, message)`` of a verdict, for :class:`WorkflowStepResult`."""
    return v.rule, v.expected, v.slot, v.message


class WorkflowStream:
    """One conversation watched by a :class:`WorkflowDetector` (see :meth:`WorkflowDetector.start`).

    Args:
        detector: The fitted detector.
        task: The conversation's task; None: routed from its user turns at each system turn.

    Attributes:
        turns: The turns seen so far.
        deviations: The deviation of each system turn.
        nodes: The node of each system turn (None: off-workflow).
        flag: The first alarm's system turn, or None.
    """

    def __init__(self, detector: WorkflowDetector, task: str | None = None):
        self._det = detector
        self.task = task
        self.turns: list[dict[str, str]] = []
        self._E: list[np.ndarray] = []
        self.deviations: list[float] = []
        self.nodes: list[str | None] = []
        self.routes: list[str | None] = []
        self.flag: int | None = None

    def update(self, turn: Any, embedding: np.ndarray | None = None) -> int | None:
        """Feed the next turn; a system turn gets its deviation.

        Args:
            turn: ``{"speaker", "text"}``.
            embedding: Its embedding; None: encoded with the detector's encoder.

        Returns:
            int | None: The system turn index of the alarm this turn raises (every deviating turn
            alarms; :attr:`flag` keeps the first), or None.

        Raises:
            ValueError: A malformed turn, or no embedding and no encoder.
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
        E = np.stack(self._E)
        users = [k for k, x in enumerate(self.turns) if x["speaker"] == "user"]
        route = self.task or det.route(E[users], ROUTE_MARGIN)
        self.routes.append(route)
        # the deviation of this turn, exactly as offline: the system turns so far under the task (or
        # the route each had when it was said; the repeat rule reads the earlier nodes)
        d = det._deviations(det.assigner_, self.task, self.turns, E)
        self.nodes.append(det.assigner_.assign(route, E[-1:]).nodes[0] if route is not None else None)
        dev = float(d[-1])
        self.deviations.append(dev)
        if dev > 0:
            j = len(self.deviations)
            if self.flag is None:
                self.flag = j
            return j
        return None


__all__ = [
    "REPEAT_RULES",
    "SWITCHABLE_RULES",
    "WorkflowDetector",
    "WorkflowStepResult",
    "WorkflowStream",
    "WorkflowStructure",
    "workflow_for_data",
    "auto_min_similarity",
    "first_alarm",
    "order_flags",
    "order_pairs",
    "repeat_flags",
    "resolve_workflow",
    "turn_deviations",
    "workflow_structure",
]
