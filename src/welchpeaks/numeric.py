"""Every numeric parameter of welchpeaks, checked by one rule: :func:`real` and :func:`integer`.

A parameter's value is a number of its kind (a ``bool`` is not one; NumPy scalars and 0-d
arrays are), finite unless the parameter says what infinity means, representable as a float64
(a Python ``int`` such as ``10**400`` is not, unless the parameter clamps it), and inside the
parameter's range. Anything else is a TypeError (not a number of its kind) or a ValueError
(outside the range), each naming the parameter; the messages show the value as given
(:func:`shown`) and never compute with it. Integers are at most :data:`INT_MAX` (what an int64
holds) unless the parameter clamps larger ones. docs/reliability.md lists each parameter's range.

The lowest layer of the package, so every layer (params, tracks, api) checks its numbers here.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

#: the largest integer parameter (an int64): arithmetic in messages and sizes stays in range
INT_MAX = (1 << 63) - 1

#: the longest repr a message shows of a value
_SHOWN = 60


def shown(value: Any) -> str:
    """``value`` as an error message shows it: its repr on one line, shortened; an integer too
    long to print (Python refuses ints of more than 4300 digits) by its number of digits."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 100:
        digits = int(value.bit_length() * math.log10(2)) + 1
        return f"{'-' if value < 0 else ''}(an integer of about {digits} digits)"
    try:
        text = " ".join(repr(value).split())  # (one line: an array's repr has several)
    except Exception:  # an object whose repr fails (or an array holding such an int)
        return f"<{type(value).__name__}>"
    return text if len(text) <= _SHOWN else text[:_SHOWN - 3] + "..."


def size_text(n: float) -> str:
    """A size in bytes as messages show it: '1.5 GiB', '4.7 MiB', '512 KiB', '100 bytes'."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} bytes"


def _scalar(value: Any) -> Any:
    """A 0-d NumPy array as its scalar; anything else as given."""
    return value[()] if isinstance(value, np.ndarray) and value.ndim == 0 else value


def _not_a_number(value: Any) -> bool:
    """True for what counts as no number here although Python's ``numbers`` says it is one:
    booleans, and NumPy's timedelta64 (a duration, in units it carries)."""
    return isinstance(value, (bool, np.bool_, np.timedelta64))


def is_int(value: Any) -> bool:
    """True for integers (NumPy's too), False for bools."""
    return isinstance(value, numbers.Integral) and not _not_a_number(value)


def _bound(b: Any) -> str:
    if b == INT_MAX:
        return "2**63 - 1"
    return f"{b:g}" if isinstance(b, float) else str(b)


def _fail(exc: type, name: str, value: Any, must: str, fix: str | None) -> Exception:
    return exc(f"{name}={shown(value)} must be {must}" + (f"; {fix}" if fix else ""))


def real(name: str, value: Any, low: float | None = None, high: float | None = None, *, low_open: bool = False,
         high_open: bool = False, inf: bool = False, clamp: float | None = None, kind: str = "a number",
         words: str | None = None, fix: str | None = None) -> float:
    """``value`` as a float, checked: a real number (not a bool; NumPy scalars and 0-d arrays
    too), not NaN, finite unless ``inf`` (infinities allowed), within ``low``/``high``
    (inclusive, or exclusive with ``low_open``/``high_open``). Values above ``clamp`` (infinity
    and ints past float range included) are ``clamp``.

    Errors: a TypeError ``"{name}={value} must be {kind}"`` for a non-number; a ValueError
    ``"{name}={value} must be {kind} within float64's range ..."`` for a number past it; a
    ValueError ``"{name}={value} must be {words}"`` otherwise (``words`` defaults to the bound
    missed: ``">= 1"``, ``"finite"``, ...). ``fix``, when given, follows after a semicolon."""
    v = _scalar(value)
    if _not_a_number(v) or not isinstance(v, numbers.Real):
        raise _fail(TypeError, name, value, kind, fix)
    if v != v:  # NaN
        raise _fail(ValueError, name, value, words or kind, fix)
    if clamp is not None and v > clamp:
        return float(clamp)
    try:
        with np.errstate(over="ignore"):  # (a longdouble past float64's range)
            f = float(v)
    except OverflowError:  # an int or a fraction past float range
        f = math.inf if v > 0 else -math.inf
    if math.isinf(f) and f != v:  # a finite value past float64's range (a longdouble converts to inf)
        raise _fail(ValueError, name, value, f"{kind} within float64's range (|value| <= 1.8e308)", fix)
    if math.isinf(f) and not inf:
        raise _fail(ValueError, name, value, words or "finite", fix)
    if low is not None and (f <= low if low_open else f < low):
        raise _fail(ValueError, name, value, words or f"{'>' if low_open else '>='} {_bound(low)}", fix)
    if high is not None and (f >= high if high_open else f > high):
        raise _fail(ValueError, name, value, words or f"{'<' if high_open else '<='} {_bound(high)}", fix)
    return f


def integer(name: str, value: Any, low: int | None = None, high: int | None = INT_MAX, *, clamp: int | None = None,
            kind: str = "an integer", words: str | None = None, fix: str | None = None) -> int:
    """``value`` as an int, checked: an integer (Python's or NumPy's, or a 0-d integer array;
    not a bool or a float) within ``low``/``high`` (inclusive; ``high`` is :data:`INT_MAX`
    unless given). Values above ``clamp`` are ``clamp`` (a cap that every larger value means
    the same as), so no upper bound applies to them.

    Errors as :func:`real`'s: a TypeError ``"{name}={value} must be {kind}"``, a ValueError
    ``"{name}={value} must be {words}"`` (``words`` defaults to the bound missed)."""
    v = _scalar(value)
    if not is_int(v):
        raise _fail(TypeError, name, value, kind, fix)
    if low is not None and v < low:
        raise _fail(ValueError, name, value, words or f">= {_bound(low)}", fix)
    if clamp is not None and v > clamp:
        return int(clamp)
    if high is not None and v > high:
        raise _fail(ValueError, name, value, words or f"<= {_bound(high)}", fix)
    return int(v)


def real_dtype(dtype: Any, name: str = "dtype") -> np.dtype:
    """The dtype a call computes an input of ``dtype`` as: float32 and float64 as they are,
    float16 as float32, integers and longer floats as float64; anything else a one-line error naming ``name``."""
    try:
        dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt is None or dt == np.bool_ or not (np.issubdtype(dt, np.integer) or np.issubdtype(dt, np.floating)):
        raise TypeError(f"{name}={shown(dtype)}: pass a real dtype (float32, float64, float16 or an integer type); "
                        "complex signals are not analysed")
    if dt.kind == "f" and dt.itemsize in (4, 8):  # in native byte order ('>f4' computes as float32)
        return np.dtype(f"f{dt.itemsize}")
    return np.dtype(np.float32) if dt.kind == "f" and dt.itemsize == 2 else np.dtype(np.float64)
