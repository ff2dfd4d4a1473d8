"""``python -m dpsql.cli``: the ``dpsql`` command without the installed script."""

import sys

from dpsql.cli import main

sys.exit(main())
