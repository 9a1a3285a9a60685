"""The bench's own unit tests. `bench` is a folder at the repository's top, run as
`python -m bench` from there and not installed, so it is put on the path here."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
