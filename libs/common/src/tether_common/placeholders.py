"""Secrets left at a deploy template's value, found in a service's settings at start.

docker-compose.yml, `.env.example` and deploy/k8s ship `change-me` / `REPLACE-ME` where an
operator must put a secret of their own. A service started with one would accept a
password or a token that anyone who has read the repository knows, so `run_main` refuses
to start (exit status EX_CONFIG) and names every such setting; the value is never printed.

A setting is a secret when its value is a `SecretStr` or its name ends in `password`,
`token`, `secret` or `key`; any other text setting that is a URL with a password (the
database's, the bus's) has that password checked. A NATS user without a password (none,
or an empty one: an unfilled template line) is refused too. Other secrets are optional
(a provider key, the operator token), so an empty one is left to its service.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from pydantic import AliasChoices, BaseModel, SecretStr

# Values that deploy templates ship, compared case-insensitively as parts of a value
# ("change-me-brain" is compose's old default for the brain's NATS password).
PLACEHOLDERS = ("change-me", "changeme", "replace-me", "replaceme")
SECRET_NAME = re.compile(r"(password|token|secret|key)$")
EX_CONFIG = 78  # sysexits.h: a configuration error; an orchestrator will not fix it by retrying

Problem = Literal["template value", "missing"]


@dataclass(frozen=True, slots=True)
class PlaceholderSecret:
    """One refused setting: the environment variable that sets it, and what is wrong."""

    setting: str
    problem: Problem

    def message(self) -> str:
        match self.problem:
            case "template value":
                return f"{self.setting} still holds a template value: set a secret of your own"
            case "missing":
                return f"{self.setting} is required here and not set (or empty)"


def is_placeholder(value: str) -> bool:
    lowered = value.strip().lower()
    return any(p in lowered for p in PLACEHOLDERS)


def placeholder_secrets(*settings: BaseModel) -> list[PlaceholderSecret]:
    """Every secret setting of `settings` left at a template value, or required and
    missing; an empty list is a pass."""
    found: dict[str, PlaceholderSecret] = {}
    for model in settings:
        prefix = str(model.model_config.get("env_prefix", ""))
        for problem in _scan(model, prefix):
            found.setdefault(problem.setting, problem)
    found.update({p.setting: p for p in _bus_login(settings)})
    return sorted(found.values(), key=lambda p: p.setting)


def _scan(model: BaseModel, prefix: str) -> Iterator[PlaceholderSecret]:
    delimiter = str(model.model_config.get("env_nested_delimiter") or "__")
    for name, info in type(model).model_fields.items():
        value = getattr(model, name)
        env = _env_name(prefix, name, info.validation_alias)
        if isinstance(value, BaseModel):
            yield from _scan(value, f"{env}{delimiter}")
            continue
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        elif not isinstance(value, str):
            continue
        elif not SECRET_NAME.search(name):
            value = _url_password(value)
            if value is None:
                continue
        if is_placeholder(value):
            yield PlaceholderSecret(env, "template value")


def _env_name(prefix: str, name: str, alias: object) -> str:
    if isinstance(alias, AliasChoices) and alias.choices:
        return str(alias.choices[0]).upper()
    if isinstance(alias, str):
        return alias.upper()
    return f"{prefix}{name}".upper()


def _url_password(value: str) -> str | None:
    """The password of a URL with one (`postgresql://user:pw@host/db`), else None."""
    if "://" not in value:
        return None
    try:
        return urlsplit(value).password
    except ValueError:  # not a URL after all (e.g. a bad port); the setting's own check says so
        return None


def _bus_login(settings: tuple[BaseModel, ...]) -> Iterator[PlaceholderSecret]:
    """A NATS user needs its password: without one it would connect as nobody."""
    for model in settings:
        user, password = getattr(model, "nats_user", None), getattr(model, "nats_password", "")
        if user and not (password or "").strip():
            yield PlaceholderSecret("TETHER_NATS_PASSWORD", "missing")
