"""Lesson 02_transfers: the sealed functions' bodies (grader.checks._sealed). Never packaged nor released:
scripts/build_keys.py seals each top-level function into grader/checks/keys/02_transfers.sealed.json. Each runs in
grader/checks/lesson02.py's globals, where its stub is."""


def _implied_link() -> tuple[float, float]:
    """(latency s, bandwidth bytes/s): the least-squares line of LINK_COPIES' seconds against their bytes."""
    sizes = torch.tensor([float(n) for n, _ in LINK_COPIES], dtype=torch.float64)
    times = torch.tensor([t for _, t in LINK_COPIES], dtype=torch.float64)
    design = torch.stack([torch.ones_like(sizes), sizes], dim=1)
    fixed, per_byte = torch.linalg.lstsq(design, times[:, None]).solution[:, 0].tolist()
    return fixed, 1 / per_byte


def _costs(latency: float, bandwidth: float) -> dict:
    return {"1000 copies of 4 KiB": 1000 * (latency + 4 * KiB / bandwidth), "1 copy of 4 MiB": latency + 4 * MiB / bandwidth}


def _naive() -> tuple[float, float]:
    """Each copy read alone: the small copy's time as the fixed cost, the big copy's bytes over its time as the rate."""
    (small, t_small), (big, t_big) = LINK_COPIES
    return t_small, big / t_big


def _copy_mistake(got: dict) -> str | None:
    """The kind of mistake in a COPY_PREDICTION (seconds), or None; never a value."""
    latency, bandwidth = _implied_link()
    want, naive = _costs(latency, bandwidth), _costs(*_naive())
    many, one = got["1000 copies of 4 KiB"], got["1 copy of 4 MiB"]
    if close(many, naive["1000 copies of 4 KiB"], rel=0.1) and not close(many, want["1000 copies of 4 KiB"], rel=0.25):
        return ("you read each copy alone: the small copy's time is not all fixed cost, and the big copy's is not "
                "all bytes (section 1: neither copy shows you which part is which on its own)")
    if close(one, 1000 * latency + 4 * MiB / bandwidth, rel=0.1):
        return ("you charged the one 4 MiB copy a fixed cost per 4 KiB of it: how many times does one copy pay the "
                "part of its time that does not grow with its bytes?")
    # time in proportion to bytes (no fixed cost), at a rate read off a copy or the link: the two copies' own rates
    # (each copy's bytes over its whole time) and the link's; 2% apart from charging the fixed cost once (below)
    rates = [n / t for n, t in LINK_COPIES]
    per_many, per_one = 1000 * 4 * KiB / many, 4 * MiB / one  # bytes/s each cost implies, with nothing fixed
    many_rate = next((r for r in rates + [bandwidth] if close(per_many, r, rel=0.02)), None)
    one_rate = next((r for r in rates + [bandwidth] if close(per_one, r, rel=0.02)), None)
    if many_rate is not None and one_rate is not None and many_rate != one_rate:
        return ("you applied each copy's own bytes per second to another size: a copy's time is a fixed cost as well "
                "as its bytes, so its bytes over its time is not a rate that carries to a copy of another size. A "
                "copy pays a fixed cost and a rate; two copies of different sizes tell you both (section 1)")
    if many_rate is not None and many_rate == one_rate:
        return ("your costs are in proportion to the bytes, as if a copy paid only for its bytes: every copy also "
                "pays a fixed cost, whatever its size. A copy pays a fixed cost and a rate; two copies of different "
                "sizes tell you both (section 1)")
    if close(many, latency + 1000 * 4 * KiB / bandwidth, rel=0.1) or close(many, one, rel=0.1):
        return ("your 1000 small copies cost about what one copy of the same bytes costs: what does each copy pay "
                "whatever its size, and how many copies are there?")
    if close(many, 1e6 * want["1000 copies of 4 KiB"], rel=0.1) or close(one, 1e6 * want["1 copy of 4 MiB"], rel=0.1):
        return "that is microseconds; write seconds"
    if close(many, 1e3 * want["1000 copies of 4 KiB"], rel=0.1) or close(one, 1e3 * want["1 copy of 4 MiB"], rel=0.1):
        return "that is milliseconds; write seconds"
    if close(one, latency + 4e6 / bandwidth, rel=0.01) and not close(one, want["1 copy of 4 MiB"], rel=0.01):
        return "4 MiB is 4 × 2²⁰ bytes (a KiB is 1024 bytes, a MiB 1024 KiB), not 4 million"
    if min(predictions.band(got[k], want[k], tight=_COPY_TIGHT) for k in _COPY_KEYS) < 1.0:  # the band's own measure
        return ("not what the link the two copies imply predicts: work that link out from those two copies alone, not "
                "from figures for other links (section 1)")
    return None


def _copy_band(first: dict, context: dict) -> tuple[float, str]:
    """COPY_PREDICTION's first guess: 1 when both costs are within a factor 1.15 of the link's, 0.5 within a factor 2,
    else 0. (At 1.25, copy test r23 took the course's assumed 10 µs for the fixed cost and the big copy's bytes over
    its time for the rate, and was in: the fixed cost has to come from the two copies.) A first guess short of the full
    band always has a mistake to name: _copy_mistake asks the same band (copy test r22 was told its guess "holds" at
    half the band, when the mistake finder measured closeness its own way)."""
    want = _costs(*_implied_link())
    fraction = min(predictions.band(first[k], want[k], tight=_COPY_TIGHT, loose=1.0) for k in _COPY_KEYS)
    mistake = _copy_mistake(first)
    if mistake is not None:
        return fraction, f"your first guess: {mistake}"
    return fraction, "your first guess holds on the link the two copies imply"


