"""python -m infra.demo [--duration S] [--rate R] [--customers N]: the pipeline end to end.

1. reads how to reach the running stack (`make up` wrote <state>/stack.env)
2. starts the enrichment job, the views job and the four services (the views query service among
   them); waits, showing progress, until the job has caught up with the customer table
3. starts the load generator and shows the live view until --duration is over (or Ctrl-C)
   A process that dies is restarted with back-off, as a supervisor would (not after exit code 2,
   a bad setting, or 3, the job fenced by another instance of its name)
4. drains: waits until every stage has handled what was produced, then prints the reconciled
   summary (every row of every view that the run's records touch against counts recomputed
   from the enriched topic included, and records that are not UTF-8 counted); exits 1 if the
   stages do not reconcile
Every process it started is stopped on the way out, Ctrl-C included.
"""

import argparse
import json
import logging
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from confluent_kafka import TopicPartition
from pydantic import SecretStr

from enrichment_job.runtime.metrics import caught_up
from enrichment_job.views.settings import ViewsSettings
from infra.demo import views
from infra.demo.figures import TOPICS, Observer, read_json
from infra.demo.pipeline import (
    METRICS_PORTS,
    MODULES,
    NO_RESTART,
    SPARK_JOBS,
    DemoPaths,
    Pipeline,
    running_stack,
    service_envs,
)
from infra.demo.reconcile import (
    ALERT_RULE,
    NOT_UTF8,
    WITHOUT_BYTES,
    Check,
    Reconciliation,
    TopicCounter,
    dlq_since,
    dlq_without_bytes,
    es_count,
    lake_ids,
    percentiles,
)
from infra.demo.slack_posts import posted_ids
from infra.demo.view import CLEAR, frame
from infra.stack.health import s3_client
from infra.stack.settings import StackSettings
from services.s3_sink.config import S3SinkSettings

log = logging.getLogger("demo")


class Interrupted(Exception):
    pass


def _interrupt(*_: object) -> None:
    raise Interrupted


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m infra.demo", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--duration", type=float, default=0, help="seconds of load; 0 runs until Ctrl-C")
    p.add_argument("--rate", type=float, default=100, help="ratings per second (default 100)")
    p.add_argument("--customers", type=int, default=3000, help="customers in the table (default 3000)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--summary", type=Path, help="the summary as JSON (default <state>/demo/summary.json)")
    p.add_argument(
        "--drain-timeout", type=float, default=240, help="seconds to wait for the stages to catch up"
    )
    p.add_argument(
        "--plain", action="store_true", help="log lines instead of a redrawn screen (default off a tty)"
    )
    return p.parse_args(argv)


