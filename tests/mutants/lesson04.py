"""Mutants for lesson 04 (memory): the mistakes learners make counting what is in memory."""

LESSON = "04_memory"

_STATE_HEAD = """
import torch
def state_bytes(model, optimizer):
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    grads = sum(p.grad.numel() * p.grad.element_size() for p in model.parameters() if p.grad is not None)
"""

_HOOK_HEAD = """
import torch
def activation_bytes(model, batch):
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved = {}
"""

_IN_PARAMS = "t.untyped_storage().data_ptr() not in params"
_STORAGE = "t.untyped_storage().nbytes()"


def _recorder(keep: str, key: str, size: str) -> str:
    """An activation_bytes whose pack records `size` under `key` for every saved tensor `t` where `keep` holds."""
    return _HOOK_HEAD + f"""
    def pack(t):
        if {keep}:
            saved[{key}] = {size}
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(batch)
    return sum(saved.values())
"""


# max_batch: the backward pass's line through the two largest batches, and the optimizer's step (a peak above it)
_MAX_BATCH_LINE = """
def max_batch(m, peaks):
    (b1, p1), (b2, p2) = sorted(peaks.items())[-2:]
    per = (p2 - p1) / (b2 - b1)
    fixed = p1 - b1 * per
"""
_MAX_BATCH_STEP = "    if max((p for b, p in peaks.items() if p > fixed + per * b), default=0) > m:\n        return 0\n"


def _training_8bit(moments: str, small: bool = True) -> str:
    """training_bytes right for the torch optimizers; 8-bit Adam on a large enough tensor returned by `moments`."""
    return f"""
def training_bytes(n, precision, optimizer):
    copies = 4 + 4 if precision == "fp32" else 2 + 2 + 4
    if optimizer == "adam8bit" and {'n >= 4096' if small else 'True'}:
    {moments}
    return n * (copies + 4 * {{"sgd": 0, "momentum": 1, "adam": 2, "adam8bit": 2}}[optimizer])
"""


