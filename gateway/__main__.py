"""``python -m gateway`` is the ``botmux`` command."""

from gateway.cli import main

raise SystemExit(main())
