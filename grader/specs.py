"""Figures the course cannot measure here: datasheets, model shapes, recorded GPU runs.

Everything is read from the course's ``data/`` folder, which is found from any
working directory: ``$GRADER_DATA`` if set, else the copy packed inside the
installed wheel, else the ``data/`` folder of a source checkout.
"""

from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

_HERE = Path(__file__).resolve().parent


def data_dir() -> Path:
    """The course's data folder, wherever the notebook happens to run."""
    env = os.environ.get("GRADER_DATA")
    candidates = [Path(env)] if env else []
    candidates += [_HERE / "data", _HERE.parent / "data"]
    for path in candidates:
        if (path / "chips.csv").is_file():
            return path
    raise FileNotFoundError(
        "The course's data/ folder was not found (looked in: "
        + ", ".join(str(p) for p in candidates)
        + "). Install the course with `make test` or `pip install -e .`, or set GRADER_DATA."
    )


def _number(text: str) -> float | None:
    text = (text or "").strip()
    return float(text) if text else None


@dataclass(frozen=True)
class Chip:
    """One accelerator's datasheet figures (units in the names)."""

    name: str
    vendor: str
    form: str
    memory_bytes: float | None  # None where the datasheet gives none
    bandwidth: float | None  # bytes/s, device memory; None where unpublished
    peak_flops: dict[str, float]  # dtype name -> FLOP/s (dense)
    host_link: str
    host_link_bandwidth: float | None  # bytes/s, one direction; None for unified memory
    source: str
    notes: str = ""
    power_limit_w: float | None = None  # watts: board power / TDP as the datasheet prints it; None where none is printed
    nvlink_gbs: float | None = None  # GB/s, GPU-to-GPU NVLink per GPU, both directions summed as printed; None without NVLink

    def peak(self, dtype: str = "fp32") -> float:
        """Peak FLOP/s for `dtype` ("fp32", "tf32", "fp16", "bf16", "fp8")."""
        if dtype not in self.peak_flops:
            raise KeyError(f"{self.name} has no published {dtype} peak; it has {sorted(self.peak_flops)}")
        return self.peak_flops[dtype]

    def balance(self, dtype: str = "fp32") -> float:
        """The chip's balance point in FLOP per byte: peak FLOP/s over bandwidth."""
        if not self.bandwidth:
            raise KeyError(f"{self.name} has no published memory bandwidth")
        return self.peak(dtype) / self.bandwidth

    def has_roofline(self, dtype: str = "fp32") -> bool:
        """True when the datasheet gives both a peak for `dtype` and a bandwidth."""
        return dtype in self.peak_flops and bool(self.bandwidth)


def load_chips() -> list[Chip]:
    """Every chip in data/chips.csv, in file order."""
    chips = []
    with open(data_dir() / "chips.csv", newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            peaks = {}
            for dtype in ("fp32", "tf32", "fp16", "bf16", "fp8"):
                value = _number(row.get(f"{dtype}_tflops", ""))
                if value is not None:
                    peaks[dtype] = value * 1e12
            link = _number(row.get("host_link_gbs", ""))
            memory_gb = _number(row.get("memory_gb", ""))
            bandwidth_gbs = _number(row.get("memory_bandwidth_gbs", ""))
            chips.append(
                Chip(
                    name=row["chip"],
                    vendor=row["vendor"],
                    form=row["form"],
                    memory_bytes=None if memory_gb is None else memory_gb * 1e9,
                    bandwidth=None if bandwidth_gbs is None else bandwidth_gbs * 1e9,
                    peak_flops=peaks,
                    host_link=row["host_link"],
                    host_link_bandwidth=None if link is None else link * 1e9,
                    source=row["source"],
                    notes=row.get("notes", ""),
                    power_limit_w=_number(row.get("power_limit_w", "")),
                    nvlink_gbs=_number(row.get("nvlink_gbs", "")),
                )
            )
    return chips


def chip(name: str) -> Chip:
    """The chip whose name contains `name` (case-insensitive), e.g. chip("H100")."""
    matches = [c for c in load_chips() if name.lower() in c.name.lower()]
    if len(matches) != 1:
        names = [c.name for c in load_chips()]
        raise KeyError(f"{name!r} matches {len(matches)} chips; choose one of {names}")
    return matches[0]


def load_models() -> list[dict]:
    """Transformer shapes from data/models.csv, numbers converted to int."""
    rows = []
    with open(data_dir() / "models.csv", newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            for key, value in row.items():
                if key not in ("model", "source", "notes", "tied_embeddings") and value.strip():
                    row[key] = int(float(value))
            rows.append(row)
    return rows


def model_constants() -> dict:
    """Modelling assumptions (launch overhead, copy latency), each with its source."""
    with open(data_dir() / "model_constants.json", encoding="utf-8") as f:
        return json.load(f)


@dataclass
class Recording:
    """A GPU run recorded by scripts/gpu_run.py, with its provenance."""

    path: Path
    provenance: dict
    figures: dict = field(default_factory=dict)

    @property
    def label(self) -> str:
        p = self.provenance
        return f"recorded: {p.get('device', '?')}, torch {p.get('torch', '?')}, {p.get('date', '?')}"


def load_recordings() -> list[Recording]:
    """Every recorded GPU run in data/recorded/, newest first."""
    folder = data_dir() / "recorded"
    found = []
    for path in sorted(folder.glob("*.json"), reverse=True) if folder.is_dir() else []:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        found.append(Recording(path=path, provenance=doc.get("provenance", {}), figures=doc.get("figures", {})))
    return found


def load_sm() -> dict[str, dict]:
    """data/sm.csv: per-SM shared memory, registers and L2 of some chips (lesson 08), by chip name; numbers as floats."""
    with open(data_dir() / "sm.csv", newline="", encoding="utf-8") as f:
        return {row["chip"]: {k: (v if k in ("chip", "source", "notes") else float(v)) for k, v in row.items()}
                for row in csv.DictReader(f)}
