"""FlowDTW: dynamic-time-warping distance between two dialogues' turns (DialFork, Task 2).

Thin ``evaluate.Metric`` over :func:`dialfork_metrics.dialogue.score_pairs`; all math and input
validation live in the ``dialfork`` library.
"""

import evaluate

from dialfork_metrics.dialogue import score_pairs  # From: dialfork
from dialfork_metrics.modules import (  # From: dialfork
    RejectEmpty,
    dialogue_features,
    encoder_id,
    metric_info,
    module_encoder,
)

_METHOD = "flowdtw"

_DESCRIPTION = """\
FlowDTW aligns the turns of two dialogues monotonically (DialFork, SPEC section 7). Each turn is
embedded with a sentence encoder (L2-normalised, no speaker prefix); the cost of aligning turn i
of the reference D with turn j of the candidate D' is c(i,j) = 1 - e_i . e'_j, and
Gamma(i,j) = c(i,j) + min(Gamma(i-1,j-1), Gamma(i-1,j), Gamma(i,j-1)), Gamma(0,0) = 0 (ties
prefer the diagonal, then (i-1,j), then (i,j-1)). FlowDTW = Gamma(n,m) / L with L the number of
aligned pairs on the optimal path (0 for identical dialogues; larger = further).
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of dialogues): the candidate dialogues D', one per row. A dialogue is a
        list of turn strings (speakers alternate, starting with the user) or a list of
        `{"speaker": "user"|"system", "text": str}` dicts.
    references (`list` of dialogues): the reference dialogues D, same length and format.
Load-time options (`dialfork_metrics.load("flowdtw", encoder=..., ...)`):
    encoder: an alias (`minilm` (default, packaged, offline), `d2f`, `sbert`, `labse`,
        `bge-m3`, `qwen3-embedding`, `embeddinggemma`, `dse`), a local sentence-transformers
        folder, a Hub id, or a `dialfork_metrics.Encoder`. evaluate's `config_name` is accepted
        as the encoder too: `evaluate.load(path, "d2f")`.
    batch_size (`int`, default 64), device (`str`), embedding_cache_dir (`str`: persistent
        embedding cache keyed by model and text hash).
Returns:
    flowdtw (`float`): mean FlowDTW distance over the pairs.
    scores (`list` of `float`): FlowDTW distance of each (reference, prediction) pair.
    encoder (`str`): the encoder's portable model id (an alias's Hub id, e.g.
        `sentence-transformers/all-MiniLM-L6-v2` for `minilm`; `local:<folder>` for a local model).
Examples:
    >>> import dialfork_metrics
    >>> flowdtw = dialfork_metrics.load("flowdtw")  # encoder="minilm"
    >>> ref = ["I need to book a doctor appointment.", "Sure. What is your name?", "Mark."]
    >>> fork = ["I need to book a doctor appointment.", "Sure. What is your name?",
    ...         "Would you like to try co-living instead?", "What?"]
    >>> results = flowdtw.compute(predictions=[ref, fork], references=[ref, ref])
    >>> [round(s, 2) for s in results["scores"]]
    [0.0, 0.4]
    >>> round(results["flowdtw"], 2)
    0.2
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Flowdtw(RejectEmpty, evaluate.Metric):
    """FlowDTW distance per (reference, prediction) pair of dialogues, and its mean."""

    _module, _row = "flowdtw", "(reference, prediction) pair of dialogues"

    def __init__(self, encoder=None, batch_size=64, device=None, embedding_cache_dir=None, **kwargs):
        # set before super().__init__, which calls _info(); unknown aliases fail here
        self.encoder = module_encoder(
            encoder, kwargs.get("config_name"), batch_size, device, embedding_cache_dir
        )
        super().__init__(**kwargs)

    def _info(self):
        return metric_info(_DESCRIPTION, _KWARGS_DESCRIPTION, dialogue_features())

    def _compute(self, predictions, references):
        if len(predictions) == 0:
            raise ValueError("flowdtw: no (reference, prediction) pairs to score")
        scores = score_pairs(references, predictions, [_METHOD], self.encoder)[_METHOD]
        return {
            _METHOD: float(scores.mean()),
            "scores": [float(s) for s in scores],
            "encoder": encoder_id(self.encoder),
        }
