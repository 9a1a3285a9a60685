"""Subjects are declared once, valid, unique, and never spelled inside a service."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tether_common.messages.base import WireModel
from tether_common.subjects import Subjects

ROOT = Path(__file__).resolve().parents[2]
TOKEN = re.compile(r"^[A-Za-z0-9_-]+$")


@pytest.mark.parametrize("prefix", ["tether", "acme.prod", "t123"])
def test_route_subjects_are_valid_and_unique(prefix: str) -> None:
    subjects = Subjects(prefix)
    routes = subjects.routes()
    names = [r.subject for r in routes]
    assert len(names) == len(set(names))
    for name in [*names, subjects.run_events("run_1"), subjects.approval_decided]:
        assert name.startswith(prefix + ".")
        assert not name.startswith("$")
        assert all(TOKEN.match(token) for token in name.split(".")), name
    for route in routes:
        assert issubclass(route.request, WireModel)
        assert issubclass(route.reply, WireModel)
        assert route.queue


def test_stream_subjects_cover_events_and_decisions() -> None:
    subjects = Subjects("tether")
    covered = {s for spec in subjects.streams for s in spec.subjects}
    assert subjects.run_events_all in covered
    assert subjects.approval_decided in covered
    assert len({spec.name for spec in subjects.streams}) == len(subjects.streams)


def test_no_service_spells_a_subject() -> None:
    offenders = []
    for path in (ROOT / "services").rglob("*.py"):
        text = path.read_text()
        if re.search(r"""["']tether\.(runs|events|gateway|tools|approvals|outputs)\b""", text):
            offenders.append(str(path.relative_to(ROOT)))
    assert not offenders
