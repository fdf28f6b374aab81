"""The entry point every service shares: settings, logging, signals, the loop, exit codes.

Exit codes: 0 stopped on request (or `--help`), 1 the downstream refused for good
(FatalSinkError), Kafka failed fatally or the loop stalled (services.core.watchdog), 2 a bad
setting or an unknown argument.

SIGUSR1 writes the stack of every thread to standard error and the service goes on: what a
service that stopped making progress is waiting for.
"""

import faulthandler
import logging
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from confluent_kafka import Consumer, KafkaException, Message

from foundation.errors import ConfigError, FatalSinkError
from foundation.help import settings_help
from foundation.logs import configure_or_exit
from foundation.prometheus import serve
from foundation.settings import load_settings
from services.core.dlq import DeadLetters, producer_for, record_limit
from services.core.loop import ConsumerLoop, Sink
from services.core.metrics import Metrics, ServiceCollector
from services.core.settings import ServiceSettings
from services.core.watchdog import Watchdog

__all__ = ["Service", "build_loop", "run"]

T = TypeVar("T")
S = TypeVar("S", bound=ServiceSettings)


@dataclass(frozen=True)
class Service(Generic[S, T]):
    """What makes a service: its name, settings class, record decoder and sink factory."""

    name: str
    settings_class: type[S]
    decode: Callable[[Message], T]
    make_sink: Callable[[S], Sink[T]]


def build_loop(service: Service[S, T], settings: S) -> ConsumerLoop[T]:
    """The loop with real Kafka clients (tests use this too, with their own settings)."""
    metrics = Metrics(service.name, settings.metrics_file, settings.metrics_interval_s)
    limit = record_limit(settings.producer_config(), settings.dlq_topic)
    producer = producer_for(settings.producer_config(), limit)
    dead_letters = DeadLetters(producer, settings.dlq_topic, service.name, max_bytes=limit)
    return ConsumerLoop(
        service.name,
        settings,
        decode=service.decode,
        sink=service.make_sink(settings),
        consumer=Consumer(settings.consumer_config()),
        dead_letters=dead_letters,
        metrics=metrics,
        renew=lambda: Consumer(settings.consumer_config()),
        watchdog=Watchdog(service.name, settings.stall_timeout_s),
    )


def run(service: Service[Any, Any], argv: list[str] | None = None) -> int:
    """The service until stopped. `--help` prints its settings and connects nowhere."""
    args = sys.argv[1:] if argv is None else argv
    package = service.settings_class.__module__.rsplit(".", 1)[0]
    if any(arg in ("-h", "--help") for arg in args):
        print(
            settings_help(service.settings_class, f"python -m {package}", sys.modules[package].__doc__ or "")
        )
        return 0
    if args:
        print(
            f"error: unknown arguments {' '.join(args)} (settings are environment variables; see --help)",
            file=sys.stderr,
        )
        return 2
    configure_or_exit()
    log = logging.getLogger(service.name)
    try:
        settings = load_settings(service.settings_class)
        logging.getLogger().setLevel(settings.log_level.upper())
        loop = build_loop(service, settings)
        prefix = str(service.settings_class.model_config.get("env_prefix", ""))
        endpoint = serve(ServiceCollector(loop.metrics), settings, prefix)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: loop.stop())
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    try:
        loop.run()
    except FatalSinkError as err:
        log.error("stopping: %s", err)
        return 1
    except KafkaException as err:
        log.error("stopping: Kafka failed: %s", err)
        return 1
    finally:
        if endpoint is not None:
            endpoint.close()
    log.info("stopped")
    return 0
