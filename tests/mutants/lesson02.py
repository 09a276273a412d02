"""Mutants for lesson 02 (transfers)."""

LESSON = "02_transfers"

_ANSWERS = {"a": True, "b": False, "c": True, "d": False, "e": True, "f": True, "g": False,
            "h": False, "i": True, "j": False, "k": True, "l": True, "m": True, "n": False,
            "o": False, "p": True, "q": True, "r": True}
_WHY = "the host waits when Python needs a value or a data-dependent size"
_L, _B = 8.0e-6, 24e9  # the link LINK_COPIES implies
_COSTS = {"1000 copies of 4 KiB": 1000 * (_L + 4096 / _B), "1 copy of 4 MiB": _L + 4 * 2**20 / _B}


def _copies(**changed) -> str:
    """COPY_PREDICTION with some values changed (keys with spaces passed as a dict in `values`)."""
    return f"COPY_PREDICTION = {{**{_COSTS!r}, 'why': 'a guess with a reason', **{changed.get('values', {})!r}}}"


def _quiz(**changed) -> str:
    return f"SYNC_ANSWERS = {{**{_ANSWERS!r}, 'why': {_WHY!r}, **{changed!r}}}"


def _fit(body: str) -> str:
    return f"def link_from_copies(runs):\n{body}\n"


_PER_COPY = "    pts = [(n, t / k) for k, n, t in runs]\n    (s, ts), (b, tb) = min(pts), max(pts)\n    bw = (b - s) / (tb - ts)\n"
_NAIVE_FIT = _fit("    pts = [(n, t / k) for k, n, t in runs]\n    (small, t_small), (big, t_big) = min(pts), max(pts)\n"
                  "    return t_small, big / t_big")
# the textbook line: each run's total bytes against its total seconds, as if the run were one copy
_TOTAL_FIT = _fit("    pts = [(k * n, t) for k, n, t in runs]\n    (s, ts), (b, tb) = min(pts), max(pts)\n"
                  "    bw = (b - s) / (tb - ts)\n    return ts - s / bw, bw")
_TOTAL_LSQ = _fit("    import numpy as np\n    x = np.array([k * n for k, n, t in runs], float); y = np.array([t for k, n, t in runs])\n"
                  "    slope, intercept = np.polyfit(x, y, 1)\n    return float(intercept), float(1 / slope)")


# The buggy loop's loss: the outlier rows left out through a boolean mask (a sync point every step); and the same loss
# with nothing the host must wait for (the other rows' error zeroed, the sum over the count of kept rows).
MASKED = "keep = (y - y.mean()).abs() <= 2 * y.std()\n        loss = (model(x) - y)[keep].square().mean()"
WHERE = ("keep = (y - y.mean()).abs() <= 2 * y.std()\n"
         "        loss = torch.where(keep, model(x) - y, 0.0).square().sum() / keep.sum()")


def loop_source(step_line: str, ret: str = "torch.stack(losses).tolist()", move: str = "x, y = x.to(device), y.to(device)",
                before: str = "pass", loss: str = WHERE) -> str:
    """train_fixed with one line of the step (the batch move, the loss, the line before the loop, the return) replaced."""
    return f"""
import torch
import torch.nn.functional as F
def train_fixed(model, batches, device, steps):
    model = model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    {before}
    for step in range(steps):
        x, y = batches[step % len(batches)]
        {move}
        {loss}
        opt.zero_grad()
        loss.backward()
        opt.step()
        {step_line}
    return {ret}
"""


RESIDENT = {"before": "batches = [(x.to(device), y.to(device)) for x, y in batches]", "move": "pass"}
PINNED = {"before": "batches = [(x.pin_memory(), y.pin_memory()) for x, y in batches]",
          "move": "x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)"}


def resident_loop(step_line: str = "losses.append(loss.detach())", **kwargs) -> str:
    """A loop with the data set moved to the device before the loop, and one line changed."""
    return loop_source(step_line, **{**RESIDENT, **kwargs})


def _sync_points(body: str) -> str:
    return f"def sync_points(version, steps, n_batches):\n{body}\n"


