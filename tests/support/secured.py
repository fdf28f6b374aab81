"""Clients of the secured stack (STACK_KAFKA_SECURITY=scram): each program's principal, as
librdkafka and Java client settings, from the passwords `make up` wrote to stack.env."""

import json

from infra.stack import kafka_security

StackEnv = dict[str, str]


def client(stack_env: StackEnv, user: str) -> dict[str, str]:
    """librdkafka settings of `user` (a program's principal, or "admin")."""
    password = stack_env[kafka_security.password_name(user)]
    return {
        "bootstrap.servers": stack_env["KAFKA_BOOTSTRAP_SERVERS"],
        **kafka_security.client_config(user, password),
    }


def kafka_extra(stack_env: StackEnv, user: str) -> str:
    """A program's *_KAFKA_EXTRA: its principal's librdkafka settings as JSON."""
    password = stack_env[kafka_security.password_name(user)]
    return json.dumps(kafka_security.client_config(user, password))


def spark_kafka_extra(stack_env: StackEnv, user: str) -> str:
    """A Spark job's *_SPARK_KAFKA_EXTRA: its principal's Java client settings as JSON."""
    password = stack_env[kafka_security.password_name(user)]
    return json.dumps(kafka_security.java_client_config(user, password))
