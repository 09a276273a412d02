"""A constructed CUDA profile: torch 2.13's own FunctionEvent objects, shaped as _parse_kineto_results makes them.

No GPU is needed. What a CUDA profile of one matmul step holds (torch/autograd/profiler.py, _parse_kineto_results,
and profiler_util.py): a host event per operator (aten::mm, device_type CPU) with its kernel appended to it
(`append_kernel`, linked by correlation id), the host's runtime call that launched it (cudaLaunchKernel, a CPU
event nested in the operator), the kernel itself as an event of its own (device_type CUDA), the labels
(ProfilerStep#, record_function) on the host, and each label's copy on the device (device_type CUDA,
is_user_annotation). key_averages() keeps one row per name *and* device_type, so the matmul shows three times.
"""

from __future__ import annotations

from torch.autograd import DeviceType
from torch.autograd.profiler_util import EventList, FunctionEvent

GEMM = "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32"
ADD = "vectorized_elementwise_kernel<4, CUDAFunctor_add<float>>"


class Profile:
    """Stands in for torch.profiler.profile after a run: events() and key_averages(), as the course reads them."""

    def __init__(self, events: EventList):
        self._events = events

    def events(self) -> EventList:
        return self._events

    def key_averages(self) -> EventList:
        return self._events.key_averages()


def _cpu(i: int, name: str, start: float, end: float, label: bool = False) -> FunctionEvent:
    return FunctionEvent(id=i, name=name, thread=1, start_us=start, end_us=end, use_device="cuda",
                         device_type=DeviceType.CPU, is_user_annotation=label, stack=[], input_shapes=[])


def _gpu(i: int, name: str, start: float, end: float, label: bool = False) -> FunctionEvent:
    return FunctionEvent(id=i, name=name, thread=7, start_us=start, end_us=end, use_device="cuda",
                         device_type=DeviceType.CUDA, is_user_annotation=label, stack=[], input_shapes=[])


def matmul_steps(steps: int = 2, gap_us: float = 100.0) -> Profile:
    """`steps` steps, each: a label "forward" around aten::mm (kernel 400 µs) and aten::add (kernel 20 µs).

    Per step (µs from the step's start): the host launches the matmul at 10-25 and the add at 30-38, then waits in a
    synchronize until the kernels end; the device runs the gemm 30-430 and the add 430-450. The step ends at 460,
    and `gap_us` of host time pass before the next. Device busy: 420 of every 460 µs step.
    """
    events, i = [], 0
    for k in range(steps):
        t = k * (460.0 + gap_us)

        def nxt() -> int:
            nonlocal i
            i += 1
            return i

        step = _cpu(nxt(), f"ProfilerStep#{k + 1}", t, t + 460.0)
        forward = _cpu(nxt(), "forward", t + 5, t + 455, label=True)
        mm = _cpu(nxt(), "aten::mm", t + 10, t + 25)
        launch_mm = _cpu(nxt(), "cudaLaunchKernel", t + 18, t + 24)
        add = _cpu(nxt(), "aten::add", t + 30, t + 38)
        launch_add = _cpu(nxt(), "cudaLaunchKernel", t + 32, t + 37)
        sync = _cpu(nxt(), "cudaDeviceSynchronize", t + 40, t + 452)
        gemm = _gpu(nxt(), GEMM, t + 30, t + 430)
        elementwise = _gpu(nxt(), ADD, t + 430, t + 450)
        device_label = _gpu(nxt(), "forward", t + 25, t + 452, label=True)  # the label's span on the device
        mm.append_kernel(GEMM, 0, 400.0)  # as _parse_kineto_results links a kernel to its operator
        add.append_kernel(ADD, 0, 20.0)
        events += [step, forward, mm, launch_mm, add, launch_add, sync, gemm, elementwise, device_label]
    out = EventList(events, use_device="cuda")
    out._build_tree()
    return Profile(out)
