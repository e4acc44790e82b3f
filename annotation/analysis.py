"""Every analysis of the paper's Appendix N, recomputed from the answers.

Input: the judgments (one dict per completed assignment, the fields of
:meth:`annotation.store.Study.export_rows`; also the rows of the exported ``answers.json`` /
``answers.csv``). Statistics come from well-kept libraries: ``scipy.stats`` (Kendall tau_b,
Spearman, Wilcoxon, Fisher exact, bootstrap), ``statsmodels`` (Wilson intervals),
``krippendorff`` (alpha) and ``irrCAC`` (Gwet's AC1).

Conventions (paper, Appendix N, unless marked "ours"):
* categorical answers (steps 2 and 3) use the first judgment collected per conversation (the
  earliest ``completed_at``); the slider uses the mean over the conversation's annotators;
* "confirmed" = answer ``yes`` or ``partly``;
* conformant dialogues count as the latest position (5) in the probability of superiority;
* a tau_b that is undefined (constant ratings) counts as 0 (ours: no ordering was expressed);
* bootstrap intervals are percentile intervals (``scipy.stats.bootstrap``, seeded);
* the exclusion criterion: an annotator shown at least two conformant dialogues (each with a
  foil) who confirmed more than half of those foils is excluded from every other analysis.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from itertools import combinations
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from dialfork_dataset import taxonomy
from dialfork_dataset.errors import CollectedErrors
from dialfork_dataset.taxonomy import FORK_POSITIONS, breaking_types

from .design import CUE_FOIL, CUE_TRUE
from .statistics import (  # noqa: F401  (re-exported: the public API of the analyses)
    N_BOOT,
    _f,
    _gwet_ac1_counts,
    _mean,
    bootstrap_ci,
    fisher_greater,
    gwet_ac1,
    kendall_tau_b,
    krippendorff_interval,
    rate,
    spearman_rho,
    wilcoxon_greater,
    wilson,
)

logger = logging.getLogger(__name__)

CONFIRMED = ("yes", "partly")
CONFORMANT_POSITION = FORK_POSITIONS[-1] + 1  # conformant dialogues rank after every fork position
MIN_FORKS_PER_UNIT = 8
EXCLUSION_MIN_CONFORMANT = 2
EXCLUSION_MAX_RATE = 0.5
REQUIRED = (
    "annotator",
    "task",
    "dialogue_id",
    "source_id",
    "hallucination_type",
    "fork_position",
    "fork_turn",
    "cue_kind",
    "cue_type",
    "slider",
    "cue_answer",
    "onset_turn",
    "prefix_answer",
)


class AnswersError(CollectedErrors):
    """The judgments are malformed; ``errors`` lists every problem (row and field).

    Built like every :class:`~dialfork_dataset.errors.CollectedErrors`: ``AnswersError(message,
    errors)``, or through ``from_errors`` / ``raise_if``, whose message summarises the problems.

    Attributes:
        errors: Every problem, one ``"row N (dialogue ID): what"`` line each (``[message]`` when
            none was given).
    """


# --------------------------------------------------------------------------------------------
# data preparation
# --------------------------------------------------------------------------------------------


def _none(v: Any) -> Any:
    if v is None:
        return None
    if isinstance(v, float) and math.isnan(v):
        return None
    if isinstance(v, str) and v.strip() in ("", "nan", "None", "null"):
        return None
    return v


def prepare(judgments: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Validate the judgments and return a DataFrame with typed columns plus ``position``
    (1..4, 5 for conformant), ``is_fork``, ``confirmed`` and ``seq`` (rank in the annotator's
    sequence). Every malformed row is reported at once (:class:`AnswersError`).

    Args:
        judgments: One mapping per completed assignment with at least the fields of
            ``REQUIRED`` (``annotator``, ``task``, ``dialogue_id``, ``source_id``,
            ``hallucination_type`` (None for a conformant dialogue), ``fork_position``,
            ``fork_turn``, ``cue_kind``, ``cue_type``, ``slider``, ``cue_answer``, ``onset_turn``,
            ``prefix_answer``); optional ``position`` (the rank in the annotator's sequence,
            else the row number) and ``completed_at`` (else the row number). Empty strings,
            ``"nan"``, ``"None"``, ``"null"`` and NaN count as missing values, so CSV rows work.

    Returns:
        One row per judgment, sorted by annotator and sequence: the ``REQUIRED`` columns
        (``slider`` float, ``fork_position`` / ``fork_turn`` / ``onset_turn`` int or None),
        ``seq_key``, ``completed_at``, ``row`` (1-based input row), ``is_fork`` (bool),
        ``position`` (1..4, or 5 for a conformant dialogue), ``confirmed`` (``cue_answer`` is
        ``yes`` or ``partly``) and ``seq`` (0-based rank within the annotator).

    Raises:
        AnswersError: Any row misses a required field, has a non-numeric number, a slider
            outside 0..100, a ``cue_answer`` other than yes/partly/no, a ``cue_kind`` other than
            true/foil, an unknown ``hallucination_type``, or a fork without ``fork_position``
            1..4; every problem is listed.
    """
    rows = list(judgments)
    errs: list[str] = []
    out = []
    for i, r in enumerate(rows, 1):
        miss = [k for k in REQUIRED if k not in r]
        if miss:
            errs.append(f"row {i}: missing field(s) {miss}")
            continue
        d = {k: _none(r.get(k)) for k in set(REQUIRED) | {"position", "completed_at", "annotator_id"}}
        try:
            d["slider"] = float(d["slider"]) if d["slider"] is not None else None
            d["fork_position"] = int(d["fork_position"]) if d["fork_position"] is not None else None
            d["fork_turn"] = int(d["fork_turn"]) if d["fork_turn"] is not None else None
            d["onset_turn"] = int(float(d["onset_turn"])) if d["onset_turn"] is not None else None
            d["seq_key"] = float(d["position"]) if d.get("position") is not None else float(i)
        except (TypeError, ValueError) as e:
            errs.append(f"row {i} (dialogue {r.get('dialogue_id')!r}): non-numeric value ({e})")
            continue
        if d["slider"] is None or not 0 <= d["slider"] <= 100:
            errs.append(
                f"row {i} (dialogue {r.get('dialogue_id')!r}): slider must be in 0..100, got {r.get('slider')!r}"
            )
        if d["cue_answer"] not in ("yes", "partly", "no"):
            errs.append(
                f"row {i} (dialogue {r.get('dialogue_id')!r}): cue_answer must be yes/partly/no, got {r.get('cue_answer')!r}"
            )
        if d["cue_kind"] not in (CUE_TRUE, CUE_FOIL):
            errs.append(f"row {i}: cue_kind must be 'true' or 'foil', got {r.get('cue_kind')!r}")
        ht = d["hallucination_type"]
        if ht is not None and ht not in taxonomy.names():
            errs.append(f"row {i}: unknown hallucination_type {ht!r}")
        if ht is not None and d["fork_position"] not in FORK_POSITIONS:
            errs.append(f"row {i} (dialogue {r.get('dialogue_id')!r}): a fork needs fork_position 1..4")
        d["annotator"] = str(d["annotator"])
        d["completed_at"] = str(d["completed_at"]) if d.get("completed_at") is not None else f"{i:012d}"
        d["row"] = i
        out.append(d)
    AnswersError.raise_if(errs, "the judgments")
    cols = list(REQUIRED) + ["seq_key", "completed_at", "row"]
    df = pd.DataFrame(out, columns=cols) if out else pd.DataFrame(columns=cols)
    df["is_fork"] = df["hallucination_type"].notna()
    df["position"] = [
        int(k) if f else CONFORMANT_POSITION for k, f in zip(df["fork_position"], df["is_fork"])
    ]
    df["confirmed"] = df["cue_answer"].isin(CONFIRMED)
    df = df.sort_values(["annotator", "seq_key", "row"]).reset_index(drop=True)
    df["seq"] = df.groupby("annotator").cumcount()
    return df


