"""The torchmetrics metrics (issue 37 item 7): the values of the core functions and of the
evaluate modules, batch after batch, and under torch.distributed (2 gloo processes on CPU) the
value of one process on all the data."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torchmetrics")

import torch  # noqa: E402

from dialfork_metrics.pair_encoder import PairEncoder  # noqa: E402
from dialfork_metrics.torchmetrics import FBD, FlowDTW, FlowKL, FlowScore  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

# small hand-made dialogues: references and forks that leave the flow at different turns
REFS = [
    ["I need to book a doctor appointment.", "Sure. What is your name?", "Mark.", "Booked for Mark."],
    ["Weather in Paris tomorrow?", "Which day?", "Tomorrow.", "Sunny in Paris tomorrow."],
    ["Forecast for Rome?", "For which day?", "Today.", "Rome is rainy today."],
    ["Will it rain in Oslo?", "Which day would you like?", "Friday.", "No rain in Oslo on Friday."],
    ["Book a doctor for me.", "What is your name?", "Ann.", "Booked for Ann."],
]
PREDS = [
    [
        "I need to book a doctor appointment.",
        "Would you like to try co-living instead?",
        "What?",
        "It is great.",
    ],
    ["Weather in Paris tomorrow?", "Which day?", "Tomorrow.", "Sunny in Paris tomorrow."],
    ["Forecast for Rome?", "Can I interest you in our loyalty plan?", "No.", "Sign up today!"],
    ["Will it rain in Oslo?", "Which day would you like?", "Friday.", "Rain in Oslo.", "Thanks.", "Bye."],
    ["Book a doctor for me.", "What is your name?", "Ann.", "Your order has shipped."],
]


def _word_vector(word: str, dim: int) -> np.ndarray:
    seed = int.from_bytes(hashlib.sha256(word.lower().strip(".,?!").encode()).digest()[:8], "little")
    return np.random.default_rng(seed).standard_normal(dim)


class BagOfWords:
    """A deterministic turn encoder: the unit sum of hashed word vectors (texts sharing words are
    close), float32 as DialFork's encoders; the same vector for a text in any batch."""

    name = "bag-of-words"

    def __init__(self, dim: int = 16):
        self.dim = dim

    def encode(self, texts):
        E = np.stack([sum(_word_vector(w, self.dim) for w in t.split()) for t in texts])
        return (E / np.linalg.norm(E, axis=1, keepdims=True)).astype(np.float32)

    def encode_dialogues(self, dialogues, names=None):  # as Encoder.encode_dialogues (Task 2 calls it)
        from dialfork_dataset.turns import turn_texts

        return [self.encode(turn_texts(d, names[i] if names else None)) for i, d in enumerate(dialogues)]


class BagOfWordsPairs(PairEncoder):
    """A deterministic pair encoder for FBD (no transformer): hashed words of both texts, d=3
    (fewer dimensions than pairs: nonsingular covariances, whose FBD does not hang on float noise)."""

    def __init__(self):
        super().__init__(BagOfWords(3))

    def encode_pairs(self, firsts, seconds):
        return self.encoder.encode([f"{a} {b}" for a, b in zip(firsts, seconds)])


def _fake_metrics() -> dict:
    return {
        "flowscore": FlowScore(BagOfWords()),
        "flowdtw": FlowDTW(BagOfWords()),
        "flowkl": FlowKL(BagOfWords()),
        "fbd": FBD(BagOfWordsPairs()),
    }


def _core_values() -> dict[str, float]:
    """One process, the library's functions, on all the data."""
    import dialfork_metrics as dm

    return {
        "flowscore": float(dm.flowscore(REFS, PREDS, BagOfWords(), batched=True).mean()),
        "flowdtw": float(dm.flowdtw(REFS, PREDS, BagOfWords(), batched=True).mean()),
        "flowkl": float(dm.flowkl(REFS, PREDS, BagOfWords())),
        "fbd": float(dm.fbd(REFS, PREDS, BagOfWordsPairs())),
    }


