"""Hypothesis profiles: ``ci`` (deterministic, 60 examples) when $CI is set, else ``dev``; and a
private strategy cache, so that tests keep optimized strategies out of the user's ~/.cache."""

import os
import tempfile

from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None, max_examples=60)
settings.register_profile("dev", deadline=None)
settings.load_profile("ci" if "CI" in os.environ else "dev")

os.environ.setdefault("DPSQL_CACHE_DIR", tempfile.mkdtemp(prefix="dpsql-test-cache-"))
