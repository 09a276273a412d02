"""Run torch.distributed for real on one machine: ranks as forked processes, all-reduce timings, DDP's buckets.

Lesson 07 (data parallelism) starts a process group from a notebook on a laptop CPU
(gloo on loopback). `launch(fn, world)` forks `world` processes, joins them in one group
and returns what each rank's `fn(rank, world, ...)` returned, by rank. Whatever goes wrong
in a rank (an exception, a crash, a collective that never completes) comes back as one
`RankFailed` that names the rank, and no rank is ever left running: `live_ranks()` says so.

Why fork: a function defined in a notebook cell exists only in the kernel's memory, so a
`spawn` or `forkserver` child cannot find it; a forked child has it. A forked child of a
Jupyter kernel also inherits the kernel's `sys.stdout`, a ZMQ stream owned by the kernel's
threads that did not come along: each rank writes to its own log file instead, and leaves
with `os._exit` so that none of the kernel's atexit handlers run twice.

Threads: each rank runs torch on `threads` threads, 1 by default, and more is a trap. torch's
CPU ops run on GNU OpenMP here, which does not survive a fork: once the parent (a notebook
kernel that has multiplied a matrix) has run a multi-threaded op, a forked child's first
multi-threaded op waits forever for threads that were not forked (probed with torch 2.13:
a 300x300 matmul or a large add, threads=2, hangs every time; threads=1 never).

What DDP's buckets really are (probed with torch 2.13, gloo, `find_unused_parameters=False`,
the default; see `bucket_trace`):

- Step 1 is one bucket holding every parameter, whatever the cap: DDP's initial bucketing
  uses an unlimited limit when it is not looking for unused parameters, because it does not
  yet know the order in which gradients become ready.
- From step 2 on the buckets have been rebuilt in the order the gradients became ready in
  step 1. For a plain stack of layers that order is the reverse of registration order, bias
  before weight within a Linear layer: `Linear(64,256), ReLU, Linear(256,256), ReLU,
  Linear(256,10)` (parameters 0..5 = w0 b0 w1 b1 w2 b2) gives ready order 5 4 3 2 1 0.
  Walking that order, a parameter joins the current bucket and the bucket closes as soon as
  its bytes reach the cap (>=); whatever is left at the end is a last, partial bucket. A
  parameter at least as large as the cap closes whichever bucket it joins, so it is alone
  when it opens one, and a bucket can end up far larger than the cap. For that MLP (bytes
  65536 1024 262144 1024 10240 40): a 100000-byte cap gives [5 4 3 2] (273448 bytes) then
  [1 0] (66560 bytes); a 1000-byte cap gives [5 4] [3] [2] [1] [0]. With `bucket_cap_mb` given, the
  first bucket has the same cap as the others (the smaller 1 MiB first bucket is only used
  with the default cap).
- The hook sees the buckets in that same order, bucket 0 first, every step.
- Which order counts is the order gradients became ready, not registration order: a module
  that registers Linear `a` then Linear `b` but computes `a(b(x))` gets buckets [a.bias,
  a.weight] before [b.bias, b.weight] (probed), the reverse of what walking the parameters
  backwards would give. In step 1 the one bucket lists the parameters in registration order.
- The buffer DDP all-reduces holds the bucket's parameters back to back, so its bytes are
  the sum of those parameters' bytes.
"""

from __future__ import annotations

import faulthandler
import gc
import os
import pickle
import re
import shutil
import signal
import sys
import tempfile
import time
import traceback
import uuid
from datetime import timedelta
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any, Callable

from grader.checks._sealed import sealed
from grader.shortcuts import course_only

MAX_WORLD = 16
EXIT_GRACE_SECONDS = 5.0  # after every rank has answered, how long each may take to leave
LOG_TAIL_LINES = 15
STACK_WAIT_SECONDS = 0.3  # at a timeout, how long the late ranks get to write where they are


