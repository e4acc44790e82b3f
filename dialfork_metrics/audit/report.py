"""Scoring of an audit run, per task, and the :class:`AuditReport` (Markdown, HTML, JSON).

Per task (SPEC 10, definitions in docs/audit.md):

* ``dialogues``/``failed``: conversations finished / lost to upstream failures (listed, never dropped);
* ``completion``: share of finished dialogues that reach the workflow's end by following it: every
  happy-path step said, the outcome step included, and the dialogue ended by the agent (goodbye or
  ``[END]``);
* step coverage (:func:`dialfork_metrics.task3.workflow.coverage.step_coverage`): mean share of the happy path's
  steps visited, mean skipped / repeated / out-of-order steps, off-workflow turns;
* ``alarm_rate`` and ``first_alarms``: the streaming detector (``detector``, fitted on the
  reference's conformant dialogues of the task) run over each dialogue;
* ``flowkl``, ``flowkl_ci``, ``flowkl_note``: FlowKL(reference conformant set, agent's dialogues)
  as :func:`dialfork_metrics.flowgraph.flowkl_crossfit` estimates it on small sets (both drawn
  comparably by cross-fitted graphs, one smoothing for both, never negative, 0 when the agent's
  likelihoods are distributed like the reference's) with its 95% bootstrap interval; None, with
  the reason in ``flowkl_note``, below 10 reference or 5 audited dialogues, where it would say
  more about the draw than about the agent;
* ``flowscore``: mean FlowScore distance of each dialogue to the reference conformant dialogue of
  the same scenario, where there is one;
* ``tool_calls``/``tool_errors``: with KB tools (``kb_tools``), the agent's tool calls and those
  answered with a tool error (malformed JSON, unknown tool or argument, a value outside the
  schema); None without tools;
* ``deviant``: the three dialogues with the largest FlowScore distance (else the earliest alarms),
  with the flagged turn.
"""

from __future__ import annotations

import base64
import html
import io
import json
import logging
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .store import AuditError, Job, Store

log = logging.getLogger(__name__)


