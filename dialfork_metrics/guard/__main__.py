"""``python -m dialfork_metrics.guard fit|replay|serve|fake-upstream`` (console script ``dialfork-guard``).

* ``fit``: fit a Monitor and save it: on a workflow file alone (``--workflow workflow:FILE.yaml``, no
  data), on the conformant ``task3`` train dialogues of one task of a corpus, or on a JSONL file of
  your own conformant transcripts (``--data FILE.jsonl``, the format ``task3 predict`` reads);
* ``replay``: replay dialogues through a Monitor turn by turn, printing each system turn's verdict,
  the first alarm and its reason: every transcript of a JSONL file (``--data FILE.jsonl``), or one
  conformant and one forked test dialogue of a corpus; ``--fit`` (or ``--workflow`` without a saved
  ``--monitor``) fits the monitor first;
* ``serve``: the OpenAI-compatible proxy (see ``docs/guard.md``);
* ``fake-upstream``: a deterministic OpenAI-compatible server that plays the system side of
  recorded dialogues (tests, benchmarks, the docs' example).

Bad input exits with code 2 and a one-line message.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
from typing import Any

logger = logging.getLogger("dialfork_metrics.guard")
#: What the guard extra installs (setup.cfg): a missing one is named, with the install command.
_EXTRA_MODULES = frozenset({"fastapi", "uvicorn", "httpx", "starlette", "httptools", "uvloop"})


def _build_parser() -> argparse.ArgumentParser:
    from ..task3 import registry as detector_registry
    from .proxy import DEFAULT_FALLBACK, MODES

    ap = argparse.ArgumentParser(
        prog="python -m dialfork_metrics.guard",
        description="DialFork guard: flag procedural deviation in live conversations.",
    )
    sub = ap.add_subparsers(dest="command", required=True)

    def fit_args(p):
        p.add_argument(
            "--data",
            default=None,
            help="what the monitor is fitted on: a corpus (Hub-layout folder, generator output folder or Hub "
            "id: its conformant task3 train dialogues of --task) or a JSONL file of your own conformant "
            "transcripts (dialogue_id, turns, optional task: the format task3 predict reads); none: fitted "
            "on --workflow alone",
        )
        p.add_argument(
            "--task",
            default=None,
            help="the task the monitor watches (default: the only task of --workflow or of the transcripts)",
        )
        p.add_argument(
            "--detector",
            default="wf",
            choices=detector_registry.names(guard=True),
            help="wf (workflow-aware, default; warns when a conversation looks like another task), a "
            "streaming IT/SS detector, or another registered one the guard can run",
        )
        p.add_argument(
            "--workflow",
            default=None,
            metavar="SPEC",
            help="a detector that needs a workflow (wf): the task's workflow source (workflow:FILE.yaml, "
            "star:PATH; default: the corpus's own source when it names one, else $DIALFORK_STAR_DIR); "
            "without --data the monitor is fitted on it alone",
        )
        p.add_argument("--encoder", default="minilm", help="encoder alias or path (default minilm)")
        p.add_argument("--order", type=int, default=6, help="N of the N-gram LM of IT/SS (default 6)")
        p.add_argument(
            "--false-alarm-rate", type=float, default=None, help="calibration target (detector default)"
        )

    f = sub.add_parser(
        "fit",
        help="fit a monitor on a workflow file, a task's conformant dialogues, or both, and save it",
    )
    fit_args(f)
    f.add_argument("--out", required=True, help="monitor file to write")

    r = sub.add_parser(
        "replay",
        help="replay dialogues through a monitor turn by turn: a file of transcripts, or a corpus's test split",
    )
    r.add_argument(
        "--monitor",
        default=None,
        help="monitor file (guard fit); with --fit, or with --workflow and no such file, it is fitted first "
        "(and saved here when given)",
    )
    r.add_argument(
        "--fit", action="store_true", help="fit the monitor (--workflow, --fit-data) and save it to --monitor"
    )
    fit_args(r)
    r.add_argument(
        "--fit-data",
        default=None,
        help="with --fit: what the monitor is fitted on, when --data is the file to replay (a corpus or a "
        "JSONL file of conformant transcripts; default: a corpus --data's train split, else none: the "
        "--workflow alone)",
    )
    r.add_argument(
        "--dialogue",
        action="append",
        default=None,
        help="dialogue id(s) to replay (default: every transcript of a file; of a corpus, the first "
        "conformant and first forked test dialogue)",
    )

    s = sub.add_parser("serve", help="run the OpenAI-compatible guard proxy")
    s.add_argument(
        "--upstream", required=True, help="upstream OpenAI base URL, e.g. http://127.0.0.1:8000/v1"
    )
    s.add_argument("--monitor", required=True, help="monitor file (Monitor.save / guard fit)")
    s.add_argument("--db", required=True, help="SQLite state file (created if missing)")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8100, help="0 picks a free port (see --ready-file)")
    s.add_argument("--mode", default="annotate", choices=MODES)
    s.add_argument(
        "--fallback", default=DEFAULT_FALLBACK, help="block mode: the message that replaces a flagged reply"
    )
    s.add_argument(
        "--max-body-bytes", type=int, default=1 << 20, help="larger request bodies get 413 (default 1 MiB)"
    )
    s.add_argument("--upstream-timeout", type=float, default=60.0, help="seconds before 504 (default 60)")
    s.add_argument(
        "--synchronous",
        default="NORMAL",
        choices=("NORMAL", "FULL"),
        help="SQLite synchronous: NORMAL survives a killed process, FULL also a power cut",
    )
    s.add_argument("--ready-file", default=None, help="write {host, port, pid} JSON here once serving")
    s.add_argument("--log-level", default="warning")

    u = sub.add_parser(
        "fake-upstream", help="a deterministic OpenAI-compatible server replaying recorded dialogues"
    )
    src = u.add_mutually_exclusive_group(required=True)
    src.add_argument("--data", help="corpus whose task3 --split dialogues are played")
    src.add_argument("--dialogues", help="JSON Lines file of dialogues (records or lists of turns)")
    u.add_argument("--split", default="test", choices=("train", "test"))
    u.add_argument("--host", default="127.0.0.1")
    u.add_argument("--port", type=int, default=8000, help="0 picks a free port (see --ready-file)")
    u.add_argument("--delay-ms", type=float, default=0.0, help="answer each request after this delay")
    u.add_argument("--ready-file", default=None, help="write {host, port, pid} JSON here once serving")
    u.add_argument("--log-level", default="warning")
    return ap


# -- serving --------------------------------------------------------------------------------------
def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise ValueError(f"cannot listen on {host}:{port}: {e.strerror or e}") from e
    sock.listen(2048)
    return sock


def _ready_writer(sock: socket.socket, ready_file: str | None):
    from dialfork_dataset.jsonl import write_json_atomic

    host, port = sock.getsockname()[:2]

    def ready():
        logger.info("serving on http://%s:%d (pid %d)", host, port, os.getpid())
        if ready_file:
            write_json_atomic(ready_file, {"host": host, "port": port, "pid": os.getpid()})

    return ready


def _run(app, sock: socket.socket, log_level: str) -> int:
    import uvicorn

    config = uvicorn.Config(app, log_level=log_level, access_log=False, lifespan="on", timeout_keep_alive=30)
    uvicorn.Server(config).run(sockets=[sock])
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from .monitor import Monitor
    from .proxy import GuardConfig, check_upstream, create_app
    from .store import Store

    config = GuardConfig(
        upstream=args.upstream,
        mode=args.mode,
        fallback=args.fallback,
        max_body_bytes=args.max_body_bytes,
        upstream_timeout=args.upstream_timeout,
    )
    check_upstream(args.upstream, timeout=min(5.0, args.upstream_timeout))  # before the model loads
    monitor = Monitor.load(args.monitor)
    if monitor.detector.encoder is None:
        raise ValueError(
            f"{args.monitor}: the monitor has no encoder (fitted on precomputed embeddings); refit it "
            "with an encoder to serve it"
        )
    store = Store(args.db, monitor.fingerprint, synchronous=args.synchronous)
    monitor.encode("Hello!")  # load the model now, not on the first request
    sock = _listen(args.host, args.port)
    return _run(
        create_app(monitor, store, config, on_startup=_ready_writer(sock, args.ready_file)),
        sock,
        args.log_level,
    )


def cmd_fake_upstream(args: argparse.Namespace) -> int:
    from dialfork_dataset.jsonl import read_jsonl

    from .fake_upstream import create_fake_upstream

    if args.data:
        from dialfork_metrics.task3 import load_examples

        dialogues = load_examples(args.data, args.split)
    else:
        dialogues = read_jsonl(args.dialogues, collect=True)
    sock = _listen(args.host, args.port)
    app = create_fake_upstream(dialogues, delay_s=args.delay_ms / 1000.0)
    app.router.on_startup.append(_ready_writer(sock, args.ready_file))
    return _run(app, sock, args.log_level)


# -- fit / replay ------------------------------------------------------------------------------------
def _is_file(data: str | None) -> bool:
    """Whether ``--data`` is a file of transcripts (not a corpus folder or Hub id)."""
    from pathlib import Path

    return data is not None and Path(data).expanduser().is_file()


def _transcripts(path: str) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Every dialogue of a JSONL file of transcripts (the format ``task3 predict --data FILE`` reads)."""
    from dialfork_metrics.task3.io import read_transcripts

    return read_transcripts(path)