MUTANTS = {
    "link_from_copies_check": [
        ("a run read as one copy of all its bytes (the textbook line)", _TOTAL_FIT, r"reads each run as one copy of all its bytes"),
        ("a least-squares line through the runs' totals", _TOTAL_LSQ, r"reads each run as one copy of all its bytes"),
        ("the run's time against one copy's bytes",
         _fit("    pts = [(n, t) for k, n, t in runs]\n    (s, ts), (b, tb) = min(pts), max(pts)\n    bw = (b - s) / (tb - ts)\n"
              "    return ts - s / bw, bw"), r"sets a whole run's seconds against the bytes of one of its copies"),
        ("one copy's time against the run's bytes",
         _fit("    pts = [(k * n, t / k) for k, n, t in runs]\n    (s, ts), (b, tb) = min(pts), max(pts)\n    bw = (b - s) / (tb - ts)\n"
              "    return ts - s / bw, bw"), r"sets the time of one copy against the bytes of the whole run"),
        ("each copy read alone", _NAIVE_FIT, r"reads the smallest copy's time as the fixed cost"),
        ("rate from the big copy alone", _fit(_PER_COPY + "    return ts - s / bw, b / tb"),
         r"divides the biggest copy's bytes by its whole time"),
        ("bandwidth in bits", _fit(_PER_COPY + "    return ts - s / bw, 8 * bw"), r"not in bytes per second"),
        ("latency in microseconds", _fit(_PER_COPY + "    return (ts - s / bw) * 1e6, bw"), r"not in seconds"),
        ("bandwidth first", _fit(_PER_COPY + "    return bw, ts - s / bw"), r"latency first"),
        ("returns a dict", _fit(_PER_COPY + "    return {'latency': ts - s / bw, 'bandwidth': bw}"), r"return a pair of numbers"),
        ("the time scale flipped", _fit(_PER_COPY + "    return ts - s / bw, bw / 2"), r"not the link those runs crossed"),
    ],
    "COPY_PREDICTION_check": [
        ("prediction without a reason", "COPY_PREDICTION.pop('why')", r"needs exactly the keys"),
        ("prediction as a bare number", "COPY_PREDICTION = 0.008", r"should be a dict"),
        ("a cost in words", _copies(values={"1 copy of 4 MiB": "fast"}), r"write a positive number"),
    ],
    "SYNC_ANSWERS_check": [
        ("prediction without a reason", "SYNC_ANSWERS.pop('why')", r"needs exactly the keys"),
        ("strings not bools", f"SYNC_ANSWERS = {{**{{k: 'yes' if v else 'no' for k, v in {_ANSWERS!r}.items()}}, 'why': 'w'}}",
         r"write True or False"),
        ("1 and 0 for True and False", f"SYNC_ANSWERS = {{**{{k: int(v) for k, v in {_ANSWERS!r}.items()}}, 'why': 'w'}}",
         r"write True or False"),
        ("a label missing", "SYNC_ANSWERS.pop('h')", r"missing \['h'\]"),
        ("old quiz (no pageable non_blocking line)", "SYNC_ANSWERS.pop('r')", r"missing \['r'\]"),
        ("the answer key called", "from grader.checks import lesson02\n"
                                  "SYNC_ANSWERS = {**{l: lesson02.snippet_waits(l) for l in lesson02.SYNC_SNIPPETS}, 'why': 'w'}",
         r"the check's own answer key"),
    ],
    "sync_points_check": [
        ("the mask's sync point left out (the old loop's answer)",
         _sync_points("    return {'buggy': 3 * steps, 'read once': 2 * steps + 1, 'resident': 2 * n_batches + 1, 'pinned': 1}[version]"),
         r"leaves out a line that makes the host wait once in every step of every version"),
        ("copies are not sync points",
         _sync_points("    return {'buggy': 2 * steps, 'read once': steps + 1, 'resident': steps + 1, 'pinned': steps + 1}[version]"),
         r"counts only the reads.*pageable"),
        ("only .item() and the read after the loop",
         _sync_points("    return {'buggy': steps, 'read once': 1, 'resident': 1, 'pinned': 1}[version]"),
         r"counts only the \.item\(\) and the read after the loop"),
        ("one copy per batch, not x and y",
         _sync_points("    return {'buggy': 3 * steps, 'read once': 2 * steps + 1, 'resident': n_batches + steps + 1, 'pinned': steps + 1}[version]"),
         r"two tensors, x and y"),
        ("pinned copies block",
         _sync_points("    return {'buggy': 4 * steps, 'read once': 3 * steps + 1, 'resident': 2 * n_batches + steps + 1, 'pinned': 3 * steps + 1}[version]"),
         r"pinned memory with non_blocking=True does not make the host wait"),
        ("resident copies per step",
         _sync_points("    return {'buggy': 4 * steps, 'read once': 3 * steps + 1, 'resident': 3 * steps + 1, 'pinned': steps + 1}[version]"),
         r"grow with n_batches, not with steps"),
        ("forgets the read after the loop",
         _sync_points("    return {'buggy': 4 * steps, 'read once': 3 * steps, 'resident': 2 * n_batches + steps, 'pinned': steps}[version]"),
         r"leaves out the one read after the loop"),
        ("resident copies only the batches it reaches",
         _sync_points("    return {'buggy': 4 * steps, 'read once': 3 * steps + 1, 'resident': 2 * min(steps, n_batches) + steps + 1, 'pinned': steps + 1}[version]"),
         r"copies only the batches the loop reaches"),
        ("returns a float",
         _sync_points("    return float({'buggy': 4 * steps, 'read once': 3 * steps + 1, 'resident': 2 * n_batches + steps + 1, 'pinned': steps + 1}[version])"),
         r"an int"),
    ],
    "train_fixed_check": [
        (".item() every step", resident_loop("losses.append(loss.item())", ret="losses"), r"calls \.item\(\) once per step: 16 reads for 16 steps"),
        ("float(loss) every step", resident_loop("losses.append(float(loss))", ret="losses"), r"calls float\(\) on a tensor once per step"),
        ("prints the loss every step", resident_loop("losses.append(loss.detach()); print(f'step {step}: {loss:.4f}')"),
         r"formats a tensor in an f-string .* once per step"),
        ("print(loss) every step", resident_loop("losses.append(loss.detach()); print(loss)"), r"prints a tensor once per step"),
        ("if on the loss every step", resident_loop("losses.append(loss.detach())\n        if loss > 1e6: break"), r"tests a tensor in an `if`"),
        ("reads every step with .cpu()", resident_loop("losses.append(loss.detach().cpu())"), r"calls \.cpu\(\) once per step"),
        ("copies in the loop from pageable memory", loop_source("losses.append(loss.detach())"),
         r"inside the step loop with blocking copies \(32 blocking copies in 16 steps"),
        ("non_blocking without pinning", loop_source("losses.append(loss.detach())",
                                                     move="x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)"),
         r"asks for non_blocking=True.*pageable"),
        ("pinned but blocking copies", loop_source("losses.append(loss.detach())", before=PINNED["before"]),
         r"inside the step loop with blocking copies \(32 blocking copies in 16 steps"),
        ("reads each loss after the loop", resident_loop(ret="[l.item() for l in losses]"),
         r"after the loop you read the losses one at a time \(\.item\(\) ×16"),
        ("keeps the graphs alive", resident_loop("losses.append(loss)"), r"keeps every step's loss with its autograd graph"),
        ("keeps the graphs alive, pinned", loop_source("losses.append(loss)", **PINNED), r"graphs were still alive"),
        ("batch moved twice", loop_source("losses.append(loss.detach())", before=PINNED["before"],
                                          move=PINNED["move"] + "; x = batches[step % len(batches)][0].to(device, non_blocking=True)"),
         r"moved to the device more than once per step"),
        ("whole batch moved twice", loop_source("losses.append(loss.detach())", before=PINNED["before"],
                                                move=PINNED["move"] + "; x, y = batches[step % len(batches)]; " + PINNED["move"]),
         r"moved to the device twice per step"),
        ("returns tensors", resident_loop(ret="losses"), r"list of tensors"),
        ("never moves the batch", loop_source("losses.append(loss.detach())", move="pass"), r"never moves the batches"),
        ("different loss", resident_loop(ret="(torch.stack(losses) * 2).tolist()"), r"losses differ from the buggy loop's"),
        # the step's own sync point, which the usual ways out (resident, pinned) leave in
        ("the resident way out, the mask kept (the textbook fix)", resident_loop(loss=MASKED),
         r"indexes with a boolean mask once per step: 16 reads for 16 steps"),
        ("the pinned way out, the mask kept", loop_source("losses.append(loss.detach())", loss=MASKED, **PINNED),
         r"indexes with a boolean mask once per step"),
        ("the kept rows found with nonzero()", resident_loop(
            loss="idx = ((y - y.mean()).abs() <= 2 * y.std()).nonzero()[:, 0]\n"
                 "        loss = (model(x) - y).index_select(0, idx).square().mean()"), r"calls nonzero\(\) once per step"),
        ("the outliers zeroed, the mean over every row", resident_loop(
            loss="keep = (y - y.mean()).abs() <= 2 * y.std()\n        loss = ((model(x) - y) * keep).square().mean()"),
         r"a mean over every row of the batch, the outlier rows included"),
        ("an if on whether any row is an outlier", resident_loop(
            loss=WHERE + "\n        if keep.all(): loss = (model(x) - y).square().mean()"), r"tests a tensor in an `if`"),
    ],
}


