"""Regression tests for the defects found by fuzzing (issue 13 and after): weights files. Each names the
case it keeps from coming back."""

import json
import os
import struct

import numpy as np
import pytest

import welchpeaks


torch = pytest.importorskip("torch")
from welchpeaks.learned import ButterflyFFT, load, save  # noqa: E402
from welchpeaks.learned.weights import WeightsError, _digest  # noqa: E402


def _forge(path, out, meta_edit=None, table_edit=None, tensor_edit=None):
    """Rewrite a weights file with edited metadata / tensor table / tensor bytes and a digest
    recomputed as a forger would."""
    blob = path.read_bytes()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + n])
    data = bytearray(blob[8 + n :])
    meta = header.pop("__metadata__")
    doc = json.loads(meta["welchpeaks"])
    if meta_edit:
        doc = meta_edit(doc)
    if table_edit:
        table_edit(header)
    if tensor_edit:
        tensor_edit(header, data)
    meta_json = json.dumps(doc)
    header["__metadata__"] = {"welchpeaks": meta_json, "sha256": _digest(dict(header), meta_json, bytes(data))}
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    out.write_bytes(struct.pack("<Q", len(head)) + head + bytes(data))
    return out


@pytest.fixture
def weights(tmp_path):
    return save(ButterflyFFT(16), tmp_path / "w.safetensors")


@pytest.mark.parametrize("edit, match", [
    (lambda d: {**d, "valid_bins": 100000}, "valid_bins"),
    (lambda d: {**d, "valid_bins": 5000}, "valid_bins"),
    (lambda d: {**d, "valid_bins": 0}, "valid_bins"),
    (lambda d: {**d, "valid_bins": 10 ** 12}, "valid_bins"),
    (lambda d: {**d, "valid_bins": 3.5}, "valid_bins"),
    (lambda d: {**d, "n_fft": 2 ** 40}, "n_fft"),
    (lambda d: {**d, "init": "evil"}, "init"),
    (lambda d: {**d, "record": {"recall": 7}}, "recall"),
    (lambda d: {**d, "record": [1, 2]}, "record"),
    (lambda d: {**d, "tied": "yes"}, "tied"),
    (lambda d: [d], "JSON list"),
])
def test_forged_metadata_is_refused_before_anything_runs(weights, tmp_path, edit, match):
    forged = _forge(weights, tmp_path / "f.safetensors", meta_edit=edit)
    with pytest.raises(WeightsError, match=match):
        load(forged)
    x = np.random.default_rng(0).standard_normal((2, 64))
    with pytest.raises(ValueError, match=match):
        welchpeaks.welch_peaks(x, n_fft=16, segments=1, strategy="learned", model=forged)


def test_forged_tensors_are_refused(weights, tmp_path):
    def nan_twiddle(header, data):
        lo = header["twiddle"]["data_offsets"][0]
        data[lo : lo + 8] = struct.pack("<d", float("nan"))

    with pytest.raises(WeightsError, match="NaN or infinity"):
        load(_forge(weights, tmp_path / "a.safetensors", tensor_edit=nan_twiddle))

    def overlap(header):
        header["gate_logit"]["data_offsets"] = list(header["twiddle"]["data_offsets"][:1]) + [
            header["twiddle"]["data_offsets"][0] + 8 * 4 * 8]

    with pytest.raises(WeightsError, match="overlap|byte range"):
        load(_forge(weights, tmp_path / "b.safetensors", table_edit=overlap))

    def float_shape(header):
        header["active"]["shape"] = [4.0, 8.0]

    with pytest.raises(WeightsError, match="active"):
        load(_forge(weights, tmp_path / "c.safetensors", table_edit=float_shape))


def test_the_checksum_covers_the_tensor_table(weights, tmp_path):
    blob = weights.read_bytes()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + n])
    lo, hi = header["gate_logit"]["data_offsets"]
    a, b = header["twiddle"]["data_offsets"]
    # swap two tensors' byte ranges of equal size without touching the digest
    header["gate_logit"]["data_offsets"], header["active"]["data_offsets"] = (
        header["active"]["data_offsets"], header["gate_logit"]["data_offsets"])
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    edited = tmp_path / "e.safetensors"
    edited.write_bytes(struct.pack("<Q", len(head)) + head + blob[8 + n :])
    with pytest.raises(WeightsError, match="checksum"):
        load(edited)


def test_save_never_writes_through_a_planted_link(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    out = tmp_path / "out.safetensors"
    os.symlink(victim, tmp_path / "out.safetensors.tmp")
    save(ButterflyFFT(8), out)
    assert victim.read_text() == "precious"
    assert out.is_file() and not out.is_symlink()
    assert load(out).n_fft == 8


def test_huge_files_are_not_read_as_weights(tmp_path):
    big = tmp_path / "big.safetensors"
    with open(big, "wb") as fh:
        fh.truncate(200 << 20)  # sparse: no disk used
    with pytest.raises(WeightsError, match="not one"):
        load(big)


@pytest.mark.slow
def test_weights_from_a_pipe_a_device_or_deep_json_are_weights_errors(tmp_path):
    """Issue 35, defect 9: ``load()`` (and ``--model``) naming a FIFO hung in ``open``; a link to
    /dev/zero (size 0, under the 64 MiB cap) was read until memory ran out; a header of 100,000
    nested brackets raised RecursionError. Each is now a WeightsError naming the path. Run in a
    child process with its address space capped, so a regression fails (by its time limit or a
    MemoryError) instead of hanging the tests or taking the machine's memory."""
    import subprocess
    import sys

    fifo = tmp_path / "fifo.safetensors"
    os.mkfifo(fifo)
    (tmp_path / "zero.safetensors").symlink_to("/dev/zero")
    head = b"[" * 100_000 + b"]" * 100_000
    (tmp_path / "deep.safetensors").write_bytes(struct.pack("<Q", len(head)) + head)
    deep = "[" * 5000 + "]" * 5000  # the metadata, under a checksum a forger recomputed
    meta = json.dumps({"__metadata__": {"welchpeaks": deep, "sha256": _digest({}, deep, b"")}}).encode()
    (tmp_path / "deepmeta.safetensors").write_bytes(struct.pack("<Q", len(meta)) + meta)
    paths = [fifo, tmp_path / "zero.safetensors", tmp_path / "deep.safetensors", tmp_path / "deepmeta.safetensors"]
    script = f"""
import resource
from welchpeaks.learned.weights import read
size = [int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmSize:")][0] * 1024
resource.setrlimit(resource.RLIMIT_AS, (size + (1 << 30), resource.RLIM_INFINITY))
for path in {[str(p) for p in paths]!r}:
    try:
        read(path)
        print("read", path)
    except Exception as exc:
        print(type(exc).__name__, "|", isinstance(exc, ValueError), "|", str(exc).replace(chr(10), " "))
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 0 and len(lines) == 4, proc.stdout + proc.stderr
    for line, path in zip(lines, paths):
        assert line.startswith("WeightsError | True |") and str(path) in line, line
    assert "not a regular file" in lines[0] and "not a regular file" in lines[1] and "learn" in lines[0]
    assert "nested at most 64 deep" in lines[2] and "nested at most 64 deep" in lines[3]
