"""Hypothesis profiles: ``ci`` (deterministic, 60 examples), the default, so that the README's test command passes
or fails the same way on every run; ``dev`` (random examples, to explore) with $DPSQL_HYPOTHESIS=dev; neither timed.
And a private strategy cache per test process, so that tests keep optimized strategies out of the user's ~/.cache
and pytest-xdist workers out of each other's. OpenBLAS runs on whatever kernels it picks for the CPU: the tests hold
under every one (.ci/run runs the seeded ones again under two others)."""

import atexit
import os
import shutil
import tempfile

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
