"""From a submission file to a stored result: validate -> score -> result JSON -> store.

These are the functions the CLI (``python -m leaderboard``), the Gradio Space (``app.py``) and
``make demo`` call. The gold is touched only inside :mod:`leaderboard.score`; a result holds
aggregates, the gold's revision hash and the submission's sha256, never gold rows.
"""

from __future__ import annotations

import logging
import os
import platform
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from . import score as _score
from .store import InvalidSubmitterError, ResultStore, check_submitter, result_key
from .validate import (
    DEFAULT_MAX_BYTES,
    BlindSet,
    Problem,
    SubmissionError,
    ValidationReport,
    public_metadata,
    schema_validator,
    validate_submission,
)

logger = logging.getLogger(__name__)

RESULT_SCHEMA = "dialfork-leaderboard-result"
PRIVATE_SCHEMA = "dialfork-leaderboard-private"
RESULT_SCHEMA_VERSION = 1


def package_version() -> str:
    """The version of the installed ``dialfork`` package, recorded in every result.

    Returns:
        The installed distribution's version, else ``dialfork_dataset.__version__`` (a source
        checkout that is not installed).
    """
    try:
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("dialfork")
        except PackageNotFoundError:
            pass
    except ImportError:  # pragma: no cover
        pass
    from dialfork_dataset import __version__

    return __version__


def blind_from_gold(gold: Mapping[str, Any]) -> BlindSet:
    """The public columns of the gold (ids, ``T``, pair ids): the same content as the blind set,
    for ``score`` runs without ``--blind``.

    Args:
        gold: The gold, as returned by :func:`leaderboard.score.load_gold`.

    Returns:
        A ``BlindSet`` of the Task 3 dialogue ids with their ``num_system_turns`` and the Task 2
        pair ids.
    """
    return BlindSet.from_rows(
        ({"dialogue_id": r["dialogue_id"], "num_system_turns": r["num_system_turns"]} for r in gold["task3"]),
        (r["pair_id"] for r in gold["task2"]),
        source="gold (public columns)",
    )


@dataclass
class Evaluation:
    """A validated and scored submission, not yet stored.

    Attributes:
        report: The validation report.
        scores: ``{"public": ..., "private": ...}`` scores of each subset.
        public: The public result JSON (without key and timestamp until stored).
        private: The private twin (the private subset's scores).
    """

    report: ValidationReport
    scores: dict[str, Any]  # {"public": ..., "private": ...}
    public: dict[str, Any]  # the public result JSON (without key / timestamp until stored)
    private: dict[str, Any]  # the private twin


def _configuration(track: str, max_bytes: int) -> dict[str, Any]:
    if track == "detector":
        from dialfork_metrics.task3.scorer import COMPONENT_FLOOR, SCORE_WEIGHTS

        return {
            "scorer": "dialfork_metrics.task3.scorer.score_predictions",
            "score_weights": list(SCORE_WEIGHTS),
            "component_floor": COMPONENT_FLOOR,
            "subsets": list(_score.SUBSETS),
            "max_bytes": max_bytes,
            "submission_schema": "detector_submission.v1.json",
        }
    return {
        "scorer": "leaderboard.score.score_metric",
        "statistic": "kendall tau-b vs (4,3,2,1) per unit",
        "undefined_tau": 0.0,
        "average": "mean of the per-type means",
        "subsets": list(_score.SUBSETS),
        "max_bytes": max_bytes,
        "submission_schema": "metric_submission.v1.json",
    }