# DDP's own bucketer (a C++ function) answers lesson 07's bucket_plan. A copy test saved it in a cell and called it
# through functools.partial or operator.call, which the profiler a check watches with does not report. So from the
# moment this module is imported (the lesson's second cell, and every lesson07 check) torch's attributes hold a Python
# stand-in that counts calls from outside the package (course_only): any wrapper of it runs its code, which a guard
# sees, and a call from a cell before bucket_plan's check counts for its earlier=. DDP itself calls the attribute,
# so it runs through the stand-in unchanged.
BUCKETER_NAME = "torch.distributed._compute_bucket_assignment_by_size (DDP's own bucketer)"


def _install_bucketer_stand_in() -> tuple[Any, Any]:
    """(the C++ bucketer, its stand-in), the stand-in put in torch's two attributes; (None, None) without one."""
    try:
        import torch.distributed as dist
        from torch._C import _distributed_c10d as c10d
    except ImportError:  # a torch built without distributed support has no bucketer
        return None, None
    found = getattr(dist, "_compute_bucket_assignment_by_size", None)
    if found is None:
        return None, None
    if getattr(found, "course_only", None) == BUCKETER_NAME:  # this module imported again: its stand-in stays
        from grader import shortcuts

        return shortcuts._INNER[found].__closure__[0].cell_contents, found
    original = found

    @course_only(BUCKETER_NAME)
    def _compute_bucket_assignment_by_size(*args: Any, **kwargs: Any) -> Any:
        return original(*args, **kwargs)

    for module in (dist, c10d):
        if getattr(module, "_compute_bucket_assignment_by_size", None) is original:
            module._compute_bucket_assignment_by_size = _compute_bucket_assignment_by_size
    return original, _compute_bucket_assignment_by_size


_DDP_BUCKETER, _DDP_STAND_IN = _install_bucketer_stand_in()


_THREADS_HINT = (" (or, with threads > 1, a rank's first multi-threaded torch op: GNU OpenMP hangs in a process "
                 "forked from one that had already run multi-threaded ops; use threads=1)")


class RankFailed(RuntimeError):
    """A rank raised, died or did not finish in time; the message says which rank and what, with the tail of its log."""


# pid -> launch id of every rank this module started and has not reaped yet.
_started: dict[int, str] = {}


def live_ranks() -> list[int]:
    """Pids of rank processes started by this module that are still alive."""
    alive = []
    for pid in sorted(_started):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                continue
            except PermissionError:
                pass
            alive.append(pid)
            continue
        if state not in ("Z", "X"):
            alive.append(pid)
    return alive


def _check_launch(fn, world: int, timeout: float, backend: str, threads: int) -> None:
    """Reject arguments that cannot work, with a message that says why."""
    if not callable(fn):
        raise TypeError(f"launch needs a function to run on each rank, got {type(fn).__name__}")
    if not isinstance(world, int) or isinstance(world, bool) or world < 1:
        raise ValueError(f"world must be a whole number of ranks, at least 1, got {world!r}")
    if world > MAX_WORLD:
        raise ValueError(f"world={world} is more ranks than this toolkit starts on one machine (at most {MAX_WORLD})")
    if not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    if not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a whole number, at least 1, got {threads!r}")
    if backend != "gloo":
        raise ValueError(f"backend={backend!r}: launch starts gloo ranks on this machine's CPU. For NCCL on GPUs run "
                         "scripts/cluster_allreduce.py under torchrun (README: 'Lesson 07 on a cluster'): CUDA does "
                         "not work in a process forked from one that has used it, and NCCL wants a GPU per rank.")
    if sys.platform != "linux" and sys.platform != "darwin":
        raise RuntimeError("launch forks its ranks, which only Linux and macOS can do")


def _without_launch_frames(lines: list[str]) -> list[str]:
    """Tracebacks and stacks without the frames of this module and multiprocessing: the learner's frames matter."""
    ours = (f'File "{__file__}"', f"File \"{os.path.dirname(os.__file__)}{os.sep}multiprocessing{os.sep}")
    kept, skipping = [], False
    for line in lines:
        if line.startswith("  File "):
            skipping = any(mark in line for mark in ours)
        elif not line.startswith("    "):
            skipping = False
        if not skipping:
            kept.append(_NOTEBOOK_FRAME.sub(r"\1In a notebook cell, line \2", line))
    return kept


