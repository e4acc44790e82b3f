"""``python -m leaderboard audit HUB --gold GOLD``: try the known cheats on a release (SPEC section 4).

A cheater holds every public file of the Hub layout and the public code. Each attack below builds
a submission from that alone, and the audit scores it against the gold, next to the trivial
baselines (Random, always-first, always-last):

* **verbatim lookup**: every blind dialogue (and every metric-track candidate) whose turn sequence
  occurs in a public config gets that config's label;
* **sibling grouping** (detector track): blind dialogues that share their opening are grouped;
  the group's medoid (most shared prefix) is called conformant, every other member is flagged at
  its first system turn that differs from the medoid;
* **regeneration**: the template simulator of the public code is run with the public seeds
  (0..9 by default) over the first scenarios of each public task; a blind dialogue found there
  gets the regenerated label;
* **pair diffing** (metric track): the distance of a pair is minus the shared prefix of the two
  transcripts (in system turns), or minus the number of identical turns;
* **correlations** of ids, row order and lengths with the labels: a binned predictor on each
  feature, cross-fitted on the gold (5 folds), for the detector track; the feature itself (either
  sign) as the distance, for the metric track.

Where an attack learns nothing about a dialogue it falls back on Random's prediction. The Score is
a weighted geometric mean with a floor, so abstaining alone moves it a lot: Random flags every
conformant dialogue (a4 = 1 - cov_c = 0, floored to 1e-12) and scores about 1, while a coin that
abstains half of the time scores about 45 without knowing anything. A cheat is therefore compared
with its **matched Random**: the same predictions (abstentions and relative turn positions) dealt
to randomly chosen blind dialogues, over :data:`RANDOM_DRAWS` draws. The margin (cheat minus its
matched Random) is what the attack learned, and its p-value (share of matched draws that do as
well) tells luck from leak on small blind sets. The audit fails when a cheat beats its matched
Random by more than :data:`DETECTOR_MARGIN` Score points with p < :data:`ALPHA`, or when a
metric-track cheat reaches a tau above :data:`METRIC_TAU_MAX`. Plain Random, always-first and
always-last are printed next to every cheat.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

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
    name: str
    track: str  # "detector" | "metric"
    value: float | None  # Score (detector) or tau (metric); None when skipped
    detail: str = ""
    status: str = "pass"  # "pass" | "FAIL" | "skipped"
    margin: float | None = None  # detector: value - matched Random
    control: float | None = None  # detector: the matched Random's mean Score
    p_value: float | None = None  # detector: share of matched draws scoring >= value

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "track": self.track, "value": self.value, "matched_random": self.control,
                "margin": self.margin, "p_value": self.p_value, "status": self.status, "detail": self.detail}


@dataclass
class AuditReport:
    baselines: dict[str, dict[str, float | None]]
    attacks: list[AttackResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(a.status != "FAIL" for a in self.attacks)

    def worst(self) -> str:
        fails = [a for a in self.attacks if a.status == "FAIL"]
        if not fails:
            return "no cheat beats the thresholds"
        return "; ".join(f"{a.name}: {'Score' if a.track == 'detector' else 'tau'} {a.value:.3g}" for a in fails)

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "thresholds": {"detector_margin": DETECTOR_MARGIN, "alpha": ALPHA,
                                              "metric_tau_max": METRIC_TAU_MAX},
                "baselines": self.baselines, "attacks": [a.to_dict() for a in self.attacks], "notes": self.notes,
                "counts": self.counts}

    def format_text(self) -> str:
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


# --------------------------------------------------------------------------- data


def _read_config(folder: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    rows: list[dict[str, Any]] = []
    for f in sorted(folder.glob("*.parquet")):
        rows.extend(pq.read_table(f).to_pylist())
    return rows


def read_public_configs(hub: Path) -> dict[str, list[dict[str, Any]]]:
    """Every labelled config of the layout (all folders under ``data/`` but the blind ones)."""
    out = {}
    data = hub / "data"
    for d in sorted(p for p in data.iterdir() if p.is_dir()) if data.is_dir() else []:
        if d.name in (BLIND, PAIRS):
            continue
        out[d.name] = _read_config(d)
    return out


def turns_key(turns: Sequence[Mapping[str, Any]]) -> str:
    from dialfork_dataset.hidden import turns_hash

    return turns_hash(turns)


def system_prefix_keys(turns: Sequence[Mapping[str, Any]]) -> list[str]:
    """``keys[s-1]``: a hash of the turns up to and including system turn ``s`` (s = 1..T)."""
    h = hashlib.sha256()
    out = []
    for t in turns:
        h.update(f"{t['speaker']}\x1f{t['text']}\x1e".encode())
        if t["speaker"] == "system":
            out.append(h.copy().hexdigest()[:16])
    return out


def common_prefix(a: Sequence[str], b: Sequence[str]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


# --------------------------------------------------------------------------- scoring


class _Detector:
    """Scores detector-track predictions on the whole blind set, Random-averaged."""

    def __init__(self, gold3: Sequence[Mapping[str, Any]], draws: int, seed: int):
        self.gold = [dict(g) for g in gold3]
        self.ids = [g["dialogue_id"] for g in self.gold]
        self.T = np.array([int(g["num_system_turns"]) for g in self.gold])
        rng = np.random.default_rng(seed)
        self.draws = [rng.integers(1, self.T + 1) for _ in range(draws)]
        self.rng = np.random.default_rng(seed + 7)

    def score(self, preds: Mapping[str, int | None]) -> float:
        from dialfork_metrics.task3.scorer import score_predictions

        s = score_predictions(dict(preds), self.gold)["score"]
        return float("nan") if s is None else float(s)

    def random(self) -> float:
        return float(np.mean([self.score(dict(zip(self.ids, map(int, d)))) for d in self.draws]))

    def with_fallback(self, known: Mapping[str, int | None]) -> float:
        """Mean Score of ``known`` predictions, Random's draw for every other dialogue."""
        if not known:
            return self.random()
        out = []
        for d in self.draws:
            p = dict(zip(self.ids, map(int, d)))
            p.update(known)
            out.append(self.score(p))
        return float(np.mean(out))

    def matched(self, known: Mapping[str, int | None]) -> np.ndarray:
        """Scores of ``known``'s predictions dealt to random dialogues (abstentions as they are, turns
        as relative positions rescaled to the receiving dialogue's T), Random for the rest."""
        pos = {i: n for n, i in enumerate(self.ids)}
        rel = [None if v is None else (int(v) - 1) / max(int(self.T[pos[i]]) - 1, 1) for i, v in known.items()]
        out = []
        for d in self.draws:
            p = dict(zip(self.ids, map(int, d)))
            chosen = self.rng.choice(len(self.ids), size=len(rel), replace=False)
            for j, x in zip(chosen, rel):
                T = int(self.T[j])
                p[self.ids[j]] = None if x is None else int(np.clip(round(1 + x * (T - 1)), 1, T))
            out.append(self.score(p))
        return np.array(out)