def first_judgments(df: pd.DataFrame) -> pd.DataFrame:
    """One row per conversation: its first completed judgment (categorical answers), with the
    conversation's mean slider over its annotators (``mean_slider``) and ``n_judges``.

    Args:
        df: Judgments as returned by :func:`prepare`.

    Returns:
        One row per ``dialogue_id``: the columns of ``df`` from its earliest judgment (by
        ``completed_at``, then input row), plus ``mean_slider`` (mean slider over all its
        judgments) and ``n_judges`` (number of judgments). An empty ``df`` gives an empty frame
        with those two columns added.
    """
    if df.empty:
        return df.assign(mean_slider=pd.Series(dtype=float), n_judges=pd.Series(dtype=int))
    g = df.groupby("dialogue_id")
    first = (
        df.sort_values(["completed_at", "row"])
        .groupby("dialogue_id", sort=False)
        .head(1)
        .set_index("dialogue_id")
    )
    first["mean_slider"] = g["slider"].mean()
    first["n_judges"] = g.size()
    return first.reset_index()


# --------------------------------------------------------------------------------------------
# exclusion
# --------------------------------------------------------------------------------------------


def annotator_foils(
    df: pd.DataFrame, min_conformant: int = EXCLUSION_MIN_CONFORMANT, max_rate: float = EXCLUSION_MAX_RATE
) -> list[dict[str, Any]]:
    """Per annotator: foil false-confirmation rate on conformant dialogues (the exclusion
    criterion: at least ``min_conformant`` shown and more than ``max_rate`` confirmed), and on all
    foils for information.

    Args:
        df: Judgments as returned by :func:`prepare`.
        min_conformant: Least number of conformant dialogues shown with a foil for the criterion
            to apply (default 2).
        max_rate: Share of those foils confirmed above which the annotator is excluded (default
            0.5).

    Returns:
        One dict per annotator, sorted by annotator: ``annotator``, ``judgments`` (all of theirs),
        ``conformant_foils`` / ``conformant_foils_confirmed`` (foils on conformant dialogues:
        shown / confirmed), ``conformant_foil_rate`` (None when none was shown), ``assessed``
        (at least ``min_conformant`` shown), ``excluded`` (assessed and rate above ``max_rate``),
        ``all_foils`` / ``all_foils_confirmed`` (every foil, forks included).
    """
    out = []
    for a, g in df.groupby("annotator", sort=True):
        conf = g[(~g["is_fork"]) & (g["cue_kind"] == CUE_FOIL)]
        allf = g[g["cue_kind"] == CUE_FOIL]
        n, c = len(conf), int(conf["confirmed"].sum())
        out.append(
            {
                "annotator": a,
                "judgments": len(g),
                "conformant_foils": n,
                "conformant_foils_confirmed": c,
                "conformant_foil_rate": c / n if n else None,
                "assessed": n >= min_conformant,
                "excluded": bool(n >= min_conformant and c / n > max_rate),
                "all_foils": len(allf),
                "all_foils_confirmed": int(allf["confirmed"].sum()),
            }
        )
    return out


