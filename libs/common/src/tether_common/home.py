"""Where Tether keeps its data on this machine (`TETHER_HOME`, else `~/.tether`). Its own
module, free of pydantic-settings, so the command line finds the operator token without
paying for the settings machinery (`tether_common.settings` re-exports both)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["default_home", "tether_home"]


def default_home() -> Path:
    return Path.home() / ".tether"


def tether_home() -> Path:
    """`TETHER_HOME`, else `~/.tether`: where `tether up` keeps its data and the operator
    token, and where the CLI looks for them."""
    return Path(os.environ.get("TETHER_HOME") or default_home()).expanduser()
