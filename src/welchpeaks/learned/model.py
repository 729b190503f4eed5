"""The butterfly network: an FFT with one learnable complex twiddle and one gate per butterfly.

Radix-2 decimation in time on bit-reversed input. Stage ``s`` (``stride = 2**s``) pairs element
``g*2*stride + j`` (top, ``a``) with the one ``stride`` later (bottom, ``b``) for butterfly
``b_idx = g*stride + j``, and computes ``a + w*b`` and ``a - w*b``. With every twiddle at
``exp(-i*pi*j/stride)`` the network is the DFT (``numpy.fft.fft``'s convention: unnormalised
forward, ``1/n`` inverse).

A gate ``z`` in [0, 1] blends a butterfly with the identity: ``top = a + z*w*b`` and
``bot = z*(a - w*b) + (1 - z)*b``; ``z = 0`` skips it. Gates are hard-concrete (L0) variables
(Louizos et al., 2018): training samples them, and their expected count is a differentiable
measure of compute, so a penalty can push them to exactly zero. :meth:`ButterflyFFT.prune`
hardens them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from welchpeaks.numba_base import bit_reverse

try:
    import torch
except ImportError:
    raise ImportError("welchpeaks.learned needs torch: pip install 'welchpeaks[learned]'") from None

INITS = ("exact", "random", "perturbed")
# hard-concrete stretch and temperature (Louizos et al.)
_GAMMA, _ZETA, _BETA = -0.1, 1.1, 2.0 / 3.0
_GATE_ON = 3.0  # initial gate logit: the deterministic gate is clamp(1.04) = 1


def check_n_fft(n_fft: Any) -> int:
    if isinstance(n_fft, bool) or not isinstance(n_fft, (int, np.integer)) or n_fft < 4 or n_fft & (n_fft - 1):
        raise ValueError(f"n_fft={n_fft!r}: the butterfly network needs a power of two >= 4 (for example 256)")
    return int(n_fft)


def exact_angles(n: int) -> np.ndarray:
    """[stages, n/2] twiddle angles of the DFT: butterfly ``g*stride + j`` of stage ``s`` turns by
    ``-pi*j/stride``."""
    stages, half = n.bit_length() - 1, n // 2
    b = np.arange(half)
    return np.stack([-np.pi * (b % (1 << s)) / (1 << s) for s in range(stages)])


def analytic_active(n: int, bins: range | list[int]) -> np.ndarray:
    """[stages, n/2] mask of the butterflies an output-pruned FFT needs to produce ``bins``.

    Walks back from the last stage: a butterfly is needed when one of its two outputs is.
    """
    stages, half = n.bit_length() - 1, n // 2
    need = np.zeros(n, bool)
    need[list(bins)] = True
    mask = np.zeros((stages, half), bool)
    for s in reversed(range(stages)):
        stride = 1 << s
        b = np.arange(half)
        top = (b // stride) * 2 * stride + b % stride
        used = need[top] | need[top + stride]
        mask[s] = used
        need = np.zeros(n, bool)
        need[top[used]] = True
        need[top[used] + stride] = True
    return mask


class ButterflyFFT(torch.nn.Module):
    """An ``n_fft``-point FFT as ``log2(n_fft)`` stages of ``n_fft/2`` learnable butterflies.

    Parameters
    ----------
    n_fft : power of two >= 4.
    init : "exact" (the DFT's twiddles), "random" (uniform phases) or "perturbed" (exact plus
        complex Gaussian noise of standard deviation ``sigma``).
    tied : share one twiddle per stage position (``j``), as a true FFT does, instead of one per
        butterfly.
    seed : seeds the random and perturbed initialisations.
    """

    def __init__(self, n_fft: int, init: str = "exact", sigma: float = 0.1, tied: bool = False,
                 seed: int | None = None, dtype: Any = None):
        super().__init__()
        n = check_n_fft(n_fft)
        if init not in INITS:
            raise ValueError(f"init={init!r} is unknown; use one of {', '.join(INITS)}")
        if not (isinstance(sigma, (int, float)) and math.isfinite(sigma) and sigma >= 0):
            raise ValueError(f"sigma={sigma!r} must be a finite number >= 0")
        dtype = dtype or torch.float64
        self.n_fft, self.init, self.sigma, self.tied, self.seed = n, init, float(sigma), bool(tied), seed
        self.stages, self.half = n.bit_length() - 1, n // 2
        rng = np.random.default_rng(seed)
        ang = exact_angles(n)
        if init == "random":
            ang = rng.uniform(0.0, 2 * np.pi, ang.shape)
        tw = np.stack([np.cos(ang), np.sin(ang)], -1)
        if init == "perturbed":
            tw = tw + rng.normal(0.0, sigma / math.sqrt(2), tw.shape)
        # tied: butterfly g*stride + j of stage s reads entry j of its stage's row
        b = np.arange(self.half)
        self.register_buffer("tie_index", torch.tensor(np.stack([b % (1 << s) for s in range(self.stages)])))
        self.twiddle = torch.nn.Parameter(torch.tensor(tw, dtype=dtype))
        self.gate_logit = torch.nn.Parameter(torch.full((self.stages, self.half), _GATE_ON, dtype=dtype),
                                             requires_grad=False)
        self.register_buffer("active", torch.ones(self.stages, self.half, dtype=torch.bool))
        self.register_buffer("perm", torch.tensor(bit_reverse(n)))
        self.gated = False  # gates are in the forward pass (set by gate training or prune)
        self.quantized = False  # Q8 twiddles (straight-through) in the forward pass
        self.valid_bins = n // 2 + 1  # outputs a pruned model keeps: bins below this
        self.record: dict[str, Any] = {}

    # ------------------------------------------------------------------------ parameters

    def twiddles(self) -> Any:
        """[stages, n/2, 2] (re, im) as the forward pass uses them (tied, Q8 applied)."""
        w = self.twiddle
        if self.tied:
            w = torch.gather(w, 1, self.tie_index.unsqueeze(-1).expand(-1, -1, 2))
        if self.quantized:
            q = quantize_q8(w)
            w = w + (q - w).detach()  # straight-through: forward Q8, gradient as if float
        return w

    def gates(self) -> Any | None:
        """[stages, n/2] gate values, or None when ungated. Training samples hard-concrete
        gates; otherwise they are deterministic; pruned butterflies are exactly 0."""
        if not self.gated:
            return None
        la = self.gate_logit
        if self.training and la.requires_grad:
            u = torch.rand_like(la).clamp(1e-6, 1 - 1e-6)
            s = torch.sigmoid((torch.log(u) - torch.log1p(-u) + la) / _BETA)
        else:
            s = torch.sigmoid(la)
        z = (s * (_ZETA - _GAMMA) + _GAMMA).clamp(0.0, 1.0)
        return z * self.active

    def expected_active(self) -> Any:
        """Expected number of non-zero gates (differentiable): the L0 measure of compute."""
        p = torch.sigmoid(self.gate_logit - _BETA * math.log(-_GAMMA / _ZETA))
        return (p * self.active).sum()

    def enable_gates(self) -> None:
        self.gated = True
        self.gate_logit.requires_grad_(True)

    def prune(self, threshold: float = 0.5) -> float:
        """Harden the gates: butterflies whose deterministic gate is below ``threshold`` are
        skipped, the rest run ungated. Returns the active fraction."""
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"threshold={threshold!r} must be in [0, 1]")
        with torch.no_grad():
            z = (torch.sigmoid(self.gate_logit) * (_ZETA - _GAMMA) + _GAMMA).clamp(0.0, 1.0)
            keep = (z >= threshold) & self.active if self.gated else self.active.clone()
            self.active.copy_(keep)
            self.gate_logit.fill_(_GATE_ON * 10)  # kept gates are exactly 1
        self.gate_logit.requires_grad_(False)
        self.gated = not bool(keep.all())
        return self.active_fraction()

    def active_fraction(self) -> float:
        return float(self.active.float().mean())

    # ------------------------------------------------------------------------ transforms

    def forward(self, xr: Any, xi: Any) -> tuple[Any, Any]:
        """The network on real and imaginary parts ``[..., n]``: (real, imag) of the spectrum."""
        n = self.n_fft
        lead = xr.shape[:-1]
        xr = xr.reshape(-1, n)[:, self.perm]
        xi = xi.reshape(-1, n)[:, self.perm]
        rows = xr.shape[0]
        w = self.twiddles().to(xr.dtype)
        z = self.gates()
        for s in range(self.stages):
            stride = 1 << s
            groups = n // (2 * stride)
            vr = xr.view(rows, groups, 2, stride)
            vi = xi.view(rows, groups, 2, stride)
            ar, br, ai, bi = vr[:, :, 0], vr[:, :, 1], vi[:, :, 0], vi[:, :, 1]
            wr = w[s, :, 0].view(groups, stride)
            wi = w[s, :, 1].view(groups, stride)
            tr = br * wr - bi * wi
            ti = br * wi + bi * wr
            if z is None:
                top_r, top_i, bot_r, bot_i = ar + tr, ai + ti, ar - tr, ai - ti
            else:
                g = z[s].to(xr.dtype).view(groups, stride)
                top_r, top_i = ar + g * tr, ai + g * ti
                bot_r, bot_i = br + g * (ar - tr - br), bi + g * (ai - ti - bi)
            xr = torch.stack([top_r, bot_r], 2).reshape(rows, n)
            xi = torch.stack([top_i, bot_i], 2).reshape(rows, n)
        return xr.reshape(*lead, n), xi.reshape(*lead, n)

    def _real_parts(self, x: Any) -> tuple[Any, Any]:
        t = torch.as_tensor(x)
        dtype = self.twiddle.dtype
        if t.is_complex():
            return t.real.to(dtype), t.imag.to(dtype)
        t = t.to(dtype)
        return t, torch.zeros_like(t)

    def fft(self, x: Any) -> Any:
        """Complex spectrum of ``x [..., n_fft]`` (real or complex), as ``numpy.fft.fft``."""
        self._check_last(x)
        yr, yi = self(*self._real_parts(x))
        return torch.complex(yr, yi)

    def rfft(self, x: Any) -> Any:
        """One-sided spectrum ``[..., n_fft/2 + 1]`` of real ``x``, as ``numpy.fft.rfft``."""
        self._check_last(x)
        if torch.as_tensor(x).is_complex():
            raise TypeError("rfft takes real input; use fft for complex signals")
        return self.fft(x)[..., : self.n_fft // 2 + 1]

    def ifft(self, spec: Any) -> Any:
        """Inverse of :meth:`fft` (``numpy.fft.ifft``: conj, forward, conj, ``1/n``)."""
        self._check_last(spec)
        t = torch.as_tensor(spec)
        t = t if t.is_complex() else torch.complex(t.to(self.twiddle.dtype), torch.zeros_like(t, dtype=self.twiddle.dtype))
        yr, yi = self(t.real.to(self.twiddle.dtype), -t.imag.to(self.twiddle.dtype))
        return torch.complex(yr, -yi) / self.n_fft

    def _check_last(self, x: Any) -> None:
        shape = tuple(getattr(x, "shape", np.shape(x)))
        if not shape or shape[-1] != self.n_fft:
            raise ValueError(f"x has shape {shape}; the last axis must hold n_fft={self.n_fft} samples")

    # ------------------------------------------------------------------------ export

    def compiled_arrays(self) -> dict[str, np.ndarray]:
        """Float64 twiddles (tied and Q8 applied) and the active mask, for compiled executors."""
        with torch.no_grad():
            w = self.twiddles().detach().to(torch.float64).cpu().numpy()
        return {"tw_re": np.ascontiguousarray(w[..., 0]), "tw_im": np.ascontiguousarray(w[..., 1]),
                "active": self.active.cpu().numpy().copy(), "perm": self.perm.cpu().numpy().copy()}

    def extra_repr(self) -> str:
        return (f"n_fft={self.n_fft}, init={self.init!r}, tied={self.tied}, quantized={self.quantized}, "
                f"active={self.active_fraction():.3f}, valid_bins={self.valid_bins}")


def q8_levels(w: Any) -> tuple[Any, Any]:
    """Symmetric int8 twiddles: (levels in [-127, 127], one scale per stage ``max|component|/127``)."""
    scale = (w.detach().abs().amax(dim=(1, 2), keepdim=True) / 127.0).clamp_min(1e-12)
    return torch.clamp(torch.round(w / scale), -127, 127), scale


def quantize_q8(w: Any) -> Any:
    """The int8 twiddles of :func:`q8_levels`, dequantised."""
    levels, scale = q8_levels(w)
    return levels * scale
