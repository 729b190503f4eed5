"""The sub-bin offset of one peak in numba (:func:`welchpeaks.estimators.interp_offset`'s
formulas), shared by the fused CPU pass and the find_peaks kernel."""

from __future__ import annotations

import math

from numba import njit

from welchpeaks.estimators import ZERO_BELOW
from welchpeaks.numba_base import INLINE as _INL
from welchpeaks.params import INTERP_CODES

INTERP_LOG = INTERP_CODES["log-parabola"]
INTERP_POWER = INTERP_CODES["power-parabola"]
INTERP_HANN = INTERP_CODES["hann"]
INTERP_BOXCAR = INTERP_CODES["boxcar"]


@njit(**_INL)
def _offset(a, b, c, interp, alpha):
    """:func:`welchpeaks.estimators.interp_offset` of one peak, in float64: the offset in bins
    from the power ``a, b, c`` at bins j-1, j, j+1 by the estimator ``interp``
    (:data:`~welchpeaks.params.INTERP_CODES`; ``alpha``: the power parabola's exponent)."""
    a, b, c = float(a), float(b), float(c)
    a = a if a > b * ZERO_BELOW else 0.0  # rounding, not power
    c = c if c > b * ZERO_BELOW else 0.0
    d = 0.0
    if interp == INTERP_LOG:
        if a > 0.0 and b > 0.0 and c > 0.0:
            la, lb, lc = math.log(a), math.log(b), math.log(c)
            den = la - 2.0 * lb + lc
            if den < 0.0:
                d = 0.5 * (la - lc) / den
    elif interp == INTERP_POWER:
        pa, pb, pc = a ** alpha, b ** alpha, c ** alpha
        den = pa - 2.0 * pb + pc
        if den < 0.0:
            d = 0.5 * (pa - pc) / den
    elif interp == INTERP_HANN:
        sa, sb, sc = math.sqrt(a), math.sqrt(b), math.sqrt(c)
        den = sa + 2.0 * sb + sc
        if den > 0.0:
            d = 2.0 * (sc - sa) / den
    elif interp == INTERP_BOXCAR:
        sa, sb, sc = math.sqrt(a), math.sqrt(b), math.sqrt(c)
        if sc >= sa:
            d = sc / (sb + sc) if sb + sc > 0.0 else 0.0
        else:
            d = -sa / (sb + sa) if sb + sa > 0.0 else 0.0
    return min(0.5, max(-0.5, d))
