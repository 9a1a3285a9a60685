"""The nats-server configuration of a locked-down bus, generated from `subjects.py`.

One user per service plus a `client` user, each allowed only the subjects its role needs.
A role is written in terms of queue groups and streams, never subject strings: `ROLES`
says which queue groups a user answers and calls and which streams it writes and reads,
and the subjects come from the `Route`s and `StreamSpec`s in `subjects.py`, so a new
route is covered the moment it is declared. Replies travel under `allow_responses` (a
server-minted grant for one reply subject of a request actually received), so no service
may publish to inboxes at large. A queue group with a cancellable route has one cancel
notice subject (`Subjects.cancel_notices`): the users that call the group may publish
there and the users that serve it subscribe, nobody else.

Each user has an inbox prefix of its own (`_INBOX_<user>`, which `Bus.open` hands to
nats-py) and may subscribe only below it: no user reads replies meant for another (tool
results, model output). The `client` user (NATS clients of the API, password in
TETHER_HOME) lives in an account of its own, `CLIENT`, which imports exactly the brain's
client routes (as services) from `TETHER`, and nothing else: no run events or live
text (deltas) subject (a client follows a run, deltas included, through `runs.follow`, a
streamed reply the brain authorises like the HTTP event stream, so no tenant hears
another's events), no JetStream at all, so it creates no consumers, durable or not, and the
account's `limits` bound its connections, subscriptions and payloads. nats-server has no
per-user limits in a configuration file; an account of its own is how one user gets them.

Client users per tenant (`--client-tenants a,b`): `client-a`, `client-b` … in the same
`CLIENT` account, with the `client` user's rights but each its own inbox prefix
(`_INBOX_client-a`), so a client connection of one tenant cannot subscribe to the replies
of another's. `client` stays for the default tenant and single-tenant installs. The bearer
token still decides, per request, what a caller may do; the NATS user only keeps replies
apart. The account's limits are shared by all its users.

Also used by compose and Kubernetes: `python -m tether_client.server.natsauth --env-passwords`
prints the same configuration with passwords read from the server's environment
(`$NATS_PASSWORD_BRAIN` …); `deploy/nats/nats-server.conf` is that output.
"""

from __future__ import annotations

import argparse
import json
import re
import secrets
import ssl
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from tether_client.server.secretfiles import write_secret
from tether_common.messages.base import ID_PATTERN
from tether_common.subjects import (
    QUEUE_APPROVALS,
    QUEUE_BRAIN,
    QUEUE_GATEWAY,
    QUEUE_HOOKS,
    QUEUE_IDENTITY,
    QUEUE_OUTPUTS,
    QUEUE_TOOLS,
    Route,
    StreamSpec,
    Subjects,
    inbox_prefix,
)

ACCOUNT = "TETHER"
CLIENT_ACCOUNT = "CLIENT"
CLIENT_USER = "client"
# The client account's bounds (connections and subscriptions across all its
# connections; the largest message it may send).
CLIENT_LIMITS = {"max_connections": 64, "max_subscriptions": 1024, "max_payload": 1024 * 1024}
RUN_EVENTS = "RUN_EVENTS"
APPROVAL_DECISIONS = "APPROVAL_DECISIONS"
# A reply grant outlives the slowest legitimate handler: a shell tool may run 120 s and a
# model generation streams for minutes; expiry only bounds a forgotten grant.
UNARY_REPLY_WINDOW = "10m"
STREAMED_REPLY_WINDOW = "1h"


@dataclass(frozen=True, slots=True)
class Role:
    """What one bus user does, in queue groups and stream keys (`RUN_EVENTS` …)."""

    serves: tuple[str, ...] = ()
    calls: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    reads: tuple[str, ...] = ()
    broadcasts: tuple[str, ...] = ()  # `Subjects` attributes it both publishes and hears
    owns_output_bucket: bool = False  # the object store of the output-store's chunks
    # Service.start declares every stream in every service today, so all five may create
    # and update Tether's streams (never purge or delete). Narrow to the writers once
    # Service.start declares only the streams a service writes.
    manages_streams: bool = True
    hears: tuple[str, ...] = ()  # `Subjects` attributes it only subscribes to (live)
    announces: tuple[str, ...] = ()  # `Subjects` attributes it only publishes to
    account: str = ACCOUNT


