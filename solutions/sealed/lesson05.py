"""Lesson 05_reading_the_machine: the sealed functions' bodies (grader.checks._sealed). Never packaged nor released:
scripts/build_keys.py seals each top-level function into grader/checks/keys/05_reading_the_machine.sealed.json. Each runs in
grader/checks/lesson05.py's globals, where its stub is."""


def launch_bound_model() -> dict:
    """MFU_GUESS's model: one training step of the lesson's small transformer on MFU_GUESS_CHIP in bf16, every kernel
    launched for kernel_launch_seconds (data/model_constants.json) and done within its launch.

    {"kernels": the step's device operators (grader.profiling.device_ops), AdamW as it runs on a GPU; "flops": the
    step's FLOPs as torch counts them (torch.utils.flop_counter: every matmul forward and backward, attention's too);
    "step_seconds"; "mfu"}. Counted on the CPU, the same on every machine: no timing, nothing from the learner's run.
    """
    if not _MODEL:
        from torch.utils.flop_counter import FlopCounterMode

        from grader import profiling, specs

        net, opt, tokens = _small_transformer(foreach=True)

        def step():
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(net(tokens).flatten(0, 1), tokens.flatten()).backward()
            opt.step()

        step()  # the optimizer's state exists from here on, as in every later step
        kernels = sum(profiling.device_ops(step).values())
        with FlopCounterMode(display=False) as counter:
            step()
        seconds = kernels * specs.model_constants()["kernel_launch_seconds"]["value"]
        flops = float(counter.get_total_flops())
        _MODEL.update(kernels=kernels, flops=flops, step_seconds=seconds,
                      mfu=flops / seconds / specs.chip(MFU_GUESS_CHIP).peak("bf16"))
    return dict(_MODEL)


def _mfu_guess_band(first: dict, context: dict) -> tuple[float, str]:
    """MFU_GUESS's first guess against the launch-bound model (a count of kernels and FLOPs, no time measured here)."""
    from grader import predictions

    guess, model = first["mfu"], launch_bound_model()["mfu"]
    if guess > 1:
        return 0.0, "your first guess is not a fraction (20% is 0.2): MFU is a share of the peak"
    fraction = predictions.band(guess, model, tight=2.0, loose=9.0)  # an order of magnitude is the point
    if fraction == 1.0:
        return fraction, "your first guess is within a factor of three of the model"
    if guess > model:
        return fraction, ("your first guess is well above the model: a fast chip does not make a small step fast when "
                          "every kernel waits for its launch, and the arithmetic of a 64-wide model is a sliver of "
                          "what that chip could do in the same time")
    return fraction, ("your first guess is well below the model: count the kernels a step launches (views launch "
                      "none; on a GPU the optimizer updates every parameter at once) and what they cost, against the "
                      "arithmetic the step needs")


def _mfu_guess_said(context: dict) -> str:
    model = launch_bound_model()
    return (f"the launch-bound model: {model['kernels']} kernels of "
            f"{model['step_seconds'] / model['kernels'] * 1e6:.0f} µs for {model['flops'] / 1e6:.1f} MFLOP, an MFU "
            f"of {model['mfu']:.4%} on the {MFU_GUESS_CHIP}")


def _idle_guess_words(answer: dict) -> str | None:
    said = {"other": "workers read batches in processes of their own: they make a batch arrive sooner, and so can only "
                     "shorten the time the loop spends waiting for one; the other idle time is not the loader's",
            "both": "workers only make batches arrive sooner; the idle time while no batch is being fetched (Python "
                    "between steps, the profiler) is not the loader's, and no worker shortens it",
            "neither": "the loop waits in next() for every batch the main process reads itself; a worker that has "
                       "read the batch ahead hands it over at once"}
    return said.get(answer["shrinks"])


def _idle_gpu_model() -> float:
    """The GPU's idle share in IDLE_GUESS's second key. Without the synchronize the host reads batch i+1 while the
    device runs step i's kernels; learn()'s copy of the batch to the device waits for the stream, but those kernels
    finished during the read. A steady step lasts as long as the longer of the two, and the device is idle for the
    rest of it."""
    kernels, read = IDLE_GPU_KERNELS_MS, IDLE_GPU_READ_MS
    return max(0.0, read - kernels) / max(read, kernels)


