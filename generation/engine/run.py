"""The run: validate everything, then generate (or resume) a shard and merge (SPEC sections 3-4).

:func:`generate_corpus` is the generator's one entry point: it checks the settings, the output folder,
the source and the backend before writing anything, generates the units of its shard in batches
(optionally in worker processes), appends each finished unit to the shard file, and with one shard
merges the result into the corpus.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from dialfork_dataset.sources import SourceError, open_source, require
from dialfork_dataset.taxonomy import forks_per_source

from ..backends.base import Backend
from ..errors import GenerationError
from .config import GenerationConfig, is_int
from .merge import Manifest, merge_shards
from .output import check_output_dir, write_run_file
from .shards import SHARDS_DIR, ShardWriter, read_shard, shard_path
from .units import RunContext, Unit, UnitResult, generate_units, make_context, plan_units

logger = logging.getLogger("generation")


#: The context and backend of a worker process (set before the pool forks).
_WORKER: dict[str, Any] = {}


def _worker_run(batch: list[Unit]) -> list[UnitResult]:
    return generate_units(_WORKER["ctx"], batch, _WORKER["backend"])


def load_corpus(star: str):
    """Open the workflow source ``star`` (``star:PATH``, ``workflow:PATH`` or a STAR folder); raises
    :class:`GenerationError` saying why it is unusable.

    Args:
        star: the source spec (:func:`dialfork_dataset.sources.open_source`).

    Returns:
        The opened workflow source (e.g. a ``StarCorpus``).

    Raises:
        GenerationError: the source is missing or invalid (``errors`` carries the source's own
            problem list when it has one).
    """
    from dialfork_dataset.star import StarError

    try:
        return open_source(star)
    except (StarError, SourceError) as e:
        raise GenerationError(f"workflow source {star} is unusable: {e}", getattr(e, "errors", None)) from e
    except FileNotFoundError as e:
        raise GenerationError(f"workflow source {star} is unusable: {e}") from e


def prepare(
    config: GenerationConfig,
    backend: Backend | None = None,
    scenarios: Iterable[Any] | None = None,
    corpus: Any = None,
) -> tuple[Any, list[Unit], Backend, RunContext, str]:
    """Validate everything (nothing is written): returns (corpus, units, backend, context, state).

    Args:
        config: the run's configuration.
        backend: a backend object to use; ``None`` (default) builds ``config.backend`` with
            ``config.backend_options``.
        scenarios: an explicit list of scenarios to plan (:func:`~generation.engine.units.plan_units`);
            ``None`` (default) takes the source's.
        corpus: an already opened workflow source; ``None`` (default) opens ``config.star``.

    Returns:
        A tuple ``(corpus, units, backend, ctx, state)``: the source, the unit plan, the backend
            (bound to the KB tools when ``config.kb_tools``), the :class:`RunContext` and the output
            folder's state (``"new"``, ``"resume"`` or ``"complete"``).

    Raises:
        GenerationError: the settings are invalid (:meth:`GenerationConfig.check`), the output folder
            is unusable or holds another configuration, the source is unusable, a task of
            ``config.tasks`` is unknown, ``kb_tools`` is asked of a backend that cannot call tools
            or its tool spec is invalid, ``workers > 1`` with a message-based (LLM) backend,
            ``reword`` mode with a backend that cannot reword, the source lacks a feature the
            backend requires, or the selection holds no scenario.
        UnknownBackendError: ``config.backend`` is not registered or cannot be imported.
        VariantError: the variant file is invalid.
        FileNotFoundError: ``config.variants_path`` is not a file.
    """
    errs = config.check()
    if errs:
        raise GenerationError("invalid generation settings:\n" + "\n".join(f"- {e}" for e in errs), errs)
    out = Path(config.out)
    state = check_output_dir(out, config.identity())
    if corpus is None:
        corpus = load_corpus(config.star)
    if config.tasks:
        unknown = [t for t in config.tasks if t not in corpus.tasks]
        if unknown:
            raise GenerationError(
                f"unknown task(s) {unknown}; the source's tasks are: {', '.join(sorted(corpus.tasks))}",
                [f"unknown task {t!r}" for t in unknown],
            )
    _refuse_watch_only(corpus, config)
    if config.kb_tools:
        from ..backends import backend_class

        cls = type(backend) if backend is not None else backend_class(config.backend)
        if not callable(getattr(cls, "bind_tools", None)):
            raise GenerationError(
                f"--kb-tools: the {getattr(backend, 'name', config.backend)} backend cannot call "
                "tools (the template backend's query outcomes come from the source already; the "
                "transformers backend has no tool loop); use --backend openai or drop --kb-tools",
                ["kb_tools needs a backend that calls tools"],
            )
    if backend is None:
        from ..backends import get_backend

        backend = get_backend(config.backend, **config.backend_options)
    if config.workers > 1 and getattr(backend, "uses_messages", True):
        raise GenerationError(
            f"--workers {config.workers}: worker processes are for the template backend; an LLM "
            f"backend ({getattr(backend, 'name', config.backend)}) batches requests itself (raise "
            "--batch-size) and scales over devices with accelerate shards (generation.distributed)"
        )
    if config.prefix_mode == "reword" and not getattr(backend, "rewords", False):
        raise GenerationError(
            f"prefix mode 'reword' needs a backend that rewords its prefixes on request (the "
            f"template, transformers and openai backends do); {getattr(backend, 'name', config.backend)}"
            " does not (no `rewords = True`): use --prefix-mode replay"
        )
    try:  # the source must have what the backend needs (every task: WIC borrows other tasks' workflows)
        for feature in getattr(backend, "requires", ()):
            require(corpus, feature, needed_by=f"the {getattr(backend, 'name', config.backend)} backend")
    except SourceError as e:
        raise GenerationError(str(e), e.errors) from e
    if config.kb_tools:
        from ..kb_tools import KBExecutor, ToolSpecError

        try:
            backend.bind_tools(KBExecutor(corpus, config.tasks))
        except ToolSpecError as e:
            raise GenerationError(f"--kb-tools: {e}", [str(e)]) from e
    if config.check_conformance:  # an unknown or broken check fails before any generation
        from ..conformance import load_check

        load_check(config.check_conformance)
    ctx = make_context(corpus, config, backend)
    units = plan_units(corpus, config, scenarios)
    if not units:
        raise GenerationError("the selection holds no scenario (check --tasks / --happy-only)")
    _say_skipped_types(ctx, corpus, config, len(units))
    return corpus, units, backend, ctx, state


def _say_skipped_types(ctx: Any, corpus: Any, config: GenerationConfig, n_units: int) -> None:
    """A one-task source cannot fork the types that follow another task's workflow (WIC): one log
    line with the count of forks it skips (a compound plan that needs one is refused)."""
    from .units import single_fork_skips

    skipped, per_source = single_fork_skips(ctx)
    if not skipped:
        return
    only = next(iter(corpus.tasks), "?")
    where = getattr(corpus, "path", config.star)
    if config.compound:
        bad = sorted({h for h, _ in config.compound if h in skipped})
        if bad:
            raise GenerationError(
                f"{where}: the compound plan's {', '.join(bad)} follows another task's workflow, and the "
                f"source has one task ({only!r}): add a second task to the workflow file, or drop {', '.join(bad)} "
                "from --compound"
            )
        return
    logger.warning(
        "%s: one task (%r) in the source: %s forks follow another task's workflow and are skipped, %d fewer "
        "forks per source (%d in all; %d forks per source made); add a second task to the workflow file "
        "to make them",
        where,
        only,
        "/".join(skipped),
        per_source,
        per_source * n_units,
        forks_per_source() - per_source,
    )


def _refuse_watch_only(corpus: Any, config: GenerationConfig) -> None:
    """A workflow file's task with no scenarios or no ``length_budget`` (a file for watching only)
    cannot be generated: one line naming the file, the task(s) and what to add."""
    notes = getattr(corpus, "notes", None)
    watch = getattr(corpus, "watch_only_tasks", None)
    if not callable(watch):
        return
    wanted = set(config.tasks or corpus.tasks)
    bad = [t for t in watch() if t in wanted]
    if not bad:
        return
    lines = [n for n in (notes() if callable(notes) else []) if any(f"task {t!r}" in n for t in bad)]
    others = [t for t in corpus.tasks if t not in bad]
    pick = f" (or pick the others with --tasks {','.join(others)})" if others and not config.tasks else ""
    raise GenerationError(
        f"{getattr(corpus, 'path', config.star)}: task(s) {', '.join(bad)} cannot be generated: a file for "
        "watching only (no scenarios or no length_budget); add 'scenarios:' (each with its slot values) "
        f"and 'length_budget:' to the task to generate dialogues of it{pick}",
        lines or [f"task {t!r}: watching only" for t in bad],
    )


def generate_corpus(
    config: GenerationConfig,
    backend: Backend | None = None,
    scenarios: Iterable[Any] | None = None,
    shard_index: int = 0,
    num_shards: int = 1,
    progress: bool = True,
    corpus: Any = None,
    on_unit: Callable[[UnitResult], None] | None = None,
) -> Manifest | None:
    """Generate (or resume) shard ``shard_index`` of ``num_shards``; with one shard, also merge and
    return the :class:`Manifest`. With several shards it returns ``None``: call :func:`merge_shards`
    once every shard is done (e.g. on the main process after a barrier).

    Resumes an unfinished run of the same configuration in ``config.out``; a complete one is
    returned as is. A backend passed in is left open; one built here is closed at the end.

    Args:
        config: the run's configuration.
        backend: a backend object to use; ``None`` (default) builds ``config.backend``.
        scenarios: an explicit list of scenarios to generate; ``None`` (default) takes the source's.
        shard_index: this process's 0-based shard; it generates units ``shard_index``,
            ``shard_index + num_shards``, ... of the plan.
        num_shards: the number of shards (processes) of the run (default 1).
        progress: show tqdm progress bars (default ``True``): dialogues written and, for an LLM
            backend (``uses_messages``) in one process, the turns written so far.
        corpus: an already opened workflow source; ``None`` (default) opens ``config.star``.
        on_unit: called with each :class:`UnitResult` once it is on disk.

    Returns:
        The corpus's :class:`Manifest` with one shard (or when the corpus was already complete);
            ``None`` with several shards.

    Raises:
        GenerationError: ``shard_index``/``num_shards`` out of range, any problem :func:`prepare`
            finds, an unfinished run of a different plan or code in the folder (:func:`write_run_file`), a corrupt
            shard, ``workers > 1`` without the ``fork`` start method, or a merge refused
            (:func:`merge_shards`).
        RuntimeError: the backend misbehaved (:func:`generate_units`).
        FileNotFoundError: ``config.variants_path`` is not a file.
    """
    wall0 = time.perf_counter()
    owns_backend = backend is None
    if not (is_int(num_shards) and num_shards >= 1 and is_int(shard_index) and 0 <= shard_index < num_shards):
        raise GenerationError(f"shard {shard_index!r} of {num_shards!r}: need 0 <= shard_index < num_shards")
    corpus, units, backend, ctx, state = prepare(config, backend, scenarios, corpus)
    out = Path(config.out)
    if state == "complete":
        logger.info("%s: already complete (manifest.json matches this configuration); nothing to do", out)
        shutil.rmtree(out / SHARDS_DIR, ignore_errors=True)
        return Manifest.load(out)
    out.mkdir(parents=True, exist_ok=True)
    write_run_file(out, config, units, num_shards, ctx)
    spath = shard_path(out, shard_index, num_shards)
    done = read_shard(spath, truncate=True)
    mine = [u for u in units[shard_index::num_shards] if u.unit_id not in done]
    logger.info(
        "%s: %d scenario(s) in the plan, shard %d/%d holds %d; backend %s, %d worker(s)",
        out,
        len(units),
        shard_index,
        num_shards,
        len(units[shard_index::num_shards]),
        ctx.generator,
        config.workers,
    )
    if done:
        logger.info("%s: resuming, %d scenario(s) done, %d to go", spath.name, len(done), len(mine))
    check = None
    if config.check_conformance and mine:
        from ..conformance import load_check

        names = sorted({u.task for u in mine})
        check = load_check(config.check_conformance)().fit(corpus, names)
        logger.info("%s: every D+ checked with %s", out, config.check_conformance)
    writer = ShardWriter(spath)
    from tqdm.auto import tqdm

    from .units import single_fork_skips

    per_source = 1 + (1 if config.compound else forks_per_source() - single_fork_skips(ctx)[1])
    bs = config.batch_size
    batches = [mine[i : i + bs] for i in range(0, len(mine), bs)]
    pooled = config.workers > 1 and len(batches) > 1
    bar = tqdm(
        total=len(mine) * per_source,
        unit="dlg",
        desc=f"generate[{shard_index}]",
        disable=not progress,
        smoothing=0.05,
    )
    # An LLM takes seconds to minutes per lockstep step and a batch's dialogues all finish at its
    # end: a second bar counts the turns written so far (phase D+ or forks) so that work shows
    # before the first dialogue is done. Not for the template (milliseconds) nor worker processes.
    turns = tqdm(
        unit="turn",
        desc=f"turns[{shard_index}]",
        position=1,
        leave=False,
        smoothing=0.05,
        disable=not progress or pooled or not getattr(backend, "uses_messages", True),
    )

    def on_step(phase: str, n: int) -> None:
        turns.set_postfix_str(phase, refresh=False)
        turns.update(n)

    def consume(results: Iterable[UnitResult]) -> None:
        results = list(results)
        if check is not None:
            from ..conformance import apply_check

            apply_check(check, results)
        for r in results:
            writer.write_unit(r)
            bar.update(per_source)
            if on_unit is not None:
                on_unit(r)

    try:
        if pooled:
            import multiprocessing as mp

            _WORKER.update(ctx=ctx, backend=backend)
            mpctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else mp.get_context()
            if mpctx.get_start_method() != "fork":
                raise GenerationError("--workers > 1 needs the 'fork' start method (Linux/macOS)")
            with mpctx.Pool(config.workers) as pool:
                for res in pool.imap(_worker_run, batches):
                    consume(res)
        else:
            for b in batches:
                consume(generate_units(ctx, b, backend, None if turns.disable else on_step))
    finally:
        writer.close()
        turns.close()
        bar.close()
        close = getattr(backend, "close", None)
        if owns_backend and callable(close):  # a backend passed in belongs to the caller
            close()
    if num_shards > 1:
        return None
    return merge_shards(out, keep_shards=config.keep_shards, wall_seconds=time.perf_counter() - wall0)


__all__ = ["generate_corpus", "load_corpus", "prepare"]
