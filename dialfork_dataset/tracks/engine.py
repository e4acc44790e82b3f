"""The engine of Task 3's tracks of edited real dialogues: forks made by editing a conformant dialogue at a
known system turn, split, records, the track folder.

A track is a :class:`TrackSpec` (its name, files, domains and question test) and its conformant
dialogues as :class:`HumanDialogue`; :func:`build_track` makes the records and :func:`write_track`
writes the folder. :mod:`.star_human` (STAR's human role-plays) and :mod:`.sgd` (SGD's dialogues) are
the two tracks built on it; the edits, the split and the records are documented there.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import shutil
import tempfile
import zlib
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)
#: The text variants of a system turn.
VARIANTS: tuple[str, ...] = ("picked", "typed")
#: The edit kinds, in the order they are made at each fork position.
EDITS: tuple[str, ...] = ("wic", "gr", "csc", "skip", "repeat")
#: Edit kind -> the hallucination type it stands for.
EDIT_TYPES: dict[str, str] = {"wic": "WIC", "gr": "GR", "csc": "CSC", "skip": "SSPC", "repeat": "SSPC"}
#: The record fields of this track beyond :data:`~dialfork_dataset.records.RECORD_FIELDS`.
TRACK_FIELDS: tuple[str, ...] = (
    "split",
    "track",
    "text_variant",
    "edit",
    "system_nodes",
    "system_node_tasks",
    "donor_id",
)
#: The fewest system turns of a conformant dialogue (four distinct fork turns, SPEC section 1).
MIN_TURNS = 4
#: The configs a written track holds (read like those of a Hub layout).
TRACK_CONFIGS: tuple[str, ...] = ("conformant", "forked", "task3")


@dataclass(frozen=True)
class HumanDialogue:
    """One conformant human dialogue of STAR, in one text variant.

    Attributes:
        scenario_id: The STAR dialogue id.
        task: Its (single) task.
        domain: The task's domain (:func:`~dialfork_dataset.star.task_domain`).
        turns: ``({"speaker", "text"}, ...)``, ``speaker`` ``"user"`` or ``"system"``.
        system_nodes: The gold action label of each system turn, in order.
        variant: ``"picked"`` or ``"typed"``.
        typed_fallbacks: ``typed`` only: how many system turns had no typed draft and kept the
            picked text (0 for ``picked``).
        id_prefix: What the dialogue id starts with (``star``; another track's own, e.g. ``sgd``).
    """

    scenario_id: str
    task: str
    domain: str
    turns: tuple[dict[str, str], ...]
    system_nodes: tuple[str, ...]
    variant: str = "picked"
    typed_fallbacks: int = 0
    id_prefix: str = "star"

    @property
    def dialogue_id(self) -> str:
        """``<id_prefix>-<scenario_id>`` (``star-<scenario_id>``)."""
        return f"{self.id_prefix}-{self.scenario_id}"

    @property
    def num_system_turns(self) -> int:
        """T, the number of system turns."""
        return len(self.system_nodes)

    def system_positions(self) -> list[int]:
        """0-based positions in :attr:`turns` of system turns 1..T.

        Returns:
            list[int]: The positions, in order.
        """
        return [i for i, t in enumerate(self.turns) if t["speaker"] == "system"]


# ----------------------------------------------------------------------------- forks
@dataclass
class StarHumanTrack:
    """The star-human track: records and what went into them.

    Attributes:
        records: Conformant dialogues and their forks, each a record dict (every field of
            :data:`~dialfork_dataset.records.RECORD_FIELDS`, then :data:`TRACK_FIELDS`); per task
            and source, the conformant dialogue first, then its forks by ``k`` and edit.
        stats: ``variant``, ``seed``, ``fit_fraction``, ``tasks``; ``conformant`` (task -> n),
            ``split`` (task -> {train, test}), ``excluded`` (reason -> n human dialogues of the
            tasks), ``forks`` (type -> n), ``forks_by_edit`` (edit -> n), ``forks_per_task`` (task ->
            type -> n), ``dropped`` (``identical_turn``: edit -> n, ``no_donor``: edit -> n,
            ``gr_single_task_domain``, ``skip_last_turn``, ``repeat_no_question``),
            ``gr_single_task_domain_tasks``, ``system_turns`` and ``typed_fallbacks`` (system turns
            of the conformant dialogues whose typed text fell back to the picked one).
    """

    records: list[dict[str, Any]]
    stats: dict[str, Any] = field(default_factory=dict)

    def split(self, name: str) -> list[dict[str, Any]]:
        """The records of one split.

        Args:
            name: ``"train"`` or ``"test"``.

        Returns:
            list[dict[str, Any]]: The records whose ``split`` is ``name``, in track order.
        """
        return [r for r in self.records if r["split"] == name]


@dataclass(frozen=True)
class TrackSpec:
    """What names one track of edited real dialogues and what its edits need to know.

    Attributes:
        name: The track's name (the records' ``track``; their ``generator`` is
            ``<name>:<text variant>``).
        manifest_format: The ``format`` of the track folder's ``manifest.json``.
        records_file: The file of the track folder that holds every record.
        domain_of: Task -> its domain (WIC donors come from another domain, GR donors from the same).
        is_question: ``(task, gold node) -> bool``: whether a system turn with that node asks the user
            something (what the ``repeat`` edit asks again).
        code_files: The modules whose bytes make the records' ``code_version``
            (``<name>+g<first 10 hex digits of their SHA-256>``).
        card_text: The dataset card's paragraph (what the dialogues are, which command wrote them).
    """

    name: str
    manifest_format: str
    records_file: str
    domain_of: Callable[[str], str]
    is_question: Callable[[str, str], bool]
    code_files: tuple[Path, ...]
    card_text: str

    @functools.cached_property
    def code_version(self) -> str:
        """``<name>+g<first 10 hex digits of the SHA-256 of the code files>``: the code that made a record."""
        h = hashlib.sha256()
        for f in self.code_files:
            h.update(Path(f).read_bytes())
        return f"{self.name}+g{h.hexdigest()[:10]}"


def _rng(seed: int, key: str):
    import numpy as np

    return np.random.default_rng([seed, zlib.crc32(key.encode("utf-8"))])


def _split(dialogues: Sequence[HumanDialogue], seed: int, fit_fraction: float) -> dict[str, str]:
    from ..builder import SPLITS

    train, test = SPLITS
    by_task: dict[str, list[str]] = defaultdict(list)
    for h in dialogues:
        by_task[h.task].append(h.dialogue_id)
    out: dict[str, str] = {}
    for task, ids in sorted(by_task.items()):
        order = _rng(seed, f"split|{task}").permutation(len(ids))
        n_train = int(len(ids) * fit_fraction)
        for rank, i in enumerate(order):
            out[ids[i]] = train if rank < n_train else test
    return out


def _exchange(h: HumanDialogue, pos: Sequence[int], j: int) -> list[dict[str, str]]:
    """System turn ``j`` (1-based) and the user turns after it, up to the next system turn."""
    end = pos[j] if j < len(pos) else len(h.turns)
    return list(h.turns[pos[j - 1] : end])


def _record(
    h: HumanDialogue,
    *,
    spec: TrackSpec,
    seed: int,
    split: str,
    turns: Sequence[Mapping[str, str]],
    nodes: Sequence[str],
    node_tasks: Sequence[str],
    edit: str | None = None,
    k: int | None = None,
    tk: int | None = None,
    instruction: str | None = None,
    substitute_task: str | None = None,
    donor_id: str | None = None,
) -> dict[str, Any]:
    from ..records import DECODING_FIELDS

    fork = edit is not None
    htype = EDIT_TYPES[edit] if fork else None
    did = (
        h.dialogue_id
        if not fork
        else f"{h.dialogue_id}-{htype}-k{k}" + ("-" + edit if htype == "SSPC" else "")
    )
    turns = [{"speaker": t["speaker"], "text": t["text"]} for t in turns]
    return {
        "dialogue_id": did,
        "source_id": h.dialogue_id,
        "scenario_id": h.scenario_id,
        "task": h.task,
        "domain": h.domain,
        "hallucination_type": htype,
        "variant": edit,
        "instruction": instruction,
        "substitute_task": substitute_task,
        "fork_position": k,
        "fork_turn": tk,
        "num_system_turns": sum(t["speaker"] == "system" for t in turns),
        "turns": turns,
        "seed": seed,
        "generator": f"{spec.name}:{h.variant}",
        "decoding": dict.fromkeys(DECODING_FIELDS),
        "prefix_mode": "reuse" if fork else None,
        "prefix_divergence": 0 if fork else None,
        "code_version": spec.code_version,
        "injections": None,
        "conformance": None,
        "split": split,
        "track": spec.name,
        "text_variant": h.variant,
        "edit": edit,
        "system_nodes": list(nodes),
        "system_node_tasks": list(node_tasks),
        "donor_id": donor_id,
    }


def _draw(rng: Any, seq: Sequence[Any]) -> Any:
    return seq[int(rng.integers(len(seq)))]


def _forks(
    h: HumanDialogue,
    *,
    spec: TrackSpec,
    seed: int,
    split: str,
    pool: Mapping[str, Sequence[HumanDialogue]],
    domains: Mapping[str, Sequence[str]],
    stats: dict[str, Any],
) -> list[dict[str, Any]]:
    """Every fork of ``h`` (``pool``: task -> conformant dialogues of ``h``'s split)."""
    from ..forks import fork_turns

    T = h.num_system_turns
    pos = h.system_positions()
    nodes = list(h.system_nodes)
    own = [h.task] * T
    dropped = stats["dropped"]
    out: list[dict[str, Any]] = []
    other_domain = [t for t in pool if spec.domain_of(t) != h.domain and pool[t]]
    same_domain = [t for t in pool if t != h.task and spec.domain_of(t) == h.domain and pool[t]]
    other_task = [t for t in pool if t != h.task and pool[t]]
    alone = len(domains.get(h.domain, ())) < 2
    for k, tk in enumerate(fork_turns(T), 1):
        prefix = list(h.turns[: pos[tk - 1]])
        rest = list(h.turns[pos[tk - 1] :])
        src_text = h.turns[pos[tk - 1]]["text"]
        for edit in EDITS:
            rng = _rng(seed, f"{h.dialogue_id}|{edit}|k{k}")
            kw: dict[str, Any] = {}
            if edit in ("wic", "gr", "csc"):
                if edit == "gr" and alone:
                    dropped["gr_single_task_domain"] += 1
                    continue
                tasks = {"wic": other_domain, "gr": same_domain, "csc": other_task}[edit]
                if not tasks:
                    dropped["no_donor"][edit] += 1
                    continue
                dtask = _draw(rng, sorted(tasks))
                donor = _draw(rng, pool[dtask])
                dpos = donor.system_positions()
                if edit == "csc":
                    ins = _exchange(donor, dpos, 2) + _exchange(donor, dpos, 3)
                    turns = prefix + ins + rest
                    fnodes = nodes[: tk - 1] + list(donor.system_nodes[1:3]) + nodes[tk - 1 :]
                    ftasks = own[: tk - 1] + [dtask] * 2 + own[tk - 1 :]
                    what = (
                        f"two exchanges of {donor.dialogue_id} ({dtask}, its system turns 2 and 3 with the user's "
                        f"answers) inserted before system turn {tk}; the source resumes at system turn {tk}"
                    )
                else:
                    turns = prefix + list(donor.turns[dpos[1] :])
                    fnodes = nodes[: tk - 1] + list(donor.system_nodes[1:])
                    ftasks = own[: tk - 1] + [dtask] * (donor.num_system_turns - 1)
                    what = (
                        f"from system turn {tk} on, the turns of {donor.dialogue_id} ({dtask}, "
                        f"{'another domain' if edit == 'wic' else 'the same domain'}) from its system turn 2 on"
                    )
                kw = {"donor_id": donor.dialogue_id, "substitute_task": dtask if edit == "wic" else None}
            elif edit == "skip":
                if tk >= T:
                    dropped["skip_last_turn"] += 1
                    continue
                turns = prefix + list(h.turns[pos[tk] :])
                fnodes, ftasks = nodes[: tk - 1] + nodes[tk:], own[:-1]
                what = f"system turn {tk} and the user turns answering it removed"
            else:  # repeat
                asked = [
                    j
                    for j in range(1, tk)
                    if spec.is_question(h.task, nodes[j - 1]) and len(_exchange(h, pos, j)) > 1
                ]
                if not asked:
                    dropped["repeat_no_question"] += 1
                    continue
                j = int(_draw(rng, asked))
                turns = prefix + _exchange(h, pos, j) + rest
                fnodes, ftasks = nodes[: tk - 1] + [nodes[j - 1]] + nodes[tk - 1 :], own + [h.task]
                what = (
                    f"the question of system turn {j} ({nodes[j - 1]}) and the user's answer asked again at "
                    f"system turn {tk}; the source resumes after it"
                )
            new_text = [t for t in turns if t["speaker"] == "system"][tk - 1]["text"]
            if new_text == src_text:
                dropped["identical_turn"][edit] += 1
                continue
            out.append(
                _record(
                    h,
                    spec=spec,
                    seed=seed,
                    split=split,
                    turns=turns,
                    nodes=fnodes,
                    node_tasks=ftasks,
                    edit=edit,
                    k=k,
                    tk=tk,
                    instruction=f"no instruction (human text edited, {edit}): {what}",
                    **kw,
                )
            )
    return out


def check_track_settings(seed: Any, fit_fraction: Any) -> None:
    """Check a track's seed and fit fraction.

    Args:
        seed: Must be a non-negative integer.
        fit_fraction: Must be a number in (0, 1).

    Raises:
        ValueError: A negative or non-integer ``seed``, or ``fit_fraction`` outside (0, 1) (the
            message names the setting and the value given).
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    if (
        isinstance(fit_fraction, bool)
        or not isinstance(fit_fraction, int | float)
        or not 0 < fit_fraction < 1
    ):
        raise ValueError(f"fit_fraction must be a number in (0, 1), got {fit_fraction!r}")


def build_track(
    dialogues: Sequence[HumanDialogue],
    *,
    spec: TrackSpec,
    tasks: Sequence[str],
    excluded: Mapping[str, int],
    variant: str,
    seed: int,
    fit_fraction: float,
) -> StarHumanTrack:
    """A track of edited real dialogues: the conformant dialogues given, split, and their forks.

    What :func:`build_star_human_track` does once it has STAR's conformant dialogues, for any
    corpus: the split by dialogue per task (seeded by ``(seed, task)``), then at each fork position
    the edits of :data:`EDITS` with donors of the same split (module doc).

    Args:
        dialogues: The conformant dialogues, in track order (by task, then id); their ``domain``
            is ``spec.domain_of(task)``.
        spec: The track's :class:`TrackSpec`.
        tasks: The track's tasks (donors are drawn from these only; a task may have no dialogue).
        excluded: Reason -> number of dialogues of the tasks left out (copied into the stats).
        variant: The dialogues' text variant (the stats' ``variant``).
        seed: A non-negative integer seeding the split and the donor draws.
        fit_fraction: The share of each task's conformant dialogues put in ``train``, in (0, 1).

    Returns:
        StarHumanTrack: The records (each with its ``split``) and the stats (those of
        :class:`StarHumanTrack` but ``typed_fallbacks``).

    Raises:
        ValueError: A negative or non-integer ``seed``, ``fit_fraction`` outside (0, 1), or a
            dialogue of a task not in ``tasks`` (its id named).
    """
    from ..builder import SPLITS

    check_track_settings(seed, fit_fraction)
    tasks = list(tasks)
    stray = [h.dialogue_id for h in dialogues if h.task not in tasks]
    if stray:
        raise ValueError(
            f"dialogue(s) {', '.join(stray[:5])} belong to no task of the {spec.name} track "
            f"({', '.join(tasks)}); pass their tasks in tasks="
        )
    assignment = _split(dialogues, seed, fit_fraction)
    pools: dict[str, dict[str, list[HumanDialogue]]] = {s: defaultdict(list) for s in SPLITS}
    for h in dialogues:
        pools[assignment[h.dialogue_id]][h.task].append(h)
    domains: dict[str, list[str]] = defaultdict(list)
    for t in tasks:
        domains[spec.domain_of(t)].append(t)
    stats: dict[str, Any] = {
        "track": spec.name,
        "variant": variant,
        "seed": seed,
        "fit_fraction": fit_fraction,
        "tasks": tasks,
        "conformant": {t: 0 for t in tasks},
        "split": {t: dict.fromkeys(SPLITS, 0) for t in tasks},
        "excluded": dict(sorted(excluded.items())),
        "dropped": {
            "identical_turn": Counter(),
            "no_donor": Counter(),
            "gr_single_task_domain": 0,
            "skip_last_turn": 0,
            "repeat_no_question": 0,
        },
        "gr_single_task_domain_tasks": sorted(t for t in tasks if len(domains[spec.domain_of(t)]) < 2),
    }
    records: list[dict[str, Any]] = []
    for h in dialogues:
        split = assignment[h.dialogue_id]
        stats["conformant"][h.task] += 1
        stats["split"][h.task][split] += 1
        records.append(
            _record(
                h,
                spec=spec,
                seed=seed,
                split=split,
                turns=h.turns,
                nodes=h.system_nodes,
                node_tasks=[h.task] * h.num_system_turns,
            )
        )
        records.extend(
            _forks(h, spec=spec, seed=seed, split=split, pool=pools[split], domains=domains, stats=stats)
        )
    forks = [r for r in records if r["edit"] is not None]
    per_task: dict[str, Counter] = {t: Counter() for t in tasks}
    for r in forks:
        per_task[r["task"]][r["hallucination_type"]] += 1
    from .. import taxonomy

    stats["forks"] = {h: sum(r["hallucination_type"] == h for r in forks) for h in taxonomy.names()}
    stats["forks_by_edit"] = {e: sum(r["edit"] == e for r in forks) for e in EDITS}
    stats["forks_per_task"] = {t: {h: c[h] for h in taxonomy.names()} for t, c in per_task.items()}
    d = stats["dropped"]
    d["identical_turn"] = {e: d["identical_turn"][e] for e in EDITS if d["identical_turn"][e]}
    d["no_donor"] = {e: d["no_donor"][e] for e in EDITS if d["no_donor"][e]}
    stats["system_turns"] = sum(h.num_system_turns for h in dialogues)
    stats["records"] = len(records)
    log.info(
        "%s track (%s): %d conformant dialogues, %d forks, %d records",
        spec.name,
        variant,
        len(dialogues),
        len(forks),
        len(records),
    )
    return StarHumanTrack(records, stats)


def core_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """A track record without its track fields (:data:`TRACK_FIELDS`): the SPEC section 4 record
    that :func:`~dialfork_dataset.records.record_errors` checks.

    Args:
        record: A record of the track.

    Returns:
        dict[str, Any]: A new dict without the keys of :data:`TRACK_FIELDS`.
    """
    return {k: v for k, v in record.items() if k not in TRACK_FIELDS}


# ----------------------------------------------------------------------------- writing
def _features():
    from datasets import Value

    try:  # datasets >= 4
        from datasets import List
    except ImportError:  # pragma: no cover - datasets 3.x
        from datasets import Sequence as List

    from ..records import record_features

    f = record_features()
    for name in ("split", "track", "text_variant", "edit", "donor_id"):
        f[name] = Value("string")
    f["system_nodes"] = List(Value("string"))
    f["system_node_tasks"] = List(Value("string"))
    return f


def _card(counts: Mapping[str, Mapping[str, int]], stats: Mapping[str, Any], spec: TrackSpec) -> str:
    lines = ["---", "configs:"]
    for cfg in TRACK_CONFIGS:
        lines.append(f"- config_name: {cfg}")
        lines.append("  data_files:")
        for s in counts[cfg]:
            lines += [f"  - split: {s}", f"    path: data/{cfg}/{s}-*.parquet"]
        if cfg == "task3":
            lines.append("  default: true")
    lines += [
        "---",
        "",
        f"# DialFork {spec.name} track ({stats['variant']} text)",
        "",
        spec.card_text,
        "",
        "| config | " + " | ".join(counts["task3"]) + " |",
        "| --- | --- | --- |",
    ]
    lines += [
        f"| {cfg} | " + " | ".join(str(n) for n in counts[cfg].values()) + " |" for cfg in TRACK_CONFIGS
    ]
    return "\n".join(lines) + "\n"


def write_track(
    track: StarHumanTrack,
    out: str | os.PathLike,
    *,
    spec: TrackSpec,
    settings: Mapping[str, Any],
    rule: str,
    overwrite: bool = False,
) -> Path:
    """Write a track of edited real dialogues as a folder the toolkit reads like a Hub layout.

    What :func:`write_star_human_track` writes, for any :class:`TrackSpec`: the configs' parquet
    files, a ``README.md`` (the card), ``spec.records_file`` (every record) and ``manifest.json``
    (``format``, then ``settings``, the conformance ``rule``, the edits, the track fields, the files,
    the counts and the stats), written in a staging folder and renamed into place.

    Args:
        track: The track (:func:`build_track`).
        out: The folder to write.
        spec: The track's :class:`TrackSpec`.
        settings: What built it (recorded at the manifest's top level; :func:`read_track_manifest`
            callers compare them to reuse a track).
        rule: The track's conformance rule, in words.
        overwrite: Replace ``out`` when it holds a track of this kind written before.

    Returns:
        Path: ``out``.

    Raises:
        FileExistsError: ``out`` exists and ``overwrite`` is false, or it exists and is not a folder
            of this track (no ``manifest.json`` of ``spec.manifest_format``), so it is not replaced.
        RecordError: A record breaks SPEC section 4 once its track fields are set aside, or lacks
            a track field (every problem listed; nothing is written).
    """
    import json

    import datasets

    from ..atomic import write_json_atomic
    from ..builder import SPLITS, config_split_rows
    from ..hub.files import write_parquet
    from ..jsonl import write_jsonl
    from ..records import RecordError, validate_records

    validate_records((core_record(r) for r in track.records), f"the {spec.name} track")
    missing = [
        f"record {i}: dialogue_id={r.get('dialogue_id')!r}: missing track field(s) "
        f"{[k for k in TRACK_FIELDS if k not in r]}"
        for i, r in enumerate(track.records, 1)
        if any(k not in r for k in TRACK_FIELDS)
    ]
    bad_split = [
        f"record {i}: dialogue_id={r.get('dialogue_id')!r}: split must be one of {', '.join(SPLITS)}, "
        f"got {r.get('split')!r}"
        for i, r in enumerate(track.records, 1)
        if r.get("split") not in SPLITS and not any(k not in r for k in TRACK_FIELDS)
    ]
    RecordError.raise_if(missing + bad_split, f"the {spec.name} track")
    out = Path(out)
    if out.exists():
        manifest = out / "manifest.json"
        ours = False
        if manifest.is_file():
            try:
                ours = json.loads(manifest.read_text(encoding="utf-8")).get("format") == spec.manifest_format
            except (OSError, ValueError):
                ours = False
        if not overwrite:
            raise FileExistsError(
                f"{out}: already exists; pass --overwrite (overwrite=True) to replace a track "
                "written before, or choose another --out"
            )
        if not ours:
            raise FileExistsError(
                f"{out}: exists and is not a {spec.name} track folder (no manifest.json of format "
                f"{spec.manifest_format}); not replaced: choose another --out"
            )
    assignment = {r["dialogue_id"]: r["split"] for r in track.records if r["edit"] is None}
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    os.chmod(tmp, 0o755)
    old = None
    try:
        features = _features()
        counts: dict[str, dict[str, int]] = {}
        was_enabled = datasets.is_progress_bar_enabled()
        datasets.disable_progress_bars()
        try:
            for cfg in TRACK_CONFIGS:
                (tmp / "data" / cfg).mkdir(parents=True)
                for s in SPLITS:
                    rows = config_split_rows(track.records, cfg, s, assignment=assignment)
                    write_parquet(
                        list(rows), features, tmp / "data" / cfg / s, max_rows_per_shard=len(rows) or 1
                    )
                    counts.setdefault(cfg, {})[s] = len(rows)
        finally:
            if was_enabled:
                datasets.enable_progress_bars()
        write_jsonl(tmp / spec.records_file, track.records)
        (tmp / "README.md").write_text(_card(counts, track.stats, spec), encoding="utf-8")
        write_json_atomic(
            tmp / "manifest.json",
            {
                "format": spec.manifest_format,
                **settings,
                "rule": rule,
                "edits": {e: EDIT_TYPES[e] for e in EDITS},
                "track_fields": list(TRACK_FIELDS),
                "files": {spec.records_file: len(track.records)},
                "counts": counts,
                "stats": track.stats,
            },
        )
        if out.exists():
            old = out.with_name(f".{out.name}.old-{os.getpid()}")
            os.replace(out, old)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None and not out.exists():
            os.replace(old, out)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    log.info("wrote the %s track (%d records) to %s", spec.name, len(track.records), out)
    return out


def read_manifest(folder: str | os.PathLike, spec: TrackSpec) -> dict[str, Any] | None:
    """The manifest of a track folder of ``spec``, or None when ``folder`` holds none (or another kind).

    Args:
        folder: A folder written by :func:`write_track` (or anything else).
        spec: The track's :class:`TrackSpec`.

    Returns:
        dict[str, Any] | None: The parsed ``manifest.json`` when its format is ``spec.manifest_format``.
    """
    import json

    p = Path(folder) / "manifest.json"
    try:
        m = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return m if isinstance(m, dict) and m.get("format") == spec.manifest_format else None


def ensure_track(
    out: str | os.PathLike, *, spec: TrackSpec, settings: Mapping[str, Any], build: Callable[[], Path]
) -> Path:
    """A written track at ``out``: reused when its manifest records the same ``settings``, else
    ``build()`` (which builds the track and writes it at ``out``, replacing one written before).

    Processes of one launch build it once: the check and the build hold an exclusive lock on a
    ``.<out name>.lock`` file beside ``out``; the others then reuse the track.

    Args:
        out: The track folder.
        spec: The track's :class:`TrackSpec` (its manifest format).
        settings: Setting -> value, as the manifest records them (JSON values: lists, not tuples).
        build: Builds and writes the track at ``out``; returns ``out``.

    Returns:
        Path: ``out``.
    """
    out = Path(out)
    want = dict(settings)
    out.parent.mkdir(parents=True, exist_ok=True)
    with _lock(
        out.with_name(f".{out.name}.lock")
    ):  # processes of one launch build it once, the others reuse it
        m = read_manifest(out, spec)
        if m is not None and {k: m.get(k) for k in want} == want:
            log.info("reusing the %s track in %s (same settings)", spec.name, out)
            return out
        return build()


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock on ``path`` (POSIX ``flock``; no lock where ``fcntl`` is missing)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


__all__ = [
    "EDITS",
    "EDIT_TYPES",
    "MIN_TURNS",
    "TRACK_CONFIGS",
    "TRACK_FIELDS",
    "VARIANTS",
    "HumanDialogue",
    "StarHumanTrack",
    "TrackSpec",
    "build_track",
    "check_track_settings",
    "core_record",
    "ensure_track",
    "read_manifest",
    "write_track",
]
