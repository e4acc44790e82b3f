"""``python -m dialfork_metrics.audit``: audit an agent behind an OpenAI-compatible endpoint."""

from __future__ import annotations

import argparse
import logging
import sys

from dialfork_dataset.console import state_defaults
from dialfork_metrics.flowgraph.metric import MIN_CROSSFIT_TARGET

#: The fewest audited dialogues per task FlowKL is estimated from (``flowkl_crossfit``'s ``min_tgt``).
FLOWKL_MIN_AUDITED = MIN_CROSSFIT_TARGET


def flowkl_too_few(n: int) -> str:
    """The note printed when a run audits too few dialogues per task for FlowKL.

    Args:
        n: Audited dialogues per task.

    Returns:
        str: One line: what FlowKL needs and what the run will show.

    Example:
        >>> flowkl_too_few(2)
        'note: FlowKL needs at least 5 audited dialogues per task; with 2 it is n/a (not estimated): pass --per-task 5 or more'
    """
    return (
        f"note: FlowKL needs at least {FLOWKL_MIN_AUDITED} audited dialogues per task; with {n} it is n/a "
        f"(not estimated): pass --per-task {FLOWKL_MIN_AUDITED} or more"
    )


def build_parser() -> argparse.ArgumentParser:
    from .report import audit_detector_names

    ap = argparse.ArgumentParser(
        prog="python -m dialfork_metrics.audit",
        description="Audit how well an agent follows its workflows (docs/audit.md).",
    )
    ap.add_argument("--agent", required=True, help="the agent's API root, e.g. http://127.0.0.1:8000/v1")
    ap.add_argument("--model", required=True, help="the served model name")
    ap.add_argument("--api-key-env", default=None, help="environment variable holding the bearer token")
    ap.add_argument(
        "--source",
        default=None,
        help="workflow source: star:PATH or workflow:PATH (a workflow file or a folder of them); KIND:PATH for any kind of dialfork_dataset.sources.SOURCE_KINDS",
    )
    ap.add_argument(
        "--star", default=None, help="STAR copy (same as --source star:PATH; default $DIALFORK_STAR_DIR)"
    )
    ap.add_argument("--tasks", required=True, help="comma-separated task names of the source")
    ap.add_argument(
        "--per-task",
        type=int,
        default=5,
        help=f"scenarios per task (default 5; FlowKL needs at least {FLOWKL_MIN_AUDITED}: fewer give n/a)",
    )
    ap.add_argument("--scenarios", default=None, help="comma-separated scenario ids (instead of the first N)")
    ap.add_argument(
        "--happy-only",
        action="store_true",
        help="audit happy scenarios only, against the reference's happy-scenario dialogues",
    )
    ap.add_argument("--user", default="template", help="simulated user: template (default) or openai:URL")
    ap.add_argument("--user-model", default=None, help="model name of the openai:URL user")
    ap.add_argument(
        "--user-api-key-env", default=None, help="environment variable with the user server's token"
    )
    ap.add_argument(
        "--reference", required=True, help="corpus folder or exported Hub folder with conformant dialogues"
    )
    ap.add_argument("--out", required=True, help="output folder (dialogues, report); a rerun resumes")
    ap.add_argument(
        "--concurrency", type=int, default=4, help="conversations with the agent in flight at once"
    )
    ap.add_argument(
        "--kb-tools",
        action="store_true",
        help="offer the agent the task's API as an OpenAI tool and answer its calls from the source's "
        "knowledge base (generation/kb_tools.py)",
    )
    ap.add_argument(
        "--max-tool-rounds",
        type=int,
        default=None,
        help="rounds of tool calls per agent turn before it must answer (default 4)",
    )
    ap.add_argument(
        "--detector",
        default="wf",
        choices=audit_detector_names(),
        help="Task 3 detector fitted per task on the reference: wf (workflow-aware, default), the paper's "
        "it, ss, it+nc, ss+nc, or any registered one that learns from conformant dialogues",
    )
    ap.add_argument(
        "--encoder",
        default="minilm",
        help="sentence encoder of the detector and the scores: alias (minilm, ...) or model path",
    )
    ap.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        help="seconds to wait for one reply of the agent (or the LLM user) before retrying",
    )
    ap.add_argument(
        "--max-retries",
        type=int,
        default=3,
        help="retries of a failed request (timeout, connection error, 5xx) before the dialogue fails",
    )
    return state_defaults(ap)


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from generation.api import EndpointError

    from .core import audit_agent
    from .store import AuditError

    if a.concurrency < 1:
        print(f"error: --concurrency must be >= 1, got {a.concurrency}", file=sys.stderr)
        return 2
    if a.max_tool_rounds is not None and a.max_tool_rounds < 0:
        print(f"error: --max-tool-rounds must be >= 0, got {a.max_tool_rounds}", file=sys.stderr)
        return 2
    if a.source is None and a.star is None:
        import os

        a.star = os.environ.get("DIALFORK_STAR_DIR")
    tasks = [t.strip() for t in a.tasks.split(",") if t.strip()]
    scen = [s.strip() for s in a.scenarios.split(",") if s.strip()] if a.scenarios else None
    try:
        from dialfork_dataset.hub import resolve_data

        resolve_data(a.reference, accept=("corpus", "layout"), option="--reference")  # before STAR is read
        report = audit_agent(
            a.agent,
            a.model,
            tasks,
            a.reference,
            star=a.star,
            source=a.source,
            per_task=None if scen else a.per_task,
            scenarios=scen,
            out=a.out,
            api_key_env=a.api_key_env,
            concurrency=a.concurrency,
            encoder=a.encoder,
            detector=a.detector,
            timeout=a.timeout,
            happy_only=a.happy_only,
            user=a.user,
            user_model=a.user_model,
            user_api_key_env=a.user_api_key_env,
            max_retries=a.max_retries,
            kb_tools=a.kb_tools,
            max_tool_rounds=a.max_tool_rounds,
            cli_hints=True,
        )
    except (AuditError, EndpointError, ValueError) as e:
        msg = " ".join(str(e).split())
        print(f"error: {msg}", file=sys.stderr)
        return 2
    print(report.to_markdown().split("\n## ")[0])
    if (n := len(scen) if scen else a.per_task) < FLOWKL_MIN_AUDITED:  # the table shows FlowKL n/a
        print(flowkl_too_few(n))
    print(f"report: {a.out}/report.html, report.md, report.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
