"""Lesson 07_data_parallel: the sealed functions' bodies (grader.checks._sealed). Never packaged nor released:
scripts/build_keys.py seals each top-level function into grader/checks/keys/07_data_parallel.sealed.json. Each runs in
grader/checks/lesson07.py's globals, where its stub is."""


def _ring_model(nbytes: float, world: int, latency: float, bandwidth: float) -> float:
    """A ring all-reduce's seconds for the rank counts the course's models use (guarded and watched: it prices
    ALLREDUCE_PREDICTION's answer)."""
    terms = {2: (2, 1.0), 4: (6, 1.5), 8: (14, 1.75), 16: (30, 1.875)}
    steps, share = terms[world]
    return steps * latency + share * nbytes / bandwidth


def _judge_fit_one(got: Any, world: int, latency: float, bandwidth: float, noisy: bool, label: str,
                   weights: Callable[[float, float, float, float], None] | None = None) -> None:
    """A fit judged against the latency and bandwidth its data were made with (the inputs, not the fit's answer);
    `weights(lat, bw, lat_tol, bw_tol)`, the instructor's, tells a wrongly weighted fit (solutions/judges)."""
    pair = _as_pair(got)
    if pair is None:
        fail(f"fit_latency_bandwidth{label} returned {got!r}; return a tuple (latency in seconds, bandwidth in bytes/s).")
    lat, bw = pair
    steps = 2 * (world - 1)
    if close(lat, bandwidth, 0.2) and close(bw, latency, 0.2):
        fail(f"fit_latency_bandwidth{label}: latency and bandwidth swapped. Return (latency, bandwidth).")
    if close(lat, latency * steps, 0.2 if noisy else 1e-6) and close(bw, bandwidth * world / steps, 0.1 if noisy else 1e-6):
        fail(f"fit_latency_bandwidth{label} returned the line's intercept and the inverse of its slope as the latency "
             "and the bandwidth. They are not: your allreduce_seconds says how many latencies and what share of the "
             "message over the bandwidth make up a ring's time on this many ranks. Take those out of the intercept "
             "and the slope.")
    for value, unit, scale in ((lat, "µs", 1e6), (bw, "GB/s", 1e-9)):
        true = latency if unit == "µs" else bandwidth
        if close(value, true * scale, 0.2):
            fail(f"fit_latency_bandwidth{label} returned the {'latency' if unit == 'µs' else 'bandwidth'} in {unit}; "
                 "return seconds and bytes per second (SI units, no prefixes).")
    lat_tol, bw_tol = (0.2, 0.05) if noisy else (1e-6, 1e-6)
    if abs(lat) < 0.01 * latency:
        _lost_intercept(label)
    if weights is not None:
        weights(lat, bw, lat_tol, bw_tol)
    if noisy and (lat < 0 or not close(lat, latency, 0.5)) and close(bw, bandwidth, 0.15):
        fail(f"fit_latency_bandwidth{label} found the bandwidth but lost the latency: an unweighted least-squares fit. "
             "Its errors are absolute, so the largest messages (hundreds of ms, a few % noise: milliseconds) decide "
             "the line and the latency, a few hundred µs, drowns in their noise. Count every point by its relative "
             "error, and the small messages set the latency.")
    if not close(lat, latency, lat_tol) or not close(bw, bandwidth, bw_tol):
        fail(f"fit_latency_bandwidth{label} returned latency {lat:.4g} s and bandwidth {bw:.4g} B/s, not what the data "
             "were made with" + (" (with 5% noise)" if noisy else " (without noise)") + ". Fit the straight line "
             "that your ring model is for a fixed number of ranks, each point counted by its relative error, and "
             "work back from its intercept and slope to the latency and bandwidth.")