def load_reference(reference: Any, tasks: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """Conformant reference dialogues per task, from a list of records, a generator output folder
    or an exported Hub folder (its ``conformant`` config). Every task without one is an error.

    Args:
        reference: A generator output folder, an exported Hub folder (path or str), or an iterable
            of DialFork record dicts.
        tasks: The task names whose conformant dialogues are wanted.

    Returns:
        A dict task name -> list of its conformant records (``hallucination_type`` None), in the
        reference's order, one key per name of ``tasks``.

    Raises:
        AuditError: The path does not exist, is neither a corpus folder nor a Hub folder, or a
            task of ``tasks`` has no conformant dialogue in the reference.
    """
    if isinstance(reference, (str, os.PathLike)):
        from dialfork_dataset.hub import DataSourceError, resolve_data

        try:  # no such folder, a gold folder, something else: one message (dialfork_dataset.hub.resolve)
            src = resolve_data(reference, accept=("corpus", "layout"), option="reference")
        except DataSourceError as e:
            raise AuditError(str(e)) from None
        p = src.path
        try:
            if src.kind == "corpus":
                from dialfork_dataset.builder import load_records

                recs = load_records(p)
            else:
                from dialfork_dataset.hub import load_layout

                dd = load_layout(p, "conformant")
                recs = [dict(r) for split in dd.values() for r in split]
        except Exception as e:  # noqa: BLE001 - a reader's reason, with the folder it read
            raise AuditError(f"reference {p}: cannot read its dialogues ({type(e).__name__}: {e})") from None
        where = str(p)
    else:
        recs, where = list(reference), "the reference records"
    out: dict[str, list[dict[str, Any]]] = {t: [] for t in tasks}
    for r in recs:
        if r.get("hallucination_type") is None and r.get("task") in out:
            out[r["task"]].append(r)
    missing = [t for t, rs in out.items() if not rs]
    if missing:
        raise AuditError(
            f"{where} has no conformant dialogue of task(s) {', '.join(missing)}; the audit needs "
            "them to fit the detectors and for FlowKL/FlowScore (generate them with "
            "python -m generation --tasks " + ",".join(missing) + ")"
        )
    return out


def _mean(xs: Sequence[float]) -> float | None:
    xs = [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return sum(xs) / len(xs) if xs else None


def _sum_known(xs: Sequence[int | None]) -> int | None:
    known = [x for x in xs if x is not None]
    return sum(known) if known else None


def _system_position(turns: Sequence[Mapping[str, str]], k: int) -> int | None:
    n = 0
    for i, t in enumerate(turns):
        if t["speaker"] == "system":
            n += 1
            if n == k:
                return i
    return None


SINGLE_THRESHOLD_SETTINGS: dict[str, dict[str, Any]] = {
    "it": {
        "calibration": "cross_fit",
        "backoff": True,
        "distance_threshold": 0.7,
        "scope": "pooled",
        "order": 3,
    },
    "it+nc": {
        "calibration": "cross_fit",
        "backoff": True,
        "distance_threshold": 0.7,
        "scope": "pooled",
        "order": 3,
    },
    "ss": {
        "calibration": "in_sample",
        "backoff": True,
        "distance_threshold": 0.85,
        "scope": "task",
        "order": 6,
    },
    "ss+nc": {
        "calibration": "cross_fit",
        "backoff": True,
        "distance_threshold": 0.85,
        "scope": "task",
        "order": 6,
    },
}
"""Per streaming detector, the settings the train-only selection chooses on the full template corpus
with MiniLM when the position weight is held at 0, the paper's single threshold
(``benchmarks/results/detectors_full.json``; the ``pw=0`` rows of ``detectors_full_pw6.json`` choose
the same)."""


def audit_detector_options(detector: str, options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The constructor options the audit fits ``detector`` with: ``options`` when given (``{}``:
    the packaged ``selected`` settings unchanged), else :data:`SINGLE_THRESHOLD_SETTINGS` of the
    detector (nothing for a detector without an entry) at ``position_weight`` 0.

    The audit locates where an agent leaves its workflow and each flag is read by a person
    afterwards, so an alarm belongs at the turn that deviates. The packaged settings carry a
    position weight, chosen for a live guardrail's Score on the full corpus, that raises the bar
    for early alarms: it flags a derailment later, or on a small reference not at all.

    Args:
        detector: A Task 3 detector name (:func:`dialfork_metrics.task3.make_detector`).
        options: Explicit options; None: the defaults above.

    Returns:
        A new dict of options.
    """
    if options is not None:
        return dict(options)
    base = SINGLE_THRESHOLD_SETTINGS.get(detector)
    return {} if base is None else {**base, "position_weight": 0.0}


def audit_detector_names() -> tuple[str, ...]:
    """The registered Task 3 detectors the audit can fit on a reference's conformant dialogues
    alone: those that need neither labelled forks nor an LLM ``model``.

    Returns:
        Their names, in table order.
    """
    from ..task3.registry import detector_specs

    return tuple(s.name for s in detector_specs() if not {"forks", "model"} & set(s.needs))


def audit_detector_spec(detector: str, options: Mapping[str, Any] | None = None) -> Any:
    """The registry entry of the audit's detector, refused before any conversation when the audit
    cannot fit it.

    Args:
        detector: A Task 3 detector name.
        options: Its constructor options (``detector_options``).

    Returns:
        Its :class:`~dialfork_metrics.task3.registry.DetectorSpec`.

    Raises:
        ValueError: An unknown name (the message lists the registered ones), a detector that learns
            from labelled forks, or an LLM detector without ``model`` in ``options``.
    """
    from ..task3 import registry as detector_registry

    spec = detector_registry.get(detector)
    if "forks" in spec.needs:
        raise ValueError(
            f"detector {spec.name!r} learns from labelled forks; the audit fits its detector on the "
            f"reference's conformant dialogues: use one of {', '.join(audit_detector_names())}"
        )
    if "model" in spec.needs and not (options or {}).get("model"):
        raise ValueError(
            f"detector {spec.name!r} needs the model= of its LLM: pass detector_options={{'model': ...}}"
        )
    return spec


def _state_tracker(task: str, workflow: Any):
    """``(turns, steps) -> (done steps or None, rule violations)`` for one task: the dialogue
    state (:mod:`dialfork_metrics.task3.workflow.state`) over the agent turns' matched steps; a
    function returning ``(None, [])`` when the task's roles cannot be derived or there is no
    workflow source."""
    try:
        from dialfork_dataset.workflow.roles import derive_roles

        from ..task3.workflow.rules import resolve_workflow, workflow_structure
        from ..task3.workflow.state import enforced_requirements

        src = resolve_workflow(workflow) if workflow is not None else None
        wt = src.tasks[task] if src is not None and task in src.tasks else None
        roles = derive_roles(wt) if wt is not None else None
    except (ValueError, KeyError, AttributeError) as e:
        log.warning("audit: no dialogue state for task %r (%s)", task, e)
        roles = None
    if roles is None or not roles.complete:
        return lambda turns, steps: (None, [])
    structure, requires = workflow_structure(wt), enforced_requirements(roles, wt)

    def run(turns: Any, steps: Any) -> tuple[list[str] | None, list[dict[str, Any]]]:
        from ..task3.workflow.state import run_state

        final, _, verdicts = run_state(turns, list(steps), roles, structure, (), requires)
        return final.done, [{"system_turn": k + 1, **v.to_dict()} for k, v in enumerate(verdicts) if v.rule]

    return run


def score_task(
    task: str,
    jobs: Sequence[Job],
    store: Store,
    refs: list[dict[str, Any]],
    encoder: Any,
    model: Any,
    detector: str = "wf",
    detector_options: Mapping[str, Any] | None = None,
    workflow: Any = None,
) -> dict[str, Any]:
    """The figures of one task (see the module doc): step coverage, completion, the detector's
    alarms, FlowKL and FlowScore against the reference, tool calls and the most deviant
    dialogues.

    Args:
        task: The task's name.
        jobs: The audit's jobs (those of other tasks are ignored).
        store: The audit's output (records, failures, matched steps).
        refs: The task's conformant reference dialogues; those with fewer than two turns are
            dropped.
        encoder: The sentence encoder.
        model: The task's workflow model (for step coverage).
        detector: The Task 3 detector name (default ``"wf"``), built from its registry entry
            (:meth:`~dialfork_metrics.task3.registry.DetectorSpec.build_from`): given the encoder and
            the workflow where it needs them; ``false_alarm_rate`` and ``seed`` stay at the
            detector's defaults unless ``detector_options`` sets them.
        detector_options: Its options (:func:`audit_detector_options`).
        workflow: The workflow source, given to a detector that needs one (``wf``).

    Returns:
        The task's dict, with the keys listed under :class:`AuditReport` (plus ``flowkl_ci`` and
        ``flowkl_note``); means over no dialogue are None.

    Raises:
        AuditError: No reference dialogue of the task has two turns or more.
    """
    from ..dialogue import flowscore
    from ..flowgraph import flowkl_crossfit
    from ..task3.workflow.coverage import step_coverage

    ids = [j.dialogue_id for j in jobs if j.task.name == task]
    recs = [store.records[i] for i in ids if i in store.records]
    failed = [store.failed[i] for i in ids if i in store.failed and i not in store.records]
    refs = [r for r in refs if len(r.get("turns") or ()) >= 2]
    if not refs:
        raise AuditError(f"task {task!r}: the reference has no conformant dialogue of two turns or more")
    rows = []
    opts = audit_detector_options(detector, detector_options)
    if opts.get("calibration") == "cross_fit" and len(refs) < 2:
        opts["calibration"] = "in_sample"
    spec = audit_detector_spec(detector, opts)
    det = spec.build_from({"encoder": encoder, "workflow": workflow}, **opts).fit(refs) if recs else None
    flags = det.predict_many(recs) if recs else []
    by_scenario = {}
    for r in refs:
        by_scenario.setdefault(str(r["scenario_id"]), r)
    reasons = det.explain_many(recs) if recs and hasattr(det, "explain_many") else [None] * len(recs)
    state_of = _state_tracker(task, workflow)
    for r, flag, why in zip(recs, flags, reasons):
        st = store.steps.get(r["dialogue_id"], {})
        done, broken = state_of(r["turns"], st.get("steps", []))
        cov = step_coverage(st.get("steps", []), model, done)
        ref = by_scenario.get(r["scenario_id"])
        fs = float(flowscore(ref, r, encoder)) if ref is not None else None
        tc = st.get("tool_calls")
        rows.append(
            {
                "dialogue_id": r["dialogue_id"],
                "scenario_id": r["scenario_id"],
                "turns": r["turns"],
                "tool_calls": None if tc is None else len(tc),
                "tool_errors": None if tc is None else sum(not c.get("ok") for c in tc),
                "steps": st.get("steps", []),
                "completed": bool(cov["reached_outcome"] and not cov["skipped"] and st.get("ended_by_agent")),
                "coverage": cov,
                "first_alarm": flag,
                "alarm_reason": why,
                "rule_violations": broken,
                "flowscore": fs,
            }
        )
    fkl = (
        flowkl_crossfit(refs, recs, encoder)
        if recs
        else {"flowkl": None, "ci_low": None, "note": "no dialogue"}
    )
    dev = sorted(
        rows,
        key=lambda x: (
            -(x["flowscore"] if x["flowscore"] is not None else -1.0),
            x["first_alarm"] if x["first_alarm"] is not None else 1e9,
        ),
    )[:3]
    deviant = []
    for x in dev:
        pos = _system_position(x["turns"], x["first_alarm"]) if x["first_alarm"] is not None else None
        deviant.append(
            {
                "dialogue_id": x["dialogue_id"],
                "flowscore": x["flowscore"],
                "first_alarm": x["first_alarm"],
                "flagged_position": pos,
                "turns": x["turns"],
            }
        )
    n = len(rows)
    return {
        "task": task,
        "dialogues": n,
        "failed": len(failed),
        "failures": [{"dialogue_id": f["dialogue_id"], "error": f["error"]} for f in failed],
        "completion": sum(x["completed"] for x in rows) / n if n else None,
        "coverage": _mean([x["coverage"]["coverage"] for x in rows]),
        "skipped": _mean([len(x["coverage"]["skipped"]) for x in rows]),
        "repeated": _mean([x["coverage"]["repeated"] for x in rows]),
        "out_of_order": _mean([x["coverage"]["out_of_order"] for x in rows]),
        "off_workflow": _mean([x["coverage"]["off_workflow"] for x in rows]),
        "alarm_rate": sum(x["first_alarm"] is not None for x in rows) / n if n else None,
        "first_alarms": {x["dialogue_id"]: x["first_alarm"] for x in rows},
        "flowkl": fkl["flowkl"],
        "flowkl_ci": None if fkl["ci_low"] is None else [fkl["ci_low"], fkl["ci_high"]],
        "flowkl_note": fkl["note"],
        "flowscore": _mean([x["flowscore"] for x in rows]),
        "tool_calls": _sum_known([x["tool_calls"] for x in rows]),
        "tool_errors": _sum_known([x["tool_errors"] for x in rows]),
        "flowscore_n": sum(x["flowscore"] is not None for x in rows),
        "reference_dialogues": len(refs),
        "detector": detector,
        "dialogue_rows": [{k: v for k, v in x.items() if k != "turns"} for x in rows],
        "deviant": deviant,
    }


def score_audit(
    jobs: Sequence[Job],
    store: Store,
    refs: Mapping[str, list[dict[str, Any]]],
    encoder: Any,
    backend: Any,
    detector: str = "wf",
    agent: str = "",
    model: str = "",
    detector_options: Mapping[str, Any] | None = None,
    workflow: Any = None,
) -> AuditReport:
    """Score every task of an audit run (:func:`score_task`, tasks in job order).

    Args:
        jobs: The audit's jobs.
        store: The audit's output.
        refs: Task -> its conformant reference dialogues.
        encoder: The sentence encoder.
        backend: The template backend (``model(task)``: each task's workflow model).
        detector: The Task 3 detector name (default ``"wf"``; :func:`audit_detector_names`).
        agent: The audited agent's API root, for the report.
        model: The audited model's name, for the report.
        detector_options: The detector's options (:func:`audit_detector_options`).
        workflow: The workflow source, given to a detector that needs one (``wf``).

    Returns:
        The :class:`AuditReport`.

    Raises:
        AuditError: A task has no usable reference dialogue (from :func:`score_task`).
    """
    tasks = list(dict.fromkeys(j.task.name for j in jobs))
    task_obj = {j.task.name: j.task for j in jobs}
    per = [
        score_task(
            t, jobs, store, refs[t], encoder, backend.model(task_obj[t]), detector, detector_options, workflow
        )
        for t in tasks
    ]
    return AuditReport(agent=agent, model=model, detector=detector, tasks=per)


def _fmt(v: Any, nd: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{nd}f}"
    return str(v)


def cell(t: Mapping[str, Any], key: str) -> str:
    """One table cell of a task's figure: :func:`_fmt` of the value, FlowKL with its interval
    (``0.041 [0.010, 0.200]``) or ``n/a`` when it was not estimated (the reason is printed under
    the table).

    Args:
        t: A task's figures (:func:`score_task`).
        key: The figure's key.

    Returns:
        The cell's text: ``-`` for None, floats with 3 decimals.
    """
    if key != "flowkl":
        return _fmt(t.get(key))
    if t.get("flowkl") is None:
        return "n/a"
    ci = t.get("flowkl_ci")
    return _fmt(t["flowkl"]) + (f" [{_fmt(ci[0])}, {_fmt(ci[1])}]" if ci else "")


def flowkl_notes(tasks: Sequence[Mapping[str, Any]]) -> list[str]:
    """The lines under a table that say what FlowKL is and why a task has none.

    Args:
        tasks: The tasks' figures.

    Returns:
        The definition line, then one line per task without FlowKL that has a ``flowkl_note``.
    """
    lines = [
        "FlowKL: divergence of the agent's flow likelihoods from the reference's (0: distributed alike; "
        "cross-fitted, never negative), with its 95% bootstrap interval."
    ]
    lines += [
        f"FlowKL of {t['task']}: {t['flowkl_note']}."
        for t in tasks
        if t.get("flowkl") is None and t.get("flowkl_note")
    ]
    return lines


COLUMNS = (
    ("dialogues", "dialogues"),
    ("failed", "failed"),
    ("completion", "completion"),
    ("coverage", "coverage"),
    ("skipped", "skipped"),
    ("repeated", "repeated"),
    ("out_of_order", "out of order"),
    ("alarm_rate", "alarm rate"),
    ("flowkl", "FlowKL"),
    ("flowscore", "FlowScore dist."),
    ("tool_calls", "tool calls"),
    ("tool_errors", "tool errors"),
)


@dataclass
class AuditReport:
    """The result of :func:`~dialfork_metrics.audit.core.audit_agent`: one dict of figures per task
    (see the module doc), rendered as Markdown, HTML or JSON.

    Attributes:
        agent: The audited agent's API root.
        model: The audited model's name.
        detector: The Task 3 detector name used for the alarms.
        tasks: One dict per audited task (keys ``task``, ``dialogues``, ``failed``, ``failures``,
            ``completion``, ``coverage``, ``skipped``, ``repeated``, ``out_of_order``,
            ``off_workflow``, ``alarm_rate``, ``first_alarms``, ``flowkl``, ``flowscore``,
            ``flowscore_n``, ``tool_calls``, ``tool_errors``, ``reference_dialogues``,
            ``detector``, ``dialogue_rows``, ``deviant``); a figure without data is None.
    """

    agent: str
    model: str
    detector: str
    tasks: list[dict[str, Any]] = field(default_factory=list)

    def task(self, name: str) -> dict[str, Any]:
        """The figures of one task.

        Args:
            name: The task name.

        Returns:
            The task's dict of :attr:`tasks`.

        Raises:
            KeyError: The report has no task ``name``.
        """
        for t in self.tasks:
            if t["task"] == name:
                return t
        raise KeyError(f"no task {name!r} in this report; it has {[t['task'] for t in self.tasks]}")

    def to_dict(self) -> dict[str, Any]:
        """The report as a JSON-ready dict with keys ``agent``, ``model``, ``detector``, ``tasks``.

        Returns:
            The dict (the task dicts are the report's own, not copies).
        """
        return {"agent": self.agent, "model": self.model, "detector": self.detector, "tasks": self.tasks}

    def to_json(self, indent: int | None = 2) -> str:
        """The report as JSON (:meth:`to_dict`).

        Args:
            indent: JSON indentation; None: one line.

        Returns:
            The JSON text (non-ASCII characters kept as they are).
        """
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)

    def _deviant_md(self, t: dict[str, Any]) -> list[str]:
        out = []
        for d in t["deviant"]:
            out.append(
                f"**{d['dialogue_id']}** (FlowScore distance {_fmt(d['flowscore'])}, "
                f"first alarm at system turn {_fmt(d['first_alarm'])})\n"
            )
            for i, turn in enumerate(d["turns"]):
                line = f"{turn['speaker']}: {' '.join(turn['text'].split())}"  # one line per turn
                out.append(f"> **>> {line}**  " if i == d["flagged_position"] else f"> {line}  ")
            out.append("")
        return out

    def to_markdown(self) -> str:
        """The report as Markdown: a table of the figures per task, then per task its failures, its
        first-alarm turns and its most deviant dialogues (flagged turn in bold).

        Returns:
            The Markdown text.
        """
        lines = [
            f"# Agent audit: {self.model} at {self.agent}",
            "",
            f"Detector: `{self.detector}` (fitted per task on the reference's conformant dialogues). "
            "Higher completion and coverage are better; lower alarm rate, FlowKL and FlowScore distance are better.",
            "",
            "| task | " + " | ".join(h for _, h in COLUMNS) + " |",
            "| --- |" + " --- |" * len(COLUMNS),
        ]
        for t in self.tasks:
            lines.append(f"| {t['task']} | " + " | ".join(cell(t, k) for k, _ in COLUMNS) + " |")
        lines += [""] + flowkl_notes(self.tasks)
        for t in self.tasks:
            lines += ["", f"## {t['task']}", ""]
            if t["failures"]:
                lines.append(
                    "Failed dialogues: "
                    + "; ".join(f"{f['dialogue_id']}: {f['error']}" for f in t["failures"])
                )
                lines.append("")
            fa = [v for v in t["first_alarms"].values() if v is not None]
            lines.append(f"First-alarm system turns: {sorted(fa) if fa else 'none'}")
            lines += ["", "Most deviant dialogues (flagged turn in bold):", ""] + self._deviant_md(t)
        return "\n".join(lines) + "\n"

    def plot_figure(self, t: dict[str, Any]):
        """The figure of :meth:`plot_png`: a bar per dialogue (its step coverage; red where the
        detector raised an alarm, blue where not) and a dot per dialogue (its FlowScore distance to
        the reference D+ of its scenario), both on the y axis's 0-1 scale. The legend sits above the
        axes, so it covers no bar. The caller closes it (``matplotlib.pyplot.close``).

        Args:
            t: One task dict of :attr:`tasks`.

        Returns:
            matplotlib.figure.Figure: The figure (Agg backend).
        """
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.lines import Line2D
        from matplotlib.patches import Patch

        rows = t["dialogue_rows"]
        fig, ax = plt.subplots(figsize=(max(5.5, 0.5 * len(rows) + 2), 3.6))
        xs = list(range(len(rows)))
        cov = [r["coverage"]["coverage"] for r in rows]
        ax.bar(xs, cov, color=["#c0392b" if r["first_alarm"] is not None else "#2e86c1" for r in rows])
        fs = [r["flowscore"] if r["flowscore"] is not None else float("nan") for r in rows]
        ax.plot(xs, fs, "ko", ms=4)
        ax.set_xticks(xs, [r["scenario_id"] for r in rows], rotation=90, fontsize=7)
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("step coverage (bars)\nFlowScore distance (dots)", fontsize=8)
        ax.set_xlabel("scenario", fontsize=8)
        ax.tick_params(axis="y", labelsize=7)
        ax.legend(
            handles=[
                Patch(fc="#2e86c1", label="coverage, no alarm"),
                Patch(fc="#c0392b", label="coverage, alarm raised"),
                Line2D([], [], color="k", marker="o", ls="", ms=4, label="FlowScore distance"),
            ],
            fontsize=7,
            loc="lower left",
            bbox_to_anchor=(0.0, 1.0),
            ncol=3,
            frameon=False,
            borderaxespad=0.2,
        )
        ax.set_title(
            f"{t['task']}: completion {_fmt(t['completion'], 2)}, alarm rate {_fmt(t['alarm_rate'], 2)}",
            fontsize=9,
            pad=22,
        )
        fig.tight_layout()
        return fig

    def plot_png(self, t: dict[str, Any]) -> bytes:
        """Bar chart of one task's per-dialogue step coverage (red where an alarm was raised) with
        its FlowScore distances (needs matplotlib; :meth:`plot_figure`).

        Args:
            t: One task dict of :attr:`tasks`.

        Returns:
            The PNG image (80 dpi) as bytes.
        """
        import matplotlib.pyplot as plt

        fig = self.plot_figure(t)
        buf = io.BytesIO()
        try:
            fig.savefig(buf, format="png", dpi=80, bbox_inches="tight")  # the legend above the axes included
        finally:
            plt.close(fig)
        return buf.getvalue()

    def to_html(self) -> str:
        """The report as a self-contained HTML page (the Markdown content, plus each task's
        :meth:`plot_png` chart embedded as a data URI; needs matplotlib when a task has dialogues).

        Returns:
            The HTML text (all report text escaped).
        """
        e = html.escape
        parts = [
            "<!doctype html><html><head><meta charset='utf-8'>",
            f"<title>Agent audit: {e(self.model)}</title>",
            "<style>body{font-family:sans-serif;max-width:70em;margin:auto}td,th{padding:2px 8px}"
            "table{border-collapse:collapse}tr:nth-child(even){background:#f4f4f4}.flag{background:#fdd;"
            "font-weight:bold}.turn{margin:0;font-size:90%}</style></head><body>",
            f"<h1>Agent audit: {e(self.model)} at {e(self.agent)}</h1>",
            f"<p>Detector <code>{e(self.detector)}</code>. Higher completion and coverage are better; lower alarm "
            "rate, FlowKL and FlowScore distance are better.</p><table><tr><th>task</th>"
            + "".join(f"<th>{e(h)}</th>" for _, h in COLUMNS)
            + "</tr>",
        ]
        for t in self.tasks:
            parts.append(
                f"<tr><td>{e(t['task'])}</td>"
                + "".join(f"<td>{e(cell(t, k))}</td>" for k, _ in COLUMNS)
                + "</tr>"
            )
        parts.append("</table>")
        parts += [f"<p class='note'>{e(line)}</p>" for line in flowkl_notes(self.tasks)]
        for t in self.tasks:
            parts.append(f"<h2>{e(t['task'])}</h2>")
            if t["dialogue_rows"]:
                png = base64.b64encode(self.plot_png(t)).decode("ascii")
                parts.append(
                    f"<img alt='per-dialogue coverage and FlowScore of {e(t['task'])}' "
                    f"src='data:image/png;base64,{png}'>"
                )
            for f in t["failures"]:
                parts.append(f"<p>Failed: {e(f['dialogue_id'])}: {e(f['error'])}</p>")
            parts.append("<h3>Most deviant dialogues</h3>")
            for d in t["deviant"]:
                parts.append(
                    f"<h4>{e(d['dialogue_id'])} (FlowScore distance {e(_fmt(d['flowscore']))}, "
                    f"first alarm at system turn {e(_fmt(d['first_alarm']))})</h4>"
                )
                for i, turn in enumerate(d["turns"]):
                    cls = "turn flag" if i == d["flagged_position"] else "turn"
                    parts.append(f"<p class='{cls}'>{e(turn['speaker'])}: {e(turn['text'])}</p>")
        parts.append("</body></html>")
        return "\n".join(parts)

    def save(self, out: str | os.PathLike) -> dict[str, Path]:
        """Write ``report.json``, ``report.md`` and ``report.html`` into ``out``, each atomically.

        Args:
            out: An existing folder.

        Returns:
            The written paths by kind: ``{"json": ..., "md": ..., "html": ...}``.
        """
        from dialfork_dataset.jsonl import write_text_atomic

        out = Path(out)
        paths = {"json": out / "report.json", "md": out / "report.md", "html": out / "report.html"}
        write_text_atomic(paths["json"], self.to_json())
        write_text_atomic(paths["md"], self.to_markdown())
        write_text_atomic(paths["html"], self.to_html())
        return paths
