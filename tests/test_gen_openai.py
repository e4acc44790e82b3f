"""OpenAIBackend against a fake OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import json

import pytest
from test_openai_client import FakeOpenAIServer

from dialfork_dataset.taxonomy import forks_per_source
from generation.backends.base import TurnRequest
from generation.backends.hf import turn_sampling_seed
from generation.backends.openai_backend import OpenAIBackend, request_seed
from generation.llm.client import EndpointError

MSGS = [
    {"role": "system", "content": "ROLE"},
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": "hello"},
    {"role": "user", "content": "book it"},
    {"role": "system", "content": "INJECT"},
]


def backend(srv, **kw):
    kw.setdefault("backoff", 0.01)
    kw.setdefault("timeout", 5.0)
    return OpenAIBackend("fake-model", srv.base_url, **kw)


def test_request_seed_is_31_bit_and_follows_the_turn_seed():
    assert request_seed(5, 3, "system") == turn_sampling_seed(5, 3, "system") % 2**31
    assert 0 <= request_seed(2**62, 10**6, "user") < 2**31


def test_generate_sends_seeds_sampling_and_messages():
    with FakeOpenAIServer() as srv:
        b = backend(srv, max_new_tokens=40, stop=["\nUser:"], concurrency=4)
        assert b.decoding() == {"temperature": 1.3, "top_p": 0.95, "top_k": 64, "max_new_tokens": 40}
        assert b.name == "fake-model" and b.describe()["base_url"] == srv.base_url
        reqs = [
            TurnRequest(f"d{i}", "system", MSGS[:4] + [{"role": "user", "content": f"q{i}"}], 100 + i, 3)
            for i in range(6)
        ]
        out = b.generate(reqs)
        seeds = [request_seed(100 + i, 3, "system") for i in range(6)]
        assert out == [f"seed={s} n=5 last=q{i}" for i, s in enumerate(seeds)]
        body = next(x for x in srv.chat_bodies if x["seed"] == seeds[0])
        assert body["messages"] == MSGS[:4] + [{"role": "user", "content": "q0"}]
        assert (body["temperature"], body["top_p"], body["top_k"], body["max_tokens"], body["stop"]) == (
            1.3,
            0.95,
            64,
            40,
            ["\nUser:"],
        )
        assert all(r.extra["finish_reason"] == "stop" and r.extra["attempts"] == 1 for r in reqs)
        assert b.stats["requests"] == 6 and b.stats["new_tokens"] == 12
        # same request, same seed -> same text, whatever else is in the batch
        again = b.generate([TurnRequest("x", "user", MSGS[:2], 7, 0), reqs[2]])
        assert again[1] == out[2]


def test_top_k_zero_is_not_sent_and_merge_folds_system_messages():
    with FakeOpenAIServer() as srv:
        b = backend(srv, top_k=0, system_role="merge", extra_body={"repetition_penalty": 1.0})
        b.generate([TurnRequest("d", "system", MSGS, 1, 3)])
        body = srv.chat_bodies[-1]
        assert "top_k" not in body and body["repetition_penalty"] == 1.0
        assert body["messages"] == [
            {"role": "user", "content": "ROLE\n\nhi"},
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "book it\n\nINJECT"},
        ]


def test_unreachable_server_fails_at_construction(dead_port):
    with pytest.raises(EndpointError, match="cannot reach.*Is the server"):
        OpenAIBackend("m", f"http://127.0.0.1:{dead_port}/v1", max_retries=1, backoff=0.01)


def test_cli_reports_an_unreachable_server_in_one_line(tmp_path, star_dir, capsys, dead_port):
    from generation.cli import main

    rc = main(
        [
            "--backend",
            "openai",
            "--backend-option",
            "model=m",
            "--backend-option",
            f"base_url=http://127.0.0.1:{dead_port}/v1",
            "--backend-option",
            "max_retries=0",
            "--star",
            str(star_dir),
            "--out",
            str(tmp_path / "out"),
            "--tasks",
            "weather",
            "--no-progress",
        ]
    )
    assert rc == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "cannot reach" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_unknown_model_fails_at_construction():
    with FakeOpenAIServer(models=["llama-3-8b"]) as srv:
        with pytest.raises(EndpointError, match=r"does not serve model 'fake-model'.*llama-3-8b"):
            backend(srv)
        assert srv.chat_count == 0


def test_transient_errors_are_retried_and_garbage_is_a_clear_error():
    flaky = {1: (503, b"busy", {}), 2: (429, b"{}", {"Retry-After": "0"})}
    with FakeOpenAIServer(handler=lambda body, n: flaky.get(n)) as srv:
        r = TurnRequest("d", "user", MSGS[:2], 3, 0)
        assert backend(srv).generate([r]) == [f"seed={request_seed(3, 0, 'user')} n=2 last=hi"]
        assert r.extra["attempts"] == 3
    with FakeOpenAIServer(handler=lambda body, n: (200, b'{"choices": []}', {})) as srv:
        with pytest.raises(EndpointError, match=r"garbage reply.*no 'choices'.*\[dialogue 'd', turn 0\]"):
            backend(srv, max_retries=2).generate([TurnRequest("d", "user", MSGS[:2], 3, 0)])
        assert srv.chat_count == 3


def test_bad_options_and_requests():
    with pytest.raises(ValueError, match="top_p must be in.*system_role must be"):
        OpenAIBackend("m", "http://127.0.0.1:1/v1", top_p=2, system_role="drop", check_model=False)
    with FakeOpenAIServer() as srv:
        b = backend(srv)
        assert b.generate([]) == []
        with pytest.raises(ValueError, match="request 0: expected a TurnRequest"):
            b.generate([{"messages": MSGS}])
        with pytest.raises(ValueError, match=r"conversation 0, message 0: role 'wizard'.*requests: 0=dz"):
            b.generate([TurnRequest("dz", "user", [{"role": "wizard", "content": "x"}], 1, 0)])
        assert srv.chat_count == 0


# -- through the engine ----------------------------------------------------------------------------
def _config(star_dir, out, base_url):
    from generation.engine import GenerationConfig

    return GenerationConfig(
        star=str(star_dir),
        out=str(out),
        backend="openai",
        backend_options={"model": "fake-model", "base_url": base_url},
        tasks=("weather",),
        per_task=2,
        budget=3,
        batch_size=1,
    )


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory, star_dir):
    """One uninterrupted run of 2 scenarios against the fake server: (output folder, request bodies)."""
    from generation.engine import generate_corpus

    out = tmp_path_factory.mktemp("openai-clean") / "out"
    with FakeOpenAIServer(max_requests=400) as srv:
        m = generate_corpus(
            _config(star_dir, out, srv.base_url), backend=backend(srv, concurrency=8), progress=False
        )
    assert m.counts["total"]["records"] == 2 * (1 + forks_per_source())
    return out, srv.chat_bodies


def test_engine_with_fake_server_replays_prefixes_and_injects_at_t_k(clean_run):
    out, bodies = clean_run
    recs = [json.loads(x) for x in (out / "weather.jsonl").read_text().splitlines()]
    assert all(r["generator"] == "fake-model" for r in recs)
    forks = [r for r in recs if r["hallucination_type"]]
    assert len(forks) == 2 * forks_per_source() and all(f["prefix_divergence"] == 0 for f in forks)
    for f in forks:
        # the request for system turn t_k (turn index 2 t_k - 1: the user opens) ends with the instruction
        seed = request_seed(f["seed"], 2 * f["fork_turn"] - 1, "system")
        at_tk = [b for b in bodies if b["seed"] == seed and f["instruction"] in b["messages"][-1]["content"]]
        assert at_tk and all(b["messages"][-1]["role"] == "system" for b in at_tk)
        assert all(sum(m["role"] == "assistant" for m in b["messages"]) == f["fork_turn"] - 1 for b in at_tk)


def test_engine_garbage_mid_run_writes_nothing_half_way_and_resumes(tmp_path, star_dir, clean_run):
    from generation.engine import generate_corpus

    def garbage_after(limit):
        return lambda body, n: (200, b"<html>502 Bad Gateway</html>", {}) if n > limit else None

    out = tmp_path / "out"
    with FakeOpenAIServer(handler=garbage_after(180), max_requests=400) as srv:
        with pytest.raises(EndpointError, match="garbage reply"):
            generate_corpus(
                _config(star_dir, out, srv.base_url), backend=backend(srv, max_retries=1), progress=False
            )
    assert not (out / "manifest.json").exists() and not (out / "weather.jsonl").exists()
    shard = (out / "shards" / "shard-00000-of-00001.jsonl.part").read_text().splitlines()
    assert shard[-1].startswith('{"_unit":') and sum(x.startswith('{"_unit":') for x in shard) == 1
    with FakeOpenAIServer(max_requests=400) as srv:
        m = generate_corpus(_config(star_dir, out, srv.base_url), backend=backend(srv), progress=False)
        # only the unfinished scenario: D+ (8 turns) + its forks x 8 turns (136 for the paper's types)
        assert srv.chat_count == 8 + forks_per_source() * 8
    assert m.counts["total"]["records"] == 2 * (1 + forks_per_source())
    assert (out / "weather.jsonl").read_bytes() == (clean_run[0] / "weather.jsonl").read_bytes()


# -- KB tools (--kb-tools) -------------------------------------------------------------------------
TOOL_ARGS = {"Day": "Monday", "City": "Chicago"}


def _tool_calling_handler(body, n):
    """Calls the weather tool on a dialogue's first system turn, then answers with text (default reply)."""
    msgs = body["messages"]
    first_turn = not any(m["role"] == "assistant" for m in msgs)
    if body.get("tools") and first_turn:
        call = {
            "id": f"call_{body['seed']}",
            "type": "function",
            "function": {"name": body["tools"][0]["function"]["name"], "arguments": json.dumps(TOOL_ARGS)},
        }
        reply = {
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "message": {"role": "assistant", "content": None, "tool_calls": [call]},
                }
            ],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1},
        }
        return 200, json.dumps(reply).encode(), None
    return None


