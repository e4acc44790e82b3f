"""The DialFork dialogue record (SPEC section 4), its ``datasets.Features`` and its validation.

A record is stored as a plain ``dict`` (one JSON object per line in the generator's output,
one row in ``datasets``).  :class:`DialogueRecord` is the typed view of that dict; both
directions are lossless (``DialogueRecord.from_dict(r).to_dict() == r`` for a valid ``r``).
"""

from __future__ import annotations

import math
import reprlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from . import taxonomy
from .errors import CollectedErrors
from .taxonomy import FORK_POSITIONS, is_type, substitute_types

SPEAKERS: tuple[str, ...] = ("user", "system")
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
    "conformance",
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
#: Keys of ``conformance``, the check of a generated conformant dialogue D+ (``python -m generation
#: --check-conformance``, :mod:`generation.conformance`), carried by the D+ and each of its forks; null
#: when unchecked. ``check``: the check's name; ``conformant``: its verdict; ``coverage``: the share of the
#: workflow's happy-path content steps said; ``skipped``: those not said; ``off_workflow``: the system
#: turns (1-based) another task's workflow fits better; ``unfamiliar``: system turns near no workflow step;
#: ``reached_outcome``: whether the workflow's outcome step was said.
CONFORMANCE_FIELDS: tuple[str, ...] = (
    "check",
    "conformant",
    "coverage",
    "skipped",
    "off_workflow",
    "unfamiliar",
    "reached_outcome",
)

#: Deepest nesting a record may hold (a turn's text sits at depth 3: record > turns > turn).
MAX_NESTING = 8
#: Integer ranges of the stored columns (``record_features``): out-of-range values cannot be
#: written to parquet, and integers with thousands of digits cannot even be printed.
INT32_MAX = 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

_REPR = reprlib.Repr()
_REPR.maxstring = 80
_REPR.maxother = 80
_REPR.maxlevel = 3
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = 4


class OversizedInt:
    """A JSON integer literal with more digits than Python converts (``sys.get_int_max_str_digits``):
    :func:`iter_jsonl` yields this marker instead of failing the whole line, so that validation
    can name the record and the field holding it.

    Args:
        digits: How many digits the literal has (sign excluded).
    """

    __slots__ = ("digits",)

    def __init__(self, digits: int):
        self.digits = digits

    def __repr__(self) -> str:
        return f"<an integer of {self.digits} digits>"


def show(value: Any) -> str:
    """A short, always printable ``repr`` for error messages: long strings and containers are cut,
    deep nesting is elided, and an integer with thousands of digits is named by its size (``repr``
    itself raises ``ValueError`` past ``sys.get_int_max_str_digits()``).

    Args:
        value: Any value.

    Returns:
        str: A ``reprlib`` repr (strings and containers cut), or a description when even that
        fails (``"an integer of about N digits"``, ``"a value of type T"``).
    """
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of about {int(value.bit_length() * math.log10(2)) + 1} digits"
    try:
        return _REPR.repr(value)
    except (ValueError, RecursionError, TypeError):  # a huge int inside a container, a broken __repr__
        return f"a value of type {type(value).__name__}"


_SCALARS = frozenset({str, int, bool, type(None)})


