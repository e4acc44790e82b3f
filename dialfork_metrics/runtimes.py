"""Encoder runtimes: the transformer forward pass under torch (default) or onnxruntime.

``Encoder(..., runtime=...)`` and ``PairEncoder(..., runtime=...)`` choose how the transformer of a
sentence-transformers model is run:

- ``"torch"`` (default): the model as loaded, ``SentenceTransformer.encode``.
- ``"onnx"``: the same transformer exported to ONNX (fp32) from the loaded model's own weights
  (``torch.onnx.export``, eager attention, opset :data:`ONNX_OPSET`, dynamic batch and sequence
  axes; no network), run with ``onnxruntime`` on the CPU. Only the transformer is exported: the
  tokenizer and the modules after it (pooling, dense, normalise) are the sentence-transformers
  ones, so the pipeline is unchanged. The export is checked against the torch forward on probe
  texts when it is made (max abs difference of the hidden states <= :data:`EXPORT_ATOL`, else
  ``ValueError``) and cached on disk under :func:`onnx_cache_dir`, keyed by the model (its
  configuration and a hash of its weights) and the exporter (this module's
  :data:`EXPORTER_VERSION`, torch's version and the opset); a finished file is written atomically
  (temporary file + rename), so concurrent processes never read half a model.
- ``"onnx-int8"``: the ONNX export with dynamic int8 quantisation of its weights
  (``onnxruntime.quantization.quantize_dynamic``). Opt-in: values drift
  (``benchmarks/bench_encoder_runtime.py`` reports by how much on Tasks 1-3).

``dtype="bf16"|"fp16"`` (CUDA only, torch runtime) casts the loaded model to half precision.
Non-default runtimes and dtypes are part of the embedding disk-cache key, so caches never mix.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import warnings
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dialfork_dataset.atomic import atomic_path

logger = logging.getLogger(__name__)

RUNTIMES = ("torch", "onnx", "onnx-int8")
DTYPES = ("fp32", "bf16", "fp16")
#: Bump when the export code changes: part of the on-disk key of every exported model.
EXPORTER_VERSION = "1"
ONNX_OPSET = 17
#: Largest abs difference of the hidden states (torch vs onnx fp32) accepted at export time.
EXPORT_ATOL = 1e-4
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_PROBE = [
    "Hello, how can I help you today?",
    "I would like to book a table for two at seven tonight, please.",
    "ok",
    "What is the name and the address of the restaurant?",
]


def check_runtime(runtime: Any) -> str:
    """``runtime`` if it is one of :data:`RUNTIMES` (and, for an onnx runtime, onnxruntime is installed).

    Args:
        runtime: ``"torch"``, ``"onnx"`` or ``"onnx-int8"``.

    Returns:
        ``runtime``.

    Raises:
        ValueError: An unknown runtime (the message lists them), or an onnx runtime without
            onnxruntime installed.
    """
    if runtime not in RUNTIMES:
        raise ValueError(f"unknown encoder runtime {runtime!r}; expected one of {', '.join(RUNTIMES)}")
    if runtime != "torch":
        try:
            import onnxruntime  # noqa: F401
        except ImportError as e:
            raise ValueError(
                f"runtime={runtime!r} needs onnxruntime and onnx: pip install 'dialfork[onnx]'"
            ) from e
    return runtime


def check_dtype(dtype: Any, runtime: str, device: Any) -> str | None:
    """The dtype to cast an encoder to: ``"bf16"``/``"fp16"`` only with the torch runtime on CUDA.

    Args:
        dtype: ``None``, ``"fp32"``, ``"bf16"`` or ``"fp16"``.
        runtime: The encoder's runtime.
        device: The encoder's device (None: automatic).

    Returns:
        ``None`` for ``None``/``"fp32"`` (no cast), else ``dtype``.

    Raises:
        ValueError: An unknown dtype, a half dtype with an onnx runtime or on a non-CUDA device.
    """
    if dtype is None or dtype == "fp32":
        return None
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)} (or None)")
    if runtime != "torch":
        raise ValueError(
            f"dtype={dtype!r} is for runtime='torch' on CUDA; runtime={runtime!r} is fp32/int8 on the CPU"
        )
    if device is not None and not str(device).startswith("cuda"):
        raise ValueError(
            f"dtype={dtype!r} needs a CUDA device, got device={device!r}; use dtype=None on the CPU"
        )
    return dtype


def cast_model(st_model: Any, dtype: str | None) -> Any:
    """Cast a loaded model to ``dtype`` (``"bf16"``/``"fp16"``); it must sit on a CUDA device.

    Args:
        st_model: A loaded sentence-transformers model.
        dtype: ``"bf16"``, ``"fp16"`` or ``None`` (no cast).

    Returns:
        The model, cast.

    Raises:
        ValueError: A half dtype for a model that is not on a CUDA device.
    """
    if dtype is None:
        return st_model
    import torch

    device = next(st_model.parameters()).device
    if device.type != "cuda":
        raise ValueError(
            f"dtype={dtype!r} needs a CUDA device but the model is on {device}; "
            "pass device='cuda' on a GPU machine or dtype=None"
        )
    return st_model.to({"bf16": torch.bfloat16, "fp16": torch.float16}[dtype])


def cache_key_suffix(runtime: str, dtype: str | None) -> str:
    """What a non-default runtime/dtype adds to an embedding disk-cache key.

    Args:
        runtime: The encoder's runtime.
        dtype: The encoder's dtype (None: fp32).

    Returns:
        ``"|runtime=...|dtype=..."`` parts, ``""`` for torch in fp32.
    """
    return (f"|runtime={runtime}" if runtime != "torch" else "") + (f"|dtype={dtype}" if dtype else "")


def onnx_cache_dir() -> Path:
    """Folder of exported models: ``$DIALFORK_ONNX_CACHE``, else ``~/.cache/dialfork/onnx``.

    Returns:
        The folder's path (not created).
    """
    env = os.environ.get("DIALFORK_ONNX_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "dialfork" / "onnx"


def model_fingerprint(auto_model: Any) -> str:
    """sha256 over the model's configuration, every weight's bytes and the exporter's version
    (this module's, torch's, the opset): the same weights give the same key under any name.

    Args:
        auto_model: A loaded ``transformers`` model.

    Returns:
        The first 24 hex digits of the hash.
    """
    import torch

    h = hashlib.sha256()
    h.update(f"exporter={EXPORTER_VERSION}|opset={ONNX_OPSET}|torch={torch.__version__}".encode())
    cfg = auto_model.config.to_dict() if hasattr(auto_model.config, "to_dict") else {}
    cfg = {
        k: v
        for k, v in cfg.items()
        if not k.startswith("_") and k not in ("transformers_version", "name_or_path")
    }
    h.update(json.dumps(cfg, sort_keys=True, default=str).encode())
    for k, v in auto_model.state_dict().items():
        h.update(k.encode())
        h.update(v.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()[:24]


def _export(auto_model: Any, input_names: list[str], path: Path) -> None:
    """Export ``auto_model``'s ``last_hidden_state`` to ``path`` (fp32, eager attention)."""
    import copy

    import torch

    model = copy.deepcopy(auto_model).to("cpu", torch.float32).eval()
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation("eager")  # the SDPA path exports with wrong masking
    else:  # pragma: no cover - older transformers
        model.config._attn_implementation = "eager"

    class Wrapper(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, *args):
            return self.m(**dict(zip(input_names, args))).last_hidden_state

    ids = torch.tensor([[101, 7592, 2045, 102], [101, 2469, 102, 0]], dtype=torch.long)
    example = {"input_ids": ids, "attention_mask": (ids != 0).long(), "token_type_ids": torch.zeros_like(ids)}
    args = tuple(example[n] for n in input_names)
    axes = {n: {0: "batch", 1: "sequence"} for n in [*input_names, "last_hidden_state"]}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            Wrapper(model).eval(),
            args,
            str(path),
            input_names=input_names,
            output_names=["last_hidden_state"],
            dynamic_axes=axes,
            opset_version=ONNX_OPSET,
            dynamo=False,
        )


