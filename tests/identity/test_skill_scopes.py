"""Skill scopes in the store and the runs' library: a tenant sees the global skills and
its own, never another's; writes land in the scope asked for; tenant names never leave
the skill folder."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tether_brain.skills import FolderSkillStore, Skill
from tether_brain.tools.local import SkillLibrary, SkillTool
from tether_common.errors import ConflictError, MessageError, NotFoundError
from tether_common.testing import until

BODY = "- Read first.\n- Change little."


def skill(store: FolderSkillStore, name: str, tenant: str | None, topic: str) -> None:
    # Descriptions share no meaningful word, so the validator's overlap check is quiet.
    store.create(name, f"{topic.capitalize()} {topic}. Use when {topic}.", BODY, tenant)


@pytest.fixture
def store(tmp_path: Path) -> FolderSkillStore:
    shipped = tmp_path / "shipped"
    found = FolderSkillStore([tmp_path / "user", shipped])
    skill(found, "global-one", None, "lighthouses")
    for tenant, topic in (("acme", "anvils"), ("acme.corp", "rockets"), ("zeta", "zebras")):
        skill(found, f"{tenant.replace('.', '-')}-only", tenant, topic)
    return found


def test_each_tenant_sees_the_global_skills_and_its_own(store: FolderSkillStore) -> None:
    assert set(store.by_name(None)) == {"global-one"}
    assert set(store.by_name("acme")) == {"global-one", "acme-only"}
    assert set(store.by_name("acme.corp")) == {"global-one", "acme-corp-only"}
    assert set(store.by_name("zeta")) == {"global-one", "zeta-only"}
    assert set(store.by_name("nobody")) == {"global-one"}
    assert {t: set(s) for t, s in store.every_tenant().items()} == {
        "acme": {"acme-only"},
        "acme.corp": {"acme-corp-only"},
        "zeta": {"zeta-only"},
    }
    with pytest.raises(NotFoundError):
        store.get("zeta-only", "acme")
    assert store.get("zeta-only", "zeta").tenant == "zeta"


def test_writes_stay_in_their_scope(store: FolderSkillStore) -> None:
    with pytest.raises(ConflictError):  # a global name is taken in every view
        skill(store, "global-one", "acme", "cranes")
    with pytest.raises(ConflictError):  # a new global may not shadow a tenant's skill
        skill(store, "zeta-only", None, "kites")
    skill(store, "zeta-only", "acme", "kites")  # another tenant's name is free here
    with pytest.raises(NotFoundError):
        store.delete("acme-only", "zeta")
    with pytest.raises(ConflictError):  # a global skill is not a tenant's to delete
        store.delete("global-one", "acme")
    store.delete("acme-only", "acme")
    assert set(store.by_name("acme")) == {"global-one", "zeta-only"}
    assert set(store.by_name("zeta")) == {"global-one", "zeta-only"}


@pytest.mark.parametrize(
    "tenant", ["..", "../zeta", ".tenants", "a/b", "/etc", "", ".", "zeta\n", "x" * 201]
)
def test_a_tenant_name_never_leaves_the_folder(store: FolderSkillStore, tenant: str) -> None:
    with pytest.raises(MessageError):
        store.by_name(tenant)
    with pytest.raises(MessageError):
        skill(store, "escape", tenant, "escapes")


async def test_a_runs_library_view_is_its_tenants(store: FolderSkillStore) -> None:
    library = SkillLibrary(store, ttl_s=3600)
    assert set(await library.refresh("acme")) == {"global-one", "acme-only"}
    assert "zeta-only" not in library.current("acme")
    skill(store, "late-one", "acme", "ladders")
    assert "late-one" not in library.current("acme")  # cached until told
    library.forget()
    assert "late-one" in library.current("acme")
    # The shared tool descriptor names no skill at all.
    descriptor = SkillTool(library).descriptor()
    assert descriptor is not None
    assert "acme" not in descriptor.model_dump_json()
    assert "zeta" not in descriptor.model_dump_json()


class ReadsWatched(FolderSkillStore):
    """The folder store, noting the thread of each whole-folder read."""

    threads: list[int]

    def by_name(self, tenant: str | None = None) -> dict[str, Skill]:
        self.threads.append(threading.get_ident())
        return super().by_name(tenant)


async def test_whether_any_skill_exists_is_read_again_off_the_event_loop(
    tmp_path: Path,
) -> None:
    """Asked at every step: after the first answer (and after `forget`), the folders are
    read again in a thread once the answer is stale, never on the loop's own thread,
    while the last answer stands; a skill written here is seen at once."""
    store = ReadsWatched([tmp_path / "user"])
    store.threads = []
    library = SkillLibrary(store, ttl_s=0.0)
    loop_thread = threading.get_ident()
    assert library.any() is False  # first answer: read here
    skill(store, "late-one", None, "ladders")
    store.threads.clear()
    assert library.any() is False  # stale: the last answer stands, a re-read starts
    # Up to 30 s on a loaded machine; ends at the first yes.
    await until(library.any, timeout=30, every=0.01, what="the re-read to see the skill")
    assert library.any() is True
    assert store.threads
    assert loop_thread not in store.threads
    store.delete("late-one")
    library.forget()
    assert library.any() is False  # this replica's own write is seen at once
