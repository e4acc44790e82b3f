"""Hugging Face Space entry point: a gradio widget for the FlowKL metric."""

import evaluate
from evaluate.utils import launch_gradio_widget

module = evaluate.load("idiap/flowkl")
launch_gradio_widget(module)
