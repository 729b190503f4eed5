import os

# The Triton executions are tested on CPU tensors through Triton's interpreter unless a CUDA
# device is present (then the same tests run the compiled kernels). Set before triton loads.
try:
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
except ImportError:
    pass

import logging

import numpy as np
import pytest
from hypothesis import HealthCheck, settings


def pytest_configure(config):
    """Clear numba's cached kernels when a module using numba was edited (numba alone keeps a
    kernel's old helpers from other modules), and compile them again in parallel processes
    (welchpeaks.warm); once, in the process that starts the workers."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        from welchpeaks.numba_base import clear_stale_caches

        if clear_stale_caches():
            # a fresh tree (or edited kernels): compile them side by side now, rather than in
            # every test worker at once when its first test calls them
            from welchpeaks.warm import warm

            res = warm()
            failed = [n for n, r in res["jobs"].items() if r["exit"] != 0]
            print(f"welchpeaks: numba modules changed since the last run: their cached kernels were cleared and "
                  f"compiled again in {res['wall_s']} s ({res['processes']} at a time)"
                  + (f"; failed: {failed} (compiled by the tests instead)" if failed else ""))


# the library's notices (a compile, a background measurement: welchpeaks.notices) are not the
# tests' output (a command's JSON on the runner's mixed stdout and stderr); a test that checks
# one lowers the level with caplog.set_level(logging.WARNING, logger="welchpeaks")
logging.getLogger("welchpeaks").setLevel(logging.ERROR)

settings.register_profile(
    "ci", deadline=None, max_examples=int(os.environ.get("WELCHPEAKS_EXAMPLES", "60")),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("ci")


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture(autouse=True)
def plan_state(tmp_path_factory, monkeypatch):
    """Every test plans with a state of its own (welchpeaks.plan.PlanState, handed in with
    welchpeaks.plan.using): the same synthetic CPU cost model, no CUDA model (the default from
    published figures), its own caches, observed calls, background measurements and quiet gate
    (another test's measurement is not this one's), and a private cache directory, so no test
    measures the machine. A test that needs other measuring functions, grids, clocks or policy
    asks for this fixture and sets them (``plan_state.measure_cpu = ...``)."""
    from welchpeaks.plan import PlanState, set_cost_model, using
    from welchpeaks.timing import QuietGate

    from helpers import synthetic_cpu_model

    monkeypatch.setenv("WELCHPEAKS_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    state = PlanState(quiet=QuietGate(), detached=False)
    set_cost_model(synthetic_cpu_model(), state=state)
    with using(state):
        yield state
