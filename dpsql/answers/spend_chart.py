"""A picture of a privacy budget's spend: the cumulative charge per analyst over time, and the totals.

Reads only the ledger's public records (each charge's time, analyst and price in the budget's unit;
the balance's totals), never data. For analyst ``a`` with charges priced p₁, p₂, … at times
t₁ ≤ t₂ ≤ …, the line is the step function S_a(t) = Σ_{tᵢ ≤ t} pᵢ, drawn through the points
(tₖ, p₁ + … + pₖ); with more than one analyst a line for the whole dataset (all charges) is drawn
too, and each total of the balance (the dataset's, and the analyst's own) is a horizontal line.
matplotlib is the optional extra ``plots``, imported only when drawing (:func:`charts.require`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import datetime
from fractions import Fraction
from typing import TYPE_CHECKING

from dpsql.answers import charts
from dpsql.budget.accounting import UNIT
from dpsql.budget.records import Balance, Charge

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: The label of the charges made without an analyst (on the dataset's budget alone).
NO_ANALYST = "no analyst"
#: The label of the line of every charge together, drawn when more than one analyst has charged.
EVERYONE = "all analysts"


def cumulative(charges: Sequence[Charge]) -> dict[str, list[tuple[datetime, Fraction]]]:
    """Each analyst's running total: label → [(time of the k-th charge, p₁ + … + pₖ)], oldest first,
    in the order the analysts first charged; with more than one analyst also :data:`EVERYONE`."""
    ordered = sorted(charges, key=lambda charge: charge.id)
    lines: dict[str, list[tuple[datetime, Fraction]]] = {}
    for charge in ordered:
        points = lines.setdefault(charge.analyst or NO_ANALYST, [])
        points.append((datetime.fromisoformat(charge.time), (points[-1][1] if points else Fraction(0)) + charge.price))
    if len(lines) > 1:
        everyone: list[tuple[datetime, Fraction]] = []
        for charge in ordered:
            everyone.append((datetime.fromisoformat(charge.time),
                             (everyone[-1][1] if everyone else Fraction(0)) + charge.price))
        lines[EVERYONE] = everyone
    return lines


def draw(charges: Sequence[Charge], balance: Balance, path: str | os.PathLike[str] | None = None) -> Figure:
    """The spend over time: one step line per analyst (:func:`cumulative`), and a dotted horizontal line
    per total of ``balance``; saved to ``path`` (PNG, SVG, PDF by its ending) when given.

    Raises:
        InterfaceError: matplotlib is not installed.
    """
    charts.require()
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter
    from matplotlib.figure import Figure

    unit = UNIT[balance.family]
    figure = Figure(figsize=(9, 4.5), layout="constrained")
    ax = figure.subplots()
    for label, points in cumulative(charges).items():
        ax.plot([time for time, _ in points], [float(spent) for _, spent in points], drawstyle="steps-post",
                marker="o", label=label, linestyle="--" if label == EVERYONE else "-")
    for limit in balance.limits:
        ax.axhline(float(limit.total), color="black", linestyle=":", label=f"total of the {limit.scope}")
    ax.set_ylim(bottom=0)
    ax.set_ylabel(f"{unit} spent (cumulative)")
    ax.set_xlabel("time of the charge (UTC)")
    ax.set_title(f"privacy budget of dataset '{balance.dataset}': {len(charges)} charge(s)", loc="left", fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    locator = AutoDateLocator()
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(ConciseDateFormatter(locator))
    if path is not None:
        figure.savefig(os.fspath(path), dpi=120)
    return figure
