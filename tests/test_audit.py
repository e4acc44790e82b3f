"""The agent audit (dialfork_metrics.audit) against fake agents on 127.0.0.1 (port 0, stopped by PID)."""

from __future__ import annotations

import json

import pytest

from dialfork_metrics.audit import AuditError, audit_agent, serve_fake_agent, step_coverage
from dialfork_metrics.audit.fakes import DEFAULT_DERAIL_AT

TASKS = ("weather", "doctor_schedule", "bank_balance")
PER_TASK = 5


@pytest.fixture(scope="module")
def reference(tmp_path_factory, star_dir):
    from generation import GenerationConfig, generate_corpus

    out = tmp_path_factory.mktemp("audit_ref") / "corpus"
    generate_corpus(
        GenerationConfig(star=str(star_dir), out=str(out), tasks=TASKS, per_task=30, seed=0), progress=False
    )
    return out


@pytest.fixture(scope="module")
def audits(tmp_path_factory, star_dir, reference):
    reps = {}
    for kind in ("faithful", "derailed"):
        out = tmp_path_factory.mktemp(f"audit_{kind}")
        # WIC (another workflow from t_k on): a margin that 5 dialogues per task show on every score
        with serve_fake_agent(kind, star=star_dir, htypes=("WIC",)) as fa:
            # happy scenarios: the fakes have no KB, so every look-up of theirs succeeds (like with like)
            reps[kind] = (
                audit_agent(
                    fa.url,
                    fa.model,
                    TASKS,
                    reference,
                    star=star_dir,
                    per_task=PER_TASK,
                    out=out,
                    concurrency=3,
                    happy_only=True,
                    show_progress=False,
                ),
                out,
            )
    return reps


def test_faithful_agent_ranks_better_on_every_score(audits):
    good, bad = audits["faithful"][0], audits["derailed"][0]
    for task in TASKS:
        g, b = good.task(task), bad.task(task)
        assert g["dialogues"] == b["dialogues"] == PER_TASK and g["failed"] == b["failed"] == 0
        assert g["completion"] > b["completion"], task
        assert g["coverage"] > b["coverage"], task
        assert g["alarm_rate"] < b["alarm_rate"], task
        assert g["flowscore"] < b["flowscore"], task
        assert g["flowscore_n"] == PER_TASK  # every audited scenario has its reference D+
        assert g["completion"] == 1.0 and g["coverage"] == 1.0
        # FlowKL per task too (issue 18: "on every score"), on happy scenarios against the reference's
        # happy-scenario dialogues
        assert g["flowkl"] < b["flowkl"], (task, g["flowkl"], b["flowkl"])
        _assert_alarm_reasons(g)
        _assert_alarm_reasons(b)
    # the derailed agent's first alarms are explained
    assert any(r["alarm_reason"] for t in bad.tasks for r in t["dialogue_rows"])


VIOLATION_KEYS = {"system_turn", "rule", "node", "expected", "slot", "message"}


def _assert_alarm_reasons(task):
    """Every audited row's ``alarm_reason`` (the wf detector's explain_many) and ``rule_violations``
    (the dialogue state's step rules) are consistent with its first alarm and its steps."""
    from dialfork_metrics.task3.workflow.explain import EXPLAINED_RULES
    from dialfork_metrics.task3.workflow.state import RULES

    assert set(RULES) <= set(EXPLAINED_RULES)
    assert task["detector"] == "wf" and len(task["dialogue_rows"]) == task["dialogues"]
    for row in task["dialogue_rows"]:
        where = (task["task"], row["dialogue_id"])
        assert task["first_alarms"][row["dialogue_id"]] == row["first_alarm"], where
        why = row["alarm_reason"]
        assert (why is None) == (row["first_alarm"] is None), (where, row["first_alarm"], why)
        if why is not None:
            assert why["system_turn"] == row["first_alarm"], (where, why)
            assert why["rule"] in EXPLAINED_RULES, (where, why)
            assert isinstance(why["message"], str) and why["message"].strip(), (where, why)
        broken = row["rule_violations"]
        assert isinstance(broken, list), where
        turns = [v["system_turn"] for v in broken]
        assert turns == sorted(set(turns)), (where, turns)  # one verdict per system turn, in order
        for v in broken:
            assert VIOLATION_KEYS <= set(v), (where, v)
            assert v["rule"] in RULES, (where, v)
            assert 1 <= v["system_turn"] <= len(row["steps"]), (where, v, len(row["steps"]))
            assert isinstance(v["message"], str) and v["message"].strip(), (where, v)
        cov = row["coverage"]
        assert cov["visited"] + len(cov["skipped"]) == cov["required"], (where, cov)


