"""The product as a platform team installs it: the wheel, built from the checkout, installed into
fresh virtual environments outside it (one with the `job` extra, one with `services`), each
program started from there in a folder of its own against the real stack.

A rating for a platinum customer goes through the installed job; the installed ES sink, S3 sink
and Slack notifier deliver it; the installed views query service becomes healthy. Neither venv
holds the checkout's tooling (`infra`), and the services' venv holds no Spark."""

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.enrichment import Job, Topics, create_topics, delete_topics, produce, rating, read_topic
from support.kafka import drop_topics, make_topics
from support.prometheus import scrape
from support.services import ServiceProcess, unique_name
from support.views_api import free_port

from infra.slack.fake import CHANNEL, TOKEN, fake_slack

StackEnv = dict[str, str]
REPO = Path(__file__).resolve().parents[2]


def _run(*command: str | Path, cwd: Path | None = None) -> str:
    done = subprocess.run(
        [str(c) for c in command], cwd=cwd, capture_output=True, text=True, timeout=900, check=False
    )
    assert done.returncode == 0, (
        f"{' '.join(map(str, command))} failed:\n{done.stdout[-2000:]}{done.stderr[-3000:]}"
    )
    return done.stdout


@pytest.fixture(scope="module")
def venvs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """extra -> the python of a fresh venv with the wheel and that extra installed."""
    root = tmp_path_factory.mktemp("package")
    _run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", root / "dist", REPO, cwd=root)
    (wheel,) = (root / "dist").glob("ratings_enrichment-*.whl")
    pythons = {}
    for extra in ("job", "services"):
        venv = root / f"venv-{extra}"
        _run(sys.executable, "-m", "venv", venv)
        _run(venv / "bin" / "python", "-m", "pip", "install", "-q", f"{wheel}[{extra}]", cwd=root)
        pythons[extra] = venv / "bin" / "python"
    return pythons


def _importable(python: Path, module: str, cwd: Path) -> bool:
    done = subprocess.run(
        [python, "-c", f"import {module}"], cwd=cwd, capture_output=True, timeout=120, check=False
    )
    return done.returncode == 0


def test_the_wheel_carries_the_product_and_each_role_only_its_dependencies(
    venvs: dict[str, Path], tmp_path: Path
) -> None:
    for python in venvs.values():
        assert not _importable(python, "infra", tmp_path)
        assert _importable(python, "foundation.settings", tmp_path)
        assert _importable(python, "services.core.main", tmp_path)
    assert _importable(venvs["job"], "pyspark", tmp_path)
    assert not _importable(venvs["services"], "pyspark", tmp_path)
    # package data: the index template the ES sink installs, the job's scheduler pools
    template = "services.es_sink').joinpath('ratings-index-template.json"
    pools = "enrichment_job.runtime').joinpath('scheduler_pools.xml"
    for python, data in ((venvs["services"], template), (venvs["job"], pools)):
        found = f"from importlib import resources; assert resources.files('{data}').is_file()"
        _run(python, "-c", found, cwd=tmp_path)
    for module, extra in (
        ("enrichment_job", "job"),
        ("enrichment_job.views", "job"),
        ("services.es_sink", "services"),
        ("services.s3_sink", "services"),
        ("services.slack_notifier", "services"),
        ("services.views", "services"),
    ):
        assert "settings (environment variables)" in _run(venvs[extra], "-m", module, "--help", cwd=tmp_path)


@pytest.fixture
def topics(stack_env: StackEnv) -> Iterator[Topics]:
    topics = Topics()
    names = create_topics(stack_env, topics)
    yield topics
    delete_topics(stack_env, names)