def json_problem(value: Any, max_depth: int = MAX_NESTING) -> tuple[str, str] | None:
    """Where and why ``value`` is not a plain JSON value: ``(path, reason)`` with ``path`` like
    ``".temperature"`` or ``"[2]"`` (``""`` for ``value`` itself), ``None`` when it is one. Plain
    JSON: ``None``, ``bool``, ``int``, finite ``float``, ``str``, lists and string-keyed objects,
    nested at most ``max_depth`` levels. Iterative: deep nesting cannot exhaust the stack.

    Args:
        value: The value to check.
        max_depth: The most levels of lists/objects allowed.

    Returns:
        tuple[str, str] | None: ``(path, reason)`` of the first problem found, or None when
        ``value`` is plain JSON.
    """
    # each entry: (value, depth, link) with link = (parent link, ".key" or "[i]"): the path string
    # is only built for the one value reported
    stack: list[tuple[Any, int, Any]] = [(value, 0, None)]
    while stack:
        v, depth, link = stack.pop()
        t = type(v)
        if t in _SCALARS:
            continue
        why = None
        if t is float or isinstance(v, float):
            if math.isfinite(v):
                continue
            why = f"{v!r} is not a JSON number"
        elif t is list or t is tuple or isinstance(v, list | tuple | Mapping):
            if depth >= max_depth:
                why = f"nested deeper than {max_depth} levels"
            elif isinstance(v, Mapping):
                bad = next((k for k in v if type(k) is not str), None)
                if bad is not None:
                    why = f"object key {show(bad)} is not a string"
                else:
                    stack.extend((x, depth + 1, (link, f".{k}")) for k, x in v.items())
                    continue
            else:
                stack.extend((x, depth + 1, (link, f"[{i}]")) for i, x in enumerate(v))
                continue
        elif isinstance(v, str | int):  # subclasses (an IntEnum, a str subclass) are plain JSON
            continue
        elif isinstance(v, OversizedInt):
            why = f"an integer of {v.digits} digits is out of range"
        else:
            why = f"a {type(v).__module__}.{type(v).__qualname__} is not JSON-serialisable"
        parts = []
        while link is not None:
            link, part = link
            parts.append(part)
        return "".join(reversed(parts)), why
    return None


@dataclass(frozen=True)
class Turn:
    """One turn of a dialogue (immutable).

    Attributes:
        speaker: ``"user"`` or ``"system"`` (:data:`SPEAKERS`).
        text: The utterance.
    """

    speaker: str
    text: str


@dataclass
class DialogueRecord:
    """Typed view of one record. ``turns`` holds :class:`Turn` objects.

    The fields are those of SPEC section 4 (:data:`RECORD_FIELDS`); the fork-only fields
    (:data:`FORK_ONLY_FIELDS`) are None for a conformant dialogue. Construction does not validate;
    see :func:`validate_record`.

    Attributes:
        dialogue_id: Unique id; a fork's is ``<source_id>-<TYPE>-k<k>``.
        source_id: The conformant parent's id (its own id for a conformant dialogue).
        scenario_id: The STAR scenario played.
        task: The STAR task.
        domain: The STAR domain of the task.
        num_system_turns: T, the number of system turns in ``turns``.
        turns: The dialogue, a list of :class:`Turn`.
        seed: The generation seed.
        generator: The generator (backend/model) that wrote the dialogue.
        hallucination_type: None (conformant) or a registered type code
            (:func:`~dialfork_dataset.taxonomy.names`: ``WIC``, ``SSPC``, ``GR``,
            ``CSC``, ...).
        variant: The injected instruction's variant id (forks only).
        instruction: The exact instruction injected (forks only).
        substitute_task: Types with a substitute task only (WIC): the workflow followed instead.
        fork_position: k in :data:`~dialfork_dataset.taxonomy.FORK_POSITIONS` (1..4; forks only).
        fork_turn: t_k, the system-turn index of the injection (forks only).
        decoding: The decoding settings, keys :data:`DECODING_FIELDS` (``temperature``,
            ``top_p``, ``top_k``, ``max_new_tokens``); values None when unknown.
        prefix_mode: How the turns before t_k were made, one of :data:`PREFIX_MODES` (forks only).
        prefix_divergence: How many turns before t_k differ from the source (forks only).
        code_version: The code version that generated the record; ``""`` when unknown.
        injections: Compound forks only: every injection ``{type, variant, turn}``.
        conformance: The check of the source D+ against its workflow (:data:`CONFORMANCE_FIELDS`);
            None when unchecked.
    """

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
    conformance: dict[str, Any] | None = None
    """The generation engine's check of the source D+ (:data:`CONFORMANCE_FIELDS`), on D+ and its
    forks; None when unchecked."""

    @property
    def is_conformant(self) -> bool:
        """True for a conformant dialogue (no ``hallucination_type``)."""
        return self.hallucination_type is None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DialogueRecord:
        """The typed view of a record mapping (not validated).

        Args:
            d: A record mapping; keys outside :data:`RECORD_FIELDS` are ignored, missing decoding
                keys become None and a missing ``code_version`` becomes ``""``.

        Returns:
            DialogueRecord: The record, ``turns`` as :class:`Turn` objects.

        Raises:
            KeyError: A turn lacks ``speaker`` or ``text``.
            TypeError: A required field (``dialogue_id``, ``source_id``, ``scenario_id``,
                ``task``, ``domain``, ``num_system_turns``, ``seed``, ``generator``) is missing.
        """
        kw = {k: d.get(k) for k in RECORD_FIELDS if k in d}
        kw["turns"] = [Turn(str(t["speaker"]), str(t["text"])) for t in d.get("turns") or []]
        dec = dict.fromkeys(DECODING_FIELDS)
        dec.update(d.get("decoding") or {})
        kw["decoding"] = dec
        if kw.get("code_version") is None:
            kw["code_version"] = ""
        return cls(**kw)

    def to_dict(self) -> dict[str, Any]:
        """The record as a plain dict (the JSON Lines / ``datasets`` row).

        Returns:
            dict[str, Any]: Every field of :data:`RECORD_FIELDS`, in that order; ``turns`` as
            ``{speaker, text}`` dicts.
        """
        d = asdict(self)
        d["turns"] = [{"speaker": t.speaker, "text": t.text} for t in self.turns]
        return {k: d[k] for k in RECORD_FIELDS}