# a frame of code typed into a notebook cell: ipykernel names its file /tmp/ipykernel_<pid>/<hash>.py
_NOTEBOOK_FRAME = re.compile(r'^(\s*)File "[^"]*ipykernel_\d+[/\\][^"]*", line (\d+)')


def _log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last `lines` lines of a rank's log, without the launcher's own frames, or '' when there is none."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(_without_launch_frames(text.rstrip().splitlines())[-lines:])


def _child(rank: int, world: int, fn, args: tuple, conn, workdir: Path, launch_id: str, timeout: float,
           backend: str, threads: int) -> None:
    """One rank: log to a file, join the group, run fn, send the pickled answer, leave the group, os._exit."""
    code = 1
    try:
        # Before anything can print: fds 1 and 2 and sys.stdout/stderr go to this rank's log.
        # sys.stdout here may be the kernel's ZMQ stream, whose threads did not survive the fork.
        log = open(workdir / f"rank{rank}.log", "w", buffering=1, errors="replace")
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        sys.stdout = sys.stderr = log
        os.setsid()  # own process group: a kill reaches anything this rank starts
        faulthandler.register(signal.SIGUSR1, file=log, all_threads=False)  # "where are you?" at a timeout
        os.environ["GRADER_RANK"] = str(rank)
        os.environ["GRADER_LAUNCH"] = launch_id
        os.environ["GLOO_SOCKET_IFNAME"] = "lo"  # gloo binds to loopback instead of resolving the hostname

        import torch
        import torch.distributed as dist

        torch.set_num_threads(threads)
        # A FileStore in this launch's own temporary directory: nothing listens on a port, so two
        # launches at once (pytest-xdist workers, two notebooks) cannot meet in the same store,
        # and the parent runs no server thread of its own before forking.
        store = dist.FileStore(str(workdir / "store"), world)
        dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timedelta(seconds=timeout))
        try:
            answer = ("ok", fn(rank, world, *args))
        except BaseException as exc:  # noqa: BLE001 - the parent reports it
            traceback.print_exc()
            conn.send_bytes(pickle.dumps(("raised", time.time(), type(exc).__name__, str(exc),
                                          traceback.format_exc())))
            return
        try:
            message = pickle.dumps(answer)  # the standard pickle: no shared-memory tensors
        except Exception as exc:  # noqa: BLE001
            conn.send_bytes(pickle.dumps(("unpicklable", time.time(), type(exc).__name__, str(exc), "")))
            return
        conn.send_bytes(message)
        del answer, message
        gc.collect()  # a DDP object still alive would keep the group busy at exit
        dist.barrier()
        dist.destroy_process_group()
        code = 0
    except BaseException:  # noqa: BLE001 - never let a child unwind into the kernel's code
        try:
            traceback.print_exc()
        except BaseException:  # noqa: BLE001
            pass
    finally:
        try:
            sys.stdout.flush()
        finally:
            os._exit(code)


def _kill(proc) -> None:
    """SIGKILL what is left of a rank: its process group (what it started, even after it exited) and itself."""
    if proc.pid is None:
        return
    # The group's id is the rank's pid, which the kernel does not reuse while the group exists.
    sends = [lambda: os.killpg(proc.pid, signal.SIGKILL)]
    if proc.exitcode is None:
        sends.append(lambda: os.kill(proc.pid, signal.SIGKILL))  # in case it had not reached setsid yet
    for send in sends:
        try:
            send()
        except (ProcessLookupError, PermissionError):
            pass


