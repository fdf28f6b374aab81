"""The product (foundation/, enrichment_job/, services/) stands on its own: it imports nothing
from the development tooling (infra/, tests/), touches no sys.path, finds no file by climbing out
of its package, and its default folders follow the working directory, not the checkout.

Its layers: `foundation` is the ground floor and imports nothing of the rest; the Spark jobs
(`enrichment_job`) and the services (`services`) stand on it and import nothing of each other."""

import ast
import importlib
import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from enrichment_job.settings import JobSettings
from enrichment_job.views.settings import ViewsSettings
from services.es_sink.config import EsSinkSettings
from services.es_sink.sink import load_template
from services.slack_notifier.config import SlackSettings
from services.views.config import ViewsApiSettings

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ("foundation", "enrichment_job", "services")
TOOLING = {"infra", "tests"}
# What each product package may not import, besides the tooling.
BELOW = {
    "foundation": {"enrichment_job", "services"},
    "enrichment_job": {"services"},
    "services": {"enrichment_job"},
}


def product_files() -> list[Path]:
    return sorted(path for package in PRODUCT for path in (REPO / package).rglob("*.py"))


def _has_file_name(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Name) and n.id == "__file__" for n in ast.walk(node))


def _is_sys_path(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "path"
        and isinstance(node.value, ast.Name)
        and node.value.id == "sys"
    )


def _climbs_out(node: ast.AST) -> bool:
    """Path(__file__).parents[n] or Path(__file__).parent.parent: a file found by where the
    checkout is, not in the package."""
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute):
        return node.value.attr == "parents" and _has_file_name(node.value)
    if isinstance(node, ast.Attribute) and node.attr == "parent":
        inner = node.value
        return isinstance(inner, ast.Attribute) and inner.attr == "parent" and _has_file_name(inner)
    return False


def violations(source: str) -> Iterator[tuple[int, str]]:
    """(line, what) for each way `source` reaches out of the product."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in TOOLING:
                    yield node.lineno, f"import {alias.name}"
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level == 0 and module.split(".")[0] in TOOLING:
                yield node.lineno, f"from {module} import ..."
            if node.level == 0 and module == "sys" and any(a.name == "path" for a in node.names):
                yield node.lineno, "from sys import path"
        elif _is_sys_path(node):
            yield node.lineno, "sys.path"
        elif _climbs_out(node):
            yield node.lineno, "a path above the module's own package, from __file__"


def imported(source: str) -> Iterator[tuple[int, str]]:
    """(line, top-level package) of each absolute import in `source`, local imports included."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module.split(".")[0]


def crossings(package: str, source: str) -> list[tuple[int, str]]:
    """(line, package) of each import of `source`, a module of `package`, across its layer."""
    return [(line, top) for line, top in imported(source) if top in BELOW[package]]


def test_the_product_reaches_nothing_of_the_tooling_or_the_checkout() -> None:
    files = product_files()
    assert len(files) > 50  # the walk found the product
    found = [
        f"{path.relative_to(REPO)}:{line}: {what}"
        for path in files
        for line, what in violations(path.read_text())
    ]
    assert found == [], "the product reaches out of itself:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("source", "line"),
    [
        ("import os\nimport infra.stack.settings\n", 2),
        ("from tests.support.fake_slack import FakeSlack\n", 1),
        ("import sys\nsys.path.insert(0, 'tests')\n", 2),
        ("from sys import path\n", 1),
        ("from pathlib import Path\nROOT = Path(__file__).resolve().parents[2]\n", 2),
        ("from pathlib import Path\nROOT = Path(__file__).parent.parent\n", 2),
    ],
)
def test_the_check_catches_each_way_out(source: str, line: int) -> None:
    assert [found for found, _ in violations(source)] == [line]


@pytest.mark.parametrize(
    "source",
    [
        "from . import config\nfrom .config import Settings\n",
        "import services.core.settings\nfrom enrichment_job.settings import JobSettings\n",
        "import infrastructure\nimport testsuite\n",
        "from pathlib import Path\nPOOLS = Path(__file__).with_name('pools.xml')\n",
    ],
)
def test_the_check_lets_the_product_be(source: str) -> None:
    assert list(violations(source)) == []


@pytest.mark.parametrize(
    ("cls", "folder"),
    [
        (JobSettings, ".state/enrichment"),
        (ViewsSettings, ".state/views"),
        (ViewsApiSettings, ".state/views-api"),
        (SlackSettings, ".state/slack-notifier"),
    ],
)
def test_default_state_folders_are_under_the_working_directory(
    cls: type[JobSettings | ViewsSettings | ViewsApiSettings | SlackSettings],
    folder: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    prefix = str(cls.model_config.get("env_prefix", ""))
    for name in list(os.environ):
        if name.startswith(prefix):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)

    def local(state_dir: Path | str) -> Path:  # the Spark jobs spell a local folder as a file:// URI
        return Path(str(state_dir).removeprefix("file://"))

    assert local(cls().state_dir) == tmp_path / folder
    monkeypatch.setenv(f"{prefix}STATE_DIR", "elsewhere")
    assert local(cls().state_dir) == tmp_path / "elsewhere"  # absolute, as it was found at start


