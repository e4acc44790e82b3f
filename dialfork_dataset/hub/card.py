"""The dataset card of a layout (``huggingface_hub.DatasetCard``): YAML configs and features, counts,
what is public and what is hidden, how it was made."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .. import taxonomy
from ..atomic import write_text_atomic
from ..sources import card_source
from ..taxonomy import FORK_POSITIONS, display_name, forks_per_source
from .layout import CODE_URL, COMPOUND_CONFIG, LEADERBOARD_SPACE, METRIC_SPACES


def card_fields() -> dict[str, str]:
    """The card's Fields table: one line of meaning per record field (SPEC section 4), in the
    order of :data:`~dialfork_dataset.records.RECORD_FIELDS`.

    Returns:
        dict[str, str]: Field name -> its meaning (Markdown).

    Raises:
        ValueError: A record field has no meaning written here (a new field must be documented
            on the card).
    """
    from ..records import RECORD_FIELDS

    k_range = f"{FORK_POSITIONS[0]}..{FORK_POSITIONS[-1]}"
    meaning = {
        "dialogue_id": "unique id; forks are `<source_id>-<TYPE>-k<k>`",
        "source_id": "the conformant parent (its own id for a conformant dialogue)",
        "scenario_id": "the STAR scenario played",
        "task": "the STAR task",
        "domain": "the STAR domain of the task",
        "hallucination_type": f"null (conformant) or {' / '.join(taxonomy.names())}",
        "variant": "the id of the hallucination variant injected (null for a conformant dialogue)",
        "instruction": "the exact instruction injected into the system agent before t_k (null for a conformant "
        "dialogue)",
        "substitute_task": "WIC only: the task whose workflow is followed instead",
        "fork_position": f"k in {k_range}",
        "fork_turn": "t_k = 1 + round((k-1) T / 4), a system-turn index (1-based)",
        "num_system_turns": "T, the number of system turns",
        "turns": 'list of `{speaker: "user"|"system", text}`',
        "seed": "the generation seed",
        "generator": "the backend and model that generated the dialogue",
        "decoding": "`{temperature, top_p, top_k, max_new_tokens}` of the generation (null values for the "
        "template backend)",
        "prefix_mode": "how a fork's turns before t_k were made: `replay` (regenerated with the same seed), "
        "`reuse` (copied from D+) or `reword` (each realised in another surface form at a "
        "calibrated rate)",
        "prefix_divergence": "how many turns before t_k differ from D+",
        "code_version": "the generator's code version (with the seed and decoding: what regenerates the dialogue)",
        "injections": "compound forks only (`compound` config): every injection `{type, variant, turn}`, turns "
        "increasing; null otherwise",
        "conformance": "the check of the source D+ against its workflow, on D+ and each of its forks "
        "(`python -m generation --check-conformance`; null: unchecked): `{check, conformant, "
        "coverage, skipped, off_workflow, unfamiliar, reached_outcome}`; a D+ with `conformant` "
        "false did not follow its workflow, so its forks are no controlled deviations",
    }
    missing = [f for f in RECORD_FIELDS if f not in meaning]
    if missing:  # a new record field must be documented on the card
        raise ValueError(f"card_fields: no meaning written for record field(s) {missing}")
    return {f: meaning[f] for f in RECORD_FIELDS}


def conformance_md(summary: Mapping[str, Any] | None) -> str:
    """The card's paragraph on the check of the generated conformant dialogues (issue 39).

    Args:
        summary: :func:`dialfork_dataset.hub.conformance_summary`'s dict, or None.

    Returns:
        str: One Markdown paragraph.

    Example:
        >>> conformance_md({"conformant": 4, "checked": 4, "flagged": 1, "flagged_forks": 16, "dropped": 0,
        ...                 "checks": ["workflow-nodes"]}).split(":")[0]
        'Conformance check of D+ (`workflow-nodes`)'
    """
    s = summary or {}
    if not s.get("checked"):
        return (
            "Conformance check of D+: none (generated without `--check-conformance`; the template backend's D+ "
            "follow their workflow by construction, an LLM's need not)."
        )
    dropped = s.get("dropped", 0)
    checks = ", ".join(f"`{c}`" for c in s.get("checks", [])) or "?"
    tail = (
        f" They were dropped with their forks (`--require-conformant`): {dropped:,} D+ removed."
        if dropped
        else " They are kept and marked (`conformance.conformant` false on them and their forks); "
        "`--require-conformant` drops them."
    )
    return (
        f"Conformance check of D+ ({checks}): {s['checked']:,} of {s['conformant']:,} public and hidden "
        f"conformant dialogues checked; {s['flagged']:,} did not follow their workflow (a turn of another "
        f"workflow, or too few of its steps), with {s['flagged_forks']:,} forks.{tail}"
    )


def size_category(config_counts: Mapping[str, Mapping[str, int]]) -> str:
    """The card's ``size_categories`` value: the Hub's bucket (``n<1K``, ``1K<n<10K``, ...) of the
    number of rows of the largest config (all its splits), not of rows summed over configs, which
    count each dialogue once per config it is in (``forked`` and ``task3`` share their forks).

    Args:
        config_counts: Config name -> {split name -> number of rows}.

    Returns:
        str: The bucket.
    """
    return _size_category(max((sum(c.values()) for c in config_counts.values()), default=0))


def _size_category(n: int) -> str:
    for lim, cat in (
        (1_000, "n<1K"),
        (10_000, "1K<n<10K"),
        (100_000, "10K<n<100K"),
        (1_000_000, "100K<n<1M"),
    ):
        if n < lim:
            return cat
    return "1M<n<10M"


def features_yaml(features: Any) -> list[dict[str, Any]]:
    """The dataset card's YAML list of a ``datasets.Features`` (``dtype`` / ``struct`` / ``list``).

    Args:
        features: A ``datasets.Features`` (or any mapping of field name to feature) built from
            ``Value``, plain dicts (structs) and ``List``.

    Returns:
        list[dict[str, Any]]: One ``{"name": field, ...}`` entry per field, with ``dtype`` for a
        ``Value``, ``struct`` (a list of such entries) for a dict, and ``list`` for a ``List`` (the
        item's dtype, or its struct entries).

    Raises:
        TypeError: A feature is of another type (e.g. ``ClassLabel``, ``Sequence``).
    """
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
            return {
                "list": inner["dtype"]
                if set(inner) == {"dtype"}
                else inner["struct"]
                if set(inner) == {"struct"}
                else inner
            }
        raise TypeError(f"features_yaml: unsupported feature type {type(f).__name__}")

    return [{"name": k, **one(v)} for k, v in features.items()]


def example_row(rows: Sequence[Mapping[str, Any]], max_turns: int = 4) -> str:
    """One public fork row as JSON, its turns cut to ``max_turns`` (for the card).

    Args:
        rows: Public rows; the first fork is shown (the first row when none is a fork).
        max_turns: How many turns to show; a last entry says how many more there are.

    Returns:
        str: Indented JSON of the row's card fields; ``"{}"`` when ``rows`` is empty.
    """
    from ..records import RECORD_FIELDS

    r = next((x for x in rows if x.get("hallucination_type") is not None), rows[0] if rows else None)
    if r is None:
        return "{}"
    ex = {k: r.get(k) for k in RECORD_FIELDS}  # every field of the record, in the Fields table's order
    ex["turns"] = [dict(t) for t in r["turns"][:max_turns]] + (
        [{"...": f"{len(r['turns']) - max_turns} more turns"}] if len(r["turns"]) > max_turns else []
    )
    if isinstance(ex.get("decoding"), Mapping):
        ex["decoding"] = dict(ex["decoding"])
    return json.dumps(ex, indent=2, ensure_ascii=False, default=str)


def build_card(
    config_counts: Mapping[str, Mapping[str, int]],
    features_by_config: Mapping[str, Any],
    sizes: Mapping[str, Mapping[str, Any]],
    stats: Mapping[str, Any],
    default_config: str,
    gold_revision: str,
    example: str,
) -> Any:
    """The dataset card (``huggingface_hub.DatasetCard``) of a layout.

    ``sizes[cfg]``: ``{"num_bytes": {split: arrow bytes}, "download_size": parquet bytes}``;
    ``stats``: record counts, tasks, domains, generators, the hidden split's mix and settings.

    Args:
        config_counts: Config name -> {split name -> number of rows}; one YAML config (and one row
            of the card's counts table) per entry.
        features_by_config: Config name -> its ``datasets.Features`` (written via
            :func:`features_yaml`).
        sizes: Config name -> ``{"num_bytes": {split: arrow bytes}, "download_size": parquet
            bytes}``.
        stats: ``{"records": {"conformant": n, "forked": n, ...}, "tasks": n, "domains": n,
            "generators": [...], "hidden": {...}, "source": {...}}``; ``source`` (optional; default
            STAR's) is :func:`dialfork_dataset.sources.card_source` of the corpus's source; ``hidden`` holds ``records``, ``mix``
            (``dialogues``, ``conformant``, ``conformant_share``, ``forked``, ``types``,
            ``fork_positions``, ``metric_units``), ``fraction_text``, ``prefix_modes`` and ``note``
            (the summary that :func:`export_hub_layout` builds).
        default_config: The config marked ``default: true`` in the YAML.
        gold_revision: The gold revision (sha256 hex of the gold files) recorded in the card's YAML
            and text; the scorer refuses gold of another revision.
        example: The example row's JSON text shown in the card (see :func:`example_row`).

    Returns:
        huggingface_hub.DatasetCard: The card (YAML header and Markdown body); ``card.save(path)``
        writes it as ``README.md``.
    """
    from huggingface_hub import DatasetCard, DatasetCardData

    from ..citation import CITATION

    configs_yaml = []
    infos_yaml = []
    for cfg, counts in config_counts.items():
        entry: dict[str, Any] = {
            "config_name": cfg,
            "data_files": [{"split": s, "path": f"data/{cfg}/{s}-*.parquet"} for s in counts],
        }
        if cfg == default_config:
            entry["default"] = True
        configs_yaml.append(entry)
        nb = sizes[cfg]["num_bytes"]
        infos_yaml.append(
            {
                "config_name": cfg,
                "features": features_yaml(features_by_config[cfg]),
                "splits": [
                    {"name": s, "num_bytes": int(nb[s]), "num_examples": int(n)} for s, n in counts.items()
                ],
                "download_size": int(sizes[cfg]["download_size"]),
                "dataset_size": int(sum(nb.values())),
            }
        )
    source = stats.get("source") or card_source()  # the source kind's declaration (default: STAR)
    types_md = ", ".join(f"{t} {display_name(t)}" for t in taxonomy.names())
    k_range = f"{FORK_POSITIONS[0]}..{FORK_POSITIONS[-1]}"
    n_compound = stats["records"].get(COMPOUND_CONFIG, 0)
    compound_md = (
        f"\n\nThe `{COMPOUND_CONFIG}` config holds {n_compound:,} compound forks (several injections each, "
        "`injections: [{type, variant, turn}]` with increasing turns; the single-injection fields are the "
        "first injection's, so Task 3 scores the earliest one) and their conformant sources, split like "
        "the public sources."
        if n_compound
        else ""
    )
    compound_load = (
        f'\ncompound = load_dataset("idiap/dialfork", "{COMPOUND_CONFIG}")    '
        "# forks with several injections, and their sources"
        if n_compound
        else ""
    )
    data = DatasetCardData(
        pretty_name="DialFork",
        license="cc-by-4.0",
        language=["en"],
        annotations_creators=["machine-generated"],
        language_creators=["machine-generated"],
        multilinguality=["monolingual"],
        source_datasets=[source["source_dataset"]] if source["source_dataset"] else None,
        task_categories=["text-classification", "sentence-similarity", "text-generation"],
        size_categories=[size_category(config_counts)],
        tags=[
            "synthetic",
            "dialogue",
            "hallucination",
            "procedural-hallucination",
            "task-oriented-dialogue",
            "workflow",
            *([source["title"]] if source["source_dataset"] else []),
            "leaderboard",
        ],
        configs=configs_yaml,
        dataset_info=infos_yaml,
        gold_revision=gold_revision,
    )
    counts_md = "\n".join(
        f"| `{c}` | "
        + " | ".join(
            f"{config_counts[c].get(s, 0):,}" if s in config_counts[c] else "-" for s in ("train", "test")
        )
        + " |"
        for c in config_counts
    )
    h = stats["hidden"]
    mix = h["mix"]
    types = ", ".join(f"{t} {n}" for t, n in mix["types"].items()) or "none"
    ks = ", ".join(f"{k} {n}" for k, n in mix["fork_positions"].items()) or "none"
    spaces = ", ".join(f"[`{m}`](https://huggingface.co/spaces/idiap/{m})" for m in METRIC_SPACES)
    fields_md = "\n".join(f"| `{f}` | {m.replace('|', '&#124;')} |" for f, m in card_fields().items())
    body = f"""
# DialFork

DialFork measures **procedural hallucination** in conversational agents: dialogues whose every
sentence is fluent and plausible but that skip steps, change goal, repeat work or chase a
competing goal instead of following their workflow. Conformant dialogues D+ are generated by
two agents role-playing {source["title"]} scenarios; each is then re-run with the same seed and one of {len(taxonomy.names())}
hallucination types ({types_md}) injected just before system turn t_k, k = {k_range}. Earlier forks deviate more,
which gives a ground-truth ordering without any judge.

This copy: {stats["records"].get("conformant", 0):,} public conformant dialogues and
{stats["records"].get("forked", 0):,} public forks over {stats["tasks"]} tasks ({stats["domains"]} domains),
plus the hidden leaderboard sets below; generator(s): {", ".join(f"`{g}`" for g in stats["generators"])}.

{conformance_md(stats.get("conformance"))}

Links: code and documentation [{CODE_URL}]({CODE_URL}); leaderboard Space
[{LEADERBOARD_SPACE}]({LEADERBOARD_SPACE}); metric Spaces {spaces}.

## How to load

```python
from datasets import load_dataset
forks = load_dataset("idiap/dialfork", "forked", split="test")
task3 = load_dataset("idiap/dialfork", "task3")          # train (conformant) / test
blind = load_dataset("idiap/dialfork", "blind", split="test")        # detector track input, no labels
pairs = load_dataset("idiap/dialfork", "blind_task2", split="test")  # metric track input, no labels{compound_load}
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
{fields_md}

## Configs and splits

| config | train | test |
| --- | --- | --- |
{counts_md}

Per task, the public conformant dialogues are split in halves (train = floor(n/2), chosen by a
seeded hash of the id); `forked` follows its sources; `task3` test = conformant test + all {forks_per_source()}
forks of each test source (train is conformant only, for calibration).{compound_md}

## What is public and what is hidden

Everything in `conformant`, `forked` and `task3` is public, with labels, for research and for
training. The leaderboard is scored on **hidden** sources that appear nowhere else:

- Per task, a keyed selection ({h["fraction_text"]} of the task's {source["title"]} scenarios) is reserved for the
  hidden split. No dialogue of a reserved scenario is in a public config; the export checks this
  by scenario id and by a hash of every turn sequence.
- The hidden dialogues were generated with a secret seed (at least 128 bits) that no public
  file holds; regenerating with the public code and public seeds does not reproduce them.
- `blind` (detector track, Task 3) holds **one dialogue per hidden source**, so no blind
  dialogue has a sibling to be compared with. This release: {mix["dialogues"]:,} dialogues, of which
  {mix["conformant"]:,} conformant ({100 * (mix["conformant_share"] or 0):.0f}%) and {mix["forked"]:,} forks (types: {types};
  positions: {ks}), drawn by a secret draw that balances types, positions and the
  conformant share. The Score needs both kinds: it rewards flagging forks at the right turn and
  leaving conformant dialogues unflagged.
- `blind_task2` (metric track, Task 2) pairs a reference (conformant) dialogue with each of its
  forks, inline, for {h["mix"].get("metric_units", 0):,} (source, type) units of other hidden sources (no source feeds
  both tracks). Fork prefix mode(s) of the hidden set: {", ".join(f"`{m}`" for m in h["prefix_modes"]) or "n/a"}.
- Ids are opaque keyed hashes, rows are in a random order, and labels stay with the scorer. The
  gold revision this card belongs to is `{gold_revision}`; the scorer refuses any other.
- Each release is audited (`python -m leaderboard audit`): verbatim lookup in every public
  config, sibling grouping, regeneration with public seeds, pair diffing, correlations of ids,
  row order and lengths with the labels, and simulator-aware attacks built from the public code
  (fingerprints of the template simulator's pools, a node grammar of public-seed regenerations, a
  length rule, the node-level shared prefix); a release where a cheat beats its matched Random by
  more than 5 Score points, or reaches a metric-track tau above 0.8, is not published. A
  supervised classifier fitted on the public configs is reported as the public-data ceiling.
{h["note"]}
## How it was made

Scenarios, workflows and role-play instructions come from {source["credit"]}. Every
dialogue is newly generated{"; " + source["note"] if source["note"] else ""}. See the paper and
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
    """The ``gold_revision`` recorded in a layout's card; None when the layout has no card.

    Args:
        dest: The layout folder (its card is ``dest/README.md``).

    Returns:
        str | None: The recorded gold revision; ``""`` when the card records none; None when
        ``dest/README.md`` does not exist.
    """
    card = Path(dest) / "README.md"
    if not card.is_file():
        return None
    from huggingface_hub import DatasetCard

    data = DatasetCard.load(card).data.to_dict()
    rev = data.get("gold_revision")
    return str(rev) if rev else ""


#: The heading of the card's audit section (:func:`add_audit_section`).
AUDIT_HEADING = "## Leaderboard audit"


def _fmt_value(v: Any, track: str) -> str:
    if not isinstance(v, int | float) or isinstance(v, bool) or v != v:
        return "-"
    return f"{v:.2f}" if track == "detector" else f"{v:.3f}"


def audit_markdown(report: Mapping[str, Any]) -> str:
    """The card's audit section: the verdict in plain words and every attack's figure.

    Args:
        report: The audit report as JSON (``leaderboard.leakcheck.AuditReport.to_dict()``): its
            ``verdict``, ``attacks``, ``honest``, ``thresholds`` and ``baselines``.

    Returns:
        Markdown starting with :data:`AUDIT_HEADING`: the verdict, a table (attack, track, Score or
        tau, matched Random, verdict) and the public-data ceiling next to the best honest detector
        when the report has them.
    """
    th = report.get("thresholds") or {}
    rows = []
    for a in [*(report.get("attacks") or []), *(report.get("honest") or [])]:
        status = a.get("status", "")
        verdict = (
            "FAIL (waived: plumbing only)"
            if a.get("waived")
            else "reported, not a verdict"
            if status == "reported"
            else status
        )
        rows.append(
            f"| {a.get('name', '')} | {a.get('track', '')} | {_fmt_value(a.get('value'), a.get('track', ''))} "
            f"| {_fmt_value(a.get('matched_random'), 'detector')} | {verdict} |"
        )
    ceiling = next(
        (
            a
            for a in report.get("attacks") or []
            if a.get("track") == "detector"
            and a.get("status") == "reported"
            and isinstance(a.get("value"), int | float)
        ),
        None,
    )
    honest = [h for h in report.get("honest") or [] if isinstance(h.get("value"), int | float)]
    best = max(honest, key=lambda h: h["value"]) if honest else None
    lines = [
        AUDIT_HEADING,
        "",
        f"**Verdict:** {report.get('verdict') or ('PASS' if report.get('ok') else 'FAIL')}",
        "",
        "A cheater holds every public file and the public code; each attack below is built from that alone "
        "and scored on the blind set (detector track: Score, next to the same predictions dealt to random "
        f"blind dialogues, the *matched Random*; metric track: Kendall tau). An attack fails beyond matched "
        f"Random + {th.get('detector_margin', 5):g} Score points (p < {th.get('alpha', 0.01):g}) or above tau "
        f"{th.get('metric_tau_max', 0.8):g}.",
        "",
        "| attack | track | Score / tau | matched Random | verdict |",
        "| --- | --- | --- | --- | --- |",
        *rows,
    ]
    if ceiling is not None:
        lines += [
            "",
            f"Public-data ceiling (a supervised classifier fitted on the public labelled configs; learning "
            f"from them is allowed, so it is reported, not a verdict): Score {ceiling['value']:.2f}"
            + (
                f", next to the best honest detector given to the audit "
                f"({str(best['name']).removeprefix('honest detector: ')}): Score {best['value']:.2f}."
                if best is not None
                else "."
            ),
        ]
    return "\n".join(lines) + "\n"


def add_audit_section(card_path: str | os.PathLike, report: Mapping[str, Any]) -> None:
    """Write (or replace) the audit section of a card, before its "How it was made" section.

    Args:
        card_path: The card file (a layout's ``README.md``).
        report: The audit report as JSON (see :func:`audit_markdown`).

    Raises:
        FileNotFoundError: ``card_path`` does not exist.
    """
    path = Path(card_path)
    text = path.read_text(encoding="utf-8")
    start = text.find("\n" + AUDIT_HEADING + "\n")
    if start >= 0:  # replace the previous section, up to the next heading of the same level
        end = text.find("\n## ", start + len(AUDIT_HEADING) + 2)
        text = text[: start + 1] + (text[end + 1 :] if end >= 0 else "")
    section = audit_markdown(report) + "\n"
    anchor = text.find("\n## How it was made")
    text = (
        text[: anchor + 1] + section + text[anchor + 1 :]
        if anchor >= 0
        else text.rstrip("\n") + "\n\n" + section
    )
    write_text_atomic(path, text)
