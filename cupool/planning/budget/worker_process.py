"""A worker process of ``auto`` (:mod:`.parallel`): ``python -m
cupool.planning.budget.worker_process FD INPUTS`` plans the tasks it receives on the
connection of file descriptor ``FD`` from the planning inputs pickled in file ``INPUTS``
(:func:`~.parallel.serve`), until it is killed or its parent goes."""

from __future__ import annotations

import sys
from multiprocessing.connection import Connection


def main(argv: list[str]) -> int:
    from cupool.planning.budget.parallel import serve

    try:
        serve(Connection(int(argv[1])), argv[2])
    except KeyboardInterrupt:  # the terminal's interrupt reaches the whole group
        return 130
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
