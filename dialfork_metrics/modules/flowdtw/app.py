"""Hugging Face Space entry point: a gradio widget for the FlowDTW metric."""

import evaluate
from evaluate.utils import launch_gradio_widget

module = evaluate.load("idiap/flowdtw")
launch_gradio_widget(module)
