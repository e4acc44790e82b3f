"""The one citation of DialFork.

Every place that prints the BibTeX entry takes it from :data:`CITATION`: the dataset card and the
``datasets`` builder (``DatasetInfo.citation``), the ``evaluate`` modules (``MetricInfo.citation``)
and the leaderboard's About text. The Markdown copies (``README.md``, ``docs/index.md``, each
module card ``dialfork_metrics/modules/*/README.md``) hold it verbatim; ``tests/test_citation.py``
checks that every one of them is identical to it.
"""

CITATION = """\
@misc{dialfork2026,
  title        = {{DialFork}: Evaluating Conversational Agents' Procedural Hallucination Beyond Factuality},
  author       = {{DialFork authors}},
  year         = {2026},
  note         = {Idiap Research Institute; Telef{\\'o}nica Innovaci{\\'o}n Digital; Logitech; Brno University of Technology},
  howpublished = {\\url{https://github.com/idiap/dialfork}}
}"""

__all__ = ["CITATION"]
