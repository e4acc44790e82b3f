"""The benchmark's step under ``accelerate launch``: which encoders and which texts of the corpus
the processes encode before the main one runs ``python -m dialfork_metrics.bench``. The generic
steps (batches, shards, collectives) are :mod:`dialfork_metrics.sharded`."""

from __future__ import annotations

import logging
import shutil
import tempfile
from typing import Any

from ..sharded import (
    all_ok,
    broadcast,
    corpus_pairs,
    corpus_texts,
    encode_shard_pairs,
    encode_shard_texts,
    launched_by_accelerate,
    process_state,
)
from .common import BenchError, _csv_list

logger = logging.getLogger("dialfork_metrics.sharded")


def sharded_bench_encoding(a: Any, pair: Any = None, state: Any = None) -> bool:
    """The ``accelerate launch`` step of ``python -m dialfork_metrics.bench``: encode the corpus of
    ``a.data`` for every encoder of the run across the processes into ``a.cache_dir`` (a temporary
    folder, set on ``a``, when none is given).

    Args:
        a: The parsed command line of the benchmark.
        pair: The Task 1 pair encoder(s), as ``--pair-encoder``: one name, or a name per set
            metric (None: the Task 1 encoder).
        state: The ``accelerate`` process state (None: read from the environment).

    Returns:
        Whether this process goes on to run the benchmark: ``True`` for the main process (and
        always when not launched), ``False`` for the others.
    """
    if state is None and not launched_by_accelerate():
        return True
    from ..encoders import Encoder, resolve_encoder_name
    from ..pair_encoder import PairEncoder
    from .corpus import load_corpus
    from .runner import _pair_encoder_names

    state = state or process_state()
    progress = not getattr(a, "quiet", False)
    tasks = {int(t) for t in _csv_list(a.tasks)}
    encoders = _csv_list(a.encoders)
    t1 = a.task1_encoder or (encoders[0] if encoders else None)
    texts_of: dict[str, tuple[str, bool]] = {}  # resolved name -> (name, transcripts)
    if 1 in tasks and t1:
        texts_of[resolve_encoder_name(t1)] = (t1, False)
    if tasks & {2, 3}:
        for e in encoders:
            r = resolve_encoder_name(e)
            texts_of[r] = (e, (2 in tasks) or texts_of.get(r, (e, False))[1])
    pairs_of: dict[str, str] = {}
    if 1 in tasks and t1:
        methods = set(_csv_list(a.task1_methods))
        for m, name in _pair_encoder_names(pair, t1).items():
            if m in methods:
                pairs_of.setdefault(resolve_encoder_name(name), name)

    temp = None
    if a.cache_dir is None:
        temp = tempfile.mkdtemp(prefix="dialfork-shard-cache-") if state.is_main_process else None
        a.cache_dir = broadcast(state, temp)
    error: BaseException | None = None
    try:
        records = load_corpus(a.data).records
        device = a.device
        if device is None and state.num_processes > 1 and str(state.device).startswith("cuda"):
            device = str(state.device)
        loaded: dict[str, Any] = {}

        def encoder(name: str) -> Any:
            r = resolve_encoder_name(name)
            if r not in loaded:
                loaded[r] = Encoder(
                    name,
                    device=device,
                    batch_size=a.batch_size,
                    cache_dir=a.cache_dir,
                    show_progress=False,
                    runtime=a.runtime,
                )
            return loaded[r]

        for name, transcripts in texts_of.values():
            n = encode_shard_texts(encoder(name), corpus_texts(records, transcripts), state, progress)
            logger.info("process %d: %d new embeddings of %s", state.process_index, n, name)
        for name in pairs_of.values():
            n = encode_shard_pairs(
                PairEncoder(encoder(name), show_progress=False), corpus_pairs(records), state, progress
            )
            logger.info("process %d: %d new pair embeddings of %s", state.process_index, n, name)
    except Exception as e:  # noqa: BLE001 - every process must learn of it (collective below)
        error = e
    all_ok(
        state, error, BenchError
    )  # also the barrier: every shard file is renamed into place before this returns
    if temp is not None:
        import atexit

        atexit.register(shutil.rmtree, temp, True)
    if state.num_processes > 1:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
    return bool(state.is_main_process)


__all__ = ["sharded_bench_encoding"]
