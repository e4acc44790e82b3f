"""The calibrated LLM judge (dialfork_metrics.judge; paper, Table 11): parsing, calibration, a
fake OpenAI-compatible server on loopback and a tiny random transformers model."""

from __future__ import annotations

import numpy as np
import pytest
from fixtures.tiny_models import tiny_model_dir
from judge_fake import DEVIANT, FakeJudgeHandler, serve_fake_judge

from dialfork_metrics.judge import (
    LLMJudge,
    cross_fit,
    fit_calibration,
    parse_choice,
    parse_cue_answer,
    parse_rating,
    render_marked_dialogue,
)

WORKFLOWS = {"weather": "1. Ask for the city\n2. Ask for the day\n3. Give the forecast"}


def dialogue(did: str, T: int, deviate_from: int | None = None, cue: str = "pitch a subscription"):
    turns = []
    for k in range(1, T + 1):
        turns.append({"speaker": "user", "text": f"user line {k}"})
        turns.append(
            {"speaker": "system", "text": DEVIANT if deviate_from and k >= deviate_from else f"step {k}"}
        )
    return {
        "dialogue_id": did,
        "task": "weather",
        "turns": turns,
        "cue": cue,
        "fork_turn": deviate_from,
        "step3": bool(deviate_from and deviate_from > 1),
        "injected_instruction": "Pitch a subscription.",
    }


@pytest.mark.parametrize(
    "text,expected",
    [
        ("Answer: 75", 75),
        ("answer: 0", 0),
        ("I would say 40 out of 100. Answer: 35", 35),
        ("100", 100),
        ("<think>maybe 20</think> Answer: 80", 80),
        ("Answer: 250", None),
        ("no idea", None),
        ("", None),
        ("Rated 3.5", None),
        ("It follows 3 of 4 steps, so 70", 70),
    ],
)
def test_parse_rating(text, expected):
    assert parse_rating(text) == expected


@pytest.mark.parametrize(
    "text,T,expected",
    [
        ("Answer: yes, turn 3", 5, ("yes", 3, "ok")),
        ("Answer: partly, from the 2nd assistant turn", 5, ("partly", 2, "ok")),
        ("Answer: no", 5, ("no", None, "ok")),
        ("Answer: No. It never happens.", 5, ("no", None, "ok")),
        ("Answer: yes, turn 9", 5, ("yes", None, "no_onset")),
        ("Answer: yes", 5, ("yes", None, "no_onset")),
        ("Answer: maybe", 5, (None, None, "unparsable")),
        ("<think>yes? no?</think>Answer: partly, turn 4", 5, ("partly", 4, "ok")),
    ],
)
def test_parse_cue_answer(text, T, expected):
    assert parse_cue_answer(text, T) == expected


def test_parse_choice_and_marked_dialogue():
    assert parse_choice("Answer: mostly, a slip at turn 2", ("yes", "mostly", "no")) == "mostly"
    assert parse_choice("Answer: yesterday", ("yes", "mostly", "no")) is None
    d = dialogue("a", 4, 3)
    lines = render_marked_dialogue(d["turns"], 3).splitlines()
    assert (
        lines[3] == "Assistant [turn 2]: step 2" and lines[4] == "User: user line 3"
    )  # as the page highlights
    assert lines[5] == f">> Assistant [turn 3]: {DEVIANT}" and all(x.startswith(">> ") for x in lines[5:])
    assert not any(x.startswith(">>") for x in render_marked_dialogue(d["turns"]).splitlines())


def test_isotonic_calibration_known_answers():
    raw = np.array([0, 10, 20, 30, 40, 50, 60, 70, 80, 90], dtype=float)
    people = 100 - raw  # an inverted scale cannot be learnt by an increasing map: flat at the mean
    assert np.allclose(fit_calibration(raw, people).predict(raw), people.mean())
    people = np.array([5, 5, 10, 30, 30, 60, 70, 70, 90, 95], dtype=float)  # monotone: reproduced exactly
    iso = fit_calibration(raw, people)
    assert np.allclose(iso.predict(raw), people)
    assert iso.predict([-50.0])[0] == 5 and iso.predict([500.0])[0] == 95  # clipped
    groups = [f"s{i // 2}" for i in range(10)]  # two conversations per source
    oof = cross_fit(raw, people, groups, n_folds=5, seed=0)
    assert oof.shape == (10,) and np.all((oof >= 5) & (oof <= 95))
    # out of fold: a conversation's own value never calibrates it (a lone outlier is not reproduced)
    spiky = people.copy()
    spiky[4] = 100.0
    assert cross_fit(raw, spiky, groups, n_folds=5, seed=0)[4] < 100.0
    with pytest.raises(ValueError, match="2 source groups"):
        cross_fit(raw, people, ["one"] * 10)
    with pytest.raises(ValueError, match="matching"):
        fit_calibration([1.0], [2.0, 3.0])


# -- a fake OpenAI-compatible server (tests/judge_fake.py): a judge that reads the dialogue ---------
@pytest.fixture()
def fake_server():
    with serve_fake_judge() as url:
        yield url


