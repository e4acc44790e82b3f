"""The published layout of DialFork (what ``load_dataset("idiap/dialfork", ...)`` reads).

:func:`export_hub_layout` turns generator output into::

    dest/README.md                               dataset card (huggingface_hub DatasetCard)
    dest/data/<config>/<split>-XXXXX-of-YYYYY.parquet   conformant, forked, task3 (train/test)
    dest/data/blind/test-*.parquet               the detector track's blind set (no labels)
    dest/data/blind_task2/test-*.parquet         the metric track's (reference, candidate) pairs
    gold_dir/                                    labels, key and hidden seed (NEVER inside dest)

The hidden split follows SPEC section 4 (see :mod:`dialfork_dataset.hidden`): the blind sets come
from hidden sources (a separate corpus generated from keyed-reserved scenarios with a secret
seed, or sources reserved from ``src`` by the key), no hidden scenario and no hidden turn
sequence occurs in a public config, the detector blind set holds one dialogue per source and no
source feeds both tracks. Blind ids are keyed hashes (HMAC-SHA256) of the real ids, rows are
ordered by blind id (a random order), and each track is split into a public and a private part.
The public card carries the gold's revision hash; scoring refuses a gold of another revision.

The export is crash-safe as a whole: both folders are staged beside their targets, optionally
audited (``leaderboard.audit``), then swapped in under a journal; an interrupted swap is
completed, and leftover staging folders are removed, by the next export to the same targets.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .builder import CONFIGS, DEFAULT_CONFIG, DEFAULT_SPLIT_SEED, SPLITS, all_config_rows, load_records
from .hidden import (
    DEFAULT_CONFORMANT_SHARE,
    DEFAULT_HIDDEN_FRACTION,
    DEFAULT_METRIC_SHARE,
    DEFAULT_PUBLIC_FRACTION,
    HiddenKey,
    assert_disjoint,
    draw_hidden_tracks,
    keyed_token,
    parse_key,
    read_key_file,
    reserve,
)
from .jsonl import read_jsonl, write_json_atomic, write_jsonl

logger = logging.getLogger(__name__)

BLIND_CONFIG = "blind"
BLIND_PAIRS_CONFIG = "blind_task2"
GOLD_FILES = ("task3_gold.jsonl", "task2_gold.jsonl", "gold_manifest.json", "blind_key.json")
AUDIT_FILE = "audit_report.json"
CODE_URL = "https://github.com/idiap/dialfork"
LEADERBOARD_SPACE = "https://huggingface.co/spaces/idiap/dialfork-leaderboard"
METRIC_SPACES = ("flowscore", "flowdtw", "flowkl", "task3")


class AuditFailed(RuntimeError):
    """The export's audit found a cheat; nothing was published. ``report`` is the audit report."""

    def __init__(self, report: Any):
        self.report = report
        super().__init__("the leaderboard audit found a working cheat; the export was not published:\n"
                         + report.format_text())


def blind_features():
    from datasets import Features, List, Value

    return Features({
        "dialogue_id": Value("string"),
        "turns": List({"speaker": Value("string"), "text": Value("string")}),
        "num_system_turns": Value("int32"),
    })


def blind_pair_features():
    from datasets import Features, List, Value

    turns = List({"speaker": Value("string"), "text": Value("string")})
    return Features({"pair_id": Value("string"), "reference_id": Value("string"), "candidate_id": Value("string"),
                     "reference": turns, "candidate": turns})


def default_gold_dir(dest: str | os.PathLike) -> Path:
    dest = Path(dest).resolve()
    return dest.parent / f"{dest.name}-gold"


def _keyed(key: bytes, kind: str, value: str, n: int = 20) -> str:
    return keyed_token(key, kind, value, n)


def _legacy_public(key: bytes, source_id: str, public_fraction: float) -> bool:
    import hmac

    h = hmac.new(key, f"subset\x00{source_id}".encode(), hashlib.sha256).digest()
    return int.from_bytes(h[:8], "big") / 2**64 < public_fraction


