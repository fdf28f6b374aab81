"""python -m services.loadgen [--rate R] [--customers N] [--duration S] [--seed X]

Settings come from LOADGEN_* variables; the flags override the most used ones.
"""

import argparse
import signal
import sys

from confluent_kafka import Producer

from foundation.errors import ConfigError
from foundation.help import settings_list
from foundation.logs import configure_or_exit
from foundation.settings import load_settings
from services.loadgen.config import LoadgenSettings
from services.loadgen.database import CustomerDb
from services.loadgen.generator import LoadGenerator


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m services.loadgen",
        description=__doc__,
        epilog=settings_list(LoadgenSettings),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--rate", type=float, help="ratings per second (LOADGEN_RATE)")
    parser.add_argument("--customers", type=int, help="customers before ratings start (LOADGEN_CUSTOMERS)")
    parser.add_argument("--duration", type=float, dest="duration_s", help="seconds; 0 = until Ctrl-C")
    parser.add_argument("--seed", type=int, help="random seed (LOADGEN_SEED)")
    flags = {k: v for k, v in vars(parser.parse_args(argv)).items() if v is not None}
    configure_or_exit()
    try:
        settings = load_settings(LoadgenSettings, **flags)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    producer = Producer(
        {
            "bootstrap.servers": settings.bootstrap_servers,
            "enable.idempotence": True,
            "linger.ms": 20,
            **settings.kafka_extra,
        }
    )
    generator = LoadGenerator(settings, CustomerDb(settings), producer)
    topic_problem = generator.check_topic()
    if topic_problem:
        print(f"error: setting LOADGEN_RATINGS_TOPIC: {topic_problem}", file=sys.stderr)
        return 2
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: generator.stopping.set())
    generator.run()
    return 0 if generator.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