def evaluate(
    submission: str | os.PathLike,
    *,
    track: str,
    gold: Mapping[str, Any] | str | os.PathLike,
    blind: BlindSet | str | os.PathLike | None = None,
    metadata: Mapping[str, Any] | str | os.PathLike | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    ci_resamples: int = _score.CI_RESAMPLES,
) -> Evaluation:
    """Validate ``submission`` and score it against the gold (nothing is stored).

    Args:
        submission: The submission file.
        track: ``"detector"`` or ``"metric"``.
        gold: A gold folder or the dict of ``dialfork_dataset.load_gold``.
        blind: A Hub layout folder or a ``BlindSet`` (default: the public columns of the gold). A
            folder's card must record this gold's revision.
        metadata: A dict, a path, or None for ``<name>.metadata.json``.
        max_bytes: Size cap of the file.
        ci_resamples: Bootstrap resamples of the interval stored next to the Score / Avg. tau
            (``score_ci`` / ``tau_ci``, 95% percentile interval, seed 0; 0 computes none).

    Returns:
        An ``Evaluation`` with ``report``, ``scores`` (public and private parts), ``public`` (the
        result as published) and ``private`` (its private twin).

    Raises:
        SubmissionError: The file or its metadata is invalid (every problem listed).
        GoldError: The blind folder's card names another gold revision.
    """
    gold_d = _score.load_gold(gold) if not isinstance(gold, Mapping) else gold
    if blind is None:
        blind_set = blind_from_gold(gold_d)
    elif isinstance(blind, BlindSet):
        blind_set = blind
    else:
        _score.check_gold_revision(blind, gold_d)  # the card's gold_revision must be this gold's
        blind_set = BlindSet.from_dir(blind)
    report = validate_submission(submission, track, blind_set, metadata=metadata, max_bytes=max_bytes)
    report.raise_for_errors()
    if track == "detector":
        scores = _score.score_detector(report.values, gold_d["task3"])
        cis = _score.detector_score_ci(report.values, gold_d["task3"], n_resamples=ci_resamples)
        ci_key = "score_ci"
    else:
        scores = _score.score_metric(report.values, gold_d["task2"])
        cis = _score.metric_tau_ci(report.values, gold_d["task2"], n_resamples=ci_resamples)
        ci_key = "tau_ci"
    for s, ci in cis.items():
        if scores.get(s) is not None and ci is not None:
            scores[s] = {**scores[s], ci_key: ci}
    md = dict(report.metadata or {})
    md.setdefault("track", track)
    public = {
        "schema": RESULT_SCHEMA,
        "schema_version": RESULT_SCHEMA_VERSION,
        "track": track,
        "method": md.get("method"),
        "metadata": public_metadata(md),
        "scores": {"public": scores["public"]},
        "private_scores": "withheld until the maintainers reveal them",
        "configuration": {
            **_configuration(track, max_bytes),
            "interval": {
                "method": "percentile bootstrap over " + ("dialogues" if track == "detector" else "units"),
                "level": _score.CI_LEVEL,
                "resamples": ci_resamples,
                "seed": _score.CI_SEED,
            },
        },
        "submission": {"sha256": report.sha256, "bytes": report.n_bytes, **report.summary},
        "blind_revision": blind_set.revision(),
        "gold_revision": gold_d["manifest"]["revision"],
        "package_version": package_version(),
        "python": platform.python_version(),
    }
    private = {
        "schema": PRIVATE_SCHEMA,
        "schema_version": RESULT_SCHEMA_VERSION,
        "track": track,
        "scores": {"private": scores["private"]},
        "contact": md.get("contact"),
        "submission_sha256": report.sha256,
        "gold_revision": gold_d["manifest"]["revision"],
    }
    return Evaluation(report=report, scores=scores, public=public, private=private)


@dataclass
class Stored:
    """A submission once stored (returned by :func:`submit`).

    Attributes:
        key: The result's key in the store.
        result: The public result as stored (with ``submitter``, ``key`` and ``submitted_at``).
        evaluation: The evaluation it was made from.
    """

    key: str
    result: dict[str, Any]
    evaluation: Evaluation