@pytest.mark.parametrize("prefix_mode", ["replay", "reuse"])
def test_kb_tools_answer_the_system_agent_and_stay_out_of_the_records(tmp_path, star_dir, prefix_mode):
    from dialfork_dataset.star import StarCorpus
    from generation.engine import generate_corpus, replace_config
    from generation.kb_tools import KBExecutor

    out = tmp_path / "out"
    with FakeOpenAIServer(handler=_tool_calling_handler, max_requests=600) as srv:
        b = backend(srv, concurrency=4)
        config = replace_config(_config(star_dir, out, srv.base_url), kb_tools=True, prefix_mode=prefix_mode)
        m = generate_corpus(config, backend=b, progress=False)
        bodies = srv.chat_bodies
    assert m.counts["total"]["records"] == 2 * (1 + forks_per_source())
    assert m["config"]["kb_tools"] is True and b.describe()["kb_tools"] is True
    assert b.stats["tool_calls"] > 0 and b.stats["tool_errors"] == 0
    ex = KBExecutor(str(star_dir), ["weather"])
    corpus = StarCorpus(star_dir)
    recs = [json.loads(x) for x in (out / "weather.jsonl").read_text().splitlines()]
    for r in recs:  # the records hold text turns only
        assert all(
            set(t) == {"speaker", "text"} and isinstance(t["text"], str) and t["text"] for t in r["turns"]
        )
        assert [t["speaker"] for t in r["turns"]] == ["user", "system"] * (len(r["turns"]) // 2) + (
            ["user"] if len(r["turns"]) % 2 else []
        )
    for r in (x for x in recs if x["hallucination_type"] is None):
        happy = corpus.scenario(r["scenario_id"]).happy
        rows = ex.execute("weather", json.dumps(TOOL_ARGS), happy=happy, seed=r["seed"]).content
        seed = request_seed(r["seed"], 1, "system")
        cid = f"call_{seed}"
        # the request after the call carries the call and its answer, with the executor's rows
        after = [x for x in bodies if x["seed"] == seed and x["messages"][-1]["role"] == "tool"]
        assert after and all(
            x["messages"][-1] == {"role": "tool", "tool_call_id": cid, "content": rows} for x in after
        )
        assert after[0]["messages"][-2]["tool_calls"][0]["id"] == cid
        # later system turns still see it, before the first system turn's text (instructions aside)
        later = [x for x in bodies if x["seed"] == request_seed(r["seed"], 3, "system")]
        assert later and all(
            [mm["role"] for mm in x["messages"] if mm["role"] != "system"][:4]
            == ["user", "assistant", "tool", "assistant"]
            for x in later
        )
    for x in bodies:
        if "tools" in x:
            assert [t["function"]["name"] for t in x["tools"]] == ["weather"]
    users = [x for x in bodies if _is_user_request(x)]
    assert users and not any("tools" in x for x in users)  # the user agent is offered no tool ...
    assert not any(
        mm["role"] == "tool" or "tool_calls" in mm for x in users for mm in x["messages"]
    )  # nor sees any
    if prefix_mode == "reuse":  # a fork's first request (at t_k >= 2) has its parent's tool traffic
        forks = [x for x in recs if x["hallucination_type"] is not None and x["fork_turn"] >= 2]
        assert forks
        for f in forks:
            at_tk = [
                x
                for x in bodies
                if x["seed"] == request_seed(f["seed"], 2 * f["fork_turn"] - 1, "system")
                and f["instruction"] in x["messages"][-1]["content"]
            ]
            assert at_tk and all(any(mm["role"] == "tool" for mm in x["messages"]) for x in at_tk)


