"""How large a blind set must be for a cheat's gap over its matched Random to become significant.

The audit's test (:func:`.scoring._detector_result`): a cheat's predictions are dealt to randomly
chosen blind dialogues (:meth:`.scoring._Detector.matched`, 400 draws); its p-value is the share of
those draws scoring at least the cheat (add-one). On a small blind set the draws spread widely and
a large gap can pass for chance (issue 37: the sibling cheat's 69.1 against a matched Random of
38.0 on 24 dialogues, p = 0.12). :func:`significant_size` runs that same test on the blind set
enlarged by repeating it, whole copies with their predictions: the cheat's Score stays what it is,
and the matched Random draws are dealt over more dialogues of the same kind, as they would be on a
larger blind set drawn the same way.

``python -m leaderboard.leakcheck.power HUB GOLD [--alpha 0.05]``: the sibling cheat on a layout's
blind set, and the size at which its gap becomes significant.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from .report import ALPHA, RANDOM_DRAWS

logger = logging.getLogger("leaderboard.leakcheck")


def tiled(
    gold3: Sequence[Mapping[str, Any]], predictions: Mapping[str, int | None], n: int
) -> tuple[list[dict[str, Any]], dict[str, int | None]]:
    """A blind set of ``n`` dialogues made by repeating ``gold3``, and the predictions with it.

    Args:
        gold3: The gold's Task 3 rows (``dialogue_id``, ``num_system_turns``,
            ``hallucination_type``, ``fork_turn``).
        predictions: ``{dialogue_id: turn or None}``; a dialogue absent gets Random's guess when
            scored (the audit's fallback), in every copy.
        n: The size wanted (>= 1).

    Returns:
        ``(rows, predictions)``: row ``i`` is ``gold3[i % N]`` with the id ``"<id>#<i // N>"``;
        the predictions of the copies under the same ids.

    Raises:
        ValueError: ``gold3`` is empty or ``n`` is below 1.
    """
    if not gold3:
        raise ValueError("tiled: the gold has no row to repeat")
    if n < 1:
        raise ValueError(f"tiled: the size must be >= 1, got {n}")
    rows, preds = [], {}
    for i in range(n):
        g = gold3[i % len(gold3)]
        did = f"{g['dialogue_id']}#{i // len(gold3)}"
        rows.append({**g, "dialogue_id": did})
        if g["dialogue_id"] in predictions:
            preds[did] = predictions[g["dialogue_id"]]
    return rows, preds


def gap_at(
    gold3: Sequence[Mapping[str, Any]],
    predictions: Mapping[str, int | None],
    n: int,
    draws: int = RANDOM_DRAWS,
    seed: int = 0,
) -> dict[str, float]:
    """The audit's test of ``predictions`` on the blind set repeated to ``n`` dialogues (:func:`tiled`).

    Args:
        gold3: The gold's Task 3 rows.
        predictions: ``{dialogue_id: turn or None}`` (absent: Random's guess).
        n: The blind-set size.
        draws: Random draws (the audit's :data:`~.report.RANDOM_DRAWS`).
        seed: Seed of the draws (the audit's default 0).

    Returns:
        ``{"n", "value", "control", "margin", "p_value"}``: the cheat's Score, its matched Random's
        mean, their difference and the p-value, as :func:`.scoring._detector_result` computes them.
    """
    from .scoring import _Detector, _detector_result

    rows, preds = tiled(gold3, predictions, n)
    res = _detector_result("", _Detector(rows, draws, seed), preds, "")
    return {
        "n": n,
        "value": float(res.value),
        "control": float(res.control),
        "margin": float(res.margin),
        "p_value": float(res.p_value),
    }


def significant_size(
    gold3: Sequence[Mapping[str, Any]],
    predictions: Mapping[str, int | None],
    alpha: float = ALPHA,
    draws: int = RANDOM_DRAWS,
    seed: int = 0,
    max_copies: int = 40,
) -> dict[str, Any]:
    """The smallest blind-set size at which the audit's test finds the cheat's gap significant,
    in whole copies of the measured set (1, 2, ... up to ``max_copies``): a partial copy would
    change the set's mix of conformant dialogues and forks, hence the cheat's Score, not only the
    size.

    Args:
        gold3: The gold's Task 3 rows of the measured blind set (N rows).
        predictions: The cheat's ``{dialogue_id: turn or None}`` on it.
        alpha: The significance level (the audit fails a cheat at :data:`~.report.ALPHA`, 0.01).
        draws: Random draws per test (at least ``1 / alpha``).
        seed: Seed of the draws.
        max_copies: The largest number of copies tried.

    Returns:
        ``{"measured": gap_at(N), "size": the smallest multiple of N with p < alpha (None when
        even max_copies copies do not reach it), "at_size": gap_at(size) or None, "alpha": alpha}``.

    Raises:
        ValueError: ``alpha`` is not in (0, 1), ``draws`` is below ``1 / alpha``, ``max_copies``
            is below 1, or as :func:`tiled`.
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"significant_size: alpha must be in (0, 1), got {alpha}")
    if draws < round(1 / alpha):
        raise ValueError(
            f"significant_size: a p-value below {alpha} needs at least {round(1 / alpha)} draws, got {draws}"
        )
    if max_copies < 1:
        raise ValueError(f"significant_size: max_copies must be >= 1, got {max_copies}")
    N = len(gold3)
    measured = gap_at(gold3, predictions, N, draws, seed)
    out: dict[str, Any] = {"measured": measured, "size": None, "at_size": None, "alpha": alpha}
    if measured["p_value"] < alpha:
        out["size"], out["at_size"] = N, measured
        return out
    for m in range(2, max_copies + 1):
        r = gap_at(gold3, predictions, m * N, draws, seed)
        logger.info("significant_size: %d dialogues: p = %.4f", m * N, r["p_value"])
        if r["p_value"] < alpha:
            out["size"], out["at_size"] = m * N, r
            return out
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m leaderboard.leakcheck.power HUB GOLD``: the sibling cheat on HUB's blind set
    (:func:`.attacks.sibling_attack`'s stronger rule) and :func:`significant_size` at ``--alpha``
    and at the audit's own level.

    Args:
        argv: The command-line arguments (None: ``sys.argv[1:]``).

    Returns:
        The exit status (0; 2 on bad input).
    """
    import sys
    from pathlib import Path

    from .attacks import SINGLETON_RULES, sibling_predictions
    from .report import BLIND
    from .scoring import _Detector, _detector_result, _read_config

    ap = argparse.ArgumentParser(
        prog="python -m leaderboard.leakcheck.power", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("hub", help="the Hub layout (data/blind)")
    ap.add_argument("gold", help="the gold folder of the same export")
    ap.add_argument(
        "--alpha",
        type=float,
        action="append",
        default=None,
        help=f"significance level(s) (repeatable; default 0.05 and the audit's {ALPHA})",
    )
    ap.add_argument("--seed", type=int, default=0, help="seed of the Random draws (default 0, the audit's)")
    a = ap.parse_args(argv)
    from dialfork_dataset.hub import load_gold

    blind = _read_config(Path(a.hub) / "data" / BLIND)
    if not blind:
        print(
            f"error: {a.hub}/data/{BLIND}: no parquet files; HUB must be a DialFork Hub layout",
            file=sys.stderr,
        )
        return 2
    try:
        gold3 = load_gold(a.gold)["task3"]
    except (FileNotFoundError, ValueError) as e:
        print(f"error: GOLD {a.gold}: {e}", file=sys.stderr)
        return 2
    det = _Detector(gold3, RANDOM_DRAWS, a.seed)
    best = max(
        ((rule, sibling_predictions(blind, singletons=rule)) for rule in SINGLETON_RULES),
        key=lambda rk: _detector_result("", _Detector(gold3, RANDOM_DRAWS, a.seed), rk[1], "").margin,
    )
    rule, known = best
    res = _detector_result("", det, known, "")
    print(
        f"sibling grouping ({rule} singletons) on {len(blind)} blind dialogues: Score {res.value:.1f}, "
        f"matched Random {res.control:.1f}, p = {res.p_value:.3f}"
    )
    for alpha in a.alpha or [0.05, ALPHA]:
        s = significant_size(gold3, known, alpha=alpha, seed=a.seed)
        if s["size"] is None:
            print(f"alpha {alpha}: not significant up to {40 * len(blind)} dialogues")
        else:
            r = s["at_size"]
            print(
                f"alpha {alpha}: significant from {s['size']} blind dialogues "
                f"(Score {r['value']:.1f}, matched Random {r['control']:.1f}, p = {r['p_value']:.3g})"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
