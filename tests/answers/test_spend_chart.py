"""The picture of a budget's spend: each analyst's cumulative charge over time (the drawn lines' y values are the
running sums of the ledger's prices), the dataset's line when several analysts charge, and the totals."""

from __future__ import annotations

import sys
from datetime import datetime
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpsql.answers import spend_chart
from dpsql.budget.accounting import PrivacyCost
from dpsql.budget.ledger import BatchRecord, Binding, Charge, Ledger
from dpsql.errors import InterfaceError
from dpsql.schema import Schema

SCHEMA = {"tables": {"people": {"columns": {"age": {"type": "integer", "lower": 0, "upper": 99}}}}}
BOUND = Binding.of(Schema.load(SCHEMA))
BATCH = BatchRecord.of("SELECT COUNT(*) FROM people", None, PrivacyCost(epsilon=0.1), "matrix mechanism")
#: Who charges what, in order: ε per charge, alternating analysts.
SPENDS = [("ana", 0.5), ("bo", 0.25), ("ana", 0.125), ("bo", 1.0), ("ana", 0.5)]


def _ledger(tmp_path: Path, spends: list[tuple[str, float]]) -> Ledger:
    ledger = Ledger(tmp_path / "people.dpsql-ledger")
    ledger.set_total("people", PrivacyCost(epsilon=10.0), binding=BOUND)
    for analyst in sorted({analyst for analyst, _ in spends}):
        ledger.set_total("people", PrivacyCost(epsilon=4.0), analyst=analyst)
    for analyst, epsilon in spends:
        ledger.charge("people", PrivacyCost(epsilon=epsilon), BATCH, analyst=analyst, binding=BOUND)
    return ledger


def test_each_analyst_is_a_line_of_cumulative_charges_and_each_total_a_horizontal_line(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    ledger = _ledger(tmp_path, SPENDS)
    charges = ledger.history("people")
    figure = spend_chart.draw(charges, ledger.balance("people"), tmp_path / "spend.png")
    assert (tmp_path / "spend.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    (ax,) = figure.get_axes()
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines["ana"].get_ydata()) == [0.5, 0.625, 1.125]
    assert list(lines["bo"].get_ydata()) == [0.25, 1.25]
    assert list(lines["all analysts"].get_ydata()) == [0.5, 0.75, 0.875, 1.875, 2.375]
    assert list(lines["all analysts"].get_xdata()) == [datetime.fromisoformat(charge.time) for charge in charges]
    assert list(lines["total of the dataset 'people'"].get_ydata()) == [10.0, 10.0]  # axhline: from left to right
    assert ax.get_ylabel() == "ε spent (cumulative)"
    # one analyst's view: her line and both totals that bind her
    figure = spend_chart.draw(ledger.history("people", "bo"), ledger.balance("people", "bo"))
    assert [(line.get_label(), list(line.get_ydata())) for line in figure.get_axes()[0].get_lines()] == [
        ("bo", [0.25, 1.25]), ("total of the dataset 'people'", [10.0, 10.0]),
        ("total of the analyst 'bo' on dataset 'people'", [4.0, 4.0])]


def test_a_budget_without_charges_is_its_total_alone(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    ledger = _ledger(tmp_path, [])
    figure = spend_chart.draw(ledger.history("people"), ledger.balance("people"), tmp_path / "spend.svg")
    assert [line.get_label() for line in figure.get_axes()[0].get_lines()] == ["total of the dataset 'people'"]
    assert (tmp_path / "spend.svg").read_text(encoding="utf-8").lstrip().startswith("<?xml")


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["ana", "bo", "cy"]), st.integers(1, 64)), min_size=1, max_size=12))
def test_the_lines_are_the_running_sums_of_each_analysts_prices(spends: list[tuple[str, int]]) -> None:
    """cumulative() reads only the records: the k-th point of analyst a is Σ of her first k prices, exactly."""
    charges = [Charge(id=number, time=f"2026-01-01T00:00:{number:02d}+00:00", dataset="people",
                      analyst=analyst, batch_hash="", sql_hash="", mechanism="",
                      cost=PrivacyCost(epsilon=price / 64), price=Fraction(price, 64))
               for number, (analyst, price) in enumerate(spends)]
    lines = spend_chart.cumulative(charges)
    analysts = list(dict.fromkeys(analyst for analyst, _ in spends))
    assert list(lines) == analysts + (["all analysts"] if len(analysts) > 1 else [])
    for analyst in analysts:
        prices = [Fraction(price, 64) for who, price in spends if who == analyst]
        assert [spent for _, spent in lines[analyst]] == [sum(prices[:k + 1]) for k in range(len(prices))]
    if len(analysts) > 1:
        assert lines["all analysts"][-1][1] == sum(Fraction(price, 64) for _, price in spends)


def test_without_matplotlib_the_error_says_how_to_install_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = _ledger(tmp_path, SPENDS[:1])
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if it were not installed
    with pytest.raises(InterfaceError, match=r'pip install "dpsql\[plots\]"'):
        spend_chart.draw(ledger.history("people"), ledger.balance("people"))
