"""What an autograd graph keeps alive: saved activations and graph nodes, measured on any device.

torch.cuda.memory_allocated says nothing on a CPU, so the course counts the tensors themselves:
`SavedTensors` remembers (weakly) every activation autograd saves for backward while it is
active, and says how many are still alive later; `graph_nodes` counts the backward nodes a set
of tensors still reaches through their grad_fn chains.
"""

from __future__ import annotations

import weakref
from typing import Iterable

import torch


class SavedTensors:
    """Context manager: weakly remembers every activation autograd saves, to count the ones still alive.

    Parameters and inputs (tensors without a grad_fn) are not counted: they are alive anyway.
    """

    def __init__(self):
        self._saved: list[tuple[weakref.ref, int, int]] = []  # (tensor, storage pointer, bytes)
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        if t.grad_fn is None:
            return t
        kept = t.detach()  # an alias of the same storage, so a saved output makes no reference cycle
        self._saved.append((weakref.ref(kept), kept.untyped_storage().data_ptr(), kept.untyped_storage().nbytes()))
        return kept

    def __enter__(self) -> "SavedTensors":
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc) -> bool:
        self._hooks.__exit__(*exc)
        return False

    def alive(self) -> tuple[int, int]:
        """(tensors, bytes) of saved activations still alive, each storage counted once."""
        storages = {ptr: nbytes for ref, ptr, nbytes in self._saved if ref() is not None}
        return len(storages), sum(storages.values())


def graph_nodes(tensors: Iterable[torch.Tensor]) -> int:
    """Backward nodes reachable from `tensors` through grad_fn (0 for detached tensors)."""
    seen: set[int] = set()
    stack = [t.grad_fn for t in tensors if isinstance(t, torch.Tensor) and t.grad_fn is not None]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        stack.extend(next_node for next_node, _ in node.next_functions)
    return len(seen)
