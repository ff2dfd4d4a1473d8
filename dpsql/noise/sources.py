"""Random sources, and uniform integers cut from their 64-bit words.

Randomness comes from a :class:`RandomSource`. Production uses :class:`SystemRandomSource`
(``os.urandom``); tests inject :class:`SeededRandomSource`. There is no global seed.

The vectorised samplers spend random bits sparingly, because reading ``os.urandom`` is a large
part of their cost. They take uniform 64-bit words from the source (:func:`words`) and cut them
into fields of as few bits as each decision needs (:func:`fields`); a uniform integer in [0, m)
is rejection sampling on fields of about log2(m) bits (:func:`below`). Each is exact: the proofs
are in the docstrings. No floating-point uniform is ever transformed.
"""

from __future__ import annotations

import functools
import math
import numbers
import os
import random
import secrets
import threading
from fractions import Fraction
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from dpsql.noise import limits

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
WordArray = npt.NDArray[np.uint64]


@runtime_checkable
class RandomSource(Protocol):
    """A source of exactly uniform integers; the only randomness the samplers use."""

    def integers(self, high: IntArray) -> IntArray:
        """Independent uniform integers in [0, high) per element (high >= 1), same shape."""
        ...

    def randbelow(self, high: int) -> int:
        """One uniform integer in [0, high) for any Python int high >= 1."""
        ...


def _common_high(flat: IntArray) -> bool:
    """Check every bound is >= 1 (flat non-empty); True when all bounds are equal."""
    low = int(flat.min())
    if low < 1:
        raise ValueError(f"every high must be >= 1; got {low}")
    return low == int(flat.max())


def _smear(x: WordArray) -> WordArray:
    """The mask 2^k - 1 with k the bit length of x, per element."""
    x = x.copy()
    for shift in (1, 2, 4, 8, 16, 32):
        x |= x >> np.uint64(shift)
    return x


