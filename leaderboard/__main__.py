"""``python -m leaderboard`` (console script ``dialfork-leaderboard``).

    validate SUBMISSION --track detector --blind DIR [--metadata M] [--json] [--max-bytes N]
    score    SUBMISSION --gold GOLD [--track detector] [--blind DIR] [--metadata M] [--json]
             [--results STORE_DIR | --hub-repo OWNER/NAME] [--submitter NAME] [--max-per-day N]
    render   --results DIR [DIR ...] --out site/ [--private DIR --reveal-private] [--title T]
    audit    HUB --gold GOLD [--star STAR] [--regen-seeds N] [--json] [--out REPORT.json]

Exit status: 0 on success, 1 when the submission is invalid (every problem is listed), 2 on a
usage error, 3 when the rate limit is reached or a result already exists. ``audit`` exits 1 when a
cheat beats the thresholds (SPEC section 4).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

EXIT_INVALID = 1
EXIT_USAGE = 2
EXIT_REFUSED = 3


def _add_common(p: argparse.ArgumentParser) -> None:
    from .validate import DEFAULT_MAX_BYTES

    p.add_argument("submission", help="the submission file (JSON Lines)")
    p.add_argument("--track", choices=("detector", "metric"), default="detector",
                   help="detector = Task 3 predictions, metric = Task 2 distances (default: detector)")
    p.add_argument("--metadata", default=None,
                   help="metadata JSON (default: <submission stem>.metadata.json next to the submission)")
    p.add_argument("--max-bytes", type=int, default=DEFAULT_MAX_BYTES,
                   help=f"size cap of the submission file (default: {DEFAULT_MAX_BYTES})")
    p.add_argument("--json", action="store_true", help="print a machine-readable report on stdout")


def build_parser() -> argparse.ArgumentParser:
    from dialfork_dataset.console import add_verbosity_options, prog_name, state_defaults

    ap = argparse.ArgumentParser(prog=prog_name("leaderboard"), description="DialFork leaderboard: validate, score, render.")
    add_verbosity_options(ap, default="WARNING")
    sub = ap.add_subparsers(dest="command", required=True)

    v = sub.add_parser("validate", help="check a submission file offline (no gold needed)")
    _add_common(v)
    v.add_argument("--blind", required=True,
                   help="Hub layout folder holding data/blind (and data/blind_task2), or a Hub dataset id")
    v.add_argument("--no-metadata", action="store_true", help="validate the predictions only, without metadata")
    v.add_argument("--max-errors", type=int, default=None, help="list at most N errors in the text report")

    s = sub.add_parser("score", help="validate, score against the gold and (optionally) store the result")
    _add_common(s)
    s.add_argument("--gold", required=True, help="gold folder (task3_gold.jsonl, task2_gold.jsonl, gold_manifest.json)")
    s.add_argument("--blind", default=None, help="Hub layout folder (default: the public columns of the gold)")
    s.add_argument("--results", default=None, help="local results store to write to (results/ and private/ inside)")
    s.add_argument("--hub-repo", default=None, help="Hub dataset repo of the results (private twins go to <repo>-private)")
    s.add_argument("--hub-private-repo", default=None, help="Hub dataset repo of the private twins")
    s.add_argument("--submitter", default=None,
                   help="the maintainers' path: store the result under this submitter id (default: the metadata's "
                        "'submitter'); on the Space the id is the logged-in Hugging Face account")
    s.add_argument("--max-per-day", type=int, default=None, help="rate limit per submitter per UTC day")

    r = sub.add_parser("render", help="write the static leaderboard page")
    r.add_argument("--results", nargs="+", required=True, help="results folder(s) (a store's results/ or the store root)")
    r.add_argument("--out", required=True, help="output folder (index.html is written inside) or .html file")
    r.add_argument("--private", default=None, help="the store's private area (for --reveal-private)")
    r.add_argument("--reveal-private", action="store_true", help="show the private scores (maintainers only)")
    r.add_argument("--title", default="DialFork leaderboard", help="page title")

    au = sub.add_parser("audit", help="try the known cheats on a Hub layout and score them against its gold")
    au.add_argument("hub", help="Hub layout folder (python -m dialfork_dataset export)")
    au.add_argument("--gold", required=True, help="its gold folder")
    au.add_argument("--star", default=None,
                    help="STAR folder for the regeneration attack (default: $DIALFORK_STAR_DIR; skipped without)")
    au.add_argument("--regen-seeds", type=int, default=10, metavar="N", help="public seeds 0..N-1 to regenerate with (default: 10)")
    au.add_argument("--regen-scenarios", type=int, default=None, metavar="N",
                    help="scenarios per task to regenerate (default 64, the first by STAR id)")
    au.add_argument("--json", action="store_true", help="print the report as JSON")
    au.add_argument("--out", default=None, help="also write the JSON report to this file")
    return state_defaults(ap)


def _print_json(obj: Any) -> None:
    print(json.dumps(obj, ensure_ascii=False, indent=2, allow_nan=False))


def _cmd_validate(a: argparse.Namespace) -> int:
    from .validate import validate_submission

    blind = _blind_set(a.blind)
    rep = validate_submission(a.submission, a.track, blind, metadata=a.metadata,
                              require_metadata=not a.no_metadata, max_bytes=a.max_bytes)
    if a.json:
        _print_json(rep.to_dict())
    else:
        print(rep.format_text(max_errors=a.max_errors), file=sys.stdout if rep.ok else sys.stderr)
    return 0 if rep.ok else EXIT_INVALID


def _blind_set(src: str):
    """The blind sets of a Hub layout folder, or of a Hub dataset id (as ``task3``/``bench`` take)."""
    from dialfork_dataset.hub import load_split, resolve_data

    from .validate import BlindSet

    if resolve_data(src, accept=("layout", "hub"), option="--blind").is_local:
        return BlindSet.from_dir(src)

    try:
        rows = load_split(src, "blind", split="test")
        pairs = load_split(src, "blind_task2", split="test")
    except Exception as e:  # noqa: BLE001 - the Hub client's errors (offline, missing repo) are many
        raise ValueError(f"--blind {src!r}: not a Hub layout folder, and loading it as a Hub dataset id failed "
                         f"({type(e).__name__}: {e})") from e
    return BlindSet.from_rows(rows, pairs, source=src)


def _fmt_scores(track: str, scores: dict[str, Any] | None) -> str:
    if scores is None:
        return "  (no dialogues in this part)"
    if track == "detector":
        from dialfork_metrics.task3.scorer import format_table

        return "\n".join("  " + ln for ln in format_table(scores).splitlines())
    types = " ".join(f"{h}={v:.3f}" for h, v in scores["tau_by_type"].items())
    return (f"  Avg tau={scores['tau']:.3f}  ({types})  exact recovery={100 * scores['exact_recovery']:.1f}%  "
            f"units={scores['counts']['units']}")


def _cmd_score(a: argparse.Namespace) -> int:
    from .store import DEFAULT_MAX_PER_DAY, HubStore, LocalStore, RateLimitError, ResultExistsError
    from .submissions import evaluate, submit
    from .validate import SubmissionError

    if a.results and a.hub_repo:
        print("error: give --results or --hub-repo, not both", file=sys.stderr)
        return EXIT_USAGE
    from dialfork_dataset.hub import resolve_data

    resolve_data(a.gold, accept=("gold",), option="--gold")
    if a.blind is not None:
        resolve_data(a.blind, accept=("layout",), option="--blind")
    store = None
    per_day = a.max_per_day if a.max_per_day is not None else DEFAULT_MAX_PER_DAY
    if a.results:
        store = LocalStore(a.results, max_per_day=per_day)
    elif a.hub_repo:
        store = HubStore(a.hub_repo, private_repo_id=a.hub_private_repo, max_per_day=per_day, create=True)
    try:
        if store is None:
            ev = evaluate(a.submission, track=a.track, gold=a.gold, blind=a.blind, metadata=a.metadata,
                          max_bytes=a.max_bytes)
            result, key = ev.public, None
        else:
            st = submit(a.submission, track=a.track, gold=a.gold, blind=a.blind, metadata=a.metadata,
                        max_bytes=a.max_bytes, store=store, submitter=a.submitter)
            result, key = st.result, st.key
    except SubmissionError as e:
        if a.json:
            _print_json(e.report.to_dict())
        else:
            print(e.report.format_text(), file=sys.stderr)
        return EXIT_INVALID
    except (RateLimitError, ResultExistsError) as e:
        print(f"refused: {e}", file=sys.stderr)
        return EXIT_REFUSED
    if a.json:
        _print_json(result)
    else:
        print(f"{a.submission}: public score ({a.track} track)")
        print(_fmt_scores(a.track, result["scores"]["public"]))
        print("private score: withheld until the maintainers reveal it")
        print(f"gold revision {result['gold_revision'][:12]}, submission sha256 {result['submission']['sha256'][:12]}")
        if key:
            print(f"stored as {key}")
    return 0


def _cmd_audit(a: argparse.Namespace) -> int:
    import os

    from .audit import DEFAULT_REGEN_SCENARIOS_PER_TASK, run_audit

    if a.regen_seeds < 0:
        print("error: --regen-seeds must be >= 0", file=sys.stderr)
        return EXIT_USAGE
    from dialfork_dataset.hub import resolve_data

    resolve_data(a.hub, accept=("layout",), option="HUB")
    resolve_data(a.gold, accept=("gold",), option="--gold")
    rep = run_audit(a.hub, a.gold, star=a.star or os.environ.get("DIALFORK_STAR_DIR") or None,
                    regen_seeds=tuple(range(a.regen_seeds)),
                    regen_scenarios_per_task=a.regen_scenarios or DEFAULT_REGEN_SCENARIOS_PER_TASK)
    if a.out:
        from dialfork_dataset.jsonl import write_json_atomic

        write_json_atomic(a.out, rep.to_dict())
    if a.json:
        _print_json(rep.to_dict())
    else:
        print(rep.format_text())
    return 0 if rep.ok else EXIT_INVALID


def _cmd_render(a: argparse.Namespace) -> int:
    from .render import render_site

    dirs = []
    for d in a.results:
        p = Path(d)
        if not p.is_dir():
            print(f"error: --results {d}: no such folder (give a results store or its results/ folder)",
                  file=sys.stderr)
            return EXIT_USAGE
        dirs.append(p / "results" if (p / "results").is_dir() else p)
    priv = a.private
    if a.reveal_private and priv is None:
        cand = [Path(d) / "private" for d in a.results if (Path(d) / "private").is_dir()]
        if not cand:
            print("error: --reveal-private needs --private DIR (the store's private area)", file=sys.stderr)
            return EXIT_USAGE
        priv = cand[0]
    out = render_site(dirs, a.out, private_dir=priv, reveal_private=a.reveal_private, title=a.title)
    print(f"wrote {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    from dialfork_dataset.console import console

    a = build_parser().parse_args(argv)
    with console(a.verbose, a.quiet, default=logging.WARNING):
        return _run(a)


def _run(a: argparse.Namespace) -> int:
    try:
        if a.command == "validate":
            return _cmd_validate(a)
        if a.command == "score":
            return _cmd_score(a)
        if a.command == "audit":
            return _cmd_audit(a)
        return _cmd_render(a)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
