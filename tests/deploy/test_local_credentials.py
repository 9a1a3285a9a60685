"""Local servers do not trust local users: the embedded PostgreSQL asks every connection
for its generated password (TCP and socket alike), listens on loopback only, keeps its
data private and runs without group root; the secrets `tether up` keeps are private from
the moment they exist."""

from __future__ import annotations

import os
import stat
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from tether_client import up
from tether_client.server.embedded import (
    PG_SYSTEM_USER,
    EmbeddedPostgres,
    _pg_bin,
    _prepare_root_user,
)
from tether_client.server.secretfiles import narrow, read_secret, secret_in, write_secret
from tether_common.errors import ConfigError


def new_base() -> Path:
    # As in TETHER_HOME/postgres: a private folder of ours (mkdtemp: 0700) above it.
    return Path(tempfile.mkdtemp(prefix="tether-cred-pg-")) / "postgres"


@pytest.fixture(scope="module")
def cluster() -> Iterator[EmbeddedPostgres]:
    server = EmbeddedPostgres(new_base()).start()
    try:
        yield server
    finally:
        server.stop()


def attempts(server: EmbeddedPostgres) -> list[dict[str, object]]:
    """Connections a local account might try: no password, wrong ones, other user names,
    over TCP and over the server's socket."""
    tcp = {"host": server.host, "port": server.port, "database": server.database}
    socket = {"host": str(server.data_dir), "port": server.port, "database": server.database}
    tried: list[dict[str, object]] = []
    for where in (tcp, socket):
        for user in ("postgres", PG_SYSTEM_USER, "root", "tether"):
            for password in (None, "", "postgres", "wrong", "trust"):
                tried.append(where | {"user": user, "password": password})
    return tried


async def test_every_connection_without_the_password_is_refused(
    cluster: EmbeddedPostgres,
) -> None:
    refused = 0
    for kwargs in attempts(cluster):
        with pytest.raises(
            (asyncpg.InvalidPasswordError, asyncpg.InvalidAuthorizationSpecificationError)
        ):
            await asyncpg.connect(timeout=5, **kwargs)
        refused += 1
    assert refused == len(attempts(cluster))
    conn = await asyncpg.connect(cluster.url)
    try:
        assert await conn.fetchval("SHOW listen_addresses") == "127.0.0.1"
        assert await conn.fetchval("SHOW password_encryption") == "scram-sha-256"
        methods = await conn.fetch("SELECT DISTINCT auth_method FROM pg_hba_file_rules")
        assert {m["auth_method"] for m in methods} == {"scram-sha-256"}
        stored = await conn.fetchval("SELECT rolpassword FROM pg_authid WHERE rolname='postgres'")
        assert str(stored).startswith("SCRAM-SHA-256$")
    finally:
        await conn.close()


