"""Lesson 08_inside_a_kernel: the sealed functions' bodies (grader.checks._sealed). Never packaged nor released:
scripts/build_keys.py seals each top-level function into grader/checks/keys/08_inside_a_kernel.sealed.json. Each runs in
grader/checks/lesson08.py's globals, where its stub is."""


def _tile_keys() -> dict:
    """TILE_PREDICTION's model as digests (see above)."""
    return {"best": ("0bcef50f4f5f9ee100e72b5a89a5022d", "5f27ecb6d633983934a91639d8d3d024"),
            "fits": ("0bcef50f4f5f9ee100e72b5a89a5022d", "0e16e5ad922634a8dfe3542f6c77c34b", "2ef696d06b28708c8c501701d4f90623",
                     "4a324d2be06fddae54ab5ab38abca6f0", "5d97bc8461153d03ebd9b6f0c9a3680e", "5f27ecb6d633983934a91639d8d3d024",
                     "7a944acf72a1859785d8d13fe9284903", "8d1f7441e6fdf185e0ae6dd60427b5e1", "aa03b1a50ccaaf17d3f9c46787ccd765",
                     "beeed3c0b5d475df817d59940868ad4b"),
            "limit": "1590931ce05386d8304eed48a88f6d5c"}


def _tile_model() -> tuple[tuple[str, ...], str]:
    """(the tile words as good as the model's best, what stops 256 × 256) for TILE_PREDICTION's matmul on an H100."""
    best = tuple(w for w in _TILE_WORDS if _tile_key(w) in _tile_keys()["best"])
    limit = next(w for w in _LIMITS if _tile_key(w) == _tile_keys()["limit"])
    return best, limit


def _tile_said(answer: dict) -> list[str]:
    """What is off in a TILE_PREDICTION (tile, then limit), in words that give no figure."""
    said = []
    tile = _tile_key(answer["tile"])
    if tile not in _tile_keys()["best"]:  # a tile as good as the best (its transpose) is the model's too
        if tile not in _tile_keys()["fits"]:
            said.append("that tile does not fit on chip: count both footprints, the staged pieces of A and B in "
                        "shared memory and the float32 accumulator in the registers")
        else:
            said.append("that tile fits, but another tile that also fits moves less traffic")
    if _tile_key(answer["256x256"]) != _tile_keys()["limit"]:
        said.append("what stops 256 × 256: work out its staged pieces against the shared memory and its float32 "
                    "accumulator against the register file, each from data/sm.csv's figures")
    return said


def _tile_band(first: dict, context: dict) -> tuple[float, str]:
    said = _tile_said(first)
    fraction = 1.0 - 0.5 * len(said) if len(said) < 2 else 0.0
    return fraction, ("your first guess is the model's" if not said else "your first guess: " + "; ".join(said))


def _tile_model_said(context: dict) -> str:
    best, limit = _tile_model()
    return f"the model's best tile is {' or '.join(best)}; the '256x256' tile is stopped by: {limit}"
