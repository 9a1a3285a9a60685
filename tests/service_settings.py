"""Each service's settings class by the service's name in `tether_common.topology`, for
the static tests that check defaults, images and deploy files against the table."""

from __future__ import annotations

from pydantic_settings import BaseSettings

from tether_approvals.settings import ApprovalSettings
from tether_brain.settings import BrainSettings
from tether_gateway.settings import GatewaySettings
from tether_output_store.settings import OutputSettings
from tether_tools_runner.settings import RunnerSettings

SETTINGS: dict[str, type[BaseSettings]] = {
    "brain": BrainSettings,
    "gateway": GatewaySettings,
    "tools-runner": RunnerSettings,
    "approvals": ApprovalSettings,
    "output-store": OutputSettings,
}
