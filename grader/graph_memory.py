"""What an autograd graph keeps alive (lesson 02): the course's one saved-tensor recorder, as lesson 02 uses it.

The recorder lives in grader.memory (lessons 02 and 04 share it); this module keeps the names
lesson 02 imports. `SavedTensors()` here records only tensors made by the graph (those with a
grad_fn): parameters and inputs are alive anyway. `alive()` says how many saved activations are
still held; `graph_nodes` counts the backward nodes a set of tensors still reaches.
"""

from __future__ import annotations

from grader.memory import SavedTensors as _Recorder
from grader.memory import graph_nodes

__all__ = ["SavedTensors", "graph_nodes"]


class SavedTensors(_Recorder):
    """grader.memory.SavedTensors with skip_leaves=True: weakly remembers the activations autograd saves."""

    def __init__(self):
        super().__init__(skip_leaves=True)
