"""The README's two pictures: ``python docs/img/pictures.py`` (needs the plot extra) writes
docs/img/peaks.png and docs/img/tracks.png."""
from pathlib import Path

import matplotlib
import numpy as np

import welchpeaks

matplotlib.use("Agg")
here = Path(__file__).resolve().parent
fs = 8000.0
t = np.arange(int(4 * fs)) / fs
rng = np.random.default_rng(0)
x = np.sin(2 * np.pi * 1000 * t) + 0.3 * np.sin(2 * np.pi * 2500 * t) + 0.05 * rng.standard_normal(t.size)
r = welchpeaks.welch_peaks(x, fs=fs, k=2, prominence=0, measures=("snr",))
ax = r.plot(x)
ax.figure.savefig(here / "peaks.png", dpi=80, bbox_inches="tight")
y = (np.sin(2 * np.pi * (500 * t + 250 * t ** 2)) + np.sin(2 * np.pi * (2500 * t - 250 * t ** 2))
     + np.sin(2 * np.pi * 1000 * t) + 0.07 * rng.standard_normal(t.size))
tracks = welchpeaks.track(y, fs=fs, n_fft=256, k=16, frame_segments=2, measures=("snr",)).link()
ax = tracks.plot(y)
ax.figure.savefig(here / "tracks.png", dpi=80, bbox_inches="tight")