# ---------------------------------------------------------------------------- one process
def test_one_process_equals_the_core_and_batches_do_not_matter():
    core = _core_values()
    assert core["flowscore"] > 0 and core["flowdtw"] > 0 and core["fbd"] > 0 and core["flowkl"] != 0
    once, split = _fake_metrics(), _fake_metrics()
    for name in once:
        once[name].update(PREDS, REFS)
        for lo, hi in ((0, 2), (2, 3), (3, 5)):
            split[name].update(predictions=PREDS[lo:hi], references=REFS[lo:hi])
        v1, v2 = once[name].compute(), split[name].compute()
        assert v1.dtype == torch.float64 and v1.ndim == 0
        assert float(v1) == float(v2) == pytest.approx(core[name], rel=1e-12, abs=1e-12), name
    # set-level: the two sets need not come in pairs
    kl = FlowKL(BagOfWords())
    kl.update(predictions=PREDS, references=[])
    kl.update(predictions=[], references=REFS)
    assert float(kl.compute()) == pytest.approx(core["flowkl"], rel=1e-12, abs=1e-12)


def test_reset_forward_and_per_pair_scores():
    import dialfork_metrics as dm

    m = FlowDTW(BagOfWords(), return_scores=True)
    batch = m(PREDS[:2], REFS[:2])  # forward: this batch's value, and accumulated
    assert float(batch["flowdtw"]) == pytest.approx(
        dm.flowdtw(REFS[:2], PREDS[:2], BagOfWords(), batched=True).mean()
    )
    m.update(PREDS[2:], REFS[2:])
    out = m.compute()
    np.testing.assert_allclose(
        out["scores"].numpy(), dm.flowdtw(REFS, PREDS, BagOfWords(), batched=True), rtol=1e-12
    )
    m.reset()
    m.update(PREDS[:1], REFS[:1])
    # torchmetrics squeezes a single value to a 0-d tensor
    assert out["scores"].shape == (5,) and m.compute()["scores"].numel() == 1
    fbd = FBD(BagOfWordsPairs())
    assert fbd(PREDS, REFS) is None  # a set-level metric has no value per batch
    assert float(fbd.compute()) == pytest.approx(_core_values()["fbd"], rel=1e-12)


def test_packaged_minilm_equals_the_core_and_the_evaluate_modules():
    import dialfork_metrics as dm

    enc = dm.get_encoder("minilm")
    refs, preds = REFS[:4], PREDS[:4]
    for cls, name in ((FlowScore, "flowscore"), (FlowDTW, "flowdtw")):
        m = cls()  # the default: the packaged MiniLM, as the evaluate modules
        m.update(preds[:2], refs[:2])
        m.update(preds[2:], refs[2:])
        module = dm.load(name).compute(predictions=preds, references=refs)[name]
        core = getattr(dm, name)(refs, preds, enc, batched=True).mean()
        assert float(m.compute()) == pytest.approx(core, rel=1e-9) == pytest.approx(module, rel=1e-9)
    kl = FlowKL("minilm")
    kl.update(preds[:2], refs[:2])
    kl.update(preds[2:], refs[2:])
    module = dm.load("flowkl").compute(predictions=[preds], references=[refs])["flowkl"]
    assert float(kl.compute()) == pytest.approx(dm.flowkl(refs, preds, enc), rel=1e-9, abs=1e-12)
    assert float(kl.compute()) == pytest.approx(module, rel=1e-9, abs=1e-12)
    fbd = FBD()
    fbd.update(preds[:2], refs[:2])
    fbd.update(preds[2:], refs[2:])
    assert float(fbd.compute()) == pytest.approx(dm.fbd(refs, preds, enc), rel=1e-9)


@pytest.mark.filterwarnings("ignore:The ``compute`` method of metric")
def test_bad_input_names_the_update_and_the_row():
    m = FlowScore(BagOfWords())
    m.update(PREDS[:1], REFS[:1])
    with pytest.raises(ValueError, match=r"flowscore, update 2: candidate 1: empty dialogue"):
        m.update([PREDS[0], []], REFS[:2])
    with pytest.raises(ValueError, match=r"flowscore, update 3: .*2 references but 1 candidates"):
        m.update(PREDS[:1], REFS[:2])
    with pytest.raises(
        ValueError, match=r"flowkl, update 1: reference set dialogue 2: turn 1 has unknown speaker"
    ):
        FlowKL(BagOfWords()).update(
            PREDS[:3], [REFS[0], REFS[1], [{"speaker": "user", "text": "a"}, {"speaker": "bot", "text": "b"}]]
        )
    with pytest.raises(ValueError, match=r"fbd, update 1: target set dialogue 0: .*empty"):
        FBD(BagOfWordsPairs()).update([[]], REFS[:1])
    with pytest.raises(ValueError, match=r"flowdtw: no \(reference, prediction\) pair"):
        FlowDTW(BagOfWords()).compute()
    kl = FlowKL(BagOfWords())
    kl.update(PREDS[:1], REFS)
    with pytest.raises(
        ValueError, match="flowkl: target set: FlowKL needs a density of at least 2 dialogues, got 1"
    ):
        kl.compute()
    kl = FlowKL(BagOfWords())
    kl.update(PREDS[:2], REFS[:2])
    kl._set_encoder(BagOfWords(8))
    with pytest.raises(
        ValueError, match="flowkl, update 2: embeddings of dimension 8, earlier updates gave 16"
    ):
        kl.update(PREDS[:2], REFS[:2])
    with pytest.raises(ValueError, match="unknown compat"):
        FBD(BagOfWordsPairs(), compat="nope")
    with pytest.raises(ValueError, match="unknown pairing"):
        FBD(BagOfWordsPairs(), pairing="nope")


