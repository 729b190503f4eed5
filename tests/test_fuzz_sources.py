"""Fuzzing sources whose metadata lies (.npy, HDF5, Zarr), and what the fuzz found there,
one test each (issue 35)."""

import json
import os
import subprocess
import sys
import tempfile
import tracemalloc
import warnings

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

import welchpeaks
from fuzzing import EXAMPLES, _quiet, fuzz


# --- sources whose metadata lies: only ValueError or TypeError, no hang, no large allocation


#: what one call on a tiny store may allocate (numpy's buffers are traced too)
SOURCE_MEMORY = 64 << 20
#: a store that opens must declare no more than this (the stores here hold kilobytes)
SOURCE_DECLARED = 256 << 20
SOURCE_KW = dict(n_fft=8, k=2, strategy="numpy")


def _bounded(fn):
    """_quiet(fn), asserting it allocated under SOURCE_MEMORY at its peak."""
    tracemalloc.start()
    try:
        out = _quiet(fn)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < SOURCE_MEMORY, f"{peak / 2**20:.0f} MiB allocated on a tiny store"
    return out


def _same_or_both_refused(a, b):
    (ra, ea), (rb, eb) = a, b
    assert (ra is None) == (rb is None), (ea, eb)
    if ra is not None:
        for field in ("bins", "power", "freqs"):
            np.testing.assert_array_equal(getattr(ra, field), getattr(rb, field), err_msg=field)


def _use_source(name, data=None, must_open=False):
    """Open ``name`` and run welch_peaks and track on it, each under the memory bound. ``data``
    (the store's own library's read of a store that must open): the results equal the same
    calls on it in memory."""
    src, err = _bounded(lambda: welchpeaks.open_signals(name))
    assert not (must_open and src is None), f"refused a well-formed store: {err!r}"
    if src is None:
        event("source refused")
        return
    assert src.dtype in (np.float32, np.float64) and src.rows >= 1
    assert src.nbytes <= SOURCE_DECLARED, f"opened {src!r}, which declares far more than it stores"
    event("source opened")
    res = _bounded(lambda: welchpeaks.welch_peaks(src, **SOURCE_KW))
    trk = _bounded(lambda: welchpeaks.track(src, frame_segments=2, **SOURCE_KW))
    if data is not None:
        mem = np.asarray(data).reshape(src.rows, -1).astype(src.dtype)
        _same_or_both_refused(res, _quiet(lambda: welchpeaks.welch_peaks(mem, fs=src.fs, **SOURCE_KW)))
        _same_or_both_refused(trk, _quiet(lambda: welchpeaks.track(mem, fs=src.fs, frame_segments=2, **SOURCE_KW)))


#: .npy header fields that lie: dtypes numpy cannot read or welchpeaks does not take, shapes that
#: are huge, negative, empty or not tuples of integers, fortran_order that is not a bool
NPY_BAD_DESCRS = ["'|b1'", "'<c8'", "'|O'", "'<f16'", "'<M8[s]'", "'|S4'", "'<U2'", "[('a', '<f4'), ('b', '<i2')]",
                  "('<f4', (3,))", "'|V8'", "'<f3'", "'x'", "3", "None", "{'a': 1}"]
NPY_BAD_SHAPES = ["(10**12,)", "(1, 10**12)", "(2**62, 2**62)", "(2**64,)", "(-1,)", "(-2**63, 2)", "()", "(0,)",
                  "(3, 0)", "(1.5,)", "('3',)", "[4]", "4", "((2,), 3)", "(" + "1, " * 40 + ")"]
NPY_LIES = ["descr", "shape", "fortran", "key", "version", "length", "data", "damage"]