def _allreduce_model() -> dict:
    """The hierarchical model of ALLREDUCE_PREDICTION and the usual wrong prices, in seconds (data/ figures)."""
    from grader import distributed, specs

    chip = specs.chip(PREDICTED_CHIP)
    links = distributed.cluster_links(chip.nvlink_gbs, PREDICTED_GPUS, chip=chip.name)
    g, m, nv, nic = links["gpus_per_node"], links["nodes"], links["nvlink"], links["nic"]
    ring = _ring_model
    return {"model": distributed.cluster_allreduce_seconds(PREDICTED_BYTES, links, ring),
            "one NIC": ring(PREDICTED_BYTES, PREDICTED_GPUS, 0.0, nic),
            "NVLink only": ring(PREDICTED_BYTES, g, 0.0, nv),
            "rails only": ring(PREDICTED_BYTES / g, m, 0.0, nic),
            "all NVLink": ring(PREDICTED_BYTES, PREDICTED_GPUS, 0.0, nv),
            "both ways": ring(PREDICTED_BYTES, g, 0.0, 2 * nv) + ring(PREDICTED_BYTES / g, m, 0.0, nic),
            "whole message on the rails": ring(PREDICTED_BYTES, g, 0.0, nv) + ring(PREDICTED_BYTES, m, 0.0, nic)}


def _allreduce_said(ms: float) -> str | None:
    prices = _allreduce_model()
    mistakes = {
        "one NIC": "every byte of a ring over all 16 GPUs through one NIC per node: NCCL's channels leave each node "
                   "through all eight NICs at once, each GPU's rail carrying its share",
        "NVLink only": "only the phases inside a node: the rail all-reduce across the nodes costs time too",
        "rails only": "only the rails across the nodes: the reduce-scatter and all-gather inside each node cost time too",
        "all NVLink": "a ring over all 16 GPUs at NVLink's speed: there is no NVLink between nodes",
        "both ways": "NVLink at its datasheet figure: that is both directions summed, and a ring sends one way",
        "whole message on the rails": "the whole message on every rail: after the reduce-scatter each GPU holds only its "
                                      "share, and only that share crosses the nodes",
    }
    for key, words in mistakes.items():
        if abs(ms / (prices[key] * 1e3) - 1) <= 0.05 and abs(ms / (prices["model"] * 1e3) - 1) > 0.05:
            return words
    return None


def _allreduce_band(first: dict, context: dict) -> tuple[float, str]:
    from grader import predictions

    want = _allreduce_model()["model"] * 1e3
    fraction = predictions.band(first["16 GPUs ms"], want, tight=0.15, loose=0.5)
    if fraction == 1.0:
        return fraction, "your first guess is where the model puts it"
    said = _allreduce_said(first["16 GPUs ms"])
    return fraction, ("your first guess priced " + said if said else
                      "your first guess is outside the model's band: price the three steps one after another, each "
                      "with your ring model, on the link it uses and with the bytes it moves")


def _zero_fits() -> dict[str, bool]:
    """For each stage, whether LLaMA-13B's training state per rank (torch autocast, Adam) fits one H100 on 8 ranks."""
    # the instructor's bytes_per_rank against memory.card_bytes (tests/test_lesson07_content.py recomputes them): the
    # verdicts, not the bytes per parameter
    return {"ddp": False, "zero1": False, "zero2": True, "zero3": True}


def _zero_answer() -> str:
    fits = _zero_fits()
    return next((s for s in STAGES if fits[s]), "none")


def _zero_said(stage: str) -> str | None:
    want, fits = _zero_answer(), _zero_fits()
    if stage == want:
        return None
    if stage == "none":
        return "a ZeRO stage does fit: count what each keeps whole and what it divides among the 8 ranks"
    if not fits[stage]:
        return (f"{stage} does not fit one card: count what it keeps whole on every rank, in the dtypes torch "
                "autocast keeps, against the card's memory")
    return f"{stage} fits, but an earlier stage already does: sharding more than you need costs communication"


def _zero_band(first: dict, context: dict) -> tuple[float, str]:
    said = _zero_said(first["stage"])
    return (1.0, "your first guess is the model's") if said is None else (0.0, f"your first guess: {said}")
