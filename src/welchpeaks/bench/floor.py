"""``welchpeaks bench floor``: the executions against the floor, in one run.

Per cell (batch, n_fft, segments, dtype, threads) every row sees the same signals and is timed
round robin (one call of each row per round) after warm-up, wall time and the process's CPU
time per call. Rows:

* ``scipy``: ``scipy.signal.welch`` then a local-maximum mask, ``np.argpartition`` top-k and a
  sort: the peer a user would write (one thread: scipy's welch has none other);
* ``torch``: the same in torch (``unfold``, mean removal, window, ``torch.fft.rfft``, ``topk``),
  where torch is installed;
* ``numpy``, ``fused-cpu``: the executions, through a reused :class:`welchpeaks.WelchPeaks`;
  ``auto``: ``WelchPeaks(strategy='auto')``, reused;
* the FFT alone on the same segments, already windowed, into a preallocated output:
  ``fft:scipy`` (``scipy.fft.rfft``), ``fft:fftw`` (pyFFTW, ``FFTW_MEASURE``, planned before
  timing) and ``fft:ducc0``, each where installed (``pip install welchpeaks[bench]``);
* ``copy``: ``np.copyto`` of the input: the memory floor of reading it.

Each row's ratio is to the best FFT alone (``/ fft``), its speed-up to the peer (``x scipy``)
and its input throughput (GB/s of the signals read) beside the copy's. ``threads``: the
threads every contender may use (numba, scipy.fft's workers, torch, FFTW, ducc0); ``0``: all
the machine's cores.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterator

import numpy as np

#: the FFT-alone rows; the floor is the fastest of those installed
FFT_ROWS = ("fft:scipy", "fft:fftw", "fft:ducc0")
#: segments of a signal 'all' stands for: every segment of 16 n_fft samples (31 at hop n_fft / 2)
ALL_LENGTH_FFTS = 16


@dataclass(frozen=True)
class FloorCell:
    batch: int
    n_fft: int
    segments: int | None  # None: every segment of ALL_LENGTH_FFTS * n_fft samples
    dtype: str
    threads: int

    @property
    def hop(self) -> int:
        return self.n_fft // 2

    @property
    def length(self) -> int:
        if self.segments is None:
            return ALL_LENGTH_FFTS * self.n_fft
        return self.n_fft + (self.segments - 1) * self.hop

    @property
    def n_seg(self) -> int:
        return (self.length - self.n_fft) // self.hop + 1

    def input_bytes(self) -> int:
        return self.batch * self.length * np.dtype(self.dtype).itemsize

    def working_bytes(self) -> int:
        """About the most this cell holds at once: signals, windowed segments, a spectrum."""
        item = np.dtype(self.dtype).itemsize
        segs = self.batch * self.n_seg * self.n_fft * item
        return self.input_bytes() + 2 * segs + 2 * segs * 2


def threads_of(spec: int) -> int:
    """``0`` -> the machine's cores, else ``spec``."""
    return os.cpu_count() or 1 if spec == 0 else spec