def test_first_alarms_are_near_the_injection_turn(audits):
    bad = audits["derailed"][0]
    flags = [f for t in bad.tasks for f in t["first_alarms"].values()]
    # the detectors' operating point is 5% conformant false alarms, held with a finite-sample margin
    # on these small references (30 dialogues a task: the conformal rule, SPEC 8 / issue 20), so a
    # share of the derailed dialogues goes unflagged (9 of 15 here); the flagged ones sit near the
    # injection, and the faithful agent's alarm rate stays lower (test_faithful_agent_ranks_better_on_every_score)
    assert sum(f is not None for f in flags) >= 0.5 * len(flags), flags
    flags = [f for f in flags if f is not None]
    mae = sum(abs(f - DEFAULT_DERAIL_AT) for f in flags) / len(flags)
    assert mae <= 2.0, (mae, flags)  # 1.56 system turns with the finite-sample calibration (1.15 before it)


def test_outputs_are_dialfork_records_and_reports(audits):
    from dialfork_dataset.builder import load_records

    rep, out = audits["derailed"]
    recs = load_records(out)
    assert len(recs) == len(TASKS) * PER_TASK
    assert {r["generator"] for r in recs} == {"agent:fake-derailed"}
    assert all(r["hallucination_type"] is None for r in recs)
    page = rep.to_html()
    assert page.count("<img ") == len(TASKS) and "data:image/png;base64," in page
    assert "class='turn flag'" in page
    md = rep.to_markdown()
    assert md.count("**>> ") >= len(TASKS)
    assert json.loads(rep.to_json())["tasks"][0]["task"] == TASKS[0]
    assert {p.name for p in out.iterdir()} >= {"dialogues.jsonl", "report.html", "report.md", "report.json"}


def test_rerun_skips_completed_scenarios(audits, star_dir, reference):
    """A rerun against an agent that can only fail finds nothing left to do."""
    rep, out = audits["faithful"]
    before = (out / "dialogues.jsonl").read_bytes()
    with serve_fake_agent("garbage", star=star_dir, model="fake-faithful") as fa:
        again = audit_agent(
            fa.url,
            fa.model,
            TASKS,
            reference,
            star=star_dir,
            per_task=PER_TASK,
            out=out,
            happy_only=True,
            show_progress=False,
            max_retries=0,
        )
    assert (out / "dialogues.jsonl").read_bytes() == before
    assert json.loads((out / "failed.json").read_text()) == []
    assert [t["coverage"] for t in again.tasks] == [t["coverage"] for t in rep.tasks]


def test_unreachable_agent(tmp_path, star_dir, reference, dead_port):
    url = f"http://127.0.0.1:{dead_port}/v1"
    with pytest.raises(AuditError, match="is not usable"):
        audit_agent(
            url,
            "m",
            TASKS[:1],
            reference,
            star=star_dir,
            per_task=1,
            out=tmp_path,
            max_retries=0,
            show_progress=False,
        )


@pytest.mark.parametrize("kind, message", [("garbage", "not JSON"), ("empty", "empty reply")])
def test_failing_agents_are_recorded_and_reported(tmp_path, star_dir, reference, kind, message):
    with serve_fake_agent(kind, star=star_dir) as fa:
        with pytest.raises(AuditError, match=message):
            audit_agent(
                fa.url,
                fa.model,
                TASKS[:1],
                reference,
                star=star_dir,
                per_task=2,
                out=tmp_path,
                max_retries=0,
                backoff=0.01,
                show_progress=False,
            )
    failed = json.loads((tmp_path / "failed.json").read_text())
    assert len(failed) == 2 and all(message in f["error"] for f in failed)


