"""Zero-shot LLM detectors: a tiny randomly initialised transformers chat model built from a config
(no download), and a fake OpenAI-compatible server on loopback."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from fixtures.tiny_models import tiny_model_dir

from dialfork_metrics.task3 import LLMDetector, make_detector
from dialfork_metrics.task3.llm.detector import build_prompt, load_prompt, render_dialogue
from dialfork_metrics.task3.llm.parsing import check_range, parse_turn_answer


def dialogue(did: str, n_sys: int, answer: str = "", task: str = "weather"):
    turns = []
    for k in range(1, n_sys + 1):
        turns.append({"speaker": "user", "text": f"user says {k} {answer}".strip()})
        turns.append({"speaker": "system", "text": f"system answers {k}"})
    return {"dialogue_id": did, "turns": turns, "num_system_turns": n_sys, "task": task}


def test_prompts_render():
    d = dialogue("a", 3)
    text = render_dialogue(d["turns"])
    assert text.splitlines()[1] == "Assistant [turn 1]: system answers 1"
    assert text.splitlines()[-1] == "Assistant [turn 3]: system answers 3"
    p = build_prompt(load_prompt(False), d["turns"])
    assert "1 to 3" in p and "NONE" in p and "{" not in p
    pw = build_prompt(load_prompt(True), d["turns"], task="weather", workflow="1. Ask the city")
    assert '"weather"' in pw and "1. Ask the city" in pw
    with pytest.raises(ValueError, match="unknown field"):
        build_prompt("{dialogue} {oops}", d["turns"])


# -- a fake OpenAI-compatible server -----------------------------------------------------------
class _Handler(BaseHTTPRequestHandler):
    bodies: list = []

    def log_message(self, *a):  # keep pytest output clean
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).bodies.append(body)
        prompt = body["messages"][-1]["content"]
        m = re.search(r"\[\[ANSWER:(.*?)\]\]", prompt)
        reply = {
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": m.group(1) if m else "NONE"},
                    "finish_reason": "stop",
                }
            ],
            "model": body["model"],
            "object": "chat.completion",
        }
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture()
def fake_server():
    _Handler.bodies = []
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()
    srv.server_close()


def test_openai_backend_end_to_end(fake_server):
    dialogues = [
        dialogue("d1", 4, "[[ANSWER:Turn 2]]"),
        dialogue("d2", 4, "[[ANSWER:the 3rd assistant turn]]"),
        dialogue("d3", 4, "[[ANSWER:No deviation.]]"),
        dialogue("d4", 4, "[[ANSWER:I like turtles]]"),
        dialogue("d5", 4, "[[ANSWER:System turn 9]]"),
        dialogue("d6", 5, "[[ANSWER:The dialogue follows the workflow]]"),
    ]
    det = make_detector(
        "llm", model="fake-model", backend="openai", base_url=fake_server, api_key="k", max_new_tokens=8
    )
    assert det.fit(dialogues) is det
    preds = det.predict_many(dialogues)
    assert preds == [2, 3, None, None, None, None]
    rep = det.last_report
    assert (rep["n"], rep["turn"], rep["none"], rep["unparsable"], rep["out_of_range"]) == (6, 2, 2, 1, 1)
    assert [(e["dialogue_id"], e["status"]) for e in rep["examples"]] == [
        ("d4", "unparsable"),
        ("d5", "out_of_range"),
    ]
    assert rep["examples"][0]["answer"] == "I like turtles"
    body = _Handler.bodies[0]
    assert body["model"] == "fake-model" and body["temperature"] == 0.0 and body["max_tokens"] == 8
    assert det.predict(dialogues[0]) == 2


def test_openai_with_workflow(fake_server):
    det = LLMDetector(
        model="m",
        backend="openai",
        base_url=fake_server,
        with_workflow=True,
        workflows={"weather": "1. Ask for the city\n2. Give the forecast"},
    )
    assert det.predict_many([dialogue("w", 4, "[[ANSWER:4]]")]) == [4]
    assert "2. Give the forecast" in _Handler.bodies[-1]["messages"][0]["content"]
    blind = {"dialogue_id": "x", "turns": dialogue("x", 4)["turns"]}
    with pytest.raises(ValueError, match="needs the dialogue's 'task'"):
        det.predict_many([blind])


def test_with_workflow_from_star(star_dir, fake_server):
    det = LLMDetector(
        model="m", backend="openai", base_url=fake_server, with_workflow=True, star_dir=star_dir
    )
    assert det.predict_many([dialogue("w", 4, "[[ANSWER:none]]", task="weather")]) == [None]
    prompt = _Handler.bodies[-1]["messages"][0]["content"]
    wf = prompt.split("Workflow:")[1].split("The assistant's turns")[0]
    assert len(wf.strip()) > 50


def test_llm_bad_config():
    """scikit-learn's convention: the constructor stores its parameters; fit checks them."""
    from sklearn.utils._param_validation import InvalidParameterError

    det = LLMDetector(model="m", backend="openai")
    with pytest.raises(ValueError, match="base_url"):
        det.fit()
    with pytest.raises(ValueError, match="model="):
        LLMDetector(backend="transformers").fit()
    with pytest.raises(InvalidParameterError, match="'backend' parameter of LLMDetector.*'vllm-magic'"):
        LLMDetector(model="m", backend="vllm-magic").fit()
    with pytest.raises(ValueError, match="base_url"):  # predicting fits first (zero-shot)
        det.predict_many([dialogue("a", 4)])


# -- a tiny random transformers chat model -------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return tiny_model_dir("detector", tmp_path_factory)


def test_transformers_backend_end_to_end(tiny_model):
    dialogues = [dialogue(f"t{i}", n) for i, n in enumerate([4, 6, 5, 8, 4])]
    det = make_detector(
        "llm", model=tiny_model, backend="transformers", batch_size=2, max_new_tokens=4, device="cpu"
    )
    preds = det.predict_many(dialogues)
    rep = det.last_report
    assert len(preds) == 5 and rep["n"] == 5
    assert rep["turn"] + rep["none"] + rep["unparsable"] + rep["out_of_range"] == 5
    answers = det.last_answers
    for d, a, p in zip(dialogues, answers, preds):
        parsed = check_range(parse_turn_answer(a), d["num_system_turns"])
        assert parsed.value == p
        assert p is None or 1 <= p <= d["num_system_turns"]
    bad = [
        a
        for a, d in zip(answers, dialogues)
        if check_range(parse_turn_answer(a), d["num_system_turns"]).status in ("unparsable", "out_of_range")
    ]
    assert [e["answer"] for e in rep["examples"]] == [a[:300] for a in bad]
    # left padding: batching does not change greedy answers
    one = make_detector("llm", model=tiny_model, batch_size=1, max_new_tokens=4, device="cpu")
    one.predict_many(dialogues)
    assert one.last_answers == answers
    # prompts longer than the context window are not generated: null, and reported
    det.client_._window = 60
    assert det.predict_many(dialogues) == [None] * 5
    assert det.last_report["too_long"] == 5 and len(det.last_report["examples"]) == 5


def test_transformers_needs_chat_template(tiny_model, tmp_path):
    import shutil

    from transformers import AutoTokenizer

    path = tmp_path / "nochat"
    shutil.copytree(tiny_model, path)
    tok = AutoTokenizer.from_pretrained(path)
    tok.chat_template = None
    tok.save_pretrained(path)
    for f in path.glob("chat_template*"):
        f.unlink()
    det = LLMDetector(model=str(path), device="cpu")
    with pytest.raises(ValueError, match="chat template"):
        det.predict_many([dialogue("a", 4)])