def _workflow_tasks(workflow: str) -> list[str]:
    from dialfork_metrics.task3.workflow.detector import resolve_workflow

    return sorted(resolve_workflow(workflow).tasks)


def _fit_rows(args: argparse.Namespace, data: str | None, spec: Any) -> tuple[list[dict[str, Any]], str]:
    """The conformant dialogues the monitor is fitted on and a phrase saying what they are."""
    from dialfork_metrics.task3 import load_examples

    if data is None:
        if "workflow" not in spec.needs:
            raise ValueError(
                f"--detector {spec.name} learns from dialogues: give --data (a corpus or a JSONL file of "
                "conformant transcripts), or fit wf on a workflow file alone: --workflow workflow:FILE.yaml"
            )
        if not args.workflow:
            raise ValueError(
                "nothing to fit on: give --workflow workflow:FILE.yaml (the monitor is fitted on the workflow "
                "alone), --data (a corpus or a JSONL file of conformant transcripts), or both"
            )
        return [], f"the workflow {args.workflow} alone"
    if _is_file(data):
        rows, where = _transcripts(data)
        forks = [
            f"{where[r['dialogue_id']]}: {r['dialogue_id']!r}" for r in rows if r.get("hallucination_type")
        ]
        if forks:
            raise ValueError(
                f"{data}: {len(forks)} forked dialogue(s) (hallucination_type set), e.g. {'; '.join(forks[:3])}: "
                "a monitor is fitted on conformant dialogues only; remove them"
            )
        return rows, f"every transcript of {data}"
    train = [e for e in load_examples(data, "train") if args.task is None or e.get("task") == args.task]
    if not train:
        tasks = sorted({str(e.get("task")) for e in load_examples(data, "train")})
        raise ValueError(f"no train dialogues of task {args.task!r} in {data} (tasks: {', '.join(tasks)})")
    return train, f"the task3 train split of {data}"


