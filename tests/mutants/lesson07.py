"""Mutants for lesson 07 (data parallelism): the wrong versions learners write, each with the words its check must say."""

LESSON = "07_data_parallel"

_AR = "def allreduce_seconds(nbytes, world, latency, bandwidth):\n"

_FIT_HEAD = """
def _line(xs, ts, w):
    s0 = sum(w); sx = sum(a * x for a, x in zip(w, xs)); sxx = sum(a * x * x for a, x in zip(w, xs))
    st = sum(a * t for a, t in zip(w, ts)); sxt = sum(a * x * t for a, x, t in zip(w, xs, ts))
    det = s0 * sxx - sx * sx
    return (st * sxx - sx * sxt) / det, (s0 * sxt - sx * st) / det
"""

_BUCKET = "def bucket_plan(param_bytes, forward_order, cap, first_cap):\n"

_AVG = "def average_gradients(model, world_size, all_reduce):\n"

def _mem(deepspeed=(2, 2, 12), autocast=(4, 4, 8)) -> str:
    """The head of a bytes_per_rank: w, g, o, the bytes of weights, gradients and optimizer state in each layout."""
    (dw, dg, do), (aw, ag, ao) = deepspeed, autocast
    return f"""
def bytes_per_rank(n_params, world, stage, layout="deepspeed"):
    w, g, o = ({dw:.1f} * n_params, {dg:.1f} * n_params, {do:.1f} * n_params) if layout == "deepspeed" else (
        {aw:.1f} * n_params, {ag:.1f} * n_params, {ao:.1f} * n_params)
"""


_MEM = _mem()  # both layouts right
_STAGED = """
    return {"ddp": w + g + o, "zero1": w + g + o / world, "zero2": w + (g + o) / world,
            "zero3": (w + g + o) / world}[stage]
"""  # each stage shards what it should

