"""welchpeaks bench floor: its rows compute what they claim (the peers' peaks are welch_peaks',
the FFT rows the FFT of the windowed segments), and the command writes every cell."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

import welchpeaks
from welchpeaks.bench import floor
from welchpeaks.cli import app


@pytest.mark.slow
@pytest.mark.parametrize("n_fft,segments,dtype", [(64, 2, "float32"), (256, None, "float64"), (128, 8, "float32")])
def test_the_rows_compute_what_they_claim(n_fft, segments, dtype):
    cell = floor.FloorCell(batch=6, n_fft=n_fft, segments=segments, dtype=dtype, threads=1)
    rows, nbytes = floor.rows_for(cell, k=4)
    assert nbytes == 6 * cell.length * np.dtype(dtype).itemsize
    assert {"scipy", "numpy", "fused-cpu", "auto", "fft:scipy", "copy"} <= set(rows)
    rng = np.random.default_rng(6 * 7919 + n_fft)  # the cell's signals
    x = rng.standard_normal((6, cell.length)).astype(dtype)
    # the peers allow DC and Nyquist as peaks, as welch_peaks(edges=True)
    want = welchpeaks.welch_peaks(x, k=4, n_fft=n_fft, hop=n_fft // 2, segments=cell.n_seg, dtype="float64",
                                  edges=True)
    for name in ("scipy", "torch"):
        if name in rows:  # the same peaks in every row (a float32 near-tie may swap one in a row)
            got = np.asarray(rows[name]())
            same = [set(a) == set(b) for a, b in zip(got.tolist(), want.bins.tolist())]
            assert sum(same) >= len(same) - (dtype == "float32"), (name, got, want.bins)
    from welchpeaks.bench.peaks import _windowed_segments

    segs = _windowed_segments(x, n_fft, cell.n_seg).reshape(-1, n_fft).astype(np.float64)
    ref = np.fft.rfft(segs, axis=-1)
    for name in floor.FFT_ROWS:
        if name in rows:
            out = rows[name]()
            out = out if out is not None else rows[name].output_array  # pyFFTW's plan returns its output
            np.testing.assert_allclose(out, ref, rtol=0, atol=1e-4 * np.abs(ref).max(), err_msg=name)


@pytest.mark.slow
def test_the_command_writes_every_cell_and_leaves_out_what_is_too_large(tmp_path):
    res = CliRunner().invoke(app, ["bench", "floor", "--batch", "4", "--n-fft", "64", "--segments", "2,all",
                                   "--threads", "1,all", "--repeats", "3", "--max-bytes", "1MiB", "--json",
                                   str(tmp_path / "f.json"), "--md", str(tmp_path / "f.md")])
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "f.json").read_text())
    assert len(doc["cells"]) == 2 * 2 and doc["skipped"] == []
    for cell in doc["cells"]:
        by = {r["row"]: r for r in cell["rows"]}
        assert by[cell["best_fft"]]["over_fft"] == 1.0 and cell["best_fft"] in floor.FFT_ROWS
        assert all(by[cell["best_fft"]]["median_ms"] <= by[n]["median_ms"] for n in floor.FFT_ROWS if n in by)
        assert all(r["repeats"] == 3 and r["min_ms"] <= r["median_ms"] <= r["max_ms"] for r in cell["rows"])
    assert (tmp_path / "f.md").read_text().count("\n") == 2 + len(doc["cells"])
    big = CliRunner().invoke(app, ["bench", "floor", "--batch", "65536", "--n-fft", "4096", "--repeats", "3",
                                   "--max-bytes", "16MiB"])
    assert big.exit_code == 0 and "left out" in big.output
    for args, words in ((["--threads", "0"], "--threads"), (["--segments", "x"], "--segments"),
                        (["--dtype", "int8"], "--dtype"), (["--repeats", "1"], "--repeats")):
        bad = CliRunner().invoke(app, ["bench", "floor", *args])
        assert bad.exit_code == 2 and words in bad.output, (args, bad.output)
