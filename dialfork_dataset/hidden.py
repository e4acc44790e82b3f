"""The hidden split of the leaderboard (SPEC section 4, "Hidden split rules").

A cheater holds every public file and the public code. What keeps the leaderboard honest:

* **Keys** (:class:`HiddenKey`): at least :data:`MIN_KEY_BYTES` random bytes (HMAC-SHA256 key) plus
  the hidden set's generation seed (at least :data:`MIN_SEED_BYTES` random bytes, i.e. 128 bits).
  ``python -m dialfork_dataset keygen FILE`` draws both; the file stays with the gold.
* **Reservation** (:func:`reserve`, :func:`star_scenario_split`): per task, a keyed selection of
  ``hidden_fraction`` of the task's single-task STAR scenarios (at least one, and never every one)
  is reserved for the hidden set. The public corpus is generated from the other scenarios, the
  hidden corpus from the reserved ones with the secret seed (``python -m generation
  --hidden-key FILE --split public|hidden``). The reservation depends on STAR and the key only,
  so growing the public corpus never touches a hidden scenario.
* **Blind draw** (:func:`draw_hidden_tracks`): each hidden source goes to one track. Detector
  sources give exactly one dialogue each to the blind set (the conformant dialogue or one of its
  forks), drawn with a secret RNG (seeded from the key) so that the conformant share, the
  types and the fork positions are balanced overall; each type's share is drawn by the key and the
  type alone (:func:`type_cells`), so a type added later leaves the others' blind dialogues in place; metric sources give their whole family to
  the metric track's (reference, candidate) pairs. No source feeds both tracks, so no blind
  dialogue has a sibling anywhere in the published files.
* **Disjointness** (:func:`assert_disjoint`): no hidden scenario id occurs in the public records,
  and no hidden dialogue's turn sequence occurs there either (checked by hash).

Every function here is pure (inputs -> outputs); the export (:mod:`dialfork_dataset.hub`) and
the generation CLI call them.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import random
import secrets
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import taxonomy
from .errors import CollectedErrors
from .taxonomy import FORK_POSITIONS

logger = logging.getLogger(__name__)

KEY_FORMAT = "dialfork-hidden-key/1"
#: Minimum length of the HMAC key (bytes).
MIN_KEY_BYTES = 32
#: Minimum length of the hidden set's generation seed (bytes; 16 bytes = 128 bits).
MIN_SEED_BYTES = 16
#: Share of each task's scenarios reserved for the hidden set (ours; SPEC 4).
DEFAULT_HIDDEN_FRACTION = 0.2
#: Share of the hidden sources of a task that go to the metric track (the rest: detector track).
DEFAULT_METRIC_SHARE = 0.5
#: Share of conformant dialogues in the detector blind set (the rest: forks, balanced over the
#: (type, k) cells). The Score needs both kinds: a4 and a2 come from conformant dialogues.
DEFAULT_CONFORMANT_SHARE = 0.2
#: Share of the blind sources scored in the public part (the rest: private).
DEFAULT_PUBLIC_FRACTION = 0.5


class HiddenKeyError(CollectedErrors):
    """A missing, short or malformed key or key file.

    Args:
        message: The exception's text.
        errors: Every problem, one line each; defaults to ``[message]``.
    """


def parse_key(value: bytes | str | None, what: str = "blind key") -> bytes:
    """The key bytes of a hex string or bytes; refuses empty and short keys (< 32 bytes).

    Args:
        value: The key: a hex string (surrounding whitespace ignored) or raw bytes.
        what: What the key is called in error messages.

    Returns:
        bytes: The key (``value`` itself when it is bytes).

    Raises:
        HiddenKeyError: ``value`` is None or empty, not hex, neither str nor bytes, or shorter
            than :data:`MIN_KEY_BYTES` (32) bytes.
    """
    if value is None or (isinstance(value, str | bytes) and len(value) == 0):
        raise HiddenKeyError(
            f"the {what} is empty: give at least {MIN_KEY_BYTES} random bytes "
            f"(e.g. `python -c 'import secrets; print(secrets.token_hex({MIN_KEY_BYTES}))'`, "
            "or `python -m dialfork_dataset keygen FILE`)"
        )
    if isinstance(value, str):
        try:
            key = bytes.fromhex(value.strip())
        except ValueError:
            raise HiddenKeyError(
                f"the {what} is not a hex string ({len(value)} characters); give "
                f"{2 * MIN_KEY_BYTES} hex digits ({MIN_KEY_BYTES} random bytes)"
            ) from None
    elif isinstance(value, bytes):
        key = value
    else:
        raise HiddenKeyError(f"the {what} must be a hex string or bytes, got {type(value).__name__}")
    if len(key) < MIN_KEY_BYTES:
        raise HiddenKeyError(
            f"the {what} has {len(key)} bytes; at least {MIN_KEY_BYTES} random bytes are needed "
            f"({2 * MIN_KEY_BYTES} hex digits). Draw one with `python -m dialfork_dataset keygen FILE`"
        )
    return key


def parse_seed(value: str | int | None, what: str = "hidden seed") -> int:
    """The hidden generation seed from its hex string; refuses seeds shorter than 128 bits.

    Args:
        value: The seed as a hex string (an int is refused: it hides how many random bits it has).
        what: What the seed is called in error messages.

    Returns:
        int: The seed (the hex digits read as a big-endian integer).

    Raises:
        HiddenKeyError: ``value`` is an int, empty or None, not hex, or shorter than
            :data:`MIN_SEED_BYTES` (16) bytes.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        raise HiddenKeyError(
            f"the {what} must be a hex string of at least {2 * MIN_SEED_BYTES} digits, not an "
            "integer (an integer hides how many random bits it was drawn with)"
        )
    if not isinstance(value, str) or not value.strip():
        raise HiddenKeyError(f"the {what} is empty: give at least {MIN_SEED_BYTES} random bytes as hex")
    s = value.strip()
    try:
        raw = bytes.fromhex(s)
    except ValueError:
        raise HiddenKeyError(f"the {what} is not a hex string") from None
    if len(raw) < MIN_SEED_BYTES:
        raise HiddenKeyError(f"the {what} has {8 * len(raw)} bits; at least {8 * MIN_SEED_BYTES} are needed")
    return int.from_bytes(raw, "big")


