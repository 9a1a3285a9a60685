"""The brain does not import the MCP SDK until the face is used (faces/mcp.py): the SDK
was about a fifth of a start's CPU. The face's own behaviour is in test_faces.py."""

from __future__ import annotations

import subprocess
import sys

PROBE = "import sys, tether_brain.app; print(sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'mcp_types')))"


def test_the_brain_imports_no_mcp_sdk_at_start() -> None:
    # A child process: this one may have imported the SDK already (the faces' client).
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[]"
