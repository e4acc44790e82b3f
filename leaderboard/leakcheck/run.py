"""``run_audit``: every attack on a staged release, scored against the gold."""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .attacks import (
    correlation_attacks,
    lookup_attack,
    pair_diff_distances,
    regenerate,
    sibling_attack,
)
from .cheater import honest_results, simulator_attacks
from .report import (
    ALPHA,
    BLIND,
    DEFAULT_REGEN_SCENARIOS_PER_TASK,
    DEFAULT_REGEN_SEEDS,
    PAIRS,
    RANDOM_DRAWS,
    AttackResult,
    AuditReport,
)
from .scoring import _Detector, _Metric, _metric_result, _read_config, read_public_configs

logger = logging.getLogger("leaderboard.leakcheck")


# --------------------------------------------------------------------------- the audit


def run_audit(
    hub: str | os.PathLike,
    gold_dir: str | os.PathLike,
    *,
    star: str | os.PathLike | None = None,
    regen_seeds: Sequence[int] = DEFAULT_REGEN_SEEDS,
    regen_scenarios_per_task: int = DEFAULT_REGEN_SCENARIOS_PER_TASK,
    draws: int = RANDOM_DRAWS,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
    plumbing_only: bool = False,
    honest: Mapping[str, Mapping[str, int | None]] | None = None,
) -> AuditReport:
    """Run every attack on the layout ``hub`` and score it against ``gold_dir`` (see the module doc).

    The simulator-aware attacks (:mod:`.cheater`) run on whatever the blind set holds: to audit an
    LLM-generated hidden set, export it (``export_hub_layout(public, hub, gold, hidden=...)``) and
    call this on the result, or use :func:`audit_corpora`.

    Args:
        hub: The staged Hub layout (``data/blind``, optional ``data/blind_task2``, the public
            configs).
        gold_dir: The gold folder of the same export.
        star: The STAR folder for the regeneration attack (skipped without it, or with no seeds).
        regen_seeds: Generator seeds the regeneration attack tries (the public defaults 0..9).
        regen_scenarios_per_task: Scenarios per task the regeneration attack runs.
        draws: Random draws for Random, every cheat's fallback and its matched Random (at least
            ``1 / ALPHA``).
        seed: Seed of the Random draws.
        progress: Called with a short message as each attack starts; None logs them.
        plumbing_only: The release is declared plumbing only (a template hidden set for demos and
            tests): failures of the simulator-aware attacks are recorded as waived and the verdict
            says, in plain words, that the hidden set's scores do not rank detectors.
        honest: ``{name: {dialogue_id: turn or None}}``: honest detectors' predictions on the blind
            set, scored next to the attacks (reported, never a verdict).

    Returns:
        The :class:`AuditReport`: baselines, every attack's result, notes and counts;
        ``report.ok`` is False when a cheat fails the thresholds.

    Raises:
        ValueError: ``draws`` is below ``1 / ALPHA``.
        FileNotFoundError: ``hub`` has no blind parquet files, or ``gold_dir`` is not a gold
            folder.
    """
    from dialfork_dataset.hub import load_gold

    if draws < round(1 / ALPHA):
        raise ValueError(
            f"draws must be at least {round(1 / ALPHA)} (a p-value below {ALPHA} needs that many "
            f"matched draws), got {draws}"
        )
    hub, gold_dir = Path(hub), Path(gold_dir)
    say = progress or (lambda m: logger.info("audit: %s", m))
    blind = _read_config(hub / "data" / BLIND)
    if not blind:
        raise FileNotFoundError(f"{hub}/data/{BLIND}: no parquet files; HUB must be a DialFork Hub layout")
    pairs = _read_config(hub / "data" / PAIRS) if (hub / "data" / PAIRS).is_dir() else []
    if pairs and "candidate" not in pairs[0]:  # older layouts: pairs reference blind ids
        by_id = {b["dialogue_id"]: b["turns"] for b in blind}
        pairs = [
            {**p, "reference": by_id[p["reference_id"]], "candidate": by_id[p["candidate_id"]]} for p in pairs
        ]
    public = read_public_configs(hub)
    gold = load_gold(gold_dir)
    det = _Detector(gold["task3"], draws, seed)
    met = _Metric(gold["task2"], draws, seed) if gold["task2"] and pairs else None
    from dialfork_metrics.task3.scorer import score_predictions

    first = score_predictions({i: 1 for i in det.ids}, det.gold)["score"]
    last = score_predictions({i: int(t) for i, t in zip(det.ids, det.T)}, det.gold)["score"]
    random_score = det.random()
    report = AuditReport(
        baselines={
            "detector": {"random": random_score, "first": first, "last": last},
            "metric": {"random": met.random() if met else None},
        },
        counts={
            "blind": len(blind),
            "pairs": len(pairs),
            "public_rows": sum(len(v) for v in public.values()),
        },
    )
    labelled = [r for rows in public.values() for r in rows]
    hidden = gold["manifest"].get("hidden") or {}
    report.generators = list(hidden.get("generators") or [])
    report.plumbing_only = bool(plumbing_only)
    regen: list[dict[str, Any]] = []
    say("verbatim lookup")
    report.attacks += lookup_attack(
        "verbatim lookup (public configs)",
        labelled,
        blind,
        pairs,
        det,
        met,
        f"{len(public)} public config(s)",
    )
    say("sibling grouping")
    report.attacks.append(sibling_attack(blind, det))
    tasks = sorted({r["task"] for r in labelled if r.get("task")})
    if star is None or not list(regen_seeds) or not tasks:
        why = "no STAR folder given" if star is None else "no public task" if not tasks else "no seeds"
        for track in ("detector", "metric"):
            report.attacks.append(
                AttackResult(
                    "regeneration (public code, public seeds)", track, None, f"not run: {why}", "skipped"
                )
            )
    else:
        # the modes of the public forks, plus the hidden set's (the card states them), plus the default
        hidden_modes = set((gold["manifest"].get("hidden") or {}).get("prefix_modes") or ())
        modes = sorted(
            {r.get("prefix_mode") for r in labelled if r.get("prefix_mode")} | hidden_modes | {"replay"}
        )
        say(f"regeneration: {len(regen_seeds)} seed(s) x {len(modes)} prefix mode(s) x {len(tasks)} task(s)")
        with tempfile.TemporaryDirectory(prefix="dialfork-audit-") as tmp:
            regen, notes = regenerate(
                star, tasks, list(regen_seeds), modes, regen_scenarios_per_task, Path(tmp)
            )
        report.notes += notes
        seeds_txt = (
            f"seeds {min(regen_seeds)}-{max(regen_seeds)}"
            if len(regen_seeds) > 1
            else f"seed {regen_seeds[0]}"
        )
        report.attacks += lookup_attack(
            "regeneration (public code, public seeds)",
            regen,
            blind,
            pairs,
            det,
            met,
            f"{len(regen):,} regenerated dialogues ({seeds_txt}, "
            f"first {regen_scenarios_per_task} scenarios per task)",
        )
    if met is not None:
        say("pair diffing")
        best = max(((name, met.tau(d)) for name, d in pair_diff_distances(pairs).items()), key=lambda x: x[1])
        report.attacks.append(_metric_result("pair diffing (metric track)", best[1], f"best: -{best[0]}"))
    say("correlations")
    report.attacks += correlation_attacks(blind, gold["task3"], pairs, det, met)
    # after the older attacks: their matched Random draws come first from the shared stream, as before
    extra, notes = simulator_attacks(blind, pairs, public, det, met, star=star, regen=regen, say=say)
    report.attacks += extra
    report.notes += notes
    if honest:
        report.honest = honest_results(honest, det)
    if plumbing_only:
        for a in report.attacks:
            a.waived = a.simulator_aware and a.status == "FAIL"
    if "template" in (hidden.get("generators") or []) or not hidden:
        report.notes.append(
            "the hidden set was made by the template simulator (or its generator is not recorded): "
            "anyone running the simulator as an oracle can reproduce its kind of dialogues; fine for "
            "demos and tests, an official hidden set comes from an LLM backend"
        )
    if not hidden:
        report.notes.append(
            "the gold manifest has no 'hidden' section: this layout predates the hidden split"
        )
    return report