@dataclass(frozen=True)
class HiddenKey:
    """The secrets of a hidden split: the HMAC key, the hidden set's generation seed (hex) and the
    reserved share of scenarios. ``repr`` never shows the secrets.

    Attributes:
        key: The HMAC key, at least :data:`MIN_KEY_BYTES` (32) bytes.
        hidden_seed_hex: The hidden set's generation seed as hex (at least 128 bits); None for a key
            without one (e.g. a ``blind_key``).
        hidden_fraction: The share, in (0, 1), of each task's scenarios reserved for the hidden set;
            default 0.2.

    Raises:
        HiddenKeyError: On construction: a short or malformed key or seed, or ``hidden_fraction``
            outside (0, 1).
    """

    key: bytes
    hidden_seed_hex: str | None = None
    hidden_fraction: float = DEFAULT_HIDDEN_FRACTION

    def __post_init__(self):
        parse_key(self.key)
        if self.hidden_seed_hex is not None:
            parse_seed(self.hidden_seed_hex)
        f = self.hidden_fraction
        if isinstance(f, bool) or not isinstance(f, int | float) or not 0.0 < f < 1.0:
            raise HiddenKeyError(f"hidden_fraction must be a number in (0, 1), got {f!r}")

    def __repr__(self) -> str:
        return f"HiddenKey(<{len(self.key)} secret bytes>, hidden_fraction={self.hidden_fraction})"

    @property
    def hidden_seed(self) -> int:
        """The hidden generation seed as an int (:func:`parse_seed`).

        Raises:
            HiddenKeyError: The key has no hidden seed.
        """
        if self.hidden_seed_hex is None:
            raise HiddenKeyError(
                "this key has no hidden seed; draw a key file with `python -m dialfork_dataset keygen`"
            )
        return parse_seed(self.hidden_seed_hex)

    @classmethod
    def generate(cls, hidden_fraction: float = DEFAULT_HIDDEN_FRACTION) -> HiddenKey:
        """A new random key (``secrets``): 32 key bytes and a 128-bit hidden seed.

        Args:
            hidden_fraction: The reserved share of scenarios, in (0, 1).

        Returns:
            HiddenKey: The new key.
        """
        return cls(secrets.token_bytes(MIN_KEY_BYTES), secrets.token_hex(MIN_SEED_BYTES), hidden_fraction)

    def to_json(self) -> dict[str, Any]:
        """The key file's JSON object (secrets included: keep it with the gold only).

        Returns:
            dict[str, Any]: ``{"format", "key" (hex), "hidden_seed" (hex or None),
            "hidden_fraction", "note"}``.
        """
        return {
            "format": KEY_FORMAT,
            "key": self.key.hex(),
            "hidden_seed": self.hidden_seed_hex,
            "hidden_fraction": self.hidden_fraction,
            "note": "secret: keep with the gold only; never publish or commit this file",
        }

    @classmethod
    def from_json(cls, obj: Any, where: str = "key file") -> HiddenKey:
        """The key of a parsed key file (:meth:`to_json`'s object).

        Args:
            obj: The parsed JSON; it needs ``key``; ``hidden_seed`` and ``hidden_fraction``
                (default 0.2) are optional.
            where: Where it comes from (e.g. the file's path), prefixed to error messages.

        Returns:
            HiddenKey: The key.

        Raises:
            HiddenKeyError: ``obj`` is not an object with ``key``, or a value is malformed.
        """
        if not isinstance(obj, Mapping) or "key" not in obj:
            raise HiddenKeyError(
                f"{where}: not a DialFork key file (a JSON object with 'key'); draw one with "
                "`python -m dialfork_dataset keygen FILE`"
            )
        try:
            return cls(
                parse_key(obj["key"], f"key in {where}"),
                obj.get("hidden_seed"),
                obj.get("hidden_fraction", DEFAULT_HIDDEN_FRACTION),
            )
        except HiddenKeyError as e:
            raise HiddenKeyError(f"{where}: {e}") from None


