"""Secrets left at a deploy template's value are refused at start: the check on settings
objects, and each service's real process exiting with EX_CONFIG before it touches the bus."""

from __future__ import annotations

import ast
import asyncio
import importlib.util
import os
import sys
from pathlib import Path

import pytest
from pydantic import SecretStr

from tether_approvals.settings import ApprovalSettings
from tether_client.server.supervisor import SERVICES, ServiceSpec
from tether_common.placeholders import EX_CONFIG, PlaceholderSecret, placeholder_secrets
from tether_common.settings import CommonSettings
from tether_gateway.settings import GatewaySettings
from tether_tools_runner.settings import RunnerSettings

GOOD_KEY = "k3y-" + "x" * 40


def common(**values: object) -> CommonSettings:
    return CommonSettings.model_validate(
        {"database_url": "postgresql://tether:s3cret@db:5432/tether"} | values
    )


def test_real_secrets_pass() -> None:
    settings = common(
        nats_user="brain",
        nats_password="9f8e7d6c5b4a",
        operator_token="tok-0123456789",
        decision_key=SecretStr(GOOD_KEY),
    )
    assert placeholder_secrets(settings, GatewaySettings(), RunnerSettings()) == []


@pytest.mark.parametrize(
    ("values", "setting"),
    [
        ({"nats_user": "brain", "nats_password": "change-me-brain"}, "TETHER_NATS_PASSWORD"),
        ({"operator_token": "change-me"}, "TETHER_OPERATOR_TOKEN"),
        ({"operator_token": "REPLACE-ME"}, "TETHER_OPERATOR_TOKEN"),
        ({"decision_key": SecretStr("  Replace-Me  ")}, "TETHER_DECISION_KEY"),
        ({"database_url": "postgresql://tether:REPLACE-ME@pg/tether"}, "TETHER_DATABASE_URL"),
        ({"nats_url": "nats://brain:changeme@nats:4222"}, "TETHER_NATS_URL"),
    ],
)
def test_a_template_value_is_named(values: dict[str, object], setting: str) -> None:
    assert placeholder_secrets(common(**values)) == [PlaceholderSecret(setting, "template value")]


@pytest.mark.parametrize("password", [None, "", "  "])
def test_a_bus_user_without_a_password_is_refused(password: str | None) -> None:
    refused = placeholder_secrets(common(nats_user="brain", nats_password=password))
    assert refused == [PlaceholderSecret("TETHER_NATS_PASSWORD", "missing")]


def test_an_empty_optional_secret_is_left_to_its_service() -> None:
    assert placeholder_secrets(common(operator_token=""), RunnerSettings(brave_api_key="")) == []


def test_service_secrets_are_checked_under_their_own_prefix() -> None:
    gateway = GatewaySettings(anthropic_api_key=SecretStr("REPLACE-ME"))
    runner = RunnerSettings(brave_api_key="change-me")
    assert placeholder_secrets(common(), gateway, runner) == [
        PlaceholderSecret("TETHER_GATEWAY_ANTHROPIC_API_KEY", "template value"),
        PlaceholderSecret("TETHER_RUNNER_BRAVE_API_KEY", "template value"),
    ]


def test_a_url_without_a_password_and_ordinary_text_pass() -> None:
    approvals = ApprovalSettings(public_url="https://change-me.example.com/approvals")
    assert (
        placeholder_secrets(common(database_url="postgresql://tether@db/tether"), approvals) == []
    )


def test_the_message_never_holds_the_value() -> None:
    (refused,) = placeholder_secrets(common(operator_token="change-me-but-secret-part"))
    assert "secret-part" not in refused.message()
    assert "TETHER_OPERATOR_TOKEN" in refused.message()


async def start_refused(spec: ServiceSpec) -> tuple[int | None, str]:
    """`python -m` the service with the compose default of its bus password, nothing
    listening on the NATS URL; its exit status and output."""
    env = os.environ | {
        "TETHER_NATS_URL": "nats://127.0.0.1:9",
        "TETHER_NATS_USER": spec.name,
        "TETHER_NATS_PASSWORD": f"change-me-{spec.name}",
        "TETHER_LOG_FORMAT": "json",
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        spec.module,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await asyncio.wait_for(proc.communicate(), timeout=100)
    return proc.returncode, output.decode(errors="replace")


@pytest.mark.timeout(120)
async def test_a_service_refuses_to_start_with_a_template_secret() -> None:
    """A real process exits EX_CONFIG, naming the setting and not its value, before it
    connects anywhere (one service: the check is in `run_main`, which all share)."""
    spec = next(s for s in SERVICES if s.name == "approvals")
    code, text = await start_refused(spec)
    assert code == EX_CONFIG, text[-2000:]
    assert "TETHER_NATS_PASSWORD" in text
    assert f"change-me-{spec.name}" not in text
    assert '"code": "placeholder_secret"' in text


@pytest.mark.parametrize("spec", SERVICES, ids=[s.name for s in SERVICES])
def test_every_service_starts_through_run_main(spec: ServiceSpec) -> None:
    main = importlib.util.find_spec(f"{spec.module}.__main__")
    assert main is not None
    assert main.origin is not None
    tree = ast.parse(Path(main.origin).read_text())
    called = {
        node.func.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    }
    assert "run_main" in called
