"""How likely noise alone is to give a peak: the ``pvalue`` measure and the ``max_pvalue``
filter of :func:`welchpeaks.welch_peaks`.

The model (Welch 1967; Percival & Walden, *Spectral Analysis for Physical Applications*, 1993,
section 6.17, eq. 292b): where the signal is Gaussian noise whose spectrum is flat around a
bin, the Welch estimate there is ``S * Y / nu`` with ``Y`` close to chi-squared with the
equivalent degrees of freedom

    nu = 2 K / (1 + 2 sum_{m=1}^{K-1} (1 - m / K) rho(m)^2),
    rho(m) = sum_n w[n] w[n + m D] / sum_n w[n]^2,

of ``K`` segments of the window ``w`` a hop ``D`` apart (``rho``: how much segments ``m``
hops apart overlap through the window; ``nu = 2 K`` without overlap). The noise floor ``S``
is the one the SNR measures against: the median of the row's PSD (or over ``noise_bins``
around the peak), whose expected value is ``S * median(chi2_nu) / nu``. So a peak whose
SNR over the floor is ``R`` (a ratio) has

    pvalue = P(chi2_nu >= R * median(chi2_nu)),

the probability that one noise bin stands at least that high above the floor. It is a
per-bin probability: over a row of ``B`` bins about ``B * alpha`` noise bins have a p-value
under ``alpha`` (correct for the number of bins looked at, e.g. Bonferroni ``alpha / B``, to
bound the false peaks of a whole row).

Assumptions, and what they cost (docs/accuracy.md has the measured table): Gaussian noise,
its spectrum flat over the window's main lobe and over the bins the median takes; bins away
from DC and Nyquist (those have half the degrees of freedom); no detrending effect (bins
under ``PeakParams.clean_bin``). The chi-squared law is a two-moment approximation of the
estimate's law (a weighted sum of exponentials): close for Hann at 50% overlap (within a few
percent at ``alpha`` 0.01), about 10% too small in the far tail for boxcar at 50% overlap.
The median floor is itself estimated from the row; with few bins (n_fft 256: 129) its noise
makes small p-values up to about 20% too frequent.
"""

from __future__ import annotations

import numpy as np


def welch_edof(window: np.ndarray, hop: int, n_segments: int) -> float:
    """The equivalent degrees of freedom ``nu`` of a Welch estimate of ``n_segments`` segments
    of ``window`` starting ``hop`` samples apart (the formula above)."""
    w = np.asarray(window, np.float64)
    n, k = len(w), int(n_segments)
    power = float(np.sum(w * w))
    total = 0.0
    for m in range(1, k):
        lag = m * hop
        if lag >= n:
            break
        rho = float(np.sum(w[: n - lag] * w[lag:])) / power
        total += (1.0 - m / k) * rho * rho
    return 2.0 * k / (1.0 + 2.0 * total)


def pvalue_from_snr(snr_db: np.ndarray, edof: float) -> np.ndarray:
    """The p-value of peaks whose SNR over the median floor is ``snr_db`` (NaN stays NaN):
    ``scipy.special.chdtrc``, chi-squared's survival function (``scipy.stats.chi2.sf`` without
    its argument checks: 25% faster on a batch's peaks)."""
    from scipy import special

    ratio = np.power(10.0, np.asarray(snr_db, np.float64) / 10.0)
    return special.chdtrc(edof, ratio * special.chdtri(edof, 0.5))


def snr_db_for_pvalue(max_pvalue: float, edof: float) -> float:
    """The SNR (dB over the median floor) at which the p-value is ``max_pvalue``: a peak has a
    p-value at most ``max_pvalue`` exactly when its SNR is at least this."""
    from scipy import special

    return float(10.0 * np.log10(special.chdtri(edof, max_pvalue) / special.chdtri(edof, 0.5)))
