"""Sampler parameters: checks, and floats rounded to rationals in the safe direction.

Scale parameters are rationals (``Fraction`` or ``int``). A float must be converted explicitly
with :func:`fraction_at_least`, which rounds up: more noise, never less privacy.
"""

from __future__ import annotations

import math
import numbers
from fractions import Fraction

from dpsql.errors import PrivacyParameterError


def positive_rational(value: object, name: str, maximum: int | None = None) -> Fraction:
    """``value`` as a Fraction in (0, maximum], else PrivacyParameterError naming it."""
    if isinstance(value, float) and math.isfinite(value) and value > 0:
        raise PrivacyParameterError(
            f"{name} must be a Fraction or int, not the float {value!r}; convert it with "
            f"fraction_at_least({value!r}), which rounds up (more noise, never less privacy)."
        )
    if isinstance(value, bool) or not isinstance(value, numbers.Rational) or value <= 0:
        raise PrivacyParameterError(f"{name} must be a positive rational; got {value}.")
    frac = Fraction(int(value.numerator), int(value.denominator))
    if maximum is not None and frac > maximum:
        raise PrivacyParameterError(
            f"{name} must be at most {maximum} so that samples fit in int64; got {value}."
        )
    return frac


def check_size(size: object) -> int:
    """``size`` as an int >= 0, else PrivacyParameterError."""
    if isinstance(size, bool) or not isinstance(size, numbers.Integral) or size < 0:
        raise PrivacyParameterError(f"size must be an int >= 0; got {size!r}.")
    return int(size)


def _exact_fraction(x: float | Fraction, max_denominator: int) -> Fraction:
    if isinstance(max_denominator, bool) or not isinstance(max_denominator, int):
        raise PrivacyParameterError(f"max_denominator must be an int; got {max_denominator!r}.")
    if max_denominator < 1:
        raise PrivacyParameterError(f"max_denominator must be >= 1; got {max_denominator}.")
    if isinstance(x, float) and not math.isfinite(x):
        raise PrivacyParameterError(f"x must be finite; got {x}.")
    return Fraction(x)


def _farey_neighbours(x: Fraction, max_denominator: int) -> tuple[Fraction, Fraction]:
    """The closest fractions below and above x with denominator <= max_denominator.

    Requires x.denominator > max_denominator. Same continued-fraction walk as
    Fraction.limit_denominator, which returns whichever of the two is closer.
    """
    p0, q0, p1, q1 = 0, 1, 1, 0
    n, d = x.numerator, x.denominator
    while True:
        a = n // d
        q2 = q0 + a * q1
        if q2 > max_denominator:
            break
        p0, q0, p1, q1 = p1, q1, p0 + a * p1, q2
        n, d = d, n - a * d
    k = (max_denominator - q0) // q1
    first, second = Fraction(p0 + k * p1, q0 + k * q1), Fraction(p1, q1)
    return (first, second) if first < second else (second, first)


def fraction_at_least(x: float | Fraction, *, max_denominator: int = 2**20) -> Fraction:
    """The smallest rational >= x whose denominator is at most ``max_denominator``.

    Use it to turn a float scale or sigma2 into a sampler argument: rounding up adds noise, so
    the privacy guarantee computed from the returned value holds.

    Raises:
        PrivacyParameterError: x is not finite, or max_denominator < 1.

    >>> fraction_at_least(2.5)
    Fraction(5, 2)
    >>> fraction_at_least(Fraction(1, 3))
    Fraction(1, 3)
    >>> f = fraction_at_least(0.1, max_denominator=1000); f, f >= 0.1
    (Fraction(100, 999), True)
    """
    frac = _exact_fraction(x, max_denominator)
    if frac.denominator <= max_denominator:
        return frac
    return _farey_neighbours(frac, max_denominator)[1]


def fraction_at_most(x: float | Fraction, *, max_denominator: int = 2**20) -> Fraction:
    """The largest rational <= x whose denominator is at most ``max_denominator``.

    Use it for quantities that must not grow, such as epsilon. For x > 0 the result is > 0.

    Raises:
        PrivacyParameterError: x is not finite, max_denominator < 1, or 0 < x < 1/max_denominator
            (no positive rational <= x has a small enough denominator).

    >>> fraction_at_most(0.1, max_denominator=1000)
    Fraction(1, 10)
    >>> fraction_at_most(Fraction(2, 3))
    Fraction(2, 3)
    """
    frac = _exact_fraction(x, max_denominator)
    if frac.denominator <= max_denominator:
        return frac
    lower = _farey_neighbours(frac, max_denominator)[0]
    if frac > 0 >= lower:
        raise PrivacyParameterError(
            f"no positive rational <= {x} has denominator <= {max_denominator}; "
            "raise max_denominator."
        )
    return lower
