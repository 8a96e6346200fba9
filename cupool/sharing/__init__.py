"""Time-shared devices: several jobs (processes) on one device, persistent vs temporary memory.

A per-device :class:`Broker` gives each job a *persistent* slot that
stays on the device across time slices and lends one shared *temporary* region to the job
holding the current slice, zeroing it when the slice ends; switching jobs therefore moves
no persistent byte while all slots fit (and evicts / restores whole slots when they do
not). Jobs connect with :class:`SharingClient` and only ever see their own regions.

    layout.py    pure arithmetic: geometry, admission, slot placement
    measure.py   a job's needs from its trace (persistent buffers; static plan of the rest)
    memory.py    the shared arena: POSIX shared memory (emulated) or CUDA IPC
    protocol.py  versioned plain-dict messages over an authenticated AF_UNIX socket
    config.py    how a broker runs (BrokerConfig) and where: socket, lock and key files
    broker.py    the broker: connections, scheduling, eviction, statistics
    process.py   a broker in its own process (spawn_broker)
    client.py    the job's side: grants and bounds-checked regions
"""

from cupool.sharing.broker import Broker
from cupool.sharing.client import Grant, Region, SharingClient, broker_request
from cupool.sharing.config import BrokerConfig, broker_paths
from cupool.sharing.errors import (
    AdmissionError,
    ArenaError,
    BrokerGoneError,
    BrokerRunningError,
    BrokerUnreachableError,
    ProtocolError,
    RegionAccessError,
    RegionBoundsError,
    SharingArgumentError,
    SharingError,
    SliceTimeoutError,
    StaleGrantError,
)
from cupool.sharing.layout import NAIVE, POLICIES, RESIDENT, Geometry, JobNeeds, Slot, place_slot
from cupool.sharing.measure import needs_from_trace
from cupool.sharing.process import BrokerProcess, spawn_broker

__all__ = [
    "NAIVE", "POLICIES", "RESIDENT", "AdmissionError", "ArenaError", "Broker", "BrokerConfig",
    "BrokerGoneError", "BrokerProcess", "BrokerRunningError", "BrokerUnreachableError",
    "Geometry", "Grant", "JobNeeds", "ProtocolError", "Region", "RegionAccessError",
    "RegionBoundsError", "SharingArgumentError", "SharingClient", "SharingError",
    "SliceTimeoutError", "Slot", "StaleGrantError", "broker_paths", "broker_request",
    "needs_from_trace", "place_slot", "spawn_broker",
]