def _fit(args: argparse.Namespace, data: str | None = None):
    """The monitor of ``--detector``, built from its registry entry (what it needs of the encoder,
    the workflow and the false-alarm rate; ``--order`` for an IT/SS N-gram detector) and fitted on
    ``data`` (a corpus's conformant train dialogues of the task, a file of conformant transcripts) or,
    with none, on ``--workflow`` alone. Returns ``(monitor, what it was fitted on)``."""
    from ..task3 import registry as detector_registry
    from .monitor import Monitor

    spec = detector_registry.get(args.detector)
    rows, what = _fit_rows(args, data, spec)
    opts: dict[str, Any] = {}
    if args.false_alarm_rate is not None:
        opts["false_alarm_rate"] = args.false_alarm_rate
    task = args.task
    if "workflow" in spec.needs:
        from dialfork_metrics.task3.workflow.detector import workflow_for_data

        opts["workflow"] = args.workflow or (
            workflow_for_data(data) if data is not None and not _is_file(data) else None
        )
        if opts["workflow"] is None:
            opts["workflow"] = os.environ.get("DIALFORK_STAR_DIR") or None
        if opts["workflow"] is None:
            raise ValueError(
                f"the {spec.name} detector follows the dialogues' workflow, and none was named: pass "
                "--workflow workflow:FILE.yaml (your workflow file) or --workflow star:PATH (a STAR copy), or set "
                "$DIALFORK_STAR_DIR (or --detector ss+nc for a workflow-free monitor)"
            )
        if task is None and not any(r.get("task") for r in rows):
            tasks = _workflow_tasks(opts["workflow"])
            if len(tasks) != 1:
                raise ValueError(
                    f"--task: the workflow {opts['workflow']} has {len(tasks)} tasks ({', '.join(tasks[:10])}): "
                    "name the one the monitor watches"
                )
            task = tasks[0]
    if task is None:
        tasks = sorted({str(r["task"]) for r in rows if r.get("task")})
        if len(tasks) != 1:
            raise ValueError(
                "--task: name the task the monitor watches"
                + (f" (the fit dialogues are of {', '.join(tasks[:10])})" if tasks else "")
            )
        task = tasks[0]
    rows = [r if r.get("task") else {**r, "task": task} for r in rows]  # a transcript without task: --task's
    # Monitor.fit builds the detector from its registry entry (what it needs; order= for an N-gram one)
    mon = Monitor.fit(rows, task=task, detector=spec.name, encoder=args.encoder, order=args.order, **opts)
    return mon, what