# --------------------------------------------------------------------------------------------
# RQ1
# --------------------------------------------------------------------------------------------


def unit_taus(
    df: pd.DataFrame, types: Sequence[str] | None = None, min_forks: int = MIN_FORKS_PER_UNIT
) -> pd.DataFrame:
    """tau_b(slider, k) within each (annotator, task) over forks of ``types``, for units with at
    least ``min_forks`` such forks covering all four positions.

    Args:
        df: Judgments as returned by :func:`prepare`.
        types: Hallucination types whose forks count; None (default) takes the
            workflow-breaking types of the registry.
        min_forks: Least number of such forks a unit needs (default 8).

    Returns:
        One row per qualifying unit, columns ``annotator``, ``task``, ``n`` (forks), ``tau_b``
        (Kendall's tau_b of slider against fork position; 0.0 when undefined) and ``undefined``
        (True when tau_b was undefined, i.e. constant sliders). Empty (same columns) when no unit
        qualifies.
    """
    f = df[df["is_fork"] & df["hallucination_type"].isin(list(breaking_types() if types is None else types))]
    rows = []
    for (a, t), g in f.groupby(["annotator", "task"], sort=True):
        if len(g) < min_forks or set(g["fork_position"]) != set(FORK_POSITIONS):
            continue
        tau = kendall_tau_b(g["slider"], g["fork_position"])
        rows.append(
            {
                "annotator": a,
                "task": t,
                "n": len(g),
                "tau_b": 0.0 if math.isnan(tau) else tau,
                "undefined": math.isnan(tau),
            }
        )
    return pd.DataFrame(rows, columns=["annotator", "task", "n", "tau_b", "undefined"])


def summarize_taus(taus: Sequence[float], n_boot: int, seed: int) -> dict[str, Any]:
    """Mean of a sample of tau_b values with a bootstrap CI and a one-sided Wilcoxon test.

    Args:
        taus: The tau_b values (one per unit or quartet).
        n_boot: Bootstrap resamples of the interval.
        seed: Seed of the bootstrap's random generator.

    Returns:
        ``{"mean": mean tau_b (None when empty), "ci_low", "ci_high": percentile bootstrap bounds
        of the mean (None with fewer than two values), "n": number of values,
        "p_wilcoxon_greater": p-value that the values exceed 0 (None when empty or all 0)}``.
    """
    v = np.asarray(list(taus), float)
    lo, hi = bootstrap_ci(v, _mean, n_boot, seed)
    return {
        "mean": _f(v.mean()) if len(v) else None,
        "ci_low": lo,
        "ci_high": hi,
        "n": len(v),
        "p_wilcoxon_greater": wilcoxon_greater(v),
    }


