"""The audit's thresholds and its outcome (:class:`AttackResult`, :class:`AuditReport`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger("leaderboard.leakcheck")


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
#: The supervised text classifier's name: reported as the public-data ceiling, never a verdict.
CEILING = "public-data ceiling (TF-IDF + LR)"
#: What the audit says, in plain words, about a hidden set made by the template simulator.
PLUMBING_ONLY_TEXT = (
    "A template-generated hidden set is for plumbing only: simulator-aware attacks built from the "
    "public code solve it, so its scores do not rank detectors. The official hidden set comes from "
    "an LLM backend."
)


# --------------------------------------------------------------------------- report


@dataclass
class AttackResult:
    """The outcome of one attack on one track.

    Attributes:
        name: The attack's name (e.g. ``"verbatim lookup (public configs)"``).
        track: ``"detector"`` or ``"metric"``.
        value: The cheat's Score (detector, 0-100) or Kendall tau (metric); None when skipped.
        detail: What the attack found (e.g. how many blind dialogues it could label).
        status: ``"pass"``, ``"FAIL"``, ``"skipped"`` or ``"reported"`` (a figure printed for
            comparison, never a verdict: the public-data ceiling, an honest detector).
        margin: Detector track: ``value`` minus its matched Random's mean Score; None otherwise.
        control: Detector track: the matched Random's mean Score; None otherwise.
        p_value: Detector track: share of matched Random draws scoring at least ``value``
            (add-one estimate); None otherwise.
        simulator_aware: The attack exploits how the hidden set was generated (the template
            simulator's phrasings, pools, grammar or lengths), not how it was split: a
            plumbing-only release (:attr:`AuditReport.plumbing_only`) records its failure without
            failing.
        waived: A failure recorded but not counted, because the release is plumbing only.
    """

    name: str
    track: str  # "detector" | "metric"
    value: float | None  # Score (detector) or tau (metric); None when skipped
    detail: str = ""
    status: str = "pass"  # "pass" | "FAIL" | "skipped" | "reported"
    margin: float | None = None  # detector: value - matched Random
    control: float | None = None  # detector: the matched Random's mean Score
    p_value: float | None = None  # detector: share of matched draws scoring >= value
    simulator_aware: bool = False
    waived: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON.

        Returns:
            ``name``, ``track``, ``value``, ``matched_random`` (``control``), ``margin``,
            ``p_value``, ``status``, ``simulator_aware``, ``waived`` and ``detail``.
        """
        return {
            "name": self.name,
            "track": self.track,
            "value": self.value,
            "matched_random": self.control,
            "margin": self.margin,
            "p_value": self.p_value,
            "status": self.status,
            "simulator_aware": self.simulator_aware,
            "waived": self.waived,
            "detail": self.detail,
        }


@dataclass
class AuditReport:
    """The audit of one release: the baselines and every attack's result.

    Attributes:
        baselines: ``{"detector": {"random", "first", "last"}, "metric": {"random"}}``: the
            trivial baselines' Scores and tau (None when the track was not scored).
        attacks: One :class:`AttackResult` per attack and track.
        notes: Remarks on the release (e.g. a template-made hidden set, prefix modes not tried).
        counts: ``blind`` (blind dialogues), ``pairs`` (metric-track pairs) and ``public_rows``.
        honest: Honest detectors' predictions on the blind set, scored for comparison (status
            ``"reported"``).
        generators: The hidden set's generators (the gold manifest's), e.g. ``["template"]``.
        plumbing_only: The release was declared plumbing only (a template hidden set for demos and
            tests): failures of simulator-aware attacks are waived, and said.
    """

    baselines: dict[str, dict[str, float | None]]
    attacks: list[AttackResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    honest: list[AttackResult] = field(default_factory=list)
    generators: list[str] = field(default_factory=list)
    plumbing_only: bool = False

    @property
    def ok(self) -> bool:
        """True when no attack has status ``"FAIL"`` (waived failures of a plumbing-only release
        aside)."""
        return all(a.status != "FAIL" or a.waived for a in self.attacks)

    @property
    def template_hidden(self) -> bool:
        """True when the hidden set was made by the template simulator (or its generator is not
        recorded)."""
        return not self.generators or "template" in self.generators

    def ceiling(self) -> AttackResult | None:
        """The public-data ceiling (the supervised classifier's detector-track result), if run.

        Returns:
            The first detector-track attack named as the ceiling that has a value, or None.
        """
        return next(
            (a for a in self.attacks if a.track == "detector" and a.name == CEILING and a.value is not None),
            None,
        )

    def best_honest(self) -> AttackResult | None:
        """The honest detector with the best Score, if any was given.

        Returns:
            The honest result with the highest ``value``, or None when none has a value.
        """
        scored = [h for h in self.honest if h.value is not None]
        return max(scored, key=lambda h: h.value) if scored else None

    def verdict(self) -> str:
        """The verdict in plain words (the card and the leaderboard page print it).

        Returns:
            One or more sentences: whether the release passes, which attack fails (or was waived,
            for a plumbing-only release), and, for a template-generated hidden set, that it is for
            plumbing only.
        """
        waived = [a for a in self.attacks if a.waived]
        if not self.ok:
            out = f"FAIL: {self.worst()}; a release with this hidden set is not published."
        elif waived:
            out = (
                "PASS FOR PLUMBING ONLY: simulator-aware attacks solve this hidden set ("
                + "; ".join(_short(a) for a in waived)
                + ")."
            )
        else:
            out = (
                f"PASS: no attack beats its matched Random by more than {DETECTOR_MARGIN:g} Score points "
                f"(p < {ALPHA:g}) or reaches a metric-track tau above {METRIC_TAU_MAX:g}."
            )
        if self.template_hidden or waived:
            out += " " + PLUMBING_ONLY_TEXT
        return out

    def worst(self) -> str:
        """The failing attacks in one line.

        Returns:
            ``"name: Score x; ..."`` (``tau`` for the metric track) over the failed attacks, or
            ``"no cheat beats the thresholds"``.
        """
        fails = [a for a in self.attacks if a.status == "FAIL" and not a.waived]
        if not fails:
            n = sum(a.waived for a in self.attacks)
            return "no cheat beats the thresholds" + (
                f" ({n} simulator-aware failure(s) waived: plumbing only)" if n else ""
            )
        return "; ".join(_short(a) for a in fails)

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON (what ``audit --json`` writes).

        Returns:
            ``ok``, ``thresholds`` (``detector_margin``, ``alpha``, ``metric_tau_max``),
            ``baselines``, ``attacks`` (each :meth:`AttackResult.to_dict`), ``notes``,
            ``counts``, ``honest`` (each an :meth:`AttackResult.to_dict`), ``generators``,
            ``plumbing_only`` and ``verdict`` (:meth:`verdict`).
        """
        return {
            "ok": self.ok,
            "thresholds": {
                "detector_margin": DETECTOR_MARGIN,
                "alpha": ALPHA,
                "metric_tau_max": METRIC_TAU_MAX,
            },
            "baselines": self.baselines,
            "attacks": [a.to_dict() for a in self.attacks],
            "notes": self.notes,
            "counts": self.counts,
            "honest": [h.to_dict() for h in self.honest],
            "generators": self.generators,
            "plumbing_only": self.plumbing_only,
            "verdict": self.verdict(),
        }

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

        lines = [
            f"leaderboard audit: {self.counts.get('blind', 0)} blind dialogues, {self.counts.get('pairs', 0)} "
            f"metric-track pairs, {self.counts.get('public_rows', 0)} public rows",
            f"{'attack':<42} {'track':<8} {'cheat':>7} {'matched':>7} {'Random':>7} {'first':>6} {'last':>6}  "
            "verdict",
        ]
        for a in [*self.attacks, *self.honest]:
            if a.track == "detector":
                row = (f(a.value), f(a.control), f(d.get("random")), f(d.get("first")), f(d.get("last")))
                if a.status == "FAIL":
                    verdict = (
                        f"FAIL: beats its matched Random by {a.margin:+.2f} > {DETECTOR_MARGIN:g} Score points "
                        f"(p={a.p_value:.3f})"
                    )
                elif a.status in ("skipped", "reported"):
                    verdict = a.status
                else:
                    verdict = f"pass ({a.margin:+.2f}, p={a.p_value:.2f})" if a.margin is not None else "pass"
            else:
                row = (f(a.value, 3), "-", f(m.get("random"), 3), "-", "-")
                if a.status == "FAIL":
                    verdict = f"FAIL: tau {a.value:.3f} > {METRIC_TAU_MAX:g}"
                elif a.status in ("skipped", "reported"):
                    verdict = a.status
                else:
                    verdict = f"pass (tau <= {METRIC_TAU_MAX:g})"
            if a.waived:
                verdict += " [waived: plumbing-only release]"
            lines.append(
                f"{a.name:<42} {a.track:<8} {row[0]:>7} {row[1]:>7} {row[2]:>7} {row[3]:>6} {row[4]:>6}  "
                f"{verdict}"
            )
            if a.detail:
                lines.append(f"{'':<4}{a.detail}")
        ceil, hon = self.ceiling(), self.best_honest()
        if ceil is not None:
            lines.append(
                f"public-data ceiling (reported, not a verdict): Score {ceil.value:.2f} "
                f"(matched Random {f(ceil.control)})"
                + (f"; best {hon.name}: Score {hon.value:.2f}" if hon is not None else "")
            )
        lines += [f"note: {n}" for n in self.notes]
        lines.append("verdict: " + ("PASS" if self.ok else "FAIL") + f" ({self.worst()})")
        lines.append(self.verdict())
        return "\n".join(lines)


def _short(a: AttackResult) -> str:
    """``"name: Score x (matched Random y)"`` or ``"name: tau x"``."""
    if a.track == "detector":
        ctl = f" (matched Random {a.control:.1f})" if a.control is not None else ""
        return f"{a.name}: Score {a.value:.3g}{ctl}"
    return f"{a.name}: tau {a.value:.3g}"
