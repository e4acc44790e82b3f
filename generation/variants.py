"""The hallucination variant pools and the seeded draws of variant and WIC substitute task (SPEC
section 2).

The default pool is assembled from the registered types: each
:class:`~dialfork_dataset.taxonomy.HallucinationType` names its variants (``variants``: the built-in
types' ``generation/types/<code>.yaml``), and :func:`load_variants` reads them all, each checked by
the type's own ``variant_check``. A pool of one's own is one file that holds every type
(``version`` and ``types: {CODE: [variants]}``): :func:`default_variants_data` is the default pool in
that form, to copy and edit (``GenerationConfig(variants_path=...)``, ``--variants``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from dialfork_dataset import taxonomy
from dialfork_dataset.registry import resolve

from .errors import VariantError
from .seeds import Rng, fork_seed, stable_seed

#: The fewest valid variants a type may have.
MIN_VARIANTS_PER_TYPE = 5


@dataclass(frozen=True)
class Variant:
    """One hallucination variant of the pool: how a fork of its type deviates from the workflow.

    Attributes:
        id: the variant's id, unique over the whole pool (recorded in each fork's record).
        type: its hallucination type, a registered code (``"CSC"``, ``"GR"``,
            ``"SSPC"``, ``"WIC"``).
        description: a one-line human description of the deviation.
        instruction: the instruction injected into an LLM backend at the fork turn; may hold the
            placeholders ``{substitute_task}`` (WIC) and ``{service}``.
        cue: the short cue of the deviation (stripped text from the variant file).
        template: the template backend's parameters for this variant (e.g. SSPC's ``strategy``,
            GR/CSC's ``lines``, WIC's ``bridge``); empty when the file gives none.
    """

    id: str
    type: str
    description: str
    instruction: str
    cue: str
    template: Mapping[str, Any] = field(default_factory=dict)

    def render_instruction(self, substitute_task: str | None = None, service: str = "") -> str:
        """The instruction text injected into the LLM (placeholders filled).

        Args:
            substitute_task: the WIC substitute task that replaces ``{substitute_task}``; ``None``
                (default) fills in the empty string.
            service: the text that replaces ``{service}`` (default: empty).

        Returns:
            :attr:`instruction` with runs of whitespace collapsed to single spaces and both
                placeholders replaced.
        """
        text = " ".join(self.instruction.split())
        return text.replace("{substitute_task}", substitute_task or "").replace("{service}", service)


@dataclass(frozen=True)
class VariantPool:
    """A validated variant file: the variants of every hallucination type.

    ``pool[htype]`` is the tuple of that type's variants, in file order.

    Attributes:
        version: the file's ``version`` (a positive integer); for the default pool, the sum of its
            types' variant files' versions (so bumping any of them, or adding a type, changes it).
        types: each registered hallucination type to its variants, at
            least :data:`MIN_VARIANTS_PER_TYPE` each.
        path: where the pool was read from (the resolved file path; for the default pool, its
            types' files joined by ``", "``), used in error messages.
    """

    version: int
    types: Mapping[str, tuple[Variant, ...]]
    path: str

    def __getitem__(self, htype: str) -> tuple[Variant, ...]:
        return self.types[htype]

    def by_id(self, vid: str) -> Variant:
        """The variant whose id is ``vid``.

        Args:
            vid: a variant id.

        Returns:
            The variant of that id, whatever its type.

        Raises:
            KeyError: no variant of the pool has that id.
        """
        for vs in self.types.values():
            for v in vs:
                if v.id == vid:
                    return v
        raise KeyError(f"unknown variant id {vid!r} in {self.path}")


def check_line_templates(items: Sequence[tuple[str, Mapping[str, Any]]]) -> list[str]:
    """The template material of a type whose variants say lines of their own (GR, CSC):
    ``template.lines``, the variant's own utterances.

    Args:
        items: ``(location, template)`` of each variant of the type.

    Returns:
        One message per problem (empty when valid).
    """
    errs = []
    for loc, tpl in items:
        lines = tpl.get("lines")
        if not isinstance(lines, Sequence) or isinstance(lines, str) or not lines:
            errs.append(f"{loc}: template.lines must be a non-empty list of utterances")
    return errs


def _parse_type(
    h: str, items: Any, where: str, loc_of: str, seen: set[str], errs: list[str]
) -> tuple[Variant, ...]:
    """The variants of type ``h`` (``items`` as read), their problems appended to ``errs``."""
    if not isinstance(items, Sequence) or isinstance(items, str):
        errs.append(f"{where}: {loc_of}: missing list of variants")
        return ()
    vs = []
    checked: list[tuple[str, Mapping[str, Any]]] = []
    for i, it in enumerate(items):
        loc = f"{where}: {loc_of}[{i}]"
        if not isinstance(it, Mapping):
            errs.append(f"{loc}: must be a mapping")
            continue
        bad = False
        for key in ("id", "description", "instruction", "cue"):
            v = it.get(key)
            if not isinstance(v, str) or not v.strip():
                errs.append(f"{loc}: '{key}' must be a non-empty string")
                bad = True
        tpl = it.get("template") or {}
        if not isinstance(tpl, Mapping):
            errs.append(f"{loc}: 'template' must be a mapping")
            bad = True
            tpl = {}
        if bad:
            continue
        if it["id"] in seen:
            errs.append(f"{loc}: duplicate variant id {it['id']!r}")
        seen.add(it["id"])
        checked.append((loc, tpl))
        vs.append(
            Variant(
                it["id"],
                h,
                it["description"].strip(),
                it["instruction"].strip(),
                it["cue"].strip(),
                dict(tpl),
            )
        )
    check = taxonomy.get(h).variant_check
    if check is not None:  # the type's own checks of its template material (its registry entry)
        errs.extend(resolve(check, f"variant check of hallucination type {h!r}")(checked))
    if len(vs) < MIN_VARIANTS_PER_TYPE:
        errs.append(
            f"{where}: {loc_of}: {len(vs)} valid variant(s), at least {MIN_VARIANTS_PER_TYPE} are required"
        )
    return tuple(vs)


def _check_version(version: Any, where: str, errs: list[str]) -> None:
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        errs.append(f"{where}: 'version' must be a positive integer, got {version!r}")


def _parse(data: Any, where: str) -> VariantPool:
    errs: list[str] = []
    if not isinstance(data, Mapping):
        raise VariantError(f"{where}: expected a mapping with 'version' and 'types'", [where])
    version = data.get("version")
    _check_version(version, where, errs)
    types = data.get("types")
    if not isinstance(types, Mapping):
        raise VariantError(f"{where}: 'types' must map each type to a list of variants", errs + [where])
    seen: set[str] = set()
    codes = taxonomy.names()
    out = {h: _parse_type(h, types.get(h), where, f"types.{h}", seen, errs) for h in codes}
    extra = set(types) - set(codes)
    if extra:
        errs.append(f"{where}: unknown type(s) {sorted(extra)} (expected {codes})")
    if errs:
        raise VariantError(f"{len(errs)} error(s) in variant file {where}:\n" + "\n".join(errs), errs)
    return VariantPool(version=version, types=out, path=where)


def _read_yaml(path: str) -> Any:
    import yaml

    try:
        with open(path, encoding="utf-8") as fh:
            return yaml.safe_load(fh)
    except yaml.YAMLError as e:
        raise VariantError(f"{path}: malformed YAML ({e})", [str(e)]) from None


@lru_cache(maxsize=8)
def _load_cached(path: str, mtime_ns: int, codes: tuple[str, ...]) -> VariantPool:
    return _parse(_read_yaml(path), path)


def _type_sources() -> list[tuple[str, Any]]:
    """Each registered type's variants as its entry names them: ``(code, Path or list)``."""
    out = []
    for h in taxonomy.names():
        ref = taxonomy.get(h).variants
        src = resolve(ref, f"variants of hallucination type {h!r}") if isinstance(ref, str) else ref
        if src is None:
            raise VariantError(
                f"hallucination type {h!r} names no variants: give its HallucinationType "
                "variants=PATH (a YAML file with 'version' and 'variants'), or pass a variant file "
                "holding every type (GenerationConfig(variants_path=...), --variants)",
                [h],
            )
        out.append((h, Path(src) if isinstance(src, str) else src))
    return out


def _type_data(h: str, src: Any) -> tuple[str, Any, Any]:
    """``(where, version, variants)`` of one type's source: a variants file or the list itself."""
    if isinstance(src, Path):
        if not src.is_file():
            raise FileNotFoundError(f"variant file {src} of hallucination type {h!r} not found")
        data = _read_yaml(str(src))
        if not isinstance(data, Mapping):
            raise VariantError(f"{src}: expected a mapping with 'version' and 'variants'", [str(src)])
        return str(src), data.get("version"), data.get("variants")
    return f"variants of {h}", 1, src


@lru_cache(maxsize=8)
def _load_default(key: tuple[tuple[str, str, int], ...]) -> VariantPool:
    return _assemble(_type_sources())


def _assemble(sources: list[tuple[str, Any]]) -> VariantPool:
    errs: list[str] = []
    seen: set[str] = set()
    out: dict[str, tuple[Variant, ...]] = {}
    version, wheres = 0, []
    for h, src in sources:
        where, v, items = _type_data(h, src)
        _check_version(v, where, errs)
        version += v if isinstance(v, int) and not isinstance(v, bool) else 0
        out[h] = _parse_type(h, items, where, "variants", seen, errs)
        wheres.append(where)
    path = ", ".join(wheres)
    if errs:
        raise VariantError(f"{len(errs)} error(s) in the variant files {path}:\n" + "\n".join(errs), errs)
    return VariantPool(version=version, types=out, path=path)


def default_variants_data() -> dict[str, Any]:
    """The default pool (every registered type's variants) as one variant file's content.

    Returns:
        ``{"version": ..., "types": {code: [variant mappings]}}``, the form of a file for
        ``GenerationConfig(variants_path=...)`` and ``--variants``: dump it with ``yaml.safe_dump``,
        edit, and pass the copy.

    Raises:
        VariantError: a registered type names no variants, or its file is malformed YAML.
        FileNotFoundError: a type's variants file is missing.
    """
    types: dict[str, Any] = {}
    version = 0
    for h, src in _type_sources():
        _, v, items = _type_data(h, src)
        version += v if isinstance(v, int) and not isinstance(v, bool) else 0
        types[h] = [dict(it) for it in items or ()]
    return {"version": max(version, 1), "types": types}


def load_variants(path: str | Path | None = None) -> VariantPool:
    """Load and validate a variant pool: the default pool of the registered types, or one file.

    The parsed pool is cached per (resolved path, modification time, registered types), so an
    edited file, or a type registered since, is read again.

    Args:
        path: a YAML variant file with ``version`` and ``types`` (each registered hallucination
            type mapped to a list of variants with ``id``, ``description``, ``instruction``,
            ``cue`` and an optional ``template``); ``None`` (default): the default pool, each
            registered type's own variants (its entry's ``variants``: for the built-in types,
            ``generation/types/<code>.yaml``, with ``version`` and ``variants``).

    Returns:
        The validated :class:`VariantPool`.

    Raises:
        FileNotFoundError: ``path``, or a type's variants file, is not a file.
        VariantError: the YAML is malformed, or the pool is invalid (not a mapping, a bad
            ``version``, a type missing or unknown, a type that names no variants, a variant field
            missing or empty, a duplicate id, fewer than :data:`MIN_VARIANTS_PER_TYPE` valid
            variants for a type, or what the type's ``variant_check`` finds: SSPC not holding each
            of its five strategies exactly once, GR/CSC without ``template.lines``, a WIC
            ``template.bridge`` that is not a non-empty list); ``errors`` lists every problem.
    """
    if path is None:
        sources = _type_sources()
        if all(isinstance(src, Path) and src.is_file() for _, src in sources):
            key = tuple((h, str(src.resolve()), src.stat().st_mtime_ns) for h, src in sources)
            return _load_default(key)
        return _assemble(sources)
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"variant file {p} not found")
    return _load_cached(str(p.resolve()), p.stat().st_mtime_ns, taxonomy.names())


