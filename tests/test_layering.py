"""Layering, both ways.

1. The math layers import only numpy and scipy: sqlglot, duckdb and pyarrow stay out.
2. The converse: only the modules listed in ``TOUCHING`` touch data or randomness, each for the
   reason its comment gives. Read from the source (AST) of every module of ``dpsql``:
   data       imports ``duckdb`` or ``dpsql.backends.duckdb``, or calls a backend data method
              (``cell_data``, ``cell_data_sets``, ``marginal_counts``, ``measure_profile``);
   randomness imports ``random``, ``secrets``, ``numpy.random`` or a sampler of ``dpsql.noise``,
              uses ``os.urandom`` or ``np.random``, or calls a mechanism's ``measure``. Naming the
              types ``RandomSource`` (to pass the caller's source along) or ``Noise`` (the noise
              family of a plan) draws nothing and does not count.
   A module doing more than its entry allows fails, and so does an entry that no longer does what
   it allows (so the list stays the honest, minimal one).
"""

from __future__ import annotations

import ast
import subprocess
import sys

from _imports import imported, modules

import dpsql.backends

MATH_MODULES = ["dpsql.matrix", "dpsql.matrix.workloads", "dpsql.matrix.kronvec", "dpsql.matrix.linalg",
                "dpsql.matrix.blas", "dpsql.matrix.partitions",
                "dpsql.planning", "dpsql.planning.planner", "dpsql.planning.plan_cache",
                "dpsql.planning.strategy_cache", "dpsql.planning.accuracy", "dpsql.planning.weights",
                "dpsql.planning.mechanism", "dpsql.planning.noise_forms",
                "dpsql.planning.sum_truncation", "dpsql.strategies", "dpsql.noise",
                "dpsql.residual", "dpsql.residual.queries", "dpsql.residual.basis", "dpsql.residual.planner",
                "dpsql.residual.plus", "dpsql.answers.quantiles", "dpsql.answers.tail_bounds",
                "dpsql.releases", "dpsql.releases.recipes", "dpsql.releases.kept", "dpsql.releases.reduce",
                "dpsql.releases.gls"]
MATH_MODULES += ["dpsql.local", "dpsql.local.strategy", "dpsql.local.baselines", "dpsql.local.variance",
                 "dpsql.local.projection", "dpsql.local.factorization", "dpsql.local.selection", "dpsql.local.quantize",
                 "dpsql.local.layout", "dpsql.local.protocol", "dpsql.local.simulate"]

BLOCKER = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {'sqlglot', 'duckdb', 'pyarrow'}:
            raise ImportError('math layers must not import ' + name)