def submit(
    submission: str | os.PathLike,
    *,
    track: str,
    gold: Mapping[str, Any] | str | os.PathLike,
    store: ResultStore,
    submitter: str | None = None,
    blind: BlindSet | str | os.PathLike | None = None,
    metadata: Mapping[str, Any] | str | os.PathLike | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    now: datetime | None = None,
    ci_resamples: int = _score.CI_RESAMPLES,
) -> Stored:
    """Validate, score and store one submission.

    The rate limit is checked before scoring, and again by the store when writing.

    Args:
        submission: The submission file.
        track: ``"detector"`` or ``"metric"``.
        gold: A gold folder or the dict of ``dialfork_dataset.load_gold``.
        store: Where results go: ``LocalStore(root)`` or ``HubStore(repo_id, ...)``.
        submitter: Overrides the metadata's ``submitter`` (the Space passes the logged-in user).
        blind: A Hub layout folder or a ``BlindSet`` (default: from the gold).
        metadata: A dict, a path, or None for ``<name>.metadata.json``.
        max_bytes: Size cap of the file.
        now: The submission time (default: the store's clock; naive times are UTC).
        ci_resamples: Bootstrap resamples of the stored interval.

    Returns:
        A ``Stored`` with the stored ``key``, the public ``result`` and the ``evaluation``.

    Raises:
        SubmissionError: The file, its metadata or the submitter name is invalid.
        RateLimitError: The submitter reached ``max_per_day`` results today (UTC).
        ResultExistsError: A result with the same key exists (results are immutable).
        ValueError: No submitter is given, neither as an argument nor in the metadata.
    """
    now = now or store.clock()
    if now.tzinfo is None:
        now = now.replace(tzinfo=timezone.utc)
    if submitter is not None:  # cheap checks first: do not score what cannot be stored
        try:
            check_submitter(submitter)
        except InvalidSubmitterError as e:
            raise SubmissionError(
                ValidationReport(
                    path=str(submission),
                    track=track,
                    errors=[Problem("bad_submitter", str(e), field="submitter")],
                )
            ) from None
        store.check_rate_limit(submitter, now)
    ev = evaluate(
        submission,
        track=track,
        gold=gold,
        blind=blind,
        metadata=metadata,
        max_bytes=max_bytes,
        ci_resamples=ci_resamples,
    )
    who = submitter or (ev.report.metadata or {}).get("submitter")
    if not who:
        raise ValueError("no submitter: pass --submitter NAME or set 'submitter' in the metadata")
    check_submitter(who)
    store.check_rate_limit(who, now)
    key = result_key(who, ev.public["method"], now)
    public = {
        **ev.public,
        "submitter": who,
        "key": key,
        "submitted_at": now.astimezone(timezone.utc).isoformat(),
    }
    public["metadata"] = {**public["metadata"], "submitter": who}
    private = {**ev.private, "submitter": who, "key": key}
    bad = [e.message for e in schema_validator("result").iter_errors(public)]
    if bad:  # a bug, not a submitter error: never store a malformed result
        raise RuntimeError(f"internal error: the result does not match result.v1.json: {bad}")
    stored_key = store.put(who, ev.public["method"], public, private, now=now)
    return Stored(key=stored_key, result=public, evaluation=ev)


def demo_round_trip(
    predictions: Mapping[str, int | None],
    *,
    blind: str | os.PathLike,
    gold: str | os.PathLike,
    out_dir: str | os.PathLike,
    metadata: Mapping[str, Any],
    submitter: str = "demo",
    max_per_day: int = 1000,
) -> dict[str, Any]:
    """What ``make demo`` ends with: write ``predictions`` as a submission file (+ metadata),
    validate it against the blind set, score and store it in ``out_dir/store``, render
    ``out_dir/site/index.html``. Returns the paths, the stored key and the public result.

    Args:
        predictions: ``{blind dialogue_id: predicted system turn, or None}`` for the detector
            track.
        blind: The Hub layout holding the blind set.
        gold: The gold folder of the same export.
        out_dir: The demo's output folder (created if missing).
        metadata: The submission's metadata object (written next to the file).
        submitter: The submitter id the result is stored under.
        max_per_day: The local store's daily limit (high, so that demo reruns are not refused).

    Returns:
        ``{"submission", "metadata", "page"}`` (paths), ``"key"`` (the stored result's key),
        ``"result"`` (the public result) and ``"validation"`` (the validation summary).

    Raises:
        SubmissionError: The predictions or metadata do not validate against the blind set.
        GoldError: The blind folder's card names another gold revision.
        RateLimitError: ``submitter`` already stored ``max_per_day`` results today in
            ``out_dir/store``.
    """
    from pathlib import Path

    from .render import render_site
    from .store import LocalStore
    from .synthetic import write_predictions

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sub = write_predictions(predictions, out / "submission.jsonl")
    md_path = out / "submission.metadata.json"
    from dialfork_dataset.jsonl import write_json_atomic

    write_json_atomic(md_path, dict(metadata))
    report = validate_submission(sub, "detector", BlindSet.from_dir(blind), metadata=md_path)
    report.raise_for_errors()
    store = LocalStore(out / "store", max_per_day=max_per_day)
    st = submit(
        sub, track="detector", gold=gold, blind=blind, store=store, submitter=submitter, metadata=md_path
    )
    page = render_site(out / "store" / "results", out / "site")
    logger.info(
        "demo submission %s: public Score %s; page %s",
        st.key,
        st.result["scores"]["public"].get("score"),
        page,
    )
    return {
        "submission": sub,
        "metadata": md_path,
        "key": st.key,
        "result": st.result,
        "page": page,
        "validation": report.summary,
    }


__all__ = [
    "Evaluation",
    "Stored",
    "SubmissionError",
    "blind_from_gold",
    "demo_round_trip",
    "evaluate",
    "package_version",
    "submit",
]
