"""xarray: ``welch_peaks`` and ``track`` of a DataArray along a named dimension.

>>> import numpy as np, xarray as xr, welchpeaks.xarray as wpx
>>> t = np.arange(4096) / 1000.0
>>> da = xr.DataArray(np.stack([np.sin(2 * np.pi * f * t) for f in (50, 120)]), dims=("sensor", "time"),
...                   coords={"sensor": ["a", "b"], "time": t})
>>> ds = wpx.welch_peaks(da, dim="time", k=1)
>>> np.round(ds.freq.values[:, 0]).tolist(), ds.sensor.values.tolist()
([50.0, 120.0], ['a', 'b'])

The sample rate comes from the dimension's coordinate when it is evenly spaced (numbers in
seconds, or datetime64 / timedelta64), unless ``fs`` is given. The other dimensions and every coordinate
not on ``dim`` are carried over; a dask-backed DataArray gives a lazy Dataset. Needs xarray
(``pip install 'welchpeaks[xarray]'``).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

from welchpeaks import api
from welchpeaks.numeric import shown


def _xr():
    try:
        import xarray
    except ImportError:
        raise ImportError("welchpeaks.xarray needs xarray: pip install 'welchpeaks[xarray]'") from None
    return xarray


def _check(da: Any, dim: str) -> None:
    xr = _xr()
    if not isinstance(da, xr.DataArray):
        raise TypeError(f"da is a {type(da).__name__}; pass an xarray.DataArray (ds['name'] for a Dataset variable)")
    if dim not in da.dims:
        raise ValueError(f"dim={shown(dim)} is not a dimension of the DataArray (its dimensions: {list(da.dims)})")


#: seconds per tick of each datetime64 / timedelta64 unit of a fixed length (not years or months)
_SECONDS = {"W": Fraction(604800), "D": Fraction(86400), "h": Fraction(3600), "m": Fraction(60), "s": Fraction(1),
            "ms": Fraction(1, 10**3), "us": Fraction(1, 10**6), "ns": Fraction(1, 10**9), "ps": Fraction(1, 10**12),
            "fs": Fraction(1, 10**15), "as": Fraction(1, 10**18)}


def sample_rate(da: Any, dim: str) -> float | None:
    """Samples per second from ``da``'s coordinate on ``dim`` when evenly spaced (relative
    spread of the steps under 1e-3: datetime64 coordinates round each time to their unit), else
    None. Numbers are seconds; datetime64 and timedelta64 coordinates are integer ticks of
    their unit, read exactly: the rate is ``(n - 1) / (last - first)`` in seconds, rounded once."""
    if dim not in da.coords or da.sizes[dim] < 2:
        return None
    c = np.asarray(da.coords[dim].values)
    if c.dtype.kind in "mM":  # datetime64, timedelta64
        unit, count = np.datetime_data(c.dtype)
        if unit not in _SECONDS or np.isnat(c).any():
            return None
        ticks = c.view(np.int64)
        step = np.diff(ticks).astype(np.float64)  # (exact integers before the cast)
        mean = Fraction(int(ticks[-1]) - int(ticks[0]), len(ticks) - 1)
        per_tick = _SECONDS[unit] * count
    elif np.issubdtype(c.dtype, np.number):
        step = np.diff(c.astype(np.float64))
        mean, per_tick = float(np.mean(step)), 1
    else:
        return None
    if not (np.isfinite(float(mean)) and mean > 0) or np.max(np.abs(step - float(mean))) > 1e-3 * float(mean):
        return None
    return float(1 / (mean * per_tick))


def _layout(da: Any, dim: str, fs: float | None) -> tuple[Any, tuple[str, ...], dict[str, Any], float | None]:
    _check(da, dim)
    other = tuple(d for d in da.dims if d != dim)
    moved = da.transpose(*other, dim)
    coords = {name: c for name, c in da.coords.items() if dim not in c.dims}
    return moved.data, other, coords, sample_rate(da, dim) if fs is None else fs


def _attrs(params: dict[str, Any]) -> dict[str, Any]:
    """netCDF-friendly attributes: scalars and strings only (None as the string 'none')."""
    out = {}
    for key, v in params.items():
        if isinstance(v, (bool, np.bool_)):
            out[key] = int(v)
        elif isinstance(v, (int, float, str)):
            out[key] = v
        elif v is None:
            out[key] = "none"
    return out


def welch_peaks(da: Any, dim: str = "time", *, fs: float | None = None, **kw: Any) -> Any:
    """The ``k`` strongest peaks of every signal along ``dim``: a Dataset with variables
    ``freq``, ``power``, ``bin`` (and the ``measures`` asked for) over the other dimensions and
    ``peak``. Keywords are those of :func:`welchpeaks.welch_peaks`."""
    xr = _xr()
    data, other, coords, fs = _layout(da, dim, fs)
    r = api.welch_peaks(data, fs=fs, **kw)
    dims = other + ("peak",)
    return xr.Dataset({"freq": (dims, r.freqs), "power": (dims, r.power), "bin": (dims, r.bins),
                       **{name: (dims, v) for name, v in r.measures.items()}},
                      coords=dict(coords, peak=np.arange(r.bins.shape[-1])),
                      attrs=dict(_attrs(r.params), strategy=r.strategy, fs=fs if fs is not None else "none"))


def track(da: Any, dim: str = "time", *, fs: float | None = None, **kw: Any) -> Any:
    """Peaks over time along ``dim``: a Dataset with ``freq``, ``power``, ``bin`` (and the
    ``measures`` asked for) over the other dimensions, ``frame`` and ``peak``; the ``frame`` dimension's coordinate ``dim`` holds each
    frame's centre in the units of ``da``'s own coordinate (datetime64 and timedelta64 stay so).
    Keywords are those of :func:`welchpeaks.track`."""
    xr = _xr()
    data, other, coords, fs = _layout(da, dim, fs)
    r = api.track(data, fs=fs, **kw)
    dims = other + ("frame", "peak")
    centre_samples = r.times * fs if fs is not None else r.times
    frame_coords: dict[str, Any] = {"frame": np.arange(len(r))}
    if dim in da.coords and fs is not None:
        start = da.coords[dim].values[0]
        if np.asarray(start).dtype.kind in "mM":  # datetime64 and timedelta64 stay so
            frame_coords[dim] = ("frame", start + (r.times * 1e9).astype("timedelta64[ns]"))
        else:
            frame_coords[dim] = ("frame", float(start) + r.times)
    else:
        frame_coords[dim] = ("frame", centre_samples)
    return xr.Dataset({"freq": (dims, r.freqs), "power": (dims, r.power), "bin": (dims, r.bins),
                       **{name: (dims, v) for name, v in r.measures.items()}},
                      coords=dict(coords, peak=np.arange(r.bins.shape[-1]), **frame_coords),
                      attrs=dict(_attrs(r.params), strategy=r.strategy, fs=fs if fs is not None else "none"))