class TorchBagOfWords(torch.nn.Module):
    """An encoder that is a torch module (e.g. a SentenceTransformer passed as is)."""

    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(()))

    def encode(self, texts):
        return BagOfWords().encode(texts)


def test_the_encoder_is_no_submodule_and_the_module_loads_lazily():
    enc = TorchBagOfWords()
    m = FlowScore(enc)  # the metric's .to(), .set_dtype() and state_dict() leave the encoder alone
    assert m.encoder is enc and not list(m.children()) and not list(m.parameters())
    m.set_dtype(torch.float16)
    assert enc.scale.dtype == torch.float32
    code = (
        "import sys, dialfork_metrics; dialfork_metrics.flowscore; "
        "assert not {'torch', 'torchmetrics', 'dialfork_metrics.torchmetrics'} & set(sys.modules), "
        "sorted(m for m in sys.modules if 'torch' in m)"
    )
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True, timeout=120)


def test_public_classes_document_args_returns_raises():
    from test_docstrings import _missing

    objects = [
        FlowScore,
        FlowDTW,
        FlowKL,
        FBD,
        FlowScore.update,
        FlowScore.compute,
        FlowKL.update,
        FlowKL.compute,
        FBD.update,
        FBD.compute,
        FlowKL.forward,
    ]
    assert [f"{o.__qualname__}: {_missing(o)}" for o in objects if _missing(o)] == []


# ---------------------------------------------------------------------------- two processes
def _worker(rank: int, world: int, init_file: str, out_dir: str) -> None:
    import datetime

    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"file://{init_file}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=60),
    )
    try:
        metrics = _fake_metrics()
        # interleaved and uneven (3 and 2 rows), as a DistributedSampler without padding deals them
        preds, refs = PREDS[rank::world], REFS[rank::world]
        for m in metrics.values():
            for i in range(len(preds)):  # one row per batch
                m.update(preds[i : i + 1], refs[i : i + 1])
        # a process that never updates still joins the gather
        idle = {
            "flowscore": FlowScore(BagOfWords()),
            "flowkl": FlowKL(BagOfWords()),
            "fbd": FBD(BagOfWordsPairs()),
        }
        if rank == 0:
            for m in idle.values():
                m.update(PREDS, REFS)
        out = {name: float(m.compute()) for name, m in metrics.items()}
        out.update({f"idle_{name}": float(m.compute()) for name, m in idle.items()})
        # compute() restores each process's own state: it keeps accumulating after a sync
        metrics["flowscore"].update(PREDS[:1], REFS[:1])
        out["after"] = float(metrics["flowscore"].compute())
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(out))
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(180)
def test_two_gloo_processes_give_the_value_of_one(tmp_path):
    import torch.multiprocessing as mp

    mp.spawn(_worker, args=(2, str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=True)
    core = _core_values()
    import dialfork_metrics as dm

    scores = dm.flowscore(REFS, PREDS, BagOfWords(), batched=True)
    after = float(np.concatenate([scores, scores[:1], scores[:1]]).mean())
    for rank in (0, 1):
        out = json.loads((tmp_path / f"rank{rank}.json").read_text())
        for name in core:
            assert out[name] == pytest.approx(core[name], rel=1e-12, abs=1e-12), (rank, name)
        for name in ("flowscore", "flowkl", "fbd"):
            assert out[f"idle_{name}"] == pytest.approx(core[name], rel=1e-12, abs=1e-12), (rank, name)
        assert out["after"] == pytest.approx(after, rel=1e-12)
