"""The DialFork dialogue record (SPEC section 4), its ``datasets.Features`` and its validation.

A record is stored as a plain ``dict`` (one JSON object per line in the generator's output,
one row in ``datasets``).  :class:`DialogueRecord` is the typed view of that dict; both
directions are lossless (``DialogueRecord.from_dict(r).to_dict() == r`` for a valid ``r``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

HALLUCINATION_TYPES: tuple[str, ...] = ("WIC", "SSPC", "GR", "CSC")
SPEAKERS: tuple[str, ...] = ("user", "system")
FORK_POSITIONS: tuple[int, ...] = (1, 2, 3, 4)
PREFIX_MODES: tuple[str, ...] = ("replay", "reuse", "reword")

#: Field order of a record (SPEC section 4 first, then the provenance fields).
RECORD_FIELDS: tuple[str, ...] = (
    "dialogue_id",
    "source_id",
    "scenario_id",
    "task",
    "domain",
    "hallucination_type",
    "variant",
    "instruction",
    "substitute_task",
    "fork_position",
    "fork_turn",
    "num_system_turns",
    "turns",
    "seed",
    "generator",
    "decoding",
    "prefix_mode",
    "prefix_divergence",
    "code_version",
    "injections",
)
#: Fields a conformant record must leave null.
FORK_ONLY_FIELDS: tuple[str, ...] = (
    "hallucination_type",
    "variant",
    "instruction",
    "substitute_task",
    "fork_position",
    "fork_turn",
    "prefix_mode",
    "prefix_divergence",
    "injections",
)
#: Keys of one injection of a compound fork (SPEC section 3): ``{type, variant, turn}``.
INJECTION_FIELDS: tuple[str, ...] = ("type", "variant", "turn")
DECODING_FIELDS: tuple[str, ...] = ("temperature", "top_p", "top_k", "max_new_tokens")


@dataclass(frozen=True)
class Turn:
    speaker: str
    text: str


@dataclass
class DialogueRecord:
    """Typed view of one record. ``turns`` holds :class:`Turn` objects."""

    dialogue_id: str
    source_id: str
    scenario_id: str
    task: str
    domain: str
    num_system_turns: int
    turns: list[Turn]
    seed: int
    generator: str
    hallucination_type: str | None = None
    variant: str | None = None
    instruction: str | None = None
    substitute_task: str | None = None
    fork_position: int | None = None
    fork_turn: int | None = None
    decoding: dict[str, Any] = field(default_factory=lambda: dict.fromkeys(DECODING_FIELDS))
    prefix_mode: str | None = None
    prefix_divergence: int | None = None
    code_version: str = ""
    injections: list[dict[str, Any]] | None = None
    """Compound forks only: every injection ``{type, variant, turn}``, turns strictly increasing; the
    single-injection fields hold the first one."""

    @property
    def is_conformant(self) -> bool:
        return self.hallucination_type is None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DialogueRecord:
        kw = {k: d.get(k) for k in RECORD_FIELDS if k in d}
        kw["turns"] = [Turn(str(t["speaker"]), str(t["text"])) for t in d.get("turns") or []]
        dec = dict.fromkeys(DECODING_FIELDS)
        dec.update(d.get("decoding") or {})
        kw["decoding"] = dec
        if kw.get("code_version") is None:
            kw["code_version"] = ""
        return cls(**kw)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["turns"] = [{"speaker": t.speaker, "text": t.text} for t in self.turns]
        return {k: d[k] for k in RECORD_FIELDS}


def record_features():
    """The ``datasets.Features`` of a record (``turns`` as ``List`` of structs, not ``Sequence``)."""
    from datasets import Features, Value

    try:  # datasets >= 4
        from datasets import List
    except ImportError:  # pragma: no cover - datasets 3.x
        from datasets import Sequence as List

    return Features(
        {
            "dialogue_id": Value("string"),
            "source_id": Value("string"),
            "scenario_id": Value("string"),
            "task": Value("string"),
            "domain": Value("string"),
            # Plain nullable string: conformant rows are null. (A ClassLabel cannot hold null.)
            "hallucination_type": Value("string"),
            "variant": Value("string"),
            "instruction": Value("string"),
            "substitute_task": Value("string"),
            "fork_position": Value("int8"),
            "fork_turn": Value("int32"),
            "num_system_turns": Value("int32"),
            "turns": List({"speaker": Value("string"), "text": Value("string")}),
            "seed": Value("int64"),
            "generator": Value("string"),
            "decoding": {
                "temperature": Value("float64"),
                "top_p": Value("float64"),
                "top_k": Value("int32"),
                "max_new_tokens": Value("int32"),
            },
            "prefix_mode": Value("string"),
            "prefix_divergence": Value("int32"),
            "code_version": Value("string"),
            "injections": List({"type": Value("string"), "variant": Value("string"), "turn": Value("int32")}),
        }
    )


def normalize_record(d: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``d`` with every record field present (missing optional fields -> null), in order."""
    out: dict[str, Any] = {}
    for k in RECORD_FIELDS:
        v = d.get(k)
        if k == "decoding":
            dec = dict.fromkeys(DECODING_FIELDS)
            dec.update(v or {})
            v = dec
        elif k == "code_version" and v is None:
            v = ""
        elif k == "turns":
            v = [{"speaker": t["speaker"], "text": t["text"]} for t in (v or [])]
        out[k] = v
    return out


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def record_errors(record: Mapping[str, Any]) -> list[str]:
    """Every violation of SPEC section 4 in one record, as ``"<field>: <reason>"`` strings."""
    errs: list[str] = []
    if not isinstance(record, Mapping):
        return [f"record: expected a JSON object, got {type(record).__name__}"]

    def str_field(name: str, required: bool = True) -> None:
        v = record.get(name)
        if v is None:
            if required:
                errs.append(f"{name}: missing (a non-empty string is required)")
        elif not isinstance(v, str) or not v.strip():
            errs.append(f"{name}: must be a non-empty string, got {v!r}")

    str_field("dialogue_id")
    str_field("source_id")
    str_field("scenario_id")
    str_field("task")
    str_field("domain")
    str_field("generator")

    turns = record.get("turns")
    n_sys = 0
    if not isinstance(turns, Sequence) or isinstance(turns, str) or len(turns) == 0:
        errs.append("turns: must be a non-empty list of {speaker, text}")
        turns = []
    for i, t in enumerate(turns):
        if not isinstance(t, Mapping):
            errs.append(f"turns[{i}]: must be an object with 'speaker' and 'text'")
            continue
        sp = t.get("speaker")
        if sp not in SPEAKERS:
            errs.append(f"turns[{i}].speaker: must be 'user' or 'system', got {sp!r}")
        elif sp == "system":
            n_sys += 1
        tx = t.get("text")
        if not isinstance(tx, str):
            errs.append(f"turns[{i}].text: must be a string, got {type(tx).__name__}")
        elif not tx.strip():
            errs.append(f"turns[{i}].text: empty text")

    T = record.get("num_system_turns")
    if not _is_int(T):
        errs.append(f"num_system_turns: must be an integer, got {T!r}")
        T = None
    elif turns and T != n_sys:
        errs.append(f"num_system_turns: is {T} but turns hold {n_sys} system turns")

    seed = record.get("seed")
    if not _is_int(seed):
        errs.append(f"seed: must be an integer, got {seed!r}")

    htype = record.get("hallucination_type")
    if htype is None:
        for k in FORK_ONLY_FIELDS:
            if record.get(k) is not None:
                errs.append(f"{k}: a conformant record (hallucination_type null) must not carry {k}")
        did, sid = record.get("dialogue_id"), record.get("source_id")
        if isinstance(did, str) and isinstance(sid, str) and did and sid and did != sid:
            errs.append(f"source_id: a conformant record's source_id must equal its dialogue_id ({did!r})")
    else:
        if htype not in HALLUCINATION_TYPES:
            errs.append(f"hallucination_type: unknown type {htype!r} (expected one of {', '.join(HALLUCINATION_TYPES)} or null)")
        k = record.get("fork_position")
        if k is None:
            errs.append("fork_position: a forked record needs fork_position k in 1..4")
        elif not _is_int(k) or k not in FORK_POSITIONS:
            errs.append(f"fork_position: must be an integer in 1..4, got {k!r}")
        tk = record.get("fork_turn")
        if tk is None:
            errs.append("fork_turn: a forked record needs fork_turn t_k")
        elif not _is_int(tk) or tk < 1 or (T is not None and tk > T):
            errs.append(f"fork_turn: must be an integer in 1..T (T={T}), got {tk!r}")
        for name in ("variant", "instruction"):
            v = record.get(name)
            if v is None or not isinstance(v, str) or not v.strip():
                errs.append(f"{name}: a forked record needs a non-empty {name}")
        if htype == "WIC" and not record.get("substitute_task"):
            errs.append("substitute_task: a WIC fork must record its substitute_task")
        if htype in HALLUCINATION_TYPES and htype != "WIC" and record.get("substitute_task") is not None:
            errs.append("substitute_task: only WIC forks carry a substitute_task")
        pm = record.get("prefix_mode")
        if pm is not None and pm not in PREFIX_MODES:
            errs.append(f"prefix_mode: must be one of {', '.join(PREFIX_MODES)}, got {pm!r}")
        pdv = record.get("prefix_divergence")
        if pdv is not None and (not _is_int(pdv) or pdv < 0):
            errs.append(f"prefix_divergence: must be a non-negative integer, got {pdv!r}")
        if record.get("injections") is not None:
            errs += _injection_errors(record, T)
    unknown = set(record) - set(RECORD_FIELDS)
    if unknown:
        errs.append(f"record: unknown field(s) {sorted(unknown)} (known: {', '.join(RECORD_FIELDS)})")
    return errs


