"""FlowScore: a dialog-flow-aware distance between two dialogues (DialFork, Task 2).

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

_METHOD = "flowscore"

_DESCRIPTION = """\
FlowScore compares two dialogues by how they unfold, turn by turn (DialFork, SPEC section 7).
Each turn is embedded with a sentence encoder (L2-normalised, no speaker prefix); with
S = E E'^T the cosine similarities between the turns of the reference D and the candidate D',
P = mean over turns of D' of max_i S_ij, R = mean over turns of D of max_j S_ij,
F = 2PR / (P + R) with P and R clipped at 0 (F = 0 when P <= 0 or R <= 0) and
FlowScore(D, D') = 1 - F, in [0, 1] (0 for identical dialogues; 1 for dialogues whose turns
point away from each other; larger = further).
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of dialogues): the candidate dialogues D', one per row. A dialogue is a
        list of turn strings (speakers alternate, starting with the user) or a list of
        `{"speaker": "user"|"system", "text": str}` dicts.
    references (`list` of dialogues): the reference dialogues D, same length and format.
Load-time options (`dialfork_metrics.load("flowscore", encoder=..., ...)`):
    encoder: an alias (`minilm` (default, packaged, offline), `d2f`, `sbert`, `labse`,
        `bge-m3`, `qwen3-embedding`, `embeddinggemma`, `dse`), a local sentence-transformers
        folder, a Hub id, or a `dialfork_metrics.Encoder`. evaluate's `config_name` is accepted
        as the encoder too: `evaluate.load(path, "d2f")`.
    batch_size (`int`, default 64), device (`str`), embedding_cache_dir (`str`: persistent
        embedding cache keyed by model and text hash).
Returns:
    flowscore (`float`): mean FlowScore distance over the pairs.
    scores (`list` of `float`): FlowScore distance of each (reference, prediction) pair.
    encoder (`str`): the encoder's portable model id (an alias's Hub id, e.g.
        `sentence-transformers/all-MiniLM-L6-v2` for `minilm`; `local:<folder>` for a local model).
Examples:
    >>> import dialfork_metrics
    >>> flowscore = dialfork_metrics.load("flowscore")  # encoder="minilm"
    >>> ref = ["I need to book a doctor appointment.", "Sure. What is your name?", "Mark."]
    >>> fork = ["I need to book a doctor appointment.", "Would you like to try co-living instead?", "What?"]
    >>> results = flowscore.compute(predictions=[ref, fork], references=[ref, ref])
    >>> [round(s, 2) for s in results["scores"]]
    [0.0, 0.53]
    >>> round(results["flowscore"], 2)
    0.27
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Flowscore(RejectEmpty, evaluate.Metric):
    """FlowScore distance per (reference, prediction) pair of dialogues, and its mean."""

    _module, _row = "flowscore", "(reference, prediction) pair of dialogues"

    def __init__(self, encoder=None, batch_size=64, device=None, embedding_cache_dir=None, **kwargs):
        # set before super().__init__, which calls _info(); unknown aliases fail here
        self.encoder = module_encoder(
            encoder, kwargs.get("config_name"), batch_size, device, embedding_cache_dir
        )
        super().__init__(**kwargs)

    def _info(self):
        return metric_info(
            _DESCRIPTION, _KWARGS_DESCRIPTION, dialogue_features(), ("https://arxiv.org/abs/1904.09675",)
        )

    def _compute(self, predictions, references):
        if len(predictions) == 0:
            raise ValueError("flowscore: no (reference, prediction) pairs to score")
        scores = score_pairs(references, predictions, [_METHOD], self.encoder)[_METHOD]
        return {
            _METHOD: float(scores.mean()),
            "scores": [float(s) for s in scores],
            "encoder": encoder_id(self.encoder),
        }
