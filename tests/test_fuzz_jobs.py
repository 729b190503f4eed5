"""Fuzzing the command line's jobs: the resume after Ctrl-C and a tampered staging folder
(issue 35), forged staging units and the paths a command writes (issue 50)."""

import fnmatch
import importlib
import io
import json
import os
import re
import shutil
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from fuzzing import EXAMPLES, fuzz


# --- the command line's resume: Ctrl-C at a random unit, a tampered staging folder, a rerun


RESUME_ARGS = ["--n-fft", "64", "--k", "2", "--frame-segments", "2", "--memory", "16MiB", "--quiet",
               "--strategy", "numpy"]
#: what is done to OUT.partial/ between the interrupted run and the rerun
TAMPERS = ["delete", "truncate", "flip", "link_other", "link_copy", "link_zero", "dangling", "fifo", "folder",
           "plant", "done_garble", "done_junk", "done_swap", "done_cut", "done_delete", "done_fifo", "done_zero",
           "manifest_flip", "manifest_delete", "lock_link", "lock_fifo", "lock_folder", "temporary", "stage_link",
           "forge"]


def _track_cli(source, out):
    from typer.testing import CliRunner

    from welchpeaks.cli import app

    return CliRunner().invoke(app, ["track", str(source), "--out", str(out)] + RESUME_ARGS)


@pytest.fixture(scope="module")
def resume_recording(tmp_path_factory):
    """float32 [2, 1,600,000]: four units of at most 4 MiB of samples; and its output, uninterrupted."""
    d = tmp_path_factory.mktemp("resume")
    path = d / "x.npy"
    np.save(path, np.random.default_rng(35).standard_normal((2, 1_600_000)).astype(np.float32))
    res = _track_cli(path, d / "clean.csv")
    assert res.exit_code == 0, res.output
    return path, (d / "clean.csv").read_bytes()


def _tamper(stage, how, rng, outside):
    """Do ``how`` to the staging folder ``stage`` (``outside``: a folder beside it)."""
    units = sorted(stage.glob("unit-*.npz"))
    unit = units[int(rng.integers(len(units)))] if units else stage / "unit-0000000.npz"
    done, manifest, lock = stage / "done.jsonl", stage / "manifest.json", stage / "lock"

    def replace(path, make):
        if path.exists() or path.is_symlink():
            path.unlink() if not path.is_dir() or path.is_symlink() else shutil.rmtree(path)
        make(path)

    def flip(path):
        if path.is_file() and not path.is_symlink() and path.stat().st_size:
            data = bytearray(path.read_bytes())
            data[int(rng.integers(len(data)))] ^= 1 << int(rng.integers(8))
            path.write_bytes(bytes(data))

    if how == "delete":
        unit.unlink(missing_ok=True)
    elif how == "truncate" and unit.is_file():
        unit.write_bytes(unit.read_bytes()[:int(rng.integers(unit.stat().st_size + 1))])
    elif how == "flip":
        flip(unit)
    elif how in ("link_other", "link_copy") and unit.is_file():
        other = units[int(rng.integers(len(units)))]
        copy = outside / f"copy-{rng.integers(1 << 30)}.npz"
        copy.write_bytes((other if how == "link_other" else unit).read_bytes())  # valid bytes, not this unit's file
        replace(unit, lambda p: p.symlink_to(copy))
    elif how == "link_zero":
        replace(unit, lambda p: p.symlink_to("/dev/zero"))
    elif how == "dangling":
        replace(unit, lambda p: p.symlink_to(outside / "nothing.npz"))
    elif how == "fifo":
        replace(unit, os.mkfifo)
    elif how == "folder":
        replace(unit, os.mkdir)
    elif how == "plant":  # a unit nobody listed
        (stage / f"unit-{int(rng.integers(0, 6)):07d}.npz").write_bytes(rng.bytes(int(rng.integers(0, 300))))
    elif how.startswith("done_") and how not in ("done_fifo", "done_zero", "done_delete") and done.is_file():
        lines = done.read_bytes().split(b"\n")
        if how == "done_garble" and lines:
            i = int(rng.integers(len(lines)))
            line = bytearray(lines[i] or b"x")
            for _ in range(int(rng.integers(1, 4))):
                line[int(rng.integers(len(line)))] = int(rng.integers(256))
            lines[i] = bytes(line)
        elif how == "done_junk":
            digest = "".join(rng.choice(list("0123456789abcdef"), 64))
            lines[-1:] = [rng.choice([rng.bytes(40), b"[]", b"null", b'{"unit": -1, "sha256": "%s"}' % digest.encode(),
                                      b'{"unit": 1.0, "sha256": "%s"}' % digest.encode(),
                                      b'{"unit": %d, "sha256": "%s"}' % (rng.integers(0, 6), digest.encode()),
                                      b'{"unit": 999999999, "sha256": 7}', b"x" * 5000])
                          for _ in range(int(rng.integers(1, 4)))] + [b""]
        elif how == "done_swap" and len(lines) > 2:
            a, b = (json.loads(lines[i]) for i in (0, 1))
            lines[0], lines[1] = (json.dumps(dict(a, sha256=b["sha256"])).encode(),
                                  json.dumps(dict(b, sha256=a["sha256"])).encode())
        elif how == "done_cut":
            text = b"\n".join(lines)
            lines = [text[:int(rng.integers(len(text) + 1))]]
        done.write_bytes(b"\n".join(lines))
    elif how == "done_delete":
        done.unlink(missing_ok=True)
    elif how == "done_fifo":
        replace(done, os.mkfifo)
    elif how == "done_zero":
        replace(done, lambda p: p.symlink_to("/dev/zero"))
    elif how == "manifest_flip":
        flip(manifest)
    elif how == "manifest_delete":
        manifest.unlink(missing_ok=True)
    elif how == "lock_link":
        replace(lock, lambda p: p.symlink_to(outside / "elsewhere.lock"))
    elif how == "lock_fifo":
        replace(lock, os.mkfifo)
    elif how == "lock_folder":
        replace(lock, os.mkdir)
    elif how == "temporary":  # what a kill in the middle of a write leaves
        (stage / f".{unit.name}.x{rng.integers(1 << 20)}.tmp").write_bytes(rng.bytes(100))
    elif how == "forge" and unit.is_file() and not unit.is_symlink():  # a lie listed with the digest the job keys
        _forge(stage, unit, str(rng.choice(FORGES)), rng)
    elif how == "stage_link" and stage.is_dir() and not stage.is_symlink():
        moved = outside / f"moved-{rng.integers(1 << 30)}"
        stage.rename(moved)
        stage.symlink_to(moved)


