"""Hugging Face Space entry point of the FlowDTW metric: ``python app.py`` in this folder.

Loads ``flowdtw.py`` beside this file (not from the Hub) into a small Gradio app
(``dialfork_metrics.modules.space``; evaluate's own widget needs Gradio 3).
"""

from pathlib import Path

from dialfork_metrics.modules.space import launch

REF = ["I need to book a doctor appointment.", "Sure. What is your name?", "Mark."]
FORK = ["I need to book a doctor appointment.", "Would you like to try co-living instead?", "What?"]

if __name__ == "__main__":
    launch(Path(__file__).resolve().parent, example={"predictions": [REF, FORK], "references": [REF, REF]})
