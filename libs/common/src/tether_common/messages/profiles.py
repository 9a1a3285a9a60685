"""Model profiles: what Tether knows about one model, which decides how it is prompted.

A `ModelProfile` answers, for one `provider`/`model` pair:

- `tool_calling`: `native` (the provider's own tool-call API) or `text` (the gateway
  teaches the fenced ```` ```tool ```` format and parses calls out of the text);
- `prompt_tier`: `full` (every offered tool with its whole description, the rule
  paragraphs) or `compact` (for small models: only the tools the request plausibly needs,
  one-line tool cards, no rules the model cannot use);
- `grammar`: the server constrains decoding to a JSON schema (llama.cpp's
  `response_format`), so the gateway sends one with an "answer in text" branch and one
  branch per offered tool;
- `context_window`: tokens the model takes in, prompt and answer together;
- `temperature`: the sampling temperature to ask for (absent: the server's default);
  small models pick tools and copy values reliably only when decoding greedily (0);
- `price`: USD per million input and output tokens (absent: free or unknown).

Who owns what: the **gateway** owns profiles. It keeps them as hand-writable YAML files
(one profile a file, `TETHER_GATEWAY_PROFILES_DIR`, default `$TETHER_HOME/models`), falls
back to a built-in default per provider when none is stored (`source="default"`), and
answers on the bus: `Subjects.model_profile` (one profile, `ProfileQuery` →
`ModelProfile`), `model_profiles` (all stored), `model_profile_put` (write one),
`model_probe` (run the probe battery through the provider and store the result). The
**brain** asks `model_profile` before prompting (and may cache the answer briefly): it
reads `prompt_tier` and `context_window`; the gateway itself applies `tool_calling`,
`grammar`, `temperature` and `price`, so the brain never has to.

A `ProfileQuery` without a model means the provider's configured default model; the
answer always names the model it resolved to.

Never does: hold state or decide anything; these are the wire and file shapes only.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from tether_common.messages.base import WireModel, WireRequest

ToolCalling = Literal["native", "text"]
PromptTier = Literal["full", "compact"]
# `default`: nothing stored, the provider's built-in profile; `probed`: written by
# `tether models probe`; `set`: written by hand (a YAML file or `tether models set`).
ProfileSource = Literal["default", "probed", "set"]

# Provider names are one subject token; model names are what providers call them
# (`qwen2.5-coder:0.5b`, `meta-llama/Llama-3.1-8B`), so `/` and `:` are allowed.
PROVIDER_PATTERN = r"^[a-z][a-z0-9_-]{0,39}$"
MODEL_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.:@/+-]{0,199}$"
# A check of the probe battery by name (`tool_call`, `json_validity`, ...): a key of the
# stored profile, so nothing a YAML file or a reply could trip over.
CheckName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,39}$")]
DEFAULT_CONTEXT_WINDOW = 32_768


class ModelPrice(BaseModel):
    """What one model costs, in USD per million tokens."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    input_per_million: float = Field(ge=0, le=1_000_000)
    output_per_million: float = Field(ge=0, le=1_000_000)


class ModelProfile(WireRequest):
    """One model's profile; also the shape of a profile YAML file (unknown keys refused).
    A request too (`PUT /v1/model-profiles`): its text must be storable (no NUL)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    provider: str = Field(pattern=PROVIDER_PATTERN)
    model: str = Field(pattern=MODEL_PATTERN)
    tool_calling: ToolCalling = "native"
    prompt_tier: PromptTier = "full"
    grammar: bool = False
    context_window: int = Field(default=DEFAULT_CONTEXT_WINDOW, ge=512, le=10_000_000)
    temperature: float | None = Field(default=None, ge=0, le=2)
    price: ModelPrice | None = None
    source: ProfileSource = "set"
    probed_at: datetime | None = None
    # The probe's findings, check name → passed (empty for a hand-written profile).
    checks: dict[CheckName, bool] = Field(default_factory=dict, max_length=32)
    notes: str = Field(default="", max_length=2000)


class ProfileQuery(WireRequest):
    """Which model's profile; no model: the provider's configured default."""

    provider: str = Field(pattern=PROVIDER_PATTERN)
    model: str | None = Field(default=None, pattern=MODEL_PATTERN)


class ListProfiles(WireRequest):
    provider: str | None = Field(default=None, pattern=PROVIDER_PATTERN)


class ProfileList(WireModel):
    """The stored profiles (hand-written or probed), by provider then model."""

    profiles: list[ModelProfile]
    # Files in the profiles folder that could not be read, with why: never silently lost.
    problems: list[str] = Field(default_factory=list)


class PutProfile(WireRequest):
    profile: ModelProfile


class ProbeModel(WireRequest):
    """Run the probe battery against one model and store what it finds."""

    provider: str = Field(pattern=PROVIDER_PATTERN)
    model: str | None = Field(default=None, pattern=MODEL_PATTERN)
    # Store the profile found (False: report only).
    store: bool = True


class ProbeCheck(WireModel):
    """One check of the battery: passed or not, and what the model did."""

    name: str
    passed: bool
    detail: str = ""
    seconds: float = Field(default=0.0, ge=0)


class ProbeReport(WireModel):
    """The battery's checks and the profile they lead to (stored unless asked not to)."""

    profile: ModelProfile
    checks: list[ProbeCheck]
    stored: bool = False


__all__ = [
    "DEFAULT_CONTEXT_WINDOW",
    "MODEL_PATTERN",
    "PROVIDER_PATTERN",
    "ListProfiles",
    "ModelPrice",
    "ModelProfile",
    "ProbeCheck",
    "ProbeModel",
    "ProbeReport",
    "ProfileList",
    "ProfileQuery",
    "ProfileSource",
    "PromptTier",
    "PutProfile",
    "ToolCalling",
]
