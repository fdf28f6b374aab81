"""python -m infra.bench [--only NAME ...] [--plot-only]: runs the benchmarks one after the other
(on a quiet machine: they measure it), then writes bench-results/bench.json and bench.png.

Stages: pipeline (the demo at a low rate: latency from rating to enriched record and to Slack
post), job (enrichment throughput and latency at 5,000/s), versus (the job beside a Kafka Streams
reference, one at a time: start, backlog, p99 at 5,000/s), views (the views beside the job at
5,000/s: freshness, pull queries, restart), backfill (a view created over 1,000,000 records),
pg_reads (large reads over the views' PostgreSQL protocol beside PostgreSQL itself),
backlog_memory (the job's memory on a backlog of large ratings), views_memory (the views job's
on a backlog of large rows), es_sink, s3_sink, slack_notifier.
"""

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from infra.bench.plot import plot
from infra.bench.stages import latency, stages, throughput
from infra.stack.settings import REPO_ROOT


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="make bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", nargs="*", help="run only these stages")
    parser.add_argument("--plot-only", action="store_true", help="plot the results already there")
    parser.add_argument("--results", type=Path, default=REPO_ROOT / "bench-results")
    args = parser.parse_args(argv)
    args.results.mkdir(parents=True, exist_ok=True)
    failed = []
    for stage in stages(args.results):
        if args.plot_only or (args.only and stage.name not in args.only):
            continue
        print(f"\n==> bench {stage.name}: python -m {' '.join(stage.command)}", flush=True)
        started = time.monotonic()
        code = subprocess.run([sys.executable, "-m", *stage.command], check=False).returncode
        print(f"==> bench {stage.name}: exit {code} after {time.monotonic() - started:.0f} s", flush=True)
        if code != 0:
            failed.append(stage.name)
    results = {stage.name: stage.figures(args.results) for stage in stages(args.results)}
    rates = throughput(results)
    delays = latency(results)
    summary: dict[str, Any] = {
        "throughput_per_s": [{"stage": n.replace("\n", " "), "reached": r, "goal": g} for n, r, g in rates],
        "latency_s": [
            {"stage": n.replace("\n", " "), "p50": p50, "p99": p99, "p99_goal": g}
            for n, p50, p99, g in delays
        ],
        "failed_stages": failed,
    }
    (args.results / "bench.json").write_text(json.dumps(summary, indent=1))
    png = args.results / "bench.png"
    plot(
        rates,
        delays,
        png,
        f"ratings enrichment on this machine, {time.strftime('%Y-%m-%d')}",
    )
    for row in summary["throughput_per_s"]:
        print(f"  throughput {row['stage']:<32} {row['reached'] or '-':>10} /s   goal {row['goal']:,}")
    for row in summary["latency_s"]:
        print(
            f"  latency    {row['stage']:<50} p50 {row['p50']} s  p99 {row['p99']} s"
            f"  goal p99 < {row['p99_goal']} s"
        )
    print(f"==> {args.results / 'bench.json'} and {png}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
