"""Step coverage: which steps of a task's happy path a dialogue said, skipped, repeated or reordered.

Read off the step each agent turn was mapped to (the node assigner, :mod:`.nodes`) and, where given,
the steps the dialogue state says were done (:func:`~.state.run_state`). The agent audit reports it
(:mod:`dialfork_metrics.audit.report`) and the check of generated conformant dialogues requires it
(:mod:`.conformance`); ours, documented in docs/audit.md.
"""

from __future__ import annotations

from typing import Any


def step_coverage(steps: list[str | None], model: Any, done: Any = None) -> dict[str, Any]:
    """Step coverage of one dialogue against the task's happy path (ours, documented in docs/audit.md).

    ``required``: the happy path's content steps (no greeting, "anything else", goodbye);
    ``visited``/``skipped``: required steps the agent did / did not say; ``repeated``: agent turns
    saying a content step already said, except what the workflow itself makes the agent say again:
    an immediate re-ask (the same step as the agent's previous turn: a clarification after a reply
    that did not answer), a step of a loop the workflow took (after a step with a branch back to an
    earlier step, e.g. a booking the user rejected sends the agent back to its first question: the
    steps from that question to the rejected one may be said again) and STAR's own loop steps;
    ``out_of_order``: descents in the happy-path order of the first visits; ``off_workflow``: turns
    mapped to no step; ``coverage``: visited / required.

    Args:
        steps: The workflow step of each agent turn, in order (None: off-workflow), as
            :attr:`TemplateUser.steps`.
        model: The task's workflow model (``TemplateBackend.model(task)``).
        done: The steps the dialogue state says were done (a question answered, an outcome said
            once the slots it requires were filled: :func:`~dialfork_metrics.task3.workflow.state.run_state`);
            a step said but not done counts as skipped. None: every step said counts.

    Returns:
        A dict with ``required`` (int), ``visited`` (int), ``skipped`` (list of step names, in
        happy-path order), ``repeated`` (int), ``out_of_order`` (int), ``off_workflow`` (int),
        ``coverage`` (float in [0, 1]; 1.0 when nothing is required) and ``reached_outcome``
        (bool: the workflow's outcome step was said).
    """
    from generation.api import GENERIC_NODES

    skip = {model.start, model.anything_else, model.bye, *GENERIC_NODES}
    required = [n for n in dict.fromkeys(model.happy_trace) if n not in skip and "bye" not in n]
    order = {n: i for i, n in enumerate(required)}
    seen: set[str] = set()
    firsts: list[str] = []
    repeated = 0
    backs = _loop_backs(model)
    last: dict[str, int] = {}  # step -> index of its latest turn
    prev: str | None = None
    for i, n in enumerate(steps):
        if n is None or n in skip or "bye" in n:
            prev = n
            continue
        if n in seen:
            looped = any(
                last.get(p, -1) >= last[n] and n in body for p, body in backs.items()
            )  # a loop-back step was said since n was (or n is one): the workflow went round its loop
            if n != prev and not looped and n not in model.loops and n not in model.is_search_more:
                repeated += 1
        else:
            seen.add(n)
            if n in order:
                firsts.append(n)
        last[n] = i
        prev = n
    if done is not None:
        seen &= set(done) | {n for n in seen if n not in order}
    visited = [n for n in required if n in seen]
    out_of_order = sum(1 for a, b in zip(firsts, firsts[1:]) if order[b] < order[a])
    return {
        "required": len(required),
        "visited": len(visited),
        "skipped": [n for n in required if n not in seen],
        "repeated": repeated,
        "out_of_order": out_of_order,
        "off_workflow": sum(1 for n in steps if n is None),
        "coverage": len(visited) / len(required) if required else 1.0,
        "reached_outcome": model.outcome is not None and model.outcome in seen,
    }


def _loop_backs(model: Any) -> dict[str, set[str]]:
    """``{step: loop body}`` of the workflow's backward branches: a step whose branch leads (through
    queries and branches) back to an earlier step of the happy path, and the happy-path steps from that
    earlier step to it (doctor_schedule: ``doctor_inform_booking_available``, whose ``no`` goes back to
    ``doctor_ask_doctor_name``, has the body from that question to the offer)."""
    trace = list(dict.fromkeys(model.happy_trace))
    pos = {n: i for i, n in enumerate(trace)}
    kinds = getattr(model, "kinds", None) or {}
    graph = getattr(model, "graph", None) or {}
    out: dict[str, set[str]] = {}
    for p, branches in (getattr(model, "children", None) or {}).items():
        if p not in pos:
            continue
        for b in branches:
            t, hops = graph.get(b), 0
            while t is not None and kinds.get(t) in ("query", "branch") and hops < 20:
                t, hops = graph.get(t), hops + 1
            if t in pos and pos[t] <= pos[p]:
                out.setdefault(p, set()).update(trace[pos[t] : pos[p] + 1])
    return out
