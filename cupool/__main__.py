"""``python -m cupool``: the same as the ``cupool`` command."""

from cupool.cli import run

run()