ROLES: dict[str, Role] = {
    "brain": Role(
        serves=(QUEUE_BRAIN, QUEUE_IDENTITY),
        calls=(QUEUE_GATEWAY, QUEUE_TOOLS, QUEUE_APPROVALS, QUEUE_OUTPUTS, QUEUE_HOOKS),
        writes=(RUN_EVENTS,),
        reads=(RUN_EVENTS, APPROVAL_DECISIONS),
        # `run_deltas_all`: a run's live text, published by the replica running it and
        # heard by the replica serving a reader (it authorises the reader first).
        # `kills_changed`: a kill switch set or lifted on one replica, heard by all.
        broadcasts=(
            "run_stopping",
            "run_child_ended",
            "agent_grants_changed",
            "kills_changed",
            "run_deltas_all",
        ),
    ),
    # `identity`: served where the identity tables are, called by the services without.
    "gateway": Role(serves=(QUEUE_GATEWAY,), calls=(QUEUE_IDENTITY,)),
    # `tool_servers_changed`: a tool server added or removed on one replica, heard by all.
    "tools-runner": Role(
        serves=(QUEUE_TOOLS,),
        calls=(QUEUE_OUTPUTS, QUEUE_IDENTITY),
        broadcasts=("tool_servers_changed",),
    ),
    "approvals": Role(
        serves=(QUEUE_APPROVALS, QUEUE_IDENTITY),
        writes=(APPROVAL_DECISIONS,),
        # Run notices (`tether_approvals.notices.runs`): a durable consumer of run events.
        reads=(RUN_EVENTS,),
        announces=("approval_notices",),
    ),
    "output-store": Role(serves=(QUEUE_OUTPUTS,), owns_output_bucket=True),
    # An operator's hook services: answer `hooks.<service>` for the brain, nothing else
    # (never the client user: a caller must not answer for the hooks that judge it).
    "hooks": Role(serves=(QUEUE_HOOKS,), manages_streams=False),
    # An in-house notifier (chat bridge, pager): hears approval notices, nothing else.
    "notifier": Role(hears=("approval_notices",), manages_streams=False),
    # Hears nothing: run events and deltas reach it only as replies of `runs.follow`.
    CLIENT_USER: Role(
        calls=(QUEUE_BRAIN,),
        manages_streams=False,
        account=CLIENT_ACCOUNT,
    ),
}
USERS: tuple[str, ...] = tuple(ROLES)
# A tenant's name becomes part of a user name, an inbox prefix (one subject token: no `.`,
# or tenant `a` could read `_INBOX_client-a.b.>`) and an environment variable name (no
# `:` or `@`), on top of the identity model's ID pattern.
TENANT_USER_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]{0,62}")


class TenantNameError(ValueError):
    """A tenant name that cannot name a client user safely."""


def client_user(tenant: str) -> str:
    """The NATS user of one tenant's client connections."""
    if not (re.fullmatch(ID_PATTERN, tenant) and TENANT_USER_PATTERN.fullmatch(tenant)):
        raise TenantNameError(
            f"tenant name {tenant!r} must match {TENANT_USER_PATTERN.pattern} for a NATS user"
        )
    return f"{CLIENT_USER}-{tenant}"


def all_users(tenants: Sequence[str] = ()) -> tuple[str, ...]:
    """The service users, `client`, and one client user per tenant (validated, distinct
    also by password variable: `a-b` and `a_b`, `a` and `A` would share one)."""
    tenant_users = [client_user(t) for t in tenants]
    envs = [password_env(u) for u in (*USERS, *tenant_users)]
    if len(set(envs)) != len(envs):
        raise TenantNameError(f"tenant names collide as NATS users: {list(tenants)}")
    return (*USERS, *tenant_users)


def role_of(user: str) -> Role:
    """A tenant's client user has the `client` role; only its inbox differs."""
    if user in ROLES:
        return ROLES[user]
    if user.startswith(f"{CLIENT_USER}-"):
        client_user(user.removeprefix(f"{CLIENT_USER}-"))  # refuses a forged name
        return ROLES[CLIENT_USER]
    raise KeyError(user)


@dataclass(frozen=True, slots=True)
class EnvRef:
    """A value nats-server reads from its own environment when it loads the file."""

    name: str


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """Server certificate and key, and optionally the CA that signed the certificate."""

    cert: Path
    key: Path
    ca: Path | None = None


