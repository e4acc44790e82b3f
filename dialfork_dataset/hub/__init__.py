"""The published layout of DialFork (what ``load_dataset("idiap/dialfork", ...)`` reads).

:func:`export_hub_layout` turns generator output into::

    dest/README.md                               dataset card (huggingface_hub DatasetCard)
    dest/data/<config>/<split>-XXXXX-of-YYYYY.parquet   conformant, forked, task3 (train/test)
    dest/data/compound/<split>-*.parquet         compound forks and their sources (only with compound=)
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
audited by the caller's audit (``leaderboard.leakcheck`` for a release: ``python -m leaderboard export``
runs it), then swapped in under a journal; an interrupted swap is
completed, and leftover staging folders are removed, by the next export to the same targets.

Compound forks (SPEC section 3, ours) are a config of their own: ``export_hub_layout(src, dest,
compound=DIR)`` with ``DIR`` the output of ``python -m generation --compound PLAN`` writes
``data/compound/{train,test}`` (each compound fork with its conformant source, split like the
public sources; see :func:`dialfork_dataset.builder.compound_config_rows`), read with
``load_dataset(dest, "compound")``. No compound row comes from a hidden scenario.

Modules: :mod:`.layout` (names, defaults), :mod:`.blind` (blind sets and gold, pure),
:mod:`.card` (the dataset card), :mod:`.swap` (the journaled swap), :mod:`.files` (parquet,
loading, upload), :mod:`.resolve` (what a ``--data`` argument names: the one check every command
line makes before loading). Everything is importable from here.
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
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..atomic import write_json_atomic
from ..builder import (
    CONFIGS,
    DEFAULT_CONFIG,
    DEFAULT_SPLIT_SEED,
    SPLITS,
    all_config_rows,
    compound_config_rows,
    load_records,
    split_sources,
)
from ..hidden import (
    DEFAULT_CONFORMANT_SHARE,
    DEFAULT_HIDDEN_FRACTION,
    DEFAULT_METRIC_SHARE,
    DEFAULT_PUBLIC_FRACTION,
    HiddenKey,
    assert_disjoint,
    corpus_types,
    draw_hidden_tracks,
    parse_key,
    read_key_file,
    reserve,
    turns_hash,
)
from ..jsonl import write_jsonl
from ..sources import card_source
from .blind import blind_features, blind_pair_features, make_blind, make_hidden_blind
from .card import add_audit_section, build_card, features_yaml, read_card_gold_revision
from .card import example_row as _example_row
from .files import (
    load_blind,
    load_blind_pairs,
    load_gold,
    load_layout,
    load_split,
    local_layout_cache_dir,
    push_to_hub,
    read_parquet_rows,
    write_parquet,
)
from .layout import (
    AUDIT_FILE,
    BLIND_CONFIG,
    BLIND_PAIRS_CONFIG,
    CODE_URL,
    COMPOUND_CONFIG,
    GOLD_FILES,
    LAYOUT_CONFIGS,
    LEADERBOARD_SPACE,
    METRIC_SPACES,
    AuditFailed,
    default_gold_dir,
)
from .resolve import DataNotFoundError, DataSource, DataSourceError, classify_folder, resolve_data
from .swap import journal as _journal
from .swap import recover_export
from .swap import swap_together as _swap_together

logger = logging.getLogger(__name__)


def _resolve_key(
    key: HiddenKey | str | os.PathLike | None, blind_key: bytes | str | None, hidden_fraction: float | None
) -> HiddenKey:
    if key is not None and blind_key is not None:
        raise ValueError("give key (a key file or HiddenKey) or blind_key (hex), not both")
    if isinstance(key, HiddenKey):
        hk = key
    elif key is not None:
        hk = read_key_file(key)
    elif blind_key is not None:
        return HiddenKey(
            parse_key(blind_key),
            None,
            hidden_fraction if hidden_fraction is not None else DEFAULT_HIDDEN_FRACTION,
        )
    else:  # a random key; no hidden seed (the hidden records were not generated with one from this key)
        hk = HiddenKey(HiddenKey.generate().key, None, DEFAULT_HIDDEN_FRACTION)
    if hidden_fraction is not None and hidden_fraction != hk.hidden_fraction:
        hk = HiddenKey(hk.key, hk.hidden_seed_hex, hidden_fraction)
    return hk


def _corpus_seed(src: Any, field: str = "seed") -> Any:
    """The base seed (or another ``config`` ``field``, e.g. the source spec ``"star"``) in a
    generator output folder's manifest.json (None when there is none)."""
    if not isinstance(src, str | os.PathLike):
        return None
    m = Path(src) / "manifest.json"
    if not m.is_file():
        return None
    try:
        return json.loads(m.read_text(encoding="utf-8"))["config"][field]
    except (KeyError, TypeError, json.JSONDecodeError):
        return None