def _injection_errors(record: Mapping[str, Any], T: int | None) -> list[str]:
    """A compound fork's ``injections``: >= 2 objects ``{type, variant, turn}``, turns strictly
    increasing in 1..T, the first one equal to the single-injection fields."""
    inj = record["injections"]
    if not isinstance(inj, Sequence) or isinstance(inj, str) or len(inj) < 2:
        return [f"injections: a compound fork lists at least 2 injections {{type, variant, turn}}, got {inj!r}"]
    errs: list[str] = []
    prev = 0
    for i, x in enumerate(inj):
        if not isinstance(x, Mapping) or set(x) != set(INJECTION_FIELDS):
            errs.append(f"injections[{i}]: must be an object with exactly {', '.join(INJECTION_FIELDS)}, got {x!r}")
            continue
        if x["type"] not in HALLUCINATION_TYPES:
            errs.append(f"injections[{i}].type: unknown type {x['type']!r}")
        if not isinstance(x["variant"], str) or not x["variant"].strip():
            errs.append(f"injections[{i}].variant: must be a non-empty string")
        t = x["turn"]
        if not _is_int(t) or t <= prev or (T is not None and t > T):
            errs.append(f"injections[{i}].turn: turns must increase strictly within 1..T (T={T}); got {t!r} after {prev}")
        prev = t if _is_int(t) else prev
    if not errs:
        first = inj[0]
        for key, field_name in (("type", "hallucination_type"), ("variant", "variant"), ("turn", "fork_turn")):
            if record.get(field_name) != first[key]:
                errs.append(f"{field_name}: a compound fork's {field_name} is its first injection's {key} "
                            f"({first[key]!r}), got {record.get(field_name)!r}")
    return errs


