"""The command line: ``main(argv) -> int``, the only place touching argv, stdout and exit codes.

Exit codes: 0 success; 1 a well-formed question with a negative answer (the plan is
invalid; no plan fits the budget); 2 bad input, with one line on stderr naming the
item and the value. ``--json`` prints exactly one JSON object on stdout.

Every command is ``cmd_<name>(args, stdout) -> int``: one call into the floors below
(:mod:`cupool.planning`, :mod:`cupool.io`, :mod:`cupool.app`, ...), its result printed.
Modules: :mod:`.parser` (argparse, every command's arguments), :mod:`.common` (exit codes,
printing, shared argument helpers), and the commands grouped by what they work on —
:mod:`.plans` (plan, validate, simulate), :mod:`.traces` (info, convert, capture, viz),
:mod:`.apps` (replay, demo, stress, selftest), :mod:`.share` (share, broker).
"""

from __future__ import annotations

import contextlib
import sys

from cupool.cli.apps import cmd_demo, cmd_replay, cmd_selftest, cmd_stress
from cupool.cli.common import EXIT_BAD_INPUT, EXIT_NO, EXIT_OK
from cupool.cli.parser import build_parser
from cupool.cli.plans import cmd_plan, cmd_simulate, cmd_validate
from cupool.cli.share import cmd_broker, cmd_share
from cupool.cli.traces import cmd_capture, cmd_convert, cmd_info, cmd_viz
from cupool.errors import CupoolError

COMMANDS = {"plan": cmd_plan, "validate": cmd_validate, "info": cmd_info,
            "simulate": cmd_simulate, "replay": cmd_replay, "convert": cmd_convert,
            "capture": cmd_capture, "viz": cmd_viz, "demo": cmd_demo, "stress": cmd_stress,
            "selftest": cmd_selftest, "share": cmd_share, "broker": cmd_broker}
"""Command name -> ``cmd(args, stdout) -> exit code``."""


def main(argv: list[str] | None = None, stdout=None, stderr=None) -> int:
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    try:
        with contextlib.redirect_stdout(stdout):  # --help prints where the caller asked
            args = build_parser().parse_args(argv)
        return COMMANDS[args.command](args, stdout)
    except CupoolError as exc:
        print(f"cupool: error: {exc}", file=stderr)
        return EXIT_BAD_INPUT
    except SystemExit as exc:  # --help
        return int(exc.code or 0)


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())


__all__ = ["COMMANDS", "EXIT_BAD_INPUT", "EXIT_NO", "EXIT_OK", "main", "run"]
