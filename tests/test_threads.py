"""A shared WelchPeaks gives the same answers from several threads at once."""

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import welchpeaks


@pytest.mark.parametrize("strategy", welchpeaks.available_strategies())
def test_shared_executor_from_threads(strategy):
    rng = np.random.default_rng(3)
    wp = welchpeaks.WelchPeaks(n_fft=128, k=8, segments=2, strategy=strategy)
    inputs = [rng.standard_normal((int(rng.integers(1, 300)), 192)).astype(np.float32) for _ in range(24)]
    expected = [wp(x).bins for x in inputs]
    with ThreadPoolExecutor(max_workers=6) as pool:
        got = list(pool.map(lambda x: wp(x).bins, inputs * 3))
    for i, g in enumerate(got):
        np.testing.assert_array_equal(g, expected[i % len(inputs)])
