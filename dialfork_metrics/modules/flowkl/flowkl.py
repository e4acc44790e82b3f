"""FlowKL: a dialog-flow-aware distance between two *sets* of dialogues (DialFork, Task 1).

Thin ``evaluate.Metric`` over :func:`dialfork_metrics.flowgraph.flowkl`; all math and input
validation live in the ``dialfork`` library.
"""

import evaluate

from dialfork_metrics.flowgraph import flowkl  # From: dialfork
from dialfork_metrics.modules import (  # From: dialfork
    RejectEmpty,
    dialogue_set_features,
    encoder_id,
    metric_info,
    module_encoder,
)

_DESCRIPTION = """\
FlowKL compares a target set of dialogues with a reference set by how well each fits the
reference's dialog flow graph (DialFork, SPEC section 7). (1) All reference turns are embedded
and clustered per speaker (agglomerative, average linkage, cosine distance threshold 0.55); the
clusters are the graph's nodes. (2) Edges count the reference transitions (plus [start]/[end]);
P(b|a) = (count + 1) / (out(a) + V). Each turn maps to the nearest centroid of its speaker, and
a dialogue's flow likelihood L(D) is the geometric mean of its transition probabilities (by
default over the transitions that are edges of the graph). (3) FlowKL = KL(p_ref || p_tgt) of
the Gaussian KDEs (Scott's rule) of the two sets' likelihoods, on a 100-point grid. 0 when the
target set is the reference set; larger = the target deviates more from the reference flow.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of sets): the target sets, one set of dialogues per row.
    references (`list` of sets): the reference sets, same length; row i is compared with
        predictions row i. A dialogue is a list of turn strings (speakers alternate, starting
        with the user) or a list of `{"speaker": "user"|"system", "text": str}` dicts. Each set
        needs at least 2 dialogues.
Load-time options (`dialfork_metrics.load("flowkl", encoder=..., ...)`):
    encoder: an alias (`minilm` (default, packaged, offline), `d2f`, `sbert`, `labse`,
        `bge-m3`, `qwen3-embedding`, `embeddinggemma`, `dse`), a local sentence-transformers
        folder, a Hub id, or a `dialfork_metrics.Encoder`; evaluate's `config_name` is accepted
        as the encoder too.
    batch_size (`int`, default 64), device (`str`), embedding_cache_dir (`str`).
    distance_threshold (`float`, default 0.55): clustering cut (cosine distance).
    use_only_known_edges (`bool`, default True: the paper's reading; sdialog: False).
    node_confidence (`bool`, default False; sdialog: True): multiply each known-edge
        probability by the turn's node confidence (softmax over the 64 nearest centroids, tau 0.05).
    include_end (`bool`, default False): also count the last turn -> [end] transition.
    compat (`str` or None): "sdialog" reproduces sdialog 0.5.3's
        KDEDistanceEvaluator(DialogFlowScore(refs)) numbers for the same encoder.
Returns:
    flowkl (`float`): mean FlowKL over the rows (the value itself for one row).
    scores (`list` of `float`): FlowKL of each (reference set, target set) row.
    encoder (`str`): the encoder's portable model id (an alias's Hub id, e.g.
        `sentence-transformers/all-MiniLM-L6-v2` for `minilm`; `local:<folder>` for a local model).
Examples:
    >>> import dialfork_metrics
    >>> flowkl = dialfork_metrics.load("flowkl")  # encoder="minilm"
    >>> ref = [["Weather in Paris tomorrow?", "Which day?", "Tomorrow.", "Sunny in Paris tomorrow."],
    ...        ["Forecast for Rome?", "For which day?", "Today.", "Rome is rainy today."],
    ...        ["Will it rain in Oslo?", "Which day would you like?", "Friday.", "No rain in Oslo on Friday."]]
    >>> tgt = [["Weather in Paris tomorrow?", "Want to try co-living instead?", "What?", "It is great."],
    ...        ["Forecast for Rome?", "Can I interest you in our loyalty plan?", "No.", "Sign up today!"],
    ...        ["Will it rain in Oslo?", "Which day would you like?", "Friday.", "No rain in Oslo on Friday."]]
    >>> results = flowkl.compute(predictions=[ref, tgt], references=[ref, ref])
    >>> [round(s, 4) for s in results["scores"]]
    [0.0, 0.5757]
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Flowkl(RejectEmpty, evaluate.Metric):
    """FlowKL distance per (reference set, target set) row, and its mean."""

    _module, _row = "flowkl", "(reference set, target set) row, each set a list of at least 2 dialogues"

    def __init__(
        self,
        encoder=None,
        batch_size=64,
        device=None,
        embedding_cache_dir=None,
        distance_threshold=0.55,
        use_only_known_edges=None,
        node_confidence=None,
        include_end=False,
        compat=None,
        **kwargs,
    ):
        # set before super().__init__, which calls _info(); unknown aliases fail here
        self.encoder = module_encoder(
            encoder, kwargs.get("config_name"), batch_size, device, embedding_cache_dir
        )
        if compat not in (None, "sdialog"):
            raise ValueError(f"flowkl: unknown compat {compat!r}; expected None or 'sdialog'")
        self.flowkl_options = {
            "distance_threshold": float(distance_threshold),
            "use_only_known_edges": use_only_known_edges,
            "node_confidence": node_confidence,
            "include_end": bool(include_end),
            "compat": compat,
        }
        super().__init__(**kwargs)

    def _info(self):
        return metric_info(
            _DESCRIPTION,
            _KWARGS_DESCRIPTION,
            dialogue_set_features(),
            ("https://github.com/idiap/sdialog", "https://arxiv.org/abs/2410.18481"),
        )

    def _compute(self, predictions, references):
        if len(predictions) == 0:
            raise ValueError("flowkl: no (reference set, target set) rows to score")
        scores = []
        for i, (ref, tgt) in enumerate(zip(references, predictions)):
            try:
                scores.append(float(flowkl(ref, tgt, self.encoder, **self.flowkl_options)))
            except ValueError as e:
                raise ValueError(f"flowkl row {i}: {e}") from e
        return {"flowkl": sum(scores) / len(scores), "scores": scores, "encoder": encoder_id(self.encoder)}
