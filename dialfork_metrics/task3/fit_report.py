"""What a fitted Task 3 detector expects of itself: its false-alarm rate on conformant dialogues and
how many dialogues that estimate rests on (what ``guard fit``, :meth:`Monitor.fit
<dialfork_metrics.guard.Monitor.fit>` and ``task3 predict`` print, warning above
:data:`WARN_RATE`).

>>> class Fitted:  # a streaming detector's fitted figures
...     train_false_alarm_rate_ = 0.5; n_train_ = 6
>>> expected_false_alarms(Fitted())
{None: {'rate': 0.5, 'n': 6, 'how': 'conformant fit dialogues that alarm'}}
>>> fit_report_lines(Fitted())[0]
'expected false-alarm rate 50.0% (3 of 6 conformant fit dialogues that alarm)'
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

#: Above this expected false-alarm rate a fit is warned about: one conformant conversation in ten
#: would alarm.
WARN_RATE = 0.10


def expected_false_alarms(det: Any, tasks: Iterable[str] | None = None) -> dict[str | None, dict[str, Any]]:
    """The fit's own estimate of its false-alarm rate, per task.

    A workflow-aware detector reads its ``operating_point_`` (cross-fitted, in-sample, or on
    pseudo-dialogues of the workflow's phrasings when fitted on the workflow alone); an IT/SS
    detector its ``train_false_alarm_rate_`` over ``n_train_`` dialogues.

    Args:
        det: A fitted detector.
        tasks: Only these tasks (workflow-aware detectors); None: every fitted one.

    Returns:
        dict: task (None: the whole fit) -> ``{"rate", "n", "how"}`` (``rate`` None: no estimate);
        empty when the detector reports none.
    """
    point = getattr(det, "operating_point_", None)
    if isinstance(point, dict) and point:
        keep = None if tasks is None else set(tasks)
        out: dict[str | None, dict[str, Any]] = {}
        for t, p in point.items():
            if keep is not None and t not in keep:
                continue
            kind = getattr(det, "fit_kind_", None)
            how = (
                "pseudo-dialogues of the workflow's own phrasings that alarm (no dialogues were given)"
                if kind == "workflow"
                else "conformant fit dialogues that alarm"
                + (
                    " (cross-fitted)"
                    if kind == "cross_fit"
                    else " (in sample)"
                    if kind == "in_sample"
                    else ""
                )
            )
            out[t] = {"rate": p.get("expected_false_alarm_rate"), "n": int(p.get("n") or 0), "how": how}
        return out
    rate = getattr(det, "train_false_alarm_rate_", None)
    if rate is None:
        return {}
    return {
        None: {
            "rate": float(rate),
            "n": int(getattr(det, "n_train_", 0) or 0),
            "how": "conformant fit dialogues that alarm",
        }
    }


def fit_report_lines(det: Any, tasks: Iterable[str] | None = None) -> list[str]:
    """One line per task: the expected false-alarm rate and what it rests on; a line above
    :data:`WARN_RATE` ends with a warning and what to do.

    Args:
        det: A fitted detector.
        tasks: Only these tasks; None: every fitted one.

    Returns:
        list[str]: The lines (empty when the detector reports no estimate).
    """
    lines = []
    for t, e in expected_false_alarms(det, tasks).items():
        who = f"task {t!r}: " if t is not None else ""
        if e["rate"] is None:
            lines.append(f"{who}no estimate of the false-alarm rate ({e['n']} {e['how']})")
            continue
        k = round(e["rate"] * e["n"])
        line = f"{who}expected false-alarm rate {100 * e['rate']:.1f}% ({k} of {e['n']} {e['how']})"
        if e["rate"] > WARN_RATE:
            line += (
                f"; WARNING: above {100 * WARN_RATE:.0f}%: about one conformant conversation in "
                f"{max(1, round(1 / e['rate']))} would alarm; fit on more conformant dialogues, or check the "
                "alarms they raise (task3 predict's report names each one's rule)"
            )
        lines.append(line)
    return lines


def too_high(det: Any, tasks: Iterable[str] | None = None) -> bool:
    """Whether any task's expected false-alarm rate is above :data:`WARN_RATE`.

    Args:
        det: A fitted detector.
        tasks: Only these tasks; None: every fitted one.

    Returns:
        bool: True when one is.
    """
    return any(
        e["rate"] is not None and e["rate"] > WARN_RATE for e in expected_false_alarms(det, tasks).values()
    )


__all__ = ["WARN_RATE", "expected_false_alarms", "fit_report_lines", "too_high"]