def _one_line_error(res):
    """A refusal: exit code 2, and the last line of the output its one line, no traceback."""
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert res.exit_code == 2, (res.exit_code, res.output, res.exception)
    assert "Traceback" not in res.output and lines and lines[-1].startswith("error: "), res.output
    assert all(not line.startswith(" ") for line in lines), res.output


@pytest.mark.slow
@settings(fuzz, max_examples=max(EXAMPLES // 200, 3))
@given(stop=st.integers(0, 4), tampers=st.lists(st.tuples(st.sampled_from(TAMPERS), st.integers(0, 2 ** 32 - 1)),
                                                max_size=3))
def test_resume_after_ctrl_c_and_tampering(resume_recording, stop, tampers):
    """`welchpeaks track` stopped by Ctrl-C as unit ``stop`` starts, its staging folder then
    tampered with (units deleted, cut, flipped, replaced by links, pipes or folders, planted; the
    unit list garbled, cut, padded with junk or replaced; the manifest and the lock damaged; the
    folder itself a link): the rerun either writes the uninterrupted run's output byte for byte,
    or is refused in one line with exit code 2, and then doing what that line says (delete the
    folder) and running again gives the same output."""
    path, clean = resume_recording
    job = importlib.import_module("welchpeaks.cli.job")
    real, started = job.compute_unit, []

    def ctrl_c(spec, unit, data=None):
        if len(started) == stop:
            raise KeyboardInterrupt
        started.append(unit)
        return real(spec, unit, data)

    with tempfile.TemporaryDirectory() as tmp:
        out, outside = Path(tmp) / "o.csv", Path(tmp) / "outside"
        outside.mkdir()
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(job, "compute_unit", ctrl_c)
            first = _track_cli(path, out)
        stage = job.staging_dir(out)
        if first.exit_code == 0:  # stopped past the last unit: nothing to resume
            assert out.read_bytes() == clean and not stage.exists()
            return
        assert first.exit_code == 130 and not out.exists() and stage.is_dir(), first.output
        for how, seed in tampers:
            _tamper(stage, how, np.random.default_rng(seed), outside)
        event(f"tampered: {len(tampers)}")
        again = _track_cli(path, out)
        if again.exit_code != 0:
            event("rerun refused")
            _one_line_error(again)
            assert "delete that folder" in again.output or "partial" in again.output, again.output
            target = Path(os.path.realpath(stage)) if stage.is_symlink() else stage
            stage.unlink() if stage.is_symlink() else None
            shutil.rmtree(target, ignore_errors=True)
            again = _track_cli(path, out)
        assert again.exit_code == 0, (again.output, again.exception)
        assert out.read_bytes() == clean and not stage.exists()


# --- forged staging units (issue 50): lies listed with the digest the job keys


#: the lies :func:`_forge` tells in a saved unit, each one its checks see
FORGES = ["index", "not_finite", "negative_power", "time", "swap", "repeat", "dtype", "drop", "add", "short",
          "compress", "stated_length"]
#: each index column's range in a unit of ``resume_recording``'s job (frames: a lie below 0 or
#: past every frame of the recording)
FORGE_RANGES = {"signal": (0, 2), "rank": (0, 2), "bin": (0, 33), "file": (0, 1), "frame": (0, 10 ** 7)}
UNIT_MEMBERS = {"c_file", "c_signal", "c_time_samples", "c_rank", "c_bin", "c_freq", "c_power", "c_frame"}


def _unit_archive(cols, compress=False, stated=None):
    """The .npz bytes of ``cols`` as np.savez writes them (deflated with ``compress``);
    ``stated``: (member, length) whose .npy header states that length, not the one it holds."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED) as zf:
        for name, values in cols.items():
            member = io.BytesIO()
            if stated is not None and stated[0] == name:
                np.lib.format.write_array_header_1_0(member, {"descr": values.dtype.str, "fortran_order": False,
                                                              "shape": (stated[1],)})
                member.write(values.tobytes())
            else:
                np.save(member, values)
            zf.writestr(f"{name}.npy", member.getvalue())
    return buf.getvalue()


def _relist_unit(stage, unit, data):
    """Save ``data`` as ``unit`` and list it with its digest keyed as the job keys it."""
    job = importlib.import_module("welchpeaks.cli.job")
    key = json.loads((stage / "manifest.json").read_text())["job"]
    unit.unlink(missing_ok=True)
    unit.write_bytes(data)
    with open(stage / "done.jsonl", "a") as fh:
        fh.write(json.dumps({"unit": int(unit.stem.split("-")[1]), "sha256": job._digest(key, data)}) + "\n")


def _forge(stage, unit, how, rng):
    """Rewrite ``unit`` (a saved unit's file in ``stage``) telling the lie ``how`` and list it;
    False when there is nothing to forge (the unit or the manifest damaged already)."""
    try:
        with np.load(unit) as z:
            cols = {name: z[name].copy() for name in z.files}
        json.loads((stage / "manifest.json").read_text())["job"]
    except Exception:
        return False
    n = len(cols.get("c_power", ()))
    if n < 2 or set(cols) != UNIT_MEMBERS:
        return False
    row = int(rng.integers(n))
    other = (row + 1 + int(rng.integers(n - 1))) % n  # another row
    pick = lambda names: str(rng.choice(sorted(names)))  # noqa: E731
    compress, stated = False, None
    if how == "index":
        name = pick(FORGE_RANGES)
        lo, hi = FORGE_RANGES[name]
        info = np.iinfo(cols[f"c_{name}"].dtype)
        cols[f"c_{name}"][row] = rng.choice([hi + int(rng.integers(0, 1000)), lo - 1 - int(rng.integers(0, 1000)),
                                             info.min, info.max])
    elif how == "not_finite":
        cols[pick(["c_freq", "c_power"])][row] = rng.choice([np.nan, np.inf, -np.inf])
    elif how == "negative_power":
        cols["c_power"][row] = -float(rng.uniform(1e-30, 1e30))
    elif how == "time":
        cols["c_time_samples"][row] = np.nextafter(cols["c_time_samples"][row], rng.choice([np.inf, -np.inf]))
    elif how in ("swap", "repeat"):
        for v in cols.values():
            v[[row, other]] = v[[other, row]] if how == "swap" else v[[row, row]]
    elif how == "dtype":
        name = pick(cols)
        cols[name] = cols[name].astype(pick([d for d in ("<i2", "<i4", "<i8", "<f4", "<f8", ">i8", ">f8")
                                             if np.dtype(d) != cols[name].dtype]))
    elif how == "drop":
        cols.pop(pick(cols))
    elif how == "add":
        cols[pick(["c_extra", "c_track", "c_time", "x"])] = np.zeros(int(rng.integers(0, 4)))
    elif how == "short":
        name = pick(cols)
        cols[name] = cols[name][:int(rng.integers(0, n))]
    elif how == "compress":
        compress = True
    elif how == "stated_length":
        stated = (pick(cols), max(0, n + int(rng.choice([-1, 1])) * int(rng.integers(1, n + 1))))
    _relist_unit(stage, unit, _unit_archive(cols, compress, stated))
    return True


@pytest.fixture(scope="module")
def saved_stage(resume_recording, tmp_path_factory):
    """The staging folder of ``resume_recording``'s job stopped by Ctrl-C after two units."""
    from helpers import interrupted

    path, _ = resume_recording
    out = tmp_path_factory.mktemp("saved") / "o.csv"
    with pytest.MonkeyPatch.context() as mp:
        interrupted(mp, ["track", str(path), "--out", str(out)] + RESUME_ARGS)
    return importlib.import_module("welchpeaks.cli.job").staging_dir(out)


@pytest.mark.slow
@settings(fuzz, max_examples=max(EXAMPLES // 20, 10))
@given(forged=st.lists(st.tuples(st.integers(0, 1), st.sampled_from(FORGES + ["resave"]), st.integers(0, 2 ** 32 - 1)),
                       min_size=1, max_size=2, unique_by=lambda f: f[0]))
def test_forged_units_are_removed_and_computed_again(resume_recording, saved_stage, forged):
    """Saved units rewritten with a lie (an index outside the unit, a frequency or power not
    finite, a power negative, a time an ulp off its frame's, rows out of order or repeated, a
    column of another dtype, missing, extra or short, a member deflated, a header stating
    another length) and listed with the digest the job keys, as a forger who knows the scheme
    would: the rerun trusts none, says so in one line, and keeps a unit only saved again."""
    path, _ = resume_recording
    job = importlib.import_module("welchpeaks.cli.job")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "o.csv"
        stage = job.staging_dir(out)
        shutil.copytree(saved_stage, stage)
        lied = set()
        for i, how, seed in forged:
            unit = stage / f"unit-{i:07d}.npz"
            if how == "resave":
                with np.load(unit) as z:
                    _relist_unit(stage, unit, _unit_archive({name: z[name] for name in z.files}))
            else:
                assert _forge(stage, unit, how, np.random.default_rng(seed))
                lied.add(unit.name)
            event(how)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(job, "compute_unit", lambda *a: (_ for _ in ()).throw(KeyboardInterrupt))
            res = _track_cli(path, out)
        assert res.exit_code == 130 and "Traceback" not in res.output, res.output
        n = json.loads((stage / "manifest.json").read_text())["units"]
        kept = 2 - len(lied)
        assert (f"resuming: {kept} of {n} chunks" in res.output) if kept else "resuming" not in res.output, res.output
        assert (f"discarded {len(lied)} saved chunk(s)" in res.output) == bool(lied), res.output
        assert not any((stage / name).exists() for name in lied)


# --- the paths a command writes (issue 50): --out and --plot drawn against the inputs


#: the sources a drawn command reads, in a folder of their own (``path_inputs``)
PATH_SOURCES = ["sig.npy", "lnk.npy", "in.zarr", "rec", "rec/*.wav", "old.zarr/x.npy"]
#: --out and --plot drawn among the inputs, inside them, beside them and elsewhere
OUT_PATHS = ["o.csv", "o.jsonl", "o.zarr", "sub/o.csv", "rec/o.csv", "in.zarr/o.csv", "sig.npy", "lnk.npy", "in.zarr",
             "old.zarr", "o.txt", "missing/o.csv"]
PLOT_PATHS = ["p.png", "sub/p.png", "sig.npy", "lnk.npy", "in.zarr/zarr.json", "in.zarr/p.png", "rec/p.png",
              "rec/a.wav", "rec/new.wav", "rec/new.flac", "rec/.new.wav", "o.csv", "o.zarr", "o.zarr/p.png",
              "old.zarr/p.png", "old.zarr/x.npy", "o.csv.partial", "o.csv.partial/p.png", ".o.csv.abcdefgh.tmp",
              ".o.zarr.abcdefgh", ".o.csv.partial.done.7", ".o.csv.old", "sub", "missing/p.png", "LONG", "LONGER"]
PATH_TRACK = ["--n-fft", "64", "--k", "2", "--frame-segments", "2", "--strategy", "numpy", "--quiet"]
#: existing folders of ``path_inputs``, and what a job's sweep removes beside OUT
PATH_FOLDERS = ("", "sub", "rec", "in.zarr", "old.zarr")
SWEPT = r"\.{name}\.(?:[a-z0-9_]{{8}}\.tmp|[a-z0-9_]{{8}}|old\.[a-z0-9_]{{8}}|partial\.done\.\d+)"


@pytest.fixture(scope="module")
def path_inputs(tmp_path_factory):
    """A folder of inputs: a .npy and a link to it, a Zarr store, a folder of one sound file,
    an old Zarr output holding a .npy, an empty folder."""
    zarr = pytest.importorskip("zarr")
    pytest.importorskip("matplotlib")
    from scipy.io import wavfile

    d = tmp_path_factory.mktemp("paths")
    x = np.random.default_rng(50).standard_normal((2, 6000)).astype(np.float32)
    np.save(d / "sig.npy", x)
    os.symlink("sig.npy", d / "lnk.npy")
    for store in ("in.zarr", "old.zarr"):
        zarr.create_array(str(d / store), shape=x.shape, dtype="float32", chunks=(2, 3000))[:] = x
    np.save(d / "old.zarr" / "x.npy", x)
    (d / "rec").mkdir()
    wavfile.write(d / "rec" / "a.wav", 8000, x[0])
    (d / "sub").mkdir()
    return d, {}


def _tree(root):
    """Every entry under ``root``: a file's bytes, a link's target, or None for a folder."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(dirpath, name)
            out[os.path.relpath(p, root)] = (os.readlink(p) if os.path.islink(p) else None if os.path.isdir(p)
                                             else open(p, "rb").read())
    return out


def _refusal(source, out, plot, name_max):
    """Why ``track SOURCE --out OUT [--plot PLOT]`` must be refused, or None, from the names
    alone: a written path (OUT, its staging folder OUT.partial, PLOT) is, lies inside or holds
    what SOURCE reads (a link is its target), a sound file its glob would read, or another
    written path; PLOT has a name the job's sweep removes beside OUT; or a path that cannot be
    written (no folder, a folder, a name too long, not an output format)."""
    canon = {"lnk.npy": "sig.npy"}.get
    reads = {"rec/*.wav": "rec/a.wav"}.get(source, canon(source, source))
    folder = source if source in ("in.zarr", "rec") else None
    made = {out + ".partial"} | ({out} if out.endswith(".zarr") else set())  # folders written
    inside = lambda a, b: a.startswith(b + "/")  # noqa: E731
    for w in [out, out + ".partial"] + ([plot] if plot else []):
        if canon(w, w) == reads or folder and (w == folder or inside(w, folder)) or w in made and inside(reads, w):
            return "an input"
        if source == "rec/*.wav" and fnmatch.fnmatchcase(w, "rec/*.wav") and not w.startswith("rec/."):
            return "a sound file the glob reads on a rerun"
    if plot and (canon(plot, plot) == canon(out, out) or any(plot == m or inside(plot, m) for m in made)):
        return "another output"
    if plot and os.path.dirname(plot) == os.path.dirname(out) and re.fullmatch(
            SWEPT.format(name=re.escape(os.path.basename(out))), os.path.basename(plot)):
        return "a name the sweep beside --out removes"
    if not out.endswith((".csv", ".jsonl", ".zarr")) or out.startswith("missing/"):
        return "an --out that cannot be written"
    if plot and (os.path.dirname(plot) not in PATH_FOLDERS or plot in PATH_FOLDERS or len(plot) + 14 > name_max):
        return "a --plot that cannot be written"
    return None


def _zarr_columns(path):
    zarr = importlib.import_module("zarr")
    group = zarr.open_group(str(path), mode="r")
    return dict(group.attrs), {name: group[name][:] for name in sorted(group.array_keys())}


@st.composite
def written_paths(draw):
    """A source, and an --out and a --plot drawn from every candidate or from those near it."""
    source = draw(st.sampled_from(PATH_SOURCES))
    near = st.sampled_from(NEAR_PATHS[source])
    out = draw(st.one_of(st.sampled_from(OUT_PATHS), near))
    plot = draw(st.one_of(st.none(), st.sampled_from(PLOT_PATHS), near))
    return source, out, plot


#: the paths at, inside and beside what each source reads
NEAR_PATHS = {"sig.npy": ["sig.npy", "lnk.npy"], "lnk.npy": ["sig.npy", "lnk.npy"],
              "in.zarr": ["in.zarr", "in.zarr/zarr.json", "in.zarr/p.png", "in.zarr/o.csv"],
              "rec": ["rec", "rec/a.wav", "rec/p.png", "rec/o.csv", "rec/new.flac"],
              "rec/*.wav": ["rec/a.wav", "rec/new.wav", "rec/p.png", "rec/o.csv", "rec/.new.wav"],
              "old.zarr/x.npy": ["old.zarr", "old.zarr/x.npy", "old.zarr/p.png"]}


@pytest.mark.slow
@settings(fuzz, max_examples=max(EXAMPLES // 20, 10))
@given(written_paths())
def test_written_paths_never_harm_an_input(path_inputs, drawn):
    """`welchpeaks track SOURCE --out OUT --plot PLOT` with OUT and PLOT drawn among, inside,
    beside and apart from the inputs (a .npy and a link to it, a Zarr store, a folder and a glob
    of sound files, a .npy inside an old Zarr output): refused, in one line and before any
    unit, exactly when the names say it must be (:func:`_refusal`), and then nothing at all is
    written; else OUT holds what the same command writes apart from the inputs and PLOT is a
    PNG. Either way, what SOURCE reads is left as it was."""
    source, out, plot = drawn
    template, reference = path_inputs
    job = importlib.import_module("welchpeaks.cli.job")
    name_max = os.pathconf(template, "PC_NAME_MAX")
    plot = {"LONG": "l" * (name_max - 14 - 4) + ".png", "LONGER": "l" * (name_max - 14 - 3) + ".png"}.get(plot, plot)
    want = _refusal(source, out, plot, name_max)
    event(f"refused: {want}" if want else "written")
    from typer.testing import CliRunner

    from welchpeaks.cli import app

    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp:
        work = Path(tmp) / "w"
        shutil.copytree(template, work, symlinks=True)
        mp.chdir(work)
        before, calls, real = _tree(work), [], job.compute_unit
        mp.setattr(job, "compute_unit", lambda *a: calls.append(1) or real(*a))
        res = CliRunner().invoke(app, ["track", source, "--out", out] + (["--plot", plot] if plot else []) + PATH_TRACK)
        if want is not None:
            _one_line_error(res)
            assert calls == [] and _tree(work) == before, (want, res.output)
            return
        assert res.exit_code == 0, (source, out, plot, res.output, res.exception)
        after = _tree(work)
        reads = {k: v for k, v in before.items() if k == {"lnk.npy": "sig.npy", "rec/*.wav": "rec/a.wav"}.get(
            source, source) or k.startswith(source + "/")}
        assert all(after.get(k) == v for k, v in reads.items()), (source, out, plot)
        suffix = Path(out).suffix
        if (source, suffix) not in reference:
            ref = Path(tmp) / "ref"
            shutil.copytree(template, ref, symlinks=True)
            mp.chdir(ref)
            assert CliRunner().invoke(app, ["track", source, "--out", "ref" + suffix] + PATH_TRACK).exit_code == 0
            reference[source, suffix] = _zarr_columns(ref / "ref.zarr") if suffix == ".zarr" else \
                (ref / ("ref" + suffix)).read_bytes()
            mp.chdir(work)
        got = _zarr_columns(work / out) if suffix == ".zarr" else (work / out).read_bytes()
        if suffix == ".zarr":
            assert got[0] == reference[source, suffix][0]
            assert all(np.array_equal(a, b, equal_nan=True) for a, b in zip(got[1].values(),
                                                                            reference[source, suffix][1].values()))
        else:
            assert got == reference[source, suffix]
        if plot:
            assert (work / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
