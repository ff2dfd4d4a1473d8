"""Exact integer noise: the discrete Laplace and discrete Gaussian samplers of dpsql.

This is the only package in dpsql that draws randomness. Every sampler follows Canonne, Kamath and
Steinke, "The Discrete Gaussian for Differential Privacy" (NeurIPS 2020), called CKS below, and
decides every outcome with uniform integers and integer comparisons only: no floating-point
uniform is ever transformed, so there is no Mironov-style low-order-bit leak.

Notation:
    t, ``scale``     the scale of the discrete Laplace Lap_Z(t), P[y] = tanh(1/(2t)) e^{-|y|/t}.
    σ², ``sigma2``   the variance parameter of the discrete Gaussian N_Z(0, σ²),
                     P[y] = e^{-y²/(2σ²)} / Σ_x e^{-x²/(2σ²)}.
    p/q              a parameter as a reduced fraction (numerator p, denominator q).
    γ                the exponent of a Bernoulli(exp(-γ)) draw.
    Bernoulli(n/d)   one uniform integer U in [0, d) and the outcome U < n.

Scale parameters are rationals (``Fraction`` or ``int``). A float must be converted explicitly
with :func:`fraction_at_least`, which rounds up: more noise, never less privacy.

Randomness comes from a :class:`RandomSource`. Production uses :class:`SystemRandomSource`
(``os.urandom``); tests inject :class:`SeededRandomSource`. There is no global seed.

The public samplers invert the distribution exactly (:mod:`dpsql.noise.inversion`): a uniform
real R, read lazily as a binary prefix, is compared with the survival function S(i) = P[X >= i],
whose values are computed as integer intervals to any precision (fixed-point arithmetic on exact
series of e^{-x}, x rational); a 16-bit prefix and a table of 2^16 entries decide about 99% of
samples, 48-bit prefixes and 48-bit thresholds nearly all the rest, and Python integers the
remainder (ties and the far tail). Small scales invert the pmf; larger ones invert a staircase
envelope of blocks and accept a uniform value in the block with an exact Bernoulli(exp(-γ)),
γ <= 1 rational (CKS Algorithm 1). Parameters whose integers leave int64 use the CKS
algorithms vectorised in int64 numpy, and beyond, the pure-Python reference samplers. The
output is an exact sample whatever path it took: no float takes part in any decision.

Random bits are the main cost (``os.urandom`` runs at about 20 ns per 64-bit word), so the
samplers take uniform 64-bit words from the source and cut them into fields of as few bits as
each decision needs:
    inversion           a 16-bit field per sample; its unused low bits serve the staircase;
    uniform in [0, m)   rejection sampling on fields of about log2(m) bits (:func:`sources.below`);
    Bernoulli(n/d)      4 random bits compared with floor(16 n/d), plus one uniform in [0, d) in
                        the 1/16 of cases where they are equal (:func:`bernoulli.bernoulli`);
    Bernoulli(e^-1)     the CKS chain length read off one uniform in [0, 5!) (:func:`bernoulli.exp1_vec`).
Each is exact: the proofs are in the docstrings. Samples are produced in batches of about
``limits.BATCH``; how many proposals a batch draws comes from the expected acceptance rates,
computed in floating point, but such counts never decide a sample: every proposal is accepted or
rejected exactly and the accepted ones are kept in order, so they are iid from the target.

Modules:
    limits          the int64 ceilings, chain caps, bit widths and batch sizes
    sources         random sources; uniform words, fields and integers below a bound
    parameters      parameter checks; floats rounded to rationals in the safe direction
    bernoulli       exact Bernoulli(num/den), Bernoulli(exp(-γ)) and geometric counts (CKS Alg. 1)
    inversion       exact inversion from certified thresholds; the staircase envelope
    laplace         discrete Laplace: inversion tables, CKS Alg. 2 (scalar reference, vectorised)
    gaussian        discrete Gaussian: inversion tables, CKS Alg. 3 (scalar reference, vectorised)
    wide            both samplers at any scale, in Python integers beyond int64
    distributions   pmfs, the discrete Gaussian normaliser, exact variances (floats)
"""

from __future__ import annotations

from typing import Literal

from dpsql.noise.bernoulli import bernoulli_exp
from dpsql.noise.distributions import (
    discrete_gaussian_normalizer,
    discrete_gaussian_pmf,
    discrete_gaussian_variance,
    discrete_laplace_pmf,
    discrete_laplace_variance,
)
from dpsql.noise.gaussian import discrete_gaussian, discrete_gaussian_scalar
from dpsql.noise.laplace import discrete_laplace, discrete_laplace_scalar
from dpsql.noise.parameters import fraction_at_least, fraction_at_most
from dpsql.noise.sources import RandomSource, SeededRandomSource, SystemRandomSource, resolve_rng
from dpsql.noise.wide import discrete_gaussian_wide, discrete_laplace_wide

#: The noise distribution of a measurement: discrete Gaussian (ρ-zCDP) or discrete Laplace (ε-DP).
#: The one definition; every layer that names a noise kind imports it from here.
Noise = Literal["gaussian", "laplace"]

__all__ = [
    "Noise",
    "RandomSource",
    "SeededRandomSource",
    "SystemRandomSource",
    "bernoulli_exp",
    "discrete_gaussian",
    "discrete_gaussian_normalizer",
    "discrete_gaussian_pmf",
    "discrete_gaussian_scalar",
    "discrete_gaussian_variance",
    "discrete_gaussian_wide",
    "discrete_laplace",
    "discrete_laplace_pmf",
    "discrete_laplace_scalar",
    "discrete_laplace_variance",
    "discrete_laplace_wide",
    "fraction_at_least",
    "fraction_at_most",
    "resolve_rng",
]