# A prediction's wrong first guess scores less, it does not fail (tests/test_prediction_scores.py runs these in
# both graders); what fails a prediction's cell is a malformed answer (the MUTANTS above).
PREDICTION_MUTANTS = {
    "COPY_PREDICTION_check": [
        ("each copy read alone", _copies(values={"1000 copies of 4 KiB": 1000 * (18.92e-6 + 4096 / 23.7e9),
                                                 "1 copy of 4 MiB": 18.92e-6 + 4 * 2**20 / 23.7e9}),
         r"read each copy alone"),
        ("the same bytes cost the same", _copies(values={"1000 copies of 4 KiB": _L + 4 * 2**20 / _B}),
         r"what does each copy pay whatever its size, and how many copies are there"),
        # time in proportion to bytes, at the big copy's bytes per second: no fixed cost anywhere
        ("no fixed cost: time in proportion to bytes", _copies(values={"1000 copies of 4 KiB": 1000 * 4096 * 707.05e-6 / 2**24,
                                                                     "1 copy of 4 MiB": 4 * 2**20 * 707.05e-6 / 2**24}),
         r"in proportion to the bytes, as if a copy paid only for its bytes.*fixed cost and a rate"),
        # each size scaled from the copy nearest it: 4 KiB at the small copy's bytes per second, 4 MiB at the big one's
        ("each copy's own rate applied to another size", _copies(values={"1000 copies of 4 KiB": 1000 * 4096 * 18.92e-6 / 2**18,
                                                                        "1 copy of 4 MiB": 4 * 2**20 * 707.05e-6 / 2**24}),
         r"each copy's own bytes per second to another size.*fixed cost and a rate"),
        ("a fixed cost per 4 KiB of the big copy", _copies(values={"1 copy of 4 MiB": 1000 * _L + 4 * 2**20 / _B}),
         r"how many times does one copy pay"),
        ("milliseconds", _copies(values={"1000 copies of 4 KiB": 1e3 * _COSTS["1000 copies of 4 KiB"],
                                         "1 copy of 4 MiB": 1e3 * _COSTS["1 copy of 4 MiB"]}), r"milliseconds"),
    ],
    "SYNC_ANSWERS_check": [
        ("True everywhere", _quiz(**dict.fromkeys(_ANSWERS, True)), r"True for every line"),
        ("False everywhere", _quiz(**dict.fromkeys(_ANSWERS, False)), r"False for every line"),
        ("torch.where waits", _quiz(g=True), r"makes a new device tensor from device tensors"),
        ("f-string does not wait", _quiz(l=False), r"formatting it in an f-string"),
        ("pageable copy does not wait", _quiz(m=False), r"ordinary \(pageable\) host memory"),
        ("pageable non_blocking copy does not wait", _quiz(r=False), r"what does CUDA say such a copy may do"),
        ("a comparison waits", _quiz(o=True), r"comparing a device tensor with a number and keeping the result"),
        ("masked_select only queues", _quiz(p=False), r"who allocates it, and what must they know first"),
        ("unique only queues", _quiz(q=False), r"who allocates it, and what must they know first"),
        ("pinned copy waits", _quiz(n=True), r"pinned host memory with non_blocking=True"),
        ("three lines wrong", _quiz(g=True, l=False, q=False), r"disagrees with the counter on some lines"),
    ],
}
