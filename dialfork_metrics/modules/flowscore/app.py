"""Hugging Face Space entry point: a gradio widget for the FlowScore metric."""

import evaluate
from evaluate.utils import launch_gradio_widget

module = evaluate.load("idiap/flowscore")
launch_gradio_widget(module)