MUTANTS = {
    "state_bytes_check": [
        (
            "prediction: Adam's state counted before the first step()",
            "BYTES_PER_PARAM = {'before step()': 10, 'after step()': 10}",
            r"on its first step\(\), not when it is built",
        ),
        (
            "prediction: the gradients forgotten before step()",
            "BYTES_PER_PARAM = {'before step()': 4, 'after step()': 10}",
            r"every trained parameter has a \.grad",
        ),
        (
            "prediction: the frozen layer counted as if it trained",
            "BYTES_PER_PARAM = {'before step()': 8, 'after step()': 16}",
            r"the frozen layer's too",
        ),
        (
            "prediction: one running average after step()",
            "BYTES_PER_PARAM = {'before step()': 6, 'after step()': 8}",
            r"what does AdamW keep",
        ),
        (
            "elements counted instead of bytes",
            """
import torch
def state_bytes(model, optimizer):
    return {"parameters": sum(p.numel() for p in model.parameters()),
            "gradients": sum(p.grad.numel() for p in model.parameters() if p.grad is not None),
            "optimizer": sum(v.numel() for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v))}
""",
            r"counts numbers, not bytes",
        ),
        (
            "the naive first try: what the state_dicts hold",
            """
import torch
def state_bytes(model, optimizer):
    params = model.state_dict()
    named = dict(model.named_parameters())
    grads = [named.get(k) for k in params]
    return {"parameters": sum(t.numel() * t.element_size() for t in params.values()),
            "gradients": sum(p.grad.numel() * p.grad.element_size() for p in grads if p is not None and p.grad is not None),
            "optimizer": sum(v.numel() * v.element_size() for s in optimizer.state_dict()["state"].values()
                             for v in s.values() if torch.is_tensor(v))}
""",
            r"counts the model's buffers too",
        ),
        (
            "every layer's weight and bias, a shared weight twice",
            """
import torch
def state_bytes(model, optimizer):
    ps = [p for m in model.modules() for p in m.parameters(recurse=False)]
    return {"parameters": sum(p.numel() * p.element_size() for p in ps),
            "gradients": sum(p.grad.numel() * p.grad.element_size() for p in set(ps) if p.grad is not None),
            "optimizer": sum(v.numel() * v.element_size() for s in optimizer.state.values() for v in s.values()
                             if torch.is_tensor(v))}
""",
            r"counts one tensor twice",
        ),
        (
            "parameters and buffers, each once",
            """
import torch
def state_bytes(model, optimizer):
    ps = list(model.parameters()) + list(model.buffers())
    return {"parameters": sum(p.numel() * p.element_size() for p in ps),
            "gradients": sum(p.grad.numel() * p.grad.element_size() for p in model.parameters() if p.grad is not None),
            "optimizer": sum(v.numel() * v.element_size() for s in optimizer.state.values() for v in s.values()
                             if torch.is_tensor(v))}
""",
            r"buffers",
        ),
        (
            "optimizer state forgotten",
            _STATE_HEAD + """
    return {"parameters": params, "gradients": grads, "optimizer": 0}
""",
            r"0 bytes of optimizer state after AdamW took a step",
        ),
        (
            "optimizer state assumed (2 moments per parameter), not read",
            _STATE_HEAD + """
    return {"parameters": params, "gradients": grads, "optimizer": 2 * params}
""",
            r"one layer is frozen",
        ),
        (
            "a gradient for every parameter, frozen ones too",
            """
import torch
def state_bytes(model, optimizer):
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    state = sum(v.numel() * v.element_size() for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v))
    return {"parameters": params, "gradients": params, "optimizer": state}
""",
            r"frozen layer whose \.grad is None",
        ),
        (
            "only one Adam moment",
            _STATE_HEAD + """
    state = sum(s["exp_avg"].numel() * s["exp_avg"].element_size() for s in optimizer.state.values())
    return {"parameters": params, "gradients": grads, "optimizer": state}
""",
            r"only one of AdamW's two moments",
        ),
    ],
    "training_bytes_check": [
        (
            "mixed precision keeps the optimizer's buffers in bfloat16",
            """
def training_bytes(n, precision, optimizer):
    moments = {"sgd": 0, "momentum": 1, "adam": 2, "adam8bit": 2}[optimizer]
    return n * (8 + 4 * moments) if precision == "fp32" else n * (2 + 2 + 4 + 2 * moments)
""",
            r"running averages 2 bytes wide",
        ),
        (
            "mixed precision with a float32 gradient kept beside the bfloat16 one (20 bytes with Adam)",
            """
def training_bytes(n, precision, optimizer):
    moments = {"sgd": 0, "momentum": 1, "adam": 2, "adam8bit": 2}[optimizer]
    return n * (8 + 4 * moments) if precision == "fp32" else n * (2 + 2 + 4 + 4 + 4 * moments)
""",
            r"counts a float32 gradient beside the bfloat16 one",
        ),
        (
            "a master copy counted in fp32 too",
            """
def training_bytes(n, precision, optimizer):
    moments = {"sgd": 0, "momentum": 1, "adam": 2, "adam8bit": 2}[optimizer]
    return n * (4 + 4 + 4 + 4 * moments) if precision == "fp32" else n * (2 + 2 + 4 + 4 * moments)
""",
            r"fp32 training has no use for",
        ),
        (
            "12 bytes per parameter for mixed precision: fp32 master copy forgotten",
            """
def training_bytes(n, precision, optimizer):
    moments = {"sgd": 0, "momentum": 1, "adam": 2, "adam8bit": 2}[optimizer]
    return n * (8 + 4 * moments) if precision == "fp32" else n * (4 + 4 * moments)
""",
            r"a copy of the weights is missing",
        ),
        (
            "copies counted instead of bytes",
            """
def training_bytes(n, precision, optimizer):
    return n * (2 + {"sgd": 0, "momentum": 1, "adam": 2, "adam8bit": 2}[optimizer])
""",
            r"counts tensors .*not bytes",
        ),
        (
            "optimizer state forgotten",
            """
def training_bytes(n, precision, optimizer):
    return n * (8 if precision == "fp32" else 4)
""",
            r"no optimizer state",
        ),
        (
            "everything 16-bit in mixed precision",
            """
def training_bytes(n, precision, optimizer):
    per = 8 + 4 * {"sgd": 0, "momentum": 1, "adam": 2, "adam8bit": 2}[optimizer]
    return n * per if precision == "fp32" else n * per // 2
""",
            r"you made every copy 2 bytes wide",
        ),
        (
            "parameters x 2 bytes",
            "def training_bytes(n, precision, optimizer): return 2 * n if precision == 'mixed' else 4 * n",
            r"weights alone",
        ),
        (
            "8-bit Adam: a byte per value, the scales left out (the tables' 2 bytes)",
            _training_8bit("    return n * copies + 2 * n"),
            r"one byte per value and nothing else",
        ),
        (
            "8-bit Adam: one set of scales for both moments",
            _training_8bit("    return n * copies + 2 * n + 4 * -(-n // 256)"),
            r"one set of scales between them",
        ),
        (
            "8-bit Adam: whole blocks only",
            _training_8bit("    return n * copies + 2 * (n + 4 * (n // 256))"),
            r"a block that is partly filled",
        ),
        (
            "8-bit Adam: a small tensor in 8 bits too",
            _training_8bit("    return n * copies + 2 * (n + 4 * -(-n // 256))", small=False),
            r"too small for 8-bit moments",
        ),
        (
            "8-bit Adam: in mixed precision, no fp32 master copy",
            _training_8bit("    return n * (copies - 4 * (precision == 'mixed')) + 2 * (n + 4 * -(-n // 256))"),
            r"a copy of the weights is missing",
        ),
    ],
    "predict_saved_bytes_check": [
        ("elements, not bytes", "def predict_saved_bytes(batch, widths, activation='relu'): return batch * sum(widths[:-1])",
         r"number of saved elements"),
        ("each hidden layer counted twice (before and after ReLU)",
         "def predict_saved_bytes(batch, widths, activation='relu'): return 4 * batch * (widths[0] + 2 * sum(widths[1:-1]))",
         r"more than autograd keeps on the (relu|tanh|sigmoid) stack"),
        ("every layer's output counted, the last one too",
         "def predict_saved_bytes(batch, widths, activation='relu'): return 4 * batch * sum(widths)", r"counted the last Linear's output"),
        ("the input batch forgotten", "def predict_saved_bytes(batch, widths, activation='relu'): return 4 * batch * sum(widths[1:-1])",
         r"leaves out something the first Linear's backward needs"),
        ("one sample, not the batch", "def predict_saved_bytes(batch, widths, activation='relu'): return 4 * sum(widths[:-1])",
         r"bytes for one sample"),
        (
            "the weights counted as activations",
            """
def predict_saved_bytes(batch, widths, activation="relu"):
    return 4 * batch * sum(widths[:-1]) + 4 * sum(a * b for a, b in zip(widths, widths[1:]))
""",
            r"counted the weights",
        ),
    ],
    "activation_bytes_check": [
        (
            "each saved tensor counted once by id(t), at its storage's size",
            _recorder(_IN_PARAMS, "id(t)", _STORAGE),
            r"(counted|counts the same memory) more than once",
        ),
        (
            "each saved tensor counted once by id(t), at its own size (a view's part)",
            _recorder(_IN_PARAMS, "id(t)", "t.numel() * t.element_size()"),
            r"what does a view keep alive",
        ),
        (
            "parameters skipped by isinstance(t, nn.Parameter): the saved weight is a view, not a Parameter",
            _recorder("not isinstance(t, torch.nn.Parameter)", "t.untyped_storage().data_ptr()", _STORAGE),
            r"Parameters are not\s+activations",
        ),
        (
            "parameters counted as activations",
            """
import torch
def activation_bytes(model, batch):
    saved = {}
    def pack(t):
        saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(batch)
    return sum(saved.values())
""",
            r"Parameters are not\s+activations",
        ),
        (
            "shared storages counted once per save",
            _HOOK_HEAD + """
    total = [0]
    def pack(t):
        if t.untyped_storage().data_ptr() not in params:
            total[0] += t.untyped_storage().nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(batch)
    return total[0]
""",
            r"(counted|counts the same memory) more than once",
        ),
        (
            "elements counted instead of bytes",
            _recorder(_IN_PARAMS, "t.untyped_storage().data_ptr()", "t.numel()"),
            r"counts elements, not bytes",
        ),
        (
            "measured under no_grad: nothing saved",
            _HOOK_HEAD + """
    def pack(t):
        saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t
    with torch.no_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(batch)
    return sum(v for k, v in saved.items() if k not in params)
""",
            r"returned 0",
        ),
        (
            "parameters left out, buffers counted (the course's recorder as the MLP table uses it)",
            _recorder(_IN_PARAMS, "t.untyped_storage().data_ptr()", _STORAGE),
            r"counts memory the model holds whatever the batch",
        ),
        (
            "only tensors whose first dimension is the batch's",
            _recorder("t.dim() and t.shape[0] == batch.shape[0]", "t.untyped_storage().data_ptr()", _STORAGE),
            r"their size does not grow with the batch",
        ),
    ],
    "max_batch_check": [
        (
            "the line through the two smallest batches (the textbook two-point line)",
            """
def max_batch(m, peaks):
    (b1, p1), (b2, p2) = sorted(peaks.items())[:2]
    per = (p2 - p1) // (b2 - b1)
    return max(0, (m - (p1 - b1 * per)) // per)
""",
            r"your line goes through the smallest batches",
        ),
        (
            "a least-squares line through every batch tried",
            """
def max_batch(m, peaks):
    n = len(peaks)
    mb, mp = sum(peaks) / n, sum(peaks.values()) / n
    per = sum((b - mb) * (p - mp) for b, p in peaks.items()) / sum((b - mb) ** 2 for b in peaks)
    return max(0, int((m - (mp - per * mb)) // per))
""",
            r"fitted through every batch tried",
        ),
        (
            "the backward pass's line alone: the optimizer's step never checked",
            _MAX_BATCH_LINE + "    return max(0, int((m - fixed) // per))\n",
            r"the step's other moment, whose peak does not grow with the batch",
        ),
        (
            "per sample = peak / batch",
            """
def max_batch(m, peaks):
    b, p = max(peaks.items())
    return max(0, int(m // (p / b)))
""",
            r"divides memory by peak / batch",
        ),
        (
            "ignores the fixed bytes",
            _MAX_BATCH_LINE + _MAX_BATCH_STEP + "    return int(m // per)\n",
            r"ignores the fixed bytes",
        ),
        (
            "negative when nothing fits",
            _MAX_BATCH_LINE + _MAX_BATCH_STEP + "    return int((m - fixed) // per)\n",
            r"never a negative batch",
        ),
        (
            "rounds up",
            "import math\n" + _MAX_BATCH_LINE + _MAX_BATCH_STEP + "    return max(0, math.ceil((m - fixed) / per))\n",
            r"need more bytes than memory holds",
        ),
        (
            "float division",
            _MAX_BATCH_LINE + _MAX_BATCH_STEP + "    return max(0, (m - fixed) // per)\n",
            r"return an int",
        ),
        (
            "strict less-than: an exact fit refused",
            _MAX_BATCH_LINE + _MAX_BATCH_STEP + "    return max(0, int((m - fixed - 1) // per))  # fixed + b * per < m, not <=\n",
            r"fills memory to the last byte still fits",
        ),
    ],
}

