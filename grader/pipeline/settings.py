"""How a class is graded: limits, sandbox, shard."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Settings:
    """How a class is graded."""

    workers: int = field(default_factory=lambda: os.cpu_count() or 1)
    cell_timeout: float = 60.0  # seconds one cell may run
    notebook_timeout: float = 600.0  # seconds all of one submission's cells may run, restarts included
    memory_gib: float = 4.0
    disk_mib: float = 512.0  # what one submission may write (bwrap: its workspace is a tmpfs this big, in memory)
    shm_mib: float = 64.0  # the size of its /dev/shm (bwrap)
    max_processes: int = 128  # processes and threads one submission may have at once
    sandbox: str = "auto"  # auto (bwrap, or an error saying how to get it), bwrap, or none (only when asked by name)
    shard: tuple[int, int] = (0, 1)  # (I, N): grade the I-th of N slices, I counted from 0
    regrade: bool = False  # grade again even where a result exists
    hide: list[Path] = field(default_factory=list)  # more folders the sandbox must hide
    judge_seconds: float = 10.0  # CPU seconds the grader may spend judging one observation (in a process of its own)
    judge_memory_gib: float = 1.0  # memory one judge process may add to what it starts with
    cgroups: bool = True  # one cgroup per submission where the grader can make one (False: per-process limits only)
    warm: bool = True  # fork each runner from a warm zygote where it can be confined (grader.pipeline.zygote)