def _group_alive(pgid: int) -> bool:
    """Whether a process of this group is still running (a zombie has died: only its parent's wait is left)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            return True
    return False


def _reap(procs, settle: float = 10.0) -> None:
    """Kill every rank and whatever it started, and wait for the ranks, so none is left, not even a zombie.

    SIGKILL is delivered, not awaited: a rank's own child (reparented once the rank is gone) can still be running
    for a moment after killpg returns. So wait, up to `settle` seconds, until no process of any rank's group runs.
    """
    for proc in procs:
        _kill(proc)
    for proc in procs:
        if proc.pid is not None:
            proc.join()
            _started.pop(proc.pid, None)
    if not Path("/proc/self/stat").exists():  # no /proc (macOS): nothing to look at
        return
    deadline = time.monotonic() + settle
    for proc in procs:
        while proc.pid is not None and _group_alive(proc.pid) and time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # one it started after the first kill was sent
            except (ProcessLookupError, PermissionError):
                break
            time.sleep(0.01)


def _how_it_died(proc) -> str:
    """'exited with code 3' or 'was killed by signal SIGSEGV'."""
    code = proc.exitcode
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = str(-code)
        return f"was killed by signal {name}"
    return f"exited with code {code} without answering"


def _failure_message(rank: int, world: int, failure: tuple, log: Path) -> str:
    """The RankFailed text for one rank's failure."""
    if failure[0] == "unpicklable":
        _, _, name, text, _ = failure
        return (f"rank {rank} of {world} returned a value that cannot be pickled ({name}: {text}); "
                "return numbers, strings, lists, dicts or tensors")
    if failure[0] == "raised":
        _, _, name, text, tb = failure
        head = f"rank {rank} of {world} raised {name}: {text}"
        tail = "\n".join(_without_launch_frames(tb.rstrip().splitlines())[-LOG_TAIL_LINES:]) if tb else _log_tail(log)
    else:
        head = f"rank {rank} of {world} {failure[1]}"
        tail = _log_tail(log)
    return head + (f"\n--- last lines of rank {rank}'s log ---\n{tail}" if tail else "")


def _secondary(failure: tuple) -> bool:
    """Whether a rank's exception looks like the echo of another rank's failure (a peer gone from a collective)."""
    if failure[0] != "raised":
        return False
    name, text = failure[2], failure[3].lower()
    echoes = ("connection closed by peer", "connection reset", "broken pipe", "socket closed", "timed out")
    return name in ("DistBackendError", "DistNetworkError") or any(e in text for e in echoes)


def _choose(failures: dict[int, tuple]) -> int:
    """The rank whose failure to report: the first real cause, before the ranks that failed because of it."""
    def key(rank):
        failure = failures[rank]
        when = float("-inf") if failure[0] == "died" else failure[1]  # a death came before its echoes
        return (_secondary(failure), when, rank)
    return min(failures, key=key)


