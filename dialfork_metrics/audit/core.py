"""Run the audit: the user's agent plays the system side of STAR scenarios against the template
user; dialogues are written as DialFork records as they finish, then scored per task
(:mod:`dialfork_metrics.audit.report`).

Output folder (``out``): ``dialogues.jsonl`` (one DialFork record per finished dialogue,
``generator = "agent:<model>"``, rewritten atomically after each one), ``failed.json`` (every
dialogue the agent could not complete: its turns so far and the error), ``steps.json`` (the
workflow step of every agent turn), and the report files. A rerun with the same ``out`` skips the
scenarios already in ``dialogues.jsonl`` and retries the failed ones.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

from .store import FAILED_FILE, AuditError, Job, Outcome, Store

logger = logging.getLogger(__name__)

DEFAULT_SAMPLING: dict[str, Any] = {"temperature": 0.0, "max_tokens": 256}


def parse_source(source: str | None, star: str | None) -> str | None:
    """The workflow source spec to open: ``KIND:PATH`` (``--source``; a kind of
    :data:`dialfork_dataset.sources.SOURCE_KINDS`, parsed by its one parser), else the ``--star``
    path (None: ``$DIALFORK_STAR_DIR``).

    Args:
        source: The ``--source`` value, ``KIND:PATH``; None: use ``star``.
        star: The ``--star`` path; None: ``$DIALFORK_STAR_DIR`` (read when the source is opened).

    Returns:
        The spec as a manifest records it (``source_record``: the path alone for STAR, else
        ``KIND:PATH``), or ``star`` when no ``source`` is given.

    Raises:
        AuditError: ``source`` has no registered ``KIND:`` prefix, its kind's parser refuses it,
            or ``star`` is also given and names another source.
    """
    from dialfork_dataset.sources import SOURCE_KINDS, SourceError, parse_source_spec, source_record

    if source is None:
        return star
    kind, sep, path = str(source).partition(":")
    if not sep or kind not in SOURCE_KINDS:
        raise AuditError(
            f"--source {source!r}: expected {' or '.join(k + ':PATH' for k in SOURCE_KINDS)} "
            "(the registered source kinds)"
        )
    try:
        parse_source_spec(source)
    except SourceError as e:
        raise AuditError(f"--source: {e}") from None
    if star is not None and (kind != "star" or os.path.abspath(star) != os.path.abspath(path)):
        raise AuditError(f"--source {source!r} and --star {star!r} name different workflow sources; give one")
    return source_record(source)


def open_audit_source(spec: str | None):
    """The :class:`~dialfork_dataset.sources.WorkflowSource` of a :func:`parse_source` spec, its
    problems as an :class:`AuditError`.

    Args:
        spec: A spec from :func:`parse_source` (None: ``$DIALFORK_STAR_DIR``).

    Returns:
        The opened workflow source.

    Raises:
        AuditError: The source cannot be opened (a ``SourceError``, ``StarError`` or ``OSError``,
            with its message).
    """
    from dialfork_dataset.sources import SourceError, open_source
    from dialfork_dataset.star import StarError

    try:
        return open_source(spec)
    except (SourceError, StarError, OSError) as e:
        raise AuditError(str(e)) from None


def _sid_key(sid: str) -> tuple:
    return (0, int(sid), sid) if str(sid).isdigit() else (1, 0, str(sid))


def plan_jobs(
    corpus: Any,
    tasks: Sequence[str],
    per_task: int | None = None,
    scenarios: Mapping[str, Sequence[str]] | Sequence[str] | None = None,
    seed: int = 0,
    happy_only: bool = False,
) -> list[Job]:
    """The (task, scenario) conversations to run: the first ``per_task`` single-task scenarios of each
    task in scenario-id order, or the ``scenarios`` given (ids; a mapping task -> ids, or a flat list
    applied to every task). Every unknown task or scenario is reported at once.

    Args:
        corpus: The opened workflow source (``task``, ``length_budget``, ``scenarios_for``).
        tasks: The tasks to audit.
        per_task: Most scenarios per task (an integer >= 1); None: all of them.
        scenarios: The scenario ids to run, per task or for every task; None: all, in id order.
        seed: The run's seed; each conversation's seed derives from it and the scenario id.
        happy_only: Only the scenarios on the workflow's happy path.

    Returns:
        One :class:`Job` per conversation, task by task.

    Raises:
        AuditError: ``tasks`` is empty, ``per_task`` is not an integer >= 1, or a task is unknown,
            a scenario is not one of its single-task scenarios, or a task has no scenario to run
            (every problem listed).
    """
    from dialfork_dataset.sources import SourceError
    from dialfork_dataset.star import StarError
    from generation.api import dialogue_seed

    errs: list[str] = []
    jobs: list[Job] = []
    if not tasks:
        raise AuditError("no task to audit: give --tasks T1,T2")
    if per_task is not None and (isinstance(per_task, bool) or not isinstance(per_task, int) or per_task < 1):
        raise AuditError(f"per_task must be an integer >= 1, got {per_task!r}")
    for name in tasks:
        try:
            task = corpus.task(name)
            budget = corpus.length_budget(name)
        except (StarError, SourceError, KeyError) as e:
            errs.append(str(e).strip('"'))
            continue
        avail = {
            str(s.scenario_id): s for s in corpus.scenarios_for(name, happy=True if happy_only else None)
        }
        if scenarios is not None:
            want = scenarios.get(name, ()) if isinstance(scenarios, Mapping) else scenarios
            chosen = []
            for sid in want:
                if str(sid) not in avail:
                    errs.append(
                        f"scenario {sid!r} is not a single-task{' happy' if happy_only else ''} scenario of "
                        f"task {name!r} in the source "
                        f"{corpus.path} (it has {len(avail)}, e.g. {', '.join(sorted(avail, key=_sid_key)[:3])})"
                    )
                else:
                    chosen.append(avail[str(sid)])
        else:
            chosen = [avail[s] for s in sorted(avail, key=_sid_key)]
        if per_task is not None:
            chosen = chosen[:per_task]
        if not chosen and not any(name in e for e in errs):
            errs.append(f"task {name!r}: no scenario to run")
        jobs += [Job(task, s, dialogue_seed(seed, str(s.scenario_id)), budget) for s in chosen]
    if errs:
        raise AuditError("cannot plan the audit:\n  " + "\n  ".join(errs))
    return jobs


class _Encoder:
    """Thread-safe access to one encoder (its memory cache makes the scoring pass re-use the
    embeddings computed during the conversations)."""

    def __init__(self, encoder: Any):
        self.encoder = encoder
        self.lock = threading.Lock()

    def encode(self, texts: list[str]):
        with self.lock:
            return self.encoder.encode(texts)


def converse(
    job: Job,
    client: Any,
    backend: Any,
    matcher: Any,
    encoder: _Encoder,
    sampling: Mapping[str, Any],
    max_extra_turns: int = 4,
    user_client: Any = None,
    tools: Any = None,
) -> Outcome:
    """One conversation: template user first, then the agent, until one ends it or the length
    budget (plus ``max_extra_turns`` for the wrap-up) is spent. Upstream failures end the
    conversation with ``Outcome.error`` set. ``tools``: a :class:`ToolAgent` (the agent is offered
    the task's KB tools and its calls are run, :mod:`generation.kb_tools`); the calls are listed in
    ``Outcome.extra["tool_calls"]``.

    Args:
        job: The conversation to run.
        client: The agent's client (``chat_one``); not used when ``tools`` is given.
        backend: The template backend bound to the source (the user's workflow model).
        matcher: The task's step matcher (maps each agent turn to a workflow step).
        encoder: Encodes each agent turn for the matcher.
        sampling: The agent's sampling parameters (also the LLM user's).
        max_extra_turns: Turns allowed past the length budget for the wrap-up (default 4).
        user_client: The LLM user's client; None: the template user.
        tools: A :class:`ToolAgent`; None: no tools.

    Returns:
        The :class:`Outcome`: the turns, the matched steps and their similarities, whether the agent
        ended the dialogue, the error (an upstream failure, a failing LLM user, or an empty agent
        reply) and ``extra``.
    """
    from generation.api import END_TOKEN, Dialogue, EndpointError, init_messages

    from .user import LLMUser, TemplateUser, UserError

    d = Dialogue(
        key=job.dialogue_id,
        task=job.task,
        scenario=job.scenario,
        seed=job.seed,
        budget=job.budget,
        cut=job.budget + max_extra_turns,
    )
    init_messages(d)
    messages = list(d.system_messages)
    if user_client is None:
        user = TemplateUser(backend, job.task, job.scenario, job.seed, matcher, d)
    else:
        user = LLMUser(user_client, backend.model(job.task), matcher, d, job.seed, dict(sampling))
    ended_by_agent = False
    error = None
    calls: list[dict[str, Any]] = []
    for i in range(d.cut):
        if i % 2 == 0:
            d.wrapped = len(d.turns) >= d.budget
            try:
                text = user.say(i)
            except UserError as e:
                error = f"turn {i}: {e}"
                break
            done = END_TOKEN in text
            text = text.replace(END_TOKEN, "").strip()
            d.turns.append({"speaker": "user", "text": text})
            messages.append({"role": "user", "content": text})
            if done:
                break
            continue
        try:
            if tools is None:
                rep = client.chat_one(messages, job.seed % (2**31), None, **sampling)
                raw, finish = rep.text or "", rep.finish_reason
            else:
                raw, finish, results = tools.turn(messages, job, sampling)
                calls += [{"system_turn": d.n_system + 1, **r.to_dict()} for r in results]
        except EndpointError as e:
            error = f"turn {i}: {e}"
            break
        done = END_TOKEN in raw
        text = raw.replace(END_TOKEN, "").strip()
        if not text:
            error = (
                f"turn {i}: the agent returned an empty reply (finish_reason={finish!r}); "
                "check the model name, max_tokens and the server's chat template"
            )
            break
        d.turns.append({"speaker": "system", "text": text})
        d.n_system += 1
        messages.append({"role": "assistant", "content": text})
        mt = user.hear(text, encoder.encode([text])[0], i)
        if done or user.is_goodbye(mt.node):
            ended_by_agent = True
            break
    extra = {"tool_calls": calls} if tools is not None else {}
    return Outcome(job, d.turns, user.steps, user.similarities, ended_by_agent, error, extra)


class ToolAgent:
    """The agent called with the task's KB tools (OpenAI function calling, through the official
    ``openai`` client): each agent turn is a :func:`generation.kb_tools.run_tool_loop`, whose tool
    calls run against the source's KB tables (``executor``); the tool messages stay in the agent's
    history. Upstream failures (after the client's retries) raise
    :class:`~generation.llm.client.EndpointError`.

    Args:
        agent: The agent's API root (OpenAI-compatible).
        model: The model name.
        executor: Runs a tool call against the KB tables.
        api_key: The API key; None sends ``"none"``.
        timeout: Seconds per request (default 60).
        max_retries: Retries of the ``openai`` client (default 3).
        max_rounds: Most rounds of tool calls per agent turn; None: the generator's default.
    """

    def __init__(
        self,
        agent: str,
        model: str,
        executor: Any,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
        max_rounds: int | None = None,
    ):
        import openai

        from generation.api import DEFAULT_MAX_TOOL_ROUNDS

        self.model = model
        self.url = agent
        self.executor = executor
        self.max_rounds = DEFAULT_MAX_TOOL_ROUNDS if max_rounds is None else int(max_rounds)
        self.client = openai.OpenAI(
            base_url=agent, api_key=api_key or "none", timeout=timeout, max_retries=max_retries
        )

    def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        seed: int,
        sampling: Mapping[str, Any],
    ) -> dict[str, Any]:
        """One chat completion with the tools offered.

        Args:
            messages: The agent's history.
            tools: The tools' JSON schemas (empty: no tool is offered).
            seed: The request's seed.
            sampling: The sampling parameters; None values are not sent.

        Returns:
            The assistant message: ``role``, ``content``, ``finish_reason`` and, when the model
            called tools, ``tool_calls``.

        Raises:
            EndpointError: The server answers an HTTP error, the request fails, or the reply is not a
                chat completion.
        """
        import openai

        from generation.api import EndpointError

        kw = {k: v for k, v in sampling.items() if v is not None}
        if tools:
            kw["tools"] = tools
        try:
            resp = self.client.chat.completions.create(model=self.model, messages=messages, seed=seed, **kw)
        except openai.APIStatusError as e:
            raise EndpointError(
                f"POST {self.url}/chat/completions: HTTP {e.status_code}: {e.message}", status=e.status_code
            ) from None
        except openai.APIError as e:
            raise EndpointError(f"POST {self.url}/chat/completions failed: {type(e).__name__}: {e}") from None
        choices = getattr(resp, "choices", None)
        if not choices or getattr(choices[0], "message", None) is None:
            raise EndpointError(
                f"POST {self.url}/chat/completions: the reply is not a chat completion "
                f"(not JSON with choices[0].message): {str(resp)[:200]!r}"
            )
        m = choices[0].message
        out: dict[str, Any] = {
            "role": "assistant",
            "content": m.content,
            "finish_reason": choices[0].finish_reason,
        }
        if m.tool_calls:
            out["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.function.name, "arguments": c.function.arguments},
                }
                for c in m.tool_calls
                if getattr(c, "function", None) is not None
            ]
        return out

    def turn(self, messages: list[dict[str, Any]], job: Job, sampling: Mapping[str, Any]):
        """``(text, finish_reason, tool results)`` of one agent turn (``messages`` gets the tool traffic).

        Args:
            messages: The agent's history; the tool calls and results are appended to it.
            job: The conversation (its task, scenario and seed).
            sampling: The sampling parameters.

        Returns:
            The reply text (``""`` when it has none), the finish reason (it says so when the model
            was still calling tools after ``max_rounds`` rounds), and the results of the tool calls.
        """
        from generation.api import run_tool_loop

        seed = job.seed % (2**31)
        msg, results = run_tool_loop(
            lambda ms, ts: self.complete(ms, ts, seed, sampling),
            messages,
            self.executor,
            job.task.name,
            happy=bool(job.scenario.happy),
            seed=job.seed,
            max_rounds=self.max_rounds,
        )
        text = msg.get("content") if isinstance(msg.get("content"), str) else ""
        finish = msg.get("finish_reason")
        if msg.get("tool_calls"):
            finish = f"tool_calls after {self.max_rounds} rounds of tool calls"
        return text, finish, results


def run_conversations(
    jobs: Sequence[Job],
    client: Any,
    corpus: Any,
    encoder: Any,
    store: Store,
    generator: str,
    sampling: Mapping[str, Any],
    concurrency: int = 4,
    min_similarity: float | None = None,
    show_progress: bool = True,
    user_client: Any = None,
    tools: Any = None,
    step_reader: Any = None,
) -> None:
    """Run every job not yet in ``store`` (``concurrency`` conversations at once).

    Each finished or failed conversation is added to ``store`` as it ends (a failure is logged).

    Args:
        jobs: The conversations to run (:func:`plan_jobs`).
        client: The agent's client.
        corpus: The workflow source.
        encoder: The sentence encoder of the step matching.
        store: Where the conversations are written; jobs already done there are skipped.
        generator: The records' ``generator`` field.
        sampling: The agent's sampling parameters.
        concurrency: Conversations run at once (default 4; at least 1).
        min_similarity: Floor of the step matching; None: read off the workflow's own phrasings.
        show_progress: Show a progress bar (default True).
        user_client: The LLM user's client; None: the template user.
        tools: A :class:`ToolAgent`; None: no tools.
        step_reader: The learned step reader of the step matching (``"auto"``, a folder); None:
            cosine only.
    """
    from tqdm.auto import tqdm

    from generation.api import TemplateBackend

    from ..task3.workflow.rules import fit_workflow_assigner
    from .user import AssignerStepMatcher

    backend = TemplateBackend()
    backend.bind_corpus(corpus)
    enc = _Encoder(encoder)
    matchers = {}
    todo = [j for j in jobs if not store.done(j.dialogue_id)]
    if len(todo) < len(jobs):
        logger.info("resuming: %d of %d dialogues already done", len(jobs) - len(todo), len(jobs))
    if todo:
        # one node assigner over every task of the source (the other tasks are the rivals that
        # reject a turn of another workflow); the floor read off the workflow's own phrasings
        assigner = fit_workflow_assigner(corpus, enc, min_similarity, step_reader)
    for j in todo:
        if j.task.name not in matchers:
            matchers[j.task.name] = AssignerStepMatcher(assigner, j.task.name, backend.model(j.task))
    with ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="audit") as pool:
        futs = [
            pool.submit(
                converse, j, client, backend, matchers[j.task.name], enc, sampling, 4, user_client, tools
            )
            for j in todo
        ]
        for f in tqdm(
            as_completed(futs), total=len(futs), desc="audit", unit="dlg", disable=not show_progress
        ):
            o = f.result()
            if o.error:
                logger.warning("%s failed: %s", o.job.dialogue_id, o.error)
            store.add(o, generator, sampling)


def make_client(
    agent: str,
    model: str,
    api_key_env: str | None = None,
    timeout: float = 60.0,
    max_retries: int = 3,
    backoff: float = 0.5,
    role: str = "agent",
    option_names: Mapping[str, str] | None = None,
):
    """The project's OpenAI-compatible client for the agent (or the LLM user, ``role``), checked
    (reachable, serves ``model``). ``option_names``: the CLI flags of the URL and the model, named
    by the client's error hints (:class:`~generation.llm.client.OpenAICompatClient`).

    Args:
        agent: The server's API root.
        model: The model name.
        api_key_env: The environment variable holding the API key; None: no key.
        timeout: Seconds per request (default 60).
        max_retries: Retries of a failed request (default 3).
        backoff: Base wait between retries in seconds, doubled at each retry (default 0.5).
        role: ``"agent"`` or the LLM user's name, for the messages.
        option_names: The CLI flags of the URL and the model, for the error hints.

    Returns:
        The checked ``OpenAICompatClient``.

    Raises:
        AuditError: ``api_key_env`` is not set, the client refuses its settings, or the server is
            unreachable or does not serve ``model``.
    """
    from generation.api import EndpointError, OpenAICompatClient

    api_key = None
    if api_key_env:
        api_key = os.environ.get(api_key_env)
        if not api_key:
            raise AuditError(f"--api-key-env {api_key_env}: that environment variable is not set")
    try:
        client = OpenAICompatClient(
            agent,
            model,
            api_key=api_key,
            timeout=timeout,
            max_retries=max_retries,
            concurrency=1,
            backoff=backoff,
            option_names=option_names,
        )
    except ValueError as e:
        raise AuditError(f"{role} {agent!r}: {e}") from None
    try:
        client.check_model()
    except EndpointError as e:
        raise AuditError(f"{role} {agent} (model {model!r}) is not usable: {e}") from None
    return client


def audit_agent(
    agent: str,
    model: str,
    tasks: Sequence[str],
    reference: Any,
    *,
    star: str | os.PathLike | None = None,
    source: str | None = None,
    per_task: int | None = 5,
    scenarios: Any = None,
    out: str | os.PathLike,
    api_key_env: str | None = None,
    concurrency: int = 4,
    encoder: Any = "minilm",
    detector: str = "wf",
    sampling: Mapping[str, Any] | None = None,
    seed: int = 0,
    timeout: float = 60.0,
    max_retries: int = 3,
    backoff: float = 0.5,
    min_similarity: float | None = None,
    detector_options: Mapping[str, Any] | None = None,
    happy_only: bool = False,
    user: str = "template",
    user_model: str | None = None,
    user_api_key_env: str | None = None,
    kb_tools: bool = False,
    max_tool_rounds: int | None = None,
    show_progress: bool = True,
    cli_hints: bool = False,
    step_reader: str | None = None,
):
    """Audit the agent served at ``agent`` (OpenAI-compatible API root) as ``model``.

    Runs ``per_task`` scenarios of each task of ``tasks`` (or the ``scenarios`` given) with the
    template user, writes the dialogues to ``out`` (resumable) and returns the
    :class:`~dialfork_metrics.audit.report.AuditReport` scored against the conformant dialogues of
    ``reference`` (a generator output folder or an exported Hub folder, or a list of records).
    ``user``: ``"template"`` or ``"openai:URL"`` (an LLM user served as ``user_model``).
    ``happy_only`` audits STAR's happy scenarios only (every look-up succeeds) and compares them with
    the reference's happy-scenario dialogues: like with like for an agent without knowledge-base tools.
    ``source``: ``star:PATH`` or ``workflow:PATH`` (a workflow file, docs/workflows.md); ``star``: a
    STAR copy (default ``$DIALFORK_STAR_DIR``).
    ``kb_tools``: offer the agent the task's API as an OpenAI tool and run its calls against the
    source's KB tables (:mod:`generation.kb_tools`; at most ``max_tool_rounds`` rounds of tool calls
    per turn); the report counts the calls and the malformed ones.

    Args:
        agent: The agent's OpenAI-compatible API root, e.g. ``http://127.0.0.1:8000/v1``.
        model: The model name the agent serves (checked against the server's model list); the
            dialogues are recorded with ``generator = "agent:<model>"``.
        tasks: Names of the tasks to audit (at least one).
        reference: The conformant reference dialogues: a generator output folder, an exported Hub
            folder (its ``conformant`` config), or a list of records (see :func:`load_reference`).
        star: A STAR copy; None: ``$DIALFORK_STAR_DIR``. Must agree with ``source`` when both are given.
        source: ``star:PATH`` or ``workflow:PATH``; None: use ``star``.
        per_task: Run the first ``per_task`` single-task scenarios of each task (scenario-id order);
            an integer >= 1, or None for all of them.
        scenarios: Scenario ids to run instead: a mapping task -> ids, or a flat list applied to
            every task; None: chosen by ``per_task``.
        out: Output folder (dialogues, failures, steps and the report files); a rerun with the same
            folder resumes the same agent's audit.
        api_key_env: Name of the environment variable holding the agent's API key; None: no key.
        concurrency: Conversations run at once (threads).
        encoder: Sentence encoder, by name (e.g. ``"minilm"``) or as an encoder object
            (:func:`dialfork_metrics.encoders.get_encoder`).
        detector: Task 3 detector name (:func:`dialfork_metrics.task3.make_detector`), fitted per
            task on the reference; built from its registry entry with the encoder and the workflow
            where it needs them (:func:`dialfork_metrics.audit.report.audit_detector_names`: those
            that learn from conformant dialogues).
        sampling: Chat-completion sampling options sent with every agent request; None:
            ``{"temperature": 0.0, "max_tokens": 256}``.
        seed: Base seed; each dialogue's seed is derived from it and the scenario id.
        timeout: Seconds per HTTP request.
        max_retries: Retries of a failed request (agent and LLM user).
        backoff: Base delay in seconds between retries.
        min_similarity: Least cosine similarity for an agent turn to match a workflow step; None:
            :data:`dialfork_metrics.audit.user.DEFAULT_MIN_SIMILARITY` (0.35).
        detector_options: Constructor options of the detector; None:
            :func:`dialfork_metrics.audit.report.audit_detector_options` (the settings chosen
            at ``position_weight`` 0).
        happy_only: Audit only STAR's happy scenarios and compare with the reference's happy ones.
        user: ``"template"`` (the template user) or ``"openai:URL"`` (an LLM user).
        user_model: The LLM user's model name (required with ``user="openai:URL"``).
        user_api_key_env: Name of the environment variable holding the LLM user's API key.
        kb_tools: Offer the agent the task's API as an OpenAI tool run against the KB tables.
        max_tool_rounds: Most rounds of tool calls per agent turn with ``kb_tools``; None:
            :data:`generation.kb_tools.DEFAULT_MAX_TOOL_ROUNDS` (4).
        show_progress: Show a tqdm bar over the dialogues.
        cli_hints: Endpoint error hints name the command-line flags (``--agent``, ``--model``,
            ``--user``, ``--user-model``) instead of Python calls (``python -m dialfork_metrics.audit``).
        step_reader: The learned step reader of the step matching that plays the user (``"auto"``: the
            shipped one when the encoder is the packaged MiniLM; a folder); None (default): cosine
            only. The detectors take theirs in ``detector_options`` (``step_reader``).

    Returns:
        The :class:`~dialfork_metrics.audit.report.AuditReport`, one dict of figures per task;
        it is also saved to ``out`` (``report.json``, ``report.md``, ``report.html``).

    Raises:
        AuditError: Bad input found before or after the run: a bad ``source``/``star``, an unknown
            task or scenario, a bad ``per_task``, a reference without conformant dialogues of a
            task (of a happy scenario with ``happy_only``), a bad ``user`` or a missing
            ``user_model``, an unset API-key variable, an unreachable agent or one that does not
            serve ``model``, an ``out`` holding another agent's dialogues, a task without an API
            with ``kb_tools``, or every dialogue failed.
        ValueError: An unknown ``detector`` or ``encoder`` name, or a detector the audit cannot fit
            (one that learns from labelled forks; an LLM without ``model`` in ``detector_options``),
            refused before any conversation.
    """
    from ..encoders import get_encoder
    from .report import audit_detector_spec, load_reference, score_audit

    audit_detector_spec(detector, detector_options)  # an unknown or unfittable detector: before any dialogue
    spec = parse_source(source, None if star is None else os.fspath(star))
    corpus = open_audit_source(spec)
    tasks = list(tasks)
    jobs = plan_jobs(corpus, tasks, per_task, scenarios, seed, happy_only)
    refs = load_reference(reference, tasks)
    if happy_only:
        happy = {str(s.scenario_id) for s in corpus.scenarios if s.happy}
        refs = {t: [r for r in rs if str(r["scenario_id"]) in happy] for t, rs in refs.items()}
        empty = [t for t, rs in refs.items() if not rs]
        if empty:
            raise AuditError(
                f"reference {reference}: no conformant dialogue of a happy scenario of task(s) "
                + ", ".join(empty)
            )
    user_client = None
    if user != "template":
        kind, sep, url = str(user).partition(":")
        if kind != "openai" or not sep or not url:
            raise AuditError(f"user {user!r}: expected 'template' or 'openai:URL'")
        if not user_model:
            raise AuditError("an openai:URL user needs the served model's name (--user-model)")
        user_client = make_client(
            url,
            user_model,
            user_api_key_env,
            timeout,
            max_retries,
            backoff,
            role="simulated user",
            option_names={"base_url": "--user openai:", "model": "--user-model"} if cli_hints else None,
        )
    store = Store(out)
    generator = f"agent:{model}"
    others = sorted(
        {r.get("generator") for r in [*store.records.values(), *store.failed.values()]} - {generator}
    )
    if others:
        raise AuditError(
            f"{store.out} holds dialogues of {', '.join(map(str, others))}, not of {generator}; "
            "give another --out (a rerun resumes only the same agent's audit)"
        )
    client = make_client(
        agent,
        model,
        api_key_env,
        timeout,
        max_retries,
        backoff,
        option_names={"base_url": "--agent", "model": "--model"} if cli_hints else None,
    )
    tool_agent = None
    if kb_tools:
        from generation.api import KBExecutor, ToolSpecError

        try:
            executor = KBExecutor(corpus, tasks)
        except ToolSpecError as e:
            raise AuditError(str(e)) from None
        no_api = [t for t in tasks if not executor.tools(t)]
        if no_api:
            raise AuditError(f"--kb-tools: task(s) {', '.join(no_api)} have no API to offer as a tool")
        key = os.environ.get(api_key_env) if api_key_env else None
        tool_agent = ToolAgent(agent, model, executor, key, timeout, max_retries, max_tool_rounds)
    enc = get_encoder(encoder)
    sampling = dict(DEFAULT_SAMPLING if sampling is None else sampling)
    run_conversations(
        jobs,
        client,
        corpus,
        enc,
        store,
        generator,
        sampling,
        concurrency,
        min_similarity,
        show_progress,
        user_client,
        tool_agent,
        step_reader,
    )
    ids = {j.dialogue_id for j in jobs}
    if ids and all(i in store.failed for i in ids):
        first = next(store.failed[i]["error"] for i in sorted(ids))
        raise AuditError(
            f"every dialogue failed ({len(ids)}); first error: {first} (details in {store.out / FAILED_FILE})"
        )
    from generation.api import TemplateBackend

    backend = TemplateBackend()
    backend.bind_corpus(corpus)
    report = score_audit(
        jobs,
        store,
        refs,
        enc,
        backend,
        detector=detector,
        agent=agent,
        model=model,
        detector_options=detector_options,
        workflow=corpus,
    )
    report.save(store.out)
    return report