def write_key_file(path: str | os.PathLike, key: HiddenKey, overwrite: bool = False) -> Path:
    """Write ``key`` to ``path`` (mode 0600, atomic); refuses to replace an existing key file.

    Args:
        path: The key file to write.
        key: The key.
        overwrite: Replace an existing file (the gold made with the old key becomes unscorable).

    Returns:
        Path: ``path``.

    Raises:
        FileExistsError: ``path`` exists and ``overwrite`` is False.
    """
    from .atomic import atomic_path

    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(
            f"{path} exists: a key file is never replaced silently (the gold made with it "
            "would become unscorable); remove it or choose another path"
        )
    with atomic_path(path) as tmp:
        os.chmod(tmp, 0o600)  # private before the secret is written, not after
        tmp.write_text(json.dumps(key.to_json(), ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    return path


def read_key_file(path: str | os.PathLike) -> HiddenKey:
    """Read a key file written by :func:`write_key_file` (``python -m dialfork_dataset keygen``).

    Args:
        path: The key file.

    Returns:
        HiddenKey: The key.

    Raises:
        FileNotFoundError: ``path`` is not a file.
        HiddenKeyError: The file is not JSON, not a key file, or holds a malformed key or seed.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: no such key file; draw one with `python -m dialfork_dataset keygen {path}`"
        )
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise HiddenKeyError(f"{path}: not valid JSON ({e})") from None
    return HiddenKey.from_json(obj, str(path))


# --------------------------------------------------------------------------- keyed draws


def keyed_unit(key: bytes, *parts: object) -> float:
    """A number in [0, 1) fixed by the key and ``parts`` (HMAC-SHA256); uniform without the key.

    Args:
        key: The HMAC key.
        *parts: Values (turned into strings) that name what is drawn.

    Returns:
        float: The first 8 bytes of the MAC over 2**64.
    """
    msg = "\x1f".join(str(p) for p in parts).encode("utf-8")
    return int.from_bytes(hmac.new(key, msg, hashlib.sha256).digest()[:8], "big") / 2**64


def keyed_token(key: bytes, kind: str, value: str, n: int = 20) -> str:
    """An opaque hex token of ``value`` (HMAC-SHA256, ``n`` hex digits).

    Args:
        key: The HMAC key.
        kind: A namespace (e.g. ``"dialogue"``, ``"pair"``), so equal values of two kinds get
            different tokens.
        value: The value to hide.
        n: The number of hex digits kept (at most 64); default 20 (80 bits).

    Returns:
        str: ``n`` lowercase hex digits.
    """
    return hmac.new(key, f"{kind}\x00{value}".encode(), hashlib.sha256).hexdigest()[:n]


def secret_rng(key: bytes, purpose: str) -> random.Random:
    """A ``random.Random`` seeded from the key: reproducible by the maintainers, secret to others.

    Args:
        key: The HMAC key.
        purpose: Names the draw; each purpose gets its own stream.

    Returns:
        random.Random: A generator seeded with HMAC-SHA256(key, purpose).
    """
    return random.Random(hmac.new(key, f"rng\x00{purpose}".encode(), hashlib.sha256).digest())


def n_reserved(n: int, fraction: float) -> int:
    """How many of ``n`` items a task reserves: round(fraction * n), at least 1, never all of them.

    Args:
        n: The number of items.
        fraction: The share to reserve.

    Returns:
        int: ``min(n - 1, max(1, round(fraction * n)))``; 0 when ``n <= 1``.
    """
    if n <= 1:
        return 0
    return min(n - 1, max(1, round(fraction * n)))


def reserve(
    items_by_task: Mapping[str, Iterable[str]], key: bytes, fraction: float = DEFAULT_HIDDEN_FRACTION
) -> dict[str, set[str]]:
    """``{task: reserved ids}``: per task the :func:`n_reserved` ids of smallest keyed rank.

    A task with a single item reserves nothing (a warning names it): it would have no public side.

    Args:
        items_by_task: Task -> its item ids (turned into strings, duplicates merged).
        key: The HMAC key that ranks the ids.
        fraction: The share reserved per task; default 0.2.

    Returns:
        dict[str, set[str]]: Task -> the reserved ids (empty for a task with one item or none).
    """
    out: dict[str, set[str]] = {}
    for task, items in sorted(items_by_task.items()):
        ids = sorted(set(map(str, items)))
        n = n_reserved(len(ids), fraction)
        if n == 0 and ids:
            logger.warning("task %s has a single source: nothing reserved for the hidden split", task)
        ranked = sorted(ids, key=lambda i: keyed_unit(key, "hidden-scenario", task, i))
        out[task] = set(ranked[:n])
    return out


def star_scenario_split(
    corpus: Any, key: HiddenKey, tasks: Sequence[str] | None = None
) -> dict[str, dict[str, list[str]]]:
    """``{task: {"public": [...], "hidden": [...]}}`` over the single-task STAR scenarios of each
    task (``corpus``: a :class:`~dialfork_dataset.sources.WorkflowSource`), in id order. The universe is every single-task
    scenario of the task, whatever the generation options, so the split is stable.

    Args:
        corpus: A workflow source (``tasks`` and ``scenarios_for``), e.g. a
            :class:`~dialfork_dataset.star.StarCorpus`.
        key: The hidden key; its ``key`` ranks the scenarios and its ``hidden_fraction`` sets the
            reserved share.
        tasks: The tasks to split; None (or empty) means every task of ``corpus``.

    Returns:
        dict[str, dict[str, list[str]]]: Task -> ``{"public": ids, "hidden": ids}``, each in the
        corpus's scenario order.
    """
    names = sorted(tasks) if tasks else sorted(corpus.tasks)
    universe = {t: [s.scenario_id for s in corpus.scenarios_for(task=t, single_task=True)] for t in names}
    hidden = reserve(universe, key.key, key.hidden_fraction)
    return {
        t: {"public": [s for s in ids if s not in hidden[t]], "hidden": [s for s in ids if s in hidden[t]]}
        for t, ids in universe.items()
    }


# --------------------------------------------------------------------------- disjointness


def turns_hash(turns: Sequence[Mapping[str, Any]]) -> str:
    """sha256 of a turn sequence (speaker and text of every turn, in order).

    Args:
        turns: The turns, each a mapping with ``speaker`` and ``text``.

    Returns:
        str: The hex digest.
    """
    h = hashlib.sha256()
    for t in turns:
        h.update(f"{t['speaker']}\x1f{t['text']}\x1e".encode())
    return h.hexdigest()


class LeakError(CollectedErrors):
    """A hidden dialogue (or its scenario) occurs in the public data.

    Args:
        message: The exception's text.
        errors: Every problem, one line each; defaults to ``[message]``.
    """


def assert_disjoint(
    public: Sequence[Mapping[str, Any]], hidden: Sequence[Mapping[str, Any]]
) -> dict[str, int]:
    """Raise :class:`LeakError` unless the hidden records share no scenario id and no turn sequence
    (by hash) with the public records. Returns the counts checked.

    Args:
        public: The public records (``scenario_id`` and ``turns`` are read).
        hidden: The hidden records (``scenario_id``, ``turns`` and ``dialogue_id`` are read).

    Returns:
        dict[str, int]: ``{"public_records", "hidden_records", "public_scenarios"}``.

    Raises:
        LeakError: A hidden scenario id, or a hidden turn sequence, occurs in the public records
            (both problems listed).
    """
    pub_scen = {str(r["scenario_id"]) for r in public}
    pub_hash = {turns_hash(r["turns"]) for r in public}
    errs = []
    shared = sorted({str(r["scenario_id"]) for r in hidden} & pub_scen)
    if shared:
        errs.append(
            f"{len(shared)} scenario id(s) occur in both the public and the hidden records (e.g. "
            f"{shared[:5]}): generate the public corpus with --split public and the hidden one with "
            "--split hidden from the same key file"
        )
    dup = [r["dialogue_id"] for r in hidden if turns_hash(r["turns"]) in pub_hash]
    if dup:
        errs.append(
            f"{len(dup)} hidden dialogue(s) have a turn sequence that also occurs in the public records "
            f"(e.g. {dup[:5]})"
        )
    if errs:
        raise LeakError(
            "the hidden split is not disjoint from the public data:\n" + "\n".join(f"- {e}" for e in errs),
            errs,
        )
    return {"public_records": len(public), "hidden_records": len(hidden), "public_scenarios": len(pub_scen)}


# --------------------------------------------------------------------------- the blind draw


def _families(records: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    fam: dict[str, dict[str, Any]] = defaultdict(lambda: {"source": None, "forks": {}})
    for r in records:
        f = fam[r["source_id"]]
        if r["hallucination_type"] is None:
            f["source"] = r
        else:
            f["forks"][(r["hallucination_type"], r["fork_position"])] = r
    return {s: f for s, f in fam.items() if f["source"] is not None}


def _spread(n: int, fraction: float) -> list[bool]:
    """``n`` flags, ``round(fraction * n)`` of them True, spread evenly (for n >= 2 both values occur)."""
    k = round(fraction * n)
    if n >= 2:
        k = min(n - 1, max(1, k))
    return [((i + 1) * k) // n > (i * k) // n for i in range(n)]


@dataclass
class HiddenTracks:
    """The outcome of :func:`draw_hidden_tracks` (real ids; the export makes them opaque).

    Attributes:
        detector: One record per detector source (its conformant dialogue or one fork), each with
            ``subset`` (``"public"`` or ``"private"``).
        metric: Every record of the metric sources (whole families), each with ``subset``.
        mix: The detector set's composition (:func:`blind_mix`) plus ``metric_sources`` and
            ``metric_units`` (the counts the card states).
    """

    detector: list[dict[str, Any]]  # one record per detector source, each with "subset"
    metric: list[dict[str, Any]]  # every record of the metric sources, each with "subset"
    mix: dict[str, Any]  # counts: conformant share, types, k, tasks, subsets (stated in the card)


def draw_hidden_tracks(
    records: Sequence[Mapping[str, Any]],
    key: bytes,
    *,
    metric_share: float = DEFAULT_METRIC_SHARE,
    conformant_share: float = DEFAULT_CONFORMANT_SHARE,
    public_fraction: float = DEFAULT_PUBLIC_FRACTION,
    types: Sequence[str] | None = None,
) -> HiddenTracks:
    """Split the hidden sources between the two tracks and draw the detector blind set.

    Per task, ``n_reserved(n, metric_share)`` sources (at least one when the task has two or more)
    go to the metric track; the others each give ONE dialogue to the detector blind set. Within
    each subset (public / private), ``round(conformant_share * n)`` detector sources (at least one
    when the subset has two or more) give their conformant dialogue; the others give one fork each,
    shared between the types by :func:`type_cells` (each type's ranking of the sources and order of
    positions seeded by the key and the type alone), so types and positions are balanced overall.
    Which sources give their conformant dialogue does not depend on the types, and a type added at
    the end (a corpus regenerated with one more type) takes its share from the tails of the others:
    every other blind dialogue stays. Everything random comes from the key: the draw is a function of
    the records, the key and the types.

    Args:
        records: The hidden records (sources and forks); a family without its conformant source
            is ignored.
        key: The HMAC key.
        metric_share: The share, in (0, 1), of each task's sources that go to the metric track;
            default 0.5.
        conformant_share: The share, in (0, 1), of detector sources (per subset) that give their
            conformant dialogue; default 0.2.
        public_fraction: The share, in (0, 1), of each track's sources in the ``public`` subset;
            default 0.5.
        types: The hallucination types the blind forks are shared between (pinned: the forks of
            any other type are left out, and the draw of a corpus regenerated with more types is the
            same as before); default the types the records carry (:func:`corpus_types`), never the
            registry's: a key's blind set of a corpus does not change when a type is registered later.

    Returns:
        HiddenTracks: The detector records, the metric records and the mix.

    Raises:
        ValueError: A share or fraction is not a number in (0, 1).
    """
    for name, v in (
        ("metric_share", metric_share),
        ("conformant_share", conformant_share),
        ("public_fraction", public_fraction),
    ):
        if isinstance(v, bool) or not isinstance(v, int | float) or not 0.0 < v < 1.0:
            raise ValueError(f"{name} must be a number in (0, 1), got {v!r}")
    fam = _families(records)
    rng = secret_rng(key, "blind-draw")
    by_task: dict[str, list[str]] = defaultdict(list)
    for sid, f in sorted(fam.items()):
        by_task[f["source"]["task"]].append(sid)
    det_sources: list[str] = []
    met_sources: list[str] = []
    for task in sorted(by_task):
        sids = by_task[task]
        rng.shuffle(sids)
        m = n_reserved(len(sids), metric_share)
        met_sources += sids[:m]
        det_sources += sids[m:]
    subset: dict[str, str] = {}
    for group in (det_sources, met_sources):
        for sid, pub in zip(group, _spread(len(group), public_fraction)):  # group is grouped by task
            subset[sid] = "public" if pub else "private"

    cell_types = tuple(corpus_types(records) if types is None else types)
    detector: list[dict[str, Any]] = []
    for part in ("public", "private"):
        sids = [s for s in det_sources if subset[s] == part]
        rng.shuffle(sids)
        is_conf = _spread(len(sids), conformant_share) if len(sids) >= 2 else [False] * len(sids)
        rng.shuffle(is_conf)
        conformant = {sid for sid, conf in zip(sids, is_conf) if conf or not fam[sid]["forks"]}
        forked = sorted(sid for sid in sids if sid not in conformant)
        cells = type_cells(forked, key, cell_types, part, mirror=part == "private")
        for sid in sids:
            f = fam[sid]
            if sid in conformant:
                detector.append({**f["source"], "subset": part})
                continue
            cell = _available_cell(cells.get(sid), f["forks"], key)
            detector.append({**f["forks"][cell], "subset": part})
    metric: list[dict[str, Any]] = []
    for sid in sorted(met_sources):
        f = fam[sid]
        metric.append({**f["source"], "subset": subset[sid]})
        metric += [{**r, "subset": subset[sid]} for _, r in sorted(f["forks"].items())]
    mix = blind_mix(detector)
    mix["metric_sources"] = len(met_sources)
    mix["metric_units"] = len(
        {(r["source_id"], r["hallucination_type"]) for r in metric if r["hallucination_type"]}
    )
    return HiddenTracks(detector, metric, mix)


def _available_cell(cell: tuple[str, int] | None, forks: Mapping[tuple[str, int], Any], key: bytes) -> Any:
    """``cell`` when the source has that fork, else the type's next position it has, else its first fork."""
    if cell in forks:
        return cell
    if cell is not None:
        ks = _type_positions(key, cell[0])
        start = ks.index(cell[1]) if cell[1] in ks else 0
        for j in range(len(ks)):
            alt = (cell[0], ks[(start + j) % len(ks)])
            if alt in forks:
                return alt
    return sorted(forks)[0]


def _type_positions(key: bytes, htype: str) -> tuple[int, ...]:
    """The fork positions in the order ``htype``'s blind forks take them (seeded by the key and the type)."""
    ks = list(FORK_POSITIONS)
    secret_rng(key, f"blind-positions/{htype}").shuffle(ks)
    return tuple(ks)


def type_cells(
    sources: Sequence[str], key: bytes, types: Sequence[str], part: str = "", *, mirror: bool = False
) -> dict[str, tuple[str, int]]:
    """Which fork each forked blind source gives: its ``(hallucination_type, fork_position)``.

    Each type ranks the sources by a keyed hash of the key, the type and the source, and takes its
    fork positions cyclically in a keyed order of its own (:func:`_type_positions`): both are seeded
    by the key and the type alone. The sources are shared out by folding the types in, in their
    order: the first type holds every source; each next type takes, from the tail of every earlier
    type's ranked list, what brings all to an even share (the earlier types hold one more when the
    count does not divide; the later ones with ``mirror``, which also walks the positions backwards,
    so that two subsets drawn one plain and one mirrored stay balanced together). So the types are
    balanced to within one source, each type's positions to within one, and a type added at the end
    takes its share from the others' tails: every earlier
    type keeps the same fork (type and position) of every source it keeps, and gives up about
    ``n / (t (t + 1))`` of its ``n / t`` sources (``t`` types before, ``n`` sources). Pinning the types
    (``types``) keeps the draw exactly.

    Args:
        sources: The forked blind sources of one subset (their ids).
        key: The HMAC key.
        types: The hallucination types the sources are shared between, in seed order.
        part: The subset's name (salts the ranking, so the two subsets draw independently).
        mirror: Give the spare sources to the last types and take the positions from the end of each
            type's order (the private subset; the public one is plain).

    Returns:
        dict[str, tuple[str, int]]: Each source's cell (empty when ``types`` is empty).

    Example:
        >>> cells = type_cells([f"s{i}" for i in range(8)], bytes(32), ["A", "B"])
        >>> sorted(t for t, _ in cells.values())
        ['A', 'A', 'A', 'A', 'B', 'B', 'B', 'B']
        >>> three = type_cells([f"s{i}" for i in range(8)], bytes(32), ["A", "B", "C"])
        >>> all(cells[s] == c for s, c in three.items() if c[0] != "C")  # A and B keep their forks
        True
    """
    types = list(dict.fromkeys(types))
    owned: dict[str, list[str]] = {}
    for j, htype in enumerate(types):
        n = j + 1
        spare = len(sources) % n
        quota = [len(sources) // n + ((i >= n - spare) if mirror else (i < spare)) for i in range(n)]
        freed: list[str] = [] if j else list(sources)
        for i, earlier in enumerate(types[:j]):
            freed += owned[earlier][quota[i] :]
            owned[earlier] = owned[earlier][: quota[i]]
        owned[htype] = sorted(freed, key=lambda s, h=htype: (keyed_unit(key, "blind-rank", part, h, s), s))
    out: dict[str, tuple[str, int]] = {}
    for htype, sids in owned.items():
        ks = _type_positions(key, htype)
        ks = ks[::-1] if mirror else ks
        out.update({sid: (htype, ks[i % len(ks)]) for i, sid in enumerate(sids)})
    return out


def corpus_types(records: Iterable[Mapping[str, Any]]) -> tuple[str, ...]:
    """The hallucination types a corpus's records carry, in seed order: what the blind draw cycles
    over, so that registering a type later leaves the draw of an existing corpus unchanged.

    Types are appended to the registry, never inserted (``docs/extending.md``), so the registered
    types a corpus carries keep their relative order; a type that is no longer registered comes
    after them, in alphabetical order.

    Args:
        records: The corpus's records (``hallucination_type`` is read; None for a conformant one).

    Returns:
        tuple[str, ...]: The codes, registered ones in registration order, then the others sorted.

    Example:
        >>> corpus_types([{"hallucination_type": t} for t in ("GR", None, "WIC", "GR", "NEW")])
        ('WIC', 'GR', 'NEW')
    """
    present = {r.get("hallucination_type") for r in records} - {None}
    known = [t for t in taxonomy.names() if t in present]
    return (*known, *sorted(present - set(known)))


def blind_mix(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The composition of a detector blind set (what the card states).

    Args:
        rows: Detector records (``hallucination_type``, ``fork_position``, ``task`` and, if
            present, ``subset`` are read).

    Returns:
        dict[str, Any]: ``{"dialogues", "conformant", "forked", "conformant_share" (4 decimals,
        None when empty), "types" (type -> count), "fork_positions" ("k1".. -> count), "tasks"
        (distinct count), "subsets" (subset -> count)}``.
    """
    from collections import Counter

    n = len(rows)
    conf = sum(1 for r in rows if r["hallucination_type"] is None)
    return {
        "dialogues": n,
        "conformant": conf,
        "forked": n - conf,
        "conformant_share": round(conf / n, 4) if n else None,
        "types": dict(
            sorted(Counter(r["hallucination_type"] for r in rows if r["hallucination_type"]).items())
        ),
        "fork_positions": {
            f"k{k}": c
            for k, c in sorted(Counter(r["fork_position"] for r in rows if r["hallucination_type"]).items())
        },
        "tasks": len({r["task"] for r in rows}),
        "subsets": dict(sorted(Counter(r.get("subset") for r in rows).items())),
    }


__all__ = [
    "DEFAULT_CONFORMANT_SHARE",
    "DEFAULT_HIDDEN_FRACTION",
    "DEFAULT_METRIC_SHARE",
    "HiddenKey",
    "HiddenKeyError",
    "HiddenTracks",
    "LeakError",
    "MIN_KEY_BYTES",
    "MIN_SEED_BYTES",
    "assert_disjoint",
    "blind_mix",
    "corpus_types",
    "draw_hidden_tracks",
    "keyed_token",
    "keyed_unit",
    "n_reserved",
    "parse_key",
    "parse_seed",
    "read_key_file",
    "reserve",
    "secret_rng",
    "star_scenario_split",
    "turns_hash",
    "type_cells",
    "write_key_file",
]
