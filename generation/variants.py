"""The hallucination variant pools (``variants.yaml``) and the seeded draws of variant and WIC
substitute task (SPEC section 2)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from dialfork_dataset.registry import resolve
from dialfork_dataset.taxonomy import get_type, hallucination_types

from .errors import VariantError
from .seeds import Rng, fork_seed, stable_seed

VARIANTS_PATH = Path(__file__).with_name("variants.yaml")

#: SSPC strategies, exactly the five of SPEC section 2, in the SPEC's order.
SSPC_STRATEGIES: tuple[str, ...] = ("repeat", "skip", "reverse", "jump", "chaotic")
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
        version: the file's ``version`` (a positive integer).
        types: each registered hallucination type to its variants, at
            least :data:`MIN_VARIANTS_PER_TYPE` each.
        path: where the pool was read from (the resolved file path), used in error messages.
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


def check_sspc_templates(items: Sequence[tuple[str, Mapping[str, Any]]]) -> list[str]:
    """The SSPC variants' template material: each names one of :data:`SSPC_STRATEGIES`, and the
    type holds each strategy exactly once (SPEC section 2).

    Args:
        items: ``(location, template)`` of each SSPC variant, in file order.

    Returns:
        One message per problem (empty when valid).
    """
    errs = [
        f"{loc}: template.strategy must be one of {SSPC_STRATEGIES}, got {tpl.get('strategy')!r}"
        for loc, tpl in items
        if tpl.get("strategy") not in SSPC_STRATEGIES
    ]
    strategies = sorted(tpl.get("strategy", "") for _, tpl in items)
    if strategies != sorted(SSPC_STRATEGIES):
        where = items[0][0].split(": types.")[0] if items else "variants"
        errs.append(
            f"{where}: types.SSPC must hold exactly the five strategies {SSPC_STRATEGIES} once each, got {strategies}"
        )
    return errs


def check_line_templates(items: Sequence[tuple[str, Mapping[str, Any]]]) -> list[str]:
    """GR's and CSC's template material: ``template.lines``, the variant's own utterances.

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


def check_wic_templates(items: Sequence[tuple[str, Mapping[str, Any]]]) -> list[str]:
    """WIC's template material: an optional ``template.bridge``, a non-empty list of lines
    (``""`` for no bridge).

    Args:
        items: ``(location, template)`` of each WIC variant.

    Returns:
        One message per problem (empty when valid).
    """
    errs = []
    for loc, tpl in items:
        br = tpl.get("bridge", [""])
        if not isinstance(br, Sequence) or isinstance(br, str) or not br:
            errs.append(f'{loc}: template.bridge must be a non-empty list (use "" for no bridge)')
    return errs


def _parse(data: Any, where: str) -> VariantPool:
    errs: list[str] = []
    if not isinstance(data, Mapping):
        raise VariantError(f"{where}: expected a mapping with 'version' and 'types'", [where])
    version = data.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        errs.append(f"{where}: 'version' must be a positive integer, got {version!r}")
    types = data.get("types")
    if not isinstance(types, Mapping):
        raise VariantError(f"{where}: 'types' must map each type to a list of variants", errs + [where])
    out: dict[str, tuple[Variant, ...]] = {}
    seen: set[str] = set()
    codes = hallucination_types()
    for h in codes:
        items = types.get(h)
        if not isinstance(items, Sequence) or isinstance(items, str):
            errs.append(f"{where}: types.{h}: missing list of variants")
            continue
        vs = []
        checked: list[tuple[str, Mapping[str, Any]]] = []
        for i, it in enumerate(items):
            loc = f"{where}: types.{h}[{i}]"
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
        check = get_type(h).variant_check
        if check is not None:  # the type's own checks of its template material (its registry entry)
            errs.extend(resolve(check, f"variant check of hallucination type {h!r}")(checked))
        if len(vs) < MIN_VARIANTS_PER_TYPE:
            errs.append(
                f"{where}: types.{h}: {len(vs)} valid variant(s), at least {MIN_VARIANTS_PER_TYPE} are required"
            )
        out[h] = tuple(vs)
    extra = set(types) - set(codes)
    if extra:
        errs.append(f"{where}: unknown type(s) {sorted(extra)} (expected {codes})")
    if errs:
        raise VariantError(f"{len(errs)} error(s) in variant file {where}:\n" + "\n".join(errs), errs)
    return VariantPool(version=version, types=out, path=where)


@lru_cache(maxsize=8)
def _load_cached(path: str, mtime_ns: int, codes: tuple[str, ...]) -> VariantPool:
    import yaml

    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except yaml.YAMLError as e:
        raise VariantError(f"{path}: malformed YAML ({e})", [str(e)]) from None
    return _parse(data, path)


def load_variants(path: str | Path | None = None) -> VariantPool:
    """Load and validate a variant pool (default: the packaged ``generation/variants.yaml``).

    The parsed pool is cached per (resolved path, modification time, registered types), so an
    edited file, or a type registered since, is read again.

    Args:
        path: a YAML variant file with ``version`` and ``types`` (each registered hallucination
            type mapped to a list of variants with ``id``, ``description``, ``instruction``,
            ``cue`` and an optional ``template``); ``None`` (default) reads :data:`VARIANTS_PATH`.

    Returns:
        The validated :class:`VariantPool`.

    Raises:
        FileNotFoundError: ``path`` is not a file.
        VariantError: the YAML is malformed, or the pool is invalid (not a mapping, a bad
            ``version``, a type missing or unknown, a variant field missing or empty, a duplicate
            id, fewer than :data:`MIN_VARIANTS_PER_TYPE` valid variants for a type, or what the
            type's ``variant_check`` finds: SSPC not holding each of :data:`SSPC_STRATEGIES`
            exactly once, GR/CSC without ``template.lines``, a WIC ``template.bridge`` that is
            not a non-empty list); ``errors`` lists every problem.
    """
    p = Path(path) if path is not None else VARIANTS_PATH
    if not p.is_file():
        raise FileNotFoundError(f"variant file {p} not found")
    return _load_cached(str(p.resolve()), p.stat().st_mtime_ns, hallucination_types())


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
