"""Multi-process generation with ``accelerate``: one model copy per GPU (or CPU process), one shard each.

``accelerate launch --multi_gpu --num_processes N -m generation.distributed --backend transformers
--backend-option model=M ...`` runs the generation CLI (same options as ``python -m generation``) in N
processes, each handing the run to :func:`generate_distributed`, which

1. fixes the number of shards: the unfinished run's (from ``out/shards/run.json``, so a run can be
   resumed with a different number of processes) or ``num_shards`` or N;
2. deals the shards to the processes with ``PartialState().split_between_processes`` (contiguous
   blocks; with more shards than processes a process generates several, one after the other);
3. each process generates its shards with :func:`generation.engine.generate_corpus`, writing
   ``out/shards/shard-i-of-n.jsonl.part`` line by line; a killed process resumes its own shards;
4. a barrier; the main process merges the shards into the per-task files in canonical order and
   writes ``manifest.json`` (see :func:`generation.engine.merge_shards`); a second barrier, so every
   process returns the finished :class:`~generation.engine.Manifest`. Both barriers also carry a
   "did any process fail" flag: a failure is raised on every process instead of leaving the others
   waiting, and nothing is merged after a failed shard (rerun the command: it resumes).

Because scenarios are dealt to shards by their position in the canonical plan, the merge restores
the canonical order, and a dialogue's text does not depend on which other dialogues share its batch
(:mod:`generation.backends.hf`), 1 process and N processes write the same corpus for the same seeds.

A backend is placed on the process's device by its registry entry's ``placement``
(:attr:`generation.backends.BackendSpec.placement`): the transformers backend's,
:func:`~generation.backends.placement.place_on_process_device`, sets ``device`` to
``PartialState().device`` (``cuda:i`` under a multi-GPU launch) unless ``device`` is given in its
options. The barrier waits up to ``barrier_timeout`` seconds (default 7 days): shards can take very different times.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from datetime import timedelta
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

#: Environment variables set by ``accelerate launch`` / ``torchrun`` in every worker process.
LAUNCH_ENV = ("ACCELERATE_MIXED_PRECISION", "ACCELERATE_USE_CPU", "LOCAL_RANK", "WORLD_SIZE")
DEFAULT_BARRIER_TIMEOUT = 7 * 24 * 3600.0


def launched_distributed() -> bool:
    """Whether this process was started by ``accelerate launch``/``torchrun`` with more than one process.

    Returns:
        ``True`` when ``$WORLD_SIZE`` is an integer > 1 (an unset or non-integer value counts as 1).
    """
    try:
        world = int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        world = 1
    return world > 1


def process_state(cpu: bool | None = None, barrier_timeout: float = DEFAULT_BARRIER_TIMEOUT):
    """The ``accelerate.PartialState`` of this process (initialises the process group once).

    Args:
        cpu: force (``True``) or forbid (``False``) a CPU process group; ``None`` (default): the CPU
            when ``$ACCELERATE_USE_CPU`` is true, or when launched with several processes on a
            machine without CUDA.
        barrier_timeout: how long a collective (a barrier) may wait, in seconds (default 7 days).

    Returns:
        The ``PartialState`` (a shared singleton in ``accelerate``).
    """
    from accelerate import PartialState

    if cpu is None:
        import torch

        # accelerate only forms a multi-process CPU group (gloo) when asked for the CPU
        cpu = os.environ.get("ACCELERATE_USE_CPU", "false").lower() in ("1", "true", "yes") or (
            launched_distributed() and not torch.cuda.is_available()
        )
    return PartialState(cpu=cpu, timeout=timedelta(seconds=barrier_timeout))


def assign_shards(num_shards: int, state: Any) -> list[int]:
    """The shard indices this process generates: ``range(num_shards)`` split with
    ``state.split_between_processes`` (process 0 gets the first block).

    Args:
        num_shards: the run's shard count, integer >= 1.
        state: this process's ``PartialState``.

    Returns:
        This process's shard indices, a contiguous block (empty when there are fewer shards than
            processes and none is left for it).

    Raises:
        ValueError: ``num_shards`` is not an integer >= 1.
    """
    if not (isinstance(num_shards, int) and num_shards >= 1):
        raise ValueError(f"num_shards must be an integer >= 1, got {num_shards!r}")
    with state.split_between_processes(list(range(num_shards))) as mine:
        return list(mine)


def existing_num_shards(out: str | os.PathLike) -> int | None:
    """The shard count of an unfinished run in ``out`` (``None`` when there is none).

    Args:
        out: the output folder.

    Returns:
        ``num_shards`` of ``out/shards/run.json``; ``None`` when the file is missing, unreadable
            or holds no integer >= 1 there.
    """
    from .engine.shards import RUN_FILE, SHARDS_DIR

    p = Path(out) / SHARDS_DIR / RUN_FILE
    if not p.is_file():
        return None
    try:
        n = json.loads(p.read_text(encoding="utf-8"))["num_shards"]
    except (json.JSONDecodeError, KeyError, TypeError, OSError):
        return None  # the engine reports an unreadable run file with its own error
    return n if isinstance(n, int) and n >= 1 else None


def backend_options_for_process(config: Any, state: Any) -> dict[str, Any]:
    """``config.backend_options`` placed on this process's device by the backend's registered
    placement (:attr:`generation.backends.BackendSpec.placement`; the ``transformers`` backend's is
    :func:`~generation.backends.placement.place_on_process_device`).

    Args:
        config: the run's :class:`~generation.engine.GenerationConfig`.
        state: this process's ``PartialState``.

    Returns:
        A copy of the options, as the placement returns it; unchanged for a backend without a
            placement (or not registered: an object passed in).

    Raises:
        ValueError: the placement refuses the options (e.g. ``device_map`` for the transformers
            backend under several processes).
    """
    from .backends import BACKENDS

    opts = dict(config.backend_options)
    spec = BACKENDS.get(config.backend)
    if spec is None or spec.placement is None:
        return opts
    return spec.placement_fn()(opts, state)


def generate_distributed(
    config: Any,
    backend: Any = None,
    scenarios: Iterable[Any] | None = None,
    num_shards: int | None = None,
    progress: bool = True,
    state: Any = None,
    barrier_timeout: float = DEFAULT_BARRIER_TIMEOUT,
):
    """Generate ``config``'s corpus across the processes of an ``accelerate launch`` (or in this one
    process when not launched); every process returns the final :class:`~generation.engine.Manifest`.

    ``backend``: a ready backend for this process (default: built from ``config.backend`` and
    ``config.backend_options``, placed on this process's device). ``num_shards`` (default: the
    number of processes) is ignored when resuming an unfinished run, whose shard count is kept.

    Args:
        config: the run's configuration.
        backend: a ready backend for this process; ``None`` (default) builds one.
        scenarios: an explicit list of scenarios to generate; ``None`` (default) takes the source's.
        num_shards: the shard count of a new run; ``None`` (default): the number of processes.
        progress: show a progress bar on each machine's local main process (default ``True``).
        state: this process's ``PartialState``; ``None`` (default): :func:`process_state`.
        barrier_timeout: how long a barrier may wait, in seconds (default 7 days), when ``state``
            is built here.

    Returns:
        The finished corpus's :class:`~generation.engine.Manifest` (on every process).

    Raises:
        GenerationError: another process failed, or the main process could not merge the shards.
            An error of this process's own generation or merge (e.g. a ``GenerationError`` of
            :func:`~generation.engine.generate_corpus`) is re-raised as is, after the barrier.
        ValueError: the backend options cannot be placed (:func:`backend_options_for_process`).
    """
    from .backends import get_backend
    from .engine import Manifest, generate_corpus, merge_shards
    from .errors import GenerationError

    state = state if state is not None else process_state(barrier_timeout=barrier_timeout)
    out = Path(config.out)
    n = existing_num_shards(out) or num_shards or state.num_processes
    if existing_num_shards(out) and num_shards and num_shards != existing_num_shards(out):
        logger.warning(
            "%s: resuming an unfinished run of %d shards (ignoring num_shards=%d)",
            out,
            existing_num_shards(out),
            num_shards,
        )
    mine = assign_shards(n, state)
    if n < state.num_processes and not mine:
        logger.warning(
            "process %d has no shard (%d shards for %d processes)",
            state.process_index,
            n,
            state.num_processes,
        )
    error: BaseException | None = None
    try:
        if mine:
            if backend is None:
                backend = get_backend(config.backend, **backend_options_for_process(config, state))
            show = progress and state.is_local_main_process
            for i in mine:
                logger.info("process %d/%d: shard %d of %d", state.process_index, state.num_processes, i, n)
                # with n == 1 this also merges; merge_shards below then just loads the manifest
                generate_corpus(config, backend, scenarios, shard_index=i, num_shards=n, progress=show)
    except BaseException as e:  # noqa: BLE001 - re-raised below, after telling the other processes
        error = e
    # Every process reaches the barrier, even a failed one, so that nobody waits for the timeout;
    # the failure is then raised on that process and the others skip the merge.
    failed = _any_failed(state, error is not None)
    if error is not None:
        raise error
    if failed:
        raise GenerationError(
            f"{out}: another process failed (see its log); rerun the same command to resume"
        )
    if state.is_main_process:
        try:
            merge_shards(out, keep_shards=config.keep_shards)
        except BaseException as e:  # noqa: BLE001 - re-raised below, after telling the other processes
            error = e
    failed = _any_failed(state, error is not None)  # also the barrier before anyone reads the manifest
    if error is not None:
        raise error
    if failed:
        raise GenerationError(f"{out}: the main process could not merge the shards (see its log)")
    return Manifest.load(out)


def _any_failed(state: Any, failed_here: bool) -> bool:
    """Barrier that also tells every process whether any process failed."""
    if state.num_processes == 1:
        return failed_here
    import torch
    import torch.distributed as dist

    device = state.device if "nccl" in str(state.backend) else "cpu"
    flag = torch.tensor([1 if failed_here else 0], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def main(argv: list[str] | None = None) -> int:
    """``[accelerate launch ...] python -m generation.distributed``: the ``python -m generation`` CLI,
    run across the launched processes (also fine without a launcher: one process).

    Args:
        argv: the arguments without the program name; ``None`` (default) reads ``sys.argv``.

    Returns:
        The exit code: 0 on success (the main process prints the record counts), 2 for bad input or
            a failed run (a one-line message on stderr naming the process).
    """
    from .options import build_parser

    parser = build_parser()
    parser.prog = "accelerate launch [--multi_gpu --num_processes N] -m generation.distributed"
    args = parser.parse_args(argv)
    state = process_state()
    level = logging.DEBUG if args.verbose else logging.ERROR if args.quiet else logging.INFO
    logging.basicConfig(
        level=level, format=f"%(asctime)s %(levelname)s [{state.process_index}] %(name)s: %(message)s"
    )
    try:
        return _run(args, state)
    finally:
        # Tear the process group down before the interpreter exits: a gloo group left to the exit
        # handlers can abort a worker ("terminate called without an active exception", SIGABRT),
        # which fails a run whose corpus is already written.
        state.destroy_process_group()


def _run(args: Any, state: Any) -> int:
    """The body of :func:`main` once the process group is up: generate and print the counts."""
    import sys

    from .errors import GenerationError, UnknownBackendError
    from .options import build_config, hidden_split_selection, source_spec, task_names

    tasks = task_names(args)
    try:
        args.star = source_spec(args)  # --source star:PATH | workflow:PATH, --star PATH, $DIALFORK_STAR_DIR
        seed, scenarios, _ = hidden_split_selection(args, tasks)  # --hidden-key / --split (SPEC 4)
    except (GenerationError, ValueError, FileNotFoundError) as e:
        print(f"error [process {state.process_index}]: {e}", file=sys.stderr)
        return 2
    config = build_config(args, tasks, seed, workers=1)
    try:
        manifest = generate_distributed(
            config, scenarios=scenarios, progress=not (args.no_progress or args.quiet), state=state
        )
    except (GenerationError, UnknownBackendError, ValueError, RuntimeError) as e:
        print(f"error [process {state.process_index}]: {e}", file=sys.stderr)
        return 2
    if state.is_main_process:
        t = manifest.counts["total"]
        print(
            f"{t['records']} records ({t['conformant']} conformant, {t['forks']} forks; {t['dropped']} "
            f"scenario(s) dropped) from {state.num_processes} process(es) -> {args.out} (manifest.json)"
        )
    return 0


if __name__ == "__main__":
    import sys

    code = main()
    # Leave without the interpreter's teardown once everything is flushed: after the corpus is written
    # (atomically, every file closed) and the process group destroyed, the static destructors of
    # torch's gloo threads can still abort a worker ("terminate called without an active exception",
    # SIGABRT), failing a finished run; os._exit skips them.
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(code)


__all__ = [
    "assign_shards",
    "backend_options_for_process",
    "existing_num_shards",
    "generate_distributed",
    "launched_distributed",
    "main",
    "process_state",
]