class Demo:
    def __init__(self, args: argparse.Namespace, stack: dict[str, str], paths: DemoPaths) -> None:
        self.args, self.stack, self.paths = args, stack, paths
        self.pipeline = Pipeline(paths, service_envs(stack, paths))
        metrics_files = {name: paths.metrics(name) for name in MODULES if name not in SPARK_JOBS}
        metrics_files["enrichment"] = paths.job_state / "metrics.json"
        metrics_files["views"] = paths.views_state / "metrics.json"
        self.observer = Observer(stack, metrics_files, METRICS_PORTS, s3_client(StackSettings(), stack))
        self.plain = args.plain or not sys.stdout.isatty()
        self.lake = S3SinkSettings(
            endpoint_url=stack["S3_ENDPOINT_URL"],
            region=stack["S3_REGION"],
            bucket=stack["S3_BUCKET"],
            access_key=SecretStr(stack["S3_ACCESS_KEY"]),
            secret_key=SecretStr(stack["S3_SECRET_KEY"]),
        )
        self.start_offsets = {role: self.observer.ends(role) for role in TOPICS}
        self.injected_bad = 0  # unreadable ratings produced besides the load generator's
        self.created_view = False  # the example view declared in SQL (checked like the built-ins)
        self.start = self.observer.snapshot()
        self.before = self.start

    def _ends(self, role: str) -> list[TopicPartition]:
        """Where each partition of a topic ends now: this run's records come after."""
        topic = TOPICS[role]
        return [
            TopicPartition(topic, p, self.observer.end_offset(topic, p))
            for p in self.observer.partitions[role]
        ]

    # 2. the pipeline
    def start_pipeline(self) -> None:
        # Figures of an earlier run must not pass for this one's.
        for path in self.observer.metrics_files.values():
            path.unlink(missing_ok=True)
        for name in ("enrichment", "views", "views_api", "slack_notifier", "es_sink", "s3_sink"):
            self.pipeline.start(name)
        began = time.monotonic()
        while True:
            self._check_children()
            job = read_json(self.paths.job_state / "metrics.json")
            lag = job.get("cdc", {}).get("watermark_lag_ms")
            waited = time.monotonic() - began
            if caught_up(job, max_lag_ms=10_000):
                print(
                    f"==> enrichment job is up and has caught up with the customer table ({waited:.0f} s)",
                    flush=True,
                )
                return
            phase = (
                "Spark is starting (the first start takes about a minute)"
                if not job
                else (f"loading the customer table from CDC (watermark lag {lag} ms)")
            )
            print(f"==> waiting for the enrichment job: {phase} ... {waited:.0f} s", flush=True)
            if waited > 420:
                raise SystemExit(
                    f"the enrichment job did not get ready in {waited:.0f} s; "
                    f"see {self.paths.logs / 'enrichment.log'}"
                )
            time.sleep(3)

    def _check_children(self) -> None:
        """A process that died is restarted with back-off (they all resume from their last
        commit); one that must not be restarted ends the demo."""
        for child in self.pipeline.supervise():
            raise SystemExit(
                f"{child.name} exited with code {child.proc.returncode} "
                f"({NO_RESTART[child.proc.returncode]}); its log ends:\n{child.tail()}"
            )

    def create_view(self) -> None:
        """A view declared in SQL, created while the views job runs (it then backfills from the
        enriched topic's start); the reconciliation checks its rows like the built-in ones'."""
        print(f"==> creating the view {views.EXAMPLE} at run time from {views.EXAMPLE_FILE.name}", flush=True)
        env = {
            k: v for k, v in self.pipeline.envs["views"].items() if k.startswith(("VIEWS_JOB_", "JAVA_HOME"))
        }
        print(f"    {views.create_example(env)}", flush=True)
        self.created_view = True

    # 3. load and the live view
    def run_load(self) -> None:
        args = (
            "--rate",
            str(self.args.rate),
            "--customers",
            str(self.args.customers),
            "--duration",
            str(self.args.duration),
            "--seed",
            str(self.args.seed),
        )
        print(
            f"==> load generator: {self.args.customers} customers, {self.args.rate:.0f} ratings/s", flush=True
        )
        loadgen = self.pipeline.start("loadgen", args)
        self.observer.follow_alerts()
        began = time.monotonic()
        while loadgen.alive():
            self._check_children()
            left = self.args.duration - (time.monotonic() - began) if self.args.duration else None
            self.show("load running" + (f", {left:.0f} s left" if left is not None else ", Ctrl-C to stop"))
            time.sleep(1)
        if loadgen.proc.returncode not in (0, -signal.SIGTERM):
            raise SystemExit(f"the load generator failed ({loadgen.proc.returncode}):\n{loadgen.tail()}")

    def show(self, phase: str) -> None:
        now = self.observer.snapshot()
        alerts = list(self.observer.latest_alerts)
        if self.plain:
            figures = {
                "produced": now.since(self.start, "ratings"),
                "enriched": now.total("enrichment", "ratings_job_enriched_total"),
                "es": now.total("es_sink", "ratings_records_written_total"),
                "lake": now.total("s3_sink", "ratings_records_written_total"),
                "slack": now.total("slack_notifier", "ratings_records_written_total"),
            }
            line = " ".join(f"{k} {v:,.0f}" for k, v in figures.items())
            print(f"[{time.strftime('%H:%M:%S')}] {phase}: {line}", flush=True)
        else:
            text = frame(
                f"ratings enrichment demo: {phase}",
                self.start,
                self.before,
                now,
                alerts=alerts,
                views=views.view_lines(alerts),
            )
            print(CLEAR + text, flush=True)
        self.before = now

    # 4. drain and reconcile
    def reconcile(self) -> Reconciliation:
        load = read_json(self.paths.metrics("loadgen"))
        id_range = (int(load["first_rating_id"]), int(load["last_rating_id"]))
        produced, bad = int(load["ratings"]), int(load["bad_records"])
        servers = self.stack["KAFKA_BOOTSTRAP_SERVERS"]
        counters = {
            role: TopicCounter(servers, self.start_offsets[role], None if "dlq" in role else id_range)
            for role in ("enriched", "alerts", "enrichment_dlq", "slack_dlq", "es_dlq", "s3_dlq")
        }
        ratings_start = {tp.partition: tp.offset for tp in self.start_offsets["ratings"]}
        deadline = time.monotonic() + self.args.drain_timeout
        while True:
            for counter in counters.values():
                counter.read()
            result = self._checks(counters, id_range, produced, bad, ratings_start)
            if result.ok or time.monotonic() > deadline:
                break
            self._check_children()
            self.show("draining: waiting for every stage to catch up")
            time.sleep(3)
        for counter in counters.values():
            counter.close()
        result.checks += self._views_checks(counters["enriched"].records, deadline)
        return result

    def _views_checks(self, records: list[dict[str, Any]], deadline: float) -> list[Check]:
        """Every row of every view that the run's records touch equals the counts recomputed
        from the enriched topic, once the views have caught up with the topic's end."""
        servers, topic = self.stack["KAFKA_BOOTSTRAP_SERVERS"], TOPICS["enriched"]
        required = (*views.BUILT_IN, *((views.EXAMPLE,) if self.created_view else ()))
        while not views.caught_up(servers, topic, required) and time.monotonic() < deadline:
            self._check_children()
            self.show("draining: waiting for the views to catch up")
            time.sleep(2)
        self.before_views_check()
        print(
            f"==> checking the views: {len(records):,} enriched records recounted, every row they touch"
            " asked of the query service (a minute for 50,000 ratings)",
            flush=True,
        )
        count = views.Recount.of_run(views.Rules.of(ViewsSettings()), records)
        checks = [Check("enriched records not UTF-8 (whole topic)", views.recount(servers, topic, count), 0)]
        for view, expected in count.counts.items():
            if view not in required:
                continue  # a view this run did not create (the fault matrix's runs)
            matching, wrong = views.rows_matching(view, expected)
            for line in wrong:
                log.warning("a view differs from its recount: %s", line)
            checks.append(Check(f"{view}{views.VIEW_ROWS}", matching, len(expected)))
        return checks

    def before_views_check(self) -> None:
        """Called once the views have caught up, before they are checked (the fault matrix's
        self-tests make a view wrong here)."""

    def _checks(
        self,
        c: dict[str, TopicCounter],
        id_range: tuple[int, int],
        produced: int,
        bad: int,
        ratings_start: dict[int, int],
    ) -> Reconciliation:
        enriched = c["enriched"]
        should_alert = sum(
            1 for r in enriched.records if r["stars"] < ALERT_RULE[0] and r["club_status"] == ALERT_RULE[1]
        )
        lake = lake_ids(self.lake, id_range)
        posted = posted_ids(self.paths.slack_state, id_range)
        es = self.stack["ELASTICSEARCH_URL"]
        r = Reconciliation()
        r.checks += [
            Check("ratings produced", produced),
            Check("enriched records", enriched.ids.total(), produced),
            Check("  distinct ratings enriched", len(enriched.ids), produced),
            Check(
                "  of them matched to a customer", sum(1 for x in enriched.records if x["customer_matched"])
            ),
            Check("Elasticsearch documents", es_count(es, "ratings", id_range), produced),
            Check("lake rows", None if lake is None else lake.total(), produced),
            Check("  distinct ratings in the lake", None if lake is None else len(lake), produced),
            Check("alerts (stars < 3, platinum)", c["alerts"].ids.total(), should_alert),
            Check("  distinct alerts", len(c["alerts"].ids), should_alert),
            Check("  alerts in Elasticsearch", es_count(es, "unhappy-platinum", id_range), should_alert),
            Check("Slack posts (alerts covered)", None if posted is None else len(posted), should_alert),
            Check("unreadable ratings produced", bad),
            Check("  enrichment-dlq", dlq_since(c["enrichment_dlq"], ratings_start), bad + self.injected_bad),
            Check(f"    {WITHOUT_BYTES}", dlq_without_bytes(c["enrichment_dlq"], ratings_start), 0),
            Check(NOT_UTF8, enriched.not_utf8 + c["alerts"].not_utf8, 0),
            Check("slack-notifier-dlq", len(c["slack_dlq"].headers), 0),
            Check("es-sink-dlq", len(c["es_dlq"].headers), 0),
            Check("s3-sink-dlq", len(c["s3_dlq"].headers), 0),
        ]
        changes: Counter[str] = Counter(read_json(self.paths.metrics("loadgen")).get("changes", {}))
        r.notes.append(
            "customer changes during the run: "
            + (", ".join(f"{k} {v}" for k, v in sorted(changes.items())) or "none")
        )
        r.notes.append(f"rating ids {id_range[0]}..{id_range[1]}; logs in {self.paths.logs}")
        by_id = {x["rating_id"]: x["rating_time"] for x in enriched.records}
        # Ratings of a customer unknown at rating_time are held for the grace (in case the
        # customer is being created) and come out unmatched when it passes: apart, or their
        # grace would be read as the job's latency.
        waited: dict[bool, list[float]] = {True: [], False: []}
        for x in enriched.records:
            waited[bool(x["customer_matched"])].append((x["enriched_ms"] - x["rating_time"]) / 1000)
        r.latency_s = {
            "rating produced -> enriched by the job": percentiles(waited[True]),
            "unmatched rating produced -> enriched (held for the grace)": percentiles(waited[False]),
            "rating produced -> Slack post": percentiles(
                [at - by_id[i] / 1000 for i, at in (posted or {}).items() if i in by_id]
            ),
        }
        return r


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    args = parse(argv)
    stack, state = running_stack()
    demo = Demo(args, stack, DemoPaths(state / "demo"))
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        demo.start_pipeline()
        demo.create_view()
        try:
            demo.run_load()
        except Interrupted:
            print(
                "\n==> stopping the load; draining what was produced (Ctrl-C again to stop now)", flush=True
            )
            demo.pipeline.stop("loadgen")
        result = demo.reconcile()
    except Interrupted:
        print("\n==> stopping every process", flush=True)
        return 130
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        demo.pipeline.stop_all()
        demo.observer.close()
    print("\n==> summary: what went in and what came out of each stage\n" + result.text(), flush=True)
    summary = args.summary or demo.paths.root / "summary.json"
    summary.parent.mkdir(parents=True, exist_ok=True)
    summary.write_text(json.dumps(result.as_json(), indent=1))
    print(
        "==> reconciled: every stage agrees" if result.ok else "==> NOT reconciled: see the lines marked BAD",
        flush=True,
    )
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
