"""The reuse contract (``dpsql.engine.reuse.reuse``), as properties over random sequences of releases and
statements (Hypothesis), end to end through the DB-API:

1. Monotone: once kept measurements answer a statement, they keep answering it, and adding a
   release never increases the variance of any of its answers.
2. Never worse than paid for: a statement executed at a cost is answered at least as accurately as
   the same statement measured at that cost without reuse; it is free only when the kept answer
   already is, and then charges nothing.
3. Scoped: an analyst reuses her own releases only, unless the data owner shares them; another
   analyst's release numbers are never shown.
4. Visible: EXPLAIN names the path of every statement and the stddev of each path.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dpsql
import dpsql.cli
from dpsql.budget.accounting import Budget, PrivacyCost
from dpsql.budget.ledger import Binding, Ledger, default_path
from dpsql.engine.plan.prepare import read_batch
from dpsql.engine.reuse.free import Split, split_batch
from dpsql.noise import SeededRandomSource
from dpsql.releases.kept import KeptMeasurement
from dpsql.schema import Schema

#: An Adult-like table: joint cells of several releases quickly exceed what one dense pool can hold.
SCHEMA = Schema.load({"tables": {"people": {"columns": {
    "age": {"type": "integer", "lower": 0, "upper": 84, "bin_width": 5, "resolution": 1},
    "sex": {"type": "categorical", "values": [0, 1]},
    "race": {"type": "categorical", "values": [0, 1, 2, 3, 4]},
    "education": {"type": "categorical", "values": list(range(16))},
    "income": {"type": "numeric", "lower": 0, "upper": 1000},
}}}})
ROWS = 3000

#: Statements a sequence draws from: histograms, marginals, totals, ranges, bands, filtered counts and sums.
STATEMENTS = (
    "SELECT sex, COUNT(*) AS n FROM people GROUP BY sex",
    "SELECT age, COUNT(*) AS n FROM people GROUP BY age",
    "SELECT age, sex, COUNT(*) AS n FROM people GROUP BY age, sex",
    "SELECT education, sex, COUNT(*) AS n FROM people GROUP BY education, sex",
    "SELECT COUNT(*) AS n FROM people",
    "SELECT COUNT(*) AS n FROM people WHERE age BETWEEN 23 AND 47",
    "SELECT race, COUNT(*) AS n FROM people WHERE sex = 1 GROUP BY race",
    "SELECT COUNT(*) AS n FROM people WHERE sex = 0 AND age < 30",
    "SELECT sex, SUM(income) AS s FROM people GROUP BY sex",
    "SELECT SUM(income) AS s FROM people",
    "SELECT CASE WHEN age < 30 THEN 0 WHEN age < 50 THEN 1 ELSE 2 END AS band, sex, COUNT(*) AS n FROM people "
    "GROUP BY band, sex",
)
COSTS = (0.05, 0.3, 1.0)
releases = st.lists(st.tuples(st.integers(0, len(STATEMENTS) - 1), st.sampled_from(COSTS), st.booleans()),
                    min_size=1, max_size=6)


def _table() -> pa.Table:
    rng = np.random.default_rng(5)
    return pa.table({"age": rng.integers(17, 85, ROWS), "sex": rng.integers(0, 2, ROWS),
                     "race": rng.integers(0, 5, ROWS), "education": rng.integers(0, 16, ROWS),
                     "income": np.round(rng.uniform(0, 1000, ROWS), 2)})


DATA = _table()


def _connect(seed: int) -> dpsql.Connection:
    con = duckdb.connect()
    con.register("source", DATA)
    con.execute("CREATE TABLE people AS SELECT * FROM source")
    return dpsql.connect(con, schema=SCHEMA, budget=Budget(epsilon=1000.0), rng=SeededRandomSource(seed))


def _stddevs(table: pa.Table) -> np.ndarray:
    return np.concatenate([table[name].to_numpy(zero_copy_only=False) for name in table.column_names
                           if name.endswith("_stddev")]).astype(float)


def _meta(table: pa.Table) -> dict[str, object]:
    return json.loads(table.schema.metadata[b"dpsql"])


def _split(sql: str, kept: Sequence[KeptMeasurement]) -> Split:
    """The statement of ``sql`` split against ``kept`` (no cost: free whenever the kept measurements answer it)."""
    return split_batch(read_batch(sql, None, SCHEMA), SCHEMA, kept)


def _kept_variances(connection: dpsql.Connection) -> dict[int, np.ndarray]:
    """Per statement of STATEMENTS the kept measurements answer, every variance they give it."""
    kept = connection.releases.kept()
    found = {}
    for index, sql in enumerate(STATEMENTS):
        split = _split(sql, kept)
        if 0 in split.free:
            found[index] = np.concatenate([a.variances for a in split.free[0].values()])
    return found


@settings(max_examples=25, deadline=None)
@given(sequence=releases)
def test_adding_a_release_never_increases_a_variance_the_store_gives(sequence: list[tuple[int, float, bool]]) -> None:
    connection = _connect(seed=len(sequence))
    cursor = connection.cursor()
    before: dict[int, np.ndarray] = {}
    for statement, epsilon, reuse in sequence:
        cursor.execute(STATEMENTS[statement], epsilon=epsilon, reuse=reuse)
        after = _kept_variances(connection)
        for index, variances in before.items():
            assert index in after, f"{STATEMENTS[index]!r} was answered from the releases and no longer is"
            assert np.all(after[index] <= variances * (1 + 1e-6) + 1e-9), STATEMENTS[index]
        before = after


@settings(max_examples=25, deadline=None)
@given(sequence=releases, probe=st.integers(0, len(STATEMENTS) - 1), epsilon=st.sampled_from(COSTS))
def test_an_answer_is_never_worse_than_what_its_cost_buys_without_reuse(
        sequence: list[tuple[int, float, bool]], probe: int, epsilon: float) -> None:
    connection = _connect(seed=7)
    cursor = connection.cursor()
    for statement, cost, reuse in sequence:
        cursor.execute(STATEMENTS[statement], epsilon=cost, reuse=reuse)
    spent = connection.budget.spent
    cursor.execute(STATEMENTS[probe], epsilon=epsilon)
    answered = cursor.fetch_arrow_table()
    alone = _connect(seed=8).cursor().execute(STATEMENTS[probe], epsilon=epsilon, reuse=False).fetch_arrow_table()
    assert np.all(_stddevs(answered) <= _stddevs(alone) * (1 + 1e-6))
    free = str(_meta(answered)["budget_spent"]).startswith("nothing")
    assert connection.budget.spent == pytest.approx(spent + (0.0 if free else epsilon))


def test_a_free_answer_far_worse_than_its_cost_buys_is_measured_and_combined() -> None:
    """The new user's case: a total derived from an age × sex table at ε = 0.05 is no answer to
    COUNT(*) at ε = 0.5: it is measured at ε = 0.5 and combined (better than ε = 0.5 alone)."""
    cursor = _connect(seed=11).cursor()
    cursor.execute("SELECT age, sex, COUNT(*) AS n FROM people GROUP BY age, sex", epsilon=0.05)
    kept = cursor.explain("SELECT COUNT(*) AS n FROM people", epsilon=0.5)
    found = re.search(r"Statement 1: measured and combined with release #1 \(kept alone: stddev ([\d.]+); measured at "
                      r"ε=0.5 without reuse: ([\d.]+); combined: ([\d.]+); statement 1 of the plan below\)", kept)
    assert found is not None, kept
    alone, paid, combined = (float(found.group(k)) for k in (1, 2, 3))
    assert combined <= paid < alone and paid == pytest.approx(2.799, abs=1e-3)  # discrete Laplace at scale 2
    answered = cursor.execute("SELECT COUNT(*) AS n FROM people", epsilon=0.5).fetch_arrow_table()
    assert answered["n_stddev"][0].as_py() == pytest.approx(combined, rel=1e-3)
    assert _meta(answered)["reuse"]["answered_by_releases"] == [1, 2]
    cheap = cursor.explain("SELECT COUNT(*) AS n FROM people", epsilon=0.001)
    assert "Statement 1: free (answered by release #1, #2, stddev" in cheap and "Cost: nothing" in cheap


# ------------------------------------------------------------------------------------------- scope
def _database(tmp_path: Path) -> Path:
    path = tmp_path / "people.duckdb"
    with duckdb.connect(str(path)) as con:
        con.register("source", DATA)
        con.execute("CREATE TABLE people AS SELECT * FROM source")
    ledger = Ledger(default_path(path))
    ledger.set_total(path.name, PrivacyCost(epsilon=50.0), binding=Binding.of(SCHEMA, path))
    for analyst in ("alice", "carol"):
        ledger.set_total(path.name, PrivacyCost(epsilon=20.0), analyst=analyst)
    return path


@settings(max_examples=8, deadline=None)
@given(sequence=releases, probe=st.integers(0, len(STATEMENTS) - 1))
def test_releases_stay_within_the_analyst_who_paid_unless_the_owner_shares_them(
        tmp_path_factory: pytest.TempPathFactory, sequence: list[tuple[int, float, bool]], probe: int) -> None:
    path = _database(tmp_path_factory.mktemp("scope"))
    ledger = Ledger(default_path(path))
    with dpsql.connect(path, schema=SCHEMA, analyst="alice") as alice:
        for statement, cost, reuse in sequence:
            alice.cursor().execute(STATEMENTS[statement], epsilon=cost, reuse=reuse)
        mine = {r.id for r in ledger.releases(path.name)}
        own_text = alice.cursor().explain(STATEMENTS[probe], epsilon=0.001)
    with dpsql.connect(path, schema=SCHEMA, analyst="carol") as carol:
        assert carol.releases.kept() == []
        text = carol.cursor().explain(STATEMENTS[probe], epsilon=0.001)
        assert "free" not in text and "combined" not in text
    ledger.set_sharing(path.name, True)
    with dpsql.connect(path, schema=SCHEMA, analyst="carol") as carol:
        assert {m.release for m in carol.releases.kept()} <= mine and all(m.shared for m in carol.releases.kept())
        text = carol.cursor().explain(STATEMENTS[probe], epsilon=0.001)
        assert not any(f"#{number}" in text for number in mine)
        assert ("free" in text) == ("Statement 1: free" in own_text)
        if "Statement 1: free" in text:
            table = carol.cursor().execute(STATEMENTS[probe], epsilon=0.001).fetch_arrow_table()
            reused = _meta(table)["reuse"]
            assert reused["answered_by_releases"] == [] and reused["shared_releases"] >= 1
            assert not any(f"#{number}" in str(_meta(table)) for number in mine)
    ledger.set_sharing(path.name, False)
    with dpsql.connect(path, schema=SCHEMA, analyst="carol") as carol:
        assert carol.releases.kept() == []


def test_a_capped_analyst_gets_no_other_analysts_answers(tmp_path: Path) -> None:
    """The audit's case: carol, her cap spent, asks what alice paid for: refused, not answered."""
    path = _database(tmp_path)
    Ledger(default_path(path)).set_total(path.name, PrivacyCost(epsilon=0.2), analyst="carol")
    sql = "SELECT age, sex, COUNT(*) AS n FROM people GROUP BY age, sex"
    with dpsql.connect(path, schema=SCHEMA, analyst="alice") as alice:
        alice.cursor().execute(sql, epsilon=1.0)
    with dpsql.connect(path, schema=SCHEMA, analyst="carol") as carol:
        carol.cursor().execute("SELECT COUNT(*) AS n FROM people", epsilon=0.2)
        with pytest.raises(dpsql.BudgetExhaustedError):
            carol.cursor().execute(sql, epsilon=1.0)
        with pytest.raises(dpsql.BudgetExhaustedError):
            carol.cursor().execute(sql, epsilon=0.001)


