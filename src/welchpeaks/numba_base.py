"""Numba machinery shared by every CPU kernel of welchpeaks (the fused CPU kernels, the
find_peaks kernel, the learned butterfly network and the linker's step): the compile options
(exact or fast-math, named once), the lane width, the kernel lock, padded per-worker scratch,
the radix-2 lane butterfly and bit reversal; and :func:`clear_stale_caches`.

It imports nothing of welchpeaks and sits below ``backends``, ``learned`` and ``linkstep`` so
that all of them use one copy of each.
"""

from __future__ import annotations

import os
import threading

import numpy as np
from numba import njit
from numba.core.cpu import ParallelOptions

from welchpeaks.notices import notify

#: Rows transformed together (a vector loop of 4 AVX2 registers of float32); partial blocks
#: compute only their rows, rounded up to 8.
LANES = 32

# ------------------------------------------------------------------------------ compile options
#
# Every numba function of welchpeaks is compiled with one of the sets below: its arithmetic is
# exact or fast-math, and it is a kernel (parallel, or one with numba's runtime), a helper behind
# a call (without the runtime) or a helper inlined into its caller.
#
# Reference counts: numba counts the references to every array a function holds, each count an
# atomic operation; in a call per row, or on an array all threads share, they cost more than the
# work. A helper that allocates nothing and returns no array works on arrays its caller holds
# for the whole call, so it is compiled without numba's runtime (``_nrt=False``, the ``*_HELPER``
# sets), which leaves the counts out (measured in docs/performance-history.md: the find_peaks
# row step, 8192 PSD rows, 20% of its time). Callees inherit the flag unless they state it, and a
# dispatcher compiles a signature once, with the flags of its first caller: so every helper
# states it; one that allocates, or hands arrays to a parallel function, has the runtime (the
# ``*_RUNTIME`` sets; parallel kernels are entered from Python: the runtime is on). A helper
# inlined (the ``*_INLINE`` sets) is compiled as part of its caller, under the caller's flags.

#: Exact: no fast-math flag, so every comparison, rounding and interpolation is the IEEE
#: operation (the find_peaks kernel: scipy's; the linker's frame step); numba's own error model;
#: cached on disk, without the GIL, no bounds checks.
EXACT = dict(cache=True, nogil=True, boundscheck=False)
EXACT_RUNTIME = dict(EXACT, _nrt=True)
EXACT_HELPER = dict(EXACT, _nrt=False)
EXACT_INLINE = dict(EXACT_HELPER, inline="always")
#: Fast-math (the fused pass and its selection, the learned network): 'reassoc' lets LLVM
#: vectorise the per-row sums, 'contract' fuses multiply-adds; NaN and infinity keep their IEEE
#: meaning (no 'nnan'/'ninf'), which the finiteness checks rely on; numpy's error model (a
#: division by zero gives infinity or NaN, unchecked).
FASTMATH = dict(EXACT, error_model="numpy", fastmath={"reassoc", "contract"})
FASTMATH_RUNTIME = dict(FASTMATH, _nrt=True)
FASTMATH_HELPER = dict(FASTMATH, _nrt=False)
FASTMATH_INLINE = dict(FASTMATH, inline="always")
#: A parallel kernel (``prange`` over workers or rows): numba's other parallel rewrites (array
#: expressions, comprehensions, setitem, loop fusion, stencils) find nothing in explicit loops
#: and cost compile time (the fused pass: about a tenth of its compile), so only prange is on.
PARALLEL = ParallelOptions(dict(comprehension=False, inplace_binop=False, setitem=False, numpy=False, stencil=False,
                                fusion=False))

# Numba's default (workqueue) threading layer must not be entered from two threads at once;
# a kernel already uses every core, so serialising launches costs no throughput. Every caller
# of a parallel numba kernel holds it (re-entrant: a plan may call a locked helper).
KERNEL_LOCK = threading.RLock()


