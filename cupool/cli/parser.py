"""The argument parser of every ``cupool`` command, and the argparse types that quote the bad
text in their one-line complaint."""

from __future__ import annotations

import argparse
import math

from cupool.cli.common import BLOCKS_SOLVER
from cupool.errors import CupoolError
from cupool.planning import SOLVER_NAMES


class UsageError(CupoolError):
    """argparse's complaint, turned into our one-line bad-input error."""


class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(f"{self.prog}: {message}")


def number(kind, minimum, what, exclusive=False):
    """An argparse type: a finite ``kind`` (int or float) >= ``minimum`` (> when
    ``exclusive``); the message quotes the bad text (``(='-1') must be an integer >= 0``)."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"(={text!r}) is not {what}") from None
        if not math.isfinite(value) or value < minimum or (exclusive and value == minimum):
            relation = ">" if exclusive else ">="
            raise argparse.ArgumentTypeError(f"(={text!r}) must be {what} {relation} {minimum}")
        return value

    return parse


positive_seconds = number(float, 0, "a number of seconds", exclusive=True)
non_negative_float = number(float, 0, "a number")
positive_int = number(int, 1, "an integer")
non_negative_int = number(int, 0, "an integer")
positive_minutes = number(float, 0, "a number of minutes", exclusive=True)


def model_names() -> tuple[str, ...]:
    from cupool.capture import MODEL_NAMES

    return MODEL_NAMES


def policy_names() -> tuple[str, ...]:
    from cupool.planning.budget import POLICY_NAMES

    return POLICY_NAMES


WORKERS_HELP = ("processes the auto budget policy plans its members in (default 0: one per "
                "CPU on traces of 2000+ buffers, else 1: this one only; the plan is the same)")
"""``--workers`` of ``plan`` and ``simulate``."""


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="cupool", description="Planned GPU memory for repeating workloads.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    p = commands.add_parser("plan", help="plan offsets for every buffer of a trace")
    p.add_argument("trace", nargs="+", help="trace v1 .json/.json.gz or MiniMalloc .csv "
                   "(several only with --solver blocks: models sharing one pool)")
    p.add_argument("--solver", default="auto", choices=(*SOLVER_NAMES, BLOCKS_SOLVER))
    p.add_argument("--budget", help="capacity: bytes, 4GiB, or 70%% of the lower bound")
    p.add_argument("--time-limit", type=positive_seconds, help="seconds for search solvers")
    p.add_argument("--seed", type=non_negative_int, default=0)
    p.add_argument("--workers", type=non_negative_int, default=0,
                   help=WORKERS_HELP)
    p.add_argument("--out", help="write the plan: PLAN.json (plan format) or PLAN.csv")
    p.add_argument("--read-only-state", action="store_true",
                   help="the step never writes persistent buffers (inference): those "
                   "whose writes the trace does not say are read-only")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--alignment", type=positive_int, default=512,
                   help="--solver blocks: block and region alignment in bytes (default 512)")

    s = commands.add_parser("simulate", help="plan under a budget and replay it in the "
                            "discrete-event simulator")
    s.add_argument("trace")
    s.add_argument("--budget", required=True, help="bytes, 4GiB, or 70%% of the lower bound")
    s.add_argument("--policy", default="auto", choices=policy_names())
    s.add_argument("--link", default="gen5", help="gen4, gen5, or a bandwidth in GB/s")
    s.add_argument("--h2d-gbps", type=positive_seconds)
    s.add_argument("--d2h-gbps", type=positive_seconds)
    s.add_argument("--latency-us", type=non_negative_float)
    s.add_argument("--plan", help="simulate this plan (JSON) instead of planning")
    s.add_argument("--read-only-state", action="store_true",
                   help="the step never writes persistent buffers (inference): those "
                   "whose writes the trace does not say are read-only")
    s.add_argument("--seed", type=non_negative_int, default=0)
    s.add_argument("--workers", type=non_negative_int, default=0,
                   help=WORKERS_HELP)
    s.add_argument("--json", action="store_true")

    r = commands.add_parser("replay", help="run the swap runtime for a trace on a device and "
                            "check every byte")
    r.add_argument("trace")
    r.add_argument("--budget", required=True, help="bytes, 4GiB, or 70%% of the lower bound")
    r.add_argument("--device", default="emulated", choices=("emulated", "cuda"))
    r.add_argument("--iterations", type=positive_int, default=3)
    r.add_argument("--link", default="gen5", help="gen4, gen5, or a bandwidth in GB/s")
    r.add_argument("--size-scale", type=positive_int, default=None,
                   help="divide every size by this (default 1024) so big traces fit in RAM")
    r.add_argument("--policy", default="auto", choices=policy_names())
    r.add_argument("--read-only-state", action="store_true",
                   help="the step never writes persistent buffers (inference): those "
                   "whose writes the trace does not say are read-only")
    r.add_argument("--seed", type=non_negative_int, default=0)
    r.add_argument("--json", action="store_true")

    v = commands.add_parser("validate", help="check a plan against its trace")
    v.add_argument("trace")
    v.add_argument("plan", help="plan JSON, or MiniMalloc CSV with an offset column")
    v.add_argument("--read-only-state", action="store_true",
                   help="as the plan was made: persistent buffers whose writes the trace "
                   "does not say are read-only")
    v.add_argument("--json", action="store_true")

    i = commands.add_parser("info", help="describe a trace")
    i.add_argument("trace")
    i.add_argument("--top", type=non_negative_int, default=5,
                   help="how many of the biggest buffers")
    i.add_argument("--json", action="store_true")

    k = commands.add_parser("capture", help="record one training step or inference pass of a "
                            "PyTorch model as trace v1 (needs cupool[capture]: torch 2.13.0)")
    k.add_argument("model", choices=model_names())
    k.add_argument("--mode", choices=("train", "infer"), default="train")
    k.add_argument("--batch", type=positive_int, default=1)
    k.add_argument("--out", required=True, help="trace path: .json, .json.gz or .csv")
    k.add_argument("--device-preset", default="H100-SXM",
                   help="roofline preset for op durations (H100-SXM, A100-SXM, ...)")
    k.add_argument("--amp", action="store_true", help="bfloat16 autocast")
    k.add_argument("--small", action="store_true", help="the model's small test configuration")
    k.add_argument("--json", action="store_true")

    z = commands.add_parser("viz", help="draw a plan: address x time layout, memory over "
                            "time, or the simulated stream timeline (needs cupool[viz])")
    z.add_argument("trace")
    z.add_argument("plan", nargs="?", help="plan file; without it the trace is planned here")
    z.add_argument("--out", required=True, help="FILE.png or FILE.svg")
    z.add_argument("--kind", default="layout", choices=("layout", "memory", "timeline"))
    z.add_argument("--solver", default="auto", choices=SOLVER_NAMES)
    z.add_argument("--budget", help="plan swaps for this budget (bytes, 4GiB, 70%%)")
    z.add_argument("--link", default="gen5", help="gen4, gen5, or a bandwidth in GB/s")
    z.add_argument("--json", action="store_true")

    c = commands.add_parser("convert", help="convert a trace (any readable format: trace v1, "
                            "MiniMalloc CSV, PyTorch memory snapshot, CuPy hook log) to trace "
                            "v1 (.json, .json.gz) or MiniMalloc CSV (.csv)")
    c.add_argument("input")
    c.add_argument("output")
    c.add_argument("--device", type=non_negative_int,
                   help="device index in a multi-device snapshot")
    c.add_argument("--json", action="store_true")

    d = commands.add_parser("demo", help="the main job: plan the bundled real traces")
    d.add_argument("--out", default="cupool-demo", help="directory for the plans")
    d.add_argument("--time-limit", type=positive_seconds, default=2.0,
                   help="seconds per search solver (genetic, exact) per trace")
    d.add_argument("--json", action="store_true")

    t = commands.add_parser("stress", help="the pool, swaps at 50%% budget, and concurrent "
                            "streams under random load for M minutes, every byte checked")
    t.add_argument("--device", required=True, choices=("cuda", "emulated"))
    t.add_argument("--minutes", type=positive_minutes, required=True,
                   help="how long to run (fractions allowed: 0.5 = 30 s)")
    t.add_argument("--seed", type=non_negative_int, default=0)
    t.add_argument("--json", action="store_true")

    st = commands.add_parser("selftest", help="prove cupool on a device: GPU tests, stress, "
                             "replay against the simulator, pool against CuPy's, link and op "
                             "timings; writes selftest_<device>.json/.md")
    st.add_argument("--device", default="cuda", choices=("cuda", "emulated"))
    st.add_argument("--out", default="bench/results/gpu", help="directory of the two files")
    st.add_argument("--steps", help="comma-separated subset of the steps (default: all)")
    st.add_argument("--stress-minutes", type=positive_minutes, default=3.0)
    st.add_argument("--replay-traces", help="comma-separated bundled trace names")
    st.add_argument("--budgets", help="comma-separated replay budgets (default 70%%,50%%)")
    st.add_argument("--iterations", type=positive_int, default=5,
                    help="replay iterations (> 2: the steady ones are the third on)")
    st.add_argument("--pool-traces", help="comma-separated bundled trace names (default all)")
    st.add_argument("--pool-rounds", type=positive_int, default=9)
    st.add_argument("--json", action="store_true")

    # time-shared devices: cupool/sharing/
    sh = commands.add_parser("share", help="lay out several jobs (traces) on one time-shared "
                             "device: persistent slots, shared temporary region, admission")
    sh.add_argument("trace", nargs="+")
    sh.add_argument("--capacity", help="device bytes (default: enough for every slot)")
    sh.add_argument("--gap", default="0", help="bytes between persistent slots")
    sh.add_argument("--alignment", type=positive_int, default=512)
    sh.add_argument("--scale", type=positive_int, default=1, help="divide sizes by this")
    sh.add_argument("--json", action="store_true")
    br = commands.add_parser("broker", help="run the per-device broker of a time-shared "
                             "device (foreground), or query / stop the running one")
    br.add_argument("--capacity", help="arena bytes (required to run a broker)")
    br.add_argument("--temporary", help="shared temporary region bytes (required to run)")
    br.add_argument("--device", default="emulated:0", help="emulated:<i> or cuda:<i>")
    br.add_argument("--runtime-dir", help="directory of the socket, lock and key files")
    br.add_argument("--gap", default="0")
    br.add_argument("--alignment", type=positive_int, default=512)
    br.add_argument("--slice-iterations", type=positive_int, default=1)
    br.add_argument("--policy", choices=("resident", "naive"), default="resident")
    br.add_argument("--stats", action="store_true", help="print the running broker's stats")
    br.add_argument("--stop", action="store_true", help="stop the running broker")
    br.add_argument("--json", action="store_true")
    return parser

