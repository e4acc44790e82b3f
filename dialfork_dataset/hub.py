"""The published layout of DialFork (what ``load_dataset("idiap/dialfork", ...)`` reads).

:func:`export_hub_layout` turns generator output into::

    dest/README.md                               dataset card (YAML configs + dataset_info)
    dest/data/<config>/<split>-XXXXX-of-YYYYY.parquet   conformant, forked, task3 (train/test)
    dest/data/blind/test-*.parquet               the leaderboard's blind Task 3 set (no labels)
    dest/data/blind_task2/test-*.parquet         the blind (reference, candidate) pairs of Task 2
    gold_dir/                                    labels of the blind sets (NEVER inside dest)

Blind ids are keyed hashes (HMAC-SHA256 with a secret key kept in ``gold_dir``) of the real
ids: without the key they carry no information about task, type, position or seed, and the
blind rows are ordered by blind id (a random order). The blind set is split into a public and
a private part per conformant source (a source and its forks share a part).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import secrets
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .builder import CONFIGS, DEFAULT_CONFIG, DEFAULT_SPLIT_SEED, SPLITS, all_config_rows, load_records
from .jsonl import read_jsonl, write_json_atomic, write_jsonl

logger = logging.getLogger(__name__)

BLIND_CONFIG = "blind"
BLIND_PAIRS_CONFIG = "blind_task2"
GOLD_FILES = ("task3_gold.jsonl", "task2_gold.jsonl", "gold_manifest.json", "blind_key.json")
DEFAULT_PUBLIC_FRACTION = 0.5


def blind_features():
    from datasets import Features, List, Value

    return Features({
        "dialogue_id": Value("string"),
        "turns": List({"speaker": Value("string"), "text": Value("string")}),
        "num_system_turns": Value("int32"),
    })


def blind_pair_features():
    from datasets import Features, Value

    return Features({"pair_id": Value("string"), "reference_id": Value("string"), "candidate_id": Value("string")})


def default_gold_dir(dest: str | os.PathLike) -> Path:
    dest = Path(dest).resolve()
    return dest.parent / f"{dest.name}-gold"


def _keyed(key: bytes, kind: str, value: str, n: int = 20) -> str:
    return hmac.new(key, f"{kind}\x00{value}".encode(), hashlib.sha256).hexdigest()[:n]


def _public(key: bytes, source_id: str, public_fraction: float) -> bool:
    h = hmac.new(key, f"subset\x00{source_id}".encode(), hashlib.sha256).digest()
    return int.from_bytes(h[:8], "big") / 2**64 < public_fraction


def make_blind(task3_test: Sequence[Mapping[str, Any]], key: bytes, public_fraction: float = DEFAULT_PUBLIC_FRACTION):
    """Blind rows, blind pairs and their gold from the task3 test rows (pure function)."""
    bid = {r["dialogue_id"]: "d" + _keyed(key, "dialogue", r["dialogue_id"]) for r in task3_test}
    if len(set(bid.values())) != len(bid):  # 80-bit ids: a collision means a broken key
        raise RuntimeError("blind id collision; export again with another key")
    blind = sorted(({"dialogue_id": bid[r["dialogue_id"]], "turns": [dict(t) for t in r["turns"]],
                     "num_system_turns": r["num_system_turns"]} for r in task3_test), key=lambda x: x["dialogue_id"])
    gold3 = sorted(({
        "dialogue_id": bid[r["dialogue_id"]],
        "num_system_turns": r["num_system_turns"],
        "hallucination_type": r["hallucination_type"],
        "fork_position": r["fork_position"],
        "fork_turn": r["fork_turn"],
        "task": r["task"],
        "subset": "public" if _public(key, r["source_id"], public_fraction) else "private",
    } for r in task3_test), key=lambda x: x["dialogue_id"])
    pairs, gold2 = [], []
    for r in task3_test:
        if r["hallucination_type"] is None or r["source_id"] not in bid:
            continue
        pid = "p" + _keyed(key, "pair", r["dialogue_id"])
        pairs.append({"pair_id": pid, "reference_id": bid[r["source_id"]], "candidate_id": bid[r["dialogue_id"]]})
        gold2.append({
            "pair_id": pid,
            "unit_id": "u" + _keyed(key, "unit", f"{r['source_id']}\x00{r['hallucination_type']}"),
            "hallucination_type": r["hallucination_type"],
            "fork_position": r["fork_position"],
            "task": r["task"],
            "subset": "public" if _public(key, r["source_id"], public_fraction) else "private",
        })
    pairs.sort(key=lambda x: x["pair_id"])
    gold2.sort(key=lambda x: x["pair_id"])
    return blind, pairs, gold3, gold2


def _write_parquet(rows: list[Mapping[str, Any]], features, path: Path, max_rows_per_shard: int) -> list[str]:
    import datasets

    n_shards = max(1, -(-len(rows) // max_rows_per_shard))
    names = []
    for i in range(n_shards):
        part = rows[i * max_rows_per_shard:(i + 1) * max_rows_per_shard]
        name = f"{path.name}-{i:05d}-of-{n_shards:05d}.parquet"
        ds = datasets.Dataset.from_list([dict(r) for r in part], features=features)
        ds.to_parquet(str(path.parent / name))
        names.append(name)
    return names


def _size_category(n: int) -> str:
    for lim, cat in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")):
        if n < lim:
            return cat
    return "1M<n<10M"


def _card(config_counts: dict[str, dict[str, int]], features_by_config: dict[str, Any], stats: dict[str, Any],
          default_config: str) -> str:
    import yaml
    from datasets import DatasetInfo, SplitDict, SplitInfo

    configs_yaml = []
    infos_yaml = []
    for cfg, counts in config_counts.items():
        entry = {"config_name": cfg, "data_files": [{"split": s, "path": f"data/{cfg}/{s}-*.parquet"} for s in counts]}
        if cfg == default_config:
            entry["default"] = True
        configs_yaml.append(entry)
        splits = SplitDict()
        for s, n in counts.items():
            splits.add(SplitInfo(name=s, num_examples=n))
        info = DatasetInfo(features=features_by_config[cfg], splits=splits, config_name=cfg)
        y = info._to_yaml_dict()
        y["config_name"] = cfg
        infos_yaml.append(y)
    total = sum(stats["records"].values())
    meta = {
        "pretty_name": "DialFork",
        "license": "cc-by-4.0",
        "language": ["en"],
        "task_categories": ["text-classification", "sentence-similarity", "text-generation"],
        "tags": ["dialogue", "hallucination", "procedural-hallucination", "task-oriented-dialogue", "workflow", "STAR"],
        "size_categories": [_size_category(total)],
        "configs": configs_yaml,
        "dataset_info": infos_yaml,
    }
    from .builder import CITATION

    counts_md = "\n".join(
        f"| `{c}` | " + " | ".join(f"{config_counts[c].get(s, 0):,}" for s in ("train", "test")) + " |" for c in config_counts
    )
    body = f"""
