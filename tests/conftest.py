"""Hypothesis profiles: ``ci`` (deterministic, 60 examples) when $CI is set, else ``dev``, neither timed; and a
private strategy cache, so that tests keep optimized strategies out of the user's ~/.cache."""

import os
import tempfile

from hypothesis import HealthCheck, settings

# No wall-clock checks (issue 14 item 12): neither per-example deadlines nor the too_slow health check.
settings.register_profile("ci", derandomize=True, deadline=None, max_examples=60,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if "CI" in os.environ else "dev")

os.environ.setdefault("DPSQL_CACHE_DIR", tempfile.mkdtemp(prefix="dpsql-test-cache-"))
