"""The Hub layout's ``compound`` config (SPEC section 3, issue #16 section 4): compound forks built
with ``python -m generation --compound PLAN`` are exported as a config of their own, loaded with
``load_dataset(folder, "compound")``, split like the public sources, and never hold a hidden
scenario."""

from __future__ import annotations

import json
from collections import Counter

import pytest

TASKS = ("weather", "bank_balance")
PER_TASK = 5
PLAN = (("SSPC", 1), ("GR", 3))
KEY = "00" * 32


@pytest.fixture(scope="module")
def corpora(star_dir, tmp_path_factory):
    from generation import GenerationConfig, generate_corpus

    root = tmp_path_factory.mktemp("hub_compound")
    common = {"star": str(star_dir), "tasks": TASKS, "per_task": PER_TASK}
    generate_corpus(GenerationConfig(out=str(root / "single"), **common), progress=False)
    generate_corpus(GenerationConfig(out=str(root / "compound"), compound=PLAN, **common), progress=False)
    return root


@pytest.fixture(scope="module")
def layout(corpora):
    from dialfork_dataset.hub import export_hub_layout
    from leaderboard.leakcheck import run_audit

    info = export_hub_layout(
        corpora / "single",
        corpora / "hub",
        corpora / "gold",
        blind_key=KEY,
        compound=corpora / "compound",
        audit=run_audit,
    )
    return corpora / "hub", info


def test_compound_config_loads_with_load_dataset(layout):
    from dialfork_dataset.hub import load_layout

    hub, info = layout
    comp = load_layout(hub, "compound")
    conf = load_layout(hub, "conformant")
    assert set(comp) == {"train", "test"} and info["counts"]["compound"] == {s: len(comp[s]) for s in comp}
    side = {r["dialogue_id"]: s for s in conf for r in conf[s]}
    n_forks = 0
    for split in ("train", "test"):
        rows = list(comp[split])
        sources = {r["dialogue_id"] for r in rows if r["hallucination_type"] is None}
        for r in rows:
            if r["hallucination_type"] is None:
                assert r["injections"] is None
                continue
            n_forks += 1
            inj = r["injections"]
            assert [(x["type"], x["turn"]) for x in inj][0] == ("SSPC", r["fork_turn"])
            assert [x["type"] for x in inj] == ["SSPC", "GR"] and inj[0]["turn"] < inj[1]["turn"]
            assert (r["hallucination_type"], r["fork_position"], r["variant"]) == (
                "SSPC",
                1,
                inj[0]["variant"],
            )
            assert r["source_id"] in sources  # the fork's source is a row of the same split
            assert side[r["source_id"]] == split  # on the same side as in the public configs
    # one compound fork per public source: the hidden sources' families are left out
    assert n_forks == len(side) == sum(len(conf[s]) for s in conf)
    public_scenarios = {r["scenario_id"] for s in conf for r in conf[s]}
    assert {r["scenario_id"] for s in comp for r in comp[s]} == public_scenarios
    assert info["audit"]["ok"]


def test_compound_rows_of_hidden_scenarios_are_left_out(layout, corpora):
    from dialfork_dataset.hub import load_gold, load_layout

    hub, info = layout
    compound_scenarios = {
        json.loads(line)["scenario_id"]
        for t in TASKS
        for line in (corpora / "compound" / f"{t}.jsonl").open()
    }
    published = {r["scenario_id"] for s in ("train", "test") for r in load_layout(hub, "compound")[s]}
    hidden_sources = info["hidden"]["sources"]
    assert hidden_sources >= len(TASKS) and len(compound_scenarios) - len(published) == hidden_sources
    assert len(load_gold(corpora / "gold")["task3"]) > 0


def test_card_and_load_split_know_the_compound_config(layout):
    from huggingface_hub import DatasetCard

    from dialfork_dataset.hub import load_split

    hub, _ = layout
    card = DatasetCard.load(hub / "README.md")
    configs = {c["config_name"]: c for c in card.data.to_dict()["configs"]}
    assert configs["compound"]["data_files"] == [
        {"split": s, "path": f"data/compound/{s}-*.parquet"} for s in ("train", "test")
    ]
    assert (
        "`compound` config holds" in card.text and 'load_dataset("idiap/dialfork", "compound")' in card.text
    )
    test = load_split(hub, "compound", split="test")
    assert Counter(r["hallucination_type"] for r in test) == {None: len(test) // 2, "SSPC": len(test) // 2}


def test_export_refuses_single_forks_as_a_compound_corpus(corpora, tmp_path):
    from dialfork_dataset.hub import export_hub_layout

    with pytest.raises(ValueError, match=r"single fork\(s\).*--compound PLAN"):
        export_hub_layout(corpora / "single", tmp_path / "hub", blind_key=KEY, compound=corpora / "single")
    assert not (tmp_path / "hub").exists()


def test_cli_export_with_compound(corpora, tmp_path, capsys):
    from dialfork_dataset.__main__ import main
    from leaderboard.__main__ import main as leaderboard_main

    dest = tmp_path / "hub"
    assert (
        leaderboard_main(
            [
                "export",
                str(corpora / "single"),
                str(dest),
                "--compound",
                str(corpora / "compound"),
                "--blind-key",
                KEY,
                "--no-audit",
            ]
        )
        == 0
    )
    info = json.loads(capsys.readouterr().out)
    assert set(info["counts"]) == {"conformant", "forked", "task3", "compound", "blind", "blind_task2"}
    assert main(["check", str(dest), "--configs", "compound"]) == 0
    assert "load_dataset(" in capsys.readouterr().out and (dest / "data" / "compound").is_dir()
    assert (
        leaderboard_main(
            [
                "export",
                str(corpora / "single"),
                str(tmp_path / "bad"),
                "--compound",
                str(tmp_path / "none"),
                "--blind-key",
                KEY,
                "--no-audit",
            ]
        )
        == 2
    )
