"""Hugging Face Space entry point of the DialFork Task 3 metric: ``python app.py`` in this folder.

Loads ``task3.py`` beside this file (not from the Hub) into a small Gradio app
(``dialfork_metrics.modules.space``; evaluate's own widget needs Gradio 3).
"""

from pathlib import Path

from dialfork_metrics.modules.space import launch

EXAMPLE = {
    "predictions": [None, 3, 2, 3, None, 4],
    "references": [
        {"num_system_turns": 5, "hallucination_type": None, "fork_turn": None},
        {"num_system_turns": 4, "hallucination_type": None, "fork_turn": None},
        {"num_system_turns": 6, "hallucination_type": "WIC", "fork_turn": 1},
        {"num_system_turns": 6, "hallucination_type": "SSPC", "fork_turn": 3},
        {"num_system_turns": 8, "hallucination_type": "GR", "fork_turn": 7},
        {"num_system_turns": 4, "hallucination_type": "CSC", "fork_turn": 2},
    ],
}

if __name__ == "__main__":
    launch(Path(__file__).resolve().parent, example=EXAMPLE)