def test_the_server_files_and_process_are_private(cluster: EmbeddedPostgres) -> None:
    assert stat.S_IMODE(cluster.secret_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(cluster.data_dir.stat().st_mode) == 0o700
    assert cluster.password
    assert cluster.password in cluster.url
    pid = cluster.postmaster_pid()
    assert pid is not None
    status = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    uids = status["Uid"].split()
    gids = status["Gid"].split()
    groups = status["Groups"].split()
    if os.geteuid() == 0:
        assert "0" not in uids
        assert "0" not in gids, f"the server runs with group root: {status['Gid']}"
        assert "0" not in groups, f"the server has root among its groups: {status['Groups']}"
        # Only the server's own group can pass through, not read, the base and the
        # private folder above it (TETHER_HOME): nobody else gets in (issue 28, 6).
        gid = int(gids[0])
        for folder in (cluster.base_dir, cluster.base_dir.parent):
            info = folder.stat()
            assert (stat.S_IMODE(info.st_mode), info.st_gid) == (0o710, gid), folder
        assert cluster.secret_path.stat().st_uid == 0


async def test_a_cluster_made_with_trust_gets_a_password_before_it_listens() -> None:
    """A TETHER_HOME from before passwords: its first start under this version closes it."""
    base = new_base()
    legacy = EmbeddedPostgres(base)
    legacy._account = _prepare_root_user(base)
    legacy._prepare_dirs()
    legacy._run(
        [
            str(_pg_bin("initdb")),
            *("-D", str(legacy.data_dir), "-U", "postgres", "--auth=trust", "--no-sync"),
        ]
    )
    server = EmbeddedPostgres(base).start()
    try:
        for kwargs in attempts(server)[:5]:
            with pytest.raises(asyncpg.InvalidPasswordError):
                await asyncpg.connect(timeout=5, **kwargs)
        conn = await asyncpg.connect(server.url)
        await conn.close()
        assert "trust" not in (server.data_dir / "pg_hba.conf").read_text().split("#")[-1]
    finally:
        server.stop()


# ---- secret files -------------------------------------------------------------


def test_a_secret_is_private_from_its_creation_whatever_the_umask(tmp_path: Path) -> None:
    before = os.umask(0)
    try:
        written = write_secret(tmp_path / "home" / "token", "s3cret")
        made, fresh = secret_in(tmp_path / "home" / "key", lambda: "k" * 40)
    finally:
        os.umask(before)
    assert fresh
    assert made == "k" * 40
    for path in (written, tmp_path / "home" / "key"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "home").stat().st_mode) == 0o700
    assert not [p for p in (tmp_path / "home").iterdir() if p.name.startswith(".")]


def test_a_secret_is_never_read_or_written_through_a_link(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.write_text("not a secret")
    (tmp_path / "home").mkdir()
    for name in ("token", "key"):
        (tmp_path / "home" / name).symlink_to(outside)
    with pytest.raises(ConfigError):
        read_secret(tmp_path / "home" / "token")
    with pytest.raises(ConfigError):
        secret_in(tmp_path / "home" / "key", lambda: "x")
    write_secret(tmp_path / "home" / "token", "replaced")  # replaces the link itself
    assert outside.read_text() == "not a secret"
    assert not (tmp_path / "home" / "token").is_symlink()


def test_racing_makers_agree_on_one_secret(tmp_path: Path) -> None:
    path = tmp_path / "key"
    seen: list[str] = []
    start = threading.Barrier(8)

    def make() -> None:
        start.wait()
        seen.append(secret_in(path, lambda: os.urandom(16).hex())[0])

    threads = [threading.Thread(target=make) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(seen)) == 1
    assert read_secret(path) == seen[0]


def test_up_keeps_its_secrets_private_and_narrows_old_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TETHER_OPERATOR_TOKEN", raising=False)
    monkeypatch.delenv("TETHER_DECISION_KEY", raising=False)
    home = tmp_path / "home"
    home.mkdir()
    old = home / up.OPERATOR_TOKEN_FILE
    old.write_text("an-old-token")
    old.chmod(0o644)
    narrow([home / name for name in up.SECRET_FILES])
    assert stat.S_IMODE(old.stat().st_mode) == 0o600
    assert up.operator_token(home) == "an-old-token"
    key = up.decision_key(home)
    assert len(key) >= 32
    assert up.decision_key(home) == key  # kept, not remade
    assert stat.S_IMODE((home / up.DECISION_KEY_FILE).stat().st_mode) == 0o600


def test_the_services_refuse_a_missing_or_template_decision_key() -> None:
    from pydantic import SecretStr

    from tether_common.decisions import required_key

    for bad in (None, "", "change-me", "REPLACE-ME", "short", "change-me" * 8):
        with pytest.raises(ConfigError):
            required_key(None if bad is None else SecretStr(bad))


def test_the_password_is_not_on_any_command_line(cluster: EmbeddedPostgres) -> None:
    assert cluster.password
    found = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True)
    assert cluster.password not in found.stdout