# Shortcuts (issue 29): the course's own code called instead of the reasoning; each check notices and says so.
MUTANTS["training_bytes_check"].append((
    "shortcut: memory.training_terms",
    "from grader import memory as _course\n"
    "def training_bytes(n_params, precision, optimizer):\n"
    "    return int(n_params * sum(_course.training_terms(precision, optimizer).values()))\n",
    r"calls grader\.memory\.training_terms",
))
MUTANTS["activation_bytes_check"].append((
    "shortcut: memory.saved_bytes",
    "from grader import memory as _course\n"
    "def activation_bytes(model, batch):\n"
    "    return _course.saved_bytes(model, batch)\n",
    r"calls grader\.memory\.saved_bytes",
))
MUTANTS["predict_saved_bytes_check"].append((
    "shortcut: measure with the course's recorder instead of predicting",
    "import torch\nfrom grader import memory as _course\n"
    "def predict_saved_bytes(batch, widths, activation='relu'):\n"
    "    return _course.saved_bytes(_course.mlp(widths, activation), torch.randn(batch, widths[0]))\n",
    r"calls grader\.memory\.(saved_bytes|mlp)",
))
MUTANTS["state_bytes_check"].append((
    "shortcut: memory.storage_nbytes",
    "from grader import memory as _course\n"
    "def state_bytes(model, optimizer):\n"
    "    grads = [p.grad for p in model.parameters() if p.grad is not None]\n"
    "    state = [v for s in optimizer.state.values() for v in s.values() if hasattr(v, 'untyped_storage')]\n"
    "    return {'parameters': _course.storage_nbytes(model.parameters()), 'gradients': _course.storage_nbytes(grads),\n"
    "            'optimizer': _course.storage_nbytes(state)}\n",
    r"calls grader\.memory\.storage_nbytes",
))


# A prediction's wrong value is scored, not failed (issue 29): see tests/mutants/lesson03.py.
PREDICTION_MUTANTS = {"BYTES_PER_PARAM_check": [
    (n, src + "\nBYTES_PER_PARAM['why'] = 'a guess with a reason'", pattern)
    for n, src, pattern in MUTANTS["state_bytes_check"] if src.startswith("BYTES_PER_PARAM =")]}
MUTANTS["state_bytes_check"] = [m for m in MUTANTS["state_bytes_check"] if not m[1].startswith("BYTES_PER_PARAM =")]
MUTANTS["BYTES_PER_PARAM_check"] = [
    ("prediction without a reason", "BYTES_PER_PARAM.pop('why')", r"needs exactly the keys"),
    ("prediction as a bare number", "BYTES_PER_PARAM = 16", r"should be a dict"),
]
MUTANTS["predict_saved_bytes_check"].append((
    "every activation keeps only its output, GELU too",
    "def predict_saved_bytes(batch, widths, activation='relu'):\n    return 4 * batch * sum(widths[:-1])\n",
    r"less than autograd keeps on the GELU stack",
))
