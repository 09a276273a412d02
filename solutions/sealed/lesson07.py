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
    `weights(lat, bw, lat_tol, bw_tol)` tells a wrongly weighted fit (_fit_weighting)."""
    pair = _as_pair(got)
    if pair is None:
        fail(f"fit_latency_bandwidth{label} returned {got!r}; return a tuple (latency in seconds, bandwidth in bytes/s).")
    lat, bw = pair
    steps = 2 * (world - 1)
    lat_tol, bw_tol = (0.2, 0.05) if noisy else (1e-6, 1e-6)
    if weights is not None:  # a wrongly weighted line of these data is that mistake, whatever else it resembles
        weights(lat, bw, lat_tol, bw_tol)
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
    if abs(lat) < 0.01 * latency:
        _lost_intercept(label)
    if noisy and (lat < 0 or not close(lat, latency, 0.5)) and close(bw, bandwidth, 0.15):
        fail(f"fit_latency_bandwidth{label} found the bandwidth but lost the latency. Which of the points decide your "
             "line, and how large is their noise next to the latency?")
    off = [what for what, ok in (("latency", close(lat, latency, lat_tol)), ("bandwidth", close(bw, bandwidth, bw_tol)))
           if not ok]
    if off:  # which one is off, not its value: the data are drawn afresh each run, and a value that happens to lie
        # near the truth must not be printed beside it (a printed 2.681e+09 was the drawn bandwidth to 4 figures)
        fail(f"fit_latency_bandwidth{label} returned a {' and a '.join(off)} that {'is' if len(off) == 1 else 'are'} "
             "not what the data were made with" + (" (with 5% noise)" if noisy else " (without noise)") + ". Go back "
             "to which of the points can tell you each of the two, and whether your fit lets them.")


def _fit_weighting(nbytes: list, seconds: list, world: int, latency: float, bandwidth: float,
                   label: str) -> Callable[[float, float, float, float], None]:
    """_judge_fit_one's `weights` for these noisy data: fails a fit that is one of the wrongly weighted lines of them,
    even where the noise of this draw left it inside the tolerances (it computes only the wrong ones). On noise-free
    data every weighting gives the same line: pass no `weights` there."""
    def line(power: float) -> tuple[float, float]:
        # the line fitted with weights 1/t^power on the squared residuals, as (latency, bandwidth)
        w = [1.0 / t**power for t in seconds]
        s0, sx = sum(w), sum(a * x for a, x in zip(w, nbytes))
        sxx = sum(a * x * x for a, x in zip(w, nbytes))
        st, sxt = sum(a * t for a, t in zip(w, seconds)), sum(a * x * t for a, x, t in zip(w, nbytes, seconds))
        det = s0 * sxx - sx * sx
        intercept, slope = (st * sxx - sx * sxt) / det, (s0 * sxt - sx * st) / det
        steps = 2 * (world - 1)
        return intercept / steps, steps / (world * slope)

    wrong = {
        0: f"fit_latency_bandwidth{label} counted every point alike and lost the latency: the points with the largest "
           "times, and the largest noise, decide such a line. Which of the points can tell you the latency, and how "
           "large is their noise next to it?",
        # what the learner did, never which way to go: "more steeply" for 1/t⁴ and "less steeply" for 1/t together
        # bracketed the answer (a bisection, not a principle)
        4: f"fit_latency_bandwidth{label} returned the line weighted by 1/t⁴ on the squared residuals, a weight the "
           "points' noise does not call for. How large is each point's noise, and what weight makes a point count "
           "by how far it can be trusted?",
        1: f"fit_latency_bandwidth{label} returned the line weighted by 1/t on the squared residuals, a weight the "
           "points' noise does not call for. How large is each point's noise, and what weight makes a point count "
           "by how far it can be trusted?",
    }

    def weights(lat: float, bw: float, lat_tol: float, bw_tol: float) -> None:
        for power, words in wrong.items():
            other = line(power)
            if close(lat, other[0], 1e-6) and close(bw, other[1], 1e-6):
                fail(words)
    return weights


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


def cluster_allreduce_seconds(nbytes: float, links: dict, allreduce_seconds: Callable[[float, int, float, float], float],
                              latency: float = 0.0) -> float:
    """A hierarchical all-reduce priced with a ring model `allreduce_seconds(nbytes, world, latency, bandwidth)`.

    Inside each node a reduce-scatter over NVLink leaves each of its g GPUs the node's sum of 1/g of the message;
    each GPU then all-reduces its 1/g with the GPUs of the same position in the other m nodes (its rail: one
    adapter per GPU, all g rails at once); an all-gather over NVLink gives every GPU the whole sum. The
    reduce-scatter and the all-gather together cost what a ring all-reduce of the message costs in the node.
    The phases are priced one after another: NCCL pipelines chunks through them, so this is an upper bound on the
    bandwidth terms (latency and links below their line rate add time).
    It holds on rail-optimised, non-blocking fabrics (one switch port per adapter, no oversubscription).
    """
    g, m = links["gpus_per_node"], links["nodes"]
    inside = allreduce_seconds(nbytes, g, latency, links["nvlink"])
    return inside + (allreduce_seconds(nbytes / g, m, latency, links["nic"]) if m > 1 else 0.0)


def show_allreduce(allreduce_seconds: Callable) -> None:
    """Section 2's reveal: the schedule the model prices, and its table, priced with the learner's ring."""
    import pandas as pd
    from IPython.display import Markdown, display

    from grader import distributed, specs

    display(Markdown(
        "The model's schedule, **hierarchical** on rail-optimised nodes of *g* GPUs, *m* nodes:\n\n"
        "1. a **reduce-scatter inside each node** over NVLink: each of the *g* GPUs ends with the node's sum of "
        "1/*g* of the message;\n"
        "2. each GPU **all-reduces its 1/*g* with its rail**: the same GPU of the other *m* nodes, over its own NIC, "
        "all *g* rails at once;\n"
        "3. an **all-gather inside the node** over NVLink.\n\n"
        "Steps 1 and 3 together cost what a ring all-reduce inside the node costs, and step 2 is a ring all-reduce of "
        "1/*g* of the message over *m* ranks: your `allreduce_seconds` prices all three. Only 1/*g* of the message "
        "crosses between nodes on each NIC, and the *g* NICs of a node carry it at once."))
    nets = distributed.load_networks()
    rows, used = {}, {}
    for c in specs.load_chips():
        if c.nvlink_gbs and c.form == "datacenter":
            row = {}
            for n in (2, 8, 16, 64):
                links = distributed.cluster_links(c.nvlink_gbs, n, nets, chip=c.name)
                row[f"{n} GPUs"] = distributed.cluster_allreduce_seconds(1e9, links, allreduce_seconds) * 1e3
                used[c.name] = links
            rows[f"{c.name} (NVLink {c.nvlink_gbs / 2:g} GB/s one way)"] = row
            if "no row" in used[c.name]["link"]:  # no sourced network for its nodes: only its NVLink figures
                row.update({k: math.nan for k in row if int(k.split()[0]) > 8})
    for v, bw in (("4.0 x16", 31.5), ("5.0 x16", 63.0)):
        rows[f"PCIe {v}, {bw:g} GB/s one way (one node without NVLink)"] = {
            f"{n} GPUs": allreduce_seconds(1e9, n, 0.0, bw * 1e9) * 1e3 if n <= 8 else math.nan for n in (2, 8, 16, 64)}
    display(pd.DataFrame(rows).T.round(2).rename_axis("ms per 1 GB all-reduce (model: bandwidth terms)"))
    h100 = specs.chip("H100")
    wide = distributed.cluster_links(h100.nvlink_gbs, 64, nets, chip=h100.name)
    one_nic = allreduce_seconds(1e9, 64, 0.0, wide["nic"])  # every byte of a flat ring through one NIC per node
    tiered = distributed.cluster_allreduce_seconds(1e9, wide, allreduce_seconds)
    growth = allreduce_seconds(1e9, 64, 0.0, 1e9) / allreduce_seconds(1e9, 2, 0.0, 1e9)
    print(f"Beyond one node the all-reduce uses every node's {wide['gpus_per_node']} NICs at once: on 64 {h100.name}s "
          f"the model says {tiered * 1e3:.2f} ms, where a ring squeezed through one {wide['nic'] / 1e9:g} GB/s NIC "
          f"would take {one_nic * 1e3:.1f} ms ({one_nic / tiered:.1f}× as long). Each GPU's rail carries only 1/"
          f"{wide['gpus_per_node']} of the message, so from 8 to 16 to 64 GPUs the time grows by the rails' share, "
          f"not by a jump to one NIC's speed. At a fixed link, from 2 to 64 ranks a ring's bandwidth term grows only "
          f"{growth:.2f}×: each rank's bytes hardly grow with n. Its latency term does: "
          f"{allreduce_seconds(0.0, 2, 1.0, 1e9):.0f} latencies at 2 ranks, {allreduce_seconds(0.0, 64, 1.0, 1e9):.0f} "
          "at 64 (your allreduce_seconds). The model holds on rail-optimised, non-blocking fabrics; an oversubscribed "
          "network is slower. Figures near 480 GB/s inside one H100 node are NVLink SHARP (the switch adds), not a ring.")
