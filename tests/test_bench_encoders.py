"""Benchmark: each Task 1 metric with its own encoder (--task1-encoder, --pair-encoder)."""

import json
import shutil
from pathlib import Path

import pytest

from dialfork_metrics.bench import BenchError, main, parse_pair_encoder, run_benchmark


def _tiny_encoder_dir(dest: Path) -> Path:
    """A tiny random BERT sentence-transformers folder (MiniLM's tokenizer and layout, random weights)."""
    import torch
    from transformers import BertConfig, BertModel

    from dialfork_metrics.encoders import packaged_minilm_path

    src = Path(packaged_minilm_path())
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("model.safetensors", "config.json", "README.md"))
    cfg = BertConfig.from_pretrained(src)
    cfg.update({"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64})
    torch.manual_seed(0)
    BertModel(cfg).save_pretrained(dest)
    pool = json.loads((src / "1_Pooling" / "config.json").read_text())
    pool["word_embedding_dimension"] = 32
    (dest / "1_Pooling" / "config.json").write_text(json.dumps(pool))
    return dest


def test_parse_pair_encoder():
    assert parse_pair_encoder(None) is None and parse_pair_encoder(" ") is None
    assert parse_pair_encoder("d2f") == "d2f"
    assert parse_pair_encoder("fbd=d2f, prd=sbert") == {"fbd": "d2f", "prd": "sbert"}
    assert parse_pair_encoder("PRD=labse") == {"prd": "labse"}
    for bad in ("fbd=", "flowkl=d2f", "fbd=a,x"):
        with pytest.raises(BenchError, match="--pair-encoder"):
            parse_pair_encoder(bad)


def test_bad_encoder_options_exit_2(template_hub, tmp_path, capsys):
    hub, _ = template_hub
    assert (
        main(["--data", str(hub), "--tasks", "1", "--pair-encoder", "flowkl=minilm", "--out", str(tmp_path)])
        == 2
    )
    err = capsys.readouterr().err
    assert err.startswith("error: --pair-encoder") and err.count("\n") == 1
    assert main(["--data", str(hub), "--tasks", "1", "--task1-encoder", "nope", "--out", str(tmp_path)]) == 2


def test_each_task1_metric_has_its_own_encoder(template_hub, tmp_path, embedding_cache):
    hub, _ = template_hub
    tiny = str(_tiny_encoder_dir(tmp_path / "tiny"))
    kw = dict(
        tasks=(1,),
        encoders=("minilm",),
        out=None,
        n_resamples=200,
        progress=False,
        task1_methods=("flowkl", "fbd", "prd"),
        prd_kwargs={"num_runs": 1, "n_init": 1},
        cache_dir=embedding_cache,  # the runs encode each text once per model (the tiny one: by its path)
    )
    base = run_benchmark(hub, **kw)
    mixed = run_benchmark(hub, pair_encoder={"fbd": tiny}, **kw)
    assert base["task1"]["encoders"] == {"flowkl": "minilm", "fbd": "minilm", "prd": "minilm"}
    assert mixed["task1"]["encoders"] == {"flowkl": "minilm", "fbd": tiny, "prd": "minilm"}
    assert mixed["meta"]["task1_encoders"]["fbd"] == tiny

    def dist(rep, m):
        return {(u["task"], u["type"]): u["distances"] for u in rep["task1"]["units"] if u["method"] == m}

    assert dist(mixed, "flowkl") == dist(base, "flowkl")  # FlowKL's encoder unchanged
    assert dist(mixed, "prd") == dist(base, "prd")  # PRD keeps the default pair encoder
    assert dist(mixed, "fbd") != dist(base, "fbd")  # FBD runs on the tiny model's [CLS] pairs
    # --task1-encoder: FlowKL on the tiny model while Tasks 2/3 would use --encoders
    t1 = run_benchmark(hub, task1_encoder=tiny, **{**kw, "task1_methods": ("flowkl",)})
    assert t1["task1"]["encoder"] == tiny and t1["task1"]["encoders"] == {"flowkl": tiny}
    assert dist(t1, "flowkl") != dist(base, "flowkl")
