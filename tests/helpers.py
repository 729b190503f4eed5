"""Comparison of an execution's result with the plain reference (spectral.reference_peaks);
a command-line job stopped part-way."""

import numpy as np

from welchpeaks.spectral import reference_peaks, welch_psd


def reference_psd(x2d, p, n_seg):
    """float64 PSD of the rows, the way welch_peaks' contract defines it."""
    return welch_psd(
        np.asarray(x2d, np.float64), p.window_array, p.hop, n_seg,
        detrend=p.detrend, scaling=p.scaling, fs=1.0 if p.fs is None else p.fs,
    )


def assert_matches_reference(res, psd, p, exact=True):
    """``res`` (bins/power/freqs [rows, k]) against the reference selection on ``psd``.

    exact: every bin equal, powers to 1e-9 and fractional bins to 1e-7 (float64 compute); a
    peak the tone model refits next to DC or Nyquist to 1e-4 bins, ten times under the model's
    own tolerance (a least-squares minimum on a noisy row is flat: rounding in the residuals
    moves it by 1e-7 to 1e-5 bins between two float64 implementations).
    Otherwise (float32 compute): powers to 1e-4 of the row's maximum; a row may pick other
    bins only where float32 rounding decides a near tie, so at most 2% of rows differ, and
    even there every reported power is the reference PSD at the reported bin.
    """
    edge = None if "triton" in str(getattr(res, "strategy", "")) else p.edge_model  # (Triton: no tone model)
    bins, power, fbins = reference_peaks(psd, p.k, p.mode, p.min_distance, p.interp_spec, p.edges, edge)
    got_b = res.bins.reshape(bins.shape)
    got_p = res.power.reshape(bins.shape).astype(np.float64)
    got_f = res.freqs.reshape(bins.shape) / p.freq_scale()
    scale = np.max(psd, axis=1, keepdims=True)
    if exact:
        np.testing.assert_array_equal(got_b, bins)
        np.testing.assert_allclose(got_p, power, rtol=1e-9, atol=1e-12 * scale.max(), equal_nan=True)
        refit = np.zeros(bins.shape, bool) if edge is None else edge.in_zone(bins) & (bins >= 0)
        np.testing.assert_allclose(np.where(refit, np.nan, got_f), np.where(refit, np.nan, fbins), rtol=0, atol=1e-7,
                                   equal_nan=True)
        np.testing.assert_allclose(got_f[refit], fbins[refit], rtol=0, atol=1e-4)
        return
    same = np.all(got_b == bins, axis=1)
    assert (~same).mean() <= 0.02 + 1.0 / len(same), f"{(~same).sum()} of {len(same)} rows differ"
    tol = 1e-4 * scale
    ok = got_b >= 0
    at = np.take_along_axis(psd, np.where(ok, got_b, 0), 1)
    assert np.all(np.abs(np.where(ok, at - got_p, 0)) <= tol), "reported power is not the PSD at the reported bin"
    rows = same
    assert np.all(np.abs(np.nan_to_num(got_p[rows] - power[rows])) <= tol[rows])
    np.testing.assert_array_equal(np.isnan(got_p[rows]), np.isnan(power[rows]))
    np.testing.assert_allclose(got_f[rows], fbins[rows], rtol=0, atol=5e-2, equal_nan=True)


def synthetic_cpu_model(fused_ns_per_row=1000.0, fft_ns_per_row=200.0, select_ns_per_row=2000.0,
                        spectrum_ns_per_row=None, **kw):
    """A CPU cost model with round numbers: time proportional to rows, flat in n_fft/n_bins; the
    fused pass's second segment costs half its first (its selection is paid once), and
    fused-cpu's spectrum kernel costs the selection's time per row unless told."""
    from welchpeaks.plan.cost import LogLogTable, cpu_cost_model

    def flat(per_row):
        return LogLogTable([64.0, 4096.0], [1.0, 1e6], [[per_row, per_row * 1e6]] * 2)

    tables = {
        "numpy/fft:float32": flat(fft_ns_per_row), "numpy/fft:float64": flat(2 * fft_ns_per_row),
        "numpy/select:peaks": flat(select_ns_per_row), "numpy/select:bins": flat(select_ns_per_row),
        "fused-cpu/fused:float32:s1": flat(fused_ns_per_row), "fused-cpu/fused:float32:s2": flat(1.5 * fused_ns_per_row),
        "fused-cpu/fused:float64:s1": flat(2 * fused_ns_per_row),
        "fused-cpu/fused:float64:s2": flat(3 * fused_ns_per_row),
        "fused-cpu/spectrum:peaks": flat(spectrum_ns_per_row or select_ns_per_row),
        "fused-cpu/spectrum:bins": flat(spectrum_ns_per_row or select_ns_per_row),
    }
    args = dict(status="measured", dispatch_ns=1000.0, roundtrip_ns=10_000.0, memory_bw=10.0, h2d_bw=10.0,
                d2h_bw=10.0, threads=2, tables=tables, min_gain_ns=1000.0)
    args.update(kw)
    return cpu_cost_model(**args)


def interrupted(monkeypatch, args, after=2):
    """Run the command line ``args`` (a job) with a Ctrl-C as unit ``after + 1`` starts:
    ``after`` units saved in its staging folder."""
    import importlib

    from typer.testing import CliRunner

    from welchpeaks.cli import app

    job = importlib.import_module("welchpeaks.cli.job")
    real, calls = job.compute_unit, []

    def stop(spec, unit, data=None):
        calls.append(unit)
        if len(calls) > after:
            raise KeyboardInterrupt
        return real(spec, unit, data)

    with monkeypatch.context() as m:
        m.setattr(job, "compute_unit", stop)
        assert CliRunner().invoke(app, args).exit_code == 130
