"""``python -m ctxcache.cli``: the ``ctxcache`` command (ctxcache.cli.commands.main), its exit status the process's."""

from __future__ import annotations

import sys

from .commands import main

sys.exit(main())