def superiority_units(
    df: pd.DataFrame,
    types: Sequence[str] | None = None,
    low: Sequence[int] | None = None,
    high: Sequence[int] | None = None,
) -> pd.DataFrame:
    """Per (annotator, task): ``wins`` and ``pairs`` over pairs of conversations at different
    positions (conformant = position 5): a win when the later one is rated higher, one half for
    a tie. ``low`` / ``high`` restrict the earlier / later position of a pair.

    Args:
        df: Judgments as returned by :func:`prepare`.
        types: Hallucination types whose forks take part (conformant dialogues always do); None
            (default) takes the workflow-breaking types.
        low: Positions allowed as the earlier member of a pair; None allows all.
        high: Positions allowed as the later member of a pair; None allows all.

    Returns:
        One row per unit with at least one pair, columns ``annotator``, ``task``, ``wins``
        (float: ties count 0.5) and ``pairs``; empty (same columns) when no unit has a pair.
    """
    d = df[
        (~df["is_fork"]) | df["hallucination_type"].isin(list(breaking_types() if types is None else types))
    ]
    rows = []
    for (a, t), g in d.groupby(["annotator", "task"], sort=True):
        pos, sl = g["position"].to_numpy(), g["slider"].to_numpy(float)
        wins = pairs = 0.0
        for i, j in combinations(range(len(g)), 2):
            if pos[i] == pos[j]:
                continue
            lo_i, hi_i = (i, j) if pos[i] < pos[j] else (j, i)
            if low is not None and pos[lo_i] not in low:
                continue
            if high is not None and pos[hi_i] not in high:
                continue
            pairs += 1
            wins += 1.0 if sl[hi_i] > sl[lo_i] else 0.5 if sl[hi_i] == sl[lo_i] else 0.0
        if pairs:
            rows.append({"annotator": a, "task": t, "wins": wins, "pairs": pairs})
    return pd.DataFrame(rows, columns=["annotator", "task", "wins", "pairs"])


def probability_of_superiority(
    df: pd.DataFrame,
    types: Sequence[str] | None = None,
    low: Sequence[int] | None = None,
    high: Sequence[int] | None = None,
    n_boot: int = N_BOOT,
    seed: int = 0,
) -> dict[str, Any]:
    """Share of within-(annotator, task) pairs where the later position is rated higher (ties
    1/2), with a bootstrap CI over (annotator, task) units (ratio of summed wins to pairs).

    Args:
        df: Judgments as returned by :func:`prepare`.
        types: Hallucination types whose forks take part (conformant dialogues always do, at
            position 5); defaults to the workflow-breaking types.
        low: Positions allowed as the earlier member of a pair (e.g. ``[1]``); None allows all.
        high: Positions allowed as the later member of a pair (e.g. ``[4]``, or ``[5]`` for
            conformant); None allows all.
        n_boot: Bootstrap resamples of the interval.
        seed: Seed of the bootstrap's random generator.

    Returns:
        ``{"ps": probability of superiority in [0, 1], "ci_low", "ci_high": percentile bootstrap
        bounds (None with fewer than two units), "pairs": pairs compared, "units": (annotator,
        task) units with at least one pair}``; ``ps`` and the bounds are None when no pair
        exists.
    """
    u = superiority_units(df, types, low, high)
    if u.empty:
        return {"ps": None, "ci_low": None, "ci_high": None, "pairs": 0, "units": 0}
    w, p = u["wins"].to_numpy(float), u["pairs"].to_numpy(float)
    lo, hi = bootstrap_ci((w, p), lambda a, b, axis=-1: a.sum(axis=axis) / b.sum(axis=axis), n_boot, seed)
    return {
        "ps": float(w.sum() / p.sum()),
        "ci_low": lo,
        "ci_high": hi,
        "pairs": int(p.sum()),
        "units": len(u),
    }


def conformant_highest(df: pd.DataFrame, types: Sequence[str] | None = None) -> dict[str, Any]:
    """Share of (annotator, task) units (with a conformant and a fork) whose highest rating goes
    to a conformant dialogue (max conformant >= max fork).

    Args:
        df: Judgments as returned by :func:`prepare`.
        types: Hallucination types whose forks count; None (default) takes the
            workflow-breaking types.

    Returns:
        ``{"count": units where a conformant dialogue has the highest slider (ties count), "n":
        units with at least one conformant dialogue and one fork, "share": count / n (None when
        n is 0)}``.
    """
    d = df[
        (~df["is_fork"]) | df["hallucination_type"].isin(list(breaking_types() if types is None else types))
    ]
    n = c = 0
    for _, g in d.groupby(["annotator", "task"]):
        conf, fk = g[~g["is_fork"]]["slider"], g[g["is_fork"]]["slider"]
        if len(conf) and len(fk):
            n += 1
            c += int(conf.max() >= fk.max())
    return {"count": c, "n": n, "share": c / n if n else None}


def quartet_taus(conv: pd.DataFrame, types: Sequence[str] | None = None) -> pd.DataFrame:
    """tau_b(mean slider, k) within each quartet (the four forks of one source under one type).

    Args:
        conv: One row per conversation, as returned by :func:`first_judgments`.
        types: Hallucination types whose quartets count; None (default) takes the
            workflow-breaking types.

    Returns:
        One row per complete quartet (all four positions annotated), columns ``source_id``,
        ``type`` and ``tau_b`` (0.0 when undefined); empty (same columns) when there is none.
    """
    f = conv[
        conv["is_fork"] & conv["hallucination_type"].isin(list(breaking_types() if types is None else types))
    ]
    rows = []
    for (s, h), g in f.groupby(["source_id", "hallucination_type"], sort=True):
        if tuple(sorted(g["fork_position"])) != FORK_POSITIONS:
            continue
        tau = kendall_tau_b(g["mean_slider"], g["fork_position"])
        rows.append({"source_id": s, "type": h, "tau_b": 0.0 if math.isnan(tau) else tau})
    return pd.DataFrame(rows, columns=["source_id", "type", "tau_b"])


