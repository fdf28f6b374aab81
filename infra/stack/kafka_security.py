"""The local stack's secured Kafka (STACK_KAFKA_SECURITY=scram): SASL/SCRAM-SHA-512 on the client
listener, SASL/PLAIN between the node's broker and controller, the StandardAuthorizer with no
access where no ACL grants it, and one principal per program with only the ACLs it needs.

Passwords are made once per state folder (`secrets.env`, 0600) like the stack's other
credentials. The stack's own tooling (topics, health checks, tests' set-up) connects as `admin`,
the one super user; the controller listener has a principal of its own.
"""

from dataclasses import dataclass

from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialAlteration,
    UserScramCredentialUpsertion,
)

from infra.stack.settings import StackSettings

MECHANISM = "SCRAM-SHA-512"
ADMIN = "admin"
CONTROLLER = "controller"
LISTENER = "SASL"  # the client listener's name (its protocol: SASL_PLAINTEXT)
SCRAM_ITERATIONS = 8192
# How every client signs in (librdkafka and the Java client name these two the same).
SIGNED_IN = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": MECHANISM}
# The variable of Connect's environment that holds its JAAS line, for what takes no worker settings.
CONNECT_JAAS_VARIABLE = "KAFKA_SASL_JAAS_CONFIG"

R, W, D = AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE
TOPIC, GROUP, TXN = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID
LITERAL, PREFIXED = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED


@dataclass(frozen=True)
class Grant:
    """Operations on one resource (a name, or every name starting with it when `prefixed`)."""

    kind: ResourceType
    name: str
    operations: tuple[AclOperation, ...]
    prefixed: bool = False


def _reads(*topics: str) -> list[Grant]:
    return [Grant(TOPIC, t, (R, D)) for t in topics]


def _writes(*topics: str) -> list[Grant]:
    return [Grant(TOPIC, t, (W, D)) for t in topics]


def _dead_letters(topic: str) -> Grant:
    """A service's dead-letter topic: written, and its record limit read (DescribeConfigs)."""
    return Grant(TOPIC, topic, (W, D, AclOperation.DESCRIBE_CONFIGS))


def _group(name: str, prefixed: bool = False) -> Grant:
    return Grant(GROUP, name, (R, D), prefixed)


def _transactions(prefix: str) -> Grant:
    return Grant(TXN, prefix, (W, D), prefixed=True)


# What each program may do, by the topic, group and transactional-id names of its defaults
# (prefixes where a name is made at run time: the job's run ids, Spark's source groups).
PRINCIPALS: dict[str, list[Grant]] = {
    "connect": [
        # The worker's own topics (it creates them), its group, Debezium's schema history and
        # change events; nothing else.
        Grant(
            TOPIC, "_connect-", (AclOperation.CREATE, R, W, D, AclOperation.DESCRIBE_CONFIGS), prefixed=True
        ),
        _group("ratings-connect"),
        Grant(TOPIC, "dbhistory.asgard", (R, W, D, AclOperation.DESCRIBE_CONFIGS)),
        _group("asgard-schemahistory"),
        *_writes("asgard.demo.customers", "__debezium-heartbeat.asgard"),
    ],
    "enrichment": [
        *_reads("ratings", "asgard.demo.customers", "enrichment-commits"),
        *_writes(
            "ratings-with-customer-data",
            "unhappy-platinum-customers",
            "enrichment-dlq",
            "customers",
            "enrichment-commits",
        ),
        # Its commits topic's cleanup.policy, checked at start (a policy that ages markers out
        # would make the job start over), and its dead-letter topic's retention (how long the
        # claim-check store keeps the bytes of its dead letters).
        Grant(TOPIC, "enrichment-commits", (AclOperation.DESCRIBE_CONFIGS,)),
        Grant(TOPIC, "enrichment-dlq", (AclOperation.DESCRIBE_CONFIGS,)),
        _transactions("enrichment"),
        _group("enrichment", prefixed=True),
        _group("marker-reader-", prefixed=True),
    ],
    "views": [
        *_reads("ratings-with-customer-data", "views-commits", "views-catalog"),
        *_writes("views-commits", "views-dlq"),
        Grant(TOPIC, "views-commits", (AclOperation.DESCRIBE_CONFIGS,)),
        Grant(TOPIC, "views-dlq", (AclOperation.DESCRIBE_CONFIGS,)),
        # the changelog topics of the views declared in SQL: made with the view, deleted with it,
        # read back for a retention's windows after a restart
        Grant(TOPIC, "view.", (R, W, D, AclOperation.CREATE, AclOperation.DELETE), prefixed=True),
        _group("views-catalog-reader"),
        _group("views-backfill-probe"),
        _transactions("views"),
        _group("spark-kafka-source-", prefixed=True),
        _group("marker-reader-", prefixed=True),
    ],
    "views-api": [
        Grant(TOPIC, "view.", (R, D), prefixed=True),
        *_reads("views-commits"),
        _group("views-api"),
    ],
    "slack-notifier": [
        *_reads("unhappy-platinum-customers"),
        _dead_letters("slack-notifier-dlq"),
        _group("slack-notifier"),
    ],
    "es-sink": [*_reads("ratings-with-customer-data"), _dead_letters("es-sink-dlq"), _group("es-sink")],
    "s3-sink": [*_reads("ratings-with-customer-data"), _dead_letters("s3-sink-dlq"), _group("s3-sink")],
    "loadgen": _writes("ratings"),
}


def password_name(user: str) -> str:
    """The secrets.env entry of a principal's password."""
    return "KAFKA_PASSWORD_" + user.upper().replace("-", "_")


