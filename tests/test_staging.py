"""A job's staging folder read back as untrusted data (issue 50, item 6): a saved unit is used
only if its members are the job's columns, stored as they are (nothing inflated), of the dtypes
and sizes they declare, checked before they are read, and its columns lie within the unit (file,
signals, frames, ranks, bins, in the order they are computed, times the frames', frequencies and
powers finite); the manifest's pins must match its digest, which keys every unit's listed digest.
A unit that fails is removed and computed again, with one line saying so. The oracle is the
uninterrupted run's output, byte for byte, and the reproductions of N10, N11, N12 and N14."""

import importlib
import io
import json
import shutil
import tracemalloc
import zipfile

import numpy as np
import pytest
from typer.testing import CliRunner

from welchpeaks.cli import app

from helpers import interrupted as _interrupted

job_mod = importlib.import_module("welchpeaks.cli.job")
runner = CliRunner()


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """A float32 [2, 1,600,000] recording (four units), the arguments of its job and the
    uninterrupted run's outputs: plain, with --link, and with --dtype float64."""
    d = tmp_path_factory.mktemp("staging")
    path = d / "x.npy"
    np.save(path, np.random.default_rng(50).standard_normal((2, 1_600_000)).astype(np.float32))
    args = ["track", str(path), "--n-fft", "64", "--k", "2", "--frame-segments", "2", "--memory", "16MiB",
            "--quiet", "--strategy", "numpy"]
    clean = {}
    for name, extra in (("plain", []), ("link", ["--link", "0.05"]), ("float64", ["--dtype", "float64"])):
        res = runner.invoke(app, args + extra + ["--out", str(d / f"clean-{name}.csv")])
        assert res.exit_code == 0, res.output
        clean[name] = (d / f"clean-{name}.csv").read_bytes()
    assert clean["plain"] != clean["float64"]  # (so that a job mixing the two shows)
    return d, args, clean


def _prepared(monkeypatch, args):
    """Run ``args`` up to the first unit it would compute (what it trusts, what it says)."""
    with monkeypatch.context() as m:
        m.setattr(job_mod, "compute_unit", lambda *a: (_ for _ in ()).throw(KeyboardInterrupt))
        res = runner.invoke(app, args)
    assert res.exit_code == 130, (res.output, res.exception)
    return res.output


def _manifest(stage):
    return json.loads((stage / "manifest.json").read_text())


def _relist(stage, i, data):
    """Save ``data`` as unit ``i`` and list it as a forger who knows the scheme would: its digest
    keyed with the manifest's job digest."""
    (stage / f"unit-{i:07d}.npz").write_bytes(data)
    with open(stage / "done.jsonl", "a") as fh:
        fh.write(json.dumps({"unit": i, "sha256": job_mod._digest(_manifest(stage)["job"], data)}) + "\n")


def _columns(stage, i):
    with np.load(stage / f"unit-{i:07d}.npz") as z:
        return {name: z[name].copy() for name in z.files}


def _npz(cols, saver=np.savez):
    buf = io.BytesIO()
    saver(buf, **cols)
    return buf.getvalue()


