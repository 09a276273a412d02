"""Plain data: what a check's observation may hold when it crosses from the learner's process to the grader's.

A check's observing half runs the learner's code and returns plain values:
None, bool, int, float (nan and inf too), str, lists, tuples, dicts, torch
dtypes and small tensors. `encode` turns such a value into JSON-able data,
tagging what JSON has no word for; anything else the learner returned becomes
an `Opaque` stand-in that keeps only its type's name and a short repr, so a
judge can say "you returned a Foo" but never calls the learner's object.
`decode` is strict: it accepts only what `encode` writes, caps depth and size,
and builds values only from the grader's own types. In the learner's notebook
the observation makes the same round trip, so both grading paths judge the
same thing.
"""

from __future__ import annotations

import json
import math
import numbers
import re

MAX_BYTES = 4 << 20  # an observation larger than this (4 MiB of JSON) is refused
MAX_DEPTH = 40
MAX_TENSOR = 1 << 16  # elements
MAX_DIMS = 16  # a tensor's dimensions
MAX_NODES = 1 << 20  # values (numbers, strings, lists, dicts...) in one observation
MAX_TYPE_NAMES = 64  # distinct type names one decode gives classes of their own; the rest are called "object"
_NAME = re.compile(r"[A-Za-z_][\w.]{0,80}")


class PlainError(ValueError):
    """An observation that is not plain data (too big, too deep, or of a shape encode never writes)."""


