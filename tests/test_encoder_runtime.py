"""Encoder runtimes (dialfork_metrics.runtimes): ONNX fp32 equals torch, int8 is opt-in, errors."""

from __future__ import annotations

import numpy as np
import pytest

from dialfork_metrics.encoders import Encoder
from dialfork_metrics.pair_encoder import PairEncoder

TEXTS = [
    "Hello, how can I help you today?",
    "I would like to book a table for two at seven tonight.",
    "ok",
    "What is the weather in Paris tomorrow?",
    "Sure. Which doctor would you like to see, and when?",
    "thanks, bye",
    "Could you tell me the name and the address of the restaurant, please? " * 3,
]


def _onnx_or_skip():
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")


@pytest.fixture(scope="module")
def onnx_cache(tmp_path_factory):
    """One export per module, in a temporary folder (never the user's ~/.cache)."""
    _onnx_or_skip()
    mp = pytest.MonkeyPatch()
    d = tmp_path_factory.mktemp("onnx_cache")
    mp.setenv("DIALFORK_ONNX_CACHE", str(d))
    yield d
    mp.undo()


@pytest.fixture(scope="module")
def encoders(onnx_cache):
    torch_enc = Encoder("minilm", show_progress=False)
    onnx_enc = Encoder("minilm", show_progress=False, runtime="onnx", model=torch_enc.model)
    return torch_enc, onnx_enc


def test_onnx_embeddings_equal_torch(encoders, onnx_cache):
    torch_enc, onnx_enc = encoders
    a, b = torch_enc.encode(TEXTS), onnx_enc.encode(TEXTS)
    assert a.shape == b.shape == (len(TEXTS), 384)
    cos = (a.astype(np.float64) * b).sum(axis=1)
    assert cos.min() >= 1 - 1e-6
    np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(b, axis=1), 1.0, rtol=1e-5)
    # exported once, on disk, keyed by model and exporter
    files = list(onnx_cache.rglob("model.onnx"))
    assert len(files) == 1 and files[0].stat().st_size > 1_000_000


def test_onnx_dynamic_axes_any_batch_and_length(encoders):
    """Batches of 1 and of many, short and long (up to the 256-token truncation) inputs."""
    torch_enc, onnx_enc = encoders
    long_text = " ".join(f"word{i}" for i in range(400))  # truncated at max_seq_length
    texts = [long_text, "a", *[f"turn number {i} of the dialogue" for i in range(70)]]
    r = Encoder("minilm", show_progress=False, runtime="onnx", model=torch_enc.model, batch_size=1)
    a = torch_enc.encode(texts)
    for enc in (onnx_enc, r):
        enc.clear_cache()
        b = enc.encode(texts)
        assert ((a.astype(np.float64) * b).sum(axis=1)).min() >= 1 - 1e-6


def test_onnx_pair_embeddings_equal_torch(encoders):
    torch_enc, onnx_enc = encoders
    pt, po = PairEncoder(torch_enc), PairEncoder(onnx_enc)
    assert po.runtime == "onnx" and pt.runtime == "torch"
    firsts, seconds = TEXTS[:-1], TEXTS[1:]
    a, b = pt.encode_pairs(firsts, seconds), po.encode_pairs(firsts, seconds)
    assert type(po._model).__name__ == "OnnxTransformer"
    np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-4)
    cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert cos.min() >= 1 - 1e-6


def test_export_is_reused_and_keyed(encoders, onnx_cache):
    from dialfork_metrics.runtimes import EXPORTER_VERSION, OnnxTransformer, model_fingerprint

    torch_enc, onnx_enc = encoders
    onnx_enc.encode(["make sure the export exists"])  # tests may run in any order
    am = torch_enc.model[0].auto_model
    fp = model_fingerprint(am)
    assert fp == model_fingerprint(am)
    before = {p: p.stat().st_mtime_ns for p in onnx_cache.rglob("*.onnx")}
    r = OnnxTransformer(am, "another name for the same weights")
    assert r.path in before and r.path.stat().st_mtime_ns == before[r.path]  # no second export
    assert fp in str(r.path) and EXPORTER_VERSION