def mean_slider_by_position(
    conv: pd.DataFrame, types: Sequence[str], n_boot: int, seed: int
) -> dict[str, Any]:
    """Mean of the conversations' mean sliders per position (k=1..4 over ``types``, and
    conformant), with bootstrap CIs over conversations.

    Args:
        conv: One row per conversation, as returned by :func:`first_judgments`.
        types: Hallucination types whose forks count; None takes the workflow-breaking types.
        n_boot: Bootstrap resamples of each interval.
        seed: Base seed: position k uses ``seed + k``, conformant dialogues ``seed + 5``.

    Returns:
        ``{"k1".."k4", "conformant": {"mean": mean of the mean sliders (0..100; None when empty),
        "ci_low", "ci_high": percentile bootstrap bounds (None with fewer than two
        conversations), "n": conversations}}``.
    """
    out: dict[str, Any] = {}
    for k in FORK_POSITIONS:
        v = conv[
            conv["is_fork"]
            & conv["hallucination_type"].isin(list(breaking_types() if types is None else types))
            & (conv["fork_position"] == k)
        ]
        x = v["mean_slider"].to_numpy(float)
        lo, hi = bootstrap_ci(x, _mean, n_boot, seed + k)
        out[f"k{k}"] = {"mean": _f(x.mean()) if len(x) else None, "ci_low": lo, "ci_high": hi, "n": len(x)}
    x = conv[~conv["is_fork"]]["mean_slider"].to_numpy(float)
    lo, hi = bootstrap_ci(x, _mean, n_boot, seed + 5)
    out["conformant"] = {"mean": _f(x.mean()) if len(x) else None, "ci_low": lo, "ci_high": hi, "n": len(x)}
    return out


def rq1(
    df: pd.DataFrame,
    conv: pd.DataFrame,
    n_boot: int = N_BOOT,
    seed: int = 0,
    min_forks: int = MIN_FORKS_PER_UNIT,
) -> dict[str, Any]:
    """RQ1: do annotators rate forks lower the earlier the fork happens (slider vs. fork position)?

    Computed twice: over the workflow-breaking types (``"breaking"``) and over every registered
    type (``"all"``).

    Args:
        df: Judgments as returned by :func:`prepare` (every judgment: the slider analyses use
            them all).
        conv: One row per conversation, as returned by :func:`first_judgments`.
        n_boot: Bootstrap resamples of every interval (default :data:`N_BOOT`, 10,000).
        seed: Seed of the bootstrap generators.
        min_forks: Least number of forks an (annotator, task) unit needs for its within-unit
            tau_b (default 8).

    Returns:
        ``{"breaking", "all": {"types", "tau_b_within_units" (:func:`summarize_taus` of
        :func:`unit_taus`), "units" (the unit rows), "superiority" (:func:`probability_of_superiority`
        over all pairs), "superiority_k4_vs_k1", "superiority_conformant_vs_fork",
        "conformant_highest", "tau_b_quartets" (:func:`summarize_taus` of :func:`quartet_taus`),
        "mean_slider" (:func:`mean_slider_by_position`)}, "mean_slider_per_type": {type: mean
        sliders by position}, "superiority_conformant_vs_fork_per_type": {type: probability of
        superiority of conformant over that type's forks}}``.
    """
    res: dict[str, Any] = {}
    for name, types in (("breaking", breaking_types()), ("all", taxonomy.names())):
        taus = unit_taus(df, types, min_forks)
        qt = quartet_taus(conv, types)
        res[name] = {
            "types": list(types),
            "tau_b_within_units": summarize_taus(taus["tau_b"], n_boot, seed),
            "units": taus.to_dict(orient="records"),
            "superiority": probability_of_superiority(df, types, n_boot=n_boot, seed=seed),
            "superiority_k4_vs_k1": probability_of_superiority(
                df, types, low=[1], high=[4], n_boot=n_boot, seed=seed
            ),
            "superiority_conformant_vs_fork": probability_of_superiority(
                df, types, low=list(FORK_POSITIONS), high=[CONFORMANT_POSITION], n_boot=n_boot, seed=seed
            ),
            "conformant_highest": conformant_highest(df, types),
            "tau_b_quartets": summarize_taus(qt["tau_b"], n_boot, seed),
            "mean_slider": mean_slider_by_position(conv, types, n_boot, seed),
        }
    res["mean_slider_per_type"] = {
        h: mean_slider_by_position(conv, [h], n_boot, seed) for h in taxonomy.names()
    }
    res["superiority_conformant_vs_fork_per_type"] = {
        h: probability_of_superiority(
            df, [h], low=list(FORK_POSITIONS), high=[CONFORMANT_POSITION], n_boot=n_boot, seed=seed
        )
        for h in taxonomy.names()
    }
    return res