class _WriteableInterface:
    """An array interface over ``base``'s memory that NumPy takes as writeable (it keeps
    ``base``, so the memory, alive as long as the view)."""

    def __init__(self, interface: dict, base: np.ndarray):
        self.__array_interface__ = interface
        self.base = base


def kernel_input(a):
    """``a`` as every numba kernel of welchpeaks takes an array it only reads: a read-only array
    (``np.load(path, mmap_mode='r')``, a view with ``writeable=False``, a stride trick) becomes a
    view of the same memory flagged writeable, without a copy; any other value is returned as is.

    numba types a read-only array as its own type, so a read-only input used to compile a second
    specialisation of each kernel on its first use (20-60 s on 2 cores, unannounced; issue 35,
    defect 16). NumPy refuses ``setflags(write=True)`` on a view of a read-only memory map, so the
    view is made from the array's own ``__array_interface__`` with the read-only bit cleared
    (same pointer, shape, strides and dtype: the same numba type as a writeable array). Only
    arrays the kernels never write may pass through here (a write to a read-only map faults)."""
    if not isinstance(a, np.ndarray) or a.flags.writeable:
        return a
    interface = dict(a.__array_interface__)
    interface["data"] = (interface["data"][0], False)
    return np.asarray(_WriteableInterface(interface, a))


_ANNOUNCED: set = set()


def announce_compile(dispatcher, what: str, seconds: str, args: tuple | None = None) -> None:
    """Say once per process (:func:`welchpeaks.notices.notify`), before a call of ``dispatcher``
    that will compile: what is compiled, roughly how long, and that it happens once. With
    ``args`` (the call's arguments), per signature: said when neither this process nor numba's
    disk cache has the signature of those arguments (another signature of a cached kernel still
    compiles: float64 rows at fp32 beside the calibration's float32 and float64); without, when
    the dispatcher has no signature here and no cache index on disk."""
    if args is None:
        if dispatcher in _ANNOUNCED or dispatcher.signatures:
            return
        said, sig = dispatcher, None
    else:
        try:
            sig = tuple(dispatcher.typeof_pyval(a) for a in args)
        except Exception:  # (numba would refuse the call itself, with its own error)
            return
        said = (dispatcher, sig)
        if said in _ANNOUNCED or sig in dispatcher.overloads:
            return
    if threading.current_thread().name.startswith("welchpeaks-calibrate"):
        return  # the background calibration announced itself
    _ANNOUNCED.add(said)
    try:
        index = dispatcher._cache._cache_file._load_index()
    except Exception:  # another numba version's internals, an unreadable index: say nothing rather than guess
        return
    if not any(sig is None or key[0] == sig for key in index):
        notify(f"welchpeaks: compiling {what} with numba ({seconds}); once per machine, the result is cached on "
               "disk")


def numba_threads() -> int:
    """Threads a parallel numba kernel uses here."""
    import numba

    return int(numba.get_num_threads())


