"""``welchpeaks track ... --plot PNG``: a picture of an out-of-core job's peaks over time, drawn
from the columns the job writes (no spectrogram: the samples are not kept), in bounded memory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

#: the most frames the picture keeps: every ``step``-th frame, ``step`` doubling as the job goes
MAX_FRAMES = 20_000


class PeaksOverTime:
    """The peaks of the first signal of the first file, collected from the job's columns as they
    are written (:attr:`welchpeaks.cli.job.Job.watch`), every ``step``-th frame; ``step``
    doubles whenever more than :data:`MAX_FRAMES` frames are held, so memory stays under
    ``MAX_FRAMES x k`` peaks whatever the recording's length."""

    FIELDS = ("frame", "time", "rank", "freq", "power", "track")

    def __init__(self, time_column: str):
        self.time_column = time_column
        self.step = 1
        self.cols = {f: np.empty(0) for f in self.FIELDS}

    def __call__(self, cols: dict[str, np.ndarray]) -> None:
        mine = (cols["file"] == 0) & (cols["signal"] == 0)
        if not mine.any():
            return
        got = {"frame": cols["frame"], "time": cols[self.time_column], "rank": cols["rank"], "freq": cols["freq"],
               "power": cols["power"], "track": cols.get("track", np.full(mine.shape, -1))}
        keep = mine & (cols["frame"] % self.step == 0)
        for f in self.FIELDS:
            self.cols[f] = np.concatenate([self.cols[f], np.asarray(got[f], np.float64)[keep]])
        while np.unique(self.cols["frame"]).size > MAX_FRAMES:
            self.step *= 2
            kept = self.cols["frame"] % self.step == 0
            self.cols = {f: v[kept] for f, v in self.cols.items()}

    def draw(self, plt: Any, path: Path, name: str, fs_known: bool, linked: bool) -> None:
        """Write the picture to ``path`` (PNG, atomically) with ``plt`` (``matplotlib.pyplot``,
        :func:`welchpeaks.cli.common.pyplot_for`); ``name``: the first file's."""
        from welchpeaks.cli.common import write_output
        from welchpeaks.plot import draw_peaks_over_time

        c = self.cols
        frames, at = np.unique(c["frame"], return_inverse=True)
        k = int(c["rank"].max()) + 1 if c["rank"].size else 1
        freqs = np.full((frames.size, k), np.nan)
        power = np.full((frames.size, k), np.nan)
        ids = np.full((frames.size, k), -1, np.int64)
        times = np.zeros(frames.size)
        rank = c["rank"].astype(np.int64)
        freqs[at, rank], power[at, rank], ids[at, rank] = c["freq"], c["power"], c["track"].astype(np.int64)
        times[at] = c["time"]
        fig, ax = plt.subplots(figsize=(8, 4))
        ylabel = "frequency (Hz)" if fs_known else "frequency (cycles/sample)"
        xlabel = "time (s)" if fs_known else "time (samples)"
        draw_peaks_over_time(ax, times, freqs, power, ids if linked else None, xlabel, ylabel,
                             f"{name}, signal 0: peaks over time", self.step)
        write_output(path, lambda tmp: fig.savefig(tmp, dpi=90, format="png"), "--plot")
        plt.close(fig)
