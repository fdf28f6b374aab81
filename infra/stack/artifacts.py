"""Install what the stack runs, from the registries, into caches that later runs reuse.

JVM artifacts: Maven (infra/maven/*.xml, Maven Central only) into ~/.m2, then staged into
<cache>/<component>-<version>/. MariaDB: Debian's package. Nothing is downloaded at run time.
"""

import hashlib
import logging
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from infra.stack.errors import DownloadFailed, PrerequisiteMissing
from infra.stack.settings import INFRA_DIR, StackSettings
from infra.stack.versions import Versions, load_versions

log = logging.getLogger("stack")
MAVEN_DIR = INFRA_DIR / "maven"
COMPLETE = ".complete"
POSTGRES_BIN = Path("/usr/lib/postgresql")  # Debian's layout: <major>/bin


@dataclass(frozen=True)
class Installed:
    """Where the installed artifacts are."""

    java_home: Path
    kafka_lib: Path
    s3proxy_lib: Path
    spark_jars_dir: Path
    connect_plugins: Path
    elasticsearch_zip: Path
    spark_java_home: Path | None = None  # None: java_home
    # The pinned PostgreSQL major version's server programs.
    postgres_bin: Path = field(default_factory=lambda: postgres_bin(load_versions()))

    @property
    def spark_java(self) -> Path:
        """The JDK home the Spark jobs run on."""
        return self.spark_java_home or self.java_home

    @property
    def java(self) -> Path:
        return self.java_home / "bin" / "java"

    def spark_jars(self) -> list[Path]:
        return sorted(self.spark_jars_dir.glob("*.jar"))


@contextmanager
def _step(what: str) -> Iterator[None]:
    log.info("%s ...", what)
    started = time.monotonic()
    yield
    log.info("%s: done in %.1f s", what, time.monotonic() - started)


def find_java(settings: StackSettings, minimum: int) -> Path:
    """The JDK home to run every JVM component with; checks its major version."""
    if settings.java_home is not None:
        java = settings.java_home / "bin" / "java"
    elif os.environ.get("JAVA_HOME"):
        java = Path(os.environ["JAVA_HOME"]) / "bin" / "java"
    else:
        found = shutil.which("java")
        java = Path(found).resolve() if found else Path("java-not-found")
    if not java.exists():
        raise PrerequisiteMissing(
            f"no Java runtime found (looked for {java})",
            hint=f"install a JDK >= {minimum} (Debian: apt-get install openjdk-17-jdk-headless) "
            "or set STACK_JAVA_HOME to one",
        )
    out = subprocess.run([str(java), "-version"], capture_output=True, text=True, check=False).stderr
    match = re.search(r'version "(\d+)', out)
    major = int(match.group(1)) if match else 0
    if major < minimum:
        raise PrerequisiteMissing(
            f"{java} is Java {major or 'unknown'}; the stack needs Java >= {minimum}",
            hint="set STACK_JAVA_HOME to a JDK 17 or newer",
        )
    return java.parent.parent


JVM_DIR = Path("/usr/lib/jvm")  # where Debian's and Adoptium's JDK packages install


def java_release(home: Path) -> tuple[int, ...] | None:
    """A JDK home's version from its `release` file (JAVA_VERSION="25.0.3"), if it has one."""
    try:
        match = re.search(r'^JAVA_VERSION="([\d.]+)"', (home / "release").read_text(), re.MULTILINE)
    except OSError:
        return None
    return _version(match.group(1)) if match else None


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def find_spark_java(settings: StackSettings, wanted: str, jvm_dir: Path = JVM_DIR) -> Path | None:
    """The JDK home for the Spark jobs: STACK_SPARK_JAVA_HOME, else the newest JDK of `wanted`'s
    feature version in `jvm_dir` at `wanted` or later; None: the components' JDK."""
    if settings.spark_java_home is not None:
        home = settings.spark_java_home
        if java_release(home) is None or not (home / "bin" / "java").exists():
            raise PrerequisiteMissing(
                f"STACK_SPARK_JAVA_HOME={home} is not a JDK (no bin/java or release file)",
                hint="point it at a JDK 17, 21 or 25 home, or unset it",
            )
        return home
    least = _version(wanted)
    found = []
    for home in jvm_dir.iterdir() if jvm_dir.is_dir() else []:
        release = java_release(home)
        if release and release[0] == least[0] and release >= least and (home / "bin" / "java").exists():
            found.append((release, str(home)))
    return Path(max(found)[1]) if found else None