# ------------------------------------------------------------------------------------------- visible
def test_why_a_measurement_is_not_kept_is_said_in_explain_and_in_budget_show(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    schema = Schema.load({"tables": {"people": {"columns": {"day": {"type": "integer", "lower": 0, "upper": 1499}}}}})
    path = tmp_path / "people.duckdb"
    with duckdb.connect(str(path)) as con:
        con.execute("CREATE TABLE people AS SELECT (i * 7) % 1500 AS day FROM range(3000) t(i)")
    Ledger(default_path(path)).set_total(path.name, PrivacyCost(epsilon=5.0), binding=Binding.of(schema, path))
    sql = "SELECT day, COUNT(*) AS n FROM people GROUP BY day"
    with dpsql.connect(path, schema=schema) as connection:
        text = connection.cursor().explain(sql, epsilon=1.0)
        assert ("Reuse: count over day(1501) will not be kept: 1,501 cells, more than "
                "dpsql.engine.reuse.reuse.REUSE_CELLS = 1,024.") in text
        connection.cursor().execute(sql, epsilon=1.0)
    dpsql.cli.main(["budget", "show", "--db", str(path)])
    shown = capsys.readouterr().out
    assert ("not kept for reuse: count over day(1501): 1,501 cells, more than dpsql.engine.reuse.reuse.REUSE_CELLS"
            in shown)
    assert "kept releases: each analyst reuses only her own" in shown
    dpsql.cli.main(["budget", "set", "--db", str(path), "--share-releases"])
    assert "kept releases: shared by every analyst of the dataset" in capsys.readouterr().out
    assert Ledger(default_path(path)).shares_releases(path.name)


def test_a_pool_holds_every_release_so_it_is_never_worse_than_any_one_of_them() -> None:
    """The audit's case: COUNT(*) after a 51-cell education × sex table at ε = 0.05 and a median's
    86 prefix counts of age at ε = 1 was answered from the first alone (its joint cells with the
    second were too many), ± 85, while COUNT(*) WHERE age BETWEEN 0 AND 84 (the second) was ± 15.
    Reduced onto the statement's cells every release fits: the total uses both, and is at least as
    accurate as from either alone."""
    cursor = _connect(seed=21).cursor()
    cursor.execute("SELECT education, sex, COUNT(*) AS n FROM people GROUP BY education, sex", epsilon=0.05)
    cursor.execute("SELECT MEDIAN(age) AS m FROM people", epsilon=1.0)
    kept = cursor.connection.releases.kept()
    total = _split("SELECT COUNT(*) AS n FROM people", kept).free[0]
    alone = {release: _split("SELECT COUNT(*) AS n FROM people",
                             [m for m in kept if m.release == release]).free[0] for release in (1, 2)}
    variance = float(next(iter(total.values())).variances[0])
    for answers in alone.values():
        assert variance <= float(next(iter(answers.values())).variances[0]) * (1 + 1e-6)
    assert np.sqrt(variance) < 10  # the old pool: ± 202, the first release's √51 cells at ε = 0.05


def test_the_work_bound_leaves_out_newer_layouts_says_so_and_keeps_what_pooled_before(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With room for one small reduction, COUNT(*) pools the oldest layout (sex), leaves the newer
    age × sex table out (EXPLAIN counts it) and stays exactly as accurate as before it."""
    import dpsql.engine.reuse.reuse as reuse
    from dpsql.releases.reduce import reduction_work

    monkeypatch.setattr(reuse, "MAX_POOL_WORK", reduction_work(3))
    cursor = _connect(seed=31).cursor()
    cursor.execute("SELECT sex, COUNT(*) AS n FROM people GROUP BY sex", epsilon=0.5)
    before = _split("SELECT COUNT(*) AS n FROM people", cursor.connection.releases.kept()).free[0]
    cursor.execute("SELECT age, sex, COUNT(*) AS n FROM people GROUP BY age, sex", epsilon=1.0)
    split = _split("SELECT COUNT(*) AS n FROM people", cursor.connection.releases.kept())
    assert split.left_out == {0: 1} and split.releases[0].own == (1,)
    assert [a.variances for a in split.free[0].values()] == [a.variances for a in before.values()]
    text = cursor.explain("SELECT COUNT(*) AS n FROM people", epsilon=0.001)
    assert ("1 kept measurement(s) left out of its pool by the work bound (dpsql.engine.reuse.reuse.MAX_POOL_WORK)"
            in text)
    paid = cursor.execute("SELECT COUNT(*) AS n FROM people", epsilon=1.0).fetch_arrow_table()  # its own joins
    assert _meta(paid)["reuse"]["answered_by_releases"] == [1, 3]
