"""Hypothesis profiles: ``ci`` (deterministic, 60 examples) when $CI is set, else ``dev``."""

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None, max_examples=60)
settings.register_profile("dev", deadline=None)
settings.load_profile("ci" if "CI" in os.environ else "dev")
