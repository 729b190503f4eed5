"""welchpeaks.warm and ``welchpeaks compile`` (issue 52, items 5 and 6): the kernels compiled
side by side in processes of their own, into numba's disk cache."""

import os

import pytest
from typer.testing import CliRunner

from welchpeaks import warm
from welchpeaks.cli import app


def test_every_job_runs_in_a_process_of_its_own_and_leaves_its_kernels_in_the_disk_cache():
    """Each job's calls run in a child (its exit and time reported); afterwards the kernels they
    call have their compiled signatures in numba's disk cache (an index file beside the
    module, or under NUMBA_CACHE_DIR), which is what lets a later process load them."""
    from welchpeaks.backends.numba import find_peaks as kern
    from welchpeaks.backends.numba.find_peaks import measures

    res = warm.warm(processes=2, jobs=["find_peaks and peak measures", "fused pass, float32"])
    assert set(res["jobs"]) == {"find_peaks and peak measures", "fused pass, float32"} and res["processes"] == 2
    assert all(r["exit"] == 0 and r["error"] is None for r in res["jobs"].values()), res
    for dispatcher in (kern.host_find_peaks, measures.host_peak_measures):
        index = dispatcher._cache._cache_file._index_path
        assert os.path.exists(index), index


def test_an_unknown_job_is_refused_naming_the_known_ones():
    with pytest.raises(ValueError, match="unknown warm-up job.*fused pass, float32"):
        warm.warm(jobs=["everything"])


def test_the_compile_command_refuses_a_negative_count():
    res = CliRunner().invoke(app, ["compile", "--processes", "-1"])
    assert res.exit_code == 2 and "--processes -1" in res.output
