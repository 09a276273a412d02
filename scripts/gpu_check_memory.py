"""Lesson 04 on a CUDA machine: the activation model against the hooks, and the allocator beside them.

Run on a machine with an NVIDIA GPU: `.venv/bin/python scripts/gpu_check_memory.py`. Prints a
table of measured vs modelled activation bytes for the course transformer on CUDA (where
dropout keeps 1-byte masks), and allocated / peak / reserved around one training step.
Nothing is written to data/: record a run only with its provenance.
"""

from __future__ import annotations

import dataclasses

import torch

from grader import memory
from grader.transformer import Shape, TinyGPT, batch_of_tokens


def main() -> None:
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device here; this script checks the CUDA-only paths of lesson 04")
    cuda = torch.device("cuda")
    print(f"{torch.cuda.get_device_name(cuda)}, torch {torch.__version__}")
    shape = Shape(n_layers=4, d_model=256, n_heads=8, d_ff=1024, vocab_size=4096, max_seq_len=1024, dropout=0.1)
    worst = 0.0
    for p in (0.1, 0.0):
        net = TinyGPT(dataclasses.replace(shape, dropout=p)).to(cuda)
        for b, s in ((1, 128), (4, 128), (8, 256), (2, 1024)):
            with memory.SavedTensors(exclude=net.parameters()) as saved:
                net(batch_of_tokens(net.shape, b, s, cuda))
            model = memory.activation_model(net.shape, b, s, mask_bytes=memory.dropout_mask_bytes(cuda))
            error = 100 * (model - saved.nbytes) / saved.nbytes
            worst = max(worst, abs(error))
            print(f"dropout {p} batch {b:2d} seq {s:4d}: measured {saved.nbytes / 2**20:9.2f} MiB, "
                  f"model {model / 2**20:9.2f} MiB, error {error:+.2f} %")
    print(f"largest error {worst:.2f} %")
    net = TinyGPT(shape).to(cuda)
    opt = torch.optim.AdamW(net.parameters())
    tokens = batch_of_tokens(shape, 8, 256, cuda)

    def step():
        opt.zero_grad(set_to_none=True)
        net(tokens).float().pow(2).mean().backward()
        opt.step()

    step()
    figures = memory.cuda_step_figures(step, cuda)
    print({k: f"{v / 2**20:.1f} MiB" for k, v in dataclasses.asdict(figures).items()})
    assert figures.reserved_after >= figures.allocated_after


if __name__ == "__main__":
    main()
