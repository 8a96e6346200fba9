"""A broker in its own process: :func:`spawn_broker` starts one and returns once it accepts
clients, :class:`BrokerProcess` stops it (cleanly, or with SIGKILL as a crash would)."""

from __future__ import annotations

import threading

from cupool.sharing.broker import Broker
from cupool.sharing.config import BrokerConfig
from cupool.sharing.errors import BrokerUnreachableError, SharingError


def _broker_main(config: BrokerConfig, ready) -> None:
    import signal

    try:
        broker = Broker(config).start()
    except SharingError as error:
        ready.send({"ok": False, "error": error.to_wire()})
        return
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=broker.stop).start())
    ready.send({"ok": True, "epoch": broker.epoch, "address": broker.address})
    ready.close()
    broker.serve_forever()


class BrokerProcess:
    """A broker running in its own process (:func:`spawn_broker`)."""

    def __init__(self, process, config: BrokerConfig, epoch: int, address: str) -> None:
        self.process = process
        self.config = config
        self.epoch = epoch
        self.address = address

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self, timeout_s: float = 10.0) -> None:
        """Ask the broker to shut down; terminate it if it does not within ``timeout_s``."""
        if self.process.is_alive():
            self.process.terminate()  # SIGTERM: a clean stop (see _broker_main)
            self.process.join(timeout_s)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(timeout_s)

    def kill(self) -> None:
        """SIGKILL, as a crash would: no cleanup (the next broker removes the leftovers)."""
        self.process.kill()
        self.process.join(10.0)

    def __enter__(self) -> BrokerProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def spawn_broker(config: BrokerConfig, timeout_s: float = 30.0) -> BrokerProcess:
    """Start a broker in a new process and return once it accepts clients; errors the
    broker raised on start (a broker already running, a bad size) are raised here."""
    import multiprocessing

    from cupool.sharing.errors import error_from_wire

    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=_broker_main, args=(config, sender), daemon=True,
                              name=f"cupool-broker-{config.device}")
    process.start()
    sender.close()
    if not receiver.poll(timeout_s):
        process.kill()
        raise BrokerUnreachableError(config.paths["address"],
                                     f"broker did not start within {timeout_s} s")
    try:
        status = receiver.recv()
    except EOFError:
        process.join(timeout_s)
        raise BrokerUnreachableError(config.paths["address"],
                                     f"broker process exited with code {process.exitcode}"
                                     ) from None
    if not status["ok"]:
        process.join(timeout_s)
        raise error_from_wire(status["error"])
    return BrokerProcess(process, config, status["epoch"], status["address"])
