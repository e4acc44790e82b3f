"""Corpus-scale encoding across processes (and GPUs) with ``accelerate launch``.

``accelerate launch --multi_gpu --num_processes N -m dialfork_metrics.bench --data ... --cache-dir DIR``

(``--multi_gpu`` also on a machine without GPUs: the workers then form a gloo CPU group;
accelerate's ``--cpu`` flag always starts one process.) The same code runs for 1 or N processes:

1. every process lists the corpus's unique texts (the turns, the Full-dialog transcripts when
   Task 2 runs) and, for Task 1's FBD/PRD, its unique (system, user) pairs, per encoder model;
2. sorts them by length (longest first, ties by text) and cuts them into batches of the
   encoder's ``batch_size``: the *global* batches, the same for any number of processes;
3. deals the batches round-robin to the processes (batch ``i`` goes to process ``i % N``: a
   disjoint shard each, with balanced lengths), and each process encodes its own batches on its
   own device (``PartialState().device``: ``cuda:i`` under ``--multi_gpu``);
4. writes its rows to the embedding disk cache as **one** new shard file (temporary name, then
   rename: the cache's atomic append; concurrent writers never clash); the cache folder is the
   union of the shards, so the merge is atomic per process and needs no lock;
5. after a barrier, the main process runs the benchmark, which reads every embedding from the
   disk cache; the other processes are done.

This module holds the steps that do not depend on the benchmark; the benchmark's own step (which
encoders, which texts) is :func:`dialfork_metrics.bench.sharded.sharded_bench_encoding`, which
imports this module.

Since each batch holds the same texts in the same order whatever the number of processes, each
embedding is computed by the same forward pass, and the results are identical to 1 process
(tests/test_bench_sharded.py compares the reports of 1 and 2 CPU processes exactly). A batch
whose rows are all in the cache already is skipped (a resumed or repeated run encodes nothing).

Without ``--cache-dir`` the main process makes a temporary folder, tells the others its path, and
removes it when the benchmark is done. Several machines need ``--cache-dir`` on a file system all
of them see.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

#: Environment variables that ``accelerate launch`` (and ``torchrun``) set in every worker process.
LAUNCH_ENV = ("ACCELERATE_MIXED_PRECISION", "ACCELERATE_USE_CPU", "LOCAL_RANK", "WORLD_SIZE")
DEFAULT_BARRIER_TIMEOUT = 24 * 3600.0


def launched_by_accelerate(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process was started by ``accelerate launch``/``torchrun`` (1 process or more).

    Args:
        environ: The environment to read; None (default) reads ``os.environ``.

    Returns:
        True when any of :data:`LAUNCH_ENV` is set.
    """
    env = os.environ if environ is None else environ
    return any(k in env for k in LAUNCH_ENV)


def process_state(barrier_timeout: float = DEFAULT_BARRIER_TIMEOUT):
    """This process's ``accelerate.PartialState`` (a gloo group on CPUs, NCCL on GPUs).

    The CPU is used when ``ACCELERATE_USE_CPU`` is true, or when ``WORLD_SIZE`` is above 1 and
    no GPU is available.

    Args:
        barrier_timeout: Seconds a collective (a barrier) may wait for the other processes
            (default 24 h).

    Returns:
        The process state (``process_index``, ``num_processes``, ``device``, ...).
    """
    import torch
    from accelerate import PartialState

    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    cpu = os.environ.get("ACCELERATE_USE_CPU", "false").lower() in ("1", "true", "yes") or (
        world > 1 and not torch.cuda.is_available()
    )
    return PartialState(cpu=cpu, timeout=timedelta(seconds=barrier_timeout))