@st.composite
def npy_files(draw):
    """(bytes of a .npy file, its array if it is well-formed): a small array of a real dtype
    written as numpy writes it, then up to two lies: in the header's dtype, shape,
    fortran_order or keys, its version, its stated length, the data's size (short, long,
    empty) or a flipped bit anywhere."""
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    dtype = np.dtype(draw(st.sampled_from(["<f4", "<f8", ">f8", "<f2", "|i1", "<i2", ">u8", "<i8"])))
    shape = tuple(draw(st.lists(st.integers(1, 40), min_size=1, max_size=3)))
    fortran = draw(st.booleans())
    with np.errstate(over="ignore", invalid="ignore"):
        arr = (rng.standard_normal(shape) * 100).astype(dtype)
    data = arr.tobytes(order="F" if fortran else "C")
    fields = {"descr": repr(dtype.str), "fortran_order": str(fortran), "shape": repr(shape)}
    version, extra = (1, 0), 0
    lies = draw(st.lists(st.sampled_from(NPY_LIES), max_size=2, unique=True))
    for lie in lies:
        if lie == "descr":
            fields["descr"] = draw(st.sampled_from(NPY_BAD_DESCRS))
        elif lie == "shape":
            fields["shape"] = draw(st.sampled_from(NPY_BAD_SHAPES))
        elif lie == "fortran":
            fields["fortran_order"] = draw(st.sampled_from(["1", "'x'", "None"]))
        elif lie == "key":
            fields[draw(st.sampled_from(["other", "descr "]))] = fields.pop(draw(st.sampled_from(sorted(fields))))
        elif lie == "version":
            version = draw(st.sampled_from([(2, 0), (3, 0), (0, 0), (9, 9), (1, 1)]))
        elif lie == "length":
            extra = draw(st.sampled_from([1, -1, -20, 1000, 60000, 2 ** 31, 2 ** 32 - 1000]))
        elif lie == "data":
            data = draw(st.sampled_from([data[:-1], data + b"\0" * 8, b"", data * 2]))
    text = "{" + ", ".join(f"{k!r}: {v}" for k, v in fields.items()) + ", }"
    header = text.encode("latin1")
    width = 2 if version in ((1, 0), (0, 0), (1, 1)) else 4
    pad = -(10 + width - 2 + len(header) + 1) % 64
    header += b" " * pad + b"\n"
    size = max(0, len(header) + extra) % (1 << (8 * width))
    blob = bytearray(b"\x93NUMPY" + bytes(version) + size.to_bytes(width, "little") + header + data)
    if "damage" in lies:
        blob[draw(st.integers(0, len(blob) - 1))] ^= 1 << draw(st.integers(0, 7))
    well = not lies or lies == ["version"] and version in ((2, 0), (3, 0))
    return bytes(blob), arr if well else None


