"""Model profiles in the gateway: the YAML files that hold them, and the one lookup every
adapter and the brain use (a stored profile, else the provider's built-in default).

Files: one profile per `*.yaml` file in the profiles folder (`TETHER_GATEWAY_PROFILES_DIR`,
default `$TETHER_HOME/models`), written by hand or by `tether models probe|set`. A file
is re-read when its size or modification time changes, so an edit applies to the next
generation without a restart. A file that does not parse or validate is logged, reported
in `ProfileList.problems`, and skipped: it never takes the gateway down, and the model
falls back to its default profile.

Defaults (no file for the model): `local` (llama.cpp on this machine) speaks the text
protocol with the compact prompt tier, grammar-constrained and greedy decoding; every other
provider uses native tool calling and the full prompt; prices come from
`TETHER_GATEWAY_PRICES`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import ValidationError

from tether_common.messages.profiles import (
    DEFAULT_CONTEXT_WINDOW,
    ModelProfile,
    ToolCalling,
)
from tether_gateway.settings import GatewaySettings

log = logging.getLogger(__name__)

MAX_FILE_BYTES = 64 * 1024
MAX_FILES = 1000
SUFFIX = ".yaml"
# Anything but letters, digits, `_`, `-` and single dots; a run of dots is no name part.
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+|\.{2,}")


# 40 (provider) + 2 + 120 + 9 (hash) + 5 (suffix): well inside a file name's 255 bytes.
SLUG_CHARS = 120


def file_name(provider: str, model: str) -> str:
    """`<provider>--<model>.yaml`; a model name that is not already a safe file name
    (`/`, `:`) or is longer than `SLUG_CHARS` is flattened, cut and given a short hash, so
    two models never share a file and every name fits the file system's 255 bytes."""
    slug = _UNSAFE.sub("_", model).strip("._")[:SLUG_CHARS] or "model"
    if slug != model:
        slug += "-" + hashlib.sha256(model.encode()).hexdigest()[:8]
    return f"{provider}--{slug}{SUFFIX}"


@dataclass(frozen=True, slots=True)
class _Read:
    """One file as last read: its (mtime, size), and its profile or why it has none."""

    signature: tuple[int, int]
    profile: ModelProfile | None
    problem: str | None


class ProfileStore:
    """The profiles folder; `None` means no folder (defaults only, nothing can be stored)."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self._reads: dict[str, _Read] = {}

    def scan(self) -> tuple[list[ModelProfile], list[str]]:
        """Every readable profile (sorted by provider, model) and every problem met."""
        if self.folder is None or not self.folder.is_dir():
            return [], []
        found: dict[tuple[str, str], tuple[str, ModelProfile]] = {}
        problems: list[str] = []
        names = sorted(e.name for e in os.scandir(self.folder) if e.name.endswith(SUFFIX))
        for name in names[:MAX_FILES]:
            read = self._read(name)
            if read.problem is not None:
                problems.append(f"{name}: {read.problem}")
            elif read.profile is not None:
                key = (read.profile.provider, read.profile.model)
                if key in found:  # the first file by name wins; the other is reported
                    problems.append(f"{name}: {key[0]}/{key[1]} is also in {found[key][0]}")
                else:
                    found[key] = (name, read.profile)
        if len(names) > MAX_FILES:
            problems.append(f"only the first {MAX_FILES} of {len(names)} files were read")
        return [found[key][1] for key in sorted(found)], problems

    def find(self, provider: str, model: str) -> ModelProfile | None:
        for profile in self.scan()[0]:
            if profile.provider == provider and profile.model == model:
                return profile
        return None

    def put(self, profile: ModelProfile) -> Path:
        """Write `profile` to its file, atomically (a reader sees the old or the new one)."""
        if self.folder is None:
            raise OSError("no profiles folder is configured (TETHER_GATEWAY_PROFILES_DIR)")
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / file_name(profile.provider, profile.model)
        text = yaml.safe_dump(profile.model_dump(mode="json", exclude={"version"}), sort_keys=False)
        fd, tmp = tempfile.mkstemp(prefix=".profile-", suffix=".tmp", dir=self.folder)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(text)
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return path

    def _read(self, name: str) -> _Read:
        assert self.folder is not None
        path = self.folder / name
        try:
            stat = path.stat()
        except OSError as exc:
            return _Read((0, 0), None, f"unreadable ({exc.strerror})")
        signature = (stat.st_mtime_ns, stat.st_size)
        cached = self._reads.get(name)
        if cached is not None and cached.signature == signature:
            return cached
        read = _Read(signature, *_parse(path, stat.st_size))
        if read.problem is not None:
            log.warning("model profile %s skipped: %s", path, read.problem)
        self._reads[name] = read
        return read


def _parse(path: Path, size: int) -> tuple[ModelProfile | None, str | None]:
    if size > MAX_FILE_BYTES:
        return None, f"larger than {MAX_FILE_BYTES} bytes"
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        return None, f"not readable YAML ({str(exc).splitlines()[0][:200]})"
    if not isinstance(data, dict):
        return None, "not a mapping of profile fields"
    try:
        return ModelProfile.model_validate(data), None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(profile)"
        return None, f"{where}: {first['msg']} ({exc.error_count()} problem(s))"


class Profiles:
    """The lookup: which model a request means, and that model's profile."""

    def __init__(self, settings: GatewaySettings, store: ProfileStore) -> None:
        self.settings = settings
        self.store = store

    def model_for(self, provider: str, model: str | None) -> str:
        """The model a request for `provider` means: the local server holds one model
        whatever is asked; elsewhere the request's, else the configured default."""
        s = self.settings
        if provider == "local":
            return s.local_model
        defaults = {"openai": s.openai_model, "anthropic": s.anthropic_model}
        defaults["ollama"] = s.ollama_model
        return model or defaults.get(provider) or "default"

    def get(self, provider: str, model: str | None) -> ModelProfile:
        resolved = self.model_for(provider, model)
        stored = self.store.find(provider, resolved)
        if stored is None:
            return self.default(provider, resolved)
        if stored.price is None and resolved in self.settings.prices:
            return stored.model_copy(update={"price": self.settings.prices[resolved]})
        return stored

    def default(self, provider: str, model: str) -> ModelProfile:
        s = self.settings
        local = provider == "local"
        calling: ToolCalling = "native"
        if (local and s.local_text_protocol) or model in s.text_protocol_models:
            calling = "text"
        return ModelProfile(
            provider=provider,
            model=model,
            tool_calling=calling,
            prompt_tier="compact" if local else "full",
            grammar=local and s.local_grammar,
            context_window=s.local_context_window if local else DEFAULT_CONTEXT_WINDOW,
            temperature=s.local_temperature if local else None,
            price=s.prices.get(model),
            source="default",
        )


class FixedProfile(Profiles):
    """`Profiles` that answer one given profile for its own provider and model (the probe
    asks a model each way with one of these)."""

    def __init__(self, settings: GatewaySettings, profile: ModelProfile) -> None:
        super().__init__(settings, ProfileStore(None))
        self.profile = profile

    def get(self, provider: str, model: str | None) -> ModelProfile:
        resolved = self.model_for(provider, model)
        if (provider, resolved) == (self.profile.provider, self.profile.model):
            return self.profile
        return super().get(provider, model)


__all__ = ["FixedProfile", "ProfileStore", "Profiles", "file_name"]