def _compound_rows(
    compound: str | os.PathLike | Sequence[Mapping[str, Any]],
    public: Sequence[Mapping[str, Any]],
    hidden: Sequence[Mapping[str, Any]],
    split_seed: int,
) -> dict[str, list[dict[str, Any]]]:
    """The ``compound`` config's rows (split -> rows) from a compound corpus.

    Every fork of the corpus must be a compound fork (``injections`` set): a corpus of single forks
    belongs in ``src``. Families (a source and its compound forks) of a hidden scenario, or whose
    turns repeat a hidden dialogue, are left out, so the hidden split stays disjoint from every
    public config. A source keeps the train/test side it has in the public configs
    (:func:`~dialfork_dataset.builder.compound_config_rows`).
    """
    records = load_records(compound)
    where = compound if isinstance(compound, str | os.PathLike) else "the compound records"
    single = [
        r["dialogue_id"] for r in records if r["hallucination_type"] is not None and not r.get("injections")
    ]
    if single:
        raise ValueError(
            f"{where}: {len(single)} single fork(s) (e.g. {single[:3]}) in the compound corpus; give the "
            "output of `python -m generation --compound PLAN` (single forks belong in src)"
        )
    if not any(r.get("injections") for r in records):
        raise ValueError(
            f"{where}: no compound fork; generate them with `python -m generation --compound PLAN`"
        )
    hidden_scenarios = {str(r["scenario_id"]) for r in hidden}
    hidden_turns = {turns_hash(r["turns"]) for r in hidden}
    leaking = {
        r["source_id"]
        for r in records
        if str(r["scenario_id"]) in hidden_scenarios or turns_hash(r["turns"]) in hidden_turns
    }
    kept = [r for r in records if r["source_id"] not in leaking]
    if leaking:
        logger.info("compound config: %d famil(ies) of hidden scenarios left out", len(leaking))
    out = compound_config_rows(kept, split_seed, assignment=split_sources(public, split_seed))
    if not any(out.values()):
        raise ValueError(
            f"{where}: every compound fork belongs to a hidden scenario; nothing left to publish"
        )
    return out


def conformance_summary(records: Sequence[Mapping[str, Any]], dropped: int = 0) -> dict[str, Any]:
    """What the generation engine's check (``conformance``, :mod:`generation.conformance`) says of a
    corpus's conformant dialogues.

    Args:
        records: Records (D+ and forks).
        dropped: How many flagged D+ were already dropped (for the card).

    Returns:
        dict: ``conformant`` (D+ count), ``checked`` (D+ carrying a check), ``flagged`` (checked D+
        found not conformant), ``flagged_forks`` (records of those sources that are forks),
        ``flagged_ids`` (sorted), ``checks`` (the checks' names) and ``dropped``.
    """
    heads = [r for r in records if r["hallucination_type"] is None]
    checked = [r for r in heads if r.get("conformance")]
    flagged = {r["dialogue_id"] for r in checked if not r["conformance"]["conformant"]}
    return {
        "conformant": len(heads),
        "checked": len(checked),
        "flagged": len(flagged),
        "flagged_forks": sum(
            1 for r in records if r["hallucination_type"] is not None and r["source_id"] in flagged
        ),
        "flagged_ids": sorted(flagged),
        "checks": sorted({r["conformance"]["check"] for r in checked}),
        "dropped": dropped,
    }