def _wait(what: str, check: Any, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"no {what} within {timeout_s} s"
        time.sleep(0.5)


def test_the_installed_job_and_services_carry_a_rating_to_every_sink(
    stack_env: StackEnv, venvs: dict[str, Path], topics: Topics, tmp_path: Path, db: Any
) -> None:
    import boto3  # noqa: PLC0415
    from elasticsearch import Elasticsearch  # noqa: PLC0415

    customer = _platinum_customer(db)
    job_dir = tmp_path / "job"
    (job_dir / ".state").mkdir(parents=True)  # for the job's log beside its state
    # No ENRICH_STATE_DIR: the default, relative to the working folder, is used.
    state = job_dir / ".state" / "enrichment"
    job = Job(stack_env, topics, state, 0, python=str(venvs["job"]), cwd=job_dir)
    del job.env["ENRICH_STATE_DIR"]
    services_dir = tmp_path / "services"
    services_dir.mkdir()
    dlq, alias, prefix = unique_name("pkg-dlq"), unique_name("pkg"), unique_name("pkg-lake")
    make_topics(stack_env, [dlq], partitions=1)
    es = Elasticsearch(stack_env["ELASTICSEARCH_URL"], request_timeout=30)
    s3 = boto3.client(
        "s3",
        endpoint_url=stack_env["S3_ENDPOINT_URL"],
        region_name=stack_env["S3_REGION"],
        aws_access_key_id=stack_env["S3_ACCESS_KEY"],
        aws_secret_access_key=stack_env["S3_SECRET_KEY"],
    )
    started: list[ServiceProcess] = []
    try:
        job.start()
        assert (state / "metrics.json").is_file()
        with fake_slack() as slack:
            for module, prefix_, env in _service_envs(
                stack_env, topics, slack.base_url, dlq=dlq, alias=alias, lake_prefix=prefix
            ):
                service = ServiceProcess(module, prefix_, env, services_dir, python=str(venvs["services"]))
                started.append(service.start())
            first = 9_100_000_000 + int(time.time()) % 1_000_000
            produce(stack_env, topics.name("ratings"), [rating(first, customer, 1, int(time.time() * 1000))])
            enriched = read_topic(stack_env, topics.name("enriched"), min_records=1, timeout_s=120)
            assert json.loads(enriched[0].value())["club_status"] == "platinum"
            for service in started:
                port = int(service.env[f"{service.prefix}METRICS_PORT"])
                name = service.module.rsplit(".", 1)[1].replace("_", "-")  # es-sink, s3-sink, ...
                written = f'ratings_records_written_total{{service="{name}"}}'
                _wait(f"{name} writing", lambda p=port, w=written: scrape(p).get(w, 0) >= 1)
            es.indices.refresh(index=f"{alias}-ratings")
            assert es.count(index=f"{alias}-ratings")["count"] == 1
            objects = s3.list_objects_v2(Bucket=stack_env["S3_BUCKET"], Prefix=prefix).get("Contents", [])
            assert [o["Key"] for o in objects if o["Key"].endswith(".parquet")]
            _wait("a Slack post", lambda: len(slack.posts()) == 1)
            for service in started:
                assert service.stop() == 0, service.tail()
        views = _views_service(stack_env, venvs["services"], services_dir)
        assert views.stop() == 0, views.tail()
    finally:
        for service in started:
            if service.proc is not None and service.proc.poll() is None:
                service.kill()
        assert job.stop() == 0, job.tail()
        drop_topics(stack_env, [dlq])
        for stored in s3.list_objects_v2(Bucket=stack_env["S3_BUCKET"], Prefix=prefix).get("Contents", []):
            s3.delete_object(Bucket=stack_env["S3_BUCKET"], Key=stored["Key"])
        names = list(es.indices.get(index=f"{alias}-*", expand_wildcards="all"))
        if names:
            es.indices.delete(index=",".join(names))
        for template in (f"{alias}-ratings", f"{alias}-alerts"):
            if es.indices.exists_index_template(name=template):
                es.indices.delete_index_template(name=template)
        es.close()


def _service_envs(
    stack_env: StackEnv, topics: Topics, slack_url: str, *, dlq: str, alias: str, lake_prefix: str
) -> list[tuple[str, str, dict[str, str]]]:
    """module, prefix, environment of each consumer service, on the test's topics and sinks."""
    common = {"BOOTSTRAP_SERVERS": stack_env["KAFKA_BOOTSTRAP_SERVERS"], "DLQ_TOPIC": dlq}
    own = {
        "services.es_sink": (
            "ES_SINK_",
            {
                "INPUT_TOPICS": json.dumps([topics.name("enriched"), topics.name("alerts")]),
                "ALERT_TOPICS": json.dumps([topics.name("alerts")]),
                "URL": stack_env["ELASTICSEARCH_URL"],
                "RATINGS_INDEX_PREFIX": f"{alias}-ratings-",
                "RATINGS_ALIAS": f"{alias}-ratings",
                "ALERTS_INDEX_PREFIX": f"{alias}-alerts-",
                "ALERTS_ALIAS": f"{alias}-alerts",
            },
        ),
        "services.s3_sink": (
            "S3_SINK_",
            {
                "INPUT_TOPICS": json.dumps([topics.name("enriched")]),
                "ENDPOINT_URL": stack_env["S3_ENDPOINT_URL"],
                "REGION": stack_env["S3_REGION"],
                "ACCESS_KEY": stack_env["S3_ACCESS_KEY"],
                "SECRET_KEY": stack_env["S3_SECRET_KEY"],
                "BUCKET": stack_env["S3_BUCKET"],
                "PREFIX": lake_prefix,
                "BATCH_MAX_WAIT_MS": "300",
            },
        ),
        "services.slack_notifier": (
            "SLACK_",
            {
                "INPUT_TOPICS": json.dumps([topics.name("alerts")]),
                "BOT_TOKEN": TOKEN,
                "CHANNEL": CHANNEL,
                "WEBHOOK_URL": "",
                "BASE_URL": slack_url,
                "VIEWS_URL": f"http://127.0.0.1:{free_port()}",
            },
        ),
    }
    envs = []
    for module, (prefix, values) in own.items():
        env = {f"{prefix}{k}": v for k, v in (common | values).items()}
        env[f"{prefix}GROUP_ID"] = unique_name("pkg-group")
        env[f"{prefix}METRICS_PORT"] = str(free_port())
        envs.append((module, prefix, env))
    return envs


def _platinum_customer(db: Any) -> int:
    with db.cursor() as cur:
        cur.execute(
            "INSERT INTO customers (first_name, last_name, email, gender, club_status, region, comments)"
            " VALUES ('Wheel', 'Test', 'wheel@example.com', 'Female', 'platinum', 'EMEA', 'package test')"
        )
        return int(cur.lastrowid)


def _views_service(stack_env: StackEnv, python: Path, workdir: Path) -> ServiceProcess:
    """The views query service from the venv, on the stack's changelog topics, until healthy."""
    port = free_port()
    env = {
        "VIEWS_BOOTSTRAP_SERVERS": stack_env["KAFKA_BOOTSTRAP_SERVERS"],
        "VIEWS_PORT": str(port),
        "VIEWS_PG_PORT": str(free_port()),
    }
    service = ServiceProcess("services.views", "VIEWS_", env, workdir, python=str(python)).start()

    def healthy() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as response:
                return bool(response.status == 200)
        except OSError:
            assert service.proc is not None and service.proc.poll() is None, service.tail()
            return False

    _wait("healthy views service", healthy, timeout_s=120)
    assert (workdir / ".state" / "views-api").is_dir()  # its default state, under its working folder
    return service
