"""``python -m leaderboard`` (console script ``dialfork-leaderboard``).

    validate SUBMISSION --track detector --blind DIR [--metadata M] [--json] [--max-bytes N]
    score    SUBMISSION --gold GOLD [--track detector] [--blind DIR] [--metadata M] [--json]
             [--results STORE_DIR | --hub-repo OWNER/NAME] [--submitter NAME] [--max-per-day N]
    render   --results DIR [DIR ...] --out site/ [--private DIR --reveal-private] [--title T] [--audit REPORT]
    audit    HUB --gold GOLD [--star STAR] [--regen-seeds N] [--plumbing-only] [--honest PRED.jsonl ...]
             [--json] [--out REPORT.json]
    export   SRC DEST [--hidden DIR] [--key-file KEY] [--gold-dir GOLD] [--star STAR] [--plumbing-only]
             [--require-conformant] [--no-audit] ...

Exit status, the toolkit's convention (docs/leaderboard.md): 0 on success; 2 on bad input, an
invalid submission (every problem is listed) as well as a usage error or a missing file, as every
DialFork CLI; 1 when a check ran and failed (``audit``: a cheat beats the thresholds, SPEC section
4; ``export``: the audit of the release failed, nothing is published); 3 when the rate limit is
reached or a result already exists. ``export`` writes a release's Hub layout
(:func:`dialfork_dataset.hub.export_hub_layout`) and runs the audit on it before publishing.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

#: Bad input: an invalid submission, like a usage error (the toolkit's one convention for bad input).
EXIT_INVALID = 2
EXIT_USAGE = 2
#: A check ran and failed (the audit).
EXIT_FAILED = 1
EXIT_REFUSED = 3


def _add_common(p: argparse.ArgumentParser) -> None:
    from .validate import DEFAULT_MAX_BYTES

    p.add_argument("submission", help="the submission file (JSON Lines)")
    p.add_argument(
        "--track",
        choices=("detector", "metric"),
        default="detector",
        help="detector = Task 3 predictions, metric = Task 2 distances (default: detector)",
    )
    p.add_argument(
        "--metadata",
        default=None,
        help="metadata JSON (default: <submission stem>.metadata.json next to the submission)",
    )
    p.add_argument(
        "--max-bytes",
        type=int,
        default=DEFAULT_MAX_BYTES,
        help=f"size cap of the submission file (default: {DEFAULT_MAX_BYTES})",
    )
    p.add_argument("--json", action="store_true", help="print a machine-readable report on stdout")


def build_parser() -> argparse.ArgumentParser:
    from dialfork_dataset.console import add_verbosity_options, prog_name, state_defaults

    ap = argparse.ArgumentParser(
        prog=prog_name("leaderboard"),
        description="DialFork leaderboard: validate, score, render, audit, export.",
    )
    add_verbosity_options(ap, default="WARNING")
    sub = ap.add_subparsers(dest="command", required=True)

    v = sub.add_parser("validate", help="check a submission file offline (no gold needed)")
    _add_common(v)
    v.add_argument(
        "--blind",
        required=True,
        help="Hub layout folder holding data/blind (and data/blind_task2), or a Hub dataset id",
    )
    v.add_argument(
        "--no-metadata", action="store_true", help="validate the predictions only, without metadata"
    )
    v.add_argument("--max-errors", type=int, default=None, help="list at most N errors in the text report")

    s = sub.add_parser("score", help="validate, score against the gold and (optionally) store the result")
    _add_common(s)
    s.add_argument(
        "--gold", required=True, help="gold folder (task3_gold.jsonl, task2_gold.jsonl, gold_manifest.json)"
    )
    s.add_argument(
        "--blind", default=None, help="Hub layout folder (default: the public columns of the gold)"
    )
    s.add_argument(
        "--results", default=None, help="local results store to write to (results/ and private/ inside)"
    )
    s.add_argument(
        "--hub-repo",
        default=None,
        help="Hub dataset repo of the results (private twins go to <repo>-private)",
    )
    s.add_argument("--hub-private-repo", default=None, help="Hub dataset repo of the private twins")
    s.add_argument(
        "--submitter",
        default=None,
        help="the maintainers' path: store the result under this submitter id (default: the metadata's "
        "'submitter'); on the Space the id is the logged-in Hugging Face account",
    )
    s.add_argument("--max-per-day", type=int, default=None, help="rate limit per submitter per UTC day")

    r = sub.add_parser("render", help="write the static leaderboard page")
    r.add_argument(
        "--results", nargs="+", required=True, help="results folder(s) (a store's results/ or the store root)"
    )
    r.add_argument("--out", required=True, help="output folder (index.html is written inside) or .html file")
    r.add_argument("--private", default=None, help="the store's private area (for --reveal-private)")
    r.add_argument("--reveal-private", action="store_true", help="show the private scores (maintainers only)")
    r.add_argument("--title", default="DialFork leaderboard", help="page title")
    r.add_argument(
        "--audit",
        default=None,
        metavar="REPORT",
        help="the release's audit report (the export's GOLD/audit_report.json): its verdict is shown "
        "beside the tables",
    )

    au = sub.add_parser("audit", help="try the known cheats on a Hub layout and score them against its gold")
    au.add_argument("hub", help="Hub layout folder (python -m leaderboard export)")
    au.add_argument("--gold", required=True, help="its gold folder")
    au.add_argument(
        "--star",
        default=None,
        help="STAR folder for the regeneration attack (default: $DIALFORK_STAR_DIR; skipped without)",
    )
    au.add_argument(
        "--regen-seeds",
        type=int,
        default=10,
        metavar="N",
        help="public seeds 0..N-1 to regenerate with (default: 10)",
    )
    au.add_argument(
        "--regen-scenarios",
        type=int,
        default=None,
        metavar="N",
        help="scenarios per task to regenerate (default 64, the first by STAR id)",
    )
    au.add_argument(
        "--plumbing-only",
        action="store_true",
        help="a plumbing-only release (a template hidden set for demos and tests): failures of the "
        "simulator-aware attacks are reported as waived, and the verdict says so",
    )
    au.add_argument(
        "--honest",
        nargs="+",
        default=(),
        metavar="PRED",
        help="honest detectors' prediction files on the blind set, scored beside the attacks "
        "(named by their metadata's 'method', else the file name)",
    )
    au.add_argument("--json", action="store_true", help="print the report as JSON")
    au.add_argument("--out", default=None, help="also write the JSON report to this file")
    _add_export_parser(sub)
    return state_defaults(ap)


def _add_export_parser(sub: Any) -> None:
    s = sub.add_parser(
        "export",
        help="write the Hub layout (public configs, card, blind sets; gold apart), "
        "audited before it is swapped in",
    )
    s.add_argument("src", help="public generator output folder (or one record file)")
    s.add_argument("dest", help="layout folder to write")
    s.add_argument(
        "--hidden",
        default=None,
        help="hidden corpus (python -m generation --hidden-key KEY --split hidden); default: reserve "
        "hidden sources from SRC (public seed: tests only)",
    )
    s.add_argument(
        "--compound",
        default=None,
        metavar="DIR",
        help="compound corpus (python -m generation --compound PLAN): written as the 'compound' config",
    )
    s.add_argument("--key-file", default=None, help="key file (python -m dialfork_dataset keygen)")
    s.add_argument(
        "--gold-dir", default=None, help="where labels, key and audit report go (default: <dest>-gold)"
    )
    s.add_argument("--split-seed", type=int, default=0)
    s.add_argument("--blind-key", default=None, help="hex key (>= 32 random bytes) instead of --key-file")
    s.add_argument(
        "--hidden-fraction",
        type=float,
        default=None,
        help="share of sources reserved when no --hidden corpus is given (default: the key's, 0.2)",
    )
    s.add_argument(
        "--public-fraction", type=float, default=0.5, help="share of blind sources in the public part"
    )
    s.add_argument(
        "--blind-types",
        default=None,
        metavar="CODES",
        help="comma-separated hallucination types the detector blind set draws forks of (default: the "
        "hidden corpus's); pin an earlier release's types to keep its blind set when a type is added",
    )
    s.add_argument(
        "--star",
        default=None,
        help="STAR folder (or workflow:PATH) for the audit's regeneration "
        "attack (default: the source recorded in SRC/manifest.json, then "
        "$DIALFORK_STAR_DIR; without one that attack is skipped)",
    )
    s.add_argument(
        "--regen-seeds",
        type=int,
        default=10,
        metavar="N",
        help="the regeneration attack tries the public seeds 0..N-1 (default 10)",
    )
    s.add_argument("--no-audit", action="store_true", help="skip the audit (never for a release)")
    s.add_argument(
        "--plumbing-only",
        action="store_true",
        help="a plumbing-only release (a template hidden set, for demos and tests): the audit records "
        "failures of its simulator-aware attacks as waived, and the card says in plain words that "
        "the hidden set's scores do not rank detectors",
    )
    s.add_argument(
        "--require-conformant",
        action="store_true",
        help="drop the sources whose D+ the generation engine's conformance check flagged (with their "
        "forks); every D+ must carry a check (python -m generation --check-conformance, the default "
        "for LLM backends). Default: keep them, marked, and count them in the card",
    )
    s.add_argument("--overwrite", action="store_true")


def _print_json(obj: Any) -> None:
    print(json.dumps(obj, ensure_ascii=False, indent=2, allow_nan=False))


def _cmd_validate(a: argparse.Namespace) -> int:
    from .validate import validate_submission

    blind = _blind_set(a.blind)
    rep = validate_submission(
        a.submission,
        a.track,
        blind,
        metadata=a.metadata,
        require_metadata=not a.no_metadata,
        max_bytes=a.max_bytes,
    )
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
        raise ValueError(
            f"--blind {src!r}: not a Hub layout folder, and loading it as a Hub dataset id failed "
            f"({type(e).__name__}: {e})"
        ) from e
    return BlindSet.from_rows(rows, pairs, source=src)


def _fmt_scores(track: str, scores: dict[str, Any] | None) -> str:
    if scores is None:
        return "  (no dialogues in this part)"
    if track == "detector":
        from dialfork_metrics.task3.scorer import format_table

        return "\n".join("  " + ln for ln in format_table(scores).splitlines())
    types = " ".join(f"{h}={v:.3f}" for h, v in scores["tau_by_type"].items())
    return (
        f"  Avg tau={scores['tau']:.3f}  ({types})  exact recovery={100 * scores['exact_recovery']:.1f}%  "
        f"units={scores['counts']['units']}"
    )


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
            ev = evaluate(
                a.submission,
                track=a.track,
                gold=a.gold,
                blind=a.blind,
                metadata=a.metadata,
                max_bytes=a.max_bytes,
            )
            result, key = ev.public, None
        else:
            st = submit(
                a.submission,
                track=a.track,
                gold=a.gold,
                blind=a.blind,
                metadata=a.metadata,
                max_bytes=a.max_bytes,
                store=store,
                submitter=a.submitter,
            )
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
        print(
            f"gold revision {result['gold_revision'][:12]}, submission sha256 {result['submission']['sha256'][:12]}"
        )
        if key:
            print(f"stored as {key}")
    return 0


def _cmd_audit(a: argparse.Namespace) -> int:
    import os

    from .leakcheck import DEFAULT_REGEN_SCENARIOS_PER_TASK, run_audit

    if a.regen_seeds < 0:
        print("error: --regen-seeds must be >= 0", file=sys.stderr)
        return EXIT_USAGE
    from dialfork_dataset.hub import resolve_data

    resolve_data(a.hub, accept=("layout",), option="HUB")
    resolve_data(a.gold, accept=("gold",), option="--gold")
    honest = {}
    for f in a.honest:
        from dialfork_metrics.task3.io import read_predictions

        md = Path(f).with_name(Path(f).stem + ".metadata.json")
        name = json.loads(md.read_text(encoding="utf-8")).get("method") if md.is_file() else None
        honest[str(name or Path(f).stem)] = {r["dialogue_id"]: r["prediction"] for r in read_predictions(f)}
    rep = run_audit(
        a.hub,
        a.gold,
        star=a.star or os.environ.get("DIALFORK_STAR_DIR") or None,
        regen_seeds=tuple(range(a.regen_seeds)),
        regen_scenarios_per_task=a.regen_scenarios or DEFAULT_REGEN_SCENARIOS_PER_TASK,
        plumbing_only=a.plumbing_only,
        honest=honest or None,
    )
    if a.out:
        from dialfork_dataset.jsonl import write_json_atomic

        write_json_atomic(a.out, rep.to_dict())
    if a.json:
        _print_json(rep.to_dict())
    else:
        print(rep.format_text())
    return 0 if rep.ok else EXIT_FAILED


def _recorded_source(src: str) -> str | None:
    """The workflow source (STAR folder or ``workflow:PATH``) recorded in the generator manifest of
    ``src``, if it is still there: the audit regenerates from the corpus's own source, not from
    whatever ``$DIALFORK_STAR_DIR`` names (a workflow-file corpus is not a STAR one)."""
    try:
        config = json.loads((Path(src) / "manifest.json").read_text(encoding="utf-8")).get("config") or {}
    except (OSError, ValueError, AttributeError):
        return None
    recorded = config.get("star") if isinstance(config, dict) else None
    if not isinstance(recorded, str) or not recorded:
        return None
    path = recorded.split(":", 1)[1] if recorded.startswith("workflow:") else recorded
    return recorded if Path(path).exists() else None


def export_hints(report: Any, plumbing_only: bool) -> list[str]:
    """What to do about a failed release audit, one hint per cause the report shows.

    Args:
        report: The :class:`~leaderboard.leakcheck.AuditReport` of the failed export.
        plumbing_only: Whether the release was declared plumbing only.

    Returns:
        The hints (empty when none applies): pair diffing failing means the forks repeat their
        source's prefix verbatim (regenerate with ``--prefix-mode reword``); only simulator-aware
        attacks failing means a simulator-made hidden set (``--plumbing-only`` for a demo).
    """
    failed = [x for x in report.attacks if x.status == "FAIL" and not x.waived]
    out = []
    if any(x.name.startswith("pair diffing") for x in failed):
        out.append(
            "pair diffing fails: each fork repeats its source dialogue's turns word for word before the fork "
            "turn, so the shared prefix gives the fork order away (a corpus generated without --prefix-mode "
            "reword). Regenerate the public and the hidden corpus with python -m generation ... --prefix-mode "
            "reword (make demo does), then export again"
        )
    if failed and all(x.simulator_aware for x in failed) and not plumbing_only:
        out.append(
            "only simulator-aware attacks fail: the hidden set is simulator-made. For a demo or test "
            "release pass --plumbing-only (the card then says its scores do not rank detectors); an official "
            "release needs an LLM-generated hidden set (docs/hidden_split.md)"
        )
    return out


def _cmd_export(a: argparse.Namespace) -> int:
    import functools
    import os

    from dialfork_dataset.errors import CollectedErrors, cli_error_text
    from dialfork_dataset.hub import AuditFailed, export_hub_layout

    from .leakcheck import run_audit

    star = a.star or _recorded_source(a.src) or os.environ.get("DIALFORK_STAR_DIR")
    audit = (
        None
        if a.no_audit
        else functools.partial(
            run_audit,
            regen_seeds=tuple(range(a.regen_seeds)),
            plumbing_only=a.plumbing_only,
            **({"star": star} if star else {}),
        )
    )
    try:
        info = export_hub_layout(
            a.src,
            a.dest,
            a.gold_dir,
            hidden=a.hidden,
            compound=a.compound,
            key=a.key_file,
            split_seed=a.split_seed,
            blind_key=a.blind_key,
            hidden_fraction=a.hidden_fraction,
            public_fraction=a.public_fraction,
            blind_types=[t.strip() for t in a.blind_types.split(",") if t.strip()] if a.blind_types else None,
            overwrite=a.overwrite,
            audit=audit,
            require_conformant=a.require_conformant,
        )
    except AuditFailed as e:
        print(e.report.format_text(), file=sys.stderr)
        print(f"error: the audit failed ({e.report.worst()}); nothing was published", file=sys.stderr)
        for hint in export_hints(e.report, a.plumbing_only):
            print(f"hint: {hint}", file=sys.stderr)
        return EXIT_FAILED
    except CollectedErrors as e:  # the header, then every problem on a line of its own (the first 50)
        print(cli_error_text(e), file=sys.stderr)
        return EXIT_USAGE
    except FileExistsError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    print(json.dumps(info, indent=2))
    return 0


def _cmd_render(a: argparse.Namespace) -> int:
    from .render import render_site

    dirs = []
    for d in a.results:
        p = Path(d)
        if not p.is_dir():
            print(
                f"error: --results {d}: no such folder (give a results store or its results/ folder)",
                file=sys.stderr,
            )
            return EXIT_USAGE
        dirs.append(p / "results" if (p / "results").is_dir() else p)
    priv = a.private
    if a.reveal_private and priv is None:
        cand = [Path(d) / "private" for d in a.results if (Path(d) / "private").is_dir()]
        if not cand:
            print("error: --reveal-private needs --private DIR (the store's private area)", file=sys.stderr)
            return EXIT_USAGE
        priv = cand[0]
    audit = None
    if a.audit:
        if not Path(a.audit).is_file():
            print(
                f"error: --audit {a.audit}: no such file (the export writes GOLD/audit_report.json)",
                file=sys.stderr,
            )
            return EXIT_USAGE
        audit = json.loads(Path(a.audit).read_text(encoding="utf-8"))
    out = render_site(
        dirs, a.out, private_dir=priv, reveal_private=a.reveal_private, title=a.title, audit=audit
    )
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
        if a.command == "export":
            return _cmd_export(a)
        return _cmd_render(a)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