def password_env(user: str) -> str:
    return "NATS_PASSWORD_" + user.upper().replace("-", "_")


def generate_passwords(tenants: Sequence[str] = ()) -> dict[str, str]:
    return {user: secrets.token_urlsafe(24) for user in all_users(tenants)}


def env_passwords(tenants: Sequence[str] = ()) -> dict[str, str | EnvRef]:
    return {user: EnvRef(password_env(user)) for user in all_users(tenants)}


def service_env(user: str, password: str) -> dict[str, str]:
    """The environment that makes a service connect as `user`."""
    return {"TETHER_NATS_USER": user, "TETHER_NATS_PASSWORD": password}


def queue_subjects(subjects: Subjects) -> list[tuple[str, str]]:
    """(subject, queue group) of every command route, per-provider generation and
    per-service hooks as `*`."""
    generate, hook = subjects.generate("*"), subjects.hook("*")
    found = [(r.subject, r.queue) for r in subjects.routes()]
    return [*found, (generate.subject, generate.queue), (hook.subject, hook.queue)]


def _served_routes(subjects: Subjects) -> list[Route[BaseModel, BaseModel]]:
    return [*subjects.routes(), subjects.generate("*"), subjects.hook("*")]  # type: ignore[list-item]


def many_reply_queues(subjects: Subjects) -> set[str]:
    """The queue groups with a route answered by more than one message (streamed, or
    beating while it works): whoever serves one needs an unbounded reply allowance."""
    return {r.queue for r in _served_routes(subjects) if r.replies_many}


def streamed_queues(subjects: Subjects) -> set[str]:
    """The queue groups with a streamed route (answers that may last an hour)."""
    return {r.queue for r in _served_routes(subjects) if r.streamed}


def streamed_subjects(subjects: Subjects) -> set[str]:
    """The request subjects answered by a streamed reply (many messages)."""
    found = {r.subject for r in subjects.routes() if r.streamed}
    generate = subjects.generate("*")
    return found | ({generate.subject} if generate.streamed else set())


def cancel_notices(subjects: Subjects) -> dict[str, str]:
    """Queue group → its cancel notice subject, for each queue group with a cancellable
    route (`Route.cancellable`): its callers publish there, its servers listen."""
    routes = _served_routes(subjects)
    return {r.queue: subjects.cancel_notices(r.queue) for r in routes if r.cancellable}


def stream(subjects: Subjects, key: str) -> StreamSpec:
    for spec in subjects.streams:
        if spec.name.endswith("_" + key):
            return spec
    raise KeyError(f"no stream {key} in subjects.py")


def _js_reader(spec: StreamSpec) -> list[str]:
    """Ordered and durable consumers on one stream: create, fetch, ack, flow control."""
    api, name = "$JS.API", spec.name
    return [
        f"{api}.STREAM.INFO.{name}",
        f"{api}.CONSUMER.CREATE.{name}",
        f"{api}.CONSUMER.CREATE.{name}.>",
        f"{api}.CONSUMER.DURABLE.CREATE.{name}.*",
        f"{api}.CONSUMER.INFO.{name}.*",
        f"{api}.CONSUMER.DELETE.{name}.*",
        f"{api}.CONSUMER.MSG.NEXT.{name}.*",
        f"$JS.ACK.{name}.>",
        f"$JS.FC.{name}.>",
    ]


def _js_admin(spec: StreamSpec) -> list[str]:
    api, name = "$JS.API", spec.name
    return [
        f"{api}.STREAM.INFO.{name}",
        f"{api}.STREAM.CREATE.{name}",
        f"{api}.STREAM.UPDATE.{name}",
    ]


def _js_objects(subjects: Subjects) -> list[str]:
    """Everything the object store of objects.py does on its one bucket: create it, put
    and read objects (ordered consumers), list, delete and purge."""
    bucket = subjects.output_bucket
    spec = StreamSpec(f"OBJ_{bucket}", (), 0)
    api = "$JS.API"
    return [
        *_js_admin(spec),
        *_js_reader(spec),
        f"{api}.STREAM.MSG.GET.{spec.name}",
        f"{api}.DIRECT.GET.{spec.name}",
        f"{api}.DIRECT.GET.{spec.name}.>",
        f"{api}.STREAM.PURGE.{spec.name}",
        f"$O.{bucket}.>",
    ]


