"""`tether models list|show|set|probe`: model profiles, through the brain's
`/v1/model-profiles` (the gateway owns them; see `tether_common.messages.profiles`).

A model is named `PROVIDER/MODEL` (`local/qwen2.5-coder-0.5b-instruct`,
`openai/meta-llama/Llama-3.1-8B`: everything after the first `/` is the model) or just
`PROVIDER` for its configured default model. `set` takes a YAML profile file (what `show
-o yaml` prints) or changes single fields of the current profile; `probe` runs the fixed
battery through the gateway and stores what it finds (`--dry-run`: report only).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from pydantic import ValidationError

from tether_client.client import TetherClient, raise_for_error
from tether_client.console import Format, OutputOption, emit, rows_table, say
from tether_client.session import blocking, connect
from tether_common.errors import MessageError
from tether_common.messages.profiles import ModelProfile, ProbeModel, ProbeReport, ProfileList

__all__ = ["ModelsApi", "app", "split_name"]

app = typer.Typer(
    help="Model profiles: how each model is prompted (list, show, set, probe).",
    no_args_is_help=True,
)
ModelName = Annotated[
    str, typer.Argument(help="PROVIDER/MODEL, or PROVIDER for its default model.")
]
COLUMNS = ["PROVIDER", "MODEL", "TOOLS", "TIER", "GRAMMAR", "WINDOW", "SOURCE", "CHECKS"]


def split_name(name: str) -> tuple[str, str | None]:
    """`local/qwen` → ("local", "qwen"); `openai` → ("openai", None)."""
    provider, _, model = name.strip().partition("/")
    return provider, model or None


def row(profile: ModelProfile) -> tuple[Any, ...]:
    checks = profile.checks
    passed = f"{sum(checks.values())}/{len(checks)}" if checks else "-"
    return (
        profile.provider,
        profile.model,
        profile.tool_calling,
        profile.prompt_tier,
        "yes" if profile.grammar else "no",
        profile.context_window,
        profile.source,
        passed,
    )


class ModelsApi:
    """The `/v1/model-profiles` routes over the client's connection."""

    def __init__(self, client: TetherClient) -> None:
        self.http = client._http

    async def list(self, provider: str | None = None) -> ProfileList:
        params = {"provider": provider} if provider else None
        response = await self.http.get("/v1/model-profiles", params=params)
        raise_for_error(response)
        return ProfileList.model_validate_json(response.content)

    async def get(self, provider: str, model: str | None) -> ModelProfile:
        params = {"model": model} if model else None
        response = await self.http.get(f"/v1/model-profiles/{provider}", params=params)
        raise_for_error(response)
        return ModelProfile.model_validate_json(response.content)

    async def put(self, profile: ModelProfile) -> ModelProfile:
        response = await self.http.put("/v1/model-profiles", json=profile.model_dump(mode="json"))
        raise_for_error(response)
        return ModelProfile.model_validate_json(response.content)

    async def probe(self, provider: str, model: str | None, *, store: bool) -> ProbeReport:
        body = ProbeModel(provider=provider, model=model, store=store)
        response = await self.http.post(
            "/v1/model-profiles/probe", json=body.model_dump(mode="json"), timeout=1800
        )
        raise_for_error(response)
        return ProbeReport.model_validate_json(response.content)


@app.command("list")
@blocking
async def models_list(
    provider: Annotated[str | None, typer.Option(help="Only this provider's.")] = None,
    output: OutputOption = Format.table,
) -> int:
    """The stored profiles (probed or written by hand), and files that could not be read.

    Example: tether models list -o json
    """
    async with connect() as client:
        found = await ModelsApi(client).list(provider)
    profiles = found.profiles
    table = rows_table(COLUMNS, map(row, profiles)) if profiles else "no stored profiles"
    emit(found if output != Format.table else profiles, output, table)
    for problem in found.problems:
        say(f"skipped: {problem}", style="yellow")
    return 0


@app.command("show")
@blocking
async def models_show(name: ModelName, output: OutputOption = Format.yaml) -> int:
    """One model's profile as the gateway applies it (stored, else the default).

    Example: tether models show local -o yaml > local.yaml
    """
    provider, model = split_name(name)
    async with connect() as client:
        emit(await ModelsApi(client).get(provider, model), output)
    return 0


@app.command("set")
@blocking
async def models_set(
    name: Annotated[str | None, typer.Argument(help="PROVIDER/MODEL to change.")] = None,
    file: Annotated[
        str | None, typer.Option("--file", "-f", help="A YAML profile; '-' for stdin.")
    ] = None,
    tool_calling: Annotated[str | None, typer.Option(help="native or text.")] = None,
    prompt_tier: Annotated[str | None, typer.Option(help="full or compact.")] = None,
    grammar: Annotated[bool | None, typer.Option(help="Constrain replies.")] = None,
    context_window: Annotated[int | None, typer.Option(help="Tokens.")] = None,
) -> int:
    """Store a profile: a whole YAML file, or fields changed on the current one.

    Example: tether models set local/qwen --prompt-tier compact --grammar
    """
    changes = {
        key: value
        for key, value in (
            ("tool_calling", tool_calling),
            ("prompt_tier", prompt_tier),
            ("grammar", grammar),
            ("context_window", context_window),
        )
        if value is not None
    }
    async with connect() as client:
        api = ModelsApi(client)
        if file is not None:
            profile = _read_profile(file)
        elif name is not None:
            profile = (await api.get(*split_name(name))).model_dump(mode="json")
        else:
            raise MessageError("name a model or give --file", code="invalid_request")
        stored = await api.put(_profile({**_editable(profile), **changes, "source": "set"}))
    say("stored: " + "  ".join(str(v) for v in row(stored)))
    return 0


@app.command("probe")
@blocking
async def models_probe(
    name: ModelName,
    dry_run: Annotated[bool, typer.Option(help="Report only; store nothing.")] = False,
    output: OutputOption = Format.table,
) -> int:
    """Run the probe battery (a tool call, a no-tool question, a tool-result turn,
    argument fidelity, JSON validity) each way the provider can be asked, and store the
    profile of the best way. Takes minutes on a small local model.

    Example: tether models probe local
    """
    provider, model = split_name(name)
    async with connect() as client:
        report = await ModelsApi(client).probe(provider, model, store=not dry_run)
    checks = [
        ("ok" if c.passed else "FAIL", c.name, f"{c.seconds:.1f}s", c.detail) for c in report.checks
    ]
    emit(report, output, rows_table(["", "CHECK", "TIME", "WHAT IT DID"], checks))
    if output == Format.table:
        stored = "stored" if report.stored else "not stored"
        say(f"{stored}: " + "  ".join(str(v) for v in row(report.profile)))
    return 0


def _read_profile(path: str) -> dict[str, Any]:
    text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    try:
        found = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise MessageError(f"{path}: not YAML: {exc}", code="invalid_request") from None
    if not isinstance(found, dict):
        raise MessageError(f"{path}: expected a mapping of profile fields", code="invalid_request")
    return found


def _editable(profile: dict[str, Any]) -> dict[str, Any]:
    """A shown profile as a stored one: the probe's record is dropped on a hand edit."""
    return {k: v for k, v in profile.items() if k not in ("version", "probed_at", "checks")}


def _profile(fields: dict[str, Any]) -> ModelProfile:
    """The fields as a profile, or a usage error naming what does not fit (before sending)."""
    try:
        return ModelProfile.model_validate(fields)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'profile'}: {e['msg']}" for e in exc.errors()[:5]
        )
        raise MessageError(f"not a model profile: {problems}", code="invalid_request") from None