def _is_user_request(body) -> bool:
    """A user agent's request: its role prompt is the user agent's (the user opening cue follows it)."""
    from generation import prompts

    return (
        body["messages"][1]["content"] == prompts.render("user_opening")
        if len(body["messages"]) > 1
        else False
    )


def test_without_kb_tools_no_tools_are_sent(clean_run):
    _, bodies = clean_run
    assert bodies and not any("tools" in x for x in bodies)
    assert not any(m["role"] == "tool" or "tool_calls" in m for x in bodies for m in x["messages"])


@pytest.mark.parametrize("name", ["template", "transformers"])
def test_kb_tools_is_refused_for_backends_that_cannot_call_tools(tmp_path, star_dir, name):
    from generation.engine import GenerationConfig, GenerationError, prepare

    config = GenerationConfig(
        star=str(star_dir),
        out=str(tmp_path / "out"),
        backend=name,
        tasks=("weather",),
        per_task=1,
        kb_tools=True,
        backend_options={"model": "never-loaded"},
    )
    with pytest.raises(
        GenerationError, match=r"--kb-tools: the .* backend cannot call tools.*--backend openai"
    ):
        prepare(config)
    assert not (tmp_path / "out").exists()


def test_cli_kb_tools_with_the_template_backend_is_a_one_line_error(tmp_path, star_dir, capsys):
    from generation.cli import main

    rc = main(
        [
            "--star",
            str(star_dir),
            "--out",
            str(tmp_path / "out"),
            "--tasks",
            "weather",
            "--kb-tools",
            "--no-progress",
        ]
    )
    assert rc == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "--kb-tools" in err and "Traceback" not in err