def is_worker_process(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this is a launched process other than the main one (``RANK`` > 0 under
    ``accelerate launch``/``torchrun``).

    Args:
        environ: The environment to read; None (default) reads ``os.environ``.

    Returns:
        True when the environment has a launcher's variables (:func:`launched_by_accelerate`) and
        an integer ``RANK`` above 0; False otherwise (also for a ``RANK`` that is not an integer).
    """
    env = os.environ if environ is None else environ
    if not launched_by_accelerate(env):
        return False
    try:
        return int(env.get("RANK", "0") or 0) > 0
    except ValueError:
        return False


def exit_worker(code: int = 0) -> None:
    """End a worker process (not the main one) at once, without interpreter finalisation.

    A gloo process group's C++ threads can still hold objects when the interpreter is torn down,
    even after ``destroy_process_group()``; destroying them then aborts the process
    ("terminate called without an active exception", SIGABRT; pytorch/pytorch#179291 describes
    the teardown race). The worker's work is done by then: its shard files are renamed into place
    before the collective that ends the sharded step. So its logs and streams are flushed and it
    leaves with ``os._exit``; the main process, which runs the benchmark and removes the
    temporary cache at exit, ends normally.

    Args:
        code: The exit status.
    """
    import sys

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can be said
            pass
    os._exit(int(code))


# ----------------------------------------------------------------------------- pure parts
def unique_by_length(items: Sequence[Any], length: Callable[[Any], int]) -> list[Any]:
    """The distinct ``items``, longest first, ties in sorted order: a fixed order for any input order.

    Args:
        items: Hashable, sortable items (texts, or pairs of texts).
        length: The length of an item (e.g. ``len``).

    Returns:
        The distinct items, by decreasing length, then ascending.
    """
    return sorted(dict.fromkeys(items), key=lambda x: (-length(x), x))


def global_batches(items: Sequence[Any], batch_size: int) -> list[list[Any]]:
    """``items`` cut into consecutive batches of ``batch_size`` (the last one shorter).

    Args:
        items: The items, in order.
        batch_size: Items per batch (an integer >= 1).

    Returns:
        The batches; empty for no items.

    Raises:
        ValueError: ``batch_size`` is not a positive integer.
    """
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    return [list(items[s : s + batch_size]) for s in range(0, len(items), batch_size)]


def my_batches(n_batches: int, process_index: int, num_processes: int) -> list[int]:
    """Indices of the batches of process ``process_index`` of ``num_processes``: round-robin, so
    that each process gets long and short batches alike; disjoint, and together all of them.

    Args:
        n_batches: Number of global batches.
        process_index: This process's index (0-based).
        num_processes: Number of processes.

    Returns:
        ``process_index, process_index + num_processes, ...`` below ``n_batches``.

    Raises:
        ValueError: ``num_processes < 1`` or ``process_index`` is not in ``[0, num_processes)``.
    """
    if num_processes < 1 or not 0 <= process_index < num_processes:
        raise ValueError(
            f"process {process_index} of {num_processes}: expected 0 <= index < num_processes >= 1"
        )
    return list(range(process_index, n_batches, num_processes))


def corpus_texts(records: Sequence[Any], transcripts: bool) -> list[str]:
    """Every turn text of ``records`` and, when ``transcripts``, every Full-dialog transcript:
    the texts :func:`dialfork_metrics.bench.prepare_encoder` encodes.

    Args:
        records: The corpus's dialogues.
        transcripts: Also list each dialogue's transcript (when Task 2 runs).

    Returns:
        The texts, turn texts first (with repeats; see :func:`unique_by_length`).
    """
    from dialfork_dataset.turns import transcript, turn_texts

    out = [t for d in records for t in turn_texts(d)]
    if transcripts:
        out.extend(transcript(d) for d in records)
    return out


def corpus_pairs(records: Sequence[Any]) -> list[tuple[str, str]]:
    """Every (system, user) turn pair of ``records``: what FBD and PRD encode in Task 1.

    Args:
        records: The corpus's dialogues.

    Returns:
        The ``(system turn, user turn)`` pairs (with repeats).
    """
    from .pair_encoder import set_turn_pairs

    return set_turn_pairs(list(records), "system_user", "corpus")


# ----------------------------------------------------------------------------- encoding
def encode_shard_texts(encoder: Any, texts: Sequence[str], state: Any, progress: bool = True) -> int:
    """Encode this process's shard of ``texts`` with ``encoder`` (an :class:`~.encoders.Encoder`
    with a ``cache_dir``) into its disk cache, as one atomic shard file. Returns the rows written.

    The texts are made unique and cut into global batches (:func:`global_batches`); this process
    encodes its batches (:func:`my_batches`), skipping a batch whose rows are all cached.

    Args:
        encoder: The encoder, with a disk cache.
        texts: Every text to encode (all processes pass the same).
        state: This process's state (:func:`process_state`: ``process_index``,
            ``num_processes``, ``is_local_main_process``).
        progress: Show a progress bar on the local main process (default True).

    Returns:
        The number of rows written to the cache (0 when every batch was cached).

    Raises:
        ValueError: The encoder has no disk cache.
    """
    from .encoders.cache import _text_key

    batches = global_batches(unique_by_length(texts, len), encoder.batch_size)
    return _encode_shard(encoder, batches, state, lambda b: encoder.encode(b), _text_key, "texts", progress)


def encode_shard_pairs(
    pair_encoder: Any, pairs: Sequence[tuple[str, str]], state: Any, progress: bool = True
) -> int:
    """As :func:`encode_shard_texts`, for the (first, second) pairs of a
    :class:`~.pair_encoder.PairEncoder` with a ``cache_dir``.

    Args:
        pair_encoder: The pair encoder, with a disk cache.
        pairs: Every ``(first, second)`` pair to encode (all processes pass the same); a pair's
            length is the sum of its two texts' lengths.
        state: This process's state (:func:`process_state`).
        progress: Show a progress bar on the local main process (default True).

    Returns:
        The number of rows written to the cache.

    Raises:
        ValueError: The pair encoder has no disk cache.
    """
    from .pair_encoder import _pair_key

    batches = global_batches(
        unique_by_length(pairs, lambda p: len(p[0]) + len(p[1])), pair_encoder.batch_size
    )
    return _encode_shard(
        pair_encoder,
        batches,
        state,
        lambda b: pair_encoder.encode_pairs([a for a, _ in b], [s for _, s in b]),
        lambda p: _pair_key(*p),
        "pairs",
        progress,
    )


def _encode_shard(
    enc: Any,
    batches: list[list[Any]],
    state: Any,
    encode: Callable[[list[Any]], np.ndarray],
    key: Callable[[Any], bytes],
    what: str,
    progress: bool,
) -> int:
    disk = getattr(enc, "_disk", None)
    if disk is None:
        raise ValueError("sharded encoding needs an encoder with a disk cache (cache_dir=...)")
    mine = my_batches(len(batches), state.process_index, state.num_processes)
    keys: list[bytes] = []
    rows: list[np.ndarray] = []
    from tqdm.auto import tqdm

    from dialfork_dataset.console import progress_disabled

    n_items = sum(len(batches[i]) for i in mine)
    logger.info(
        "process %d/%d: %d of %d batches of %s (%d items)",
        state.process_index,
        state.num_processes,
        len(mine),
        len(batches),
        what,
        n_items,
    )
    enc._disk = None  # one shard file per process at the end, not one per batch
    try:
        with tqdm(
            total=n_items,
            desc=f"encoding {what} (process {state.process_index})",
            unit=what[:-1],
            disable=not progress or progress_disabled() or not state.is_local_main_process,
        ) as bar:
            for i in mine:
                batch = batches[i]
                bkeys = [key(x) for x in batch]
                if len(disk.get(bkeys)) < len(bkeys):  # a whole batch, so that it is the same forward pass
                    keys.extend(bkeys)
                    rows.append(np.asarray(encode(batch), dtype=np.float32))
                bar.update(len(batch))
    finally:
        enc._disk = disk
    if keys:
        disk.put(keys, np.concatenate(rows))
    return len(keys)


def all_ok(state: Any, error: BaseException | None, error_class: type[Exception] = RuntimeError) -> None:
    """A collective: raise in every process if any of them failed (no process waits forever).

    Args:
        state: The process state (:func:`process_state`).
        error: This process's error, or None.
        error_class: What the other processes raise, naming the failed ones.

    Raises:
        BaseException: ``error`` in the process that failed; ``error_class`` in the others.
    """
    msg = None if error is None else f"process {state.process_index}: {type(error).__name__}: {error}"
    if state.num_processes > 1:
        from accelerate.utils import gather_object

        msgs = [m for m in gather_object([msg]) if m]
    else:
        msgs = [msg] if msg else []
    if msgs:
        if error is not None:
            raise error
        raise error_class("sharded encoding failed in another process: " + "; ".join(msgs))


def broadcast(state: Any, value: Any) -> Any:
    """The main process's ``value`` in every process (``value`` itself with one process).

    Args:
        state: The process state (:func:`process_state`).
        value: A picklable value; only the main process's is kept.

    Returns:
        The main process's value.
    """
    if state.num_processes == 1:
        return value
    from accelerate.utils import broadcast_object_list

    return broadcast_object_list([value], from_process=0)[0]


__all__ = [
    "all_ok",
    "broadcast",
    "corpus_pairs",
    "corpus_texts",
    "encode_shard_pairs",
    "encode_shard_texts",
    "exit_worker",
    "global_batches",
    "is_worker_process",
    "launched_by_accelerate",
    "my_batches",
    "process_state",
    "unique_by_length",
]