def launch(fn: Callable, world: int, *args, timeout: float = 60.0, backend: str = "gloo", threads: int = 1) -> list:
    """Run fn(rank, world, *args) in `world` forked processes joined in one process group; each rank's return value, by rank."""
    _check_launch(fn, world, timeout, backend, threads)
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    launch_id = uuid.uuid4().hex
    workdir = Path(tempfile.mkdtemp(prefix="grader-launch-"))
    logs = [workdir / f"rank{rank}.log" for rank in range(world)]
    procs, conns = [], []
    deadline = time.monotonic() + timeout
    try:
        for rank in range(world):
            receive, send = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_child, name=f"grader-rank{rank}", daemon=False,
                               args=(rank, world, fn, args, send, workdir, launch_id, timeout, backend, threads))
            conns.append(receive)
            procs.append(proc)
            proc.start()
            _started[proc.pid] = launch_id
            send.close()  # the parent keeps only the receiving end

        results: dict[int, Any] = {}
        failures: dict[int, tuple] = {}
        pending = set(range(world))
        while pending and not failures:
            left = deadline - time.monotonic()
            # A rank's answer, or its end (sentinel): a process that the rank started may hold
            # the pipe open after the rank itself is gone, so EOF alone would not say it died.
            waiting = {conns[r]: r for r in pending} | {procs[r].sentinel: r for r in pending}
            ready = wait(list(waiting), timeout=left) if left > 0 else []
            if not ready:
                break
            for rank in sorted({waiting[r] for r in ready}):
                try:
                    # An answer that fit in the pipe is there even when the rank has already exited.
                    message = pickle.loads(conns[rank].recv_bytes()) if conns[rank].poll() else None
                except (EOFError, OSError):
                    message = None
                if message is None:  # gone without answering
                    procs[rank].join(EXIT_GRACE_SECONDS)
                    message = ("died", _how_it_died(procs[rank]))
                pending.discard(rank)
                if message[0] == "ok":
                    results[rank] = message[1]
                else:
                    failures[rank] = message

        if pending and not failures:
            # Ask each late rank where it is (faulthandler writes its Python stack to its log).
            for rank in sorted(pending):
                try:
                    os.kill(procs[rank].pid, signal.SIGUSR1)
                except ProcessLookupError:
                    pass
            time.sleep(STACK_WAIT_SECONDS)
        if failures or pending:
            # The other ranks may be blocked in a collective that will never complete: kill them first,
            # then read what else arrived, so the report names the cause rather than its echoes.
            _reap(procs)
            for rank in sorted(pending - set(failures)) if failures else []:
                message = None
                try:
                    if conns[rank].poll():
                        message = pickle.loads(conns[rank].recv_bytes())
                except (EOFError, OSError):
                    pass
                if message is None and procs[rank].exitcode != -signal.SIGKILL:
                    # It ended on its own, unseen, before our kill: a peer's error may have overtaken its end.
                    message = ("died", _how_it_died(procs[rank]))
                if message is not None and message[0] != "ok":
                    failures[rank] = message
            if failures:
                rank = _choose(failures)
                raise RankFailed(_failure_message(rank, world, failures[rank], logs[rank]))
            late = sorted(pending)
            names = ", ".join(str(r) for r in late)
            tails = "".join(f"\n--- last lines of rank {r}'s log (where it was) ---\n{tail}"
                            for r in late if (tail := _log_tail(logs[r])))
            raise RankFailed(
                f"rank{'s' if len(late) > 1 else ''} {names} of {world} did not finish within {timeout:g} s "
                f"and {'were' if len(late) > 1 else 'was'} stopped; the usual cause is a rank waiting in a "
                "collective (all_reduce, barrier, ...) "
                "that another rank never called" + (_THREADS_HINT if threads > 1 else "") + tails
            )

        # Every rank answered; each now leaves the group. One that hangs there is killed below.
        end = time.monotonic() + EXIT_GRACE_SECONDS
        for proc in procs:
            proc.join(max(end - time.monotonic(), 0.0))
        return [results[rank] for rank in range(world)]
    finally:
        _reap(procs)  # every path, KeyboardInterrupt included: no rank left running, no zombie
        for conn in conns:
            conn.close()
        for proc in procs:
            proc.close()
        shutil.rmtree(workdir, ignore_errors=True)


def _allreduce_rank(rank: int, world: int, nbytes: list[int], repeats: int, warmup: int) -> dict:
    """One rank of allreduce_times: the slowest rank's seconds per repeat, per size."""
    import torch
    import torch.distributed as dist

    seconds = []
    for size in nbytes:
        data = torch.ones(size // 4, dtype=torch.float32)
        for _ in range(warmup):
            dist.all_reduce(data)
        per_repeat = []
        for _ in range(repeats):
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(data)
            took = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
            dist.all_reduce(took, op=dist.ReduceOp.MAX)  # the slowest rank's time
            per_repeat.append(float(took))
        seconds.append(per_repeat)
    return {"world": world, "nbytes": list(nbytes), "seconds": seconds}


def allreduce_times(world: int, nbytes: list[int], repeats: int = 5, warmup: int = 2, timeout: float = 120.0) -> dict:
    """All-reduce (sum, float32) of each message size on `world` gloo ranks: {"world", "nbytes": [...], "seconds": [[per repeat] per size]}; each time is the slowest rank's, after a barrier."""
    sizes = list(nbytes)
    for size in sizes:
        if not isinstance(size, int) or isinstance(size, bool) or size < 4 or size % 4:
            raise ValueError(f"each size is a number of bytes of float32 values (a positive multiple of 4): {size!r}")
    if not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats!r}")
    if not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be 0 or more, got {warmup!r}")
    return launch(_allreduce_rank, world, sizes, repeats, warmup, timeout=timeout)[0]