@pytest.mark.slow
@settings(fuzz, max_examples=max(EXAMPLES // 2, 20))
@given(npy_files())
def test_forged_npy_headers_are_refused_or_read_right(npy):
    """A .npy whose header lies (shape, dtype, fortran_order, its length, the version) or whose
    data is not the declared size is a ValueError; nothing is allocated for a declared size the
    file does not hold. A well-formed file of real numbers opens, and welch_peaks and track on
    it equal the same calls on np.load's array."""
    blob, arr = npy
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "x.npy")
        with open(path, "wb") as fh:
            fh.write(blob)
        usable = arr is not None and arr.size > 0 and arr.ndim >= 1
        if usable:
            np.testing.assert_array_equal(np.load(path, allow_pickle=False), arr)  # numpy agrees it is well-formed
        _use_source(path, np.ascontiguousarray(arr) if usable else None, must_open=usable)


@st.composite
def hdf5_files(draw):
    """The recipe of a tiny HDF5 file: a wholly written dataset "/x" of real numbers (any
    layout: contiguous, chunked, compressed, compact), then up to three lies: an odd dtype, an
    empty or scalar shape, a huge declared shape (never stored), written in part or not at all,
    resized past what was written, an odd sample-rate attribute, named through links (soft,
    looping, external to nothing) or not at all, the file cut short."""
    r = dict(dtype=draw(st.sampled_from(["<f4", "<f8", ">f8", "<f2", "|i1", "<u8", "<i8"])),
             shape=draw(st.sampled_from([(40,), (3, 64), (2, 2, 50), (1, 1)])), huge=None,
             layout=draw(st.sampled_from(["contiguous", "chunked", "gzip", "compact"])), write="all", resize=False,
             fs=draw(st.sampled_from([None, 1000.0, 8000])), name=draw(st.sampled_from(["/x", "/soft"])), cut=None,
             seed=draw(st.integers(0, 2 ** 32 - 1)))
    for lie in draw(st.lists(st.sampled_from(["dtype", "shape", "huge", "write", "resize", "fs", "name", "cut"]),
                             max_size=3, unique=True)):
        r[lie] = draw({
            "dtype": st.sampled_from(["bool", "<c8", "S4", "str", "compound", "enum", "array", "opaque"]),
            "shape": st.sampled_from([(), (0,), (3, 0)]),
            "huge": st.sampled_from([(10 ** 12,), (1, 10 ** 12), (10 ** 6, 10 ** 6), (2 ** 40, 8)]),
            "write": st.sampled_from(["part", "none"]), "resize": st.just(True),
            "fs": st.sampled_from(["abc", -1.0, 0.0, np.nan, np.inf, "empty"]),
            "name": st.sampled_from(["/g", "/missing", "", "/loop", "/external"]), "cut": st.floats(0, 1)}[lie])
    return r


def _h5_dtype(h5py, name):
    special = {"str": h5py.string_dtype(), "compound": np.dtype([("a", "<f4"), ("b", "<i2")]),
               "enum": h5py.enum_dtype({"lo": 0, "hi": 1}, basetype="i1"), "array": np.dtype(("<f4", (3,))),
               "opaque": np.dtype("V8")}
    return special[name] if name in special else np.dtype(name)


def _h5_values(rng, shape, dtype):
    if dtype.kind in "iuf" and not dtype.shape:
        with np.errstate(over="ignore", invalid="ignore"):
            return (rng.standard_normal(shape) * 50).astype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind == "O":
        return np.full(shape, "ab", object)
    return np.zeros(shape, dtype)


def _h5_dataset(h5py, fh, r, shape, dtype):
    """The recipe's dataset "/x" (a compact one through the low-level API)."""
    if r["layout"] == "compact":
        plist = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        plist.set_layout(h5py.h5d.COMPACT)
        space = h5py.h5s.create_simple(shape) if shape else h5py.h5s.create(h5py.h5s.SCALAR)
        tid = h5py.h5t.py_create(dtype, logical=True)
        return h5py.Dataset(h5py.h5d.create(fh.id, b"x", tid, space, dcpl=plist))
    opts = {}
    if r["layout"] != "contiguous" and shape and all(shape):
        opts["chunks"] = tuple(max(1, min(d, 16)) for d in shape)
        opts["maxshape"] = (None,) * len(shape) if r["resize"] else None
        opts["compression"] = "gzip" if r["layout"] == "gzip" else None
    return fh.create_dataset("x", shape=shape, dtype=dtype, **opts)


@pytest.mark.slow
@settings(fuzz, max_examples=max(EXAMPLES // 4, 20))
@given(hdf5_files())
def test_hostile_hdf5_datasets_are_refused_or_read_right(recipe):
    """A tiny HDF5 dataset declaring a huge shape (never stored), holding odd dtypes, never or
    partly written, resized past what was written, behind looping or dangling links, with a bad
    sample rate, or in a file cut short: a ValueError or a TypeError, no large allocation,
    nothing opened that declares more than it could hold; a wholly written dataset of real
    numbers opens and gives what welch_peaks and track give on h5py's own read of it."""
    h5py = pytest.importorskip("h5py")
    r = recipe
    dtype = _h5_dtype(h5py, r["dtype"])
    shape = r["huge"] or r["shape"]
    rng = np.random.default_rng(r["seed"])
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "s.h5")
        try:
            with h5py.File(path, "w") as fh:
                ds = _h5_dataset(h5py, fh, r, shape, dtype)
                small = 0 < ds.size <= 1 << 16
                first = (0,) * (ds.ndim - 1) + (slice(0, 4),)
                if small and r["write"] != "none":
                    values = _h5_values(rng, ds.shape, dtype)
                    if r["write"] == "all" or ds.ndim == 0:
                        ds[...] = values
                    else:
                        ds[first] = values[first]
                elif ds.size and r["write"] != "none" and ds.chunks:  # a huge one: its first chunk only
                    ds[first] = _h5_values(rng, ds[first].shape, dtype)
                resized = bool(r["resize"] and ds.maxshape and None in ds.maxshape)
                if resized:
                    ds.resize(tuple(d * 1000 for d in ds.shape))
                if r["fs"] is not None:
                    ds.attrs["fs"] = np.array([]) if isinstance(r["fs"], str) and r["fs"] == "empty" else r["fs"]
                fh.create_group("g")
                fh["soft"] = h5py.SoftLink("/x")
                fh["loop"] = h5py.SoftLink("/loop")
                fh["external"] = h5py.ExternalLink("nowhere.h5", "/x")
                whole = ds[...] if 0 < ds.size <= 1 << 16 else None
        except (ValueError, TypeError, OSError, RuntimeError, KeyError):
            event("recipe refused by h5py")
            return
        if r["cut"] is not None:
            with open(path, "r+b") as fh:
                fh.truncate(int(os.path.getsize(path) * r["cut"]))
        real = dtype.kind in "iuf" and dtype.itemsize <= 8 and r["dtype"] != "enum"
        fs_ok = r["fs"] is None or (not isinstance(r["fs"], str) and r["fs"] in (1000.0, 8000))
        must = (r["write"] == "all" and whole is not None and real and fs_ok and r["name"] in ("/x", "/soft")
                and r["cut"] is None and not resized and len(shape) >= 1)
        _use_source(f"{path}:{r['name']}", whole if must else None, must_open=must)


@st.composite
def zarr_stores(draw):
    """The recipe of a tiny Zarr array (format 2 or 3, sharded or not) of real numbers, wholly
    written, then up to three lies: an odd dtype, an empty or huge declared shape, written in
    part or not at all, an odd sample rate, its metadata edited (a huge or negative shape, odd
    chunk shapes, unknown dtypes and codecs, fill values, keys gone, JSON 20,000 deep or not
    JSON), a chunk file replaced by garbage, cut short or emptied, a stray file added, a named
    pipe as a chunk or as the metadata."""
    r = dict(fmt=draw(st.sampled_from([2, 3])), shards=draw(st.booleans()),
             dtype=draw(st.sampled_from(["float32", "float64", "float16", "int8", "uint64"])),
             shape=draw(st.sampled_from([(40,), (3, 64), (2, 2, 50), (1, 1)])), huge=None, write="all",
             fs=draw(st.sampled_from([None, 1000.0, 8000, [44100.0, 1.0]])), edit=None, chunk=None,
             value=None, chunk_value=None, seed=draw(st.integers(0, 2 ** 32 - 1)))
    for lie in draw(st.lists(st.sampled_from(["dtype", "shape", "huge", "write", "fs", "edit", "chunk"]), max_size=3,
                             unique=True)):
        r[lie] = draw({
            "dtype": st.sampled_from(["bool", "complex64", "datetime64[s]", "S4"]),
            "shape": st.sampled_from([(0,), (3, 0)]),
            "huge": st.sampled_from([(10 ** 13,), (1, 10 ** 12), (2 ** 40, 8)]),
            "write": st.sampled_from(["part", "none"]), "fs": st.sampled_from(["abc", -1.0, 0.0, "nan"]),
            "edit": st.sampled_from(["shape", "chunks", "dtype", "fill", "drop", "codec", "format", "deep", "garbage"]),
            "chunk": st.sampled_from(["garbage", "cut", "empty", "stray", "pipe", "metadata pipe"])}[lie])
    r["value"] = draw(st.sampled_from([[10 ** 13], [1, 10 ** 12], [2 ** 63], [0], [-1], [], [3.5], "x", [1] * 40,
                                       [10 ** 12, 10 ** 12], "float128", "<f16", "|O", "foo", "<c8", "|b1", None]))
    r["chunk_value"] = draw(st.sampled_from([[0], [-1], [], [3.5], "x", [1] * 40, [1], [7, 3], [2 ** 63], [10 ** 13],
                                             [1, 10 ** 12], [10 ** 12, 10 ** 12], [2 ** 26]]))
    return r


def _zarr_edit(store, r, rng):
    """Tell the recipe's lie about the array in ``store``."""
    meta = os.path.join(store, "zarr.json" if r["fmt"] == 3 else ".zarray")
    doc = json.loads(open(meta).read())
    edit, value = r["edit"], r["value"]
    if edit == "shape":
        doc["shape"] = value
    elif edit == "chunks":
        if r["fmt"] == 3:
            doc["chunk_grid"]["configuration"]["chunk_shape"] = r["chunk_value"]
        else:
            doc["chunks"] = r["chunk_value"]
    elif edit == "dtype":
        doc["data_type" if r["fmt"] == 3 else "dtype"] = value
    elif edit == "fill":
        doc["fill_value"] = value if not isinstance(value, list) else "NaN"
    elif edit == "drop":
        doc.pop(sorted(doc)[int(rng.integers(len(doc)))])
    elif edit == "codec":
        if r["fmt"] == 3:
            doc["codecs"] = [{"name": "no-such-codec"}] if value is None else [{"name": "bytes"}]
        else:
            doc["compressor"] = {"id": "no-such-codec"} if value is None else None
    elif edit == "format":
        doc["zarr_format"] = value if not isinstance(value, list) else 4
    text = json.dumps(doc)
    if edit == "deep":
        text = "[" * 20000 + "]" * 20000
    elif edit == "garbage":
        text = rng.bytes(int(rng.integers(0, 200))).decode("latin1")
    with open(meta, "w", encoding="latin1") as fh:
        fh.write(text)


@pytest.mark.slow
@settings(fuzz, max_examples=max(EXAMPLES // 4, 20))
@given(zarr_stores())
def test_hostile_zarr_arrays_are_refused_or_read_right(recipe):
    """A tiny Zarr array declaring a huge shape, of odd dtypes, whose metadata or chunks were
    tampered with: a ValueError or a TypeError, no large allocation, nothing opened that
    declares more than it could hold; an untouched array of real numbers opens and gives what
    welch_peaks and track give on zarr's own read of it (unwritten chunks read as the fill
    value, as zarr reads them)."""
    zarr = pytest.importorskip("zarr")
    r = recipe
    rng = np.random.default_rng(r["seed"])
    shape = r["huge"] or r["shape"]
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "a.zarr")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                chunks = tuple(max(1, min(d, 16)) for d in shape)
                shards = tuple(2 * c for c in chunks) if r["shards"] and r["fmt"] == 3 and all(shape) else None
                arr = zarr.create_array(store, shape=shape, chunks=chunks, shards=shards, dtype=r["dtype"],
                                        zarr_format=r["fmt"])
                dtype = np.dtype(arr.dtype)
                small = 0 < arr.size <= 1 << 16
                first = (0,) * (arr.ndim - 1) + (slice(0, 4),)
                if arr.size and r["write"] != "none":
                    target = Ellipsis if small and r["write"] == "all" else first
                    part = np.zeros(arr.shape if small else (1,) * (arr.ndim - 1) + (4,), dtype)[target]
                    if dtype.kind in "iuf":
                        with np.errstate(over="ignore", invalid="ignore"):
                            part = (rng.standard_normal(part.shape) * 50 + 1).astype(dtype)
                    arr[target] = part
                if r["fs"] is not None:
                    arr.attrs["fs"] = r["fs"]
                whole = arr[...] if small else None
        except (ValueError, TypeError, NotImplementedError, KeyError):
            event("recipe refused by zarr")
            return
        if r["edit"] is not None:
            _zarr_edit(store, r, rng)
        chunk_files = sorted(os.path.join(d, f) for d, _, files in os.walk(store) for f in files
                             if f not in ("zarr.json", ".zarray", ".zattrs", ".zgroup"))
        pipes = []
        if r["chunk"] == "stray":
            with open(os.path.join(store, "junk"), "wb") as fh:
                fh.write(rng.bytes(64))
        elif r["chunk"] in ("pipe", "metadata pipe"):  # a named pipe nobody writes: waiting on it is a hang
            meta = os.path.join(store, "zarr.json" if r["fmt"] == 3 else ".zarray")
            pipes = [meta if r["chunk"] == "metadata pipe" or not chunk_files else
                     chunk_files[int(rng.integers(len(chunk_files)))]]
            os.unlink(pipes[0])
            os.mkfifo(pipes[0])
        elif r["chunk"] is not None and chunk_files:
            victim = chunk_files[int(rng.integers(len(chunk_files)))]
            data = open(victim, "rb").read()
            data = {"garbage": rng.bytes(len(data)), "cut": data[:len(data) // 2], "empty": b""}[r["chunk"]]
            with open(victim, "wb") as fh:
                fh.write(data)
        real = dtype.kind in "iuf" and dtype.itemsize <= 8
        fs_ok = r["fs"] is None or r["fs"] in (1000.0, 8000, [44100.0, 1.0])
        must = (r["edit"] is None and r["chunk"] in (None, "stray") and whole is not None and real and fs_ok)
        if pipes:
            waited, _ = _waits_on_pipes(pipes, lambda: _use_source(store))
            assert not waited, f"waited on the pipe {pipes[0]}"
        else:
            _use_source(store, whole if must else None, must_open=must)


# --- what the fuzz found, one test each (all fixed)


#: watches named pipes that nobody writes: one thread per pipe opens its writing end, which
#: blocks until a reader holds the pipe or waits in open() for a writer (fifo(7)), so each open
#: that returns is a reader caught, by the kernel's rendezvous rather than by timing. Closing
#: that end then ends the reader's wait (end of file), so the watched call always finishes. A
#: process of its own: a reader may wait holding the interpreter's lock (h5py does).
PIPE_WATCHER = """
import os, sys, threading
def watch(pipe):
    while True:
        fd = os.open(pipe, os.O_WRONLY)  # returns only once a reader has the pipe
        print("waited", flush=True)
        os.close(fd)
threads = [threading.Thread(target=watch, args=(p,), daemon=True) for p in sys.argv[1:]]
for t in threads:
    t.start()
threading.Event().wait()
"""


def _waits_on_pipes(pipes, fn):
    """(whether fn() waited on one of the named pipes ``pipes``, what it returned or raised)."""
    watcher = subprocess.Popen([sys.executable, "-c", PIPE_WATCHER] + [str(p) for p in pipes],
                               stdout=subprocess.PIPE, text=True)
    try:
        out = _quiet(fn)
    finally:
        watcher.kill()
    return "waited" in watcher.communicate()[0], out


@pytest.mark.parametrize("where", ["zarr.json", "chunk", "hdf5 external link"])
def test_a_pipe_inside_a_store_is_refused_not_waited_on(tmp_path, where):
    """A pipe as a Zarr store's metadata or a chunk, or behind an HDF5 external link: refused,
    never opened to wait on (the open, or the first read, used to wait forever)."""
    zarr, h5py = pytest.importorskip("zarr"), pytest.importorskip("h5py")
    if where == "hdf5 external link":
        pipe = tmp_path / "target.h5"
        with h5py.File(tmp_path / "s.h5", "w") as fh:
            fh["x"] = h5py.ExternalLink(pipe.name, "/x")
        name = f"{tmp_path / 's.h5'}:/x"
    else:
        arr = zarr.create_array(str(tmp_path / "a.zarr"), shape=(2, 100), chunks=(1, 50), dtype="float32")
        arr[:] = 1.0
        pipe = tmp_path / "a.zarr" / "zarr.json" if where == "zarr.json" else tmp_path / "a.zarr" / "c" / "0" / "0"
        pipe.unlink()
        name = str(tmp_path / "a.zarr")
    os.mkfifo(pipe)
    waited, (res, err) = _waits_on_pipes([str(pipe)], lambda: welchpeaks.welch_peaks(
        welchpeaks.open_signals(name), **SOURCE_KW))
    assert not waited and err is not None


def test_a_npy_header_length_is_checked_before_it_is_read(tmp_path):
    """A 100-byte .npy stating a header of 2**31 bytes is refused without allocating them (NumPy
    reads as many bytes as stated before checking; 2 GiB were allocated)."""
    path = tmp_path / "x.npy"
    header = b"{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }\n"
    path.write_bytes(b"\x93NUMPY\x02\x00" + (2 ** 31).to_bytes(4, "little") + header + bytes(16))
    src, err = _bounded(lambda: welchpeaks.open_signals(path))
    assert src is None and err is not None


def test_a_column_major_npy_keeps_the_order_of_its_signals(tmp_path):
    """Signals of a column-major .npy of three dimensions are numbered as np.load's array numbers
    them (they came in column-major order of the leading axes: peaks under another's index)."""
    x = np.random.default_rng(3).standard_normal((2, 3, 64))
    x[0, 1] += 5 * np.sin(2 * np.pi * 0.25 * np.arange(64))
    np.save(tmp_path / "f.npy", np.asfortranarray(x))
    got = welchpeaks.welch_peaks(welchpeaks.open_signals(tmp_path / "f.npy"), **SOURCE_KW)
    np.testing.assert_array_equal(got.bins, welchpeaks.welch_peaks(x.reshape(6, 64), **SOURCE_KW).bins)


def test_a_zarr_chunk_as_large_as_a_huge_array_is_refused_at_open(tmp_path):
    """Metadata edited so that one stored chunk covers 10**13 samples: refused at open (it
    opened, 232 bytes declaring 36 TiB, and reads failed only after allocating their block)."""
    zarr = pytest.importorskip("zarr")
    store = tmp_path / "a.zarr"
    zarr.create_array(str(store), shape=(10 ** 13,), chunks=(16,), dtype="float32", zarr_format=2)[:4] = 1.0
    doc = json.loads((store / ".zarray").read_text())
    (store / ".zarray").write_text(json.dumps(dict(doc, chunks=[10 ** 13])))
    with pytest.raises(ValueError, match="declares"):
        welchpeaks.open_signals(store)
