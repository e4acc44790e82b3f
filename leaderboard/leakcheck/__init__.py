"""``python -m leaderboard audit HUB --gold GOLD``: try the known cheats on a release (SPEC section 4).

A cheater holds every public file of the Hub layout and the public code. Each attack below builds
a submission from that alone, and the audit scores it against the gold, next to the trivial
baselines (Random, always-first, always-last):

* **verbatim lookup**: every blind dialogue (and every metric-track candidate) whose turn sequence
  occurs in a public config gets that config's label;
* **sibling grouping** (detector track): blind dialogues that share their opening user and
  system turns are grouped; the group's medoid (its system turns share most with the others') is
  called D+ (conformant), every other member is flagged at its first system turn that differs from
  the medoid's; a dialogue alone in its group is its own D+ (called conformant) or, the other rule,
  gets Random's guess: both rules are scored and the stronger is reported (issue 37);
* **regeneration**: the template simulator of the public code is run with the public seeds
  (0..9 by default) over the first scenarios of each public task; a blind dialogue found there
  gets the regenerated label;
* **pair diffing** (metric track): the distance of a pair is minus the shared prefix of the two
  transcripts (in system turns), or minus the number of identical turns;
* **correlations** of ids, row order and lengths with the labels: a binned predictor on each
  feature, cross-fitted on the gold (5 folds), for the detector track; the feature itself (either
  sign) as the distance, for the metric track;
* the **simulator-aware attacks** of :mod:`.cheater` (issue 33): (a) fingerprints of the public
  simulator (its variant and reaction pools, forced-difference fallback, WIC bridges, another
  task's phrasing), (b) the same plus a node grammar learnt from public-seed regenerations, (c) a
  TF-IDF + logistic regression classifier fitted on the public labelled configs (the *public-data
  ceiling*: reported, never a verdict), (d) a length rule (the task's modal conformant length),
  (e) the node-level shared prefix of a metric-track pair. (a), (b), (d) and (e) exploit how the
  hidden set was generated: a template hidden set fails them, which is why it is for plumbing
  only; a release declared so (``plumbing_only=True``) records those failures as waived.

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

Modules: :mod:`.report` (thresholds, results), :mod:`.scoring` (public data, matched Random),
:mod:`.attacks` (the cheats), :mod:`.simulator` and :mod:`.learned` (what the simulator-aware and
public-data cheats learn), :mod:`.cheater` (those cheats on one blind set), :mod:`.run`
(:func:`run_audit`, :func:`audit_corpora`); every name is re-exported here. :mod:`.power` (the
blind-set size at which a cheat's gap becomes significant) is imported on its own.
"""

from __future__ import annotations

from .attacks import (
    MIN_PER_BIN,
    SINGLETON_RULES,
    correlation_attacks,
    lookup_attack,
    pair_diff_distances,
    regenerate,
    sibling_attack,
    sibling_predictions,
)
from .cheater import (
    FINGERPRINTS,
    GRAMMAR,
    LENGTH,
    NODE_PREFIX,
    honest_results,
    simulator_attacks,
)
from .report import (
    ALPHA,
    BLIND,
    CEILING,
    DEFAULT_REGEN_SCENARIOS_PER_TASK,
    DEFAULT_REGEN_SEEDS,
    DETECTOR_MARGIN,
    METRIC_TAU_MAX,
    PAIRS,
    PLUMBING_ONLY_TEXT,
    RANDOM_DRAWS,
    AttackResult,
    AuditReport,
)
from .run import audit_corpora, run_audit
from .scoring import (
    common_prefix,
    read_public_configs,
    system_prefix_keys,
    turns_key,
)

__all__ = [
    "ALPHA",
    "AttackResult",
    "AuditReport",
    "BLIND",
    "CEILING",
    "FINGERPRINTS",
    "GRAMMAR",
    "LENGTH",
    "NODE_PREFIX",
    "PLUMBING_ONLY_TEXT",
    "audit_corpora",
    "honest_results",
    "simulator_attacks",
    "DEFAULT_REGEN_SCENARIOS_PER_TASK",
    "DEFAULT_REGEN_SEEDS",
    "DETECTOR_MARGIN",
    "METRIC_TAU_MAX",
    "MIN_PER_BIN",
    "PAIRS",
    "RANDOM_DRAWS",
    "common_prefix",
    "correlation_attacks",
    "lookup_attack",
    "pair_diff_distances",
    "read_public_configs",
    "regenerate",
    "run_audit",
    "SINGLETON_RULES",
    "sibling_attack",
    "sibling_predictions",
    "system_prefix_keys",
    "turns_key",
]