# --------------------------------------------------------------------------------------------
# RQ2-RQ4 (first judgment per conversation)
# --------------------------------------------------------------------------------------------


def rq2(conv: pd.DataFrame) -> dict[str, Any]:
    """RQ2: do annotators confirm the true instruction of a fork more often than a foil?

    Args:
        conv: One row per conversation (its first judgment), as returned by
            :func:`first_judgments`.

    Returns:
        ``{"true_per_type": {type: rate of forks shown their true instruction and confirmed, plus
        "yes" and "partly" counts}, "true_overall": the same over every type, "foil_conformant":
        rate of foils confirmed on conformant dialogues, "foil_forked": rate of foils confirmed on
        forks, "p_fisher_true_vs_foil_conformant", "p_fisher_true_vs_foil_forked": one-sided Fisher
        p-values that the true rate exceeds the foil rate (None when a group is empty)}``; each
        rate is a :func:`rate` dict (count, n, rate, Wilson interval).
    """
    true = conv[conv["is_fork"] & (conv["cue_kind"] == CUE_TRUE)]
    per_type = {}
    for h in taxonomy.names():
        g = true[true["hallucination_type"] == h]
        per_type[h] = {
            **rate(int(g["confirmed"].sum()), len(g)),
            "yes": int((g["cue_answer"] == "yes").sum()),
            "partly": int((g["cue_answer"] == "partly").sum()),
        }
    overall = {
        **rate(int(true["confirmed"].sum()), len(true)),
        "yes": int((true["cue_answer"] == "yes").sum()),
        "partly": int((true["cue_answer"] == "partly").sum()),
    }
    fc = conv[(~conv["is_fork"]) & (conv["cue_kind"] == CUE_FOIL)]
    ff = conv[conv["is_fork"] & (conv["cue_kind"] == CUE_FOIL)]
    foil_conf = rate(int(fc["confirmed"].sum()), len(fc))
    foil_fork = rate(int(ff["confirmed"].sum()), len(ff))
    return {
        "true_per_type": per_type,
        "true_overall": overall,
        "foil_conformant": foil_conf,
        "foil_forked": foil_fork,
        "p_fisher_true_vs_foil_conformant": fisher_greater(
            overall["count"], overall["n"], foil_conf["count"], foil_conf["n"]
        ),
        "p_fisher_true_vs_foil_forked": fisher_greater(
            overall["count"], overall["n"], foil_fork["count"], foil_fork["n"]
        ),
    }


def onset_errors(conv: pd.DataFrame) -> np.ndarray:
    """onset - t_k over forks shown their true instruction and confirmed.

    Args:
        conv: One row per conversation, as returned by :func:`first_judgments`.

    Returns:
        One float per such fork with an onset turn: the annotated onset turn minus the fork turn
        (0 exact, negative too early, positive too late).
    """
    g = conv[
        conv["is_fork"] & (conv["cue_kind"] == CUE_TRUE) & conv["confirmed"] & conv["onset_turn"].notna()
    ]
    return (g["onset_turn"].astype(float) - g["fork_turn"].astype(float)).to_numpy()


def rq3(conv: pd.DataFrame) -> dict[str, Any]:
    """RQ3: how close is the onset turn annotators mark to the fork's true turn?

    Args:
        conv: One row per conversation, as returned by :func:`first_judgments`.

    Returns:
        ``{"n": forks with a confirmed true instruction and an onset, "distribution": {error in
        turns (str): count}, "exact", "within_one", "at_or_after": :func:`rate` dicts of errors
        = 0, |error| <= 1 and error >= 0, "median_abs_error": median absolute error in turns
        (None when n is 0)}``.
    """
    d = onset_errors(conv)
    n = len(d)
    vals, counts = np.unique(d.astype(int), return_counts=True) if n else ([], [])
    return {
        "n": n,
        "distribution": {str(int(v)): int(c) for v, c in zip(vals, counts)},
        "exact": rate(int((d == 0).sum()), n),
        "within_one": rate(int((np.abs(d) <= 1).sum()), n),
        "at_or_after": rate(int((d >= 0).sum()), n),
        "median_abs_error": _f(np.median(np.abs(d))) if n else None,
    }


def rq4(conv: pd.DataFrame) -> dict[str, Any]:
    """RQ4: do annotators judge the prefix before the fork as following the workflow?

    Args:
        conv: One row per conversation, as returned by :func:`first_judgments`.

    Returns:
        ``{"overall", "k1".."k4": {"n": forks with a prefix answer, "yes": :func:`rate` of "yes",
        "mostly": count of "mostly", "no": count of the rest, "yes_or_mostly": :func:`rate` of
        "yes" or "mostly"}}``.
    """
    g = conv[conv["is_fork"] & conv["prefix_answer"].notna()]
    out: dict[str, Any] = {}
    for key, sub in [("overall", g)] + [(f"k{k}", g[g["fork_position"] == k]) for k in FORK_POSITIONS]:
        n = len(sub)
        yes, mostly = (
            int((sub["prefix_answer"] == "yes").sum()),
            int((sub["prefix_answer"] == "mostly").sum()),
        )
        out[key] = {
            "n": n,
            "yes": rate(yes, n),
            "mostly": mostly,
            "no": n - yes - mostly,
            "yes_or_mostly": rate(yes + mostly, n),
        }
    return out