#: How forks draw their variant (and WIC its substitute task). ``quartet`` (default): one draw per
#: (source, type), shared by the four forks k=1..4, so that a quartet's forks differ only in their
#: fork turn (issue 15). ``fork``: each fork draws its own (the behaviour before; kept for
#: reproducing earlier corpora).
VARIANT_DRAWS: tuple[str, ...] = ("quartet", "fork")


def draw_seed(base_seed: int, scenario_id: str, htype: str, k: int | None) -> int:
    """Seed of a variant / substitute-task draw: per fork (``k`` = 1..4, BLAKE2b("fork", base seed,
    scenario id, type, k)) or per quartet (``k=None``, BLAKE2b("quartet", base seed, scenario id,
    type)).

    Args:
        base_seed: the run's base seed.
        scenario_id: the STAR scenario's id.
        htype: the hallucination type (``"CSC"``, ``"GR"``, ``"SSPC"`` or ``"WIC"``).
        k: the fork position 1..4 for a per-fork draw, or ``None`` for the quartet's shared draw.

    Returns:
        A 63-bit non-negative seed (:func:`generation.seeds.stable_seed` /
            :func:`generation.seeds.fork_seed`).
    """
    if k is None:
        return stable_seed("quartet", base_seed, scenario_id, htype)
    return fork_seed(base_seed, scenario_id, htype, k)