def _bucket_rank(rank: int, world: int, make_model: Callable, cap_bytes: int | None, steps: int, batch: int) -> dict:
    """One rank of bucket_trace: train under DDP and record what the communication hook saw."""
    import torch
    from torch import nn
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(0)  # identical replicas (DDP broadcasts rank 0's anyway)
    model = make_model()
    params = list(model.parameters())
    first = next((m for m in model.modules() if isinstance(m, nn.Linear)), None)
    if first is None:
        raise ValueError("bucket_trace needs a model with an nn.Linear layer (its in_features set the input width)")
    width = getattr(model, "in_features", None) or first.in_features  # a model that registers its input layer late says
    # Map what the hook sees back to positions in model.parameters(): bucket.parameters() hands back
    # the very same tensor objects (probed: `is` and data_ptr() both match), and identity still
    # tells apart parameters with no elements, whose data_ptr() is 0.
    position = {id(p): i for i, p in enumerate(params)}
    seen: list[dict] = []

    def record(state, bucket):
        """Note the bucket's parameters and bytes, then all-reduce it as DDP would."""
        buffer = bucket.buffer()
        seen.append({"params": [position[id(p)] for p in bucket.parameters()],
                     "bytes": buffer.numel() * buffer.element_size()})
        return allreduce_hook(state, bucket)

    # cap_bytes None: DDP's defaults (a first bucket of dist._DEFAULT_FIRST_BUCKET_BYTES, 1 MiB, then 25 MiB);
    # a cap given explicitly applies to the first bucket too (torch/nn/parallel/distributed.py, _BucketCapacityConfig)
    ddp = DistributedDataParallel(model, bucket_cap_mb=None if cap_bytes is None else cap_bytes / 2**20)
    ddp.register_comm_hook(None, record)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    generator = torch.Generator().manual_seed(1 + rank)
    trace = []
    for _ in range(steps):
        x = torch.randn(batch, width, generator=generator)  # (batch, in_features)
        optimizer.zero_grad()
        ddp(x).pow(2).mean().backward()  # MSE to zeros
        optimizer.step()
        trace.append(list(seen))
        seen.clear()
    del ddp, optimizer  # a DDP object alive at destroy_process_group can hang the exit
    return {"steps": trace, "param_bytes": [p.numel() * p.element_size() for p in params], "cap_bytes": cap_bytes}


def ready_for_ddp() -> None:
    """Import torch._dynamo here, once, before ranks are forked: DistributedDataParallel's constructor imports it
    (torch/nn/parallel/distributed.py asks torch._dynamo.utils for its reducer mode), which takes seconds, and a
    forked rank inherits what its parent imported instead of importing it again."""
    import torch._dynamo  # noqa: F401


def bucket_trace(make_model: Callable, world: int, cap_bytes: int | None, steps: int = 3, batch: int = 8,
                 timeout: float = 60.0) -> dict:
    """Train make_model() under DDP(bucket_cap_mb=cap_bytes / 2**20; None: DDP's default caps) for `steps` steps and record, through a communication hook, each step's buckets: the parameter indices (positions in model.parameters()) of each bucket, in the order the hook saw them, and each bucket's bytes."""
    if not callable(make_model):
        raise TypeError(f"make_model must be a function that builds the model, got {type(make_model).__name__}")
    if cap_bytes is not None and (not isinstance(cap_bytes, int) or isinstance(cap_bytes, bool) or cap_bytes < 1):
        raise ValueError(f"cap_bytes must be a positive number of bytes, got {cap_bytes!r}")
    if not isinstance(steps, int) or steps < 1 or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"steps and batch must be at least 1, got steps={steps!r}, batch={batch!r}")
    ready_for_ddp()
    return launch(_bucket_rank, world, make_model, cap_bytes, steps, batch, timeout=timeout)[0]


# --- the links of a GPU cluster (data/networks.csv) and the pipeline schedules of section 7 -------------------


