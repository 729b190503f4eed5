"""Built-in demo data: batches of tones in noise with known frequencies."""

from __future__ import annotations

import numpy as np


def tones_in_noise(
    batch: int = 1024,
    length: int = 4096,
    fs: float = 8000.0,
    n_tones: int = 3,
    n_fft: int = 256,
    snr_db: float = 20.0,
    min_separation_bins: float = 4.0,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Signals ``[batch, length]`` (float32) and their tone frequencies ``[batch, n_tones]`` (Hz).

    Tones have amplitudes from 1 down to 0.5, random phases, frequencies at least
    ``min_separation_bins`` PSD bins (of ``n_fft``) apart and away from DC and Nyquist, in white
    noise ``snr_db`` below the weakest tone's power.
    """
    rng = np.random.default_rng(seed)
    bin_hz = fs / n_fft
    lo, hi = 3 * bin_hz, fs / 2 - 3 * bin_hz
    freqs = np.empty((batch, n_tones))
    for b in range(batch):
        while True:
            f = np.sort(rng.uniform(lo, hi, n_tones))
            if n_tones < 2 or np.min(np.diff(f)) >= min_separation_bins * bin_hz:
                break
        freqs[b] = f
    amps = np.linspace(1.0, 0.5, n_tones)
    t = np.arange(length) / fs
    phases = rng.uniform(0, 2 * np.pi, (batch, n_tones, 1))
    x = (amps[None, :, None] * np.sin(2 * np.pi * freqs[:, :, None] * t + phases)).sum(axis=1)
    noise_power = (amps[-1] ** 2 / 2) / 10 ** (snr_db / 10)
    x += rng.standard_normal(x.shape) * np.sqrt(noise_power)
    return x.astype(np.float32), freqs