MUTANTS = {
    "allreduce_seconds_check": [
        ("every rank sends everything to every other rank", _AR + """
    if world == 1:
        return 0.0
    return (world - 1) * latency + (world - 1) * nbytes / bandwidth
""", r"every rank sent its whole message to every other rank"),
        ("the /n missing", _AR + """
    if world == 1:
        return 0.0
    return 2 * (world - 1) * latency + 2 * (world - 1) * nbytes / bandwidth
""", r"each step moved the whole message"),
        ("one latency term", _AR + """
    if world == 1:
        return 0.0
    return latency + 2 * (world - 1) / world * nbytes / bandwidth
""", r"only one latency"),
        ("a cost for world 1", _AR + """
    return latency + 2 * (world - 1) / world * nbytes / bandwidth + (nbytes / bandwidth if world == 1 else 0)
""", r"with one rank there is nobody to exchange"),
        ("2n steps", _AR + """
    return 2 * world * latency + 2 * nbytes / bandwidth
""", r"with one rank there is nobody|the wrong number of steps"),
        ("2n steps, world 1 special-cased", _AR + """
    if world == 1:
        return 0.0
    return 2 * world * latency + 2 * nbytes / bandwidth
""", r"the wrong number of steps"),
    ],
    "fit_latency_bandwidth_check": [
        ("unweighted least squares", _FIT_HEAD + """
def fit_latency_bandwidth(nbytes, seconds, world):
    a, b = _line(nbytes, seconds, [1.0] * len(seconds))
    return a / (2 * (world - 1)), 2 * (world - 1) / (world * b)
""", r"counted every point alike and lost the latency"),
        ("ring factor missing", _FIT_HEAD + """
def fit_latency_bandwidth(nbytes, seconds, world):
    a, b = _line(nbytes, seconds, [1.0 / t**2 for t in seconds])
    return a, 1.0 / b
""", r"intercept and the inverse of its slope"),
        ("latency and bandwidth swapped", _FIT_HEAD + """
def fit_latency_bandwidth(nbytes, seconds, world):
    a, b = _line(nbytes, seconds, [1.0 / t**2 for t in seconds])
    return 2 * (world - 1) / (world * b), a / (2 * (world - 1))
""", r"latency and bandwidth swapped"),
        ("two end points", """
def fit_latency_bandwidth(nbytes, seconds, world):
    b = (seconds[-1] - seconds[0]) / (nbytes[-1] - nbytes[0])
    a = seconds[0] - b * nbytes[0]
    return a / (2 * (world - 1)), 2 * (world - 1) / (world * b)
""", r"the data were made with"),
        ("torch.linalg.lstsq in float32", """
import torch
def fit_latency_bandwidth(nbytes, seconds, world):
    x, t = torch.tensor(nbytes, dtype=torch.float32), torch.tensor(seconds, dtype=torch.float32)
    rows = torch.stack([torch.ones_like(x), x], 1) / t[:, None]
    a, b = torch.linalg.lstsq(rows, torch.ones_like(t)[:, None]).solution[:, 0].tolist()
    return a / (2 * (world - 1)), 2 * (world - 1) / (world * b)
""", r"Work in float64"),
        ("np.polyfit with w = 1/t**2", """
import numpy as np
def fit_latency_bandwidth(nbytes, seconds, world):
    b, a = np.polyfit(nbytes, seconds, 1, w=[1 / t**2 for t in seconds])
    return float(a) / (2 * (world - 1)), 2 * (world - 1) / (world * float(b))
""", r"1/t⁴ on the squared residuals"),
        ("bandwidth in GB/s", _FIT_HEAD + """
def fit_latency_bandwidth(nbytes, seconds, world):
    a, b = _line(nbytes, seconds, [1.0 / t**2 for t in seconds])
    return a / (2 * (world - 1)), 2 * (world - 1) / (world * b) / 1e9
""", r"bandwidth in GB/s"),
    ],
    "bucket_plan_check": [
        ("forward order", _BUCKET + """
    out, bucket, size = [], [], 0
    for i in forward_order:
        bucket.append(i)
        size += param_bytes[i]
        if size >= (cap if out else first_cap):
            out.append(bucket)
            bucket, size = [], 0
    return out + ([bucket] if bucket else [])
""", r"starts with the parameter the forward pass used first"),
        ("> for >=", _BUCKET + """
    out, bucket, size = [], [], 0
    for i in reversed(forward_order):
        bucket.append(i)
        size += param_bytes[i]
        if size > (cap if out else first_cap):
            out.append(bucket)
            bucket, size = [], 0
    return out + ([bucket] if bucket else [])
""", r"reaches its cap exactly did not close"),
        ("closed before the parameter that overflows", _BUCKET + """
    out, bucket, size = [], [], 0
    for i in reversed(forward_order):
        if bucket and size + param_bytes[i] > (cap if out else first_cap):
            out.append(bucket)
            bucket, size = [], 0
        bucket.append(i)
        size += param_bytes[i]
    return out + ([bucket] if bucket else [])
""", r"no\s+bucket of yours holds more than its cap"),
        ("a parameter larger than the cap split", _BUCKET + """
    out, bucket, size = [], [], 0
    for i in reversed(forward_order):
        left = param_bytes[i]
        while left > 0:
            limit = cap if out else first_cap
            take = min(left, limit - size)
            bucket.append(i)
            size += take
            left -= take
            if size >= limit:
                out.append(bucket)
                bucket, size = [], 0
    return out + ([bucket] if bucket else [])
""", r"must appear exactly once \(a bucket holds whole parameters"),
        ("a parameter larger than the cap in a bucket of its own", _BUCKET + """
    out, bucket, size = [], [], 0
    for i in reversed(forward_order):
        if param_bytes[i] >= (cap if out else first_cap):
            if bucket:
                out.append(bucket)
            out.append([i])
            bucket, size = [], 0
            continue
        bucket.append(i)
        size += param_bytes[i]
        if size >= (cap if out else first_cap):
            out.append(bucket)
            bucket, size = [], 0
    return out + ([bucket] if bucket else [])
""", r"got a bucket of its own"),
        ("last partial bucket dropped", _BUCKET + """
    out, bucket, size = [], [], 0
    for i in reversed(forward_order):
        bucket.append(i)
        size += param_bytes[i]
        if size >= (cap if out else first_cap):
            out.append(bucket)
            bucket, size = [], 0
    return out
""", r"the last bucket is missing"),
        ("positions in the reversed list", _BUCKET + """
    out, bucket, size = [], [], 0
    for pos, i in enumerate(reversed(forward_order)):
        bucket.append(pos)
        size += param_bytes[i]
        if size >= (cap if out else first_cap):
            out.append(bucket)
            bucket, size = [], 0
    return out + ([bucket] if bucket else [])
""", r"positions in the order you walked"),
        ("reverse registration order, forward_order ignored (the second edition's answer)", _BUCKET + """
    out, bucket, size = [], [], 0
    for i in reversed(range(len(param_bytes))):
        bucket.append(i)
        size += param_bytes[i]
        if size >= (cap if out else first_cap):
            out.append(bucket)
            bucket, size = [], 0
    return out + ([bucket] if bucket else [])
""", r"reverse of the registration order, whatever forward_order"),
        ("first_cap ignored", _BUCKET + """
    out, bucket, size = [], [], 0
    for i in reversed(forward_order):
        bucket.append(i)
        size += param_bytes[i]
        if size >= cap:
            out.append(bucket)
            bucket, size = [], 0
    return out + ([bucket] if bucket else [])
""", r"first_cap was ignored"),
        ("first_cap for every bucket", _BUCKET + """
    out, bucket, size = [], [], 0
    for i in reversed(forward_order):
        bucket.append(i)
        size += param_bytes[i]
        if size >= first_cap:
            out.append(bucket)
            bucket, size = [], 0
    return out + ([bucket] if bucket else [])
""", r"every bucket closed at first_cap"),
    ],
    "average_gradients_check": [
        ("summed, not divided", _AVG + """
    for p in model.parameters():
        if p.grad is not None:
            all_reduce(p.grad)
""", r"all_reduce sums across the ranks; divide"),
        ("divided twice", _AVG + """
    for p in model.parameters():
        if p.grad is not None:
            p.grad /= world_size
            all_reduce(p.grad)
            p.grad /= world_size
""", r"divided by world_size twice"),
        ("reduces p.data", _AVG + """
    for p in model.parameters():
        all_reduce(p.data)
        p.data /= world_size
""", r"passed the weights \(p or p.data\) to all_reduce"),
        ("reduces a copy never written back", _AVG + """
    for p in model.parameters():
        if p.grad is not None:
            g = p.grad.clone()
            all_reduce(g)
            g /= world_size
""", r"never wrote the result back"),
        ("one all_reduce per parameter (the second edition's answer)", _AVG + """
    for p in model.parameters():
        if p.grad is not None:
            all_reduce(p.grad)
            p.grad /= world_size
""", r"called all_reduce \d+ times, once per tensor"),
        ("one flat copy, never written back", _AVG + """
    import torch
    flat = torch.cat([p.grad.reshape(-1) for p in model.parameters() if p.grad is not None])
    all_reduce(flat)
    flat /= world_size
""", r"never wrote the result back"),
        ("unpacked from the same offset", _AVG + """
    import torch
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    all_reduce(flat)
    flat /= world_size
    for g in grads:
        g.copy_(flat[:g.numel()].view_as(g))
""", r"where each one's part starts and ends"),
        ("one flat buffer for gradients of two dtypes (torch's _flatten_dense_tensors does the same)", _AVG + """
    import torch
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    all_reduce(flat)
    flat /= world_size
    start = 0
    for g in grads:
        g.copy_(flat[start:start + g.numel()].view_as(g))
        start += g.numel()
""", r"travelled in a wider dtype than they are kept in"),
        ("skips the biases", _AVG + """
    import torch
    for m in model.modules():
        if isinstance(m, torch.nn.Linear) and m.weight.grad is not None:
            all_reduce(m.weight.grad)
            m.weight.grad /= world_size
""", r"averaged some parameters but not"),
        ("no None check", _AVG + """
    import torch
    grads = [p.grad for p in model.parameters()]
    flat = torch.cat([g.reshape(-1) for g in grads])
    all_reduce(flat)
    flat /= world_size
    start = 0
    for g in grads:
        g.copy_(flat[start:start + g.numel()].view_as(g))
        start += g.numel()
""", r"p.grad is None\) has nothing to average"),
        ("torch.distributed.all_reduce, not the one given", _AVG + """
    import torch.distributed as dist
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)
            p.grad /= world_size
""", r"Call the all_reduce your function was given"),
        ("steps the weights too", _AVG + """
    import torch
    for p in model.parameters():
        if p.grad is not None:
            all_reduce(p.grad)
            p.grad /= world_size
            with torch.no_grad():
                p -= 0.1 * p.grad
""", r"changed the weights on rank"),
    ],
    "bytes_per_rank_check": [
        ("everything divided at stage 1", _MEM + """
    if stage == "ddp":
        return w + g + o
    if stage == "zero1":
        return (w + g + o) / world
    if stage == "zero2":
        return w + (g + o) / world
    return (w + g + o) / world
""", r"divided everything among the ranks\. Stage 1 shards only"),
        ("gradients not sharded at stage 2", _MEM + """
    if stage == "ddp":
        return w + g + o
    if stage in ("zero1", "zero2"):
        return w + g + o / world
    return (w + g + o) / world
""", r"the same as stage 1: stage 2 also shards the gradients"),
        ("Adam without the fp32 master copy", _mem(deepspeed=(2, 2, 8), autocast=(2, 2, 8)) + _STAGED,
         r"short of DeepSpeed's layout"),
        ("the layout ignored: DeepSpeed's bytes for autocast too (the ZeRO paper's table)",
         _mem(autocast=(2, 2, 12)) + _STAGED, r"is what DeepSpeed's layout keeps, at every stage"),
        ("autocast with a master copy of the weights", _mem(autocast=(4, 4, 12)) + _STAGED,
         r"a second copy\s+of weights that are float32 already"),
        ("autocast's gradients taken as fp16", _mem(autocast=(4, 2, 8)) + _STAGED,
         r"keeps some of autocast's state at 2 bytes"),
        ("autocast's Adam moments taken as bf16", _mem(autocast=(4, 4, 4)) + _STAGED,
         r"keeps some of autocast's state at 2 bytes"),
        ("autocast's stage 1 shards the gradients too", _MEM + """
    if layout == "autocast" and stage == "zero1":
        return w + (g + o) / world
""" + _STAGED, r"'autocast'\) is off, though DeepSpeed's layout is right"),
        ("weights not sharded at stage 3", _MEM + """
    return {"ddp": w + g + o, "zero1": w + g + o / world, "zero2": w + (g + o) / world,
            "zero3": w + (g + o) / world}[stage]
""", r"stage 3 shards the weights too"),
    ],
    "bubble_fraction_check": [
        ("the textbook (p-1)/(m+p-1) for stages of any time", """
def bubble_fraction(stage_seconds, microbatches):
    p = len(stage_seconds)
    return (p - 1) / (microbatches + p - 1)
""", r"\[1\.0, 2\.0, 1\.0, 1\.0\], 8\) gives what stages of equal time would"),
        ("every slot as long as the slowest stage", """
def bubble_fraction(stage_seconds, microbatches):
    p, m = len(stage_seconds), microbatches
    return 1 - m * sum(stage_seconds) / (p * (m + p - 1) * max(stage_seconds))
""", r"slots as long as the slowest stage's"),
        ("the slowest stage's idle share alone", """
def bubble_fraction(stage_seconds, microbatches):
    m, slowest = microbatches, max(stage_seconds)
    return 1 - m * slowest / (sum(stage_seconds) + (m - 1) * slowest)
""", r"idle share of the slowest stage alone"),
        ("idle over busy", """
def bubble_fraction(stage_seconds, microbatches):
    p, m = len(stage_seconds), microbatches
    return p * (sum(stage_seconds) + (m - 1) * max(stage_seconds)) / (m * sum(stage_seconds)) - 1
""", r"idle time over the time spent computing"),
        ("one micro-batch too many past the slowest stage", """
def bubble_fraction(stage_seconds, microbatches):
    p, m = len(stage_seconds), microbatches
    return 1 - m * sum(stage_seconds) / (p * (sum(stage_seconds) + m * max(stage_seconds)))
""", r"one micro-batch's time off"),
    ],
    "ALLREDUCE_PREDICTION_check": [
        ("a ring through one NIC per node", "ALLREDUCE_PREDICTION = {'16 GPUs ms': 37.5, 'why': 'a ring of 16 at 50 GB/s'}",
         r"one NIC per node"),
        ("the node's NVLink phases only", "ALLREDUCE_PREDICTION = {'16 GPUs ms': 3.89, 'why': 'NVLink is the slow part'}",
         r"only the phases inside a node"),
        ("NVLink at its both-ways figure", "ALLREDUCE_PREDICTION = {'16 GPUs ms': 4.44, 'why': 'NVLink 900 GB/s'}",
         r"both directions summed"),
        ("prediction without a reason", "ALLREDUCE_PREDICTION = {'16 GPUs ms': 6.4}", r"needs exactly the keys"),
    ],
    "ZERO_PREDICTION_check": [
        ("DDP fits", "ZERO_PREDICTION = {'stage': 'ddp', 'why': '80 GB is a lot'}", r"ddp does not fit one card"),
        ("the ZeRO paper's layout looked up", "ZERO_PREDICTION = {'stage': 'zero1', 'why': '2+2 bytes whole, 12 sharded'}",
         r"zero1 does not fit one card"),
        ("only ZeRO-3 fits", "ZERO_PREDICTION = {'stage': 'zero3', 'why': 'a big model needs everything sharded'}",
         r"an earlier stage already does"),
        ("a word that is not a stage", "ZERO_PREDICTION = {'stage': 'stage 1', 'why': 'x'}", r"write one of"),
    ],
}