class RecordError(ValueError):
    """A record (or a file of records) violates SPEC section 4. ``errors`` lists every violation."""

    def __init__(self, message: str, errors: list[str] | None = None):
        super().__init__(message)
        self.errors = errors or [message]


def _rid(record: Any) -> str:
    if isinstance(record, Mapping):
        return repr(record.get("dialogue_id"))
    return "<not an object>"


def validate_record(record: Mapping[str, Any] | DialogueRecord) -> None:
    """Raise :class:`RecordError` (a ``ValueError``) naming the dialogue id and every bad field."""
    if isinstance(record, DialogueRecord):
        record = record.to_dict()
    errs = record_errors(record)
    if errs:
        msg = f"invalid record dialogue_id={_rid(record)}: " + "; ".join(errs)
        raise RecordError(msg, [f"dialogue_id={_rid(record)}: {e}" for e in errs])


def validate_records(records: Iterable[Mapping[str, Any]], source: str = "<records>") -> None:
    """Validate many records; collect every error (with the record's position) before raising."""
    errs: list[str] = []
    seen: dict[str, int] = {}
    for i, r in enumerate(records, 1):
        for e in record_errors(r):
            errs.append(f"{source}:{i}: dialogue_id={_rid(r)}: {e}")
        did = r.get("dialogue_id") if isinstance(r, Mapping) else None
        if isinstance(did, str):
            if did in seen:
                errs.append(f"{source}:{i}: dialogue_id={did!r}: duplicate id (first at record {seen[did]})")
            else:
                seen[did] = i
    if errs:
        raise RecordError(f"{len(errs)} error(s) in {source}:\n" + "\n".join(errs), errs)


def system_turn_count(turns: Sequence[Mapping[str, Any]]) -> int:
    return sum(1 for t in turns if t["speaker"] == "system")