# --------------------------------------------------------------------------------------------
# agreement, learning, distances
# --------------------------------------------------------------------------------------------


def agreement(df: pd.DataFrame) -> dict[str, Any]:
    """On conversations judged by more than one annotator: raw agreement and Gwet's AC1 of the
    categorical answers; Krippendorff's alpha (interval) of the slider and the onset turn.

    Args:
        df: Judgments as returned by :func:`prepare`.

    Returns:
        ``{"conversations": conversations with two or more annotators, "judged_by": {number of
        annotators (str): conversations}, "confirmation", "three_way", "prefix": :func:`gwet_ac1`
        dicts (confirmed yes/no, cue answer yes/partly/no, prefix yes/mostly/no), "slider":
        :func:`krippendorff_interval` dict, "onset": the same over confirmed onsets plus "pairs"
        (pairs of onsets) and "pairs_within_one" (share within one turn; None without pairs)}``.
    """
    multi = df[df.groupby("dialogue_id")["annotator"].transform("nunique") > 1]
    groups = [g for _, g in multi.groupby("dialogue_id", sort=True)]
    conf = [["yes" if c else "no" for c in g["confirmed"]] for g in groups]
    three = [list(g["cue_answer"]) for g in groups]
    prefix = [[v for v in g["prefix_answer"] if v is not None] for g in groups]
    onsets = [
        [v for v, c in zip(g["onset_turn"], g["confirmed"]) if c and v is not None and not pd.isna(v)]
        for g in groups
    ]
    pairs = within = 0
    for o in onsets:
        for a, b in combinations(o, 2):
            pairs += 1
            within += int(abs(a - b) <= 1)
    return {
        "conversations": len(groups),
        "judged_by": {
            str(k): int(v)
            for k, v in multi.groupby("dialogue_id")["annotator"]
            .nunique()
            .value_counts()
            .sort_index()
            .items()
        },
        "confirmation": gwet_ac1(conf, ["yes", "no"]),
        "three_way": gwet_ac1(three, ["yes", "partly", "no"]),
        "prefix": gwet_ac1(prefix, ["yes", "mostly", "no"]),
        "slider": krippendorff_interval([list(g["slider"]) for g in groups]),
        "onset": {
            **krippendorff_interval(onsets),
            "pairs": pairs,
            "pairs_within_one": within / pairs if pairs else None,
        },
    }


def learning_thirds(df: pd.DataFrame) -> dict[str, Any]:
    """Onset accuracy (within one turn), true-instruction confirmation and foil confirmation in
    the first, middle and last third of each annotator's sequence (all of their judgments).

    Args:
        df: Judgments as returned by :func:`prepare` (``seq`` orders each annotator's sequence).

    Returns:
        ``{"first", "middle", "last": {"onset_within_one", "true_confirmed", "foil_confirmed"}}``,
        each value a :func:`rate` dict; thirds come from ``numpy.array_split``, so earlier thirds
        take the extra judgments.
    """
    third = np.zeros(len(df), int)
    for _, idx in df.groupby("annotator").groups.items():
        idx = df.loc[idx].sort_values("seq").index.to_numpy()
        for t, part in enumerate(np.array_split(idx, 3)):
            third[df.index.get_indexer(part)] = t
    d = df.assign(third=third)
    out = {}
    for t, name in enumerate(("first", "middle", "last")):
        g = d[d["third"] == t]
        true = g[g["is_fork"] & (g["cue_kind"] == CUE_TRUE)]
        onset = true[true["confirmed"] & true["onset_turn"].notna()]
        err = (onset["onset_turn"].astype(float) - onset["fork_turn"].astype(float)).abs()
        foils = g[g["cue_kind"] == CUE_FOIL]
        out[name] = {
            "onset_within_one": rate(int((err <= 1).sum()), len(err)),
            "true_confirmed": rate(int(true["confirmed"].sum()), len(true)),
            "foil_confirmed": rate(int(foils["confirmed"].sum()), len(foils)),
        }
    return out