def draw_variant(
    pool: VariantPool, base_seed: int, scenario_id: str, htype: str, k: int | None = None
) -> Variant:
    """The variant of a quartet (scenario, type) when ``k`` is None, else of the single fork
    (scenario, type, k): uniform over the type's pool, seeded by :func:`draw_seed`.

    Args:
        pool: the variant pool (:func:`load_variants`).
        base_seed: the run's base seed.
        scenario_id: the STAR scenario's id.
        htype: the hallucination type to draw for (a key of ``pool``).
        k: the fork position 1..4 (``variant_draw="fork"``), or ``None`` (default) for one draw
            shared by the type's quartet (``variant_draw="quartet"``).

    Returns:
        One variant of ``pool[htype]``; the same arguments always give the same variant.
    """
    return Rng(draw_seed(base_seed, scenario_id, htype, k), 1).choice(pool[htype])


def draw_substitute_task(
    task: str,
    domain_of: Mapping[str, str],
    base_seed: int,
    scenario_id: str,
    k: int | None = None,
    htype: str = "WIC",
) -> str:
    """WIC's substitute workflow (SPEC section 2): another task of the same domain, or, when the
    domain has a single task, another task of another domain; uniform, seeded by
    :func:`draw_seed` (base seed, scenario id, ``htype``, k; k=None: one draw for the quartet).
    Every type with ``substitute`` in its registry entry draws this way.
    ``domain_of`` maps every available task to its domain.

    Args:
        task: the scenario's own task (workflow) name.
        domain_of: every available task mapped to its domain; must contain ``task``.
        base_seed: the run's base seed.
        scenario_id: the STAR scenario's id.
        k: the fork position 1..4 for a per-fork draw, or ``None`` (default) for the WIC quartet's
            shared draw.
        htype: the type whose fork follows the substitute (a type with ``substitute``, default
            ``"WIC"``): it salts the draw.

    Returns:
        The substitute task's name (never ``task``), drawn uniformly from the sorted candidates.

    Raises:
        KeyError: ``task`` is not a key of ``domain_of``.
        ValueError: ``domain_of`` holds no task other than ``task``.
    """
    if task not in domain_of:
        raise KeyError(f"draw_substitute_task: unknown task {task!r}")
    same = sorted(t for t, d in domain_of.items() if d == domain_of[task] and t != task)
    pool = same or sorted(t for t, d in domain_of.items() if d != domain_of[task])
    if not pool:
        raise ValueError(f"draw_substitute_task: no other task than {task!r} to substitute")
    return Rng(draw_seed(base_seed, scenario_id, htype, k), 2).choice(pool)