class OnnxTransformer:
    """A transformer's forward pass (``last_hidden_state``) in an onnxruntime session.
    Callable like the torch model on a batch of torch tensors (``input_ids``, ``attention_mask``,
    ``token_type_ids``), returning an object with ``.last_hidden_state`` (a torch tensor), so that
    code written for the torch model runs unchanged; :meth:`run` takes and returns numpy arrays.

    The model is exported once (checked against the torch forward) into the export cache, keyed by
    :func:`model_fingerprint`, and quantised there for int8.

    Args:
        auto_model: The loaded ``transformers`` model.
        name: The model's name (in messages).
        int8: Run the dynamically quantised int8 export.
        cache_dir: The export cache (None: :func:`onnx_cache_dir`).
        threads: onnxruntime's intra-op threads (None: torch's thread count).

    Raises:
        ValueError: The export differs from the torch forward by more than ``EXPORT_ATOL``.
    """

    training = False

    def __init__(
        self,
        auto_model: Any,
        name: str,
        int8: bool = False,
        cache_dir: str | os.PathLike | None = None,
        threads: int | None = None,
    ):
        import inspect

        import onnxruntime as ort
        import torch

        accepted = set(inspect.signature(auto_model.forward).parameters)
        self.input_names = [n for n in _INPUTS if n in accepted]
        self.name = name
        self.int8 = int8
        root = Path(cache_dir).expanduser() if cache_dir is not None else onnx_cache_dir()
        fp = model_fingerprint(auto_model)
        slug = "".join(c if c.isalnum() or c in "._-" else "_" for c in str(auto_model.config.model_type))[
            -40:
        ]
        self.path = root / f"{slug}-{fp}" / ("model-int8.onnx" if int8 else "model.onnx")
        fp32 = self.path.with_name("model.onnx")
        if not fp32.is_file():
            logger.info("exporting %s to ONNX (%s)", name, fp32)
            with atomic_path(fp32, suffix=".onnx") as tmp:
                _export(auto_model, self.input_names, tmp)
                self._check(auto_model, tmp)
        if int8 and not self.path.is_file():
            from onnxruntime.quantization import QuantType, quantize_dynamic

            logger.info("quantising %s to int8 (%s)", name, self.path)
            with atomic_path(self.path, suffix=".onnx") as tmp, warnings.catch_warnings():
                warnings.simplefilter("ignore")
                logging.disable(logging.WARNING)  # the quantiser logs every tensor on the root logger
                try:
                    quantize_dynamic(str(fp32), str(tmp), weight_type=QuantType.QInt8)
                finally:
                    logging.disable(logging.NOTSET)
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.intra_op_num_threads = int(threads or torch.get_num_threads())
        so.log_severity_level = 3
        self.session = ort.InferenceSession(str(self.path), so, providers=["CPUExecutionProvider"])
        self._dummy = torch.zeros(1)

    def _check(self, auto_model: Any, path: Path) -> None:
        """Compare the export with the torch forward on probe texts (padded batch)."""
        import onnxruntime as ort
        import torch
        from transformers import AutoTokenizer

        try:
            tok = AutoTokenizer.from_pretrained(
                getattr(auto_model.config, "_name_or_path", None) or self.name
            )
            feats = tok(_PROBE, padding=True, return_tensors="pt")
        except (OSError, ValueError, TypeError):
            gen = torch.Generator().manual_seed(0)
            ids = torch.randint(1000, min(auto_model.config.vocab_size, 20000), (3, 12), generator=gen)
            feats = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
            feats["attention_mask"][1, 7:] = 0
        feats = {n: feats[n] for n in self.input_names if n in feats}
        if "token_type_ids" in self.input_names and "token_type_ids" not in feats:
            feats["token_type_ids"] = torch.zeros_like(feats["input_ids"])
        was = auto_model.training
        auto_model.eval()
        try:
            with torch.no_grad():
                dev = next(auto_model.parameters()).device
                ref = (
                    auto_model(**{k: v.to(dev) for k, v in feats.items()})
                    .last_hidden_state.float()
                    .cpu()
                    .numpy()
                )
        finally:
            auto_model.train(was)
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        got = sess.run(None, {k: v.numpy() for k, v in feats.items()})[0]
        mask = feats["attention_mask"].numpy().astype(bool)
        diff = float(np.abs(got - ref)[mask].max())
        if not diff <= EXPORT_ATOL:
            raise ValueError(
                f"the ONNX export of {self.name} differs from torch by {diff:.3g} (> {EXPORT_ATOL}); "
                "use runtime='torch' for this model"
            )
        logger.info("ONNX export of %s: max abs diff to torch %.3g", self.name, diff)

    # the parts of the torch.nn.Module interface that the pair encoder uses
    def parameters(self):
        """A dummy CPU tensor (the part of ``torch.nn.Module.parameters`` callers use: the device).

        Yields:
            One zero tensor.
        """
        yield self._dummy

    def eval(self):
        """No-op (``torch.nn.Module.eval``): the session has no training mode.

        Returns:
            The runner itself.
        """
        return self

    def train(self, mode: bool = True):
        """No-op (``torch.nn.Module.train``): the session has no training mode.

        Args:
            mode: Ignored.

        Returns:
            The runner itself.
        """
        return self

    def run(self, features: dict[str, Any]) -> np.ndarray:
        """``last_hidden_state`` of a tokenized batch.

        Args:
            features: The tokenizer's output (numpy arrays or torch tensors): ``input_ids``,
                ``attention_mask`` and, for models that take it, ``token_type_ids`` (zeros when
                missing).

        Returns:
            float32 ``(batch, seq, hidden)``.

        Raises:
            ValueError: The batch lacks an input the model needs.
        """
        feed = {}
        for n in self.input_names:
            v = features.get(n)
            if v is None:
                if n != "token_type_ids":
                    raise ValueError(f"ONNX runtime: the batch has no {n!r}")
                v = np.zeros_like(np.asarray(features["input_ids"]))
            v = v.numpy() if hasattr(v, "numpy") else np.asarray(v)
            feed[n] = v.astype(np.int64, copy=False)
        return self.session.run(None, feed)[0]

    def __call__(self, **features: Any):
        import torch

        class Out:
            pass

        out = Out()
        out.last_hidden_state = torch.from_numpy(self.run({k: v.cpu() for k, v in features.items()}))
        return out