sys.meta_path.insert(0, Block())
"""

DATA, RANDOMNESS = "data", "randomness"
DATA_METHODS = frozenset({"cell_data", "cell_data_sets", "marginal_counts", "measure_profile"})
RANDOM_MODULES = frozenset({"random", "secrets", "numpy.random", "dpsql.noise"})
#: Names of ``dpsql.noise`` that are types, not draws.
NOISE_TYPES = frozenset({"dpsql.noise.RandomSource", "dpsql.noise.Noise"})
#: Calling a mechanism's ``measure`` draws its noise.
MEASURE_METHODS = frozenset({"measure"})

#: Every module that touches data or randomness, and why it may.
TOUCHING: dict[str, frozenset[str]] = {
    # --- answering: after the charge, scan through the backend and measure with the caller's random source
    "dpsql.engine.measuring.scan": frozenset({DATA}),       # the statement-group route's one scan (cell_data_sets)
    "dpsql.engine.measuring.measure": frozenset({RANDOMNESS}),  # ... and its measurements (mechanism.measure)
    "dpsql.engine.plan.residual_route": frozenset({DATA, RANDOMNESS}),  # ResidualPlanner: marginal_counts, measure
    "dpsql.engine.plan.thresholds": frozenset({DATA}),      # measure_profile; the selectors draw in sum_truncation
    "dpsql.dbapi": frozenset({DATA}),                       # connect opens the chosen backend (rng= only passed along)
    # --- the backends: run the generated queries (exact aggregates; no noise)
    "dpsql.backends.duckdb": frozenset({DATA}),
    "dpsql.backends.choose": frozenset({DATA}),             # opens the backend a connect() argument names
    # --- the noise: exact samplers with OS randomness, and the mechanisms that draw from them
    "dpsql.noise": frozenset({RANDOMNESS}),                 # the package re-exports the samplers
    "dpsql.noise.sources": frozenset({RANDOMNESS}),         # os.urandom / a seeded generator: the random words
    "dpsql.noise.bernoulli": frozenset({RANDOMNESS}),       # exact Bernoulli draws from those words
    "dpsql.noise.inversion": frozenset({RANDOMNESS}),       # exact inversion and the staircase from those words
    "dpsql.noise.laplace": frozenset({RANDOMNESS}),         # the discrete Laplace sampler
    "dpsql.noise.gaussian": frozenset({RANDOMNESS}),        # the discrete Gaussian sampler
    "dpsql.noise.wide": frozenset({RANDOMNESS}),            # both samplers in Python integers beyond int64
    "dpsql.planning.mechanism": frozenset({RANDOMNESS}),             # measure: the matrix mechanism's noise
    "dpsql.residual.planner": frozenset({RANDOMNESS}),      # ResidualPlanner's measurement (discrete Gaussian)
    "dpsql.residual.plus": frozenset({RANDOMNESS}),         # ResidualPlanner+'s measurement
    "dpsql.planning.sum_truncation": frozenset({RANDOMNESS}),  # the threshold selectors' noise (SVT, race to the top)
    "dpsql.local.protocol": frozenset({RANDOMNESS}),        # the local-DP client randomizer (a RandomSource)
    # --- randomness that is not privacy noise: public, seeded, never applied to private data
    "dpsql": frozenset({RANDOMNESS}),                       # __init__ re-exports the noise module; draws nothing
    "dpsql.strategies.hdmm": frozenset({RANDOMNESS}),       # seeded optimizer restarts (the plan depends on the seed)
    "dpsql.strategies.marginals": frozenset({RANDOMNESS}),  # seeded optimizer restarts
    "dpsql.local.factorization": frozenset({RANDOMNESS}),   # seeded starting strategies of the local optimizer
    "dpsql.local.simulate": frozenset({RANDOMNESS}),        # simulated clients' reports (a local-DP simulation tool)
    "dpsql.cli.local": frozenset({RANDOMNESS}),             # `dpsql local simulate --seed`: the simulation's generator
    "dpsql.budget.ledger": frozenset({RANDOMNESS}),                # secrets: the ledger's MAC key, not noise
    # --- tools that read data on purpose, outside the private path
    "dpsql.local.sql": frozenset({DATA, RANDOMNESS}),       # simulates the local protocol on a table's cell counts
    "dpsql.suggest": frozenset({DATA}),                     # `dpsql schema suggest`: drafts a schema from the data
                                                            # (not private; its output says so)
    "dpsql.cli.demo": frozenset({DATA, RANDOMNESS}),        # writes a synthetic demo database from a seeded generator
    "dpsql.server.catalog": frozenset({DATA}),              # its own in-memory DuckDB of the declared schema only
    "dpsql.server.scram": frozenset({RANDOMNESS}),          # SCRAM salts and nonces (os.urandom), never noise
    "dpsql.server.session": frozenset({RANDOMNESS}),        # incident numbers (secrets), never noise
    "dpsql.server.wire": frozenset({RANDOMNESS}),           # the protocol's BackendKeyData (secrets), never noise
}


def test_math_layers_import_without_sql_or_database_packages() -> None:
    code = BLOCKER + "".join(f"import {name}\n" for name in MATH_MODULES)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def touches(source: str) -> frozenset[str]:
    """Whether the module's code touches data and/or randomness (see the module docstring).

    >>> sorted(touches("import numpy as np\\nx = np.random.default_rng(0)"))
    ['randomness']
    >>> sorted(touches("def f(b, t):\\n    return b.cell_data(t, [])"))
    ['data']
    >>> sorted(touches("from dpsql.backends.base import Backend\\nfrom dpsql import errors"))
    []
    """
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        imported: list[str] = []
        if isinstance(node, ast.Import):
            imported = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            imported = [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            imported = [f"{'numpy' if node.value.id == 'np' else node.value.id}.{node.attr}"]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in DATA_METHODS:
                found.add(DATA)
            if node.func.attr in MEASURE_METHODS:
                found.add(RANDOMNESS)
        for name in imported:
            if name.split(".")[0] == "duckdb" or name.startswith("dpsql.backends.duckdb"):
                found.add(DATA)
            if name in NOISE_TYPES:
                continue
            if name == "os.urandom" or any(name == m or name.startswith(m + ".") for m in RANDOM_MODULES):
                found.add(RANDOMNESS)
    return frozenset(found)


def test_only_the_listed_modules_touch_data_or_randomness() -> None:
    found = {name: touches(path.read_text(encoding="utf-8")) for name, path in modules().items()}
    beyond = {name: sorted(kinds - TOUCHING.get(name, frozenset())) for name, kinds in found.items()
              if kinds - TOUCHING.get(name, frozenset())}
    assert not beyond, f"these modules touch data or randomness without a TOUCHING entry saying why: {beyond}"
    stale = {name: sorted(kinds - found.get(name, frozenset())) for name, kinds in TOUCHING.items()
             if kinds - found.get(name, frozenset())}
    assert not stale, f"these TOUCHING entries allow more than the module does (moved or gone?): {stale}"


def imports_of(source: str, package: str) -> list[tuple[str, str]]:
    """What a module imports of ``package`` or below: ``(module, name)`` for ``from module import name``,
    ``(module, "")`` for ``import module``.

    >>> imports_of("from dpsql.backends import Backend\\nimport dpsql.backends.duckdb", "dpsql.backends")
    [('dpsql.backends', 'Backend'), ('dpsql.backends.duckdb', '')]
    """
    return [(module, name) for module, name, level in imported(source) if level == 0 and module.startswith(package)]


def test_the_engine_sees_backends_only_through_the_protocol() -> None:
    """Every module of dpsql.engine imports from dpsql.backends only the package itself, whose names
    are the protocol, its argument and result types (a second backend needs no change to the engine)."""
    engine = {name: path for name, path in modules().items()
              if name == "dpsql.engine" or name.startswith("dpsql.engine.")}
    assert len(engine) > 10
    found = {name: imported for name, path in engine.items()
             if (imported := [m for m, _ in imports_of(path.read_text(encoding="utf-8"), "dpsql.backends")
                              if m != "dpsql.backends"])}
    assert found == {}
    assert set(dpsql.backends.__all__) == {"Backend", "CellData", "MeasureProfile", "Squared", "file_identity"}


#: The engine's phases and what each may import of the engine (its own modules too): each only those below it.
ENGINE_PHASES: dict[str, frozenset[str]] = {
    "dpsql.engine.measuring": frozenset({"dpsql.engine.vocabulary"}),
    "dpsql.engine.plan": frozenset({"dpsql.engine.measuring", "dpsql.engine.vocabulary"}),
    "dpsql.engine.reuse": frozenset({"dpsql.engine.plan", "dpsql.engine.measuring", "dpsql.engine.postprocess",
                                     "dpsql.engine.vocabulary"}),
}


def test_the_engine_phases_import_only_those_below_them() -> None:
    """``measuring`` ← ``plan`` ← ``reuse`` ← the passes at the engine's top (``run``, ``explain``,
    ``request``, ``pipeline``): no phase imports one above it (the engine's docstring has the order)."""
    every = modules()
    assert {phase for phase in ENGINE_PHASES if phase not in every} == set()
    found = {}
    for name, path in every.items():
        phase = next((p for p in ENGINE_PHASES if name == p or name.startswith(p + ".")), None)
        if phase is None:
            continue
        allowed = ENGINE_PHASES[phase] | {phase}
        imports = [f"{m}.{n}" if n else m for m, n in imports_of(path.read_text(encoding="utf-8"), "dpsql.engine")]
        beyond = [m for m in imports if not any(m == a or m.startswith(a + ".") for a in allowed)]
        if beyond:
            found[name] = beyond
    assert found == {}
