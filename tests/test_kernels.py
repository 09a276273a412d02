"""grader.pipeline.kernels: a reply the kernel has sent is always read, and a timeout still ends the wait."""

from __future__ import annotations

import asyncio
from queue import Empty

import pytest

from grader.pipeline import kernels


class _Channel:
    """A channel whose whole-timeout poll misses a message that is there, as nbclient#312 describes."""

    def __init__(self, misses: int):
        self.misses, self.calls = misses, []

    async def get_msg(self, timeout=None):
        self.calls.append(timeout)
        if timeout is None:  # the unbounded poll never wakes up
            await asyncio.sleep(3600)
        if len(self.calls) <= self.misses:
            raise Empty
        return {"msg": "reply"}


def test_sliced_get_msg_reads_a_reply_the_whole_wait_would_miss(monkeypatch):
    monkeypatch.setattr(kernels, "SLICE_SECONDS", 0.01)
    channel = _Channel(misses=3)
    kernels._sliced(channel)
    assert asyncio.run(asyncio.wait_for(channel.get_msg(), 5)) == {"msg": "reply"}
    assert None not in channel.calls and len(channel.calls) == 4


def test_sliced_get_msg_still_times_out(monkeypatch):
    monkeypatch.setattr(kernels, "SLICE_SECONDS", 0.01)
    channel = _Channel(misses=10**6)
    kernels._sliced(channel)
    with pytest.raises(Empty):
        asyncio.run(channel.get_msg(timeout=0.05))


def test_the_clients_do_not_mimic_output_widgets():
    import nbformat

    client = kernels.notebook_client(nbformat.v4.new_notebook())
    assert client.widget_registry == {}