# DialFork

DialFork measures **procedural hallucination** in conversational agents: dialogues whose every
sentence is fluent and plausible but that skip steps, change goal, repeat work or chase a
competing goal instead of following their workflow. Conformant dialogues D+ are generated by
two agents role-playing STAR scenarios; each is then re-run with the same seed and one of four
hallucination types (WIC workflow identity, SSPC step selection, GR goal replacement, CSC
competing sub-goal) injected just before system turn t_k, k = 1..4. Earlier forks deviate more,
which gives a ground-truth ordering without any judge.

This copy: {stats['records'].get('conformant', 0):,} conformant dialogues and {stats['records'].get('forked', 0):,} forks over
{stats['tasks']} tasks ({stats['domains']} domains); generator(s): {', '.join(f'`{g}`' for g in stats['generators'])}.

## How to load

```python
from datasets import load_dataset
forks = load_dataset("idiap/dialfork", "forked", split="test")
task3 = load_dataset("idiap/dialfork", "task3")          # train (conformant) / test
blind = load_dataset("idiap/dialfork", "blind", split="test")  # leaderboard input, no labels
```
A local copy of this folder loads the same way: `load_dataset("path/to/folder", "forked")`.

## Fields

| field | meaning |
| --- | --- |
| `dialogue_id` | unique id; forks are `<source_id>-<TYPE>-k<k>` |
| `source_id` | the conformant parent (its own id for a conformant dialogue) |
| `scenario_id`, `task`, `domain` | the STAR scenario, task and domain played |
| `hallucination_type` | null (conformant) or WIC / SSPC / GR / CSC |
| `variant`, `instruction` | the variant id and the exact instruction injected |
| `substitute_task` | WIC only: the workflow followed instead |
| `fork_position`, `fork_turn` | k in 1..4 and t_k = 1 + round((k-1) T / 4), a system-turn index |
| `num_system_turns` | T, the number of system turns |
| `turns` | list of `{{speaker: "user"|"system", text}}` |
| `seed`, `generator`, `decoding`, `code_version` | everything needed to regenerate the dialogue |
| `prefix_mode`, `prefix_divergence` | `replay` or `reuse`; number of prefix turns that differ from D+ |