def load_networks() -> list[dict]:
    """The rows of data/networks.csv (NVLink inside a node, the network between nodes), numbers as floats."""
    import csv

    from grader import specs

    with open(specs.data_dir() / "networks.csv", encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        for key in ("gpus_per_node", "line_rate_gbit_per_gpu", "gbs_per_gpu_one_way", "achieved_gbs_per_nic"):
            row[key] = float(row[key]) if row[key] else None
    return rows


@course_only()
def cluster_links(nvlink_gbs: float, world: int, networks: list[dict] | None = None, chip: str = "") -> dict:
    """The links an all-reduce of `world` GPUs uses: NVLink inside each node, one network adapter per GPU between nodes.

    `nvlink_gbs` is the datasheet's NVLink figure (both directions summed, as in chips.csv): a GPU sends at half of
    it. Up to one node's GPUs (8 on an HGX board) everything stays on NVLink. Beyond, the nodes are joined by one
    network adapter per GPU (data/networks.csv: the row whose `gpus` names the chip, a chips.csv name, else the
    fastest), and NCCL's channels leave a node through all of its adapters at once, not through one.
    Returns {"gpus_per_node", "nodes", "nvlink" (bytes/s one way), "nic" (bytes/s one way per GPU, None inside
    one node), "link" (what they are, in words)}.
    """
    networks = load_networks() if networks is None else networks
    nvlink = nvlink_gbs / 2 * 1e9
    node = int(next(r["gpus_per_node"] for r in networks if r["between"] == "GPUs of one node"))
    if world <= node:
        return {"gpus_per_node": world, "nodes": 1, "nvlink": nvlink, "nic": None,
                "link": f"NVLink, {nvlink / 1e9:g} GB/s one way"}
    if world % node:
        raise ValueError(f"{world} GPUs do not fill whole nodes of {node}: the model prices whole nodes")
    between = [r for r in networks if r["between"] == "nodes"]
    named = [r for r in between if any(g in chip.split() for g in r["gpus"].split())]
    net = max(named or between, key=lambda r: r["gbs_per_gpu_one_way"])
    nic = net["gbs_per_gpu_one_way"] * 1e9
    guess = "" if named or not chip else " (data/networks.csv has no row for this chip's systems: its fastest)"
    return {"gpus_per_node": node, "nodes": world // node, "nvlink": nvlink, "nic": nic,
            "link": (f"NVLink ({nvlink / 1e9:g} GB/s one way) in each node and {net['link']} between nodes, "
                     f"{nic / 1e9:g} GB/s per GPU one way, {node} adapters per node{guess}")}


@course_only()
@sealed("07_data_parallel", "ALLREDUCE_PREDICTION")
def cluster_allreduce_seconds(nbytes: float, links: dict, allreduce_seconds: Callable[[float, int, float, float], float],
                              latency: float = 0.0) -> float:
    """The course's model of an all-reduce over `links` (cluster_links), priced with a ring model
    `allreduce_seconds(nbytes, world, latency, bandwidth)`: ALLREDUCE_PREDICTION's model, sealed
    (grader.checks._sealed; called from a cell before that guess, a reveal). Its parts are priced one after another
    (an upper bound on its bandwidth terms: NCCL pipelines chunks through them; latency and links below their line rate
    add time), on rail-optimised, non-blocking fabrics (one switch port per adapter, no oversubscription)."""


def activations_in_flight(stages: int, microbatches: int, schedule: str) -> int:
    """The most micro-batches whose activations the first stage holds at once, found by walking the schedule.

    "gpipe": every micro-batch's forward, then every backward (each stage keeps all m until its backwards run).
    "1f1b": the first stage runs p forwards to fill the pipe, then alternates one backward and one forward
    (Narayanan et al. 2021, Megatron-LM; torch.distributed.pipelining.Schedule1F1B), so it never holds more than p.
    """
    if stages < 1 or microbatches < 1:
        raise ValueError(f"stages and microbatches must be at least 1, got {stages}, {microbatches}")
    if schedule == "gpipe":
        order = ["F"] * microbatches + ["B"] * microbatches
    elif schedule == "1f1b":
        warm = min(stages, microbatches)
        order = ["F"] * warm
        for i in range(microbatches - warm):
            order += ["B", "F"]
        order += ["B"] * warm
    else:
        raise ValueError(f"schedule must be 'gpipe' or '1f1b', not {schedule!r}")
    held = most = 0
    for op in order:
        held += 1 if op == "F" else -1
        most = max(most, held)
    return most
