"""One description of the machine: what calibration keys its cache on and what every
benchmark report records."""

from __future__ import annotations

import os
import platform
import time
from typing import Any


def cpu_name() -> str:
    """The CPU's model name (from /proc/cpuinfo where there is one)."""
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            return next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), name)
    except OSError:
        return name


def versions() -> dict[str, str]:
    """Versions of Python and of the libraries that decide welchpeaks' speed."""
    import numba
    import numpy
    import scipy

    from welchpeaks._version import __version__

    return {"python": platform.python_version(), "welchpeaks": __version__, "numpy": numpy.__version__,
            "scipy": scipy.__version__, "numba": numba.__version__}


def machine_info() -> dict[str, Any]:
    """CPU, cores, numba threads, node, platform, versions and the date: for reports."""
    from welchpeaks.numba_base import numba_threads

    return {"cpu": cpu_name(), "cores": os.cpu_count(), "numba_threads": numba_threads(), "node": platform.node(),
            "platform": platform.platform(), "versions": versions(), "date": time.strftime("%Y-%m-%d %H:%M:%S %z")}


def available_memory_bytes() -> int:
    """Memory the system can give without swapping (MemAvailable), else its physical memory."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 8 << 30
