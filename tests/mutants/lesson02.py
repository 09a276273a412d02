"""Mutants for lesson 02 (transfers)."""

LESSON = "02_transfers"

_ANSWERS = {"a": True, "b": False, "c": True, "d": False, "e": True, "f": True, "g": False,
            "h": False, "i": True, "j": False, "k": True, "l": True, "m": True, "n": False,
            "o": False, "p": True, "q": True}
_LINK = {"latency": 11e-6, "bandwidth": 12.8e9, "1000 copies of 4 KiB": 1000 * (11e-6 + 4096 / 12.8e9),
         "1 copy of 4 MiB": 11e-6 + 4 * 2**20 / 12.8e9}


def _copies(**changed) -> str:
    """COPY_PREDICTION with some values changed (keys with spaces passed as a dict in `values`)."""
    return f"COPY_PREDICTION = {{**{_LINK!r}, **{changed.get('values', {})!r}}}"


def loop_source(step_line: str, ret: str = "torch.stack(losses).tolist()", move: str = "x, y = x.to(device), y.to(device)",
                before: str = "pass") -> str:
    """train_fixed with one line of the step (the batch move, the line before the loop, the return) replaced."""
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
        loss = F.mse_loss(model(x), y)
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
    "transfer_seconds_check": [
        ("without latency", "def transfer_seconds(nbytes, bandwidth, latency): return nbytes / bandwidth", r"left out the latency"),
        ("milliseconds", "def transfer_seconds(nbytes, bandwidth, latency): return (latency + nbytes / bandwidth) * 1e3", r"milliseconds"),
        ("bits", "def transfer_seconds(nbytes, bandwidth, latency): return latency + 8 * nbytes / bandwidth", r"not bits"),
        ("bandwidth over bytes", "def transfer_seconds(nbytes, bandwidth, latency): return latency + bandwidth / nbytes if nbytes else latency",
         r"combined the bytes and the bandwidth the wrong way"),
        ("GB/s twice", "def transfer_seconds(nbytes, bandwidth, latency): return latency + nbytes / (bandwidth * 1e9)", r"already in bytes per second"),
        ("the same bytes cost the same", _copies(values={"1000 copies of 4 KiB": 11e-6 + 4 * 2**20 / 12.8e9}),
         r"1000 copies pay it 1000 times"),
        ("the big copy pays only its bytes", _copies(values={"1 copy of 4 MiB": 4 * 2**20 / 12.8e9}),
         r"pays only for its bytes"),
        ("small copies pay only their fixed cost", _copies(values={"1000 copies of 4 KiB": 1000 * 11e-6}),
         r"each also moves its 4096 bytes"),
        ("bandwidth as bytes over the small copy's time", _copies(values={"bandwidth": 4096 / (11e-6 + 4096 / 12.8e9)}),
         r"Both copies paid the same fixed cost: what does the difference"),
        ("latency in microseconds", _copies(values={"latency": 11.0}), r"that is microseconds; write seconds"),
        ("4 MiB taken as 4,000,000 bytes", _copies(values={"1 copy of 4 MiB": 11e-6 + 4e6 / 12.8e9}), r"4,194,304 bytes"),
        ("a fixed cost per 4 KiB of the big copy", _copies(values={"1 copy of 4 MiB": 1000 * 11e-6 + 4 * 2**20 / 12.8e9}),
         r"fixed cost is per copy"),
    ],
    "SYNC_ANSWERS_check": [
        ("True everywhere", f"SYNC_ANSWERS = {dict.fromkeys(_ANSWERS, True)!r}", r"True for every line"),
        ("False everywhere", f"SYNC_ANSWERS = {dict.fromkeys(_ANSWERS, False)!r}", r"False for every line"),
        ("torch.where waits", f"SYNC_ANSWERS = {{**{_ANSWERS!r}, 'g': True}}",
         r"^1 of your 17 answers disagree.*only queues more work on the device[^;]*\.$"),
        ("f-string does not wait", f"SYNC_ANSWERS = {{**{_ANSWERS!r}, 'l': False}}",
         r"^1 of your 17 answers .*formatting it in an f-string"),
        ("pageable copy does not wait", f"SYNC_ANSWERS = {{**{_ANSWERS!r}, 'm': False}}",
         r"^1 of your 17 answers .*ordinary \(pageable\) host memory"),
        ("a comparison waits", f"SYNC_ANSWERS = {{**{_ANSWERS!r}, 'o': True}}",
         r"^1 of your 17 answers .*comparing a device tensor with a number gives another device tensor"),
        ("masked_select only queues", f"SYNC_ANSWERS = {{**{_ANSWERS!r}, 'p': False}}",
         r"^1 of your 17 answers .*cannot be allocated until the host learns how many"),
        ("unique only queues", f"SYNC_ANSWERS = {{**{_ANSWERS!r}, 'q': False}}",
         r"^1 of your 17 answers .*cannot be allocated until the host learns how many"),
        ("pinned copy waits", f"SYNC_ANSWERS = {{**{_ANSWERS!r}, 'n': True}}", r"pinned host memory with non_blocking=True"),
        ("strings not bools", f"SYNC_ANSWERS = {{k: 'yes' if v else 'no' for k, v in {_ANSWERS!r}.items()}}", r"answer with True or False"),
        ("a label missing", f"SYNC_ANSWERS = {{k: v for k, v in {_ANSWERS!r}.items() if k != 'h'}}", r"missing \['h'\]"),
        ("old quiz (no copies)", f"SYNC_ANSWERS = {{k: v for k, v in {_ANSWERS!r}.items() if k not in 'mnopq'}}",
         r"missing \['m', 'n', 'o', 'p', 'q'\]"),
    ],
    "sync_points_check": [
        ("copies are not sync points",
         _sync_points("    return {'buggy': steps, 'read once': 1, 'resident': 1, 'pinned': 1}[version]"),
         r"counts only the reads.*pageable"),
        ("one copy per batch, not x and y",
         _sync_points("    return {'buggy': 2 * steps, 'read once': steps + 1, 'resident': n_batches + 1, 'pinned': 1}[version]"),
         r"two tensors, x and y"),
        ("pinned copies block",
         _sync_points("    return {'buggy': 3 * steps, 'read once': 2 * steps + 1, 'resident': 2 * n_batches + 1, 'pinned': 2 * steps + 1}[version]"),
         r"pinned memory with non_blocking=True does not make the host wait"),
        ("resident copies per step",
         _sync_points("    return {'buggy': 3 * steps, 'read once': 2 * steps + 1, 'resident': 2 * steps + 1, 'pinned': 1}[version]"),
         r"grow with n_batches, not with steps"),
        ("forgets the read after the loop",
         _sync_points("    return {'buggy': 3 * steps, 'read once': 2 * steps, 'resident': 2 * n_batches, 'pinned': 0}[version]"),
         r"leaves out the one read after the loop"),
        ("resident copies only the batches it reaches",
         _sync_points("    return {'buggy': 3 * steps, 'read once': 2 * steps + 1, 'resident': 2 * min(steps, n_batches) + 1, 'pinned': 1}[version]"),
         r"copies only the batches the loop reaches"),
        ("returns a float",
         _sync_points("    return float({'buggy': 3 * steps, 'read once': 2 * steps + 1, 'resident': 2 * n_batches + 1, 'pinned': 1}[version])"),
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
         r"blocking copies in 16 steps.*without non_blocking=True"),
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
    ],
}