def st_encode(
    st_model: Any,
    runner: OnnxTransformer,
    texts: Sequence[str],
    batch_size: int = 64,
    prompt_name: str | None = None,
) -> np.ndarray:
    """What ``st_model.encode(texts, normalize_embeddings=False)`` returns, with the transformer
    run by ``runner``: the model's own tokenizer and its modules after the transformer.

    Args:
        st_model: The loaded sentence-transformers model.
        runner: Runs its transformer (:func:`runner_for`).
        texts: The texts.
        batch_size: Texts per forward pass (longest first).
        prompt_name: One of the model's prompts, prepended to every text (None: none).

    Returns:
        ``(len(texts), d)`` float32 embeddings (``(0, 0)`` for no text).

    Raises:
        ValueError: ``prompt_name`` is not one of the model's prompts, or the model's pooling
            excludes the prompt.
    """
    import torch

    modules = list(st_model)
    rest = modules[1:]
    if prompt_name is not None:
        prompts = getattr(st_model, "prompts", {}) or {}
        if prompt_name not in prompts:
            raise ValueError(f"prompt {prompt_name!r} is not in the model's prompts {sorted(prompts)}")
        if any(getattr(m, "include_prompt", True) is False for m in rest):
            raise ValueError("this model's pooling excludes the prompt: use runtime='torch' with prompt_name")
        prompt = prompts[prompt_name]
    else:
        prompt = None
    prep = getattr(st_model, "preprocess", None)  # sentence-transformers >= 6; tokenize before

    def tokenize(batch: list[str]) -> dict[str, Any]:
        if prep is not None:
            return prep(batch, prompt=prompt) if prompt else prep(batch)
        return st_model.tokenize([prompt + t for t in batch] if prompt else batch)

    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
    out: np.ndarray | None = None
    with torch.inference_mode():
        for s in range(0, len(order), batch_size):
            idx = order[s : s + batch_size]
            feats = tokenize([texts[i] for i in idx])
            feats = {k: v for k, v in feats.items() if isinstance(v, torch.Tensor)}
            feats["token_embeddings"] = torch.from_numpy(runner.run(feats))
            for m in rest:
                feats = m(feats)
            emb = feats["sentence_embedding"].float().numpy()
            if out is None:
                out = np.empty((len(texts), emb.shape[1]), dtype=np.float32)
            out[idx] = emb
    return out if out is not None else np.zeros((0, 0), dtype=np.float32)


_RUNNERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def runner_for(st_model: Any, name: str, runtime: str) -> OnnxTransformer:
    """The :class:`OnnxTransformer` of a loaded sentence-transformers model (one per model and
    runtime, shared by its :class:`Encoder` and :class:`PairEncoder`).

    Args:
        st_model: The loaded sentence-transformers model.
        name: The model's name (in messages and the export's folder).
        runtime: ``"onnx"`` or ``"onnx-int8"``.

    Returns:
        The runner, exported (or read from the export cache) on first use.

    Raises:
        ValueError: An unknown or the torch runtime, or a model whose first module is not a
            transformer.
    """
    check_runtime(runtime)
    if runtime == "torch":
        raise ValueError("runner_for is for the onnx runtimes")
    auto_model = getattr(st_model[0], "auto_model", None)
    if auto_model is None:
        raise ValueError(
            f"runtime={runtime!r} needs a transformer-based sentence-transformers model "
            f"(its first module {type(st_model[0]).__name__} has no auto_model)"
        )
    with _LOCK:
        per = _RUNNERS.setdefault(st_model, {})
        r = per.get(runtime)
        if r is None:
            r = per[runtime] = OnnxTransformer(auto_model, name, int8=runtime == "onnx-int8")
        return r


__all__ = [
    "DTYPES",
    "EXPORTER_VERSION",
    "ONNX_OPSET",
    "OnnxTransformer",
    "RUNTIMES",
    "check_dtype",
    "check_runtime",
    "onnx_cache_dir",
    "runner_for",
    "st_encode",
]