def _copy_model(context: dict) -> str:
    costs = _costs(*_implied_link())
    return (f"1000 copies of 4 KiB take {timing_text(costs['1000 copies of 4 KiB'])}, one copy of 4 MiB "
            f"{timing_text(costs['1 copy of 4 MiB'])}")


def _read_of(name, args, kwargs, this, inputs, on_device):
    """Runs in grader/syncs.py's globals. Whether a torch call reads from the device: (op, bytes, new host tensor)."""
    reads = {
        "item": ".item()",
        "__float__": "float()",
        "__int__": "int()",
        "__index__": "int()",
        "__bool__": "bool() (an `if` on a tensor)",
        "__repr__": "print()",
        "__format__": "f-string",
        "tolist": ".tolist()",
        "numpy": ".numpy()",
        "__array__": "numpy.asarray()",
        "cpu": ".cpu()",
        "nonzero": "nonzero()",
        "argwhere": "nonzero()",
        "masked_select": "boolean mask",
        "unique": "unique()",
        "unique_consecutive": "unique()",
    }
    if this is None:
        return None
    if name in reads and on_device(this):
        sized = name in ("nonzero", "argwhere", "unique", "unique_consecutive", "masked_select")
        return reads[name], 8 if sized else this.nbytes, name == "cpu"
    if name == "where" and len(args) == 1 and not kwargs and on_device(this):
        return "nonzero()", 8, False
    if name == "__getitem__":
        leaves, _ = tree_flatten(list(args[1:]))
        masked = any(isinstance(x, torch.Tensor) and x.dtype in (torch.bool, torch.uint8) for x in leaves)
        if masked and any(on_device(t) for t in inputs):
            return "boolean mask", 8, False
    return None


def _concept_of():
    """Quiz label -> the idea it tests (a key of _CONCEPTS): which lines share an idea says which share an answer."""
    return {"a": "number", "b": "compute", "c": "text", "d": "keep", "e": "branch", "f": "size",
            "g": "compute", "h": "metadata", "i": "to host", "j": "keep", "k": "size", "l": "text",
            "m": "pageable", "n": "pinned", "o": "compare", "p": "size", "q": "size",
            "r": "pageable async"}


def show_probes():
    """SYNC_ANSWERS's reveal: each kind of line alone under the counter, and the groups the waiting lines fall in."""
    import pandas as pd
    from IPython.display import display

    rows = probe_rows()
    display(pd.DataFrame(rows).drop(columns=["pretend", "device"]).set_index("line"))
    print(f"counter device: {rows[0]['device']} ({'pretend: tensors stay on the CPU' if rows[0]['pretend'] else 'real'}). "
          "x_host is ordinary host memory, x_pinned pinned host memory, x a tensor on the device.")
    print("The lines that wait fall in five groups: a Python number (.item(), float(), int(), an if); text "
          "(print, an f-string); a device tensor's values in host memory (.cpu(), .tolist() — a host tensor's .numpy() "
          "waits for nothing); a size that depends on the data (nonzero, a boolean mask, unique); and a copy to the "
          "device from pageable memory, non_blocking or not.")


def _doing(op):
    """What the learner's line does, by the op the counter reported (train_fixed's messages)."""
    doing = {
        ".item()": "calls .item()",
        "float()": "calls float() on a tensor",
        "int()": "calls int() on a tensor",
        "bool() (an `if` on a tensor)": "tests a tensor in an `if` (bool() of a tensor)",
        "print()": "prints a tensor",
        "f-string": "formats a tensor in an f-string (print(f'...{loss}'))",
        ".tolist()": "calls .tolist()",
        ".numpy()": "calls .numpy()",
        ".cpu()": "calls .cpu()",
        ".to('cpu')": "calls .to('cpu')",
        "nonzero()": "calls nonzero()",
        "boolean mask": "indexes with a boolean mask",
    }
    return doing.get(op, "reads " + op)


def _concepts():
    """The idea each quiz line tests, in the words a failed check uses: a question, never which label, never the answer."""
    return {
        "number": "turning a device tensor into a Python number (.item(), float()): where must its value be, and when is "
                  "it ready?",
        "text": "printing a tensor, or formatting it in an f-string: what does Python need to write its digits?",
        "branch": "an `if` on a tensor: what does Python need to choose a branch?",
        "size": "a result whose size depends on the data (a boolean mask, nonzero, unique): who allocates it, and what "
                "must they know first?",
        "to host": "copying a tensor to host memory (.cpu(), then .numpy()): when can the host use those values?",
        "pageable": "a plain copy to the device from ordinary (pageable) host memory: what does PyTorch do before "
                    ".to(device) returns (section 2)?",
        "pinned": "a copy from pinned host memory with non_blocking=True: what, if anything, must finish before the call "
                  "returns?",
        "pageable async": "non_blocking=True on a copy from ordinary (pageable) host memory: what does CUDA say such a "
                          "copy may do (section 2)?",
        "compute": "a line that makes a new device tensor from device tensors (a matmul, relu, torch.where with a mask): "
                   "does Python need any of its values yet?",
        "keep": "keeping a value on the device (loss.detach() in a list, adding into a device tensor): is anything read?",
        "metadata": "a tensor's shape: where does the host keep it?",
        "compare": "comparing a device tensor with a number and keeping the result: what is that result, and where does "
                   "it live?",
    }