def _queue_subjects(subjects: Subjects, queues: tuple[str, ...]) -> list[str]:
    return [subject for subject, queue in queue_subjects(subjects) if queue in queues]


def _publish_allow(subjects: Subjects, role: Role) -> list[str]:
    allow = _queue_subjects(subjects, role.calls)
    allow += [getattr(subjects, name) for name in (*role.broadcasts, *role.announces)]
    if role.account == ACCOUNT:
        # Only a caller in Tether's account: the client account's requests arrive through
        # a service import, with reply subjects nats-server maps, so an inbox the client
        # names would not name the request there (no client route is cancellable).
        allow += [s for queue, s in cancel_notices(subjects).items() if queue in role.calls]
    for key in role.writes:
        allow += stream(subjects, key).subjects
    if role.reads or role.owns_output_bucket:
        allow.append("$JS.API.STREAM.NAMES")  # nats-py finds a stream by subject
    if role.owns_output_bucket:
        allow += _js_objects(subjects)
    for key in role.reads:
        allow += _js_reader(stream(subjects, key))
    if role.manages_streams:
        for spec in subjects.streams:
            allow += _js_admin(spec)
    return list(dict.fromkeys(allow))


def _subscribe_allow(subjects: Subjects, user: str, role: Role) -> list[str]:
    # "subject queue" admits only queue subscriptions in the service's own group, so a
    # service cannot quietly listen to every request of its kind outside the group.
    allow = [f"{s} {q}" for s, q in queue_subjects(subjects) if q in role.serves]
    allow += [getattr(subjects, name) for name in (*role.broadcasts, *role.hears)]
    # Every server of a cancellable route hears every notice (no queue group): only the
    # replica handling the named request has anything to cancel.
    allow += [s for queue, s in cancel_notices(subjects).items() if queue in role.serves]
    for key in role.reads:
        allow += stream(subjects, key).subjects
    allow.append(f"{inbox_prefix(user)}.>")
    return list(dict.fromkeys(allow))


def permissions(subjects: Subjects, user: str) -> dict[str, object]:
    """The nats-server `permissions` block for one user."""
    role = role_of(user)
    publish = _publish_allow(subjects, role)
    perms: dict[str, object] = {
        # An empty allow list would let nats-server admit every subject: deny them all.
        "publish": {"allow": publish} if publish else {"deny": [">"]},
        "subscribe": {"allow": _subscribe_allow(subjects, user, role)},
    }
    if role.serves:
        # nats-server grants replies per user, not per subject: one route of the user's
        # answered by several messages (a stream, heartbeats) sets the allowance for all.
        many = not many_reply_queues(subjects).isdisjoint(role.serves)
        streams = not streamed_queues(subjects).isdisjoint(role.serves)
        window = STREAMED_REPLY_WINDOW if streams else UNARY_REPLY_WINDOW
        perms["allow_responses"] = {"max": -1 if many else 1, "expires": window}
    return perms


def server_config(
    subjects: Subjects,
    passwords: Mapping[str, str | EnvRef],
    *,
    tls: TlsFiles | None = None,
    tenants: Sequence[str] = (),
    observers: Mapping[str, str] | None = None,
) -> dict[str, object]:
    """The whole server configuration as data: Tether's account (JetStream on) with the
    services, and the client's account importing what the client may use (with one
    client user per tenant in `tenants`). `observers` (user → password) are users with
    every right in Tether's account: the suite's own clients beside a stack, never part
    of a shipped configuration (`tether up`, compose and Kubernetes pass none)."""
    users = all_users(tenants)

    def users_of(account: str) -> list[dict[str, object]]:
        found: list[dict[str, object]] = [
            {"user": user, "password": passwords[user], "permissions": permissions(subjects, user)}
            for user in users
            if role_of(user).account == account
        ]
        if account == ACCOUNT:
            found += [{"user": u, "password": p} for u, p in (observers or {}).items()]
        return found

    shared = _client_subjects(subjects)
    streamed = streamed_subjects(subjects)
    config: dict[str, object] = {
        "accounts": {
            ACCOUNT: {
                "jetstream": "enabled",
                "users": users_of(ACCOUNT),
                "exports": [
                    *(_export(s, s in streamed) for s in shared.services),
                    *({"stream": s, "accounts": [CLIENT_ACCOUNT]} for s in shared.streams),
                ],
            },
            CLIENT_ACCOUNT: {
                "users": users_of(CLIENT_ACCOUNT),
                "imports": [
                    *({"service": {"account": ACCOUNT, "subject": s}} for s in shared.services),
                    *({"stream": {"account": ACCOUNT, "subject": s}} for s in shared.streams),
                ],
                "limits": dict(CLIENT_LIMITS),
            },
        },
    }
    if tls is not None:
        block: dict[str, object] = {"cert_file": str(tls.cert), "key_file": str(tls.key)}
        if tls.ca is not None:
            # No `verify`: services present no client certificates (mutual TLS would
            # need them in Bus.open); passwords still authenticate every user.
            block["ca_file"] = str(tls.ca)
        config["tls"] = block
    return config