def make_blind(task3_test: Sequence[Mapping[str, Any]], key: bytes, public_fraction: float = DEFAULT_PUBLIC_FRACTION):
    """The all-rows blind layout: every task3 test row blind, pairs between blind ids (pure function).

    This is NOT what :func:`export_hub_layout` publishes (it holds siblings, so sibling grouping
    and pair diffing solve it; ``leaderboard audit`` says so). It is kept for the scorer's
    synthetic fixtures (``leaderboard.synthetic``), whose gold rows have the published format.
    """
    bid = {r["dialogue_id"]: "d" + _keyed(key, "dialogue", r["dialogue_id"]) for r in task3_test}
    if len(set(bid.values())) != len(bid):  # 80-bit ids: a collision means a broken key
        raise RuntimeError("blind id collision; export again with another key")
    blind = sorted(({"dialogue_id": bid[r["dialogue_id"]], "turns": [dict(t) for t in r["turns"]],
                     "num_system_turns": r["num_system_turns"]} for r in task3_test), key=lambda x: x["dialogue_id"])
    sub = {r["source_id"]: "public" if _legacy_public(key, r["source_id"], public_fraction) else "private"
           for r in task3_test}
    gold3 = sorted((_gold3_row(bid[r["dialogue_id"]], r, sub[r["source_id"]]) for r in task3_test),
                   key=lambda x: x["dialogue_id"])
    pairs, gold2 = [], []
    for r in task3_test:
        if r["hallucination_type"] is None or r["source_id"] not in bid:
            continue
        pid = "p" + _keyed(key, "pair", r["dialogue_id"])
        pairs.append({"pair_id": pid, "reference_id": bid[r["source_id"]], "candidate_id": bid[r["dialogue_id"]]})
        gold2.append(_gold2_row(pid, key, r, sub[r["source_id"]]))
    pairs.sort(key=lambda x: x["pair_id"])
    gold2.sort(key=lambda x: x["pair_id"])
    return blind, pairs, gold3, gold2


def _gold3_row(blind_id: str, r: Mapping[str, Any], subset: str) -> dict[str, Any]:
    return {"dialogue_id": blind_id, "num_system_turns": r["num_system_turns"],
            "hallucination_type": r["hallucination_type"], "fork_position": r["fork_position"],
            "fork_turn": r["fork_turn"], "task": r["task"], "subset": subset}


def _gold2_row(pair_id: str, key: bytes, r: Mapping[str, Any], subset: str) -> dict[str, Any]:
    return {"pair_id": pair_id, "unit_id": "u" + _keyed(key, "unit", f"{r['source_id']}\x00{r['hallucination_type']}"),
            "hallucination_type": r["hallucination_type"], "fork_position": r["fork_position"], "task": r["task"],
            "subset": subset}


def make_hidden_blind(detector: Sequence[Mapping[str, Any]], metric: Sequence[Mapping[str, Any]], key: bytes):
    """The published blind layout from :func:`dialfork_dataset.hidden.draw_hidden_tracks` rows (pure).

    ``detector``: one record per detector source (with ``subset``); ``metric``: whole families of
    the metric sources (with ``subset``). Returns ``(blind, pairs, gold3, gold2)``: blind rows
    ``{dialogue_id, turns, num_system_turns}``; pairs ``{pair_id, reference_id, candidate_id,
    reference, candidate}`` (the two transcripts inline) for every complete (source, type) unit.
    """
    ids = [r["dialogue_id"] for r in detector] + [r["dialogue_id"] for r in metric]
    bid = {i: "d" + _keyed(key, "dialogue", i) for i in ids}
    if len(set(bid.values())) != len(set(ids)):
        raise RuntimeError("blind id collision; export again with another key")
    blind = sorted(({"dialogue_id": bid[r["dialogue_id"]], "turns": [dict(t) for t in r["turns"]],
                     "num_system_turns": r["num_system_turns"]} for r in detector), key=lambda x: x["dialogue_id"])
    gold3 = sorted((_gold3_row(bid[r["dialogue_id"]], r, r["subset"]) for r in detector),
                   key=lambda x: x["dialogue_id"])
    sources = {r["dialogue_id"]: r for r in metric if r["hallucination_type"] is None}
    units: dict[tuple[str, str], dict[int, Mapping[str, Any]]] = defaultdict(dict)
    for r in metric:
        if r["hallucination_type"] is not None and r["source_id"] in sources:
            units[(r["source_id"], r["hallucination_type"])][r["fork_position"]] = r
    pairs, gold2 = [], []
    for (sid, _h), forks in sorted(units.items()):
        if sorted(forks) != [1, 2, 3, 4]:
            logger.warning("metric track: unit (%s, %s) lacks fork positions; left out", sid, _h)
            continue
        ref = sources[sid]
        for _k, r in sorted(forks.items()):
            pid = "p" + _keyed(key, "pair", r["dialogue_id"])
            pairs.append({"pair_id": pid, "reference_id": bid[sid], "candidate_id": bid[r["dialogue_id"]],
                          "reference": [dict(t) for t in ref["turns"]], "candidate": [dict(t) for t in r["turns"]]})
            gold2.append(_gold2_row(pid, key, r, r["subset"]))
    pairs.sort(key=lambda x: x["pair_id"])
    gold2.sort(key=lambda x: x["pair_id"])
    return blind, pairs, gold3, gold2


