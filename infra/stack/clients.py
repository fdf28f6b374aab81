"""Client connections built from <state>/stack.env (what `make up` writes for clients)."""

from typing import Any

from foundation import customer_db


def app_db(env: dict[str, str]) -> Any:
    """The customer database (MariaDB or PostgreSQL, as the stack was made) as the application's
    least-privilege user (reads and writes the customers table), autocommit."""
    kind = env.get("CUSTOMER_DB", "mariadb")
    if kind not in customer_db.KINDS:
        raise ValueError(f"CUSTOMER_DB={kind!r} in stack.env: expected one of {customer_db.KINDS}")
    return customer_db.connect(
        kind,
        env.get("CUSTOMER_DB_HOST", env.get("MARIADB_HOST", "127.0.0.1")),
        int(env.get("CUSTOMER_DB_PORT", env.get("MARIADB_PORT", "3306"))),
        env["APP_DB_USER"],
        env["APP_DB_PASSWORD"],
        env.get("CUSTOMER_DB_NAME", "demo"),
    )


def spark_job_on_cluster(env: dict[str, str], prefix: str = "ENRICH_") -> dict[str, str]:
    """The settings of a Spark job (`prefix`: ENRICH_ or VIEWS_JOB_) to run on the stack's
    standalone cluster, in client mode (the driver here, the executors on the workers), with
    the cluster's SPARK_CONF_DIR (its shared secret: the cluster refuses a job without it), and
    the interpreter its executors' Python workers run where the stack names one."""
    master = env.get("SPARK_MASTER_URL")
    if not master:
        raise ValueError("the stack runs no Spark cluster: make up with STACK_SPARK_CLUSTER=true")
    settings = {
        f"{prefix}MASTER": master,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_CONF_DIR": env["SPARK_CONF_DIR"],
    }
    if python := env.get("SPARK_EXECUTOR_PYTHON"):
        settings[f"{prefix}EXECUTOR_PYTHON"] = python
    return settings


def spark_job_state_in_s3(env: dict[str, str], path: str, prefix: str = "ENRICH_") -> dict[str, str]:
    """The settings of a Spark job (`prefix`) to keep its state at `path` in the stack's state
    bucket (s3a://)."""
    return {
        f"{prefix}STATE_DIR": f"s3a://{env['S3_STATE_BUCKET']}/{path}",
        f"{prefix}S3_ENDPOINT": env["S3_ENDPOINT_URL"],
        f"{prefix}S3_REGION": env["S3_REGION"],
        f"{prefix}S3_ACCESS_KEY": env["S3_ACCESS_KEY"],
        f"{prefix}S3_SECRET_KEY": env["S3_SECRET_KEY"],
    }
