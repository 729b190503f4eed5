"""Learned butterfly FFTs (needs torch: ``pip install 'welchpeaks[learned]'``).

* :class:`ButterflyFFT`: the network; exact, random or perturbed twiddles; gates; Q8.
* :func:`train_fft`: fit the twiddles to ``numpy.fft`` (Adam, then an L-BFGS polish).
* :func:`prune_for_domain`: learn which butterflies the top-k Welch peaks of a signal domain need.
* :func:`evaluate`: reference errors, peak recall and compiled timings.
* :func:`save` / :func:`load`: safetensors weights plus JSON metadata, checked on load.
"""

from welchpeaks.learned.model import ButterflyFFT, analytic_active, quantize_q8
from welchpeaks.learned.train import evaluate, prune_for_domain, spectrum_errors, train_fft
from welchpeaks.learned.weights import load, save

__all__ = ["ButterflyFFT", "analytic_active", "quantize_q8", "train_fft", "prune_for_domain", "evaluate",
           "spectrum_errors", "save", "load"]
