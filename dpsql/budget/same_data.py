"""One set of data, one budget: a dataset is not bound, unless the owner says so, to the data another
dataset of the same ledger is bound to. Two datasets on one database file would keep two budgets
on the same people, and the caps the owner set on one would not apply to the other; ``rebind``
(``dpsql budget set --rebind``) records that a second budget is meant. Datasets without a
database identity (in-memory data) bind nothing and never share; datasets in two ledger files
cannot be compared.
"""

from __future__ import annotations

from pathlib import Path

from dpsql.budget import ledger_format as fmt
from dpsql.budget.records import Binding
from dpsql.errors import ProgrammingError


def check_same_data(books: fmt.Books, dataset: str, binding: Binding, *, rebind: bool, ledger: Path) -> str | None:
    """The other dataset now bound to ``binding``'s data, if any; ProgrammingError for one without ``rebind``."""
    if not binding.database:
        return None
    rows = books.rows("SELECT dataset FROM actions AS a WHERE analyst = '' AND schema != '' AND database = ? AND "
                      "dataset != ? AND id = (SELECT MAX(id) FROM actions WHERE dataset = a.dataset AND analyst = '' "
                      "AND schema != '') ORDER BY id LIMIT 1", (binding.database, dataset))
    if not rows:
        return None
    shared = str(rows[0][0])
    if not rebind:
        raise ProgrammingError(
            f"{binding.data} is already bound to dataset '{shared}' in ledger '{ledger}'; a second dataset on the "
            "same data would keep a second budget, and the caps set on one would not apply to the other. Nothing was "
            f"set. Set the total of dataset '{shared}' (--dataset {shared}), or add --rebind (rebind=True) if a "
            "second budget on these data is meant.")
    return shared
