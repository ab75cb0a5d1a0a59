"""``python -m table.cli``: the ``dynacommit`` command."""

from table.cli import main

raise SystemExit(main())
