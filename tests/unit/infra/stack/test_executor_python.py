"""The Spark cluster's files for the service user: the executors' Python environment and
SPARK_HOME, linked from the files they come from, built again only when those changed."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from infra.stack import executor_python
from infra.stack.errors import PrerequisiteMissing
from infra.stack.settings import StackSettings

VERSION = f"{sys.version_info.major}.{sys.version_info.minor}"
INSIDE = Path("lib") / f"python{VERSION}" / "site-packages"


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.fixture
def site(tmp_path: Path) -> Path:
    site = _tree(
        tmp_path / "venv" / "site-packages",
        {
            "pyarrow/__init__.py": "version = 1\n",
            "pyspark/__init__.py": "",
            "pyspark/jars/spark-core.jar": "PK",
            "__editable__.ratings_enrichment-0.1.0.pth": "import __editable___finder\n",
            "__editable___ratings_enrichment_0_1_0_finder.py": "MAPPING = {'enrichment_job': '/checkout'}\n",
            "distutils-precedence.pth": "",
        },
    )
    (site / "linked").symlink_to("pyarrow")
    return site


def test_the_environment_is_a_venv_with_the_packages_but_no_jars_no_editable_hook_and_no_product(
    tmp_path: Path, site: Path
) -> None:
    target = tmp_path / "lib" / "executor-python"
    built = executor_python.build_environment(target, Path(sys.executable).resolve(), site)
    assert built == target
    packages = target / INSIDE
    files = sorted(
        (Path(folder) / name).relative_to(packages).as_posix()
        for folder, dirs, names in os.walk(packages)
        for name in [*names, *(d for d in dirs if Path(folder, d).is_symlink())]
    )
    assert files == [
        "distutils-precedence.pth",
        "linked",
        "pyarrow/__init__.py",
        "pyspark/__init__.py",
    ]
    # hard links: the same files, no copy
    assert (packages / "pyarrow" / "__init__.py").stat().st_ino == (
        site / "pyarrow" / "__init__.py"
    ).stat().st_ino
    assert os.readlink(packages / "linked") == "pyarrow"
    assert (target / "bin" / "python").resolve() == Path(sys.executable).resolve()
    assert "include-system-site-packages = false" in (target / "pyvenv.cfg").read_text()
    # the interpreter finds its packages there, from anywhere; the product comes with each job
    found = subprocess.run(
        [
            str(target / "bin" / "python"),
            "-c",
            "import pyarrow, importlib.util as u; print(pyarrow.__file__, u.find_spec('enrichment_job'))",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=True,
    )
    assert found.stdout.strip() == f"{packages / 'pyarrow' / '__init__.py'} None"
    assert all(Path(f).stat().st_mode & 0o755 == 0o755 for f, _, _ in os.walk(target))


def test_it_is_built_again_only_when_a_file_it_comes_from_changed(tmp_path: Path, site: Path) -> None:
    target = tmp_path / "executor-python"
    interpreter = Path(sys.executable).resolve()
    executor_python.build_environment(target, interpreter, site)
    marker = target / "kept"
    marker.write_text("")
    executor_python.build_environment(target, interpreter, site)
    assert marker.exists(), "nothing changed: the folder stays"
    replaced = site / "pyarrow" / "__init__.py"
    replaced.unlink()  # as pip and most editors write a file: a new one in its place
    replaced.write_text("version = 2\n")
    executor_python.build_environment(target, interpreter, site)
    assert not marker.exists()
    assert (target / INSIDE / "pyarrow" / "__init__.py").read_text() == "version = 2\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["executor-python", "venv"]


def test_an_interpreter_the_service_user_cannot_run_is_refused_with_the_setting_that_names_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    answers = {"/usr/bin/python3.9": "3.9"}
    monkeypatch.setattr(
        executor_python, "_runs_as", lambda user, python: answers.get(str(python), "not found")
    )
    chosen = StackSettings(state_dir=tmp_path, spark_python=Path("/opt/py/bin/python3"))
    with pytest.raises(PrerequisiteMissing) as refused:
        executor_python.interpreter_for(chosen, "svc")
    assert f"a Python {VERSION} that svc can run" in str(refused.value)
    assert "/opt/py/bin/python3: not found" in str(refused.value)
    assert "STACK_SPARK_PYTHON" in refused.value.hint
    answers[f"/usr/bin/python{VERSION}"] = VERSION  # the venv's own interpreter is not the user's
    assert executor_python.interpreter_for(StackSettings(state_dir=tmp_path), "svc") == Path(
        f"/usr/bin/python{VERSION}"
    )
    own = Path(sys._base_executable).resolve()  # when the user can run it, it comes first
    answers[str(own)] = VERSION
    assert executor_python.interpreter_for(StackSettings(state_dir=tmp_path), "svc") == own


def test_spark_home_is_the_pyspark_package_with_its_jars_and_python_zips(tmp_path: Path) -> None:
    settings = StackSettings(state_dir=tmp_path / "state", service_dir=tmp_path / "svc")
    home = executor_python.spark_home(settings)
    assert home == settings.service_state_dir / "lib" / executor_python.spark_home_name()
    assert any(home.glob("jars/spark-core_*.jar"))
    assert (home / "python" / "lib" / "pyspark.zip").exists()
