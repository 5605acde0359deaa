"""What the torch benchmark scripts share: the device they run on, how a step on it is
timed, and the result record they write.

Not a benchmark; imported as `_device` like _common.py (kept apart from it so that the LP
benchmarks do not import torch).
"""

from __future__ import annotations

import json
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch


def pick_device(name: str | None) -> torch.device:
    """The device NAME, or by default CUDA where present, else the CPU."""
    return torch.device(name or ("cuda" if torch.cuda.is_available() else "cpu"))


def device_name(device: torch.device) -> str:
    """The GPU's name on CUDA, else the host processor's."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return platform.processor() or platform.machine()


def synced_seconds(fn: Callable[[], Any], device: torch.device) -> float:
    """Wall seconds of fn(), with CUDA synchronised before and after (its kernels run
    asynchronously, so the clock would otherwise stop before they finish)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def run_record(benchmark: str, device: torch.device, rows: list[dict[str, Any]],
               **settings: Any) -> dict[str, Any]:
    """The record of a run: what and where (SETTINGS after the device's name, in the order
    given), the torch version, a note on CPU runs, the time and the rows."""
    return {"benchmark": benchmark, "device": str(device), "device_name": device_name(device),
            **settings, "torch": torch.__version__,
            "note": "CPU run at small settings (no GPU in this session)"
            if device.type == "cpu" else "",
            "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%S"), "rows": rows}


def save_run(result: dict[str, Any], out: Path) -> dict[str, Any]:
    """Write the record to OUT (its folder created) as JSON and say where."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(f"saved {out}")
    return result
