"""The ledger across processes: a race for the last of a budget, and SIGKILL at random points.

The children (``tests/_ledger_worker.py``) answer batches through ``dpsql.connect(...)`` with the
default ledger next to the database, so these tests check the guarantee about answers, not only
about the ledger's own API.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path

import pytest

from _ledger_worker import EXHAUSTED, binding, make_database
from dpsql.budget.accounting import PrivacyCost
from dpsql.budget.ledger import Ledger, default_path

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).resolve().parents[1] / "_ledger_worker.py"
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX processes and SIGKILL")


def _child(mode: str, database: Path, path: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(WORKER), mode, str(database), str(path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENV)


def _ready(child: subprocess.Popen[str]) -> None:
    line = child.stdout.readline() if child.stdout else ""
    assert line == "ready\n", child.communicate()[1]


@pytest.mark.slow
def test_eight_processes_racing_for_three_batches(tmp_path: Path) -> None:
    database = tmp_path / "people.duckdb"
    make_database(database)
    ledger = Ledger(default_path(database))
    ledger.set_total(database.name, PrivacyCost(epsilon=3.0), binding=binding(database))
    go = tmp_path / "go"
    children = [_child("race", database, go) for _ in range(8)]
    for child in children:
        _ready(child)
    go.touch()  # all eight are connected and polling: they check and charge at the same moment
    outcomes = [child.wait(timeout=120) for child in children]
    errors = [child.communicate()[1] for child in children]
    assert sorted(outcomes) == [0, 0, 0] + [EXHAUSTED] * 5, errors
    charges = ledger.history(database.name)
    assert len(charges) == 3 and sum(c.price for c in charges) == 3
    balance = ledger.balance(database.name)
    assert balance.limits[0].spent == 3 and balance.left == 0


@pytest.mark.slow
def test_sigkill_at_random_points_never_leaves_an_answer_without_a_charge(tmp_path: Path) -> None:
    """After every kill: answers written ≤ charges ≤ answers + kills, and the ledger is intact."""
    database = tmp_path / "people.duckdb"
    make_database(database)
    ledger = Ledger(default_path(database))
    ledger.set_total(database.name, PrivacyCost(epsilon=10_000.0), binding=binding(database))
    answers = tmp_path / "answers.txt"
    answers.touch()
    delays = random.Random(20261124)
    kills = 0
    for number in range(20):
        child = _child("loop", database, answers)
        _ready(child)
        if number % 2:  # every other kill comes after this child's first answer, however slow the machine is
            _wait_for_more_answers(answers, _answers_written(answers), child)
        time.sleep(delays.uniform(0.0, 0.3))  # a batch takes some 10-50 ms: kills land at every step of one
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
        kills += 1  # noqa: SIM113 - named for the bound it enters, charges ≤ answers + kills
        assert child.returncode == -signal.SIGKILL, child.communicate()[1]
        child.communicate()
        written = _answers_written(answers)
        charges = ledger.history(database.name)  # opens, checks and rolls back any interrupted transaction
        assert written <= len(charges) <= written + kills
        assert ledger.balance(database.name).limits[0].spent == len(charges) == sum(c.price for c in charges)
    assert written > 0, "no kill came after an answer: the delays are too short to test anything"
    assert ledger.balance(database.name).left == Fraction(10_000) - len(charges)


def _wait_for_more_answers(path: Path, before: int, child: subprocess.Popen[str]) -> None:
    """Poll until the answers file has more lines than ``before`` (the child has answered a batch)."""
    while _answers_written(path) <= before:
        assert child.poll() is None, child.communicate()[1]
        time.sleep(0.005)


def _answers_written(path: Path) -> int:
    """Lines in the answers file, a partly written last line included (it counts as released)."""
    text = path.read_bytes()
    return text.count(b"\n") + (1 if text and not text.endswith(b"\n") else 0)
