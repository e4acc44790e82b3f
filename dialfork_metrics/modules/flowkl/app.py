"""Hugging Face Space entry point of the FlowKL metric: ``python app.py`` in this folder.

Loads ``flowkl.py`` beside this file (not from the Hub) into a small Gradio app
(``dialfork_metrics.modules.space``; evaluate's own widget needs Gradio 3).
"""

from pathlib import Path

from dialfork_metrics.modules.space import launch

REF = [
    ["Weather in Paris tomorrow?", "Which day?", "Tomorrow.", "Sunny in Paris tomorrow."],
    ["Forecast for Rome?", "For which day?", "Today.", "Rome is rainy today."],
]
TGT = [
    ["Weather in Paris tomorrow?", "Want to try co-living instead?", "What?", "It is great."],
    ["Forecast for Rome?", "For which day?", "Today.", "Rome is rainy today."],
]

if __name__ == "__main__":
    launch(Path(__file__).resolve().parent, example={"predictions": [REF, TGT], "references": [REF, REF]})