def _idle_gpu_mistake(share: float) -> str | None:
    """The known mistake a GPU idle share makes, in words with no value in them; None if none."""
    kernels, read = IDLE_GPU_KERNELS_MS, IDLE_GPU_READ_MS
    known = [
        (read / (read + kernels), "it keeps the synchronize: without it, the host reads the next batch while the "
                                  "device runs the step's kernels"),
        (kernels / max(read, kernels), "that is the share in which the device computes, not the share it is idle"),
        ((read - kernels) / (read + kernels), "it makes a step last the read plus the kernels: what is the device "
                                             "doing while the host reads the next batch?"),
    ]
    for value, words in known:
        if value > 0 and abs(share - value) <= 0.02 * value:
            return words
    if share == 0:
        return ("the device still waits whenever a batch takes longer to read than a step takes to compute: "
                "which is longer here?")
    return None


def _idle_guess_final(answer: dict) -> str | None:
    words = _idle_guess_words(answer)
    if words:
        return words
    mistake = _idle_gpu_mistake(answer[IDLE_GPU_KEY])
    return f"the GPU: {mistake}" if mistake else None


def _idle_guess_band(first: dict, context: dict) -> tuple[float, str]:
    """IDLE_GUESS's first guess: which idle time workers can shrink follows from what a worker does (no measurement),
    and the GPU's idle share against the overlap model (full within 15%, half within 1.5×); the keys count equally."""
    from grader import predictions

    words = _idle_guess_words(first)
    gpu = predictions.band(first[IDLE_GPU_KEY], _idle_gpu_model(), tight=0.15, loose=0.5)
    return predictions.keys_band([
        ("workers", 1.0 if words is None else 0.0, words, None),
        ("the GPU", gpu, _idle_gpu_mistake(first[IDLE_GPU_KEY]),
         "the GPU's idle share is outside the model's band: what does the device do while the host reads the next "
         "batch, and how long does a steady step last?"),
    ], "your first guess follows from what a worker does and from the overlap")


def idle_split_reading(slow: dict, fed: dict) -> list[str]:
    """What section 4's table of idle time by cause says, once IDLE_GUESS is recorded: `slow` and `fed` are its rows
    for the slow loader and for 2 workers. Here, not in the cell: a copy test read IDLE_GUESS's answer off the
    sentences the cell once printed, in its source, before guessing; IDLE_GUESS watches this function."""
    lines = []
    idle_ms = slow["idle, waiting for data ms"] + slow["idle, other ms"]
    if idle_ms > 0:
        lines.append(f"Slow loader: {slow['idle, waiting for data ms'] / idle_ms:.0%} of the device's idle time is the "
                     "loop waiting for data.")
    if abs(slow["in the loader ms"] - slow["idle, waiting for data ms"]) <= 0.05 * slow["in the loader ms"]:
        lines.append("Every moment in the loader's ranges was idle: learn() synchronizes, so nothing computes while a "
                     "batch is read. The loader's time in the table above is idle time here, and only because of that.")
    if fed["in the loader ms"] < slow["in the loader ms"]:
        lines.append(f"2 workers: the loop waits {fed['in the loader ms']:.2f} ms in the loader instead of "
                     f"{slow['in the loader ms']:.2f} ms. The workers read ahead in their own processes while a step "
                     "computes, and that reading is not in this process's profile at all. The wait that is left is "
                     "still idle (learn() synchronizes). Workers cannot shrink the idle time of the other kind: it is "
                     "not the loader's.")
    else:
        lines.append("2 workers waited no less than the slow loader here: the machine was busy with other work while "
                     "this ran.")
    shrank = [n for n, key in (("waiting", "idle, waiting for data ms"), ("other", "idle, other ms"))
              if fed[key] < 0.7 * slow[key]]
    measured = "both" if len(shrank) == 2 else (shrank[0] if shrank else "neither")
    lines.append(f"Measured here, {measured} shrank by more than 30%. Workers only make batches arrive sooner, so only "
                 "the first number is theirs to shrink.")
    return lines


def _idle_guess_said(context: dict) -> str:
    return (f"workers shrink the idle time spent waiting for data, and only that; on the GPU the overlap model puts the "
            f"device idle {_idle_gpu_model():.0%} of the time (a read of {IDLE_GPU_READ_MS:g} ms beside "
            f"{IDLE_GPU_KERNELS_MS:g} ms of kernels: a steady step lasts the longer of the two)")
