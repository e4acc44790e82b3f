import evaluate
from evaluate.utils import launch_gradio_widget

module = evaluate.load("idiap/task3")
launch_gradio_widget(module)