def _print_fit(mon: Any, what: str, path: Any) -> None:
    """What was fitted, and its expected false-alarm rate (a warning on stderr above 10%)."""
    from dialfork_metrics.task3.fit_report import fit_report_lines, too_high

    n = mon.detector.n_train_
    print(f"fitted {mon!r} on {f'{n} dialogues of {mon.task}' if n else what}; saved to {path}")
    tasks = [mon.task] if mon.workflow_aware else None
    for line in fit_report_lines(mon.detector, tasks):
        print(f"  {line}", file=sys.stderr if too_high(mon.detector, tasks) else sys.stdout)


def cmd_fit(args: argparse.Namespace) -> int:
    mon, what = _fit(args, args.data)
    path = mon.save(args.out)
    _print_fit(mon, what, path)
    return 0


def _replay_monitor(args: argparse.Namespace):
    """The monitor ``replay`` watches with: fitted first (``--fit``; or ``--workflow`` without a saved
    ``--monitor``), else loaded from ``--monitor``."""
    from pathlib import Path

    from .monitor import Monitor

    fit = args.fit or (
        args.workflow is not None and (args.monitor is None or not Path(args.monitor).exists())
    )
    if not fit:
        if args.monitor is None:
            raise ValueError(
                "replay needs a monitor: --monitor FILE (written by guard fit), or --workflow workflow:FILE.yaml "
                "to fit one on the workflow first"
            )
        return Monitor.load(args.monitor)
    fit_data = args.fit_data
    if fit_data is None and args.data is not None and not _is_file(args.data):
        fit_data = args.data  # a corpus: its train split fits, its test split is replayed
    mon, what = _fit(args, fit_data)
    where = mon.save(args.monitor) if args.monitor else "(not saved: no --monitor)"
    _print_fit(mon, what, where)
    return mon


def _alarm_note(v: Any) -> str:
    """The reason printed beside a raised alarm: its rule and message, else the score."""
    if v.rule:
        return f"{v.rule['rule']}: {v.rule['message']}"
    return f"score {v.score:.3f} beyond the threshold {v.threshold:.3f}" if v.score is not None else "alarm"


def _replay_one(mon: Any, d: dict[str, Any], title: str) -> bool:
    """Replay one dialogue, printing each system turn's verdict; whether it alarmed."""
    print(f"\n{d['dialogue_id']} ({title}, {d['num_system_turns']} system turns)")
    session, shown, warned = mon.session(), False, False
    for t in d["turns"]:
        v = session.observe(t["speaker"], t["text"])
        if v.speaker == "system" or v.raised:
            score = "-" if v.score is None else f"{v.score:.3f}"
            where = f"system turn {v.system_turn:>2}" if v.system_turn else "user turn     "
            mark = f"  <-- first alarm ({_alarm_note(v)})" if v.alarm and not shown else ""
            shown = shown or v.alarm
            print(
                f"  {where}  alarm={str(v.alarm):5}  score={score:>7} (threshold {v.threshold:.3f})  "
                f"{t['text'][:60]!r}{mark}"
            )
        if v.warning and not warned:
            print(f"  warning: {v.warning}")
            warned = True
    print(f"  first alarm: {'none' if session.first_alarm is None else f'system turn {session.first_alarm}'}")
    return session.first_alarm is not None