def test_openai_backend_answers_the_three_steps(fake_server):
    items = [dialogue("conf", 6), dialogue("k1", 6, 1), dialogue("k3", 6, 4)]
    judge = LLMJudge(
        "fake-judge", backend="openai", base_url=fake_server, workflows=WORKFLOWS, max_new_tokens=12
    )
    out = judge.judge(items)
    assert [o["slider_raw"] for o in out] == [97, 0, 50]
    assert [(o["cue_answer"], o["onset_turn"]) for o in out] == [("no", None), ("yes", 1), ("yes", 4)]
    assert [o["prefix_answer"] for o in out] == [None, None, "mostly"]  # step 3 only for t_k > 1
    rep = judge.last_report
    assert rep["n"] == 3 and rep["step3_asked"] == 1 and rep["cue_ok"] == 3 and rep["rating_unparsable"] == 0
    prompts = [b["messages"][0]["content"] for b in FakeJudgeHandler.bodies]
    assert len(prompts) == 7 and all(
        b["temperature"] == 0.0 and b["max_tokens"] == 12 for b in FakeJudgeHandler.bodies
    )
    step1 = [p for p in prompts if "How well does it?" in p]
    assert step1 and not any(
        "pitch a subscription" in p or "Pitch a subscription." in p for p in step1
    )  # gated
    step2 = [p for p in prompts if "Does that happen" in p]
    assert all('"pitch a subscription"' in p and "Pitch a subscription." not in p for p in step2)
    step3 = [p for p in prompts if "Before the marked part" in p]
    assert (
        len(step3) == 1
        and '"Pitch a subscription."' in step3[0]
        and "yes (from assistant turn 4)" in step3[0]
    )
    assert ">> Assistant [turn 4]" in step3[0] and "3. Give the forecast" in step3[0]


def test_judge_validates_items_and_config(fake_server):
    judge = LLMJudge("m", backend="openai", base_url=fake_server, workflows=WORKFLOWS)
    bad = dialogue("x", 4, 1)
    bad["step3"] = True
    with pytest.raises(ValueError, match="fork_turn >= 2"):
        judge.judge([bad, {"dialogue_id": "y"}])
    with pytest.raises(ValueError, match="base_url"):
        LLMJudge("m", backend="openai")
    with pytest.raises(ValueError, match="backend"):
        LLMJudge("m", backend="magic")
    with pytest.raises(ValueError, match="model="):
        LLMJudge()


def test_workflow_from_star(star_dir, fake_server):
    judge = LLMJudge("m", backend="openai", base_url=fake_server, star_dir=star_dir)
    judge.judge([dialogue("w", 4)])
    wf = (
        FakeJudgeHandler.bodies[0]["messages"][0]["content"]
        .split("Workflow (the steps")[1]
        .split("Conversation (")[0]
    )
    assert len(wf.strip()) > 50


# -- a tiny random transformers chat model --------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return tiny_model_dir("judge", tmp_path_factory)


def test_transformers_backend_end_to_end(tiny_model):
    items = [dialogue("c", 4), dialogue("f2", 5, 2), dialogue("f3", 6, 3)]
    judge = LLMJudge(
        tiny_model, backend="transformers", workflows=WORKFLOWS, batch_size=2, max_new_tokens=4, device="cpu"
    )
    out = judge.judge(items)
    assert [o["dialogue_id"] for o in out] == ["c", "f2", "f3"]
    for it, o in zip(items, out):  # every answer is what the parsers read from the model's own replies
        assert o["slider_raw"] == parse_rating(o["replies"][0])
        T = sum(t["speaker"] == "system" for t in it["turns"])
        assert (o["cue_answer"], o["onset_turn"]) == parse_cue_answer(o["replies"][1], T)[:2]
        asked = it["step3"] and o["cue_answer"] is not None
        assert len(o["replies"]) == (3 if asked else 2)
        assert o["prefix_answer"] == (
            parse_choice(o["replies"][2], ("yes", "mostly", "no")) if asked else None
        )
    rep = judge.last_report
    assert rep["n"] == 3 and rep["backend"] == "transformers"
    assert sum(rep.get(k, 0) for k in ("cue_ok", "cue_no_onset", "cue_unparsable")) == 3
    # greedy and left-padded: batch size does not change the replies
    one = LLMJudge(
        tiny_model, backend="transformers", workflows=WORKFLOWS, batch_size=1, max_new_tokens=4, device="cpu"
    )
    assert [o["replies"][:2] for o in one.judge(items)] == [o["replies"][:2] for o in out]


def test_cache_resumes_a_killed_run(fake_server, tmp_path):
    items = [dialogue(f"d{i}", 5, None if i % 3 == 0 else 1 + i % 4) for i in range(7)]
    cache = tmp_path / "judge_cache.jsonl"
    judge = LLMJudge("fake-judge", backend="openai", base_url=fake_server, workflows=WORKFLOWS)
    first = judge.judge(items[:4], cache=cache, chunk_size=2)  # "killed" after 4 items
    assert judge.last_report["from_cache"] == 0 and len(cache.read_text().splitlines()) == 4
    n_requests = len(FakeJudgeHandler.bodies)

    class Counting:
        def __init__(self, inner):
            self.inner, self.seen = inner, 0

        def chat(self, batch, **kw):
            self.seen += len(batch)
            return self.inner.chat(batch, **kw)

    resumed = LLMJudge("fake-judge", backend="openai", base_url=fake_server, workflows=WORKFLOWS)
    resumed.client = counting = Counting(resumed.client)
    resumed.backend = "openai"
    out = resumed.judge(items, cache=cache, chunk_size=2)
    assert out[:4] == first and resumed.last_report["from_cache"] == 4
    assert counting.seen == len(FakeJudgeHandler.bodies) - n_requests > 0  # only the 3 new items were asked
    assert out == judge.judge(items)  # same answers as an uncached run
    changed = [dict(items[0], cue="another cue")]  # what the judge is shown changed: not reused
    resumed.judge(changed, cache=cache)
    assert resumed.last_report["from_cache"] == 0