def _export(subject: str, streamed: bool) -> dict[str, object]:
    """A service the client's account imports; a streamed one keeps its reply route open
    for many messages (nats-server's `stream` response type) for the streamed window."""
    export: dict[str, object] = {"service": subject, "accounts": [CLIENT_ACCOUNT]}
    if streamed:
        export |= {"response_type": "stream", "threshold": STREAMED_REPLY_WINDOW}
    return export


@dataclass(frozen=True, slots=True)
class Shared:
    """What Tether's account shares with the client's: request subjects and live streams."""

    services: tuple[str, ...]
    streams: tuple[str, ...]


def _client_subjects(subjects: Subjects) -> Shared:
    role = ROLES[CLIENT_USER]
    return Shared(
        tuple(_queue_subjects(subjects, role.calls)),
        tuple(getattr(subjects, name) for name in role.hears),
    )


def render(value: object, indent: int = 0) -> str:
    """nats-server's configuration syntax: JSON with bare keys and `$VAR` references."""
    pad, inner = "  " * indent, "  " * (indent + 1)
    if isinstance(value, EnvRef):
        return "$" + value.name
    if isinstance(value, dict):
        lines = [f"{inner}{key}: {render(item, indent + 1)}" for key, item in value.items()]
        return "{\n" + "\n".join(lines) + f"\n{pad}}}"
    if isinstance(value, list):
        lines = [f"{inner}{render(item, indent + 1)}" for item in value]
        return "[\n" + "\n".join(lines) + f"\n{pad}]"
    return json.dumps(value)


def render_config(
    subjects: Subjects,
    passwords: Mapping[str, str | EnvRef],
    *,
    tls: TlsFiles | None = None,
    tenants: Sequence[str] = (),
    observers: Mapping[str, str] | None = None,
) -> str:
    body = server_config(subjects, passwords, tls=tls, tenants=tenants, observers=observers)
    lines = [f"{key}: {render(value)}" for key, value in body.items()]
    return (
        "# Generated by tether_client.server.natsauth from subjects.py; do not edit.\n"
        + "\n".join(lines)
        + "\n"
    )


def write_config(path: Path, text: str) -> Path:
    """Write a configuration holding passwords, readable by its owner only from the
    moment it exists (tether_client.server.secretfiles)."""
    return write_secret(path, text)


def client_tls(ca_file: Path | None) -> ssl.SSLContext | None:
    """The client side of TLS: trust the CA that signed the server's certificate."""
    return None if ca_file is None else ssl.create_default_context(cafile=str(ca_file))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Print Tether's nats-server configuration.")
    parser.add_argument("--prefix", default="tether")
    parser.add_argument(
        "--env-passwords", action="store_true", help="read passwords from $NATS_PASSWORD_*"
    )
    parser.add_argument(
        "--client-tenants",
        default="",
        help="comma-separated tenants, each with a client user `client-<tenant>` of its own",
    )
    args = parser.parse_args(argv)
    tenants = [t for t in args.client_tenants.split(",") if t]
    try:
        passwords: Mapping[str, str | EnvRef] = (
            env_passwords(tenants) if args.env_passwords else generate_passwords(tenants)
        )
    except TenantNameError as exc:
        parser.error(str(exc))
    sys.stdout.write(render_config(Subjects(args.prefix), passwords, tenants=tenants))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
