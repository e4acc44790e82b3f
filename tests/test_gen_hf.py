"""TransformersBackend on tiny random Llama models built locally (no download).

``tiny_model`` etc. are session fixtures; ``make_request`` is importable by other test files.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fixtures.tiny_models import build_tiny_model, tiny_model_dir  # noqa: E402

from dialfork_dataset.taxonomy import forks_per_source  # noqa: E402
from generation.backends.base import TurnRequest  # noqa: E402
from generation.backends.hf import (  # noqa: E402
    NO_SYSTEM_TEMPLATE,
    ChatTemplateError,
    ContextOverflowError,
    ModelLoadError,
    TransformersBackend,
    drop_oldest_turn,
    merge_system_messages,
    sample_tokens,
    turn_sampling_seed,
)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    return tiny_model_dir("chatml", tmp_path_factory)


@pytest.fixture(scope="session")
def tiny_nosys_model(tmp_path_factory):
    return tiny_model_dir("no_system", tmp_path_factory)


@pytest.fixture(scope="session")
def backend(tiny_model):
    return TransformersBackend(tiny_model, max_new_tokens=8, batch_size=8)


def make_request(i: int, turns: int = 2, seed: int | None = None, turn_index: int = 4, role: str = "system"):
    msgs = [{"role": "system", "content": f"You are agent {i}. Follow the workflow."}]
    for t in range(turns + i % 3):  # prompts of different lengths: left padding differs per batch
        msgs.append({"role": "user", "content": f"user says {i}.{t} " * (1 + i % 2)})
        msgs.append({"role": "assistant", "content": f"ok {t}"})
    msgs.append({"role": "user", "content": f"last question {i}"})
    return TurnRequest(
        dialogue_key=f"d{i}",
        role=role,
        messages=msgs,
        seed=1000 + i if seed is None else seed,
        turn_index=turn_index,
    )


# -- pure functions ----------------------------------------------------------------------------
def test_sample_tokens_known_answers():
    p = torch.tensor([[0.5, 0.3, 0.2, 0.0001]]).log()
    u = torch.tensor
    # top-p 0.7 keeps {0, 1} (0.5 < 0.7, then 0.8 >= 0.7): renormalised (0.625, 0.375)
    assert sample_tokens(p, u([0.60]), 1.0, 0, 0.7).item() == 0
    assert sample_tokens(p, u([0.63]), 1.0, 0, 0.7).item() == 1
    assert sample_tokens(p, u([0.9999]), 1.0, 0, 0.7).item() == 1  # never a dropped token
    # no top-p: CDF boundaries at 0.5, 0.8, 1.0
    assert [sample_tokens(p, u([x]), 1.0, 0, 1.0).item() for x in (0.1, 0.49, 0.51, 0.79, 0.81)] == [
        0,
        0,
        1,
        1,
        2,
    ]
    # top-k 2 without top-p: (0.625, 0.375)
    assert sample_tokens(p, u([0.7]), 1.0, 2, 1.0).item() == 1
    assert sample_tokens(p, u([0.7]), 1.0, 1, 1.0).item() == 0
    # temperature 0 is greedy; temperature 2 flattens: probs ∝ sqrt(p) -> first boundary at
    # sqrt(.5) / (sqrt(.5)+sqrt(.3)+sqrt(.2)+sqrt(1e-4))
    assert sample_tokens(p, u([0.99]), 0.0, 64, 0.95).item() == 0
    b = math.sqrt(0.5) / (math.sqrt(0.5) + math.sqrt(0.3) + math.sqrt(0.2) + math.sqrt(1e-4))
    assert sample_tokens(p, u([b - 1e-4]), 2.0, 0, 1.0).item() == 0
    assert sample_tokens(p, u([b + 1e-4]), 2.0, 0, 1.0).item() == 1


def test_sample_tokens_rows_are_independent():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 50, generator=g)
    uni = torch.rand(6, generator=g, dtype=torch.float64)
    together = sample_tokens(logits, uni, 1.3, 10, 0.95)
    alone = [sample_tokens(logits[i : i + 1], uni[i : i + 1], 1.3, 10, 0.95).item() for i in range(6)]
    assert together.tolist() == alone


def test_turn_sampling_seed_is_stable_and_distinct():
    s = turn_sampling_seed(7, 3, "system")
    assert s == turn_sampling_seed(7, 3, "system") and 0 <= s < 2**63
    others = {
        turn_sampling_seed(7, 3, "user"),
        turn_sampling_seed(7, 4, "system"),
        turn_sampling_seed(8, 3, "system"),
    }
    assert s not in others and len(others) == 3


def test_merge_system_messages_keeps_instructions_at_their_turn():
    S = {"role": "system", "content": "ROLE"}
    U1, A1, U2 = (
        {"role": "user", "content": "u1"},
        {"role": "assistant", "content": "a1"},
        {"role": "user", "content": "u2"},
    )
    INJ = {"role": "system", "content": "INJECT"}
    assert merge_system_messages([S, U1, A1, U2, INJ]) == [
        {"role": "user", "content": "ROLE\n\nu1"},
        A1,
        {"role": "user", "content": "u2\n\nINJECT"},
    ]
    # history after the injection: the instruction stays on the user turn it followed
    A2 = {"role": "assistant", "content": "a2"}
    U3 = {"role": "user", "content": "u3"}
    assert merge_system_messages([S, U1, A1, U2, INJ, A2, U3]) == [
        {"role": "user", "content": "ROLE\n\nu1"},
        A1,
        {"role": "user", "content": "u2\n\nINJECT"},
        A2,
        U3,
    ]
    # the agent speaks first: the role prompt becomes a user message of its own
    assert merge_system_messages([S, A1, U1]) == [{"role": "user", "content": "ROLE"}, A1, U1]
    # two system messages in a row (wrap-up + injection) are joined; none left
    W = {"role": "system", "content": "WRAP"}
    out = merge_system_messages([S, U1, A1, W, INJ])
    assert out == [
        {"role": "user", "content": "ROLE\n\nu1"},
        A1,
        {"role": "user", "content": "WRAP\n\nINJECT"},
    ]
    assert all(m["role"] != "system" for m in out)
    assert all(a["role"] != b["role"] for a, b in zip(out, out[1:]))


def test_drop_oldest_turn():
    msgs = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "u1"},
        {"role": "assistant", "content": "a1"},
        {"role": "system", "content": "inj"},
        {"role": "user", "content": "u2"},
    ]
    one = drop_oldest_turn(msgs)
    assert [m["content"] for m in one] == ["s", "a1", "inj", "u2"]
    two = drop_oldest_turn(one)
    assert [m["content"] for m in two] == ["s", "inj", "u2"]
    assert drop_oldest_turn(two) is None


# -- the backend --------------------------------------------------------------------------------
def test_decoding_defaults_and_overrides(tiny_model):
    b = TransformersBackend(tiny_model)
    assert b.decoding() == {"temperature": 1.3, "top_p": 0.95, "top_k": 64, "max_new_tokens": 256}
    assert b.name == tiny_model and b.system_role == "native"
    d = b.describe()
    assert d["device"] == "cpu" and d["dtype"] == "float32" and d["max_context"] == 4096
    b2 = TransformersBackend(tiny_model, temperature=0.7, top_p=0.9, top_k=0, max_new_tokens=5, name="tiny")
    assert b2.decoding() == {"temperature": 0.7, "top_p": 0.9, "top_k": 0, "max_new_tokens": 5}
    assert b2.name == "tiny"
    with pytest.raises(ValueError, match="top_p must be in .*batch_size must be.*context_overflow must be"):
        TransformersBackend(tiny_model, top_p=0, batch_size=0, context_overflow="drop")


def test_device_and_dtype_resolution(tiny_model):
    b = TransformersBackend(tiny_model, dtype="bf16", device="cpu")
    assert b.resolved_device_dtype() == ("cpu", torch.bfloat16)
    assert TransformersBackend(tiny_model, dtype=torch.float16).resolved_device_dtype()[1] == torch.float16
    if not torch.cuda.is_available():
        assert TransformersBackend(tiny_model).resolved_device_dtype() == ("cpu", torch.float32)
    with pytest.raises(ValueError, match="dtype must be auto, bfloat16, float16 or float32, got 'int8'"):
        TransformersBackend(tiny_model, dtype="int8")


def test_text_is_independent_of_batch_composition_and_size(backend):
    reqs = [make_request(i) for i in range(5)]
    alone = [backend.generate([make_request(i)])[0] for i in range(5)]
    assert len(set(alone)) == 5 and all(alone)
    backend.batch_size = 2
    assert backend.generate(reqs) == alone
    backend.batch_size = 5
    assert backend.generate(reqs[::-1]) == alone[::-1]
    backend.batch_size = 8
    backend.max_batch_tokens = 1  # token cap: one row per chunk
    passes = backend.stats["forward_passes"]
    assert backend.generate(reqs) == alone
    assert backend.stats["forward_passes"] - passes >= 5
    backend.max_batch_tokens = None
    # a request's text depends on its own seed/turn/role, not on its neighbours
    mixed = backend.generate([make_request(3), make_request(0, seed=5), make_request(3, turn_index=6)])
    assert mixed[0] == alone[3] and mixed[1] != alone[0] and mixed[2] != alone[3]
    assert all(r.extra["finish_reason"] == "eos" or r.extra["new_tokens"] == 8 for r in reqs)
    assert all(r.extra["truncated_messages"] == 0 and r.extra["prompt_tokens"] > 50 for r in reqs)


def test_rows_leaving_the_batch_early_do_not_change_the_others(tiny_model):
    """Stop strings end rows at different steps: the finished rows leave the batch (and the KV cache)
    while the others go on; every text still equals the one generated alone."""
    b = TransformersBackend(
        tiny_model, max_new_tokens=24, batch_size=8, stop=list("aeiouAEIOU0123456789"), end_strings=()
    )
    alone = []
    for i in range(6):
        r = make_request(i)
        alone.append((b.generate([r])[0], r.extra["new_tokens"], r.extra["finish_reason"]))
    reqs = [make_request(i) for i in range(6)]
    together = b.generate(reqs)
    assert together == [a[0] for a in alone]
    assert [r.extra["new_tokens"] for r in reqs] == [a[1] for a in alone]
    assert len({a[1] for a in alone}) >= 3 and "stop" in {a[2] for a in alone}  # rows left at different steps


def test_left_padding_changes_logits_only_at_float_noise(backend):
    """The numerical check behind batch independence: one row's last-position logits, alone and
    left-padded in a batch with longer prompts, agree to float32 rounding noise."""
    backend.load()
    model = backend._model
    ids = [backend.prepare(make_request(i))[0] for i in (0, 1, 4)]
    width = max(map(len, ids))
    inp = torch.full((3, width), backend.pad_id)
    mask = torch.zeros((3, width), dtype=torch.long)
    for r, x in enumerate(ids):
        inp[r, width - len(x) :] = torch.tensor(x)
        mask[r, width - len(x) :] = 1
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.inference_mode():
        batched = model(input_ids=inp, attention_mask=mask, position_ids=pos).logits[:, -1].float()
        for r, x in enumerate(ids):
            alone = model(input_ids=torch.tensor([x])).logits[0, -1].float()
            assert (batched[r] - alone).abs().max().item() < 1e-4


def test_oom_halves_the_batch_and_gives_the_same_text(tiny_model, monkeypatch):
    b = TransformersBackend(tiny_model, max_new_tokens=4, batch_size=8)
    reqs = [make_request(i) for i in range(5)]
    expected = TransformersBackend(tiny_model, max_new_tokens=4, batch_size=8).generate(reqs)
    model = b.load()
    real = model.forward

    def forward(*a, **kw):
        if kw["input_ids"].shape[0] > 2:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return real(*a, **kw)

    monkeypatch.setattr(model, "forward", forward)
    assert b.generate(reqs) == expected
    assert b.batch_size == 2 and b.stats["oom_retries"] == 1  # 5 rows -> chunks of 2, 2, 1
    assert b.generate(reqs) == expected and b.stats["oom_retries"] == 1  # the smaller batch is kept


def test_oom_with_one_row_is_a_clear_error(tiny_model, monkeypatch):
    b = TransformersBackend(tiny_model, max_new_tokens=4, batch_size=1)
    model = b.load()

    def forward(*a, **kw):
        raise torch.OutOfMemoryError("CUDA out of memory (simulated)")

    monkeypatch.setattr(model, "forward", forward)
    with pytest.raises(torch.OutOfMemoryError, match="single row of .* prompt tokens.*device_map"):
        b.generate([make_request(0)])


def test_stop_and_end_strings(tiny_model):
    greedy = TransformersBackend(tiny_model, temperature=0, max_new_tokens=24, end_strings=())
    r = make_request(2)
    full = greedy.generate([r])[0]
    i, c = next((i, c) for i, c in enumerate(full) if i >= 2 and c.isalnum())
    cut = TransformersBackend(tiny_model, temperature=0, max_new_tokens=24, stop=[c], end_strings=())
    r2 = make_request(2)
    assert cut.generate([r2])[0] == full[: full.index(c)].strip()
    assert r2.extra["finish_reason"] == "stop"
    keep = TransformersBackend(tiny_model, temperature=0, max_new_tokens=24, end_strings=[c])
    assert keep.generate([make_request(2)])[0] == full[: full.index(c) + 1].strip()
    assert TransformersBackend(tiny_model).end_strings == ("[END]",)


def test_template_without_system_role_merges_and_keeps_injection_at_its_turn(tiny_nosys_model):
    b = TransformersBackend(tiny_nosys_model, max_new_tokens=5)
    assert b.system_role == "merge"
    msgs = [
        {"role": "system", "content": "ROLE PROMPT"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "book it"},
        {"role": "system", "content": "INJECTED INSTRUCTION"},
    ]
    text = b.render_prompt(msgs)
    assert text == (
        "<s><start_of_turn>user\nROLE PROMPT\n\nhi<end_of_turn>\n<start_of_turn>model\nhello<end_of_turn>\n"
        "<start_of_turn>user\nbook it\n\nINJECTED INSTRUCTION<end_of_turn>\n<start_of_turn>model\n"
    )
    out = b.generate([TurnRequest("d", "system", msgs, 1, 3)])
    assert isinstance(out[0], str)
    with pytest.raises(ChatTemplateError, match="rejects the conversation.*System role not supported"):
        TransformersBackend(tiny_nosys_model, system_role="native").render_prompt(msgs)


def test_tokenizer_without_chat_template(tmp_path, tmp_path_factory):
    p = tiny_model_dir("base", tmp_path_factory)
    with pytest.raises(ChatTemplateError, match="has no chat template.*chat_template="):
        TransformersBackend(str(p))
    tpl = tmp_path / "t.jinja"
    tpl.write_text(NO_SYSTEM_TEMPLATE)
    b = TransformersBackend(str(p), chat_template=str(tpl), max_new_tokens=3)
    assert b.system_role == "merge" and "<start_of_turn>user" in b.render_prompt(
        [{"role": "user", "content": "x"}]
    )


def test_unknown_model_is_a_clear_error(tmp_path):
    with pytest.raises(ModelLoadError, match="no such folder"):
        TransformersBackend(str(tmp_path / "nope" / "model"))
    with pytest.raises(ModelLoadError, match="not a model folder"):
        TransformersBackend(str(tmp_path))
    with pytest.raises(ModelLoadError, match="not a Hub model id.*HF_HUB_OFFLINE"):
        TransformersBackend("dialfork-nonexistent-org/no-such-model-xyz")


def test_cli_reports_an_unknown_model_in_one_line(tmp_path, star_dir, capsys):
    from generation.cli import main

    rc = main(
        [
            "--backend",
            "transformers",
            "--backend-option",
            f"model={tmp_path / 'no' / 'model'}",
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
    assert err.startswith("error: ") and "no such folder" in err and not (tmp_path / "out").exists()


def test_context_overflow_truncates_oldest_turns_or_raises(tiny_model):
    long = make_request(0, turns=12)
    b = TransformersBackend(tiny_model, max_new_tokens=8, max_context=200)
    ids, dropped = b.prepare(long)
    assert dropped > 0 and len(ids) + 8 <= 200
    text = b.generate([long])[0]
    assert isinstance(text, str) and long.extra["truncated_messages"] == dropped
    # the kept context is the system prompt plus the most recent turns
    rendered = b.render_prompt(drop_n(long.messages, dropped))
    assert (
        "You are agent 0" in rendered and "last question 0" in rendered and "user says 0.0 " not in rendered
    )
    with pytest.raises(
        ContextOverflowError, match=r"dialogue 'd0', turn 4: .*exceeds the context window of 200"
    ):
        TransformersBackend(tiny_model, max_new_tokens=8, max_context=200, context_overflow="error").generate(
            [long]
        )
    huge_system = TurnRequest(
        "dx", "system", [{"role": "system", "content": "x" * 500}, {"role": "user", "content": "hi"}], 1, 1
    )
    with pytest.raises(ContextOverflowError, match="dialogue 'dx'"):
        b.generate([huge_system])


def drop_n(msgs, n):
    for _ in range(n):
        msgs = drop_oldest_turn(msgs)
    return msgs


def test_bad_requests_are_rejected_before_any_work(backend):
    good = make_request(0)
    bad = TurnRequest("dz", "system", [{"role": "wizard", "content": "x"}], "s", 0)
    with pytest.raises(
        ValueError, match=r"request 1 \(dialogue 'dz', turn 0\), message 0.*seed must be an int"
    ):
        backend.generate([good, bad])
    assert backend.generate([]) == []


# -- through the engine: exact replay prefixes, injection at t_k in the model's input ------------
def tiny_corpus_model(path, star_dir, tasks=("weather",)):
    """A tiny model whose BPE tokenizer is trained on the prompts and the tasks' workflows (short
    prompts): ``corpus`` of ``tests/fixtures/tiny_models.yaml``."""
    return str(build_tiny_model("corpus", path, star_dir=star_dir, tasks=tasks))


class Recorder:
    """Wraps a backend and keeps a copy of every request it receives."""

    uses_messages = True

    def __init__(self, inner):
        self.inner, self.name, self.calls = inner, inner.name, []

    def decoding(self):
        return self.inner.decoding()

    def generate(self, reqs):
        self.calls += [(r.dialogue_key, r.role, r.turn_index, [dict(m) for m in r.messages]) for r in reqs]
        return self.inner.generate(reqs)


def test_engine_replay_prefixes_are_exact_and_injection_is_at_t_k(tmp_path, star_dir):
    import json

    from generation.engine import GenerationConfig, generate_corpus

    model = tiny_corpus_model(tmp_path / "m", star_dir)
    rec = Recorder(TransformersBackend(model, max_new_tokens=2, batch_size=64))
    cfg = GenerationConfig(
        star=str(star_dir),
        out=str(tmp_path / "out"),
        backend="transformers",
        backend_options={"model": model, "max_new_tokens": 2},
        tasks=("weather",),
        per_task=1,
        budget=3,
    )
    manifest = generate_corpus(cfg, backend=rec, progress=False)
    assert manifest.counts["total"]["records"] == 1 + forks_per_source()  # one D+ and its forks
    records = [json.loads(line) for line in (tmp_path / "out" / "weather.jsonl").read_text().splitlines()]
    src, forks = records[0], records[1:]
    assert src["generator"] == model and src["decoding"] == {
        "temperature": 1.3,
        "top_p": 0.95,
        "top_k": 64,
        "max_new_tokens": 2,
    }
    for f in forks:
        assert f["prefix_mode"] == "replay" and f["prefix_divergence"] == 0
        cut = [i for i, t in enumerate(f["turns"]) if t["speaker"] == "system"][f["fork_turn"] - 1]
        assert f["turns"][:cut] == src["turns"][:cut]  # the replayed prefix is D+'s, byte for byte

    nosys = TransformersBackend(model, chat_template=NO_SYSTEM_TEMPLATE)
    assert nosys.system_role == "merge"
    by_key = {f["dialogue_id"]: f for f in forks}
    checked = 0
    for key, role, turn_index, msgs in rec.calls:
        if role != "system" or key not in by_key:
            continue
        f = by_key[key]
        sys_turn = (turn_index + 1) // 2
        prompt = rec.inner.render_prompt(msgs)
        if sys_turn < f["fork_turn"]:
            assert f["instruction"] not in prompt
        elif sys_turn == f["fork_turn"]:
            # the injected instruction is the last message the model reads before writing turn t_k
            last_user = prompt.rindex("<|im_start|>user\n")
            inj = prompt.index(f["instruction"])
            assert last_user < inj and prompt.endswith("<|im_end|>\n<|im_start|>assistant\n")
            assert prompt[inj:].count("<|im_start|>") == 1  # only the generation prompt follows
            assert "<|im_start|>system\nNew instruction" in prompt
            # without a system role: appended to the user turn just before t_k
            merged = nosys.render_prompt(msgs)
            tail = merged[merged.rindex("<start_of_turn>user\n") :]
            assert f["instruction"] in tail and tail.endswith("<end_of_turn>\n<start_of_turn>model\n")
            assert merged.count(f["instruction"]) == 1
            checked += 1
        else:
            assert prompt.count(f["instruction"]) == 1  # stays in place for the later turns
    assert checked == forks_per_source()


# -- prefix KV cache across turns --------------------------------------------------------------
def _converse(b, turns: int = 4, dialogues: int = 3):
    """Each dialogue's system agent answers ``turns`` times; its context grows by its reply and a
    user message each time (as in the engine), and every dialogue of a step is one generate call."""
    ctx = [
        [
            {"role": "system", "content": f"You are agent {i}. Follow the workflow: greet, ask, answer."},
            {"role": "user", "content": f"hello number {i}"},
        ]
        for i in range(dialogues)
    ]
    texts = []
    for t in range(turns):
        reqs = [
            TurnRequest(
                dialogue_key=f"conv{i}", role="system", messages=list(c), seed=7 + i, turn_index=2 * t + 1
            )
            for i, c in enumerate(ctx)
        ]
        out = b.generate(reqs)
        texts.append(out)
        for c, reply in zip(ctx, out):
            c += [
                {"role": "assistant", "content": reply},
                {"role": "user", "content": f"user turn {t} " * (1 + t % 2)},
            ]
    return texts


def test_prefix_cache_gives_the_same_text_and_prefills_less(tiny_model):
    on = TransformersBackend(tiny_model, max_new_tokens=8, batch_size=2)
    off = TransformersBackend(tiny_model, max_new_tokens=8, batch_size=2, prefix_cache_mb=0)
    assert _converse(on) == _converse(off)
    assert off.stats["reused_tokens"] == 0 and off.stats["prefilled_tokens"] == off.stats["prompt_tokens"]
    assert on.stats["prompt_tokens"] == off.stats["prompt_tokens"]
    assert on.stats["prefilled_tokens"] + on.stats["reused_tokens"] == on.stats["prompt_tokens"]
    # turns 2-4 of each dialogue reuse the previous prompt: the role prompt is prefilled once
    assert (
        on.prefix_cache.stats["hits"] == 9
        and on.stats["prefilled_tokens"] < 0.5 * off.stats["prefilled_tokens"]
    )


def test_prefix_cache_logits_match_a_full_prefill(tiny_model):
    """The numerical check behind the same text: a prompt whose first part comes from the cache
    (left-padded next to a row without cache) gives the last-position logits of a full prefill."""
    b = TransformersBackend(tiny_model, max_new_tokens=8, batch_size=4)
    _converse(b, turns=2, dialogues=2)
    model = b._model
    p1 = b.prepare(make_request(1))[0]
    key = ("conv0", "system")
    entry = b.prefix_cache.entries[key]
    ids = [int(x) for x in entry.ids] + [5, 6, 7]
    from generation.backends.hf import _Prepared

    rows = [_Prepared(0, ids, 0, 0, key=key), _Prepared(1, p1, 0, 0, key=("x", "system"))]
    for p in rows:
        p.cached, p.past = b.prefix_cache.lookup(p.key, p.ids)
    assert rows[0].cached == len(entry.ids)  # its own entry; row 1 shares the role prompt's start with conv0
    inp, mask, pos, past = b._prefill_inputs(rows)
    with torch.inference_mode():
        batched = model(input_ids=inp, attention_mask=mask, position_ids=pos, **{b._cache_kw: past}).logits[
            :, -1
        ]
        for r, x in enumerate((ids, p1)):
            alone = model(input_ids=torch.tensor([x])).logits[0, -1]
            assert (batched[r] - alone).abs().max().item() < 1e-4


def test_prefix_cache_budget(tiny_model):
    b = TransformersBackend(tiny_model, max_new_tokens=4, batch_size=4)
    b.generate([make_request(i) for i in range(3)])
    cache = b.prefix_cache
    assert len(cache.entries) == 3 and cache.nbytes > 0
    one = max(e.nbytes for e in cache.entries.values())
    small = TransformersBackend(tiny_model, max_new_tokens=4, batch_size=4, prefix_cache_mb=0)
    small.load()
    small.prefix_cache.max_bytes = int(one * 1.5)  # room for one entry
    small.generate([make_request(i) for i in range(3)])
    assert len(small.prefix_cache.entries) == 1 and small.prefix_cache.stats["not_stored"] == 2
    other = TurnRequest(
        dialogue_key="z",
        role="system",
        messages=[{"role": "system", "content": "Another role."}, {"role": "user", "content": "hi"}],
        seed=1,
        turn_index=1,
    )
    small.generate([other])  # stored within the budget (least recently used entries make room)
    assert (
        "z",
        "system",
    ) in small.prefix_cache.entries and small.prefix_cache.nbytes <= small.prefix_cache.max_bytes
    with pytest.raises(ValueError, match="prefix_cache_mb must be an integer >= 0"):
        TransformersBackend(tiny_model, prefix_cache_mb=-1)


def test_a_replayed_fork_reuses_its_sources_cache(tiny_model):
    """A fork replays D+'s conversation: its first prompt is served by D+'s entry (another
    dialogue key), and the text is the one a full prefill gives."""
    on = TransformersBackend(tiny_model, max_new_tokens=8, batch_size=4)
    off = TransformersBackend(tiny_model, max_new_tokens=8, batch_size=4, prefix_cache_mb=0)
    for b in (on, off):
        _converse(b, turns=3, dialogues=2)
    before = on.prefix_cache.stats["shared_hits"]
    ctx = [
        {"role": "system", "content": "You are agent 0. Follow the workflow: greet, ask, answer."},
        {"role": "user", "content": "hello number 0"},
    ]
    fork = [TurnRequest(dialogue_key="conv0-GR-k1", role="system", messages=ctx, seed=7, turn_index=1)]
    assert on.generate(fork) == off.generate(fork)
    assert on.prefix_cache.stats["shared_hits"] == before + 1


# ---- reword prefix mode on an LLM: the hazard law, and the engine end to end ---------------------
def test_prefix_rewording_law():
    """Rate 0 never, rate 1 always; a rewording cascades (once a turn is reworded, every later
    prefix turn is); the first reworded turn follows the geometric law of the per-turn hazard; the
    16 forks of a source draw independently."""
    from generation.llm.sampling import prefix_turn_reworded, reword_salt, turn_sampling_seed

    salt = reword_salt("GR", 2)
    assert not any(prefix_turn_reworded(s, t, 0.0, salt) for s in range(50) for t in range(10))
    assert all(prefix_turn_reworded(s, t, 1.0, salt) for s in range(50) for t in range(10))
    for s in range(200):
        flags = [prefix_turn_reworded(s, t, 0.2, salt) for t in range(12)]
        assert flags == sorted(flags)  # False..., then True...: a suffix of the prefix
    # the first reworded turn at t=0: probability rate; 4000 draws, 5 sigma is 0.032
    first = np.mean([prefix_turn_reworded(s, 0, 0.2, salt) for s in range(4000)])
    assert abs(first - 0.2) < 0.032
    other = [prefix_turn_reworded(s, 0, 0.2, reword_salt("WIC", 1)) for s in range(4000)]
    same = [prefix_turn_reworded(s, 0, 0.2, salt) for s in range(4000)]
    assert abs(np.mean(np.array(other) & np.array(same)) - 0.04) < 0.02  # independent across forks
    # an empty salt is the dialogue's own stream; a salt gives another
    assert turn_sampling_seed(5, 3, "user", "") == turn_sampling_seed(5, 3, "user")
    assert turn_sampling_seed(5, 3, "user", salt) != turn_sampling_seed(5, 3, "user")


def test_engine_reword_mode_with_an_llm(tmp_path, star_dir):
    """``--prefix-mode reword`` on the transformers backend: at rate 0 the text is replay's; at
    rate 1 every fork's prefix turns are drawn from another stream (the fork's, salted by type and
    k), and ``prefix_divergence`` counts the prefix turns that differ from D+'s."""
    import json

    from generation.engine import GenerationConfig, generate_corpus

    model = tiny_corpus_model(tmp_path / "m", star_dir)

    def run(name, mode, rate=None):
        cfg = GenerationConfig(
            star=str(star_dir),
            out=str(tmp_path / name),
            backend="transformers",
            backend_options={"model": model, "max_new_tokens": 3},
            tasks=("weather",),
            per_task=1,
            budget=4,
            prefix_mode=mode,
            reword_rate=rate,
        )
        generate_corpus(
            cfg, backend=TransformersBackend(model, max_new_tokens=3, batch_size=64), progress=False
        )
        return [json.loads(x) for x in (tmp_path / name / "weather.jsonl").read_text().splitlines()]

    replay, zero, one = run("replay", "replay"), run("zero", "reword", 0.0), run("one", "reword", 1.0)
    assert [r["turns"] for r in zero] == [r["turns"] for r in replay]
    assert {r["prefix_mode"] for r in zero[1:]} == {"reword"}
    src = one[0]
    assert src["turns"] == replay[0]["turns"]  # D+ is never reworded
    changed = 0
    for f in one[1:]:
        cut = [i for i, t in enumerate(f["turns"]) if t["speaker"] == "system"][f["fork_turn"] - 1]
        differ = [i for i in range(cut) if f["turns"][i]["text"] != src["turns"][i]["text"]]
        assert f["prefix_divergence"] == len(differ)
        changed += bool(differ)
    # 12 of 16 forks for the paper's types: every prefix turn from another stream (a rare draw can agree)
    assert changed >= forks_per_source() * 3 // 4
