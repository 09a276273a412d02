"""Lesson 03_float_formats: the sealed functions' bodies (grader.checks._sealed). Never packaged nor released:
scripts/build_keys.py seals each top-level function into grader/checks/keys/03_float_formats.sealed.json. Each runs in
grader/checks/lesson03.py's globals, where its stub is."""


def _zero_share(exponent_bits: int, mantissa_bits: int) -> float:
    """The model: share of torch.logspace(-12, -2, 10001) that a cast to an IEEE-style format of these widths turns
    into 0, each magnitude rounded to the nearest multiple of the format's finest spacing (a tie to even)."""
    spread = torch.logspace(*_SPREAD).double()
    finest = 2.0 ** (2 - 2 ** (exponent_bits - 1) - mantissa_bits)
    return float((torch.round(spread / finest) == 0).double().mean())


def _zero_share_mistake(answer: dict) -> str | None:
    """ZERO_SHARE's known mistakes, in words with no value in them; None when the answer matches none."""
    share, bf16 = answer["e5m6"], answer["bf16"]
    if share > 1:
        return "a share is a fraction between 0 and 1 (0.25 for a quarter, not 25)"
    if bf16 != "none":
        return ("bf16 has fewer mantissa bits, but those set its precision, not its range: its 8 exponent bits are "
                "fp32's")
    if abs(share - _zero_share(*ZERO_SHARE_FORMAT)) > _SHARE_TOLERANCE:
        return ("the e5m6 share is not what a cast to that format turns into 0: go back to what it holds below its "
                "smallest normal number, and to what a cast does with a value smaller than all of them")
    return None


def _zero_share_band(first: dict, context: dict) -> tuple[float, str]:
    """ZERO_SHARE's first guess: one half for each format (e5m6 within 0.02 of the model, bf16 'none')."""
    right = first["e5m6"] <= 1 and abs(first["e5m6"] - _zero_share(*ZERO_SHARE_FORMAT)) <= _SHARE_TOLERANCE
    right_bf = first["bf16"] == "none"
    mistake = _zero_share_mistake(first)
    return (right + right_bf) / 2, ("your first guess matches the casts" if right and right_bf
                                    else f"your first guess: {mistake}")


def _forecast_reference() -> tuple[int, float]:
    """GradScaler itself on the forecast's case: steps skipped before the first applied one, and the long-run share."""
    skipped = _gradscaler_with_ceiling(FORECAST_CEILING, _FORECAST_STEPS, **FORECAST_SETTINGS)
    tail = skipped[_FORECAST_FROM:]
    return next(i for i, s in enumerate(skipped) if not s), sum(tail) / len(tail)


def _forecast_mistakes(answer: dict) -> list[str]:
    """What is off in a SCALER_FORECAST, in words with no value in them (empty when both parts are right)."""
    want_start, want_share = _forecast_reference()
    start, share = answer["skipped at start"], answer["share skipped in the long run"]
    interval = FORECAST_SETTINGS["growth_interval"]
    said = []
    if start != want_start:
        said.append("the start is one step off: count again which of the scales from 2³⁰ down overflow"
                    if abs(start - want_start) == 1 else "the start: count the scales that overflow before the first "
                    "that fits")
    if share > 1:
        said.append("a share is a fraction between 0 and 1")
    elif abs(share - want_share) > 0.003:
        said.append("the long run: follow the scale once it is at the ceiling through one whole cycle, counting "
                    "every step of it, the skipped one too")
    return said


def _forecast_band(first: dict, context: dict) -> tuple[float, str]:
    """SCALER_FORECAST's first guess against GradScaler run on the case: one half for each part."""
    said = _forecast_mistakes(first)
    fraction = max(0, 2 - len(said)) / 2  # one half for each part that is right
    return fraction, "your first guess is what GradScaler does" if not said else "your first guess: " + "; ".join(said)


def _forecast_said(context: dict) -> str:
    start, share = _forecast_reference()
    return f"GradScaler skips {start} steps at the start and {share:.3f} of the steps in the long run"
