"""Importing welchpeaks imports no optional package (and not even numba until it is needed)."""

import subprocess
import sys


def test_import_is_light():
    code = (
        "import sys, welchpeaks; "
        "heavy = [m for m in ('numba', 'torch', 'triton', 'dask', 'matplotlib', 'cupy') if m in sys.modules]; "
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