def test_merge_keeps_the_tool_traffic_intact():
    from generation.llm.messages import merge_system_messages

    call = {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}
    msgs = [
        {"role": "system", "content": "ROLE"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": '{"count": 0, "rows": []}'},
        {"role": "assistant", "content": "nothing found"},
        {"role": "user", "content": "ok"},
        {"role": "system", "content": "INJECT"},
    ]
    assert merge_system_messages(msgs) == [
        {"role": "user", "content": "ROLE\n\nhi"},
        msgs[2],
        msgs[3],
        msgs[4],
        {"role": "user", "content": "ok\n\nINJECT"},
    ]


def test_a_reworded_prefix_turn_is_sent_with_the_forks_seed():
    """``reword`` mode: a fork's prefix turn that the hazard rewords goes out with the seed of the
    fork's own stream; a replayed one (and every turn from t_k on) with D+'s."""
    from types import SimpleNamespace

    from generation.llm.sampling import prefix_turn_reworded, reword_salt

    fork = SimpleNamespace(htype="GR", k=2)
    salt = reword_salt("GR", 2)
    seed = next(
        s
        for s in range(1000)
        if prefix_turn_reworded(s, 1, 0.3, salt) and not prefix_turn_reworded(s, 0, 0.3, salt)
    )
    state = SimpleNamespace(fork=fork, injected=False, reword_rate=0.3)
    with FakeOpenAIServer() as srv:
        b = backend(srv)
        kept, reworded = (
            TurnRequest("d-GR-k2", "user", MSGS[:2], seed, 0, state),
            TurnRequest("d-GR-k2", "system", MSGS[:3], seed, 1, state),
        )
        after = TurnRequest(
            "d-GR-k2", "system", MSGS[:3], seed, 1, SimpleNamespace(fork=fork, injected=True, reword_rate=0.3)
        )
        out = b.generate([kept, reworded, after])
    assert out[0].startswith(f"seed={request_seed(seed, 0, 'user')} ")
    assert out[1].startswith(f"seed={request_seed(seed, 1, 'system', salt)} ")
    assert out[2].startswith(f"seed={request_seed(seed, 1, 'system')} ")
    assert request_seed(seed, 1, "system", salt) != request_seed(seed, 1, "system")