def test_scenario_the_source_lacks(tmp_path, star_dir, reference):
    with pytest.raises(AuditError, match="'999999' is not a single-task scenario of task 'weather'"):
        audit_agent(
            "http://127.0.0.1:9/v1",
            "m",
            ["weather"],
            reference,
            star=star_dir,
            scenarios=["999999"],
            out=tmp_path,
            show_progress=False,
        )
    with pytest.raises(AuditError, match="unknown STAR task 'nope'"):
        audit_agent(
            "http://127.0.0.1:9/v1",
            "m",
            ["nope"],
            reference,
            star=star_dir,
            out=tmp_path,
            show_progress=False,
        )


def test_reference_without_conformant_dialogues_of_a_task(tmp_path, star_dir, reference):
    with pytest.raises(AuditError, match="no conformant dialogue of task.*trivia"):
        audit_agent(
            "http://127.0.0.1:9/v1",
            "m",
            ["weather", "trivia"],
            reference,
            star=star_dir,
            per_task=1,
            out=tmp_path,
            show_progress=False,
        )


def test_cli_bad_input_is_one_line_exit_2(tmp_path, star_dir, reference, capsys, dead_port):
    from dialfork_metrics.audit.__main__ import main

    url = f"http://127.0.0.1:{dead_port}/v1"
    rc = main(
        [
            "--agent",
            url,
            "--model",
            "m",
            "--source",
            f"star:{star_dir}",
            "--tasks",
            "weather",
            "--per-task",
            "1",
            "--reference",
            str(reference),
            "--out",
            str(tmp_path),
            "--max-retries",
            "0",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("error: agent") and err.count("\n") == 1
    rc = main(
        [
            "--agent",
            url,
            "--model",
            "m",
            "--source",
            f"csv:{tmp_path}",
            "--tasks",
            "weather",
            "--reference",
            str(reference),
            "--out",
            str(tmp_path),
        ]
    )
    assert rc == 2 and "star:PATH or workflow:PATH" in capsys.readouterr().err
    rc = main(
        [
            "--agent",
            url,
            "--model",
            "m",
            "--source",
            f"workflow:{tmp_path / 'none.yaml'}",
            "--tasks",
            "weather",
            "--reference",
            str(reference),
            "--out",
            str(tmp_path),
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "none.yaml" in err and err.count("\n") == 1


class _Model:
    start, anything_else, bye = "hello", "anything_else", "bye"
    happy_trace = ("hello", "ask_a", "ask_b", "query_ok", "anything_else", "bye")
    loops: set = set()
    is_search_more: set = set()
    outcome = "query_ok"


def test_step_coverage_hand_worked():
    c = step_coverage(["hello", "ask_b", "ask_a", "ask_b", None, "anything_else", "bye"], _Model())
    assert c["required"] == 3 and c["visited"] == 2 and c["skipped"] == ["query_ok"]
    assert c["repeated"] == 1 and c["out_of_order"] == 1 and c["off_workflow"] == 1
    assert c["coverage"] == pytest.approx(2 / 3) and not c["reached_outcome"]
    full = step_coverage(["hello", "ask_a", "ask_b", "query_ok", "bye"], _Model())
    assert full["coverage"] == 1.0 and full["reached_outcome"] and full["out_of_order"] == 0


def test_step_coverage_counts_only_the_steps_the_state_says_were_done():
    said = ["hello", "ask_a", "ask_b", "ask_b", "query_ok", None, "bye"]
    old = step_coverage(said, _Model())
    # done=None: every step said counts (the behaviour before the dialogue state)
    assert step_coverage(said, _Model(), None) == old
    assert old["visited"] == 3 and old["skipped"] == [] and old["coverage"] == 1.0 and old["reached_outcome"]
    # ask_b said (twice in a row: a re-ask, no repeat) but never answered: skipped, and coverage drops
    c = step_coverage(said, _Model(), ["ask_a", "query_ok"])
    assert c["required"] == 3 and c["visited"] == 2 and c["skipped"] == ["ask_b"]
    assert c["coverage"] == pytest.approx(2 / 3) and c["reached_outcome"]
    assert (c["repeated"], c["out_of_order"], c["off_workflow"]) == (0, 0, 1)
    # the outcome said before its slots were filled: not reached
    c = step_coverage(said, _Model(), ["ask_a", "ask_b"])
    assert c["skipped"] == ["query_ok"] and not c["reached_outcome"] and c["coverage"] == pytest.approx(2 / 3)
    # done holds a step never said: still skipped (done only takes away); nothing done: coverage 0
    c = step_coverage(["hello", "ask_a", "bye"], _Model(), ["ask_a", "ask_b", "query_ok"])
    assert c["visited"] == 1 and c["skipped"] == ["ask_b", "query_ok"]
    c = step_coverage(said, _Model(), [])
    assert c["visited"] == 0 and c["coverage"] == 0.0 and c["skipped"] == ["ask_a", "ask_b", "query_ok"]


def test_html_report_escapes_what_the_agent_says():
    from dialfork_metrics.audit import AuditReport

    evil = "<script>alert(1)</script><img src=x onerror=alert(2)>"
    row = {
        "dialogue_id": "audit-weather-1",
        "scenario_id": "1",
        "steps": [None],
        "completed": False,
        "coverage": {"coverage": 0.0},
        "first_alarm": 1,
        "flowscore": 0.5,
    }
    task = {
        "task": "weather",
        "dialogues": 1,
        "failed": 1,
        "completion": 0.0,
        "coverage": 0.0,
        "skipped": 1.0,
        "repeated": 0.0,
        "out_of_order": 0.0,
        "off_workflow": 1.0,
        "alarm_rate": 1.0,
        "first_alarms": {"audit-weather-1": 1},
        "flowkl": None,
        "flowscore": 0.5,
        "flowscore_n": 1,
        "failures": [{"dialogue_id": "audit-weather-2", "error": evil}],
        "dialogue_rows": [row],
        "deviant": [
            {
                "dialogue_id": "audit-weather-1",
                "flowscore": 0.5,
                "first_alarm": 1,
                "flagged_position": 1,
                "turns": [{"speaker": "user", "text": "hi"}, {"speaker": "system", "text": evil}],
            }
        ],
    }
    page = AuditReport(agent="http://x/<b>", model=evil, detector="it", tasks=[task]).to_html()
    assert "<script>" not in page and "<img src=x" not in page and "&lt;script&gt;" in page
    assert page.count("<img ") == 1  # the plot only


def test_openai_user(tmp_path, star_dir, reference, dead_port):
    from dialfork_metrics.audit.fakes import scripted_user

    with (
        serve_fake_agent("faithful", star=star_dir) as agent,
        serve_fake_agent("user", star=star_dir) as user,
    ):
        rep = audit_agent(
            agent.url,
            agent.model,
            ["weather"],
            reference,
            star=star_dir,
            per_task=1,
            out=tmp_path,
            user=f"openai:{user.url}",
            user_model=user.model,
            show_progress=False,
        )
    rec = json.loads((tmp_path / "dialogues.jsonl").read_text().splitlines()[0])
    users = [t["text"] for t in rec["turns"] if t["speaker"] == "user"]
    assert users[0] == "Hello." and users[-1] == "Thanks, that's all. Goodbye!"
    assert [t["speaker"] for t in rec["turns"]][:4] == ["user", "system", "user", "system"]
    assert rep.task("weather")["dialogues"] == 1
    assert scripted_user([{"role": "user", "content": "x"}]) == "Hello."
    with pytest.raises(AuditError, match="simulated user http://127.0.0.1:.* is not usable"):
        audit_agent(
            agent.url,
            agent.model,
            ["weather"],
            reference,
            star=star_dir,
            per_task=1,
            out=tmp_path,
            user=f"openai:http://127.0.0.1:{dead_port}/v1",
            user_model="u",
            max_retries=0,
            show_progress=False,
        )
    with pytest.raises(AuditError, match="--user-model"):
        audit_agent(
            agent.url,
            agent.model,
            ["weather"],
            reference,
            star=star_dir,
            per_task=1,
            out=tmp_path,
            user="openai:http://127.0.0.1:9/v1",
            show_progress=False,
        )


def test_failed_dialogues_are_retried_by_a_rerun(tmp_path, star_dir, reference):
    with serve_fake_agent("empty", star=star_dir, model="agent") as fa:
        with pytest.raises(AuditError, match="every dialogue failed"):
            audit_agent(
                fa.url,
                fa.model,
                ["weather"],
                reference,
                star=star_dir,
                per_task=2,
                out=tmp_path,
                max_retries=0,
                show_progress=False,
            )
    assert len(json.loads((tmp_path / "failed.json").read_text())) == 2
    with serve_fake_agent("faithful", star=star_dir, model="agent") as fa:
        rep = audit_agent(
            fa.url,
            fa.model,
            ["weather"],
            reference,
            star=star_dir,
            per_task=2,
            out=tmp_path,
            show_progress=False,
        )
    assert json.loads((tmp_path / "failed.json").read_text()) == []
    assert rep.task("weather")["dialogues"] == 2 and rep.task("weather")["failed"] == 0
    with pytest.raises(AuditError, match="holds dialogues of agent:agent, not of agent:other"):
        audit_agent(
            "http://127.0.0.1:9/v1",
            "other",
            ["weather"],
            reference,
            star=star_dir,
            per_task=2,
            out=tmp_path,
            show_progress=False,
        )


def test_plan_and_source_parsing(star_dir):
    from dialfork_dataset.star import StarCorpus
    from dialfork_metrics.audit.core import parse_source, plan_jobs

    corpus = StarCorpus(star_dir)
    jobs = plan_jobs(corpus, ["weather"], 4, happy_only=True)
    assert len(jobs) == 4 and all(j.scenario.happy for j in jobs)
    ids = [int(j.scenario.scenario_id) for j in jobs]
    assert ids == sorted(ids)
    assert plan_jobs(corpus, ["weather"], 3)[0].seed == plan_jobs(corpus, ["weather"], 1)[0].seed
    assert parse_source("star:/x", None) == "/x" and parse_source(None, "/y") == "/y"
    assert parse_source("workflow:/w.yaml", None) == "workflow:/w.yaml"
    for bad in ("csv:/x", "star:", "workflow:", "/x"):
        with pytest.raises(AuditError):
            parse_source(bad, None)
    with pytest.raises(AuditError, match="name different workflow sources"):
        parse_source("star:/x", "/y")
    with pytest.raises(AuditError, match="name different workflow sources"):
        parse_source("workflow:/x", "/x")
    with pytest.raises(AuditError, match="per_task must be"):
        plan_jobs(corpus, ["weather"], 0)


def test_kb_tools_results_come_back_as_tool_messages(tmp_path, star_dir, reference):
    """The ``tools`` fake calls the task's tool (one valid call, one malformed) and answers with the
    tool messages it got back (it refuses results that are not role: tool answers to its calls)."""
    from dialfork_dataset.star import StarCorpus
    from dialfork_metrics.audit.fakes import example_arguments
    from generation.kb_tools import KBExecutor

    with serve_fake_agent("tools", star=star_dir) as fa:
        rep = audit_agent(
            fa.url,
            fa.model,
            ["weather"],
            reference,
            star=star_dir,
            per_task=2,
            out=tmp_path,
            kb_tools=True,
            show_progress=False,
        )
    ex = KBExecutor(str(star_dir), ["weather"])
    (tool,) = ex.tools("weather")
    corpus = StarCorpus(star_dir)
    steps = json.loads((tmp_path / "steps.json").read_text())
    for line in (tmp_path / "dialogues.jsonl").read_text().splitlines():
        rec = json.loads(line)
        happy = corpus.scenario(rec["scenario_id"]).happy
        good = ex.execute("weather", json.dumps(example_arguments(tool)), happy=happy, seed=rec["seed"])
        assert good.ok and json.loads(good.content)["rows"][0]["Day"] == "Sunday"
        first_system = next(t["text"] for t in rec["turns"] if t["speaker"] == "system")
        bad = json.loads(first_system.split(" | ")[1])
        assert first_system.split(" | ")[0] == "Results: " + good.content
        assert "not valid JSON" in bad["error"]
        calls = steps[rec["dialogue_id"]]["tool_calls"]
        assert [(c["system_turn"], c["ok"]) for c in calls] == [(1, True), (1, False)]
    t = rep.task("weather")
    assert t["tool_calls"] == 4 and t["tool_errors"] == 2 and t["dialogues"] == 2
    assert "| tool errors |" in rep.to_markdown()


def test_workflow_source(tmp_path):
    """Audit fake agents against a workflow file (examples/workflows/insurance.yaml)."""
    from pathlib import Path

    from generation import GenerationConfig, generate_corpus

    wf = Path(__file__).resolve().parents[1] / "examples" / "workflows" / "insurance.yaml"
    src = f"workflow:{wf}"
    tasks = ["insurance_file_claim", "insurance_claim_status"]
    ref = tmp_path / "ref"
    generate_corpus(
        GenerationConfig(star=src, out=str(ref), tasks=tuple(tasks), per_task=6, seed=0), progress=False
    )
    reps = {}
    for kind in ("faithful", "derailed"):
        with serve_fake_agent(kind, source=src, htypes=("SSPC",)) as fa:
            reps[kind] = audit_agent(
                fa.url,
                fa.model,
                tasks,
                ref,
                source=src,
                per_task=3,
                out=tmp_path / kind,
                kb_tools=False,
                show_progress=False,
            )
    for task in tasks:
        g, b = reps["faithful"].task(task), reps["derailed"].task(task)
        assert g["dialogues"] == b["dialogues"] == 3 and g["failed"] == 0
        assert g["coverage"] >= 0.9 and g["coverage"] > b["coverage"], (task, g["coverage"], b["coverage"])
    recs = [json.loads(x) for x in (tmp_path / "faithful" / "dialogues.jsonl").read_text().splitlines()]
    assert {r["task"] for r in recs} == set(tasks) and all(r["domain"] == "insurance" for r in recs)
    with pytest.raises(AuditError, match="weather"):
        audit_agent(
            "http://127.0.0.1:9/v1",
            "m",
            ["weather"],
            ref,
            source=src,
            per_task=1,
            out=tmp_path / "x",
            show_progress=False,
        )


def test_audit_detector_settings_are_the_single_threshold_selection():
    # the audit's default settings are what the train-only selection on the full template corpus
    # chooses among its position_weight 0 rows (the committed selection table), at weight 0
    from pathlib import Path

    from dialfork_metrics.audit.report import SINGLE_THRESHOLD_SETTINGS, audit_detector_options
    from dialfork_metrics.task3.streaming import SELECTABLE

    run = json.loads(
        (
            Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "detectors_full_pw6.json"
        ).read_text(encoding="utf-8")
    )
    target = run["selection_meta"]["false_alarm_rate"]
    for name, want in SINGLE_THRESHOLD_SETTINGS.items():
        rows = [
            r
            for r in run["selection_table"]
            if r["detector"] == name and r["position_weight"] == 0 and r["cov_c"] <= target
        ]
        best = max(rows, key=lambda r: r["score"])
        assert {k: best[k] for k in SELECTABLE if k != "position_weight"} == want, name
        assert audit_detector_options(name) == {**want, "position_weight": 0.0}
    assert audit_detector_options("it", {}) == {} and audit_detector_options("first") == {}


def test_cli_help_states_every_default():
    import argparse

    from dialfork_metrics.audit.__main__ import build_parser

    text = build_parser().format_help()
    for flag, default in (
        ("--concurrency", "4"),
        ("--encoder", "minilm"),
        ("--timeout", "60.0"),
        ("--max-retries", "3"),
    ):
        (action,) = [a for a in build_parser()._actions if flag in a.option_strings]
        assert f"(default: {default})" in action.help and len(action.help) > 30, (flag, action.help)
    missing = [
        a.option_strings[0]
        for a in build_parser()._actions
        if a.option_strings
        and not a.required
        and not isinstance(a, argparse._HelpAction)
        and "default" not in (a.help or "")
    ]
    assert not missing and "--timeout" in text


@pytest.fixture()
def root_404_server():
    """An OpenAI-compatible server whose API root is /v1: anything else answers 404 (port 0, a thread)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def _send(self, status, body):
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            ok = self.path == "/v1/models"
            self._send(200 if ok else 404, b'{"data": [{"id": "m"}]}' if ok else b'{"detail": "Not Found"}')

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self._send(404, b'{"detail": "Not Found"}')

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


def test_404_hint_names_the_cli_flags_from_the_cli(tmp_path, star_dir, reference, capsys, root_404_server):
    from dialfork_metrics.audit.__main__ import main

    url = root_404_server  # no /v1: every POST /chat/completions is a 404
    rc = main(
        [
            "--agent",
            url,
            "--model",
            "m",
            "--star",
            str(star_dir),
            "--tasks",
            "weather",
            "--per-task",
            "1",
            "--reference",
            str(reference),
            "--out",
            str(tmp_path / "cli"),
            "--max-retries",
            "0",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert rc == 2 and err.startswith("error: every dialogue failed")
    assert (
        f"--agent {url} is wrong" in err and f"e.g. --agent {url}/v1" in err and f"curl {url}/models" in err
    )
    assert "--model 'm'" in err and "OpenAICompatClient" not in err
    # from Python, the hint names the Python arguments and call
    with pytest.raises(AuditError, match=r"base_url .* is wrong .*OpenAICompatClient\.list_models\(\)"):
        audit_agent(
            url,
            "m",
            ["weather"],
            reference,
            star=star_dir,
            per_task=1,
            out=tmp_path / "py",
            max_retries=0,
            show_progress=False,
        )


def test_repeated_steps_except_the_workflows_own_loop_and_a_re_ask(star_dir):
    """Issue 46 item 4: doctor_schedule's "no" to the offered booking goes back to the doctor question
    (the workflow's loop), and a question asked again right after a reply that did not answer it is a
    clarification: neither is a repeat; a question asked again out of the blue still is."""
    from dialfork_dataset.sources import open_source
    from generation.api import TemplateBackend

    b = TemplateBackend()
    src = open_source(str(star_dir))
    b.bind_corpus(src)
    doctor, weather = b.model(src.task("doctor_schedule")), b.model(src.task("weather"))
    asks = ["doctor_ask_doctor_name", "doctor_ask_day", "doctor_ask_start_time", "doctor_ask_symptoms"]
    offer, booked = "doctor_inform_booking_available", "doctor_inform_booking_successful"
    looped = ["hello", "ask_name", *asks, offer, *asks, offer, booked, "anything_else", "doctor_bye"]
    assert step_coverage(looped, doctor)["repeated"] == 0  # the faithful fake's dialogue: was 5
    re_ask = [
        "hello",
        "weather_ask_day",
        "weather_ask_day",
        "weather_ask_location",
        "weather_inform_forecast",
    ]
    assert step_coverage(re_ask, weather)["repeated"] == 0  # was 1
    again = ["hello", "ask_name", *asks, "doctor_ask_day", offer, booked]  # no loop went back to the day
    assert step_coverage(again, doctor)["repeated"] == 1
    after = ["hello", "weather_ask_day", "weather_ask_location", "weather_ask_day", "weather_inform_forecast"]
    assert step_coverage(after, weather)["repeated"] == 1


@pytest.mark.parametrize("per_task, said", [(2, True), (5, False)])
def test_the_cli_says_flowkl_needs_five_audited_dialogues(tmp_path, monkeypatch, capsys, per_task, said):
    """Issue 51: ``--per-task 2`` showed FlowKL "n/a" without saying why; the CLI now says it needs 5."""
    import dialfork_dataset.hub
    from dialfork_metrics.audit import core
    from dialfork_metrics.audit.__main__ import FLOWKL_MIN_AUDITED, main
    from dialfork_metrics.flowgraph.metric import MIN_CROSSFIT_TARGET

    class Report:
        def to_markdown(self):
            return "| task | FlowKL |\n| weather | n/a |"

    monkeypatch.setattr(dialfork_dataset.hub, "resolve_data", lambda *a, **k: None)
    monkeypatch.setattr(core, "audit_agent", lambda *a, **k: Report())
    rc = main(
        ["--agent", "http://127.0.0.1:9/v1", "--model", "m", "--tasks", "weather", "--per-task", str(per_task),
         "--reference", str(tmp_path), "--out", str(tmp_path / "out"), "--star", str(tmp_path)]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0 and FLOWKL_MIN_AUDITED == MIN_CROSSFIT_TARGET == 5
    note = f"note: FlowKL needs at least 5 audited dialogues per task; with {per_task} it is n/a"
    assert (note in out) is said
