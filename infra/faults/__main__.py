"""python -m infra.faults [--quick] [--only NAME ...]: the fault matrix on the local stack.

Starts the pipeline once (the enrichment job, the views job, the four services; the Slack
notifier in bot mode against a local fake of Slack's Web API), then for each scenario: load
from the load generator, the fault injected while it runs, the time until the enriched topic,
Elasticsearch and the lake hold every rating produced until the fault ended, and every stage
reconciled (each rating enriched, indexed and in the lake once, each alert raised and posted
once, every bad record in its DLQ, every view's rows equal to a recount from the enriched
topic, nothing written that is not UTF-8), and every exit of a pipeline process judged: a row
is met only when each process that exited is one its fault kills or stops, as often and with
the exit code the fault caused. Prints the matrix as a table, writes it as JSON, and exits 1
when a row is not met (or, with --self-test, when a row built to fail does not fail).

Processes that die are restarted with back-off, as a supervisor would; exit code 2 (a bad
setting) and 3 (the job fenced by another instance of its name) are not restarted.
"""

import argparse
import logging
import signal
import sys
import time
from pathlib import Path

from infra.demo.pipeline import DemoPaths, running_stack
from infra.faults.run import FaultRun, Row, table, write_matrix
from infra.faults.scenarios import SCENARIOS, SELF_TESTS
from infra.stack.settings import REPO_ROOT


def parse(argv: list[str] | None) -> argparse.Namespace:
    names = ", ".join(
        s.name + ("*" if s.quick else "") + ("+" if "driver" not in s.join_in else "") for s in SCENARIOS
    )
    p = argparse.ArgumentParser(
        prog="python -m infra.faults",
        description=__doc__,
        epilog=f"scenarios (* = in --quick, + = only with --join-in tasks): {names}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--quick", action="store_true", help="only the quick scenarios (what CI runs)")
    p.add_argument("--only", nargs="+", metavar="NAME", help="only these scenarios, in this order")
    p.add_argument(
        "--self-test",
        action="store_true",
        help="then the rows built to fail (" + ", ".join(s.name for s in SELF_TESTS) + "): each must come out"
        " not met, for its reason, or the judge could not fail",
    )
    p.add_argument(
        "--join-in",
        choices=("driver", "tasks"),
        default="driver",
        help="where the enrichment job joins (ENRICH_JOIN_IN, default driver, in local mode); tasks: "
        "on the stack's Spark cluster, a job name of its own per run, with the rows of a cluster's "
        "own faults (" + ", ".join(s.name for s in SCENARIOS if "driver" not in s.join_in) + ")",
    )
    p.add_argument("--rate", type=float, default=100, help="ratings per second of the load (default 100)")
    p.add_argument("--customers", type=int, default=3000, help="customers in the table (default 3000)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument(
        "--out", type=Path, default=REPO_ROOT / "bench-results" / "faults.json", help="the matrix as JSON"
    )
    p.add_argument(
        "--drain-timeout", type=float, default=600, help="seconds a row may take to recover and drain"
    )
    args = p.parse_args(argv)
    known = {s.name for s in SCENARIOS}
    unknown = sorted(set(args.only or []) - known)
    if unknown:
        p.error(f"unknown scenarios {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    args.duration, args.plain = 0, True  # what the demo's pipeline asks of its arguments
    return args


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("demo").setLevel(logging.WARNING)
    args = parse(argv)
    stack, state = running_stack()
    database = stack.get("CUSTOMER_DB", "mariadb")
    if args.join_in == "tasks" and not stack.get("SPARK_MASTER_URL"):
        print(
            "error: --join-in tasks: the stack runs no Spark cluster (STACK_SPARK_CLUSTER)",
            file=sys.stderr,
        )
        return 2
    if args.only:
        by_name = {s.name: s for s in SCENARIOS}
        chosen = [by_name[n] for n in args.only]
        other = [s.name for s in chosen if database not in s.databases]
        if other:
            print(f"error: {', '.join(other)}: not a row for a stack on {database}", file=sys.stderr)
            return 2
        other = [s.name for s in chosen if args.join_in not in s.join_in]
        if other:
            print(f"error: {', '.join(other)}: not a row with the join in {args.join_in}", file=sys.stderr)
            return 2
    else:
        chosen = [
            s
            for s in SCENARIOS
            if (s.quick or not args.quick) and database in s.databases and args.join_in in s.join_in
        ]
    if args.self_test:
        chosen += SELF_TESTS
    run = FaultRun(args, stack, DemoPaths(state / "faults"))
    rows: list[Row] = []
    began = time.monotonic()
    for sig in (signal.SIGINT, signal.SIGTERM):  # both stop the run and every process it started
        signal.signal(sig, signal.default_int_handler)
    try:
        run.start_pipeline()
        for i, scenario in enumerate(chosen, 1):
            print(f"==> [{i}/{len(chosen)}] after {time.monotonic() - began:.0f} s", flush=True)
            rows.append(run.scenario(scenario, args.seed + i))
            write_matrix(rows, args.out)
    except KeyboardInterrupt:
        print("\n==> interrupted: the rows so far", flush=True)
    except Exception:  # the matrix itself failed: still show and keep the rows so far
        logging.getLogger("faults").exception("the fault matrix stopped")
        rows.append(Row("(matrix)", "the run itself failed", "no failure", notes=["see the traceback above"]))
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        run.pipeline.stop_all()
        run.observer.close()
        run.slack.close()
    print(f"\n==> fault matrix ({time.monotonic() - began:.0f} s)\n\n{table(rows)}", flush=True)
    write_matrix(rows, args.out)
    print(f"==> written to {args.out}", flush=True)
    bad = [r.fault for r in rows if not r.judged]
    print(
        "==> every row met" + (" (and every self-test row failed, as built)" if args.self_test else "")
        if rows and not bad
        else f"==> rows not met (or self-tests that passed): {', '.join(bad) or 'none ran'}"
    )
    return 0 if rows and not bad else 1


if __name__ == "__main__":
    sys.exit(main())