def test_int8_is_opt_in_and_close(encoders):
    torch_enc, onnx_enc = encoders
    assert Encoder("minilm").runtime == "torch"  # the default
    q = Encoder("minilm", show_progress=False, runtime="onnx-int8", model=torch_enc.model)
    a, b = torch_enc.encode(TEXTS), q.encode(TEXTS)
    cos = (a * b).sum(axis=1)
    assert cos.min() > 0.8  # quantised: close, not equal
    assert not np.allclose(a, b, atol=1e-5)


def test_runtime_and_dtype_errors(tmp_path):
    with pytest.raises(ValueError, match="unknown encoder runtime 'tensorrt'"):
        Encoder("minilm", runtime="tensorrt")
    with pytest.raises(ValueError, match="needs a CUDA device"):
        Encoder("minilm", device="cpu", dtype="bf16")
    with pytest.raises(ValueError, match="unknown dtype"):
        Encoder("minilm", dtype="int4")
    _onnx_or_skip()
    with pytest.raises(ValueError, match="runtime='torch'"):
        Encoder("minilm", runtime="onnx", dtype="fp16")


def test_cache_keys_separate_runtimes(tmp_path, encoders):
    torch_enc, _ = encoders
    a = Encoder("minilm", cache_dir=tmp_path, model=torch_enc.model, show_progress=False)
    b = Encoder("minilm", cache_dir=tmp_path, model=torch_enc.model, show_progress=False, runtime="onnx-int8")
    assert a._disk.dir != b._disk.dir
    assert PairEncoder(a)._disk.dir != PairEncoder(b)._disk.dir
    # the default key is unchanged by this feature (existing caches stay valid)
    assert "runtime" not in a._disk.dir.name


def _numbers(obj, path=""):
    """Every number of a nested report, by path (timings left out)."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k in ("seconds", "timings"):
                continue
            yield from _numbers(v, f"{path}/{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from _numbers(v, f"{path}/{i}")
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        yield path, float(obj)


@pytest.mark.slow
def test_tasks_1_to_3_identical_to_4_decimals(template_corpus, onnx_cache):
    """The whole benchmark (Tasks 1-3) with runtime='onnx' equals runtime='torch' to 4 decimals."""
    from dialfork_metrics.bench import run_benchmark

    reps = {
        rt: run_benchmark(
            template_corpus,
            tasks=(1, 2, 3),
            encoders=("minilm",),
            out=None,
            n_resamples=200,
            progress=False,
            runtime=rt,
            prd_kwargs={"num_runs": 2},
        )
        for rt in ("torch", "onnx")
    }
    got = {rt: dict(_numbers({k: r[k] for k in ("task1", "task2", "task3")})) for rt, r in reps.items()}
    assert got["torch"].keys() == got["onnx"].keys() and len(got["torch"]) > 100
    bad = {
        k: (v, got["onnx"][k])
        for k, v in got["torch"].items()
        if not (np.isnan(v) and np.isnan(got["onnx"][k])) and not abs(v - got["onnx"][k]) < 5e-5
    }
    assert not bad, f"{len(bad)} of {len(got['torch'])} numbers differ at 4 decimals: {list(bad.items())[:5]}"


def test_half_precision_needs_cuda(encoders):
    """bf16/fp16 are CUDA-only: a model on the CPU is refused, not silently cast."""
    torch_enc, _ = encoders
    with pytest.raises(ValueError, match="needs a CUDA device but the model is on cpu"):
        Encoder("minilm", model=torch_enc.model, dtype="bf16")
    assert next(torch_enc.model.parameters()).dtype.is_floating_point
    assert str(next(torch_enc.model.parameters()).dtype) == "torch.float32"
