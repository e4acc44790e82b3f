"""``python -m dialfork_metrics.guard fit|replay|serve|fake-upstream`` (console script ``dialfork-guard``).

* ``fit``: fit a Monitor on the conformant ``task3`` train dialogues of one task and save it;
* ``replay``: replay one conformant and one forked test dialogue of a task through a Monitor turn by
  turn (``--fit`` fits and saves it first), printing each system turn's verdict and the first alarm;
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
    from dialfork_metrics.task3.registry import detector_names

    from .proxy import DEFAULT_FALLBACK, MODES

    ap = argparse.ArgumentParser(
        prog="python -m dialfork_metrics.guard",
        description="DialFork guard: flag procedural deviation in live conversations.",
    )
    sub = ap.add_subparsers(dest="command", required=True)

    def fit_args(p, required: bool):
        p.add_argument(
            "--data", required=required, help="corpus: Hub-layout folder, generator output folder or Hub id"
        )
        p.add_argument(
            "--task", required=required, help="the task whose conformant train dialogues fit the monitor"
        )
        p.add_argument(
            "--detector",
            default="wf",
            choices=detector_names(guard=True),
            help="wf (workflow-aware, default; warns when a conversation looks like another task), a "
            "streaming IT/SS detector, or another registered one the guard can run",
        )
        p.add_argument(
            "--workflow",
            default=None,
            metavar="SPEC",
            help="a detector that needs a workflow (wf): the task's workflow source (star:PATH, "
            "workflow:FILE.yaml; default: the corpus's own source when it names one, else $DIALFORK_STAR_DIR)",
        )
        p.add_argument("--encoder", default="minilm", help="encoder alias or path (default minilm)")
        p.add_argument("--order", type=int, default=6, help="N of the N-gram LM of IT/SS (default 6)")
        p.add_argument(
            "--false-alarm-rate", type=float, default=None, help="calibration target (detector default)"
        )

    f = sub.add_parser("fit", help="fit a monitor on a task's conformant train dialogues and save it")
    fit_args(f, True)
    f.add_argument("--out", required=True, help="monitor file to write")

    r = sub.add_parser("replay", help="replay a conformant and a forked test dialogue through a monitor")
    r.add_argument("--monitor", required=True, help="monitor file (written first with --fit)")
    r.add_argument(
        "--fit", action="store_true", help="fit the monitor on --data/--task and save it to --monitor"
    )
    fit_args(r, True)
    r.add_argument(
        "--dialogue",
        action="append",
        default=None,
        help="dialogue id(s) of the test split to replay (default: the first conformant and first fork)",
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
def _fit(args: argparse.Namespace):
    """The monitor of ``--detector``, built from its registry entry (what it needs of the encoder,
    the workflow and the false-alarm rate; ``--order`` for an IT/SS N-gram detector) and fitted on
    the task's conformant train dialogues."""
    from dialfork_metrics.task3 import load_examples
    from dialfork_metrics.task3.registry import get_detector

    from .monitor import Monitor

    spec = get_detector(args.detector)
    train = [e for e in load_examples(args.data, "train") if e.get("task") == args.task]
    if not train:
        tasks = sorted({e.get("task") for e in load_examples(args.data, "train")})
        raise ValueError(
            f"no train dialogues of task {args.task!r} in {args.data} (tasks: {', '.join(tasks)})"
        )
    opts: dict[str, Any] = {}
    if args.false_alarm_rate is not None:
        opts["false_alarm_rate"] = args.false_alarm_rate
    if "workflow" in spec.needs:
        from dialfork_metrics.task3.workflow.detector import workflow_for_data

        opts["workflow"] = args.workflow or workflow_for_data(args.data)
        if opts["workflow"] is None:
            raise ValueError(
                f"the {spec.name} detector follows the dialogues' workflow, and {args.data} names none: pass "
                "--workflow star:PATH (a STAR copy) or --workflow workflow:FILE.yaml, or set "
                "$DIALFORK_STAR_DIR (or --detector ss+nc for a workflow-free monitor)"
            )
    # Monitor.fit builds the detector from its registry entry (what it needs; order= for an N-gram one)
    return Monitor.fit(
        train, task=args.task, detector=spec.name, encoder=args.encoder, order=args.order, **opts
    )


def cmd_fit(args: argparse.Namespace) -> int:
    mon = _fit(args)
    path = mon.save(args.out)
    print(f"fitted {mon!r} on {mon.detector.n_train_} dialogues of {args.task}; saved to {path}")
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    from dialfork_metrics.task3 import load_examples

    from .monitor import Monitor

    if args.fit:
        mon = _fit(args)
        mon.save(args.monitor)
        print(
            f"fitted {mon!r} on {mon.detector.n_train_} conformant dialogues of {args.task}; saved to {args.monitor}"
        )
    mon = Monitor.load(args.monitor)
    test = [e for e in load_examples(args.data, "test") if e.get("task") == args.task]
    if args.dialogue:
        by_id = {e["dialogue_id"]: e for e in test}
        missing = [d for d in args.dialogue if d not in by_id]
        if missing:
            raise ValueError(
                f"dialogue(s) {', '.join(missing)} not in the {args.task} test split of {args.data}"
            )
        chosen = [by_id[d] for d in args.dialogue]
    else:
        conf = [e for e in test if e["hallucination_type"] is None]
        forks = [e for e in test if e["hallucination_type"] is not None]
        if not conf or not forks:
            raise ValueError(
                f"the {args.task} test split of {args.data} needs a conformant and a forked dialogue"
            )
        # a fork injected mid-dialogue (position 3) shows the silence before the alarm best
        chosen = [conf[0], next((f for f in forks if f.get("fork_position") == 3), forks[0])]
    for d in chosen:
        kind = (
            "conformant"
            if d["hallucination_type"] is None
            else f"fork {d['hallucination_type']} injected at system turn {d['fork_turn']}"
        )
        print(f"\n{d['dialogue_id']} ({kind}, {d['num_system_turns']} system turns)")
        session, shown = mon.session(), False
        for t in d["turns"]:
            v = session.observe(t["speaker"], t["text"])
            if v.speaker == "system" or v.raised:
                score = "-" if v.score is None else f"{v.score:.3f}"
                where = f"system turn {v.system_turn:>2}" if v.system_turn else "user turn     "
                mark = "  <-- first alarm" if v.alarm and not shown else ""
                shown = shown or v.alarm
                print(
                    f"  {where}  alarm={str(v.alarm):5}  score={score:>7} (threshold {v.threshold:.3f})  "
                    f"{t['text'][:60]!r}{mark}"
                )
        print(
            f"  first alarm: {'none' if session.first_alarm is None else f'system turn {session.first_alarm}'}"
        )
    return 0


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
    cmds = {"fit": cmd_fit, "replay": cmd_replay, "serve": cmd_serve, "fake-upstream": cmd_fake_upstream}
    try:
        if getattr(args, "data", None) is not None:
            from dialfork_dataset.hub import resolve_data

            resolve_data(args.data, option="--data")
        return cmds[args.command](args)
    except (MonitorFileError, StoreError, ValueError, FileNotFoundError, TypeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