## Configs and splits

| config | train | test |
| --- | --- | --- |
{counts_md}

Per task, the conformant dialogues are split in halves (train = floor(n/2), chosen by a seeded
hash of the id); `forked` follows its sources; `task3` test = conformant test + all 16 forks of
each test source (train is conformant only, for calibration). `blind` is the `task3` test set
with opaque ids and no labels (for the leaderboard); `blind_task2` lists its (source, fork)
pairs. Labels of the blind sets are kept by the leaderboard's scorer only.

## How it was made

Scenarios, workflows and role-play instructions come from STAR (Mosig et al., 2020; MIT). Every
dialogue is newly generated; STAR's human dialogues are not part of DialFork. See the paper and
the `dialfork` toolkit (`python -m generation`) to regenerate or extend the corpus.

## Limitations

Dialogues are simulated; hallucinations are injected by instruction, so a fork may follow its
instruction imperfectly (the paper's human study validates the construction). Replayed prefixes
can differ slightly from D+ with stochastic decoding (see `prefix_divergence`).

## Citation

```bibtex
{CITATION}
```
"""
    return "---\n" + yaml.safe_dump(meta, sort_keys=False, allow_unicode=True) + "---\n" + body


def export_hub_layout(
    src: str | os.PathLike | Sequence[Mapping[str, Any]],
    dest: str | os.PathLike,
    gold_dir: str | os.PathLike | None = None,
    *,
    split_seed: int = DEFAULT_SPLIT_SEED,
    blind_key: bytes | str | None = None,
    public_fraction: float = DEFAULT_PUBLIC_FRACTION,
    max_rows_per_shard: int = 50_000,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Write the Hub layout of ``src`` (generator output folder or record list) to ``dest``.

    The layout is built in a temporary folder beside ``dest`` and moved into place at the end,
    so an interrupted export leaves nothing half-written. ``gold_dir`` (default
    ``<dest>-gold``) must lie outside ``dest``. ``blind_key`` (hex string or bytes) makes the
    blind ids reproducible; by default a random key is drawn and stored in ``gold_dir``.
    Returns a summary (counts per config/split, paths).
    """
    import datasets

    from .records import record_features

    dest = Path(dest).resolve()
    gold = Path(gold_dir).resolve() if gold_dir is not None else default_gold_dir(dest)
    if gold == dest or dest in gold.parents:
        raise ValueError(f"gold_dir {gold} lies inside the public layout {dest}; put it outside (e.g. {default_gold_dir(dest)})")
    if not 0.0 < public_fraction < 1.0:
        raise ValueError(f"public_fraction must be in (0, 1), got {public_fraction}")
    for p in (dest, gold):
        if p.exists() and any(p.iterdir()) and not overwrite:
            raise FileExistsError(f"{p} exists and is not empty; pass overwrite=True (--overwrite) to replace it")
    if isinstance(blind_key, str):
        key = bytes.fromhex(blind_key)
    elif isinstance(blind_key, bytes):
        key = blind_key
    else:
        key = secrets.token_bytes(32)

    records = load_records(src)
    if not any(r["hallucination_type"] is None for r in records):
        raise ValueError(f"{src}: no conformant records; the layout needs conformant dialogues and their forks")
    rows = all_config_rows(records, split_seed)
    features = record_features()
    blind, pairs, gold3, gold2 = make_blind(rows["task3"]["test"], key, public_fraction)

    dest.parent.mkdir(parents=True, exist_ok=True)
    gold.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    tmp_gold = Path(tempfile.mkdtemp(prefix=f".{gold.name}.", dir=gold.parent))
    try:
        counts: dict[str, dict[str, int]] = {}
        feats: dict[str, Any] = {}
        disable = datasets.disable_progress_bars
        disable()
        for cfg in CONFIGS:
            counts[cfg] = {}
            feats[cfg] = features
            for split in SPLITS:
                d = tmp / "data" / cfg
                d.mkdir(parents=True, exist_ok=True)
                _write_parquet(rows[cfg][split], features, d / split, max_rows_per_shard)
                counts[cfg][split] = len(rows[cfg][split])
        for cfg, data, f in ((BLIND_CONFIG, blind, blind_features()), (BLIND_PAIRS_CONFIG, pairs, blind_pair_features())):
            d = tmp / "data" / cfg
            d.mkdir(parents=True, exist_ok=True)
            _write_parquet(data, f, d / "test", max_rows_per_shard)
            counts[cfg] = {"test": len(data)}
            feats[cfg] = f
        stats = {
            "records": {"conformant": sum(1 for r in records if r["hallucination_type"] is None),
                        "forked": sum(1 for r in records if r["hallucination_type"] is not None)},
            "tasks": len({r["task"] for r in records}),
            "domains": len({r["domain"] for r in records}),
            "generators": sorted({r["generator"] for r in records}),
        }
        (tmp / "README.md").write_text(_card(counts, feats, stats, DEFAULT_CONFIG), encoding="utf-8")
        write_jsonl(tmp_gold / "task3_gold.jsonl", gold3)
        write_jsonl(tmp_gold / "task2_gold.jsonl", gold2)
        digest = hashlib.sha256()
        for name in ("task3_gold.jsonl", "task2_gold.jsonl"):
            digest.update((tmp_gold / name).read_bytes())
        manifest = {
            "revision": digest.hexdigest(),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "public_fraction": public_fraction,
            "split_seed": split_seed,
            "counts": {
                "task3": dict(Counter(g["subset"] for g in gold3)),
                "task2": dict(Counter(g["subset"] for g in gold2)),
            },
        }
        write_json_atomic(tmp_gold / "gold_manifest.json", manifest)
        write_json_atomic(tmp_gold / "blind_key.json", {"key": key.hex(), "note": "secret: keep with the gold only"})
        for final, staged in ((dest, tmp), (gold, tmp_gold)):
            if final.exists():
                shutil.rmtree(final)
            os.replace(staged, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(tmp_gold, ignore_errors=True)
        raise
    logger.info("exported %d records to %s (gold in %s)", len(records), dest, gold)
    return {"dest": str(dest), "gold_dir": str(gold), "counts": counts, "gold_revision": manifest["revision"]}


def _read_parquet_rows(folder: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    files = sorted(folder.glob("*.parquet"))
    if not files:
        raise FileNotFoundError(f"{folder}: no parquet files (is this a DialFork Hub layout from export_hub_layout?)")
    rows: list[dict[str, Any]] = []
    for f in files:
        rows.extend(pq.read_table(f).to_pylist())
    return rows


def load_blind(dest: str | os.PathLike) -> list[dict[str, Any]]:
    """Rows of the blind Task 3 set: ``{dialogue_id, turns, num_system_turns}``."""
    return _read_parquet_rows(Path(dest) / "data" / BLIND_CONFIG)


def load_blind_pairs(dest: str | os.PathLike) -> list[dict[str, Any]]:
    """Rows of the blind Task 2 pairs: ``{pair_id, reference_id, candidate_id}``."""
    return _read_parquet_rows(Path(dest) / "data" / BLIND_PAIRS_CONFIG)


def load_gold(gold_dir: str | os.PathLike) -> dict[str, Any]:
    """The labels of the blind sets (for the scorer only)."""
    gold_dir = Path(gold_dir)
    missing = [n for n in GOLD_FILES[:3] if not (gold_dir / n).exists()]
    if missing:
        raise FileNotFoundError(f"{gold_dir}: not a DialFork gold folder (missing {', '.join(missing)})")
    return {
        "task3": read_jsonl(gold_dir / "task3_gold.jsonl"),
        "task2": read_jsonl(gold_dir / "task2_gold.jsonl"),
        "manifest": json.loads((gold_dir / "gold_manifest.json").read_text(encoding="utf-8")),
    }


def push_to_hub(dest: str | os.PathLike, repo_id: str, *, token: str | None = None, private: bool = False,
                revision: str | None = None, commit_message: str = "Upload DialFork", api: Any = None,
                endpoint: str | None = None) -> Any:
    """Upload a layout written by :func:`export_hub_layout` as a Hub dataset repo.

    Refuses a folder that holds gold files (labels must never be published). ``api`` may be an
    ``huggingface_hub.HfApi`` (or a test double); ``endpoint`` selects a non-default Hub.
    """
    dest = Path(dest)
    if not (dest / "README.md").exists() or not (dest / "data").is_dir():
        raise FileNotFoundError(f"{dest}: not a DialFork Hub layout (README.md and data/ expected); run export first")
    leaked = [str(p.relative_to(dest)) for p in dest.rglob("*") if p.name in GOLD_FILES]
    if leaked:
        raise ValueError(f"{dest} holds gold files {leaked}: remove them; gold must never be published")
    if api is None:
        from huggingface_hub import HfApi

        api = HfApi(endpoint=endpoint, token=token)
    api.create_repo(repo_id=repo_id, repo_type="dataset", private=private, exist_ok=True)
    return api.upload_folder(folder_path=str(dest), repo_id=repo_id, repo_type="dataset", revision=revision,
                             commit_message=commit_message, allow_patterns=["README.md", "data/**"])


def load_split(data: str | os.PathLike, config: str = DEFAULT_CONFIG, split: str | None = None,
               split_seed: int = DEFAULT_SPLIT_SEED):
    """Load a config from a Hub id, a Hub-layout folder, or a generator output folder.

    Returns a ``datasets.Dataset`` (``split`` given) or ``DatasetDict``.
    """
    from datasets import load_dataset

    p = Path(data)
    if p.exists() and not (p / "data").is_dir():
        from .builder import build_dataset

        dd = build_dataset(p, config, split_seed=split_seed)
        return dd[split] if split else dd
    if config not in CONFIGS + (BLIND_CONFIG, BLIND_PAIRS_CONFIG):
        raise ValueError(f"unknown config {config!r}; DialFork has {', '.join(CONFIGS + (BLIND_CONFIG, BLIND_PAIRS_CONFIG))}")
    return load_dataset(str(data), config, split=split)
