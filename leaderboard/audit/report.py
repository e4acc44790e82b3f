"""The audit's thresholds and its outcome (:class:`AttackResult`, :class:`AuditReport`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger("leaderboard.audit")



#: A cheat fails the audit when it beats Random by more than this many Score points (SPEC 4).
DETECTOR_MARGIN = 5.0
#: A metric-track cheat fails the audit above this Kendall tau (SPEC 4).
METRIC_TAU_MAX = 0.8
#: Random draws averaged for Random, for every cheat's fallback and its matched Random (400: a
#: p-value below ALPHA survives a few lucky matched draws).
RANDOM_DRAWS = 400
#: A detector cheat fails only when its margin is also unlikely under its matched Random.
ALPHA = 0.01
#: Public seeds tried by the regeneration attack.
DEFAULT_REGEN_SEEDS = tuple(range(10))
#: Scenarios per task the regeneration attack runs (the first ones by STAR id, as a plan picks them).
DEFAULT_REGEN_SCENARIOS_PER_TASK = 64
BLIND = "blind"
PAIRS = "blind_task2"


# --------------------------------------------------------------------------- report


@dataclass
class AttackResult:
    """The outcome of one attack on one track.

    Attributes:
        name: The attack's name (e.g. ``"verbatim lookup (public configs)"``).
        track: ``"detector"`` or ``"metric"``.
        value: The cheat's Score (detector, 0-100) or Kendall tau (metric); None when skipped.
        detail: What the attack found (e.g. how many blind dialogues it could label).
        status: ``"pass"``, ``"FAIL"`` or ``"skipped"``.
        margin: Detector track: ``value`` minus its matched Random's mean Score; None otherwise.
        control: Detector track: the matched Random's mean Score; None otherwise.
        p_value: Detector track: share of matched Random draws scoring at least ``value``
            (add-one estimate); None otherwise.
    """

    name: str
    track: str  # "detector" | "metric"
    value: float | None  # Score (detector) or tau (metric); None when skipped
    detail: str = ""
    status: str = "pass"  # "pass" | "FAIL" | "skipped"
    margin: float | None = None  # detector: value - matched Random
    control: float | None = None  # detector: the matched Random's mean Score
    p_value: float | None = None  # detector: share of matched draws scoring >= value

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON.

        Returns:
            ``name``, ``track``, ``value``, ``matched_random`` (``control``), ``margin``,
            ``p_value``, ``status`` and ``detail``.
        """
        return {"name": self.name, "track": self.track, "value": self.value, "matched_random": self.control,
                "margin": self.margin, "p_value": self.p_value, "status": self.status, "detail": self.detail}


@dataclass
class AuditReport:
    """The audit of one release: the baselines and every attack's result.

    Attributes:
        baselines: ``{"detector": {"random", "first", "last"}, "metric": {"random"}}``: the
            trivial baselines' Scores and tau (None when the track was not scored).
        attacks: One :class:`AttackResult` per attack and track.
        notes: Remarks on the release (e.g. a template-made hidden set, prefix modes not tried).
        counts: ``blind`` (blind dialogues), ``pairs`` (metric-track pairs) and ``public_rows``.
    """

    baselines: dict[str, dict[str, float | None]]
    attacks: list[AttackResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when no attack has status ``"FAIL"``."""
        return all(a.status != "FAIL" for a in self.attacks)

    def worst(self) -> str:
        """The failing attacks in one line.

        Returns:
            ``"name: Score x; ..."`` (``tau`` for the metric track) over the failed attacks, or
            ``"no cheat beats the thresholds"``.
        """
        fails = [a for a in self.attacks if a.status == "FAIL"]
        if not fails:
            return "no cheat beats the thresholds"
        return "; ".join(f"{a.name}: {'Score' if a.track == 'detector' else 'tau'} {a.value:.3g}" for a in fails)

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON (what ``audit --json`` writes).

        Returns:
            ``ok``, ``thresholds`` (``detector_margin``, ``alpha``, ``metric_tau_max``),
            ``baselines``, ``attacks`` (each :meth:`AttackResult.to_dict`), ``notes`` and
            ``counts``.
        """
        return {"ok": self.ok, "thresholds": {"detector_margin": DETECTOR_MARGIN, "alpha": ALPHA,
                                              "metric_tau_max": METRIC_TAU_MAX},
                "baselines": self.baselines, "attacks": [a.to_dict() for a in self.attacks], "notes": self.notes,
                "counts": self.counts}

    def format_text(self) -> str:
        """The report as a text table for a terminal.

        Returns:
            A header with the counts, one row per attack (cheat, matched Random, Random,
            always-first, always-last, verdict) with its detail, the notes, and a final
            ``verdict: PASS`` or ``FAIL`` line.
        """
        b = self.baselines
        d, m = b.get("detector", {}), b.get("metric", {})

        def f(v, nd=2):
            return "-" if v is None else f"{v:.{nd}f}"

        lines = [f"leaderboard audit: {self.counts.get('blind', 0)} blind dialogues, {self.counts.get('pairs', 0)} "
                 f"metric-track pairs, {self.counts.get('public_rows', 0)} public rows",
                 f"{'attack':<42} {'track':<8} {'cheat':>7} {'matched':>7} {'Random':>7} {'first':>6} {'last':>6}  "
                 "verdict"]
        for a in self.attacks:
            if a.track == "detector":
                row = (f(a.value), f(a.control), f(d.get("random")), f(d.get("first")), f(d.get("last")))
                if a.status == "FAIL":
                    verdict = (f"FAIL: beats its matched Random by {a.margin:+.2f} > {DETECTOR_MARGIN:g} Score points "
                               f"(p={a.p_value:.3f})")
                elif a.status == "skipped":
                    verdict = "skipped"
                else:
                    verdict = f"pass ({a.margin:+.2f}, p={a.p_value:.2f})" if a.margin is not None else "pass"
            else:
                row = (f(a.value, 3), "-", f(m.get("random"), 3), "-", "-")
                if a.status == "FAIL":
                    verdict = f"FAIL: tau {a.value:.3f} > {METRIC_TAU_MAX:g}"
                else:
                    verdict = "skipped" if a.status == "skipped" else f"pass (tau <= {METRIC_TAU_MAX:g})"
            lines.append(f"{a.name:<42} {a.track:<8} {row[0]:>7} {row[1]:>7} {row[2]:>7} {row[3]:>6} {row[4]:>6}  "
                         f"{verdict}")
            if a.detail:
                lines.append(f"{'':<4}{a.detail}")
        lines += [f"note: {n}" for n in self.notes]
        lines.append("verdict: " + ("PASS" if self.ok else "FAIL") + f" ({self.worst()})")
        return "\n".join(lines)