def worker_rows(workers: int, n: int, dtype) -> np.ndarray:
    """``[workers, >= n]`` zeros whose rows (one per worker) never share a cache line: each row
    is padded by at least a line, whatever the alignment of the allocation, so workers writing
    their own rows do not invalidate each other's caches (false sharing, which costs more than
    the whole kernel on two threads)."""
    item = np.dtype(dtype).itemsize
    return np.zeros((workers, -(-n * item // 64) * (64 // item) + 64 // item), dtype)


def worker_blocks(workers: int, rows: int, dtype, lanes: int = LANES) -> np.ndarray:
    """``[workers, >= rows, lanes]`` zeros, one block per worker, blocks a cache line apart
    (see :func:`worker_rows`)."""
    line = max(1, -(-64 // (lanes * np.dtype(dtype).itemsize)))
    return np.zeros((workers, rows + line, lanes), dtype)


def bit_reverse(n: int) -> np.ndarray:
    """The bit-reversal permutation of ``range(n)`` (``n`` a power of two) as int64."""
    bits = max(n.bit_length() - 1, 0)
    idx = np.arange(max(n, 1), dtype=np.int64)
    rev = np.zeros_like(idx)
    for b in range(bits):
        rev |= ((idx >> b) & 1) << (bits - 1 - b)
    return rev


@njit(**FASTMATH_INLINE)
def butterfly_lanes(re, im, i0, i1, wr, wi, nv):
    """One radix-2 butterfly ``(a, b) -> (a + w b, a - w b)`` on rows ``i0``/``i1`` of lanes ``< nv``."""
    for lane in range(nv):
        br = re[i1, lane] * wr - im[i1, lane] * wi
        bi = re[i1, lane] * wi + im[i1, lane] * wr
        ar = re[i0, lane]
        ai = im[i0, lane]
        re[i0, lane] = ar + br
        im[i0, lane] = ai + bi
        re[i1, lane] = ar - br
        im[i1, lane] = ai - bi


def _imported_sources(path, root) -> set:
    """The files of the package at ``root`` that the module at ``path`` imports from at its top
    level: a module, a package's ``__init__`` (a family's face), or a module imported by name
    from a package (``from pkg.family import module``)."""
    import ast
    from pathlib import Path

    try:
        tree = ast.parse(path.read_text(errors="replace"))
    except SyntaxError:
        return set()
    found = set()
    for node in tree.body:  # (welchpeaks imports absolutely)
        if not isinstance(node, ast.ImportFrom) or node.level or (node.module or "").split(".")[0] != root.name:
            continue
        for name in ("", *(a.name for a in node.names)):
            at = Path(root.parent, *node.module.split("."), *([name] if name else []))
            found.update(f for f in (at.with_suffix(".py"), at / "__init__.py") if f.is_file())
    return found


def clear_stale_caches(package: str | None = None) -> bool:
    """Delete numba's on-disk caches of ``package``'s kernels (the folder of welchpeaks by
    default) when any of its modules using numba changed since the last check, and record
    their digest; True when it cleared them.

    numba keys a cached kernel on its own source file only: a kernel that calls or inlines a
    helper of another module keeps the old helper after that module is edited. One digest over
    every module that imports numba at its top (in any folder of the package), and every module
    they import from (whose constants are compiled in: a module, a package's face, a module
    imported by name from a package), catches any such edit (an install rewrites every file, so
    only a developer's tree needs this; ``tests/conftest.py`` calls it when the tests start).
    Caches under ``NUMBA_CACHE_DIR`` are found by the package's path inside it."""
    import hashlib
    import re
    from pathlib import Path

    root = Path(package or Path(__file__).parent)
    uses = re.compile(r"^(from numba[ .]|import numba)", re.M)  # (at module level: its kernels)
    kernels = [p for p in root.rglob("*.py") if uses.search(p.read_text(errors="replace"))]
    # and the modules they import from (a constant a kernel reads is compiled into it)
    helpers = {f for p in kernels for f in _imported_sources(p, root)}
    sources = sorted(set(kernels) | helpers)
    digest = hashlib.sha256()
    for p in sources:
        digest.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes())
    stamp = root / "__pycache__" / "numba-sources.sha256"
    if stamp.is_file() and stamp.read_text().strip() == digest.hexdigest():
        return False
    caches = [root]
    if os.environ.get("NUMBA_CACHE_DIR"):
        caches.append(Path(os.environ["NUMBA_CACHE_DIR"]))
    for folder in caches:
        for f in folder.rglob("*"):
            if f.suffix in (".nbi", ".nbc") and (folder == root or root.name in f.parts):
                try:
                    f.unlink(missing_ok=True)
                except OSError:
                    pass
    try:
        stamp.parent.mkdir(exist_ok=True)
        stamp.write_text(digest.hexdigest() + "\n")
    except OSError:  # an installed, read-only package: nothing of it is edited, nothing cached there
        return False
    return True