def _peer(x: np.ndarray, n_fft: int, k: int) -> np.ndarray:
    from welchpeaks.bench.peaks import top_k_bins
    import scipy.signal

    _, p = scipy.signal.welch(x, nperseg=n_fft, noverlap=n_fft // 2, axis=-1)
    return top_k_bins(p, k, "peaks")


def _torch_peer(torch: Any, n_fft: int, k: int, n_seg: int) -> Callable[[Any], Any]:
    window = torch.hann_window(n_fft, periodic=True)

    def run(xt: Any) -> Any:
        segs = xt.unfold(-1, n_fft, n_fft // 2)[:, :n_seg]
        segs = (segs - segs.mean(-1, keepdim=True)) * window.to(xt.dtype)
        p = torch.fft.rfft(segs).abs().square().mean(1)
        p[:, 1:n_fft // 2] *= 2  # one-sided, as scipy's welch (DC and Nyquist once)
        left = torch.nn.functional.pad(p[:, :-1], (1, 0), value=-float("inf"))
        right = torch.nn.functional.pad(p[:, 1:], (0, 1), value=-float("inf"))
        masked = torch.where((p > left) & (p >= right), p, torch.tensor(-float("inf"), dtype=p.dtype))
        return torch.topk(masked, min(k, p.shape[1]), dim=-1).indices

    return run


def _fft_rows(segs: np.ndarray, threads: int) -> dict[str, Callable[[], Any]]:
    """The FFT alone on ``segs [n, n_fft]`` by each installed library, output preallocated."""
    import scipy.fft

    rows: dict[str, Callable[[], Any]] = {"fft:scipy": lambda: scipy.fft.rfft(segs, axis=-1, workers=threads)}
    cdt = np.complex64 if segs.dtype == np.float32 else np.complex128
    try:
        import pyfftw

        out = pyfftw.empty_aligned((segs.shape[0], segs.shape[1] // 2 + 1), cdt)
        inp = pyfftw.empty_aligned(segs.shape, segs.dtype)
        inp[:] = segs
        plan = pyfftw.FFTW(inp, out, axes=(-1,), flags=("FFTW_MEASURE",), threads=threads)
        inp[:] = segs  # FFTW_MEASURE overwrites its arrays while planning
        rows["fft:fftw"] = plan
    except ImportError:
        pass
    try:
        import ducc0

        dout = np.empty((segs.shape[0], segs.shape[1] // 2 + 1), cdt)
        rows["fft:ducc0"] = lambda: ducc0.fft.r2c(segs, axes=(1,), nthreads=threads, out=dout)
    except ImportError:
        pass
    return rows


class _Threads:
    """Every contender's threads set to ``n`` for a cell (numba's, torch's), restored after."""

    def __init__(self, n: int):
        self.n = n

    def __enter__(self) -> "_Threads":
        import numba

        self.numba = numba.get_num_threads()
        numba.set_num_threads(min(self.n, numba.config.NUMBA_NUM_THREADS))
        self.torch = None
        try:
            import torch

            self.torch = torch.get_num_threads()
            torch.set_num_threads(self.n)
        except ImportError:
            pass
        return self

    def __exit__(self, *exc: Any) -> None:
        import numba

        numba.set_num_threads(self.numba)
        if self.torch is not None:
            import torch

            torch.set_num_threads(self.torch)


def rows_for(cell: FloorCell, k: int = 16) -> tuple[dict[str, Callable[[], Any]], int]:
    """The cell's rows (name -> a call) and its input's bytes."""
    import welchpeaks
    from welchpeaks import backends
    from welchpeaks.bench.peaks import _windowed_segments

    threads = threads_of(cell.threads)
    rng = np.random.default_rng(cell.batch * 7919 + cell.n_fft)
    x = rng.standard_normal((cell.batch, cell.length)).astype(cell.dtype)
    segs = _windowed_segments(x, cell.n_fft, cell.n_seg).astype(cell.dtype).reshape(-1, cell.n_fft)
    opts = dict(n_fft=cell.n_fft, k=k, segments=cell.n_seg, hop=cell.hop, dtype=cell.dtype)
    rows: dict[str, Callable[[], Any]] = {"scipy": lambda: _peer(x, cell.n_fft, k)}
    try:
        import torch

        xt = torch.from_numpy(x)
        peer = _torch_peer(torch, cell.n_fft, k, cell.n_seg)
        rows["torch"] = lambda: peer(xt)
    except ImportError:
        pass
    for name in backends.available("cpu"):
        wp = welchpeaks.WelchPeaks(strategy=name, **opts)
        rows[name] = lambda wp=wp: wp(x)
    auto = welchpeaks.WelchPeaks(strategy="auto", **opts)
    rows["auto"] = lambda: auto(x)
    rows.update(_fft_rows(segs, threads))
    dst = np.empty_like(x)
    rows["copy"] = lambda: np.copyto(dst, x)
    return rows, x.nbytes


def time_rows(rows: dict[str, Callable[[], Any]], repeats: int, warmup: int = 2) -> dict[str, dict[str, list[float]]]:
    """Wall and CPU milliseconds of ``repeats`` calls of every row, round robin, after ``warmup`` each."""
    for fn in rows.values():
        for _ in range(warmup):
            fn()
    out = {name: {"wall": [], "cpu": []} for name in rows}
    for _ in range(repeats):
        for name, fn in rows.items():
            c0, t0 = time.process_time(), time.perf_counter()
            fn()
            t1, c1 = time.perf_counter(), time.process_time()
            out[name]["wall"].append((t1 - t0) * 1e3)
            out[name]["cpu"].append((c1 - c0) * 1e3)
    return out


def time_cell(cell: FloorCell, repeats: int, k: int = 16) -> dict[str, Any]:
    """One cell timed: per row wall and CPU medians (min-max), ratios to the best FFT alone and
    to the peer, and input GB/s."""
    with _Threads(threads_of(cell.threads)):
        rows, nbytes = rows_for(cell, k)
        samples = time_rows(rows, repeats)
    med = {n: float(np.median(s["wall"])) for n, s in samples.items()}
    ffts = {n: med[n] for n in FFT_ROWS if n in med}
    best = min(ffts, key=ffts.get)
    out = []
    for name, s in samples.items():
        wall = np.asarray(s["wall"])
        out.append({"row": name, "median_ms": med[name], "min_ms": float(wall.min()), "max_ms": float(wall.max()),
                    "cpu_median_ms": float(np.median(s["cpu"])), "repeats": len(wall),
                    "over_fft": med[name] / ffts[best], "x_scipy": med["scipy"] / med[name],
                    "input_gbps": nbytes / (med[name] * 1e6)})
    return {**asdict(cell), "segments": "all" if cell.segments is None else cell.segments, "n_seg": cell.n_seg,
            "length": cell.length, "threads_used": threads_of(cell.threads), "best_fft": best,
            "input_bytes": nbytes, "rows": out}


def cells(batches: list[int], n_ffts: list[int], segments: list[int | None], dtypes: list[str],
          threads: list[int], max_bytes: int) -> tuple[list[FloorCell], list[dict[str, Any]]]:
    """The grid, and the cells left out because they would hold more than ``max_bytes``."""
    keep, skipped = [], []
    for t in threads:
        for dt in dtypes:
            for n in n_ffts:
                for s in segments:
                    for b in batches:
                        c = FloorCell(b, n, s, dt, t)
                        if c.working_bytes() > max_bytes:
                            skipped.append({**asdict(c), "why": f"needs about {c.working_bytes() / 2**20:.0f} MiB, "
                                                                f"over --max-bytes"})
                        else:
                            keep.append(c)
    return keep, skipped


def run(grid: list[FloorCell], repeats: int, progress: Callable[[str], None] = lambda s: None) -> Iterator[dict]:
    """Each cell's figures, as they are timed."""
    for i, c in enumerate(grid):
        progress(f"cell {i + 1}/{len(grid)}: batch {c.batch}, n_fft {c.n_fft}, segments "
                 f"{'all' if c.segments is None else c.segments}, {c.dtype}, {threads_of(c.threads)} thread(s)")
        yield time_cell(c, repeats)


def markdown_table(results: list[dict[str, Any]], rows: tuple[str, ...] = ("scipy", "torch", "numpy", "fused-cpu",
                                                                          "auto")) -> str:
    """One line per cell: the best FFT alone in ms, and each row's ratio to it, with fused-cpu's
    and copy's GB/s."""
    head = "| threads | dtype | batch | n_fft | segments | best FFT alone ms | " + " | ".join(
        f"{r} / FFT" for r in rows) + " | auto x scipy | fused-cpu GB/s | copy GB/s |"
    lines = [head, "|" + "---:|" * (head.count("|") - 1)]
    for res in results:
        by = {r["row"]: r for r in res["rows"]}
        fft = by[res["best_fft"]]
        cols = [f"{by[r]['over_fft']:.2f}" if r in by else "-" for r in rows]
        lines.append(f"| {res['threads_used']} | {res['dtype']} | {res['batch']} | {res['n_fft']} | {res['segments']} | "
                     f"{fft['median_ms']:.3f} ({res['best_fft'][4:]}) | " + " | ".join(cols) +
                     f" | {by['auto']['x_scipy']:.1f} | {by['fused-cpu']['input_gbps']:.2f} | "
                     f"{by['copy']['input_gbps']:.1f} |")
    return "\n".join(lines) + "\n"