def record_features():
    """The ``datasets.Features`` of a record (``turns`` as ``List`` of structs, not ``Sequence``).

    Returns:
        A ``datasets.Features`` with every field of ``RECORD_FIELDS``.
    """
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
            "conformance": {
                "check": Value("string"),
                "conformant": Value("bool"),
                "coverage": Value("float64"),
                "skipped": List(Value("string")),
                "off_workflow": List(Value("int32")),
                "unfamiliar": List(Value("int32")),
                "reached_outcome": Value("bool"),
            },
        }
    )


def normalize_record(d: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``d`` with every record field present (missing optional fields -> null), in order.

    Never raises on a malformed record (validate it with ``record_errors``): values of the wrong
    shape are passed through unchanged.

    Args:
        d: A record mapping.

    Returns:
        A new dict in ``RECORD_FIELDS`` order.
    """
    out: dict[str, Any] = {}
    for k in RECORD_FIELDS:
        v = d.get(k)
        if k == "decoding":
            if v is None or isinstance(v, Mapping):
                dec = dict.fromkeys(DECODING_FIELDS)
                dec.update(v or {})
                v = dec
        elif k == "code_version" and v is None:
            v = ""
        elif k == "turns" and isinstance(v, list | tuple):
            v = [
                {"speaker": t.get("speaker"), "text": t.get("text")} if isinstance(t, Mapping) else t
                for t in v
            ]
        elif k == "turns" and v is None:
            v = []
        out[k] = v
    return out


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def record_errors(record: Mapping[str, Any]) -> list[str]:
    """Every violation of SPEC section 4 in one record.

    Args:
        record: A record mapping.

    Returns:
        ``"<field>: <reason>"`` strings; empty when the record is valid.
    """
    errs: list[str] = []
    if not isinstance(record, Mapping):
        return [f"record: expected a JSON object, got {type(record).__name__}"]
    bad_keys = [k for k in record if not isinstance(k, str)]
    if bad_keys:
        return [f"record: field names must be strings, got {show(bad_keys[0])}"]
    not_json = {}
    for k, v in record.items():
        problem = json_problem(v, MAX_NESTING - 1)
        if problem is not None:
            errs.append(f"{k}{problem[0]}: {problem[1]}")
            not_json[k] = True
    if not_json:  # shape checks on such a value would only repeat the problem
        record = {k: v for k, v in record.items() if k not in not_json}

    def str_field(name: str, required: bool = True) -> None:
        v = record.get(name)
        if v is None:
            if required and name not in not_json:
                errs.append(f"{name}: missing (a non-empty string is required)")
        elif not isinstance(v, str) or not v.strip():
            errs.append(f"{name}: must be a non-empty string, got {show(v)}")

    str_field("dialogue_id")
    str_field("source_id")
    str_field("scenario_id")
    str_field("task")
    str_field("domain")
    str_field("generator")

    turns = record.get("turns")
    n_sys = 0
    if "turns" in not_json:
        turns = []
    elif not isinstance(turns, list | tuple) or len(turns) == 0:
        errs.append("turns: must be a non-empty list of {speaker, text}, got " + show(turns))
        turns = []
    for i, t in enumerate(turns):
        if not isinstance(t, Mapping):
            errs.append(f"turns[{i}]: must be an object with 'speaker' and 'text', got {show(t)}")
            continue
        extra = sorted(set(t) - {"speaker", "text"})
        if extra:
            errs.append(f"turns[{i}]: unknown field(s) {extra} (a turn holds 'speaker' and 'text')")
        sp = t.get("speaker")
        if not isinstance(sp, str) or sp not in SPEAKERS:
            errs.append(f"turns[{i}].speaker: must be 'user' or 'system', got {show(sp)}")
        elif sp == "system":
            n_sys += 1
        tx = t.get("text")
        if not isinstance(tx, str):
            errs.append(f"turns[{i}].text: must be a string, got {type(tx).__name__}")
        elif not tx.strip():
            errs.append(f"turns[{i}].text: empty text")

    T = record.get("num_system_turns")
    if not _is_int(T):
        if "num_system_turns" not in not_json:
            errs.append(f"num_system_turns: must be an integer, got {show(T)}")
        T = None
    elif not 0 <= T <= INT32_MAX:
        errs.append(f"num_system_turns: must be an integer in 0..{INT32_MAX}, got {show(T)}")
        T = None
    elif turns and T != n_sys:
        errs.append(f"num_system_turns: is {T} but turns hold {n_sys} system turns")

    seed = record.get("seed")
    if not _is_int(seed):
        if "seed" not in not_json:
            errs.append(f"seed: must be an integer, got {show(seed)}")
    elif not INT64_MIN <= seed <= INT64_MAX:
        errs.append(f"seed: must fit in a signed 64-bit integer, got {show(seed)}")

    errs.extend(_decoding_errors(record.get("decoding")))

    htype = record.get("hallucination_type")
    if htype is None:
        for k in FORK_ONLY_FIELDS:
            if record.get(k) is not None:
                errs.append(f"{k}: a conformant record (hallucination_type null) must not carry {k}")
        did, sid = record.get("dialogue_id"), record.get("source_id")
        if isinstance(did, str) and isinstance(sid, str) and did and sid and did != sid:
            errs.append(f"source_id: a conformant record's source_id must equal its dialogue_id ({did!r})")
    else:
        if not is_type(htype):
            errs.append(
                f"hallucination_type: unknown type {show(htype)} (expected one of {', '.join(taxonomy.names())} or null)"
            )
        k = record.get("fork_position")
        if k is None:
            errs.append("fork_position: a forked record needs fork_position k in 1..4")
        elif not _is_int(k) or k not in FORK_POSITIONS:
            errs.append(f"fork_position: must be an integer in 1..4, got {show(k)}")
        tk = record.get("fork_turn")
        if tk is None:
            errs.append("fork_turn: a forked record needs fork_turn t_k")
        elif not _is_int(tk) or tk < 1 or tk > (INT32_MAX if T is None else T):
            errs.append(f"fork_turn: must be an integer in 1..T (T={T}), got {show(tk)}")
        for name in ("variant", "instruction"):
            v = record.get(name)
            if v is None or not isinstance(v, str) or not v.strip():
                errs.append(f"{name}: a forked record needs a non-empty {name}")
        sub = record.get("substitute_task")
        substitute = is_type(htype) and taxonomy.get(htype).substitute
        if substitute and not (isinstance(sub, str) and sub.strip()):
            errs.append(f"substitute_task: a {htype} fork must record its substitute_task")
        if is_type(htype) and not substitute and sub is not None:
            errs.append(
                f"substitute_task: only forks of a type with a substitute task "
                f"({', '.join(substitute_types()) or 'none'}) carry one"
            )
        elif sub is not None and not isinstance(sub, str):
            errs.append(f"substitute_task: must be a string, got {show(sub)}")
        pm = record.get("prefix_mode")
        if pm is not None and (not isinstance(pm, str) or pm not in PREFIX_MODES):
            errs.append(f"prefix_mode: must be one of {', '.join(PREFIX_MODES)}, got {show(pm)}")
        pdv = record.get("prefix_divergence")
        if pdv is not None and (not _is_int(pdv) or not 0 <= pdv <= INT32_MAX):
            errs.append(f"prefix_divergence: must be a non-negative integer, got {show(pdv)}")
        if record.get("injections") is not None:
            errs += _injection_errors(record, T)
    if record.get("conformance") is not None:
        errs += [
            f"conformance.{e}" if not e.startswith("conformance") else e
            for e in conformance_errors(record["conformance"], T)
        ]
    cv = record.get("code_version")
    if cv is not None and not isinstance(cv, str):
        errs.append(f"code_version: must be a string, got {show(cv)}")
    unknown = set(record) - set(RECORD_FIELDS)
    if unknown:
        errs.append(f"record: unknown field(s) {sorted(unknown)} (known: {', '.join(RECORD_FIELDS)})")
    return errs


def conformance_errors(value: Any, num_system_turns: int | None = None) -> list[str]:
    """What is wrong with a ``conformance`` value (:data:`CONFORMANCE_FIELDS`).

    Args:
        value: The value (a record's ``conformance``, or a check's result).
        num_system_turns: The dialogue's T, when known: turn numbers must lie in 1..T.

    Returns:
        list[str]: ``"<key>: <reason>"`` per problem; empty when well formed.

    Example:
        >>> conformance_errors({"check": "x", "conformant": True, "coverage": 1.0, "skipped": [],
        ...                     "off_workflow": [], "unfamiliar": [5], "reached_outcome": True}, 4)
        ['unfamiliar: turn numbers must be integers in 1..4, got [5]']
    """
    if not isinstance(value, Mapping):
        return [f"conformance: must be an object with {', '.join(CONFORMANCE_FIELDS)}, got {show(value)}"]
    errs = []
    missing = [k for k in CONFORMANCE_FIELDS if k not in value]
    extra = sorted(set(value) - set(CONFORMANCE_FIELDS))
    if missing:
        errs.append(f"conformance: missing {', '.join(missing)}")
    if extra:
        errs.append(f"conformance: unknown field(s) {extra} (known: {', '.join(CONFORMANCE_FIELDS)})")
    c = value.get("check")
    if "check" in value and not (isinstance(c, str) and c.strip()):
        errs.append(f"check: must be a non-empty string (the check's name), got {show(c)}")
    for k in ("conformant", "reached_outcome"):
        if k in value and not isinstance(value[k], bool):
            errs.append(f"{k}: must be true or false, got {show(value[k])}")
    cov = value.get("coverage")
    if "coverage" in value and (
        isinstance(cov, bool) or not isinstance(cov, int | float) or not 0.0 <= cov <= 1.0
    ):
        errs.append(f"coverage: must be a number in [0, 1], got {show(cov)}")
    sk = value.get("skipped")
    if "skipped" in value and not (isinstance(sk, list) and all(isinstance(x, str) for x in sk)):
        errs.append(f"skipped: must be a list of step names, got {show(sk)}")
    hi = INT32_MAX if num_system_turns is None else num_system_turns
    for k in ("off_workflow", "unfamiliar"):
        v = value.get(k)
        if k in value and not (isinstance(v, list) and all(_is_int(x) and 1 <= x <= hi for x in v)):
            errs.append(
                f"{k}: turn numbers must be integers in 1..{'T' if num_system_turns is None else hi}, "
                f"got {show(v)}"
            )
    return errs


def _injection_errors(record: Mapping[str, Any], T: int | None) -> list[str]:
    """A compound fork's ``injections``: >= 2 objects ``{type, variant, turn}``, turns strictly
    increasing in 1..T, the first one equal to the single-injection fields."""
    inj = record["injections"]
    if not isinstance(inj, Sequence) or isinstance(inj, str) or len(inj) < 2:
        return [
            f"injections: a compound fork lists at least 2 injections {{type, variant, turn}}, got {show(inj)}"
        ]
    errs: list[str] = []
    prev = 0
    for i, x in enumerate(inj):
        if not isinstance(x, Mapping) or set(x) != set(INJECTION_FIELDS):
            errs.append(
                f"injections[{i}]: must be an object with exactly {', '.join(INJECTION_FIELDS)}, got {show(x)}"
            )
            continue
        if not is_type(x["type"]):
            errs.append(f"injections[{i}].type: unknown type {show(x['type'])}")
        if not isinstance(x["variant"], str) or not x["variant"].strip():
            errs.append(f"injections[{i}].variant: must be a non-empty string")
        t = x["turn"]
        if not _is_int(t) or t <= prev or (T is not None and t > T):
            errs.append(
                f"injections[{i}].turn: turns must increase strictly within 1..T (T={T}); got {show(t)} after {prev}"
            )
        prev = t if _is_int(t) else prev
    if not errs:
        first = inj[0]
        for key, field_name in (
            ("type", "hallucination_type"),
            ("variant", "variant"),
            ("turn", "fork_turn"),
        ):
            if record.get(field_name) != first[key]:
                errs.append(
                    f"{field_name}: a compound fork's {field_name} is its first injection's {key} "
                    f"({show(first[key])}), got {show(record.get(field_name))}"
                )
    return errs


class RecordError(CollectedErrors):
    """A record (or a file of records) violates SPEC section 4. ``errors`` lists every violation.

    Args:
        message: The exception's text.
        errors: Every violation, one line each (``file:line: dialogue_id=...: field: reason``);
            defaults to ``[message]``.
    """


def _finite_non_negative(v: Any) -> bool:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return False
    if isinstance(v, int):  # math.isfinite(10**400) raises OverflowError
        return 0 <= v <= INT64_MAX
    return math.isfinite(v) and v >= 0


def _decoding_errors(dec: Any) -> list[str]:
    """``decoding``: null or an object of DECODING_FIELDS, each null or a number in range."""
    if dec is None:
        return []
    if not isinstance(dec, Mapping):
        return [f"decoding: must be an object with {', '.join(DECODING_FIELDS)}, got {show(dec)}"]
    errs = []
    extra = sorted(set(dec) - set(DECODING_FIELDS))
    if extra:
        errs.append(f"decoding: unknown field(s) {extra} (known: {', '.join(DECODING_FIELDS)})")
    for name in ("temperature", "top_p"):
        v = dec.get(name)
        if v is not None and not _finite_non_negative(v):
            errs.append(f"decoding.{name}: must be a non-negative number or null, got {show(v)}")
    for name in ("top_k", "max_new_tokens"):
        v = dec.get(name)
        if v is not None and (not _is_int(v) or not 0 <= v <= INT32_MAX):
            errs.append(f"decoding.{name}: must be an integer in 0..{INT32_MAX} or null, got {show(v)}")
    return errs


def dialogue_id_of(record: Any) -> str:
    """``repr`` of a record's ``dialogue_id`` for error messages (always printable).

    Args:
        record: A record, or anything read where a record was expected.

    Returns:
        str: :func:`show` of its ``dialogue_id`` (``"None"`` when absent), or
        ``"<not an object>"`` when ``record`` is not a mapping.
    """
    if isinstance(record, Mapping):
        return show(record.get("dialogue_id"))
    return "<not an object>"


_rid = dialogue_id_of


def validate_record(record: Mapping[str, Any] | DialogueRecord) -> None:
    """Validate one record (SPEC section 4).

    Args:
        record: A record mapping or a ``DialogueRecord``.

    Raises:
        RecordError: A ``ValueError`` naming the dialogue id and every bad field.
    """
    if isinstance(record, DialogueRecord):
        record = record.to_dict()
    errs = record_errors(record)
    if errs:
        msg = f"invalid record dialogue_id={_rid(record)}: " + "; ".join(errs)
        raise RecordError(msg, [f"dialogue_id={_rid(record)}: {e}" for e in errs])


def validate_records(records: Iterable[Mapping[str, Any]], source: str = "<records>") -> None:
    """Validate many records; collect every error (with the record's position) before raising.

    Args:
        records: Record mappings.
        source: A name for the records in the message (e.g. the file).

    Raises:
        RecordError: Every bad field of every record, each with the record's position and id.
    """
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
    RecordError.raise_if(errs, str(source))


def system_turn_count(turns: Sequence[Mapping[str, Any]]) -> int:
    """T, the number of system turns of a dialogue.

    Args:
        turns: The turns, each a mapping with ``speaker``.

    Returns:
        int: How many turns have ``speaker == "system"``.
    """
    return sum(1 for t in turns if t["speaker"] == "system")


def __getattr__(name: str):
    """``HALLUCINATION_TYPES``: the registered types when read (:mod:`dialfork_dataset.taxonomy`)."""
    if name == "HALLUCINATION_TYPES":
        return taxonomy.names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
