"""What every benchmark prints about the machine it ran on."""

from __future__ import annotations

import os
import platform

import numpy as np


def machine() -> str:
    """CPU model, cores, Python and numpy versions, and the kernel: enough to compare two runs."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            model = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), model)
    except OSError:
        pass
    return (
        f"{model}, {os.cpu_count()} cores, Python {platform.python_version()}, numpy {np.__version__}, "
        f"{platform.system()} {platform.release()}"
    )
