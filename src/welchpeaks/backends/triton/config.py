"""The launch configuration of the Triton kernels as data: tiles, the constexprs and options
each parameter set compiles with, and what ``triton-fused`` cannot compute. Nothing here imports
torch or triton, so the roofline (:mod:`welchpeaks.backends.triton.costs`), ``gpu-check``
and the executions read the same constants.
"""

from __future__ import annotations

from typing import Any

from welchpeaks.backends import interpreting
from welchpeaks.backends.triton.launches import next_pow2
from welchpeaks.params import PeakParams

#: n_fft -> (rows per program, warps, least top-k slots) of ``triton-fused``; ``gpu-check``
#: validates each entry (no spills on sm_90 and sm_80 for k 1-64, both modes, each precision):
#: ``rows * n_fft`` is 8 values per thread (16 at n_fft 4096, where fewer than 16 slots spilled).
FUSED_TILES = {64: (32, 8, 2), 128: (16, 8, 2), 256: (8, 8, 2), 512: (4, 8, 2), 1024: (2, 8, 2), 2048: (1, 8, 2),
               4096: (1, 8, 16)}
MAX_FUSED_K = 64
PRECISION_CODES = {"fp32": 0, "tf32": 1, "bf16": 2}


def block_tile(nbp: int, kt: int) -> tuple[int, int]:
    """(rows per program, warps) of ``triton-block`` for ``nbp`` bin lanes and ``kt`` top-k
    slots: 16 values per thread (fewer instructions per row than 8), 8 warps where 4 leave a few
    bytes of stack; 8 values per thread for 64 slots over 2048 lanes, where ptxas keeps 4 CTAs
    per SM at 64 registers and spills otherwise (Triton 3.6). ``gpu-check`` over k 1-64, both
    modes, sm_90 and sm_80, Triton 3.6 and 3.9."""
    warps = 4 if 128 < nbp <= 1024 else 8
    per_thread = 8 if nbp == 2048 and kt >= 64 else 16
    return max(1, per_thread * 32 * warps // nbp), warps


def select_constants(p: PeakParams, lanes: int, least: int = 2) -> dict:
    """The selection's constexprs: ``KT`` slots computed (a power of two, at least ``least``, at
    most the lanes it ranks: half of them in peaks mode, one candidate per pair), ``IB`` bits
    for a bin index in a sort key, the sub-bin estimator (``INTERP``, ``ALPHA``, and the bin it
    refines from one side, ``ONE_SIDED``), whether DC and Nyquist may be peaks (``EDGES``) and
    whether Triton's interpreter runs the kernel (``INTERPRET``: some steps then take another
    way to the same values)."""
    ranked = lanes // 2 if p.mode == "peaks" else lanes
    return {"KT": min(next_pow2(p.k, least), ranked), "IB": max(1, (p.n_bins - 1).bit_length()),
            "INTERP": p.interp_code, "ALPHA": float(p.interp_alpha), "ONE_SIDED": p.one_sided, "EDGES": p.edges,
            "INTERPRET": interpreting()}


def dft_factors(n_fft: int) -> tuple[int, int, int]:
    """``(N1, N2, N3)`` of the fused kernel's mixed-radix DFT, ``N1 N2 N3 = n_fft`` (a power of
    two from 64 to 4096): as few steps as keep every radix at most :data:`BLOCK_RADIX`, as even
    as possible, each at least 8 (so every product's inner size, twice the radix, is at least
    16: what every Triton version takes, bf16 included)."""
    bits = n_fft.bit_length() - 1
    steps = -(-bits // 4)
    if not (6 <= bits <= 12 and 1 << bits == n_fft):
        raise ValueError(f"n_fft={n_fft}: the fused kernel takes powers of two from 64 to 4096")
    radices = [bits // steps + (i < bits % steps) for i in range(steps)]
    return tuple(1 << r for r in radices) + (1,) * (3 - steps)


#: the largest radix: one real product of ``[re | im]`` with a block matrix (``_cdot``)
BLOCK_RADIX = 16


def fused_constants(p: PeakParams) -> tuple[dict[str, Any], dict[str, Any], int]:
    """(constexprs, options, rows per program) of the fused kernel for ``p``."""
    n1, n2, n3 = dft_factors(p.n_fft)
    br, warps, least = FUSED_TILES[p.n_fft]
    consts = dict(N1=n1, N2=n2, N3=n3, BR=br, HALF=2 * p.hop == p.n_fft, DETREND=p.detrend_code,
                  PEAKS=p.mode == "peaks", MIN_DIST=p.min_distance, **select_constants(p, p.n_fft // 2, least),
                  PRECISION=PRECISION_CODES[p.precision])
    # num_stages=1: no software pipelining of the segment loop. Its loads are loop-variant (see
    # the kernel's ``zero``), and pipelining would stage the next pairs' constants in shared
    # memory (408 KiB at n_fft 128 bf16: no launch) for a loop that runs once at 2 segments.
    return consts, {"num_warps": warps, "num_stages": 1}, br


def block_constants(p: PeakParams) -> tuple[dict[str, Any], dict[str, Any], int]:
    """(constexprs, options, rows per program) of ``triton-block``'s selection kernel for ``p``."""
    nbp = next_pow2(p.n_bins)
    select = select_constants(p, nbp)
    br, warps = block_tile(nbp, select["KT"])
    consts = dict(NB=p.n_bins, NBP=nbp, BR=br, PEAKS=p.mode == "peaks", MIN_DIST=p.min_distance, **select)
    return consts, {"num_warps": warps}, br


def fused_unsupported(params: PeakParams) -> str | None:
    """Why ``triton-fused`` cannot compute ``params`` (None: it can)."""
    if params.n_fft not in FUSED_TILES:
        return (f"n_fft={params.n_fft}: triton-fused takes the powers of two {min(FUSED_TILES)} to "
                f"{max(FUSED_TILES)}; use strategy='triton-block' (cuFFT, any n_fft)")
    if params.k > MAX_FUSED_K:
        return f"k={params.k} > {MAX_FUSED_K}: triton-fused selects at most {MAX_FUSED_K} peaks; use 'triton-block'"
    return None