class _Metric:
    """Scores metric-track distances on every pair (both subsets together)."""

    def __init__(self, gold2: Sequence[Mapping[str, Any]], draws: int, seed: int):
        self.gold = [{**g, "subset": "public"} for g in gold2]
        self.ids = [g["pair_id"] for g in self.gold]
        rng = np.random.default_rng(seed + 1)
        self.draws = [rng.random(len(self.ids)) for _ in range(max(1, draws // 4))]

    def tau(self, distances: Mapping[str, float]) -> float:
        from .score import score_metric

        return float(score_metric(dict(distances), self.gold)["public"]["tau"])

    def random(self) -> float:
        return float(np.mean([self.tau(dict(zip(self.ids, d))) for d in self.draws]))

    def with_fallback(self, known: Mapping[str, float]) -> float:
        if len(known) == len(self.ids):
            return self.tau(known)
        out = []
        for d in self.draws:
            p = dict(zip(self.ids, d))
            p.update(known)
            out.append(self.tau(p))
        return float(np.mean(out))


def _detector_result(name: str, det: _Detector, known: Mapping[str, int | None], detail: str) -> AttackResult:
    """Score ``known`` (Random elsewhere) against its matched Random (see the module doc)."""
    value = det.with_fallback(known)
    control = det.matched(known) if known else np.array([value])
    margin = value - float(control.mean())
    p = float((1 + (control >= value - 1e-9).sum()) / (1 + control.size))
    fail = margin > DETECTOR_MARGIN and p < ALPHA
    return AttackResult(name, "detector", value, detail, "FAIL" if fail else "pass", margin, float(control.mean()), p)


def _metric_result(name: str, value: float, detail: str) -> AttackResult:
    return AttackResult(name, "metric", value, detail, "FAIL" if value > METRIC_TAU_MAX else "pass")


# --------------------------------------------------------------------------- attacks


def _label_index(rows: Sequence[Mapping[str, Any]]) -> dict[str, tuple[int | None, int | None]]:
    """``turns hash -> (fork_turn or None, fork_position or None)`` of labelled rows (first wins)."""
    idx: dict[str, tuple[int | None, int | None]] = {}
    for r in rows:
        if "turns" not in r or "hallucination_type" not in r:
            continue
        h = r.get("hallucination_type")
        idx.setdefault(turns_key(r["turns"]), (None, None) if h is None else (r.get("fork_turn"), r.get("fork_position")))
    return idx


def lookup_attack(name: str, labelled: Sequence[Mapping[str, Any]], blind: Sequence[Mapping[str, Any]],
                  pairs: Sequence[Mapping[str, Any]], det: _Detector, met: _Metric | None,
                  source: str) -> list[AttackResult]:
    """Label every blind dialogue / metric candidate whose exact turn sequence is in ``labelled``."""
    idx = _label_index(labelled)
    known: dict[str, int | None] = {}
    for b in blind:
        hit = idx.get(turns_key(b["turns"]))
        if hit is not None:
            known[b["dialogue_id"]] = None if hit[0] is None else min(int(hit[0]), int(b["num_system_turns"]))
    out = [_detector_result(name, det, known, f"{len(known)}/{len(blind)} blind dialogues found in {source}")]
    if met is not None and pairs:
        dist = {}
        for p in pairs:
            hit = idx.get(turns_key(p["candidate"]))
            if hit is not None and hit[1] is not None:
                dist[p["pair_id"]] = 5.0 - float(hit[1])
        out.append(_metric_result(name, met.with_fallback(dist),
                                  f"{len(dist)}/{len(pairs)} metric-track candidates found in {source}"))
    return out


def sibling_predictions(blind: Sequence[Mapping[str, Any]], min_shared: int = 1) -> dict[str, int | None]:
    """Group blind dialogues by their shared opening; call each group's medoid conformant and flag
    every other member at its first system turn that differs from the medoid."""
    keys = {b["dialogue_id"]: system_prefix_keys(b["turns"]) for b in blind}
    T = {b["dialogue_id"]: int(b["num_system_turns"]) for b in blind}
    buckets: dict[str, list[str]] = defaultdict(list)
    for did, k in keys.items():
        if len(k) >= min_shared:
            buckets[k[min_shared - 1]].append(did)
    known: dict[str, int | None] = {}
    for members in buckets.values():
        if len(members) < 2:
            continue
        lcp = {(a, b): common_prefix(keys[a], keys[b]) for a in members for b in members if a != b}
        medoid = max(members, key=lambda a: (sum(lcp[(a, b)] for b in members if b != a), a))
        known[medoid] = None
        for a in members:
            if a != medoid:
                known[a] = min(lcp[(a, medoid)] + 1, T[a])
    return known


def pair_diff_distances(pairs: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Two diffing cheats per pair: minus the shared prefix (system turns), minus identical turns."""
    prefix, same = {}, {}
    for p in pairs:
        ka, kb = system_prefix_keys(p["reference"]), system_prefix_keys(p["candidate"])
        prefix[p["pair_id"]] = -float(common_prefix(ka, kb))
        same[p["pair_id"]] = -float(sum(1 for x, y in zip(p["reference"], p["candidate"]) if x["text"] == y["text"]))
    return {"shared prefix": prefix, "identical turns": same}


#: The correlation cheat's bins hold at least this many training dialogues (fewer bins otherwise),
#: so that a tiny blind set does not let chance pass for a leak.
MIN_PER_BIN = 8


def _binned_predictions(x: np.ndarray, T: np.ndarray, conf: np.ndarray, rel: np.ndarray, folds: int = 5,
                        bins: int = 4) -> list[int | None]:
    """Cross-fitted predictions from one feature: per quantile bin of the training folds (at most
    ``bins``, each with at least :data:`MIN_PER_BIN` dialogues), call the bin conformant when most
    of its dialogues are, else flag at the bin's median relative fork turn."""
    n = len(x)
    order = np.argsort(np.argsort(x, kind="stable"), kind="stable")
    fold = order % folds
    preds: list[int | None] = [None] * n
    for f in range(folds):
        tr, te = fold != f, fold == f
        if not tr.any() or not te.any():
            continue
        nb = min(bins, int(tr.sum()) // MIN_PER_BIN)
        edges = np.unique(np.quantile(x[tr], np.linspace(0, 1, nb + 1)[1:-1])) if nb > 1 else np.array([])
        b_tr, b_te = np.searchsorted(edges, x[tr], side="right"), np.searchsorted(edges, x[te], side="right")
        conf_tr, rel_tr = conf[tr], rel[tr]
        glob_c = conf_tr.mean()
        glob_r = float(np.median(rel_tr[~conf_tr])) if (~conf_tr).any() else 0.5
        for i, bi in zip(np.flatnonzero(te), b_te):
            m = b_tr == bi
            c = conf_tr[m].mean() if m.any() else glob_c
            forks = m & ~conf_tr
            r = float(np.median(rel_tr[forks])) if forks.any() else glob_r
            preds[i] = None if c > 0.5 else int(np.clip(round(1 + r * (T[i] - 1)), 1, T[i]))
    return preds


def _id_value(s: str) -> float:
    try:
        return float(int(s.lstrip("dpu")[:12], 16))
    except ValueError:
        return float(int(hashlib.sha256(s.encode()).hexdigest()[:12], 16))


def _chars(turns: Sequence[Mapping[str, Any]]) -> int:
    return sum(len(t["text"]) for t in turns)


def correlation_attacks(blind: Sequence[Mapping[str, Any]], gold3: Sequence[Mapping[str, Any]],
                        pairs: Sequence[Mapping[str, Any]], det: _Detector, met: _Metric | None
                        ) -> list[AttackResult]:
    from dialfork_metrics.stats import kendall_tau

    g = {r["dialogue_id"]: r for r in gold3}
    rows = [b for b in blind if b["dialogue_id"] in g]
    out = []
    if rows:
        T = np.array([int(b["num_system_turns"]) for b in rows])
        conf = np.array([g[b["dialogue_id"]]["hallucination_type"] is None for b in rows])
        rel = np.array([0.0 if c else (int(g[b["dialogue_id"]]["fork_turn"]) - 1) / max(int(b["num_system_turns"]) - 1, 1)
                        for b, c in zip(rows, conf)])
        feats = {"id": np.array([_id_value(b["dialogue_id"]) for b in rows]),
                 "row order": np.arange(len(rows), dtype=float),
                 "length (system turns)": T.astype(float),
                 "length (characters)": np.array([_chars(b["turns"]) for b in rows], dtype=float)}
        best = None
        for fname, x in feats.items():
            preds = dict(zip((b["dialogue_id"] for b in rows), _binned_predictions(x, T, conf, rel)))
            res = _detector_result("correlations (ids, order, lengths)", det, preds, "")
            tau = kendall_tau(x, conf, undefined="nan") if len(rows) >= 2 else float("nan")
            if best is None or (res.margin, -res.p_value) > (best[1].margin, -best[1].p_value):
                best = (fname, res, tau)
        fname, res, tau = best
        res.detail = (f"best feature: {fname} (Kendall tau with 'is conformant' {tau:+.3f}); binned predictor, "
                      "5-fold cross-fitted on the gold")
        out.append(res)
    if met is not None and pairs:
        feats2: dict[str, dict[str, float]] = {
            "pair id": {p["pair_id"]: _id_value(p["pair_id"]) for p in pairs},
            "row order": {p["pair_id"]: float(i) for i, p in enumerate(pairs)},
            "turn-count diff": {p["pair_id"]: float(abs(len(p["candidate"]) - len(p["reference"]))) for p in pairs},
            "length diff (characters)": {p["pair_id"]: float(abs(_chars(p["candidate"]) - _chars(p["reference"])))
                                         for p in pairs},
            "candidate length": {p["pair_id"]: float(len(p["candidate"])) for p in pairs},
        }
        best2 = None
        for fname, d in feats2.items():
            for sign in (1.0, -1.0):
                t = met.tau({k: sign * v for k, v in d.items()})
                if best2 is None or t > best2[1]:
                    best2 = (f"{'-' if sign < 0 else '+'}{fname}", t)
        out.append(_metric_result("correlations (ids, order, lengths)", best2[1],
                                  f"best feature: {best2[0]} as the distance (either sign tried)"))
    return out


def regenerate(star: str | os.PathLike, tasks: Sequence[str], seeds: Sequence[int], prefix_modes: Sequence[str],
               per_task: int, workdir: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Template corpora of the public code for each (seed, prefix mode) over the first ``per_task``
    single-task scenarios of each task; returns (records, notes)."""
    from dialfork_dataset.builder import load_records
    from generation import GenerationConfig, generate_corpus
    from generation.engine import _load_corpus

    try:  # where the prefix modes live depends on the code version
        from dialfork_dataset.records import PREFIX_MODES
    except ImportError:
        from generation.engine import PREFIX_MODES

    corpus = _load_corpus(str(star))
    notes = []
    tasks = [t for t in tasks if t in corpus.tasks]
    scen = [sc for t in sorted(tasks) for sc in corpus.scenarios_for(task=t, single_task=True)[:per_task]]
    records: list[dict[str, Any]] = []
    modes = [m for m in prefix_modes if m in PREFIX_MODES]
    for m in sorted(set(prefix_modes) - set(modes)):
        notes.append(f"regeneration: prefix mode {m!r} is not in this code version; not tried")
    for seed in seeds:
        for mode in modes:
            out = workdir / f"seed{seed}-{mode}"
            generate_corpus(GenerationConfig(star=str(star), out=str(out), tasks=tuple(sorted(tasks)), seed=seed,
                                             prefix_mode=mode), scenarios=scen, corpus=corpus, progress=False)
            records += load_records(out, validate=False)
    return records, notes


# --------------------------------------------------------------------------- the audit


def run_audit(hub: str | os.PathLike, gold_dir: str | os.PathLike, *, star: str | os.PathLike | None = None,
              regen_seeds: Sequence[int] = DEFAULT_REGEN_SEEDS,
              regen_scenarios_per_task: int = DEFAULT_REGEN_SCENARIOS_PER_TASK,
              draws: int = RANDOM_DRAWS, seed: int = 0,
              progress: Callable[[str], None] | None = None) -> AuditReport:
    """Run every attack on the layout ``hub`` and score it against ``gold_dir`` (see the module doc).

    ``star``: the STAR folder for the regeneration attack (skipped without it, or with no seeds).
    """
    from dialfork_dataset.hub import load_gold

    if draws < round(1 / ALPHA):
        raise ValueError(f"draws must be at least {round(1 / ALPHA)} (a p-value below {ALPHA} needs that many "
                         f"matched draws), got {draws}")
    hub, gold_dir = Path(hub), Path(gold_dir)
    say = progress or (lambda m: logger.info("audit: %s", m))
    blind = _read_config(hub / "data" / BLIND)
    if not blind:
        raise FileNotFoundError(f"{hub}/data/{BLIND}: no parquet files; HUB must be a DialFork Hub layout")
    pairs = _read_config(hub / "data" / PAIRS) if (hub / "data" / PAIRS).is_dir() else []
    if pairs and "candidate" not in pairs[0]:  # older layouts: pairs reference blind ids
        by_id = {b["dialogue_id"]: b["turns"] for b in blind}
        pairs = [{**p, "reference": by_id[p["reference_id"]], "candidate": by_id[p["candidate_id"]]} for p in pairs]
    public = read_public_configs(hub)
    gold = load_gold(gold_dir)
    det = _Detector(gold["task3"], draws, seed)
    met = _Metric(gold["task2"], draws, seed) if gold["task2"] and pairs else None
    from dialfork_metrics.task3.scorer import score_predictions

    first = score_predictions({i: 1 for i in det.ids}, det.gold)["score"]
    last = score_predictions({i: int(t) for i, t in zip(det.ids, det.T)}, det.gold)["score"]
    random_score = det.random()
    report = AuditReport(baselines={"detector": {"random": random_score, "first": first, "last": last},
                                    "metric": {"random": met.random() if met else None}},
                         counts={"blind": len(blind), "pairs": len(pairs),
                                 "public_rows": sum(len(v) for v in public.values())})
    labelled = [r for rows in public.values() for r in rows]
    say("verbatim lookup")
    report.attacks += lookup_attack("verbatim lookup (public configs)", labelled, blind, pairs, det, met,
                                    f"{len(public)} public config(s)")
    say("sibling grouping")
    sib = sibling_predictions(blind)
    report.attacks.append(_detector_result("sibling grouping (blind set)", det, sib,
                                           f"{len(sib)}/{len(blind)} blind dialogues share an opening with another"))
    tasks = sorted({r["task"] for r in labelled if r.get("task")})
    if star is None or not list(regen_seeds) or not tasks:
        why = "no STAR folder given" if star is None else "no public task" if not tasks else "no seeds"
        for track in ("detector", "metric"):
            report.attacks.append(AttackResult("regeneration (public code, public seeds)", track, None,
                                               f"not run: {why}", "skipped"))
    else:
        # the modes of the public forks, plus the hidden set's (the card states them), plus the default
        hidden_modes = set((gold["manifest"].get("hidden") or {}).get("prefix_modes") or ())
        modes = sorted({r.get("prefix_mode") for r in labelled if r.get("prefix_mode")} | hidden_modes | {"replay"})
        say(f"regeneration: {len(regen_seeds)} seed(s) x {len(modes)} prefix mode(s) x {len(tasks)} task(s)")
        with tempfile.TemporaryDirectory(prefix="dialfork-audit-") as tmp:
            regen, notes = regenerate(star, tasks, list(regen_seeds), modes, regen_scenarios_per_task, Path(tmp))
        report.notes += notes
        seeds_txt = f"seeds {min(regen_seeds)}-{max(regen_seeds)}" if len(regen_seeds) > 1 else f"seed {regen_seeds[0]}"
        report.attacks += lookup_attack("regeneration (public code, public seeds)", regen, blind, pairs, det, met,
                                        f"{len(regen):,} regenerated dialogues ({seeds_txt}, "
                                        f"first {regen_scenarios_per_task} scenarios per task)")
    if met is not None:
        say("pair diffing")
        best = max(((name, met.tau(d)) for name, d in pair_diff_distances(pairs).items()), key=lambda x: x[1])
        report.attacks.append(_metric_result("pair diffing (metric track)", best[1], f"best: -{best[0]}"))
    say("correlations")
    report.attacks += correlation_attacks(blind, gold["task3"], pairs, det, met)
    hidden = gold["manifest"].get("hidden") or {}
    if "template" in (hidden.get("generators") or []) or not hidden:
        report.notes.append("the hidden set was made by the template simulator (or its generator is not recorded): "
                            "anyone running the simulator as an oracle can reproduce its kind of dialogues; fine for "
                            "demos and tests, an official hidden set comes from an LLM backend")
    if not hidden:
        report.notes.append("the gold manifest has no 'hidden' section: this layout predates the hidden split")
    return report