def test_the_index_template_comes_with_the_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("ES_SINK_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    settings = EsSinkSettings()
    assert settings.template_file is None
    assert "properties" in load_template(settings)["template"]["mappings"]


def test_the_layers_hold_foundation_below_the_jobs_and_the_services_apart() -> None:
    found = [
        f"{path.relative_to(REPO)}:{line}: imports {top}"
        for package in PRODUCT
        for path in sorted((REPO / package).rglob("*.py"))
        for line, top in crossings(package, path.read_text())
    ]
    assert found == [], "an import crosses the layers:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("package", "source", "lines"),
    [
        ("foundation", "import os\nfrom services.core.loop import ConsumerLoop\n", [2]),
        ("foundation", "def f():\n    import enrichment_job.driver.app\n", [2]),
        ("enrichment_job", "from services.core.dlq import DeadLetters\n", [1]),
        ("services", "from enrichment_job import settings\nfrom foundation import errors\n", [1]),
        ("enrichment_job", "from foundation.errors import ConfigError\nfrom . import app\n", []),
        ("services", "import servicesx\nfrom services.core import loop\n", []),
    ],
)
def test_the_layer_check_sees_each_crossing(package: str, source: str, lines: list[int]) -> None:
    assert [line for line, _ in crossings(package, source)] == lines


# The Spark side's floors: what each part of enrichment_job/ (a package, or a module at its
# root) may import of the others. The views job stands beside the enrichment job's driver and
# tasks, on the runtime, Kafka and the records alone.
SPARK_FLOORS: dict[str, set[str]] = {
    "runtime": set(),
    "settings": {"runtime"},
    "kafka": {"runtime", "settings"},
    "records": {"runtime", "kafka"},
    "customers": {"runtime", "kafka", "records"},
    "marker": {"runtime", "customers"},
    "tasks": {"runtime", "settings", "kafka", "records", "customers", "marker"},
    "views": {"runtime", "kafka", "records"},
    "driver": {"runtime", "settings", "kafka", "records", "customers", "marker", "tasks", "views"},
    "__main__": {
        "runtime",
        "settings",
        "kafka",
        "records",
        "customers",
        "marker",
        "tasks",
        "views",
        "driver",
    },
}


def spark_part(module: str) -> str:
    """The part of enrichment_job/ a module (dotted, under enrichment_job) belongs to."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def spark_imports(source: str) -> Iterator[tuple[int, str]]:
    """(line, part) of each import of a part of enrichment_job/ in `source`, local imports
    included."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "enrichment_job":
                for alias in node.names:
                    yield node.lineno, alias.name
            elif node.module.startswith("enrichment_job."):
                yield node.lineno, spark_part(node.module)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("enrichment_job."):
                    yield node.lineno, spark_part(alias.name)


def floor_crossings(part: str, source: str) -> list[tuple[int, str]]:
    return [
        (line, other)
        for line, other in spark_imports(source)
        if other != part and other not in SPARK_FLOORS[part]
    ]


def test_the_spark_side_keeps_its_floors() -> None:
    found = []
    for path in sorted((REPO / "enrichment_job").rglob("*.py")):
        module = ".".join(path.relative_to(REPO).with_suffix("").parts)
        part = spark_part(module)
        if part == "__init__":
            continue
        assert part in SPARK_FLOORS, f"{module}: a part of enrichment_job/ with no floor in SPARK_FLOORS"
        found += [
            f"{module}:{line}: imports {other}" for line, other in floor_crossings(part, path.read_text())
        ]
    assert found == [], "an import crosses the Spark side's floors:\n" + "\n".join(found)


def test_the_spark_floors_have_no_circle() -> None:
    placed: list[str] = []
    waiting = dict(SPARK_FLOORS)
    while waiting:
        ready = [part for part, below in waiting.items() if below <= set(placed)]
        assert ready, f"a circle among {sorted(waiting)}"
        for part in ready:
            placed.append(part)
            del waiting[part]
    assert placed[0] == "runtime" and placed[-1] == "__main__"