def _write_parquet(rows: list[Mapping[str, Any]], features, path: Path, max_rows_per_shard: int) -> tuple[list[str], int]:
    """Write ``rows`` as parquet shards ``<split>-XXXXX-of-YYYYY.parquet``; returns (names, arrow bytes)."""
    import datasets

    n_shards = max(1, -(-len(rows) // max_rows_per_shard))
    names = []
    nbytes = 0
    for i in range(n_shards):
        part = rows[i * max_rows_per_shard:(i + 1) * max_rows_per_shard]
        name = f"{path.name}-{i:05d}-of-{n_shards:05d}.parquet"
        ds = (datasets.Dataset.from_list([dict(r) for r in part], features=features) if part
              else datasets.Dataset.from_dict({k: [] for k in features}, features=features))
        nbytes += int(ds.data.nbytes)
        ds.to_parquet(str(path.parent / name))
        names.append(name)
    return names, nbytes


def _size_category(n: int) -> str:
    for lim, cat in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")):
        if n < lim:
            return cat
    return "1M<n<10M"


def features_yaml(features: Any) -> list[dict[str, Any]]:
    """The dataset card's YAML list of a ``datasets.Features`` (``dtype`` / ``struct`` / ``list``)."""
    from datasets import Value

    try:
        from datasets import List
    except ImportError:  # pragma: no cover
        List = None  # noqa: N806

    def one(f: Any) -> dict[str, Any]:
        if isinstance(f, Value):
            return {"dtype": f.dtype}
        if isinstance(f, dict):
            return {"struct": [{"name": k, **one(v)} for k, v in f.items()]}
        if List is not None and isinstance(f, List):
            inner = one(f.feature)
            return {"list": inner["dtype"] if set(inner) == {"dtype"} else inner["struct"] if set(inner) == {"struct"}
                    else inner}
        raise TypeError(f"features_yaml: unsupported feature type {type(f).__name__}")

    return [{"name": k, **one(v)} for k, v in features.items()]


def _example_row(rows: Sequence[Mapping[str, Any]], max_turns: int = 4) -> str:
    """One public fork row as JSON, its turns cut to ``max_turns`` (for the card)."""
    r = next((x for x in rows if x.get("hallucination_type") is not None), rows[0] if rows else None)
    if r is None:
        return "{}"
    ex = {k: r.get(k) for k in ("dialogue_id", "source_id", "scenario_id", "task", "domain", "hallucination_type",
                                "variant", "fork_position", "fork_turn", "num_system_turns")}
    ex["turns"] = [dict(t) for t in r["turns"][:max_turns]] + ([{"...": f"{len(r['turns']) - max_turns} more turns"}]
                                                               if len(r["turns"]) > max_turns else [])
    ex.update({k: r.get(k) for k in ("seed", "generator", "prefix_mode", "prefix_divergence")})
    return json.dumps(ex, indent=2, ensure_ascii=False)


def build_card(config_counts: Mapping[str, Mapping[str, int]], features_by_config: Mapping[str, Any],
               sizes: Mapping[str, Mapping[str, Any]], stats: Mapping[str, Any], default_config: str,
               gold_revision: str, example: str) -> Any:
    """The dataset card (``huggingface_hub.DatasetCard``) of a layout.

    ``sizes[cfg]``: ``{"num_bytes": {split: arrow bytes}, "download_size": parquet bytes}``;
    ``stats``: record counts, tasks, domains, generators, the hidden split's mix and settings.
    """
    from huggingface_hub import DatasetCard, DatasetCardData

    from .builder import CITATION

    configs_yaml = []
    infos_yaml = []
    for cfg, counts in config_counts.items():
        entry: dict[str, Any] = {"config_name": cfg,
                                 "data_files": [{"split": s, "path": f"data/{cfg}/{s}-*.parquet"} for s in counts]}
        if cfg == default_config:
            entry["default"] = True
        configs_yaml.append(entry)
        nb = sizes[cfg]["num_bytes"]
        infos_yaml.append({
            "config_name": cfg,
            "features": features_yaml(features_by_config[cfg]),
            "splits": [{"name": s, "num_bytes": int(nb[s]), "num_examples": int(n)} for s, n in counts.items()],
            "download_size": int(sizes[cfg]["download_size"]),
            "dataset_size": int(sum(nb.values())),
        })
    total = sum(stats["records"].values()) + stats["hidden"]["records"]
    data = DatasetCardData(
        pretty_name="DialFork",
        license="cc-by-4.0",
        language=["en"],
        annotations_creators=["machine-generated"],
        language_creators=["machine-generated"],
        multilinguality=["monolingual"],
        source_datasets=["extended|other-star"],
        task_categories=["text-classification", "sentence-similarity", "text-generation"],
        size_categories=[_size_category(total)],
        tags=["synthetic", "dialogue", "hallucination", "procedural-hallucination", "task-oriented-dialogue",
              "workflow", "STAR", "leaderboard"],
        configs=configs_yaml,
        dataset_info=infos_yaml,
        gold_revision=gold_revision,
    )
    counts_md = "\n".join(
        f"| `{c}` | " + " | ".join(f"{config_counts[c].get(s, 0):,}" if s in config_counts[c] else "-"
                                   for s in ("train", "test")) + " |" for c in config_counts)
    h = stats["hidden"]
    mix = h["mix"]
    types = ", ".join(f"{t} {n}" for t, n in mix["types"].items()) or "none"
    ks = ", ".join(f"{k} {n}" for k, n in mix["fork_positions"].items()) or "none"
    spaces = ", ".join(f"[`{m}`](https://huggingface.co/spaces/idiap/{m})" for m in METRIC_SPACES)
    body = f"""
# DialFork

DialFork measures **procedural hallucination** in conversational agents: dialogues whose every
sentence is fluent and plausible but that skip steps, change goal, repeat work or chase a
competing goal instead of following their workflow. Conformant dialogues D+ are generated by
two agents role-playing STAR scenarios; each is then re-run with the same seed and one of four
hallucination types (WIC workflow identity, SSPC step selection, GR goal replacement, CSC
competing sub-goal) injected just before system turn t_k, k = 1..4. Earlier forks deviate more,
which gives a ground-truth ordering without any judge.

This copy: {stats['records'].get('conformant', 0):,} public conformant dialogues and
{stats['records'].get('forked', 0):,} public forks over {stats['tasks']} tasks ({stats['domains']} domains),
plus the hidden leaderboard sets below; generator(s): {', '.join(f'`{g}`' for g in stats['generators'])}.

Links: code and documentation [{CODE_URL}]({CODE_URL}); leaderboard Space
[{LEADERBOARD_SPACE}]({LEADERBOARD_SPACE}); metric Spaces {spaces}.

## How to load

```python
from datasets import load_dataset
forks = load_dataset("idiap/dialfork", "forked", split="test")
task3 = load_dataset("idiap/dialfork", "task3")          # train (conformant) / test
blind = load_dataset("idiap/dialfork", "blind", split="test")        # detector track input, no labels
pairs = load_dataset("idiap/dialfork", "blind_task2", split="test")  # metric track input, no labels
```
A local copy of this folder loads the same way: `load_dataset("path/to/folder", "forked")` (give each
local folder its own `cache_dir`, or use `dialfork_dataset.load_split`, which does: `datasets` caches a
local folder's named configs under the folder's base name, so two folders of the same name share rows).

## Example (a public fork, turns cut)

```json
{example}
```

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
| `prefix_mode`, `prefix_divergence` | how the turns before t_k were made; how many differ from D+ |

## Configs and splits

| config | train | test |
| --- | --- | --- |
{counts_md}

Per task, the public conformant dialogues are split in halves (train = floor(n/2), chosen by a
seeded hash of the id); `forked` follows its sources; `task3` test = conformant test + all 16
forks of each test source (train is conformant only, for calibration).

## What is public and what is hidden

Everything in `conformant`, `forked` and `task3` is public, with labels, for research and for
training. The leaderboard is scored on **hidden** sources that appear nowhere else:

- Per task, a keyed selection ({h['fraction_text']} of the task's STAR scenarios) is reserved for the
  hidden split. No dialogue of a reserved scenario is in a public config; the export checks this
  by scenario id and by a hash of every turn sequence.
- The hidden dialogues were generated with a secret seed (at least 128 bits) that no public
  file holds; regenerating with the public code and public seeds does not reproduce them.
- `blind` (detector track, Task 3) holds **one dialogue per hidden source**, so no blind
  dialogue has a sibling to be compared with. This release: {mix['dialogues']:,} dialogues, of which
  {mix['conformant']:,} conformant ({100 * (mix['conformant_share'] or 0):.0f}%) and {mix['forked']:,} forks (types: {types};
  positions: {ks}), drawn by a secret draw that balances types, positions and the
  conformant share. The Score needs both kinds: it rewards flagging forks at the right turn and
  leaving conformant dialogues unflagged.
- `blind_task2` (metric track, Task 2) pairs a reference (conformant) dialogue with each of its
  forks, inline, for {h['mix'].get('metric_units', 0):,} (source, type) units of other hidden sources (no source feeds
  both tracks). Fork prefix mode(s) of the hidden set: {', '.join(f'`{m}`' for m in h['prefix_modes']) or 'n/a'}.
- Ids are opaque keyed hashes, rows are in a random order, and labels stay with the scorer. The
  gold revision this card belongs to is `{gold_revision}`; the scorer refuses any other.
- Each release is audited (`python -m leaderboard audit`): verbatim lookup in every public
  config, sibling grouping, regeneration with public seeds, pair diffing, and correlations of
  ids, row order and lengths with the labels; a release where a cheat beats Random by more than
  5 Score points, or reaches a metric-track tau above 0.8, is not published.
{h['note']}
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
    return DatasetCard("---\n" + data.to_yaml() + "\n---\n" + body)


def read_card_gold_revision(dest: str | os.PathLike) -> str | None:
    """The ``gold_revision`` recorded in a layout's card; None when the layout has no card."""
    card = Path(dest) / "README.md"
    if not card.is_file():
        return None
    from huggingface_hub import DatasetCard

    data = DatasetCard.load(card).data.to_dict()
    rev = data.get("gold_revision")
    return str(rev) if rev else ""


# --------------------------------------------------------------------------- crash-safe swap


def _journal(dest: Path) -> Path:
    return dest.parent / f".{dest.name}.export-journal.json"


def _complete_swap(moves: Sequence[Mapping[str, str]]) -> None:
    """Finish a journaled swap: for each move, the old final folder goes to its backup, the staged
    folder becomes the final one. Idempotent: every step checks what is already done."""
    for m in moves:
        staged, final, backup = Path(m["staged"]), Path(m["final"]), Path(m["backup"])
        if staged.exists():
            if final.exists():
                if backup.exists():  # should not happen: backups are unique per export
                    shutil.rmtree(final)
                else:
                    os.replace(final, backup)
            os.replace(staged, final)
    for m in moves:
        shutil.rmtree(m["backup"], ignore_errors=True)


def recover_export(dest: str | os.PathLike, gold_dir: str | os.PathLike | None = None) -> list[str]:
    """Finish an interrupted export to ``dest``/``gold_dir`` and remove leftover staging folders.

    Returns what was done (one line per action). Called at the start of every export.
    """
    dest = Path(dest).resolve()
    gold = Path(gold_dir).resolve() if gold_dir is not None else default_gold_dir(dest)
    done: list[str] = []
    j = _journal(dest)
    if j.exists():
        moves = json.loads(j.read_text(encoding="utf-8"))["moves"]
        _complete_swap(moves)
        j.unlink()
        done.append(f"completed the interrupted swap of {dest} and {gold}")
    for folder in (dest, gold):
        for pattern in (f".{folder.name}.tmp-*", f".{folder.name}.old-*"):
            for p in folder.parent.glob(pattern):
                shutil.rmtree(p, ignore_errors=True)
                done.append(f"removed leftover {p}")
    for line in done:
        logger.warning("%s", line)
    return done


def _swap_together(pairs: Sequence[tuple[Path, Path]]) -> None:
    """Move each staged folder onto its final path, all or (after a crash) none until the next run
    completes them: the journal is written first, atomically."""
    moves = []
    for staged, final in pairs:
        backup = final.parent / f".{final.name}.old-{staged.name.rsplit('-', 1)[-1]}"
        moves.append({"staged": str(staged), "final": str(final), "backup": str(backup)})
    j = _journal(pairs[0][1])
    write_json_atomic(j, {"moves": moves, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    _complete_swap(moves)
    j.unlink()


# --------------------------------------------------------------------------- export


def _resolve_key(key: HiddenKey | str | os.PathLike | None, blind_key: bytes | str | None,
                 hidden_fraction: float | None) -> HiddenKey:
    if key is not None and blind_key is not None:
        raise ValueError("give key (a key file or HiddenKey) or blind_key (hex), not both")
    if isinstance(key, HiddenKey):
        hk = key
    elif key is not None:
        hk = read_key_file(key)
    elif blind_key is not None:
        return HiddenKey(parse_key(blind_key), None,
                         hidden_fraction if hidden_fraction is not None else DEFAULT_HIDDEN_FRACTION)
    else:  # a random key; no hidden seed (the hidden records were not generated with one from this key)
        hk = HiddenKey(HiddenKey.generate().key, None, DEFAULT_HIDDEN_FRACTION)
    if hidden_fraction is not None and hidden_fraction != hk.hidden_fraction:
        hk = HiddenKey(hk.key, hk.hidden_seed_hex, hidden_fraction)
    return hk


def _corpus_seed(src: Any) -> int | None:
    """The base seed in a generator output folder's manifest.json (None when there is none)."""
    if not isinstance(src, str | os.PathLike):
        return None
    m = Path(src) / "manifest.json"
    if not m.is_file():
        return None
    try:
        return json.loads(m.read_text(encoding="utf-8"))["config"]["seed"]
    except (KeyError, TypeError, json.JSONDecodeError):
        return None


def export_hub_layout(
    src: str | os.PathLike | Sequence[Mapping[str, Any]],
    dest: str | os.PathLike,
    gold_dir: str | os.PathLike | None = None,
    *,
    hidden: str | os.PathLike | Sequence[Mapping[str, Any]] | None = None,
    key: HiddenKey | str | os.PathLike | None = None,
    split_seed: int = DEFAULT_SPLIT_SEED,
    blind_key: bytes | str | None = None,
    hidden_fraction: float | None = None,
    metric_share: float = DEFAULT_METRIC_SHARE,
    conformant_share: float = DEFAULT_CONFORMANT_SHARE,
    public_fraction: float = DEFAULT_PUBLIC_FRACTION,
    max_rows_per_shard: int = 50_000,
    overwrite: bool = False,
    audit: bool = False,
    audit_options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Write the Hub layout: public configs from ``src``, blind sets from the hidden sources.

    ``hidden``: the hidden corpus (generated with ``python -m generation --hidden-key KEY --split
    hidden``, from the reserved scenarios with the key's secret seed). Without it, the hidden
    sources are reserved from ``src`` by the key (``hidden_fraction`` of each task's sources, at
    least one): fine for tests, but those dialogues were generated with a public seed, which the
    audit's regeneration attack reports for template corpora.

    ``key``: a key file (``python -m dialfork_dataset keygen``) or :class:`HiddenKey`;
    ``blind_key``: a hex key (>= 32 bytes) instead; neither: a random key. The key file (with the
    hidden seed) is copied into ``gold_dir`` (default ``<dest>-gold``, never inside ``dest``).

    Both folders are staged, ``audit=True`` runs :func:`leaderboard.audit.run_audit` on the staged
    layout (``audit_options`` are passed on; a failing audit raises :class:`AuditFailed` and
    publishes nothing), then both are swapped in together. Returns a summary.
    """
    import datasets

    from .records import record_features

    dest = Path(dest).resolve()
    gold = Path(gold_dir).resolve() if gold_dir is not None else default_gold_dir(dest)
    if gold == dest or dest in gold.parents:
        raise ValueError(f"gold_dir {gold} lies inside the public layout {dest}; put it outside (e.g. {default_gold_dir(dest)})")
    if gold in dest.parents:
        raise ValueError(f"the public layout {dest} lies inside gold_dir {gold}; put them side by side")
    if isinstance(public_fraction, bool) or not 0.0 < public_fraction < 1.0:
        raise ValueError(f"public_fraction must be in (0, 1), got {public_fraction}")
    hk = _resolve_key(key, blind_key, hidden_fraction)
    recover_export(dest, gold)
    for p in (dest, gold):
        if p.exists() and any(p.iterdir()) and not overwrite:
            raise FileExistsError(f"{p} exists and is not empty; pass overwrite=True (--overwrite) to replace it")

    records = load_records(src)
    if not any(r["hallucination_type"] is None for r in records):
        raise ValueError(f"{src}: no conformant records; the layout needs conformant dialogues and their forks")
    if hidden is not None:
        hidden_records = load_records(hidden)
        hseed = _corpus_seed(hidden)
        if hk.hidden_seed_hex is not None and hseed is not None and hseed != hk.hidden_seed:
            raise ValueError(f"{hidden}: this hidden corpus was not generated with the key file's secret seed; "
                             "generate it with `python -m generation --hidden-key KEY --split hidden ...`")
        if hseed is not None and int(hseed).bit_length() < 100:
            raise ValueError(f"{hidden}: the hidden corpus was generated with the public seed {hseed}; anyone can "
                             "regenerate it. Generate it with `--hidden-key KEY --split hidden` (a 128-bit secret seed)")
        public_records = records
        mode = "separate hidden corpus (secret seed)"
    else:
        by_task: dict[str, list[str]] = defaultdict(list)
        for r in records:
            if r["hallucination_type"] is None:
                by_task[r["task"]].append(r["dialogue_id"])
        reserved = set().union(*reserve(by_task, hk.key, hk.hidden_fraction).values())
        hidden_records = [r for r in records if r["source_id"] in reserved]
        public_records = [r for r in records if r["source_id"] not in reserved]
        mode = "reserved from the public corpus (public seed)"
        logger.warning("no hidden corpus given: %d source(s) reserved from %s; their seed is public, so a template "
                       "corpus is regenerable (fine for tests, not for a release)", len(reserved),
                       src if isinstance(src, str | os.PathLike) else "the given records")
    if not any(r["hallucination_type"] is None for r in hidden_records):
        raise ValueError("the hidden split holds no conformant source; give a hidden corpus or more sources per task")
    disjoint = assert_disjoint(public_records, hidden_records)
    tracks = draw_hidden_tracks(hidden_records, hk.key, metric_share=metric_share,
                                conformant_share=conformant_share, public_fraction=public_fraction)
    rows = all_config_rows(public_records, split_seed)
    features = record_features()
    blind, pairs, gold3, gold2 = make_hidden_blind(tracks.detector, tracks.metric, hk.key)

    dest.parent.mkdir(parents=True, exist_ok=True)
    gold.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
    os.chmod(tmp, 0o755)  # the public layout is world-readable; the gold stays 0700
    tmp_gold = Path(tempfile.mkdtemp(prefix=f".{gold.name}.tmp-", dir=gold.parent))
    audit_report = None
    try:
        # the gold first: its revision goes into the public card
        write_jsonl(tmp_gold / "task3_gold.jsonl", gold3)
        write_jsonl(tmp_gold / "task2_gold.jsonl", gold2)
        digest = hashlib.sha256()
        for name in ("task3_gold.jsonl", "task2_gold.jsonl"):
            digest.update((tmp_gold / name).read_bytes())
        revision = digest.hexdigest()
        hidden_info = {
            "mode": mode,
            "records": len(hidden_records),
            "sources": sum(1 for r in hidden_records if r["hallucination_type"] is None),
            "fraction": hk.hidden_fraction,
            "fraction_text": f"{100 * hk.hidden_fraction:.0f}%",
            "metric_share": metric_share,
            "conformant_share": conformant_share,
            "mix": tracks.mix,
            "generators": sorted({r["generator"] for r in hidden_records}),
            "prefix_modes": sorted({r.get("prefix_mode") for r in hidden_records if r.get("prefix_mode")}),
            "disjointness": disjoint,
        }
        template = "template" in hidden_info["generators"]
        hidden_info["note"] = (
            "- This hidden set was made by the template simulator: it is reproducible in principle by anyone who "
            "runs the simulator as an oracle (fine for demos and tests); official hidden sets come from an LLM "
            "backend run.\n" if template else "")
        manifest = {
            "revision": revision,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "public_fraction": public_fraction,
            "split_seed": split_seed,
            "counts": {
                "task3": dict(Counter(g["subset"] for g in gold3)),
                "task2": dict(Counter(g["subset"] for g in gold2)),
            },
            "hidden": {k: v for k, v in hidden_info.items() if k not in ("note", "fraction_text")},
        }
        write_json_atomic(tmp_gold / "gold_manifest.json", manifest)
        write_json_atomic(tmp_gold / "blind_key.json", hk.to_json())
        os.chmod(tmp_gold / "blind_key.json", 0o600)

        counts: dict[str, dict[str, int]] = {}
        feats: dict[str, Any] = {}
        sizes: dict[str, dict[str, Any]] = {}
        datasets.disable_progress_bars()
        outputs = [(cfg, split, rows[cfg][split], features) for cfg in CONFIGS for split in SPLITS]
        outputs += [(BLIND_CONFIG, "test", blind, blind_features()), (BLIND_PAIRS_CONFIG, "test", pairs, blind_pair_features())]
        for cfg, split, data, f in outputs:
            d = tmp / "data" / cfg
            d.mkdir(parents=True, exist_ok=True)
            _, nbytes = _write_parquet(list(data), f, d / split, max_rows_per_shard)
            counts.setdefault(cfg, {})[split] = len(data)
            feats[cfg] = f
            sizes.setdefault(cfg, {"num_bytes": {}, "download_size": 0})["num_bytes"][split] = nbytes
        for cfg in sizes:
            sizes[cfg]["download_size"] = sum(p.stat().st_size for p in (tmp / "data" / cfg).glob("*.parquet"))
        stats = {
            "records": {"conformant": sum(1 for r in public_records if r["hallucination_type"] is None),
                        "forked": sum(1 for r in public_records if r["hallucination_type"] is not None)},
            "tasks": len({r["task"] for r in public_records}),
            "domains": len({r["domain"] for r in public_records}),
            "generators": sorted({r["generator"] for r in public_records}),
            "hidden": hidden_info,
        }
        card = build_card(counts, feats, sizes, stats, DEFAULT_CONFIG, revision,
                          _example_row(rows["forked"]["test"] or rows["task3"]["train"]))
        card.save(str(tmp / "README.md"))
        if audit:
            from leaderboard.audit import run_audit

            audit_report = run_audit(tmp, tmp_gold, **dict(audit_options or {}))
            write_json_atomic(tmp_gold / AUDIT_FILE, audit_report.to_dict())
            if not audit_report.ok:
                raise AuditFailed(audit_report)
        _swap_together([(tmp, dest), (tmp_gold, gold)])
    except BaseException:
        if not _journal(dest).exists():  # before the swap started: nothing published, drop the staging
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.rmtree(tmp_gold, ignore_errors=True)
        raise
    logger.info("exported %d public + %d hidden records to %s (gold in %s)", len(public_records), len(hidden_records),
                dest, gold)
    out = {"dest": str(dest), "gold_dir": str(gold), "counts": counts, "gold_revision": revision,
           "hidden": {k: v for k, v in hidden_info.items() if k not in ("note", "fraction_text")}}
    if audit_report is not None:
        out["audit"] = {"ok": audit_report.ok, "worst": audit_report.worst()}
    return out


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
    """Rows of the blind Task 2 pairs: ``{pair_id, reference_id, candidate_id, reference, candidate}``
    (the two transcripts inline; layouts older than the hidden split have the ids only)."""
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


def local_layout_cache_dir(folder: str | os.PathLike) -> str:
    """The ``datasets`` cache folder for one local Hub-layout folder, keyed by its content.

    ``load_dataset(folder, config)`` caches a config that the card's YAML names under the folder's
    base name and the config name only: two different folders both called ``hub`` (two exports,
    two test runs) share one cache entry, and the second silently reads the first one's rows.
    Keying the cache by the resolved path and every data file's size and modification time
    (``mtime_ns``) gives each export its own entry, reused while the files do not change.
    """
    import datasets.config

    root = Path(folder).resolve()
    h = hashlib.sha256(str(root).encode())
    for f in sorted([root / "README.md", *(root / "data").rglob("*")]):
        if f.is_file():
            st = f.stat()
            h.update(f"\0{f.relative_to(root).as_posix()}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    return str(Path(datasets.config.HF_DATASETS_CACHE) / "dialfork-local" / h.hexdigest()[:24])


def load_layout(folder: str | os.PathLike, config: str, split: str | None = None):
    """``load_dataset(folder, config, split=split)`` for a local Hub-layout folder, with a cache of
    its own (:func:`local_layout_cache_dir`), so that another folder's rows are never read."""
    from datasets import load_dataset

    return load_dataset(str(folder), config, split=split, cache_dir=local_layout_cache_dir(folder))


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
    if p.is_dir():
        return load_layout(p, config, split=split)
    return load_dataset(str(data), config, split=split)