def distance_correlation(
    conv: pd.DataFrame, distances: Mapping[str, Mapping[str, float]], n_boot: int = N_BOOT, seed: int = 0
) -> dict[str, Any]:
    """Spearman rho (bootstrap CI) between each method's distance mu(D+, D') and the perceived
    deviation 100 - mean slider, over the annotated forks that have a distance.

    Args:
        conv: One row per conversation, as returned by :func:`first_judgments`.
        distances: ``{method: {dialogue_id: distance}}``; a None distance is skipped.
        n_boot: Bootstrap resamples of each interval (default :data:`N_BOOT`, 10,000).
        seed: Seed of the bootstrap generators.

    Returns:
        ``{method: {"rho", "p": scipy's Spearman rho and two-sided p-value, "ci_low", "ci_high":
        percentile bootstrap bounds, "n": forks used}}``, methods sorted by name; rho, p and the
        bounds are None with fewer than three forks or when either variable is constant.
    """
    f = conv[conv["is_fork"]].set_index("dialogue_id")
    out = {}
    for method, dist in sorted(distances.items()):
        ids = [i for i in f.index if i in dist and dist[i] is not None]
        x = np.array([float(dist[i]) for i in ids])
        y = 100.0 - f.loc[ids, "mean_slider"].to_numpy(float) if ids else np.array([])
        if len(ids) < 3 or np.all(x == x[0]) or np.all(y == y[0]):
            out[method] = {"rho": None, "p": None, "ci_low": None, "ci_high": None, "n": len(ids)}
            continue
        r = stats.spearmanr(x, y)
        lo, hi = bootstrap_ci((x, y), spearman_rho, n_boot, seed)
        out[method] = {"rho": _f(r.statistic), "p": _f(r.pvalue), "ci_low": lo, "ci_high": hi, "n": len(ids)}
    return out


def analyse(
    judgments: Iterable[Mapping[str, Any]],
    distances: Mapping[str, Mapping[str, float]] | None = None,
    n_boot: int = N_BOOT,
    seed: int = 0,
    apply_exclusion: bool = True,
    min_forks: int = MIN_FORKS_PER_UNIT,
) -> dict[str, Any]:
    """All analyses of Appendix N as one JSON-able dict (see the module docstring).

    Args:
        judgments: The judgments, one mapping per completed assignment (see :func:`prepare`).
        distances: Optional ``{method: {dialogue_id: distance mu(D+, D')}}``; when given, the
            result has ``distance_correlation`` (Spearman rho with 100 - mean slider per method).
        n_boot: Bootstrap resamples of every interval.
        seed: Seed of the bootstrap generators (results are deterministic given it).
        apply_exclusion: Drop the annotators the foil criterion excludes (more than half of at
            least two conformant foils confirmed) before every other analysis; False keeps all.
        min_forks: Least number of forks (of the analysed types, covering positions 1..4) an
            (annotator, task) unit needs for its within-unit tau_b.

    Returns:
        A JSON-able dict with ``counts`` (judgments, conversations, annotators, forked,
        conformant, tasks), ``parameters`` (the arguments and exclusion thresholds),
        ``annotator_foils`` (per-annotator foil rates) and ``excluded_annotators``; when any
        judgment remains, also ``rq1`` (slider vs. fork position: tau_b, probability of
        superiority, mean sliders, for the breaking and for all types), ``rq2`` (cue
        confirmation rates and Fisher tests), ``rq3`` (onset-turn errors), ``rq4`` (prefix
        answers), ``agreement`` (AC1, Krippendorff's alpha) and ``learning`` (by thirds of each
        annotator's sequence), plus ``distance_correlation`` when ``distances`` is given.

    Raises:
        AnswersError: The judgments are malformed (from :func:`prepare`; every problem listed).
    """
    df = prepare(judgments)
    foils = annotator_foils(df)
    excluded = [f["annotator"] for f in foils if f["excluded"]] if apply_exclusion else []
    if excluded:
        logger.info("excluding annotators %s (foil criterion)", excluded)
        df = df[~df["annotator"].isin(excluded)].reset_index(drop=True)
    conv = first_judgments(df)
    res: dict[str, Any] = {
        "counts": {
            "judgments": len(df),
            "conversations": len(conv),
            "annotators": int(df["annotator"].nunique()),
            "forked": int(conv["is_fork"].sum()) if len(conv) else 0,
            "conformant": int((~conv["is_fork"]).sum()) if len(conv) else 0,
            "tasks": sorted(df["task"].unique().tolist()),
        },
        "parameters": {
            "n_boot": n_boot,
            "seed": seed,
            "min_forks_per_unit": min_forks,
            "apply_exclusion": apply_exclusion,
            "exclusion_min_conformant": EXCLUSION_MIN_CONFORMANT,
            "exclusion_max_rate": EXCLUSION_MAX_RATE,
        },
        "annotator_foils": foils,
        "excluded_annotators": excluded,
    }
    if len(df) == 0:
        return res
    res["rq1"] = rq1(df, conv, n_boot, seed, min_forks)
    res["rq2"] = rq2(conv)
    res["rq3"] = rq3(conv)
    res["rq4"] = rq4(conv)
    res["agreement"] = agreement(df)
    res["learning"] = learning_thirds(df)
    if distances:
        res["distance_correlation"] = distance_correlation(conv, distances, n_boot, seed)
    return res