def _mvn(args: list[str], what: str) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise PrerequisiteMissing(
            "Maven (mvn) is not on PATH; it resolves the stack's jars from Maven Central",
            hint="apt-get install maven",
        )
    cmd = [mvn, "-B", "-q", "-s", str(MAVEN_DIR / "settings.xml"), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise DownloadFailed(f"Maven could not resolve {what}:\n{tail}")


def _staged(target: Path) -> bool:
    return (target / COMPLETE).exists()


def _publish(tmp: Path, target: Path) -> None:
    """Move a finished staging folder into place, so a half-done one is never used."""
    (tmp / COMPLETE).touch()
    if target.exists():
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp.rename(target)


def _copy_dependencies(pom: str, versions: Versions, out: Path, strip_version: bool = False) -> None:
    props = [f"-D{k}={v}" for k, v in versions.maven_properties().items()]
    extra = ["-Dmdep.stripVersion=true"] if strip_version else []
    _mvn(
        [
            "-f",
            str(MAVEN_DIR / pom),
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={out}",
            *props,
            *extra,
        ],
        what=f"the jars of {pom}",
    )


def _stage_lib(cache: Path, name: str, pom: str, versions: Versions) -> Path:
    """The jars `pom` resolves to, in a folder named after `name` and the POM's content: a
    dependency added to the POM is resolved on the next install, not missed by a cache."""
    digest = hashlib.sha256((MAVEN_DIR / pom).read_bytes()).hexdigest()[:8]
    target = cache / f"{name}-{digest}" / "lib"
    if not _staged(target):
        with _step(f"resolving {name} jars from Maven Central"):
            tmp = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=cache))
            _copy_dependencies(pom, versions, tmp)
            _publish(tmp, target)
    return target


def pyspark_jars_dir() -> Path:
    import pyspark  # noqa: PLC0415 - only needed when staging Spark jars

    return Path(pyspark.__file__).parent / "jars"


def _stage_spark_jars(cache: Path, versions: Versions) -> Path:
    """Spark's Kafka connector, Delta Lake and Hadoop's S3A, minus every jar the pyspark package
    already has."""
    target = cache / f"spark-{versions.spark}-delta-{versions.delta}-hadoop-{versions.hadoop}" / "jars"
    if _staged(target):
        return target
    with _step(
        f"resolving Spark {versions.spark} Kafka connector, Delta {versions.delta} and hadoop-aws jars"
    ):
        tmp = Path(tempfile.mkdtemp(prefix="spark-", dir=cache))
        _copy_dependencies("spark.xml", versions, tmp, strip_version=True)
        shipped = [p.name for p in pyspark_jars_dir().glob("*.jar")]
        for jar in tmp.glob("*.jar"):
            artifact = jar.stem
            if any(re.match(rf"{re.escape(artifact)}-\d", name) for name in shipped):
                jar.unlink()
        _publish(tmp, target)
    return target


def _stage_debezium(cache: Path, versions: Versions, database: str = "mariadb") -> Path:
    """Debezium's connector plugin for `database` (mariadb, postgres), unpacked into a folder of
    its own: Connect's plugin.path lists one folder per captured database."""
    suffix = "" if database == "mariadb" else f"-{database}"
    target = cache / f"debezium-{versions.debezium}" / f"plugins{suffix}"
    if _staged(target):
        return target
    with _step(f"resolving the Debezium {versions.debezium} {database} connector plugin"):
        tmp = Path(tempfile.mkdtemp(prefix="debezium-", dir=cache))
        artifact = f"io.debezium:debezium-connector-{database}:{versions.debezium}:tar.gz:plugin"
        _mvn(["dependency:copy", f"-Dartifact={artifact}", f"-DoutputDirectory={tmp}"], what=artifact)
        archive = next(tmp.glob("*.tar.gz"))
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
        archive.unlink()
        _publish(tmp, target)
    return target


def _stage_elasticsearch(cache: Path, versions: Versions) -> Path:
    target = cache / f"elasticsearch-{versions.elasticsearch}"
    if not _staged(target):
        with _step(f"resolving Elasticsearch {versions.elasticsearch} (integ-test-zip)"):
            tmp = Path(tempfile.mkdtemp(prefix="elasticsearch-", dir=cache))
            artifact = (
                f"org.elasticsearch.distribution.integ-test-zip:elasticsearch:{versions.elasticsearch}:zip"
            )
            _mvn(["dependency:copy", f"-Dartifact={artifact}", f"-DoutputDirectory={tmp}"], what=artifact)
            _publish(tmp, target)
    return next(target.glob("elasticsearch-*.zip"))


def stage_pgjdbc(cache: Path, versions: Versions) -> Path:
    """The PostgreSQL JDBC driver's jar, for the tests that browse the views' wire protocol as a
    JDBC tool does (the stack itself runs no JDBC)."""
    target = cache / f"pgjdbc-{versions.pgjdbc}"
    if not _staged(target):
        with _step(f"resolving the PostgreSQL JDBC driver {versions.pgjdbc} (the tests')"):
            tmp = Path(tempfile.mkdtemp(prefix="pgjdbc-", dir=cache))
            artifact = f"org.postgresql:postgresql:{versions.pgjdbc}"
            _mvn(["dependency:copy", f"-Dartifact={artifact}", f"-DoutputDirectory={tmp}"], what=artifact)
            _publish(tmp, target)
    return target / f"postgresql-{versions.pgjdbc}.jar"


