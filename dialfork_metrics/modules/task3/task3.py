"""DialFork Task 3 as an `evaluate` metric: score first-deviating-turn predictions (SPEC section 8).

Thin wrapper over :func:`dialfork_metrics.task3.score_predictions`. Predictions are checked
*before* evaluate casts them to integers, with the leaderboard's own check
(:func:`dialfork_metrics.task3.rows.check_prediction`): ``3.0``, ``True``, ``"3"`` or an index
outside ``1..T`` are errors here exactly as in a leaderboard submission, with the same words.
"""

import datasets
import evaluate

from dialfork_metrics.modules import RejectEmpty, metric_info  # From: dialfork
from dialfork_metrics.task3.rows import check_predictions  # From: dialfork
from dialfork_metrics.task3.scorer import PredictionError, score_predictions  # From: dialfork

_DESCRIPTION = """\
DialFork Task 3 (turn prediction): at which system turn does a dialogue first go off its workflow?
Each prediction is a system turn index (1..T) or None ("no deviation"). Forked dialogues are scored
by the mean absolute error to the fork turn over flagged forks (MAE_h) and the share flagged (cov_h);
conformant dialogues by the mean |(T+1) - prediction| over flagged ones (MAE_c) and the false-alarm
rate (cov_c). Score = 100 * weighted geometric mean of (1 - MAE_h/MAE_h_ref, 1 - MAE_c/MAE_c_ref,
cov_h, 1 - cov_c) with weights (0.35, 0.35, 0.15, 0.15); the references are the always-last and
always-first predictors on the same gold set.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions: one system turn index (int, 1..T) or None per dialogue. Floats (even 3.0),
        booleans and strings are refused, as on the leaderboard (PredictionError, a ValueError,
        listing every bad row: "row i: ...").
    references: one gold row per dialogue: {"num_system_turns": T, "hallucination_type": None for a
        conformant dialogue else "WIC"/"SSPC"/"GR"/"CSC", "fork_turn": t_k or None}. Errors name the
        row ("row i"). To score files keyed by dialogue id, use dialfork_metrics.task3.score_predictions.
Returns:
    task3: the Score (0..100; None when the references lack forked or conformant dialogues),
    components (a1..a4), mae_h, mae_h_by_type, cov_h, cov_h_by_type, mae_c, cov_c, mae_h_ref,
    mae_c_ref, weights and counts (coverages are fractions in [0, 1]).
Examples:
    >>> import dialfork_metrics
    >>> task3 = dialfork_metrics.load("task3")
    >>> refs = [
    ...     {"num_system_turns": 5, "hallucination_type": None, "fork_turn": None},
    ...     {"num_system_turns": 4, "hallucination_type": None, "fork_turn": None},
    ...     {"num_system_turns": 6, "hallucination_type": "WIC", "fork_turn": 1},
    ...     {"num_system_turns": 6, "hallucination_type": "SSPC", "fork_turn": 3},
    ...     {"num_system_turns": 8, "hallucination_type": "GR", "fork_turn": 7},
    ...     {"num_system_turns": 4, "hallucination_type": "CSC", "fork_turn": 2},
    ... ]
    >>> r = task3.compute(predictions=[None, 3, 2, 3, None, 4], references=refs)
    >>> round(r["task3"], 2), r["mae_h"], r["cov_h"], r["mae_c"], r["cov_c"]
    (59.99, 1.0, 0.75, 2.0, 0.5)
"""

_GOLD_FIELDS = {
    "num_system_turns": datasets.Value("int32"),
    # large_string: evaluate's string-type check rejects None (a conformant dialogue) for "string"
    "hallucination_type": datasets.Value("large_string"),
    "fork_turn": datasets.Value("int32"),
}


def _turns(references):
    if references is None:
        return None
    return [r.get("num_system_turns") if isinstance(r, dict) else None for r in references]


class Task3(RejectEmpty, evaluate.Metric):
    """Task 3 Score; rows are checked with the leaderboard's rules before evaluate stores them."""

    _rows_seen = 0
    _module, _row = "task3", "(prediction, gold row) pair"

    def _check(self, predictions, references):
        errors = check_predictions(list(predictions), _turns(references), start=self._rows_seen)
        if errors:
            self._rows_seen = 0
            raise PredictionError(errors)
        self._rows_seen += len(predictions)

    def add_batch(self, *, predictions=None, references=None, **kwargs):
        """Check a batch of predictions with the leaderboard's rules, then add it."""
        if predictions is not None:
            self._check(predictions, references)
        return super().add_batch(predictions=predictions, references=references, **kwargs)

    def add(self, *, prediction=None, reference=None, **kwargs):
        """Check one prediction with the leaderboard's rules, then add it."""
        self._check([prediction], None if reference is None else [reference])
        return super().add(prediction=prediction, reference=reference, **kwargs)

    def compute(self, *, predictions=None, references=None, **kwargs):
        """Check the predictions with the leaderboard's rules, then compute the Task 3 Score."""
        try:
            return super().compute(predictions=predictions, references=references, **kwargs)
        finally:
            self._rows_seen = 0

    def _info(self):
        return metric_info(
            _DESCRIPTION,
            _KWARGS_DESCRIPTION,
            datasets.Features({"predictions": datasets.Value("int32"), "references": dict(_GOLD_FIELDS)}),
        )

    def _compute(self, predictions, references):
        gold = []
        for i, r in enumerate(references):
            gold.append(
                {
                    "dialogue_id": f"row {i}",
                    "num_system_turns": r["num_system_turns"],
                    "hallucination_type": r["hallucination_type"],
                    "fork_turn": r["fork_turn"],
                }
            )
        preds = [
            {"dialogue_id": g["dialogue_id"], "prediction": None if p is None else int(p)}
            for g, p in zip(gold, predictions)
        ]
        result = score_predictions(preds, gold)
        return {"task3": result["score"], **result}
