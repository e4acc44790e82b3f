"""Issue 46 item 1: a small encoding job (a live turn) runs with one torch intra-op thread by default,
larger jobs with torch's setting; the setting is restored, overridable and never raised."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dialfork_metrics.encoders import SMALL_JOB_TEXTS, Encoder, get_encoder, intra_op_threads


class _Device:
    def __init__(self, kind: str):
        self.type = kind


class _ThreadRecordingModel:
    """Stands in for a SentenceTransformer: records torch's thread count at every forward pass."""

    def __init__(self, device: str = "cpu"):
        self.device = _Device(device)
        self.seen: list[int] = []

    def encode(self, texts, **kwargs):
        self.seen.append(torch.get_num_threads())
        rng = np.random.default_rng(len(texts))
        return rng.normal(size=(len(texts), 4)).astype(np.float32) + 1.0


@pytest.fixture
def two_threads():
    """torch at 2 intra-op threads for the test (the test workers may run at 1), restored after."""
    prev = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(prev)


def _texts(n: int) -> list[str]:
    return [f"turn number {i}" for i in range(n)]


def test_a_small_job_runs_on_one_thread_and_a_large_one_on_torchs(two_threads):
    model = _ThreadRecordingModel()
    enc = Encoder("fake", model=model, show_progress=False)
    assert enc.small_job_threads == 1
    enc.encode(["a live turn"])
    enc.encode(_texts(SMALL_JOB_TEXTS))
    enc.encode(_texts(SMALL_JOB_TEXTS + 20))  # 8 of them are cached: 20 new texts, a large job
    assert model.seen == [1, 1, 2]
    assert torch.get_num_threads() == 2  # restored


def test_cached_texts_do_not_count_and_none_keeps_torchs_setting(two_threads):
    model = _ThreadRecordingModel()
    enc = Encoder("fake", model=model, show_progress=False, small_job_threads=None)
    enc.encode(["one turn"])
    assert model.seen == [2]
    model2 = _ThreadRecordingModel()
    enc2 = Encoder("fake", model=model2, show_progress=False)
    enc2.encode(_texts(30))
    enc2.encode(_texts(30) + ["new"])  # 30 cached, 1 new: a small job
    assert model2.seen == [2, 1]


def test_the_count_is_never_raised_and_other_devices_are_left_alone():
    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = _ThreadRecordingModel()
        Encoder("fake", model=model, show_progress=False, small_job_threads=2).encode(["x"])
        assert model.seen == [1]
    finally:
        torch.set_num_threads(prev)
    if prev >= 2:
        gpu = _ThreadRecordingModel("cuda")
        Encoder("fake", model=gpu, show_progress=False).encode(["x"])
        assert gpu.seen == [prev]


def test_intra_op_threads_restores_on_error_and_checks_its_argument(two_threads):
    with pytest.raises(RuntimeError), intra_op_threads(1):
        assert torch.get_num_threads() == 1
        raise RuntimeError("boom")
    assert torch.get_num_threads() == 2
    with intra_op_threads(None):
        assert torch.get_num_threads() == 2
    for bad in (0, -1, True, 1.5, "1"):
        with pytest.raises(ValueError, match="positive integer"), intra_op_threads(bad):
            pass
        with pytest.raises(ValueError, match="small_job_threads"):
            Encoder("fake", model=_ThreadRecordingModel(), small_job_threads=bad)


def test_the_shared_encoder_the_guard_uses_has_the_default_and_an_override_is_its_own():
    default = get_encoder("minilm")
    assert default.small_job_threads == 1
    other = get_encoder("minilm", small_job_threads=None)
    assert other is not default and other.small_job_threads is None
    assert get_encoder("minilm", small_job_threads=1) is default


def test_a_real_turn_encoded_on_one_thread_is_close_to_torchs_setting(two_threads):
    """The packaged MiniLM: the thread count changes a turn's embedding by float rounding at most."""
    a = Encoder("minilm", show_progress=False)
    b = Encoder("minilm", show_progress=False, model=a.model, small_job_threads=None)
    text = "Which doctor would you like to see, and at what time on Monday?"
    np.testing.assert_allclose(a.encode([text]), b.encode([text]), atol=1e-5)
    assert torch.get_num_threads() == 2


def test_the_guard_page_quotes_the_latency_results_file():
    """docs/guard.md's latency table is the last run of bench_guard.py --only-latency, with its conditions."""
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    res = json.loads((root / "benchmarks" / "results" / "guard_latency.json").read_text(encoding="utf-8"))
    la = res["latency"]
    page = (root / "docs" / "guard.md").read_text(encoding="utf-8")
    section = page[page.index("### Latency per turn at the defaults") : page.index("## Limits")]
    assert res["detector"] == la["detector"] == "wf" and la["small_job_threads"] == 1
    assert f"{res['train_dialogues']} training dialogues" in section
    assert f"load average of {res['load_average_at_start']:.2f}" in section
    assert (
        f"{la['busy_processes']} other process" in section
        and f"torch's {la['torch_threads']} threads" in section
    )
    for q in (50, 95, 99):
        a, b = la[f"default_ms_p{q}"], la[f"previous_ms_p{q}"]
        assert f"| all {la['turns']} turns, p{q} | {a:.1f} ms | {b:.1f} ms | {b / a:.1f}x |" in section
    for q in (50, 95, 99):
        a, b = la[f"default_system_ms_p{q}"], la[f"previous_system_ms_p{q}"]
        assert (
            f"| the {la['system_turns']} system turns, p{q} | {a:.1f} ms | {b:.1f} ms | {b / a:.1f}x |"
            in section
        )
