"""Hypothesis profiles: ``ci`` (deterministic, 60 examples), the default, so that the README's test command passes
or fails the same way on every run; ``dev`` (random examples, to explore) with $DPSQL_HYPOTHESIS=dev; neither timed.
And a private strategy cache, so that tests keep optimized strategies out of the user's ~/.cache."""

import atexit
import os
import shutil
import tempfile

# OpenBLAS picks its kernels by CPU; on AVX-512 machines (SkylakeX kernels) a few seeded answers round differently
# in the last bits of a noise scale, which moves a discrete sampler's draw by whole units. Until noise scales are
# made independent of BLAS rounding, the suite runs on the Haswell kernels everywhere (set before numpy loads).
os.environ.setdefault("OPENBLAS_CORETYPE", "Haswell")

from hypothesis import HealthCheck, settings

# No wall-clock checks (issue 14 item 12): neither per-example deadlines nor the too_slow health check.
settings.register_profile("ci", derandomize=True, deadline=None, max_examples=60,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("dev" if os.environ.get("DPSQL_HYPOTHESIS") == "dev" else "ci")

# A private cache per test process: under pytest-xdist each worker has its own (the controller's would otherwise be
# inherited by every worker through the environment, and a strategy one worker cached would change another's plans).
_worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
if os.environ.get("_DPSQL_TEST_CACHE_OWNER") != _worker:
    os.environ["_DPSQL_TEST_CACHE_OWNER"] = _worker
    os.environ["DPSQL_CACHE_DIR"] = tempfile.mkdtemp(prefix=f"dpsql-test-cache-{_worker}-")
    atexit.register(shutil.rmtree, os.environ["DPSQL_CACHE_DIR"], ignore_errors=True)