def _run_as_root(cmd: list[str], what: str, env: dict[str, str] | None = None) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-10:])
        raise DownloadFailed(f"{what} failed ({' '.join(cmd)}):\n{tail}")


def ensure_mariadb(versions: Versions) -> None:
    """MariaDB server and client from Debian's packages; the system service is never started."""
    if not (shutil.which("mariadbd") or Path("/usr/sbin/mariadbd").exists()) or not shutil.which("mariadb"):
        if os.geteuid() != 0 or not shutil.which("apt-get"):
            raise PrerequisiteMissing(
                "MariaDB is not installed",
                hint="install it: sudo apt-get install mariadb-server mariadb-client",
            )
        with _step("installing MariaDB from Debian's packages"):
            _apt_install(["mariadb-server", "mariadb-client"])
    out = subprocess.run(["/usr/sbin/mariadbd", "--version"], capture_output=True, text=True, check=False)
    if versions.mariadb_line not in out.stdout:
        raise PrerequisiteMissing(
            f"MariaDB {versions.mariadb_line} expected, found: {out.stdout.strip()}",
            hint="infra/versions.toml pins the MariaDB line; install that one or update the pin",
        )


def postgres_bin(versions: Versions) -> Path:
    """The folder of the pinned PostgreSQL major version's server programs (Debian's layout)."""
    return POSTGRES_BIN / versions.postgres_major / "bin"


def ensure_postgres(versions: Versions) -> None:
    """PostgreSQL server and client from Debian's packages; the system cluster is never started."""
    package = f"postgresql-{versions.postgres_major}"
    if not (postgres_bin(versions) / "postgres").exists() or not shutil.which("psql"):
        if os.geteuid() != 0 or not shutil.which("apt-get"):
            raise PrerequisiteMissing(
                f"PostgreSQL {versions.postgres_major} is not installed",
                hint=f"install it: sudo apt-get install {package} postgresql-client",
            )
        with _step(f"installing PostgreSQL {versions.postgres_major} from Debian's packages"):
            _apt_install([package, "postgresql-client"])


def ensure_chromium() -> None:
    """Debian's Chromium and chromedriver, for the views page's test in headless Chromium; when
    apt cannot run (not root), that test says what is missing."""
    if Path("/usr/bin/chromium").exists() and Path("/usr/bin/chromedriver").exists():
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        log.warning(
            "Chromium is not installed (sudo apt-get install chromium chromium-driver):"
            " the views page's test needs it"
        )
        return
    with _step("installing Chromium and chromedriver from Debian's packages (the views page's test)"):
        _apt_install(["chromium", "chromium-driver"])


def _apt_install(packages: list[str]) -> None:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    _run_as_root(["apt-get", "update", "-q"], "apt-get update", env)
    # policy-rc.d = 101 keeps the package from starting a system MariaDB (3306) or PostgreSQL (5432).
    policy = Path("/usr/sbin/policy-rc.d")
    created = not policy.exists()
    if created:
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
    try:
        _run_as_root(
            ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages],
            f"apt-get install {' '.join(packages)}",
            env,
        )
    finally:
        if created:
            policy.unlink()


def ensure_service_user(name: str) -> None:
    """Elasticsearch and PostgreSQL refuse to run as root; they and MariaDB run as this system user."""
    if subprocess.run(["id", "-u", name], capture_output=True, check=False).returncode == 0:
        return
    _run_as_root(
        [
            "useradd",
            "--system",
            "--no-create-home",
            "--home-dir",
            "/nonexistent",
            "--shell",
            "/usr/sbin/nologin",
            name,
        ],
        f"creating the service user {name}",
    )


def install(settings: StackSettings, versions: Versions) -> Installed:
    """Everything the stack needs, installed or found in the caches. Idempotent."""
    java_home = find_java(settings, versions.java_minimum)
    cache = settings.cache_dir
    cache.mkdir(parents=True, exist_ok=True)
    spark_java_home = find_spark_java(settings, versions.spark_java)
    log.info("the Spark jobs run on %s", spark_java_home or java_home)
    installed = Installed(
        java_home=java_home,
        spark_java_home=spark_java_home,
        kafka_lib=_stage_lib(cache, f"kafka-{versions.kafka}", "kafka.xml", versions),
        s3proxy_lib=_stage_lib(cache, f"s3proxy-{versions.s3proxy}", "s3proxy.xml", versions),
        spark_jars_dir=_stage_spark_jars(cache, versions),
        connect_plugins=_stage_debezium(cache, versions, settings.source),
        elasticsearch_zip=_stage_elasticsearch(cache, versions),
        postgres_bin=postgres_bin(versions),
    )
    if settings.source == "postgres":
        ensure_postgres(versions)
    else:
        ensure_mariadb(versions)
    if os.geteuid() == 0:
        ensure_service_user(settings.service_user)
    ensure_chromium()
    stage_pgjdbc(cache, versions)
    return installed