class Opaque:
    """A stand-in for an object the learner returned that is not plain data: its type's name and its repr."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text

    def __eq__(self, other) -> bool:
        return False

    __hash__ = None


def _opaque(type_name: str, text: str, classes: dict[str, type] | None = None) -> Opaque:
    """An Opaque whose class bears the learner's type name, so messages can say what it was.

    The classes live in `classes`, one dict per decode (never a module-level
    cache a submission could grow), and at most MAX_TYPE_NAMES names get one.
    """
    classes = {} if classes is None else classes
    name = type_name if type(type_name) is str and _NAME.fullmatch(type_name) else "object"
    short = name.rsplit(".", 1)[-1]
    if short not in classes and len(classes) >= MAX_TYPE_NAMES:
        short = "object"
    cls = classes.get(short) or classes.setdefault(short, type(short, (Opaque,), {"__module__": "learner"}))
    return cls(text[:300])


def _type_name(value) -> str:
    kind = type(value)
    return f"{getattr(kind, '__module__', '?')}.{getattr(kind, '__qualname__', '?')}"


def _safe_repr(value) -> str:
    try:
        return repr(value)[:300]
    except Exception:  # noqa: BLE001  a learner's __repr__ may raise
        return f"<{_type_name(value)} object>"


def encode(value, depth: int = 0):
    """`value` as JSON-able data; exact plain types kept, the rest tagged or made opaque."""
    if depth > MAX_DEPTH:
        raise PlainError("nested too deeply")
    kind = type(value)
    if value is None or kind in (bool, int, str):
        return value
    if kind is float:
        return value if math.isfinite(value) else {"__float__": repr(value)}
    if kind is list:
        return [encode(v, depth + 1) for v in value]
    if kind is tuple:
        return {"__tuple__": [encode(v, depth + 1) for v in value]}
    if kind is dict:
        if all(type(k) is str and not k.startswith("__") for k in value):
            return {k: encode(v, depth + 1) for k, v in value.items()}
        return {"__dict__": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    module = getattr(kind, "__module__", "") or ""
    if module.split(".")[0] == "numpy" and isinstance(value, numbers.Real):
        return encode(value.item(), depth)  # a numpy scalar: the Python number it holds
    if module.split(".")[0] == "torch":
        import torch

        if kind is torch.dtype:
            return {"__dtype__": str(value).removeprefix("torch.")}
        if kind in (torch.Tensor, torch.nn.Parameter) and value.numel() <= MAX_TENSOR and not value.is_complex():
            flat = value.detach().to("cpu").reshape(-1)
            items = flat.tolist() if value.dtype != torch.bool else [bool(v) for v in flat.tolist()]
            return {"__tensor__": {"dtype": str(value.dtype).removeprefix("torch."), "shape": list(value.shape),
                                   "values": [encode(v, depth + 1) for v in items],
                                   "device": value.device.type, "grad": bool(value.requires_grad)}}
    return {"__opaque__": _type_name(value), "repr": _safe_repr(value)}


def decode(data, depth: int = 0):
    """Plain values back from what `encode` wrote; PlainError for anything else.

    Every cap (depth, number of values, tensor size and dimensions, distinct
    type names) is checked before any work that grows with what it caps.
    """
    return _Decoder().decode(data, depth)


class _Decoder:
    """One decode's state: how many values it has taken, and the Opaque classes it made."""

    def __init__(self):
        self.nodes = 0
        self.classes: dict[str, type] = {}

    def take(self, count: int) -> None:
        """Count `count` more values; PlainError past MAX_NODES."""
        self.nodes += count
        if self.nodes > MAX_NODES:
            raise PlainError(f"more than {MAX_NODES} values in one observation")

    def decode(self, data, depth: int):
        if depth > MAX_DEPTH:
            raise PlainError("nested too deeply")
        self.take(1)
        kind = type(data)
        if data is None or kind in (bool, int, str, float):
            return data
        if kind is list:
            self.take(len(data))
            return [self.decode(v, depth + 1) for v in data]
        if kind is not dict:
            raise PlainError(f"not plain data: {kind.__name__}")
        self.take(len(data))
        if len(data) == 1 and "__float__" in data:
            text = data["__float__"]
            if text not in ("nan", "inf", "-inf"):
                raise PlainError(f"bad float {str(text)[:40]!r}")
            return float(text)
        if len(data) == 1 and "__tuple__" in data and type(data["__tuple__"]) is list:
            self.take(len(data["__tuple__"]))
            return tuple(self.decode(v, depth + 1) for v in data["__tuple__"])
        if len(data) == 1 and "__dict__" in data and type(data["__dict__"]) is list:
            self.take(len(data["__dict__"]))
            out = {}
            for pair in data["__dict__"]:
                if type(pair) is not list or len(pair) != 2:
                    raise PlainError("bad dict entry")
                key = self.decode(pair[0], depth + 1)
                try:
                    out[key] = self.decode(pair[1], depth + 1)
                except TypeError:  # an unhashable key
                    raise PlainError(f"bad dict key: a {type(key).__name__}") from None
            return out
        if len(data) == 1 and "__dtype__" in data:
            return _dtype(data["__dtype__"])
        if len(data) == 1 and "__tensor__" in data:
            return self.tensor(data["__tensor__"], depth)
        if set(data) == {"__opaque__", "repr"} and type(data["__opaque__"]) is str and type(data["repr"]) is str:
            return _opaque(data["__opaque__"][:200], data["repr"], self.classes)
        if any(type(k) is not str or k.startswith("__") for k in data):
            raise PlainError("a dict key that encode never writes")
        return {k: self.decode(v, depth + 1) for k, v in data.items()}

    def tensor(self, spec, depth: int):
        import torch

        if type(spec) is not dict or set(spec) != {"dtype", "shape", "values", "device", "grad"}:
            raise PlainError("bad tensor")
        shape, values = spec["shape"], spec["values"]
        if type(shape) is not list or len(shape) > MAX_DIMS or type(values) is not list or len(values) > MAX_TENSOR:
            raise PlainError(f"bad tensor: at most {MAX_DIMS} dimensions and {MAX_TENSOR} values")
        size = 1
        for n in shape:  # multiplied one by one, each checked first: never a product of huge numbers
            if type(n) is not int or not 0 <= n <= MAX_TENSOR:
                raise PlainError("bad tensor shape")
            size = min(size * n, MAX_TENSOR + 1)
        if size != len(values):
            raise PlainError("bad tensor: its shape and values do not agree")
        dtype = _dtype(spec["dtype"])
        values = [self.decode(v, depth + 2) for v in values]  # nan and inf come as {"__float__": ...}
        if not all(type(v) in (int, float, bool) for v in values):
            raise PlainError("bad tensor: a value that is not a number")
        try:
            return torch.tensor(values, dtype=dtype).reshape(shape)
        except Exception as exc:  # noqa: BLE001  values the dtype cannot hold, an int too big for C
            raise PlainError(f"bad tensor: {type(exc).__name__}: {str(exc)[:200]}") from None


def _dtype(name):
    import torch

    if type(name) is not str or not _NAME.fullmatch(name) or not isinstance(getattr(torch, name, None), torch.dtype):
        raise PlainError(f"not a torch dtype: {str(name)[:40]!r}")
    return getattr(torch, name)


def dumps(value) -> str:
    """One line of JSON for `value`, refused when over MAX_BYTES."""
    text = json.dumps(encode(value), ensure_ascii=True, allow_nan=False)
    if len(text) > MAX_BYTES:
        raise PlainError(f"the observation is {len(text)} bytes; at most {MAX_BYTES} are taken")
    return text


def loads(text: str | bytes):
    """Plain values from one line of JSON written by dumps; PlainError for anything else."""
    if len(text) > MAX_BYTES:
        raise PlainError(f"the observation is {len(text)} bytes; at most {MAX_BYTES} are taken")
    try:
        data = json.loads(text, parse_constant=lambda name: (_ for _ in ()).throw(PlainError(name)))
    except PlainError:
        raise PlainError("not JSON: NaN or Infinity") from None
    except (ValueError, RecursionError, MemoryError) as exc:
        raise PlainError(f"not JSON: {type(exc).__name__}") from None
    return decode(data)


def roundtrip(value):
    """What the grader would receive for `value`: the learner's notebook judges exactly that."""
    return loads(dumps(value))
