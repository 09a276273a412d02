"""Lesson 04_memory: the sealed functions' bodies (grader.checks._sealed). Never packaged nor released:
scripts/build_keys.py seals each top-level function into grader/checks/keys/04_memory.sealed.json. Each runs in
grader/checks/lesson04.py's globals, where its stub is."""


def _measured_bytes_per_param() -> dict[str, float]:
    """BYTES_PER_PARAM's model: the half-frozen MLP with AdamW after one backward, bytes per parameter of everything,
    before and after step()."""
    model = _half_frozen_mlp()
    opt = memory.make_optimizer([p for p in model.parameters() if p.requires_grad], "adam")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model(torch.randn(4, 64)).pow(2).mean().backward()
    n = sum(p.numel() for p in model.parameters())

    def held() -> int:  # this model's own tensors: two weights, the gradients that exist, AdamW's tensors
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        return sum(t.nbytes for t in [*model.parameters(), *grads, *(v for s in opt.state.values() for v in s.values())])

    before = held() / n
    opt.step()
    return {"before step()": before, "after step()": held() / n}


def _bytes_per_param_mistakes(answer: dict) -> list[str]:
    """What is off in a BYTES_PER_PARAM, in words with no value in them (empty when both phases are right)."""
    before, after = answer["before step()"], answer["after step()"]
    want = _measured_bytes_per_param()
    said = []
    if abs(before - want["before step()"]) > 0.1:
        if abs(before - want["after step()"]) <= 0.1:
            said.append("before step() you counted AdamW's state, but it makes its running averages on its first "
                        "step(), not when it is built; that is why a run can pass its first backward and then run out "
                        "of memory at the first step")
        elif abs(before - 4) <= 0.1:
            said.append("before step() you counted the weights alone; the backward pass has run, so every trained "
                        "parameter has a .grad of its own shape and dtype")
        elif abs(before - 8) <= 0.1:
            said.append("before step() you counted a gradient for every parameter, the frozen layer's too: what does "
                        "backward fill in for a parameter that does not train?")
        else:
            said.append("before step(): count what exists after a backward pass and before the optimizer has done "
                        "anything, which tensors, for which parameters, and how many bytes per element")
    if abs(after - want["after step()"]) > 0.1:
        if abs(after - before) <= 0.1:
            said.append("after step() you counted no more than before: the step makes AdamW's state")
        elif abs(after - before - 8) <= 0.1:
            said.append("after step() you gave the frozen layer optimizer state too: what does an optimizer keep for "
                        "a parameter it was never given?")
        else:
            said.append("after step(): what does AdamW keep for each parameter it updates, and in which dtype?")
    return said


def _bytes_per_param_band(first: dict, context: dict) -> tuple[float, str]:
    """BYTES_PER_PARAM's first guess against the measured MLP: one half for each phase."""
    said = _bytes_per_param_mistakes(first)
    return (2 - len(said)) / 2, ("your first guess is what the tensors hold" if not said
                                 else "your first guess: " + "; ".join(said))


def _bytes_per_param_said(context: dict) -> str:
    want = _measured_bytes_per_param()
    return f"{want['before step()']:.2f} bytes per parameter before step(), {want['after step()']:.2f} after"


def kv_cache_bytes(row: dict, batch: int, seq: int, element_bytes: int = 2) -> int:
    """Model: the KV cache of a data/models.csv shape: keys and values, every layer, every token kept."""
    head_dim = row["d_model"] // row["n_heads"]
    kv_heads = row.get("n_kv_heads") or row["n_heads"]
    return 2 * row["n_layers"] * batch * seq * kv_heads * head_dim * element_bytes