def drop_nonconformant(
    records: Sequence[Mapping[str, Any]], what: str = "the corpus"
) -> tuple[list[Mapping[str, Any]], int]:
    """The records without the sources the conformance check flagged (their D+ and forks).

    Args:
        records: Records (D+ and forks), every D+ checked.
        what: The corpus's name, for the error.

    Returns:
        tuple: The kept records and how many D+ were dropped.

    Raises:
        ValueError: A conformant dialogue carries no check (the error says how to get one).
    """
    unchecked = [
        r["dialogue_id"] for r in records if r["hallucination_type"] is None and not r.get("conformance")
    ]
    if unchecked:
        raise ValueError(
            f"--require-conformant: {len(unchecked)} conformant dialogue(s) of {what} carry no conformance check "
            f"(e.g. {', '.join(unchecked[:3])}); generate with `python -m generation ... --check-conformance` "
            "(the default for LLM backends) or export without --require-conformant"
        )
    bad = {
        r["dialogue_id"]
        for r in records
        if r["hallucination_type"] is None and not r["conformance"]["conformant"]
    }
    return [r for r in records if r["source_id"] not in bad], len(bad)


def export_hub_layout(
    src: str | os.PathLike | Sequence[Mapping[str, Any]],
    dest: str | os.PathLike,
    gold_dir: str | os.PathLike | None = None,
    *,
    hidden: str | os.PathLike | Sequence[Mapping[str, Any]] | None = None,
    compound: str | os.PathLike | Sequence[Mapping[str, Any]] | None = None,
    key: HiddenKey | str | os.PathLike | None = None,
    split_seed: int = DEFAULT_SPLIT_SEED,
    blind_key: bytes | str | None = None,
    hidden_fraction: float | None = None,
    metric_share: float = DEFAULT_METRIC_SHARE,
    conformant_share: float = DEFAULT_CONFORMANT_SHARE,
    public_fraction: float = DEFAULT_PUBLIC_FRACTION,
    blind_types: Sequence[str] | None = None,
    max_rows_per_shard: int = 50_000,
    overwrite: bool = False,
    audit: Callable[[Path, Path], Any] | None = None,
    require_conformant: bool = False,
) -> dict[str, Any]:
    """Write the Hub layout: public configs from ``src``, blind sets from the hidden sources.

    ``hidden``: the hidden corpus (generated with ``python -m generation --hidden-key KEY --split
    hidden``, from the reserved scenarios with the key's secret seed). Without it, the hidden
    sources are reserved from ``src`` by the key (``hidden_fraction`` of each task's sources, at
    least one): fine for tests, but those dialogues were generated with a public seed, which the
    audit's regeneration attack reports for template corpora.

    ``compound``: a compound corpus (``python -m generation --compound PLAN``: conformant sources and
    their compound forks); it becomes the ``compound`` config (:func:`_compound_rows`). Without it
    the layout has no ``compound`` config.

    ``key``: a key file (``python -m dialfork_dataset keygen``) or :class:`HiddenKey`;
    ``blind_key``: a hex key (>= 32 bytes) instead; neither: a random key. The key file (with the
    hidden seed) is copied into ``gold_dir`` (default ``<dest>-gold``, never inside ``dest``).

    Both folders are staged, ``audit`` is called on the staged layout and gold (a release passes
    :func:`leaderboard.leakcheck.run_audit`, as ``python -m leaderboard export`` does; this package does
    not import the leaderboard); its report is written to the gold as :data:`AUDIT_FILE`, and a
    failing one raises :class:`AuditFailed` and publishes nothing. Then both folders are swapped
    in together. Returns a summary.

    Args:
        src: The public corpus: a generator output folder, one ``.jsonl`` record file, or a list
            of records; it must hold conformant dialogues (and their forks).
        dest: The public layout folder to write (created; replaced only with ``overwrite``).
        gold_dir: The gold folder (labels, manifest, key); None is ``<dest>-gold``. It must not
            lie inside ``dest`` nor hold it.
        hidden: The hidden corpus (folder, file or records); None reserves hidden sources from
            ``src`` by the key (see above).
        compound: A compound corpus for the ``compound`` config; None writes no such config.
        key: A key file path or :class:`~dialfork_dataset.hidden.HiddenKey`; exclusive with
            ``blind_key``.
        split_seed: The seed of the public train/test split (default 0).
        blind_key: A hex string (or bytes) of at least 32 bytes used as the key, without a hidden
            seed; exclusive with ``key``.
        hidden_fraction: The share of each task's sources reserved for the hidden split, in
            (0, 1); None keeps the key file's (or 0.2 for ``blind_key`` or a random key).
        metric_share: The share, in (0, 1), of hidden sources per task that go to the metric track
            (the rest feed the detector track); default 0.5.
        conformant_share: The share, in (0, 1), of detector sources that give their conformant
            dialogue (the others give one fork); default 0.2.
        public_fraction: The share, in (0, 1), of each track in the gold's ``public`` subset (the
            rest is ``private``); default 0.5.
        blind_types: The hallucination types the detector blind set's forks are shared between
            (:func:`~dialfork_dataset.hidden.draw_hidden_tracks`'s ``types``): pin the types of an
            earlier release to keep its blind set exactly when the hidden corpus gains a type;
            None (default): the types the hidden corpus carries.
        max_rows_per_shard: The most rows per parquet shard.
        overwrite: Replace a non-empty ``dest`` / ``gold_dir``; False refuses them.
        audit: ``audit(staged_layout, staged_gold) -> report``, run before publishing (None: no
            audit). The report has ``ok`` (False: a cheat works), ``worst()``, ``to_dict()`` (what
            :data:`AUDIT_FILE` holds) and ``format_text()``, as
            :class:`leaderboard.leakcheck.AuditReport`; ``functools.partial(run_audit, star=...)``
            passes options.
        require_conformant: Drop the sources (D+ and forks) whose D+ the generation engine's
            conformance check flagged (``conformance.conformant`` false); every D+ must carry a
            check. False (default) keeps them, marked, and counts them in the card.

    Returns:
        dict[str, Any]: ``{"dest", "gold_dir"}`` (absolute paths as strings), ``"counts"``
        (config -> {split -> rows}), ``"gold_revision"`` (sha256 hex of the two gold files),
        ``"hidden"`` (mode, records, sources, fraction, shares, the tracks' ``mix``, generators,
        prefix modes, ``disjointness`` counts), ``"conformance"`` (:func:`conformance_summary` of the
        public and hidden records, without ids) and, with ``audit``, ``"audit": {"ok", "worst"}``.

    Raises:
        ValueError: ``gold_dir`` and ``dest`` nest; ``public_fraction``, ``metric_share`` or
            ``conformant_share`` is outside (0, 1); both ``key`` and ``blind_key`` are given;
            ``src`` (or the hidden split) holds no conformant dialogue; the hidden corpus was not
            made with the key's secret seed or was made with a public seed; the compound corpus
            holds single forks, no compound fork, or only hidden scenarios.
        HiddenKeyError: A bad ``blind_key`` or key file, or ``hidden_fraction`` outside (0, 1) (a
            ``ValueError``).
        FileNotFoundError: The key file or a corpus folder does not exist.
        FileExistsError: ``dest`` or ``gold_dir`` is not empty and ``overwrite`` is False.
        RecordError: A corpus holds invalid records (every problem listed).
        LeakError: A hidden dialogue's scenario or turns occur in a public config.
        TypeError: ``audit`` is neither None nor callable.
        AuditFailed: With ``audit``, the audit found a working cheat; nothing was published.
    """
    import datasets

    from ..records import record_features

    if audit is not None and not callable(audit):
        raise TypeError(
            f"audit must be a callable (staged_layout, staged_gold) -> report, e.g. "
            f"leaderboard.leakcheck.run_audit, or None; got {audit!r}"
        )
    dest = Path(dest).resolve()
    gold = Path(gold_dir).resolve() if gold_dir is not None else default_gold_dir(dest)
    if gold == dest or dest in gold.parents:
        raise ValueError(
            f"gold_dir {gold} lies inside the public layout {dest}; put it outside (e.g. {default_gold_dir(dest)})"
        )
    if gold in dest.parents:
        raise ValueError(f"the public layout {dest} lies inside gold_dir {gold}; put them side by side")
    if isinstance(public_fraction, bool) or not 0.0 < public_fraction < 1.0:
        raise ValueError(f"public_fraction must be in (0, 1), got {public_fraction}")
    hk = _resolve_key(key, blind_key, hidden_fraction)
    recover_export(dest, gold)
    for p in (dest, gold):
        if p.exists() and any(p.iterdir()) and not overwrite:
            raise FileExistsError(
                f"{p} exists and is not empty; pass overwrite=True (--overwrite) to replace it"
            )

    records = load_records(src)
    n_dropped = 0
    if require_conformant:
        records, n_dropped = drop_nonconformant(
            records, str(src) if isinstance(src, str | os.PathLike) else "src"
        )
    if not any(r["hallucination_type"] is None for r in records):
        raise ValueError(
            f"{src}: no conformant records; the layout needs conformant dialogues and their forks"
        )
    if hidden is not None:
        hidden_records = load_records(hidden)
        if require_conformant:
            hidden_records, d = drop_nonconformant(hidden_records, "the hidden corpus")
            n_dropped += d
        hseed = _corpus_seed(hidden)
        if hk.hidden_seed_hex is not None and hseed is not None and hseed != hk.hidden_seed:
            raise ValueError(
                f"{hidden}: this hidden corpus was not generated with the key file's secret seed; "
                "generate it with `python -m generation --hidden-key KEY --split hidden ...`"
            )
        if hseed is not None and int(hseed).bit_length() < 100:
            raise ValueError(
                f"{hidden}: the hidden corpus was generated with the public seed {hseed}; anyone can "
                "regenerate it. Generate it with `--hidden-key KEY --split hidden` (a 128-bit secret seed)"
            )
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
        logger.warning(
            "no hidden corpus given: %d source(s) reserved from %s; their seed is public, so a template "
            "corpus is regenerable (fine for tests, not for a release)",
            len(reserved),
            src if isinstance(src, str | os.PathLike) else "the given records",
        )
    if not any(r["hallucination_type"] is None for r in hidden_records):
        raise ValueError(
            "the hidden split holds no conformant source; give a hidden corpus or more sources per task"
        )
    disjoint = assert_disjoint(public_records, hidden_records)
    tracks = draw_hidden_tracks(
        hidden_records,
        hk.key,
        metric_share=metric_share,
        conformant_share=conformant_share,
        public_fraction=public_fraction,
        types=blind_types,
    )
    rows = all_config_rows(public_records, split_seed)
    if compound is not None:
        if require_conformant:
            compound, d = drop_nonconformant(load_records(compound), "the compound corpus")
            n_dropped += d
        rows[COMPOUND_CONFIG] = _compound_rows(compound, public_records, hidden_records, split_seed)
        disjoint = assert_disjoint(
            public_records + [r for s in SPLITS for r in rows[COMPOUND_CONFIG][s]], hidden_records
        )
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
            # what the blind forks were shared between: pin them (blind_types) to keep this blind set
            "blind_types": list(corpus_types(hidden_records) if blind_types is None else blind_types),
            "mix": tracks.mix,
            "generators": sorted({r["generator"] for r in hidden_records}),
            "prefix_modes": sorted({r.get("prefix_mode") for r in hidden_records if r.get("prefix_mode")}),
            "disjointness": disjoint,
        }
        template = "template" in hidden_info["generators"]
        hidden_info["note"] = (
            "- This hidden set was made by the template simulator: it is for plumbing only (demos and tests). "
            "Anyone who runs the public simulator can fingerprint its dialogues, so its scores do not rank "
            "detectors; official hidden sets come from an LLM backend run.\n"
            if template
            else ""
        )
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
        outputs = [(cfg, split, rows[cfg][split], features) for cfg in rows for split in SPLITS]
        outputs += [
            (BLIND_CONFIG, "test", blind, blind_features()),
            (BLIND_PAIRS_CONFIG, "test", pairs, blind_pair_features()),
        ]
        for cfg, split, data, f in outputs:
            d = tmp / "data" / cfg
            d.mkdir(parents=True, exist_ok=True)
            _, nbytes = write_parquet(list(data), f, d / split, max_rows_per_shard)
            counts.setdefault(cfg, {})[split] = len(data)
            feats[cfg] = f
            sizes.setdefault(cfg, {"num_bytes": {}, "download_size": 0})["num_bytes"][split] = nbytes
        for cfg in sizes:
            sizes[cfg]["download_size"] = sum(
                p.stat().st_size for p in (tmp / "data" / cfg).glob("*.parquet")
            )
        stats = {
            "records": {
                "conformant": sum(1 for r in public_records if r["hallucination_type"] is None),
                "forked": sum(1 for r in public_records if r["hallucination_type"] is not None),
                **(
                    {
                        COMPOUND_CONFIG: sum(
                            1
                            for s in SPLITS
                            for r in rows[COMPOUND_CONFIG][s]
                            if r["hallucination_type"] is not None
                        )
                    }
                    if COMPOUND_CONFIG in rows
                    else {}
                ),
            },
            "tasks": len({r["task"] for r in public_records}),
            "domains": len({r["domain"] for r in public_records}),
            "generators": sorted({r["generator"] for r in public_records}),
            "hidden": hidden_info,
            "conformance": conformance_summary(list(public_records) + list(hidden_records), n_dropped),
            "source": card_source(_corpus_seed(src, "star")),  # what the card credits: the source kind's
        }
        card = build_card(
            counts,
            feats,
            sizes,
            stats,
            DEFAULT_CONFIG,
            revision,
            _example_row(rows["forked"]["test"] or rows["task3"]["train"]),
        )
        card.save(str(tmp / "README.md"))
        if audit is not None:
            audit_report = audit(tmp, tmp_gold)
            write_json_atomic(tmp_gold / AUDIT_FILE, audit_report.to_dict())
            if not audit_report.ok:
                raise AuditFailed(audit_report)
            add_audit_section(tmp / "README.md", audit_report.to_dict())  # the verdict, in the card
        _swap_together([(tmp, dest), (tmp_gold, gold)])
    except BaseException:
        if not _journal(dest).exists():  # before the swap started: nothing published, drop the staging
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.rmtree(tmp_gold, ignore_errors=True)
        raise
    logger.info(
        "exported %d public + %d hidden records to %s (gold in %s)",
        len(public_records),
        len(hidden_records),
        dest,
        gold,
    )
    out = {
        "dest": str(dest),
        "gold_dir": str(gold),
        "counts": counts,
        "gold_revision": revision,
        "hidden": {k: v for k, v in hidden_info.items() if k not in ("note", "fraction_text")},
        "conformance": {k: v for k, v in stats["conformance"].items() if k != "flagged_ids"},
    }
    if audit_report is not None:
        out["audit"] = {"ok": audit_report.ok, "worst": audit_report.worst()}
    return out


__all__ = [
    "AUDIT_FILE",
    "BLIND_CONFIG",
    "BLIND_PAIRS_CONFIG",
    "CODE_URL",
    "COMPOUND_CONFIG",
    "CONFIGS",
    "GOLD_FILES",
    "LAYOUT_CONFIGS",
    "LEADERBOARD_SPACE",
    "METRIC_SPACES",
    "AuditFailed",
    "DataNotFoundError",
    "DataSource",
    "DataSourceError",
    "blind_features",
    "conformance_summary",
    "drop_nonconformant",
    "blind_pair_features",
    "build_card",
    "classify_folder",
    "default_gold_dir",
    "export_hub_layout",
    "features_yaml",
    "load_blind",
    "load_blind_pairs",
    "load_gold",
    "load_layout",
    "load_split",
    "local_layout_cache_dir",
    "make_blind",
    "make_hidden_blind",
    "push_to_hub",
    "read_card_gold_revision",
    "read_parquet_rows",
    "recover_export",
    "resolve_data",
    "write_parquet",
]
