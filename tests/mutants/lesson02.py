"""Mutants for lesson 02 (transfers)."""

LESSON = "02_transfers"

_ANSWERS = {"a": True, "b": False, "c": True, "d": False, "e": True, "f": True,
            "g": False, "h": False, "i": True, "j": False, "k": True, "l": True}


def loop_source(step_line: str, ret: str = "torch.stack(losses).tolist()", move: str = "x, y = x.to(device), y.to(device)") -> str:
    """train_fixed with one line of the step (and the batch move, and the return) replaced."""
    return f"""
import torch
import torch.nn.functional as F
def train_fixed(model, batches, device, steps):
    model = model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
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


MUTANTS = {
    "transfer_seconds_check": [
        ("without latency", "def transfer_seconds(nbytes, bandwidth, latency): return nbytes / bandwidth", r"left out the latency"),
        ("milliseconds", "def transfer_seconds(nbytes, bandwidth, latency): return (latency + nbytes / bandwidth) * 1e3", r"milliseconds"),
        ("bits", "def transfer_seconds(nbytes, bandwidth, latency): return latency + 8 * nbytes / bandwidth", r"not bits"),
        ("bandwidth over bytes", "def transfer_seconds(nbytes, bandwidth, latency): return latency + bandwidth / nbytes if nbytes else latency",
         r"bytes divided by bandwidth"),
        ("GB/s twice", "def transfer_seconds(nbytes, bandwidth, latency): return latency + nbytes / (bandwidth * 1e9)", r"already in bytes per second"),
    ],
    "SYNC_ANSWERS_check": [
        ("True everywhere", f"SYNC_ANSWERS = {dict.fromkeys(_ANSWERS, True)!r}", r"True for every line"),
        ("False everywhere", f"SYNC_ANSWERS = {dict.fromkeys(_ANSWERS, False)!r}", r"False for every line"),
        ("torch.where waits", f"SYNC_ANSWERS = {{**{_ANSWERS!r}, 'g': True}}", r"\(g\) `y = torch.where\(mask, x, 0.0\)` does not make the host wait"),
        ("f-string does not wait", f"SYNC_ANSWERS = {{**{_ANSWERS!r}, 'l': False}}", r"\(l\) .* does make the host wait: the counter saw f-string"),
        ("strings not bools", f"SYNC_ANSWERS = {{k: 'yes' if v else 'no' for k, v in {_ANSWERS!r}.items()}}", r"answer with True or False"),
        ("a label missing", f"SYNC_ANSWERS = {{k: v for k, v in {_ANSWERS!r}.items() if k != 'h'}}", r"missing \['h'\]"),
    ],
    "train_fixed_check": [
        (".item() every step", loop_source("losses.append(loss.item())", ret="losses"), r"calls \.item\(\) once per step: 16 reads for 16 steps"),
        ("float(loss) every step", loop_source("losses.append(float(loss))", ret="losses"), r"calls float\(\) on a tensor once per step"),
        ("prints the loss every step", loop_source("losses.append(loss.detach()); print(f'step {step}: {loss:.4f}')"),
         r"formats a tensor in an f-string .* once per step"),
        ("print(loss) every step", loop_source("losses.append(loss.detach()); print(loss)"), r"prints a tensor once per step"),
        ("if on the loss every step", loop_source("losses.append(loss.detach())\n        if loss > 1e6: break"), r"tests a tensor in an `if`"),
        ("batch moved twice", loop_source("losses.append(loss.detach())", move="x, y = x.to(device), y.to(device); x = batches[step % len(batches)][0].to(device)"),
         r"moved to the device more than once per step"),
        ("whole batch moved twice", loop_source("losses.append(loss.detach())", move="x, y = x.to(device), y.to(device); x, y = batches[step % len(batches)]; x, y = x.to(device), y.to(device)"),
         r"moved to the device twice per step"),
        ("returns tensors", loop_source("losses.append(loss.detach())", ret="losses"), r"list of tensors"),
        ("never moves the batch", loop_source("losses.append(loss.detach())", move="pass"), r"never moves the batches"),
        ("reads every step with .cpu()", loop_source("losses.append(loss.detach().cpu())", ret="torch.stack(losses).tolist()"), r"calls \.cpu\(\) once per step"),
        ("different loss", loop_source("losses.append(loss.detach())", ret="(torch.stack(losses) * 2).tolist()"), r"losses differ from the buggy loop's"),
    ],
}
