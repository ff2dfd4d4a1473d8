"""One BLAS thread while dpsql plans and measures.

The planner's linear algebra is many small dense products and factorisations (per-attribute
Grams of tens to a few thousand rows, inside optimizer loops). A multi-threaded BLAS wakes its
worker threads for each of them and spends more CPU handing work out than doing it: on a 2-core
machine a six-statement batch took 6.1 s of CPU with OpenBLAS's default threads against 1.8 s
with one. :func:`single_threaded` sets every OpenBLAS loaded in the process (NumPy and SciPy each
bring one) to one thread for the duration of a block and restores the previous counts after.

OpenBLAS's own ``*_set_num_threads``/``*_get_num_threads`` entry points are called through
ctypes on the libraries already mapped into the process (``/proc/self/maps``; nothing new is
loaded). Where none is found (another BLAS, another platform) the block runs unchanged. The
setting is process-wide: BLAS calls made by other threads during the block also run on one
thread.
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

#: Symbol prefixes of OpenBLAS builds: the reference name, and SciPy's/NumPy's renamed builds.
_PREFIXES = ("openblas", "scipy_openblas", "scipy_openblas64_")
_lock = threading.Lock()
_depth = 0
_saved: list[tuple[ctypes._CFuncPtr, int]] = []  # type: ignore[name-defined]


@functools.cache
def _controls() -> tuple[tuple[ctypes._CFuncPtr, ctypes._CFuncPtr], ...]:  # type: ignore[name-defined]
    """(getter, setter) of every OpenBLAS mapped into this process (NumPy's and SciPy's loaded first)."""
    import numpy  # noqa: F401
    import scipy.linalg  # noqa: F401

    found = []
    for path in _mapped_openblas():
        try:
            library = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LOCAL)
        except OSError:
            continue
        for prefix in _PREFIXES:
            for suffix in ("", "64_"):
                getter = getattr(library, f"{prefix}_get_num_threads{suffix}", None)
                setter = getattr(library, f"{prefix}_set_num_threads{suffix}", None)
                if getter is not None and setter is not None:
                    getter.restype, setter.argtypes = ctypes.c_int, [ctypes.c_int]
                    found.append((getter, setter))
                    break
            else:
                continue
            break
    return tuple(found)


def _mapped_openblas() -> list[str]:
    """Paths of the OpenBLAS shared libraries mapped into this process (Linux; else none)."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            paths = {line.split(None, 5)[-1].strip() for line in maps if "openblas" in line.lower()}
    except OSError:
        return []
    return sorted(p for p in paths if p.startswith("/") and ".so" in os.path.basename(p))


@contextmanager
def single_threaded() -> Iterator[None]:
    """Run the block with one BLAS thread (re-entrant; the outermost block restores the counts).

    Also a decorator: ``@single_threaded()``.
    """
    global _depth
    with _lock:
        if _depth == 0:
            _saved[:] = [(setter, int(getter())) for getter, setter in _controls()]
            for setter, _ in _saved:
                setter(1)
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                for setter, threads in _saved:
                    setter(threads)
                _saved.clear()


def threads() -> list[int]:
    """The current thread count of every OpenBLAS found (for tests and diagnostics)."""
    return [int(getter()) for getter, _ in _controls()]