class SystemRandomSource:
    """Production randomness: words from ``os.urandom`` in large chunks, exact rejection.

    Random bytes are read in chunks and handed out as 64-bit words, each exactly once: a request
    takes the words at the front of the buffer and the buffer keeps only the words after them
    (a fresh, read-only array per chunk, never overwritten). A refill reads max(what the request
    still needs, the current chunk) bytes in one ``os.urandom`` call; the chunk starts at 4 KiB,
    so small one-off draws stay cheap, and doubles at every refill up to 1 MiB, so large draws
    cost one system call per MiB. The buffer is dropped in a forked child (it would otherwise
    repeat the parent's words) and is not copied or pickled; a lock makes concurrent draws from
    several threads take disjoint words.

    Uniform integers below a bound are random bits masked to the next power of two >= the bound
    and redrawn while they are >= the bound, so they are exactly uniform: no float, no modulo bias.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._buffer: WordArray = np.empty(0, dtype=np.uint64)
        self._chunk = limits.MIN_URANDOM_WORDS

    def __getstate__(self) -> dict[str, object]:
        """Copies and pickles start with an empty buffer, so no word is ever handed out twice."""
        return {}

    def __setstate__(self, state: dict[str, object]) -> None:
        self._lock = threading.Lock()
        self._reset()

    def integers(self, high: IntArray) -> IntArray:
        """Independent uniform integers in [0, high) per element (high >= 1), same shape."""
        high = np.asarray(high, dtype=np.int64)
        flat = high.ravel()
        if not flat.size:
            return np.zeros(high.shape, dtype=np.int64)
        if _common_high(flat):
            return below(self, int(flat[0]), flat.size).reshape(high.shape)
        bound = flat.astype(np.uint64)
        mask = _smear(bound - np.uint64(1))
        out = self.raw_words(bound.size) & mask
        todo = np.flatnonzero(out >= bound)
        while todo.size:
            cand = self.raw_words(todo.size) & mask[todo]
            ok = cand < bound[todo]
            out[todo[ok]] = cand[ok]
            todo = todo[~ok]
        return out.astype(np.int64).reshape(high.shape)

    def randbelow(self, high: int) -> int:
        """One uniform integer in [0, high), from ``secrets`` (os.urandom, exact rejection)."""
        if high < 1:
            raise ValueError(f"high must be >= 1; got {high}")
        return secrets.randbelow(high)

    def raw_words(self, count: int) -> WordArray:
        """The next ``count`` unused uniform 64-bit words of the buffer, refilling it as needed."""
        with self._lock:
            if self._pid != os.getpid():
                self._reset()
            if count <= self._buffer.size:
                out, self._buffer = self._buffer[:count], self._buffer[count:]
                return out
            need = count - self._buffer.size
            size = max(need, self._chunk)
            self._chunk = min(2 * self._chunk, limits.MAX_URANDOM_WORDS)
            fresh = np.frombuffer(os.urandom(8 * size), dtype=np.uint64)
            out = np.concatenate([self._buffer, fresh[:need]])
            self._buffer = fresh[need:]
            return out


class SeededRandomSource:
    """Reproducible randomness for tests only: numpy PCG64 for arrays, random.Random for ints.

    Args:
        seed: a non-negative integer seed.
    """

    def __init__(self, seed: int) -> None:
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
            raise ValueError(f"seed must be a non-negative int; got {seed!r}")
        self._generator: np.random.Generator = np.random.Generator(np.random.PCG64(int(seed)))
        self._random: random.Random = random.Random(int(seed))

    def integers(self, high: IntArray) -> IntArray:
        """Independent uniform integers in [0, high) per element (high >= 1), same shape."""
        high = np.asarray(high, dtype=np.int64)
        flat = high.ravel()
        if not flat.size:
            return np.zeros(high.shape, dtype=np.int64)
        if _common_high(flat):
            return self._generator.integers(int(flat[0]), size=high.shape, dtype=np.int64)
        return self._generator.integers(high, dtype=np.int64)

    def randbelow(self, high: int) -> int:
        """One uniform integer in [0, high) from random.Random (exact rejection on bits)."""
        return self._random.randrange(high)

    def raw_words(self, count: int) -> WordArray:
        """``count`` raw 64-bit outputs of the PCG64 stream."""
        return np.asarray(self._generator.bit_generator.random_raw(count), dtype=np.uint64)


def resolve_rng(rng: RandomSource | None) -> RandomSource:
    """Return ``rng``, or a fresh :class:`SystemRandomSource` when it is None."""
    return SystemRandomSource() if rng is None else rng


# --------------------------------------------------------------------------------------------
# Random bits: words, fields, uniform integers below a bound
# --------------------------------------------------------------------------------------------


def words(rng: RandomSource, count: int) -> WordArray:
    """``count`` independent uniform 64-bit words from ``rng``.

    The two built-in sources hand out raw words; any other source is asked for pairs of uniform
    integers in [0, 2^32), which it draws exactly by its own contract.
    """
    if isinstance(rng, (SystemRandomSource, SeededRandomSource)):
        return rng.raw_words(count)
    halves = rng.integers(np.full(2 * count, 2**32, dtype=np.int64)).astype(np.uint64)
    return (halves[:count] << np.uint64(32)) | halves[count:]


def fields(rng: RandomSource, count: int, bits: int) -> IntArray:
    """``count`` independent uniform integers in [0, 2^bits), 1 <= bits <= 63.

    Each word is cut into floor(64/bits) disjoint fields of ``bits`` bits; disjoint bits of a
    uniform word are independent and uniform. Fields left over in the last word are discarded.

    """
    per_word = 64 // bits
    drawn = words(rng, -(-count // per_word))
    if per_word == 1:
        return (drawn >> np.uint64(64 - bits)).view(np.int64)
    shifts = np.arange(0, per_word * bits, bits, dtype=np.uint64)[:, None]
    cut = drawn[None, :] >> shifts
    cut &= np.uint64((1 << bits) - 1)
    return cut.ravel()[:count].view(np.int64)


def narrow_fields(rng: RandomSource, count: int, bits: int) -> IntArray:
    """``count`` independent uniform integers in [0, 2^bits), 1 <= bits <= 63, cut faster.

    Where an 8-, 16- or 32-bit integer holds as many fields per word as ``bits`` bits do (bits
    8, 13-16 or 22-32), the words' memory is read as such integers and their low ``bits`` bits
    kept: disjoint bits of uniform words, so independent and uniform, as in :func:`fields`
    (which cuts other fields from the same words: the two differ under a seed).
    """
    width = next((w for w in (8, 16, 32) if w >= bits), 64)
    if 64 // width != 64 // bits or width == 64:
        return fields(rng, count, bits)
    drawn = words(rng, -(-count * width // 64))
    narrow: IntArray = drawn.view(f"uint{width}")[:count].astype(np.int64)
    return narrow if width == bits else narrow & ((1 << bits) - 1)


def oversample(count: int, rate: float) -> int:
    """Trials to draw so that ``count`` successes at probability ``rate`` are very likely.

    count/rate plus about three binomial standard deviations. Floats only size batches: which
    trials succeed is decided exactly, and the successes are kept in trial order.
    """
    return math.ceil((count + 3.0 * math.sqrt(count) + 8.0) / rate)


def below(rng: RandomSource, bound: int, count: int) -> IntArray:
    """``count`` independent uniform integers in [0, bound) for one bound, 1 <= bound < 2^63.

    Math:
        Fields F of b bits are uniform on [0, 2^b). With L = floor(2^b/bound) bound, the F < L,
        taken in order, are iid uniform on [0, L) (rejection sampling), and F mod bound is then
        exactly uniform on [0, bound) because L is a multiple of bound. b runs from
        bitlength(bound - 1) up to 8 more bits and is the one with the fewest expected bits per
        output, (64/floor(64/b)) 2^b/L counting the unused bits of each word: a bound just above
        a power of two such as 4115 costs 16 bits instead of 26. A batch draws enough fields for
        the acceptance L/2^b; a short batch is topped up.
    """
    if bound == 1:
        return np.zeros(count, dtype=np.int64)
    bits = below_bits(bound)
    if bound == 1 << bits:
        return fields(rng, count, bits)
    limit = (1 << bits) // bound * bound
    kept = np.zeros(0, dtype=np.int64)
    while kept.size < count:
        drawn = fields(rng, oversample(count - kept.size, limit / 2**bits), bits)
        fresh = np.compress(drawn < limit, drawn)[: count - kept.size]
        kept = np.concatenate([kept, fresh]) if kept.size else fresh
    return kept - kept // bound * bound if limit > bound else kept


@functools.lru_cache(maxsize=256)
def below_bits(bound: int) -> int:
    """The field width b >= bitlength(bound - 1) minimising (64/floor(64/b)) 2^b / L."""
    low = (bound - 1).bit_length()
    widths = range(low, min(low + 8, 63) + 1)
    return min(widths, key=lambda b: Fraction(64 << b, 64 // b * ((1 << b) // bound * bound)))