def cmd_replay(args: argparse.Namespace) -> int:
    from dialfork_metrics.task3 import load_examples

    if args.data is None:
        raise ValueError(
            "--data: what to replay: a JSONL file of transcripts (dialogue_id, turns, optional task) or a corpus"
        )
    mon = _replay_monitor(args)
    if _is_file(args.data):
        rows, _ = _transcripts(args.data)
        if args.dialogue:
            missing = [d for d in args.dialogue if d not in {r["dialogue_id"] for r in rows}]
            if missing:
                raise ValueError(f"dialogue(s) {', '.join(missing)} not in {args.data}")
            rows = [r for r in rows if r["dialogue_id"] in args.dialogue]
        other = [r for r in rows if r.get("task") not in (None, mon.task)]
        skip = {r["dialogue_id"] for r in other}
        alarmed = 0
        for d in rows:
            if d["dialogue_id"] in skip:
                continue
            alarmed += _replay_one(mon, d, f"task {mon.task}" + ("" if d.get("task") else ", no task field"))
        n = len(rows) - len(other)
        print(f"\n{alarmed} of {n} dialogue(s) alarmed (monitor of task {mon.task!r})")
        if other:
            print(
                f"not replayed: {len(other)} dialogue(s) of another task than the monitor's {mon.task!r} "
                f"({', '.join(r['dialogue_id'] for r in other[:10])}): fit a monitor of their task (--task)",
                file=sys.stderr,
            )
            return 1
        return 0
    task = args.task or mon.task
    test = [e for e in load_examples(args.data, "test") if e.get("task") == task]
    if args.dialogue:
        by_id = {e["dialogue_id"]: e for e in test}
        missing = [d for d in args.dialogue if d not in by_id]
        if missing:
            raise ValueError(f"dialogue(s) {', '.join(missing)} not in the {task} test split of {args.data}")
        chosen = [by_id[d] for d in args.dialogue]
    else:
        conf = [e for e in test if e["hallucination_type"] is None]
        forks = [e for e in test if e["hallucination_type"] is not None]
        if not conf or not forks:
            raise ValueError(f"the {task} test split of {args.data} needs a conformant and a forked dialogue")
        # a fork injected mid-dialogue (position 3) shows the silence before the alarm best
        chosen = [conf[0], next((f for f in forks if f.get("fork_position") == 3), forks[0])]
    for d in chosen:
        kind = (
            "conformant"
            if d["hallucination_type"] is None
            else f"fork {d['hallucination_type']} injected at system turn {d['fork_turn']}"
        )
        _replay_one(mon, d, kind)
    return 0


class _NoFitReport(logging.Filter):
    """Drops Monitor.fit's log of the expected false-alarm rate (the CLI prints it)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Monitor.fit: %s")


def main(argv: list[str] | None = None) -> int:
    from .monitor import MonitorFileError
    from .store import StoreError

    try:
        parser = _build_parser()
    except ModuleNotFoundError as e:  # the proxy's web stack comes with the guard extra
        if (e.name or "").split(".")[0] not in _EXTRA_MODULES:
            raise
        print(
            f"error: the guard needs the 'guard' extra, which is not installed (no module {e.name!r}): "
            "pip install 'dialfork[guard]'",
            file=sys.stderr,
        )
        return 2
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # the guard's own progress (the upstream check, "serving on ...") is INFO and shown; other
    # libraries stay at WARNING. --log-level error/critical quiets the guard too.
    asked = logging.getLevelName(str(getattr(args, "log_level", "warning")).upper())
    asked = asked if isinstance(asked, int) else logging.WARNING
    logger.setLevel(min(asked, logging.INFO) if asked <= logging.WARNING else asked)
    # Monitor.fit logs the expected false-alarm rate; the CLI prints it itself (once)
    mon_log = logging.getLogger("dialfork_metrics.guard.monitor")
    if not any(isinstance(f, _NoFitReport) for f in mon_log.filters):
        mon_log.addFilter(_NoFitReport())
    cmds = {"fit": cmd_fit, "replay": cmd_replay, "serve": cmd_serve, "fake-upstream": cmd_fake_upstream}
    try:
        for opt in ("data", "fit_data"):
            value = getattr(args, opt, None)
            if value is not None and not _is_file(value):
                from dialfork_dataset.hub import resolve_data

                resolve_data(value, option="--" + opt.replace("_", "-"))
        return cmds[args.command](args)
    except (MonitorFileError, StoreError, ValueError, FileNotFoundError, TypeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