@pytest.mark.parametrize(
    ("part", "source", "lines"),
    [
        (
            "views",
            "from enrichment_job.runtime.session import build_session\nimport enrichment_job.tasks.enrich\n",
            [2],
        ),
        ("views", "def f():\n    from enrichment_job.driver.recovery import Recovery\n", [2]),
        ("runtime", "from enrichment_job import kafka\n", [1]),
        (
            "tasks",
            "from enrichment_job.marker import BatchMarker\nfrom enrichment_job.tasks import TaskJoin\n",
            [],
        ),
    ],
)
def test_the_floor_check_sees_each_crossing(part: str, source: str, lines: list[int]) -> None:
    assert [line for line, _ in floor_crossings(part, source)] == lines


def module_graph(sources: dict[str, str]) -> dict[str, set[str]]:
    """module -> the modules of `sources` (module -> its text) it imports, local imports and
    `from package import module` included."""
    graph: dict[str, set[str]] = {module: set() for module in sources}
    for module, source in sources.items():
        for node in ast.walk(ast.parse(source)):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            graph[module] |= {t for t in targets if t in sources and t != module}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The modules that import each other, directly or through others (each such group sorted)."""
    reaches = {module: set(imports) for module, imports in graph.items()}
    changed = True
    while changed:  # the transitive closure; a few hundred modules
        changed = False
        for reached in reaches.values():
            more = set().union(*(reaches[other] for other in reached)) - reached
            if more:
                reached.update(more)
                changed = True
    groups = {tuple(sorted(m for m in reaches[module] if module in reaches[m])) for module in graph}
    return sorted(list(group) for group in groups if group)


def test_no_module_of_the_product_imports_in_a_circle() -> None:
    sources = {}
    for path in product_files():
        parts = path.relative_to(REPO).with_suffix("").parts
        sources[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path.read_text()
    assert circles(module_graph(sources)) == []


def test_the_circle_check_sees_a_circle_through_a_local_import() -> None:
    sources = {
        "a": "import b\n",
        "b": "def f():\n    from c import g\n",
        "c": "from a import h\n",
        "d": "import a\n",
    }
    assert circles(module_graph(sources)) == [["a", "b", "c"]]


def product_packages() -> list[str]:
    return sorted(
        ".".join(init.parent.relative_to(REPO).parts)
        for package in PRODUCT
        for init in (REPO / package).rglob("__init__.py")
    )


@pytest.mark.parametrize("package", product_packages())
def test_every_package_declares_its_public_surface(package: str) -> None:
    module = importlib.import_module(package)
    public = getattr(module, "__all__", None)
    assert public, f"{package} declares no __all__"
    for name in public:
        found = hasattr(module, name) or importlib.util.find_spec(f"{package}.{name}") is not None
        assert found, f"{package}.__all__ names {name!r}, which it does not have"


def _public(module: str, name: str) -> bool:
    """Whether `module`.`name` is part of `module`'s declared surface: named in its `__all__`,
    and `module` itself reached through public packages (each named in its parent's)."""
    parts = module.split(".")
    for depth in range(1, len(parts)):
        parent = importlib.import_module(".".join(parts[:depth]))
        if parts[depth] not in getattr(parent, "__all__", ()):
            return False
    return name in getattr(importlib.import_module(module), "__all__", ())


def tooling_imports(source: str) -> Iterator[tuple[int, str, str]]:
    """(line, module, name) of each name `source` imports from the product."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] in PRODUCT:
                for alias in node.names:
                    yield node.lineno, node.module, alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in PRODUCT and "." in alias.name:
                    module, _, name = alias.name.rpartition(".")
                    yield node.lineno, module, name


def test_the_tooling_imports_only_what_the_product_declares_public() -> None:
    """infra/ (the stack, demo, benchmarks, fault matrix) and tests/ use the product as a
    user's code would: through the names each module lists in `__all__`, in modules its
    package lists."""
    files = sorted(path for tooling in TOOLING for path in (REPO / tooling).rglob("*.py"))
    assert len(files) > 150
    found = [
        f"{path.relative_to(REPO)}:{line}: {module}.{name}"
        for path in files
        for line, module, name in tooling_imports(path.read_text())
        if not _public(module, name)
    ]
    assert found == [], "the tooling reaches into the product's internals:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("source", "public"),
    [
        ("from enrichment_job.settings import JobSettings\n", True),
        ("from foundation.errors import ConfigError\n", True),
        ("from enrichment_job import views\n", True),
        ("from enrichment_job.tasks.enrich import _dead_letters\n", False),
        ("from enrichment_job.runtime.jvm import _jar_stamps\n", False),
        ("from services.views.catalog import answer\n", False),  # services.views does not list catalog
        ("import enrichment_job.views.settings\n", True),
    ],
)
def test_the_public_surface_check_tells_declared_names_from_internals(source: str, public: bool) -> None:
    ((_, module, name),) = list(tooling_imports(source))
    assert _public(module, name) is public