def audit_corpora(
    public: str | os.PathLike | Sequence[Mapping[str, Any]],
    hidden: str | os.PathLike | Sequence[Mapping[str, Any]],
    *,
    key: str | os.PathLike | Any = None,
    blind_key: bytes | str | None = None,
    workdir: str | os.PathLike | None = None,
    export_options: Mapping[str, Any] | None = None,
    **options: Any,
) -> AuditReport:
    """Every attack on the release a public corpus and a hidden corpus make (template or LLM).

    The layout is exported without its audit into ``workdir`` (a temporary folder by default,
    removed afterwards), then :func:`run_audit` runs on it: the way to measure the attacks on an
    LLM-generated hidden set, e.g.
    ``audit_corpora("corpus", "secret/hidden_llm", key="secret/hidden_key.json", star=STAR)``.

    Args:
        public: The public corpus (folder, record file or records).
        hidden: The hidden corpus (made with the key's secret seed, any backend).
        key: The key file (or ``HiddenKey``) the hidden corpus was made with; exclusive with
            ``blind_key``.
        blind_key: A hex key instead (records without a secret seed, e.g. in tests).
        workdir: Where the layout and its gold are written (kept); None: a temporary folder.
        export_options: More keyword arguments of ``export_hub_layout`` (``metric_share``,
            ``conformant_share``, ``public_fraction``, ...).
        **options: Passed on to :func:`run_audit` (``star``, ``regen_seeds``,
            ``regen_scenarios_per_task``, ``draws``, ``seed``, ``plumbing_only``, ``honest``, ...).

    Returns:
        The :class:`AuditReport` of that release.

    Raises:
        ValueError: As :func:`dialfork_dataset.hub.export_hub_layout` (bad corpora or key) or
            :func:`run_audit`.
        FileNotFoundError: A corpus folder or the key file does not exist.
    """
    from dialfork_dataset.hub import export_hub_layout

    with tempfile.TemporaryDirectory(prefix="dialfork-audit-corpora-") as tmp:
        root = Path(workdir) if workdir is not None else Path(tmp)
        export_hub_layout(
            public,
            root / "hub",
            root / "gold",
            hidden=hidden,
            key=key,
            blind_key=blind_key,
            overwrite=True,
            **dict(export_options or {}),
        )
        return run_audit(root / "hub", root / "gold", **options)
