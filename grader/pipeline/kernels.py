"""Executing notebooks without the sometimes-lost reply: papermill and nbclient, polling the kernel in slices.

nbclient waits for a cell's reply with `shell_channel.get_msg(timeout=None)`,
one asyncio poll of the socket with no timeout. When a cell shows an
ipywidget, that wait can miss the reply that has already arrived and never
return (jupyter/nbclient#312; seen here with lessons 01 and 06 under load:
the kernel idle, papermill waiting forever). Polling in one-second slices
re-checks the socket each time, so a reply that is there is always read; and
the client does not mimic Output widgets, the one place nbclient sends on the
shell socket while it waits on it.
`execute_notebook` is papermill's, through an engine whose client does that;
`notebook_client` is nbclient's NotebookClient that does the same.
"""

from __future__ import annotations

import time
from queue import Empty

from nbclient import NotebookClient
from papermill.clientwrap import PapermillNotebookClient
from papermill.engines import NBClientEngine, papermill_engines

SLICE_SECONDS = 1.0
ENGINE = "gpu-course"


def _sliced(channel) -> None:
    """Make `channel.get_msg` poll in slices of SLICE_SECONDS until its own timeout (None: forever)."""
    whole = channel.get_msg

    async def get_msg(timeout: float | None = None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = SLICE_SECONDS if deadline is None else min(SLICE_SECONDS, max(deadline - time.monotonic(), 0.0))
            try:
                return await whole(timeout=left)
            except Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    raise

    channel.get_msg = get_msg


class _Sliced:
    """Mixin for nbclient clients: channels that poll in slices, and no mimicked Output widget.

    nbclient mimics a front end's Output widget (nbclient/output_widget.py): while it reads
    a cell's iopub messages it sends comm messages back on the shell socket it is also
    waiting on for the cell's reply. Runs here hung exactly in such cells (the kernel idle,
    no output recorded), so this client leaves Output widgets alone: their contents stay in
    the widget's state, and the cells' own outputs are recorded as before.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.widget_registry = {}

    async def async_start_new_kernel_client(self):
        kc = await super().async_start_new_kernel_client()
        _sliced(kc.shell_channel)
        _sliced(kc.iopub_channel)
        return kc


class PatientNotebookClient(_Sliced, NotebookClient):
    """nbclient's NotebookClient that never waits forever for a reply already sent."""


class _PatientPapermillClient(_Sliced, PapermillNotebookClient):
    """papermill's client, likewise."""


class _PatientEngine(NBClientEngine):
    """papermill's nbclient engine with the patient client."""

    @classmethod
    def execute_managed_notebook(cls, nb_man, kernel_name, log_output=False, stdout_file=None, stderr_file=None,
                                 start_timeout=60, execution_timeout=None, **kwargs):
        kwargs = {k: v for k, v in kwargs.items() if k not in ("input_path", "timeout", "startup_timeout")}
        return _PatientPapermillClient(nb_man, timeout=execution_timeout, startup_timeout=start_timeout,
                                       kernel_name=kernel_name, log_output=log_output, stdout_file=stdout_file,
                                       stderr_file=stderr_file, **kwargs).execute()


def notebook_client(nb, **kwargs) -> PatientNotebookClient:
    """A NotebookClient for `nb` (nbclient's arguments) that polls the kernel in slices."""
    return PatientNotebookClient(nb, **kwargs)


def execute_notebook(*args, **kwargs):
    """papermill.execute_notebook through the patient engine."""
    import papermill

    if ENGINE not in papermill_engines._engines:
        papermill_engines.register(ENGINE, _PatientEngine)
    return papermill.execute_notebook(*args, engine_name=ENGINE, **kwargs)