SECRET_NAMES = tuple(password_name(u) for u in (ADMIN, CONTROLLER, *PRINCIPALS))


def client_secret_names() -> tuple[str, ...]:
    """The passwords clients may need (stack.env): every principal's and the admin's, not the
    controller's, which only the node itself uses."""
    return tuple(password_name(u) for u in (ADMIN, *PRINCIPALS))


def client_config(user: str, password: str) -> dict[str, str]:
    """librdkafka settings of a principal (confluent-kafka; the services' *_KAFKA_EXTRA)."""
    return {**SIGNED_IN, "sasl.username": user, "sasl.password": password}


def admin_config(settings: StackSettings, secrets: dict[str, str]) -> dict[str, str | int | float | bool]:
    """How the stack's own tooling reaches the broker: as `admin` in the secured mode."""
    config: dict[str, str | int | float | bool] = {"bootstrap.servers": settings.bootstrap_servers}
    if settings.kafka_security == "scram":
        config |= client_config(ADMIN, secrets[password_name(ADMIN)])
    return config


def jaas(user: str, password: str) -> str:
    module = "org.apache.kafka.common.security.scram.ScramLoginModule"
    return f'{module} required username="{user}" password="{password}";'


def java_client_config(user: str, password: str) -> dict[str, str]:
    """The Java client's settings of a principal (Spark's Kafka source, Connect)."""
    return {**SIGNED_IN, "sasl.jaas.config": jaas(user, password)}


def schema_history_config() -> dict[str, str]:
    """The connector settings that sign Debezium's schema-history clients in (they take no
    worker settings): the JAAS line by reference to Connect's environment, never the password."""
    signed_in = {**SIGNED_IN, "sasl.jaas.config": f"${{env:{CONNECT_JAAS_VARIABLE}}}"}
    return {
        f"schema.history.internal.{client}.{key}": value
        for client in ("producer", "consumer")
        for key, value in signed_in.items()
    }


def broker_properties(port: int, controller_port: int, secrets: dict[str, str]) -> dict[str, str]:
    """server.properties of the secured node (later keys win over the shared file's)."""
    controller_password = secrets[password_name(CONTROLLER)]
    plain = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="{CONTROLLER}" password="{controller_password}" '
        f'user_{CONTROLLER}="{controller_password}";'
    )
    return {
        "listeners": f"{LISTENER}://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"{LISTENER}://127.0.0.1:{port}",
        "listener.security.protocol.map": f"CONTROLLER:SASL_PLAINTEXT,{LISTENER}:SASL_PLAINTEXT",
        "inter.broker.listener.name": LISTENER,
        "sasl.enabled.mechanisms": MECHANISM,
        "sasl.mechanism.inter.broker.protocol": MECHANISM,
        f"listener.name.{LISTENER.lower()}.{MECHANISM.lower()}.sasl.jaas.config": jaas(
            ADMIN, secrets[password_name(ADMIN)]
        ),
        # SCRAM credentials live in the cluster's metadata, which the controller must reach first.
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.controller.plain.sasl.jaas.config": plain,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "false",
        "super.users": f"User:{ADMIN};User:{CONTROLLER}",
    }


def format_arguments(secrets: dict[str, str]) -> list[str]:
    """The storage tool's arguments that put the admin's SCRAM credential in the first metadata."""
    return ["--add-scram", f"{MECHANISM}=[name={ADMIN},password={secrets[password_name(ADMIN)]}]"]


def bindings(user: str, grants: list[Grant]) -> list[AclBinding]:
    """The ACLs of `user`'s grants, each once (a topic both read and written is described once)."""
    unique = {
        AclBinding(
            g.kind,
            g.name,
            PREFIXED if g.prefixed else LITERAL,
            f"User:{user}",
            "*",
            op,
            AclPermissionType.ALLOW,
        )
        for g in grants
        for op in g.operations
    }
    return list(unique)


def ensure_principals(admin: AdminClient, secrets: dict[str, str], timeout_s: float = 30) -> None:
    """Every program's SCRAM credential and exactly the ACLs of its grants (idempotent: an upsert,
    a create of what exists, and a delete of what the grants no longer name)."""
    upserts: list[UserScramCredentialAlteration] = [
        UserScramCredentialUpsertion(
            user,
            ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, SCRAM_ITERATIONS),
            secrets[password_name(user)].encode(),
        )
        for user in PRINCIPALS
    ]
    for future in admin.alter_user_scram_credentials(upserts).values():
        future.result(timeout_s)
    acls = [b for user, grants in PRINCIPALS.items() for b in bindings(user, grants)]
    for future in admin.create_acls(acls).values():
        future.result(timeout_s)
    # What an older version of this table granted and this one does not, taken back.
    wanted = set(acls)
    stale = [b for user in PRINCIPALS for b in granted(admin, user, timeout_s) if b not in wanted]
    if stale:
        for future in admin.delete_acls([_exactly(b) for b in stale]).values():
            future.result(timeout_s)


def granted(admin: AdminClient, user: str, timeout_s: float = 30) -> list[AclBinding]:
    """The ACLs the cluster holds for `user`."""
    every = AclBindingFilter(  # None: any name, any host (the stubs type them as str)
        ResourceType.ANY,
        None,  # type: ignore[arg-type]
        ResourcePatternType.ANY,
        f"User:{user}",
        None,  # type: ignore[arg-type]
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    found: list[AclBinding] = admin.describe_acls(every).result(timeout_s)
    return found


def _exactly(binding: AclBinding) -> AclBindingFilter:
    return AclBindingFilter(
        binding.restype,
        binding.name,
        binding.resource_pattern_type,
        binding.principal,
        binding.host,
        binding.operation,
        binding.permission_type,
    )
