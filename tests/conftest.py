import os
import tempfile
"""Hypothesis profiles: ``ci`` (deterministic, 60 examples) when $CI is set, else ``dev``."""

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None, max_examples=60)
settings.register_profile("dev", deadline=None)
settings.load_profile("ci" if "CI" in os.environ else "dev")


# Optimized strategies are cached on disk; tests keep theirs out of the user's ~/.cache.
os.environ.setdefault("DPSQL_CACHE_DIR", tempfile.mkdtemp(prefix="dpsql-test-cache-"))