def _npy(array, shape=None):
    """A .npy member's bytes; ``shape``: a header declaring another shape than the data's."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": array.dtype.str, "fortran_order": False,
                                               "shape": shape or array.shape})
    return buf.getvalue() + array.tobytes()


def _zip(members, deflate=()):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        for name, data in members.items():
            zf.writestr(name, data, zipfile.ZIP_DEFLATED if name in deflate else zipfile.ZIP_STORED)
    return buf.getvalue()


def _set(name, value, row=0):
    def edit(c):
        c[name][row] = value
    return edit


def _swap(c):
    for v in c.values():
        v[[0, 1]] = v[[1, 0]]


def _repeat(c):
    for v in c.values():
        v[1] = v[0]


def _ulp(c):
    c["c_time_samples"][3] = np.nextafter(c["c_time_samples"][3], np.inf)


#: unit 1 of the job (rows 0..1, frames 8191..16381, k 2, 33 bins) forged in every way its
#: checks see, each listed with a digest a forger recomputed -> a fragment of the reason given
FORGERIES = [
    ("signal past the rows", _set("c_signal", 2), "signal column holds values outside 0..1"),
    ("signal 10**6", _set("c_signal", 10 ** 6), "signal column"),
    ("signal negative", _set("c_signal", -1, row=-1), "signal column"),
    ("signal int64 min", _set("c_signal", np.iinfo(np.int64).min), "signal column"),
    ("rank k", _set("c_rank", 2), "rank column holds values outside 0..1"),
    ("rank negative", _set("c_rank", -1), "rank column"),
    ("frame past the unit", _set("c_frame", 16382, row=-1), "frame column holds values outside 8191..16381"),
    ("frame before the unit", _set("c_frame", 8190), "frame column"),
    ("file index 1", _set("c_file", 1), "file column holds values outside 0..0"),
    ("file index negative", _set("c_file", -1), "file column"),
    ("bin past the spectrum", _set("c_bin", 33), "bin column holds values outside 0..32"),
    ("bin negative", _set("c_bin", -1), "bin column"),
    ("power NaN", _set("c_power", np.nan), "not finite"),
    ("power infinite", _set("c_power", np.inf), "not finite"),
    ("power negative", _set("c_power", -1.0), "negative"),
    ("frequency infinite", _set("c_freq", -np.inf), "not finite"),
    ("time one ulp off", _ulp, "times are not its frames'"),
    ("rows swapped", _swap, "out of order or repeat"),
    ("a row repeated", _repeat, "out of order or repeat"),
    ("bin as int16", lambda c: c.update(c_bin=c["c_bin"].astype(np.int16)), "c_bin.npy does not declare"),
    ("file as int64", lambda c: c.update(c_file=c["c_file"].astype(np.int64)), "more than such a file ever holds"),
    ("power as float32", lambda c: c.update(c_power=c["c_power"].astype(np.float32)), "c_power.npy does not declare"),
    ("signal big-endian", lambda c: c.update(c_signal=c["c_signal"].astype(">i8")), "c_signal.npy does not declare"),
    ("a member missing", lambda c: c.pop("c_bin"), "members are not the job's columns"),
    ("a member added", lambda c: c.update(c_extra=np.zeros(1)), "members are not the job's columns"),
    ("a column short", lambda c: c.update(c_power=c["c_power"][:-1]), "different lengths"),
    ("more rows than slots", lambda c: c.update({k: np.resize(v, 2 * 8191 * 2 + 1) for k, v in c.items()}),
     "at most 32764"),
]


@pytest.mark.slow
@pytest.mark.parametrize("name, edit, why", FORGERIES, ids=[f[0] for f in FORGERIES])
def test_a_forged_unit_is_removed_and_computed_again_with_one_line(job, tmp_path, monkeypatch, name, edit, why):
    d, args, _ = job
    out = tmp_path / "o.csv"
    _interrupted(monkeypatch, args + ["--out", str(out)])
    stage = job_mod.staging_dir(out)
    cols = _columns(stage, 1)
    edit(cols)
    _relist(stage, 1, _npz(cols))
    said = _prepared(monkeypatch, args + ["--out", str(out)])
    n = _manifest(stage)["units"]
    assert f"discarded 1 saved chunk(s) of {stage}" in said and "unit-0000001.npz: " in said and why in said, said
    assert f"resuming: 1 of {n} chunks" in said and not (stage / "unit-0000001.npz").exists()


@pytest.mark.parametrize("how", ["resaved", "compressed", "stated longer", "stated shorter", "not a zip"])
def test_unit_archives_are_read_only_as_they_were_saved(job, tmp_path, monkeypatch, how):
    """The same columns saved again as np.savez saves them are trusted (the checks refuse no
    unit of the job's own making); compressed, with a header stating another length than the
    member holds, or not an archive at all: removed and computed again."""
    d, args, _ = job
    out = tmp_path / "o.csv"
    _interrupted(monkeypatch, args + ["--out", str(out)])
    stage = job_mod.staging_dir(out)
    cols = _columns(stage, 1)
    members = {f"{k}.npy": _npy(v) for k, v in cols.items()}
    n = len(cols["c_power"])
    data = {"resaved": lambda: _npz(cols), "compressed": lambda: _npz(cols, np.savez_compressed),
            "stated longer": lambda: _zip(dict(members, **{"c_power.npy": _npy(cols["c_power"], (n + 1,))})),
            "stated shorter": lambda: _zip(dict(members, **{"c_power.npy": _npy(cols["c_power"], (n - 1,))})),
            "not a zip": lambda: bytes(np.random.default_rng(1).integers(0, 256, 4096, np.uint8))}[how]()
    _relist(stage, 1, data)
    said = _prepared(monkeypatch, args + ["--out", str(out)])
    units = _manifest(stage)["units"]
    if how == "resaved":
        assert f"resuming: 2 of {units}" in said and "discarded" not in said, said
    else:
        assert "discarded 1 saved chunk(s)" in said and f"resuming: 1 of {units}" in said, said


@pytest.mark.slow
@pytest.mark.parametrize("column, link", [("signal", False), ("rank", False), ("frame", False), ("file", False),
                                          ("rank", True)])
def test_out_of_range_columns_with_their_own_digest_give_the_uninterrupted_output(job, tmp_path, monkeypatch,
                                                                                    column, link):
    """N11: a unit rewritten with c_signal, c_rank, c_frame or c_file 10**6 and its own digest
    appended was an IndexError traceback (with and without --link) or written into the output
    as it was. Now the rerun writes the uninterrupted run's bytes."""
    d, args, clean = job
    args = args + (["--link", "0.05"] if link else [])
    out = tmp_path / "o.csv"
    _interrupted(monkeypatch, args + ["--out", str(out)])
    stage = job_mod.staging_dir(out)
    cols = _columns(stage, 1)
    cols[f"c_{column}"][len(cols[f"c_{column}"]) // 2] = 10 ** 6
    _relist(stage, 1, _npz(cols))
    res = runner.invoke(app, args + ["--out", str(out)])
    assert res.exit_code == 0, (res.output, res.exception)
    assert f"its {column} column holds values outside" in res.output
    assert out.read_bytes() == clean["link" if link else "plain"]


def _with_deflated_zeros(members, name, n):
    """An archive of ``members`` (stored) and ``name``, deflated: ``n`` float64 zeros."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        for member, data in members.items():
            if member != name:
                zf.writestr(member, data)
        info = zipfile.ZipInfo(name)
        info.compress_type = zipfile.ZIP_DEFLATED
        with zf.open(info, "w", force_zip64=True) as fh:
            header = io.BytesIO()
            np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False, "shape": (n,)})
            fh.write(header.getvalue())
            block = bytes(1 << 22)
            for _ in range(n * 8 // len(block)):
                fh.write(block)
    return buf.getvalue()


@pytest.mark.slow
def test_compressed_or_overstated_members_are_refused_before_they_are_read(job, tmp_path, monkeypatch):
    """N14: a 1.7 MB deflated unit inflating to 1.5 GiB took the resume to 1.83 GB of memory
    (np.load inflated it). Here a deflated member of 512 MiB, and a stored one declaring 2**26
    values over 8 bytes: the resume allocates under 32 MiB (tracemalloc, which counts NumPy's
    buffers) and writes the uninterrupted run's bytes."""
    d, args, clean = job
    for forged in ("deflated", "overstated"):
        out = tmp_path / f"{forged}.csv"
        _interrupted(monkeypatch, args + ["--out", str(out)])
        stage = job_mod.staging_dir(out)
        cols = _columns(stage, 1)
        members = {f"{k}.npy": _npy(v) for k, v in cols.items()}
        if forged == "deflated":
            data = _with_deflated_zeros(members, "c_power.npy", 1 << 26)
        else:
            members["c_power.npy"] = _npy(cols["c_power"][:1], (1 << 26,))
            data = _zip(members)
        _relist(stage, 1, data)
        tracemalloc.start()
        try:
            said = _prepared(monkeypatch, args + ["--out", str(out)])
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 32 << 20, f"{forged}: {peak / 2**20:.0f} MiB allocated"
        assert "discarded 1 saved chunk(s)" in said and ("compressed" in said if forged == "deflated" else
                                                         "does not declare a column" in said), said
        res = runner.invoke(app, args + ["--out", str(out)])
        assert res.exit_code == 0 and out.read_bytes() == clean["plain"], res.output


def _edited_pin(job, tmp_path, monkeypatch, field, value, redigest):
    """A job stopped after two units, its manifest's pin ``field`` set to ``value`` (and its
    digest recomputed, as a forger who knows the scheme would, with ``redigest``); the rerun."""
    d, args, _ = job
    out = tmp_path / "o.csv"
    _interrupted(monkeypatch, args + ["--out", str(out)])
    stage = job_mod.staging_dir(out)
    doc = _manifest(stage)
    doc["pins"][0][field] = value
    if redigest:
        doc["job"] = job_mod.job_digest(doc["key"], doc["pins"], doc["units"])
    (stage / "manifest.json").write_text(json.dumps(doc))
    return out, stage, runner.invoke(app, args + ["--out", str(out)])


def _altered(res, stage):
    assert res.exit_code == 2 and "Traceback" not in res.output and len(res.output.strip().splitlines()) == 1
    assert "manifest was altered" in res.output and str(stage) in res.output and "delete that folder" in res.output


@pytest.mark.slow
@pytest.mark.parametrize("redigest", [False, True], ids=["digest as it was", "digest recomputed"])
def test_edited_pins_are_an_altered_manifest_or_recompute_every_unit(job, tmp_path, monkeypatch, redigest):
    """N12: a manifest whose pinned dtype was edited (float64 for the first run's float32)
    was accepted, and the resume mixed float32 and float64 units. Now an edit is an altered
    manifest (one line, the folder to delete); a forger who recomputes its digest changes the
    key of every listed unit, so every unit is computed again under the new pins: the output of
    an uninterrupted float64 run, never a mixture."""
    out, stage, res = _edited_pin(job, tmp_path, monkeypatch, "dtype", "float64", redigest)
    if not redigest:
        _altered(res, stage)
        return
    assert res.exit_code == 0, res.output
    assert "discarded 2 saved chunk(s)" in res.output and "do not match its listed digest" in res.output
    assert out.read_bytes() == job[2]["float64"]


@pytest.mark.slow
@pytest.mark.parametrize("redigest", [False, True], ids=["digest as it was", "digest recomputed"])
def test_an_edited_strategy_is_an_altered_manifest_not_an_unknown_option(job, tmp_path, monkeypatch, redigest):
    """N10: a manifest whose pinned strategy was edited was reported as "strategy='bogus' is
    unknown", naming an option the user never gave; now it is the altered manifest it is, and
    deleting the folder, as the line says, runs the job afresh."""
    out, stage, res = _edited_pin(job, tmp_path, monkeypatch, "strategy", "bogus", redigest)
    _altered(res, stage)
    assert "bogus" not in res.output
    shutil.rmtree(stage)
    assert runner.invoke(app, job[1] + ["--out", str(out)]).exit_code == 0 and out.read_bytes() == job[2]["plain"]
