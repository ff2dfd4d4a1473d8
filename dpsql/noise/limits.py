"""The samplers' numeric limits: int64 ceilings, chain caps, bit widths and batch sizes.

Every sampler module reads these as ``limits.NAME`` at call time, so a test can lower them (with
``monkeypatch.setattr(limits, ...)``) to force the exact Python fallbacks, the tie paths and small
batches. They tune speed and the int64 guards only: every value gives exact samples.
"""

from __future__ import annotations

I64_MAX = 2**63 - 1
# Ceiling for every intermediate int64 value computed in numpy. It equals I64_MAX; tests lower it
# to force the exact Python fallbacks.
ARITH_LIMIT = I64_MAX
# Bernoulli-exp chains (CKS Algorithm 1) longer than this finish in Python; P[K > 64] < 1e-89.
MAX_CHAIN = 64
# Bernoulli(e^-1) reads the chain length K <= EXP1_TERMS from one uniform integer in
# [0, EXP1_TERMS!) (7 bits for 5! = 120); longer chains (P = 1/120) continue vectorised.
EXP1_TERMS = 5
# Geometric counts of Bernoulli(e^-1) successes above this finish in Python; P = e^-64 < 1e-27.
MAX_GEOMETRIC = 64
# Bits per truncated Bernoulli(num/den) comparison; a tie (P = 2^-4) costs one more uniform.
BERNOULLI_BITS = 4
# Samples produced per batch: the working arrays of a batch stay in the CPU caches.
BATCH = 2**16
# os.urandom chunks of SystemRandomSource, in 64-bit words: 4 KiB doubling up to 1 MiB.
MIN_URANDOM_WORDS = 2**9
MAX_URANDOM_WORDS = 2**17
# Parameters whose integers exceed this use the pure-Python samplers: it keeps den * K < 2^63.
MAX_VECTOR_INT = 2**56
# Largest parameters whose samples fit in int64 except with probability < 2 e^-128.
MAX_LAPLACE_SCALE = 2**56
MAX_GAUSSIAN_SIGMA2 = 2**118
# Inversion sampling (dpsql.noise.inversion): a GUIDE_BITS-bit prefix indexes a table of
# 2^GUIDE_BITS buckets; undecided buckets read REFINE_BITS more bits; thresholds are computed with
# GUARD_BITS bits beyond the precision they are compared at.
GUIDE_BITS = 16
REFINE_BITS = 32
GUARD_BITS = 64
# Inversion tables hold the thresholds down to about 2^-TAIL_BITS; R below them all (X beyond the
# table) continues in Python integers.
TAIL_BITS = 48
# The discrete Gaussian is drawn by plain inversion up to this σ, the discrete Laplace below this
# scale; by a staircase envelope above.
DIRECT_SIGMA = 128
DIRECT_SCALE = 256
# Calls for fewer samples use the CKS samplers: building a parameter's tables costs milliseconds
# (cached per parameter), as much as drawing thousands of samples the CKS way.
TABLE_MIN_SIZE = 2**12
