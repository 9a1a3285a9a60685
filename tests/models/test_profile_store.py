"""Model profiles in the gateway: the YAML files (written, read back, edited by hand,
broken), the defaults each provider falls back to, and the file names models get."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tether_common.messages.profiles import ModelPrice, ModelProfile
from tether_gateway.profiles import Profiles, ProfileStore, file_name
from tether_gateway.settings import GatewaySettings


def profile(**fields: object) -> ModelProfile:
    return ModelProfile.model_validate({"provider": "local", "model": "qwen", **fields})


def test_a_stored_profile_is_read_back_and_wins_over_the_default(tmp_path: Path) -> None:
    profiles = Profiles(GatewaySettings(local_model="qwen"), ProfileStore(tmp_path))
    assert profiles.get("local", None).source == "default"
    stored = profile(tool_calling="native", prompt_tier="full", grammar=False)
    path = profiles.store.put(stored)
    assert path == tmp_path / "local--qwen.yaml"
    found = profiles.get("local", "anything: the local server holds one model")
    assert (found.tool_calling, found.prompt_tier, found.grammar) == ("native", "full", False)


def test_a_hand_edit_applies_without_a_restart(tmp_path: Path) -> None:
    store = ProfileStore(tmp_path)
    path = store.put(profile(prompt_tier="full"))
    assert store.find("local", "qwen") == profile(prompt_tier="full")
    path.write_text(path.read_text().replace("prompt_tier: full", "prompt_tier: compact"))
    os.utime(path, ns=(1, 1))  # a new signature even within one clock tick
    found = store.find("local", "qwen")
    assert found is not None
    assert found.prompt_tier == "compact"


def test_a_broken_file_is_reported_and_skipped_never_fatal(tmp_path: Path) -> None:
    store = ProfileStore(tmp_path)
    store.put(profile())
    (tmp_path / "bad-yaml.yaml").write_text("provider: [unclosed\n")
    (tmp_path / "typo.yaml").write_text("provider: local\nmodel: other\nprompt_teir: full\n")
    (tmp_path / "huge.yaml").write_text("x" * 70_000)
    found, problems = store.scan()
    assert [p.model for p in found] == ["qwen"]
    assert len(problems) == 3
    assert any("typo.yaml" in p and "prompt_teir" in p for p in problems)
    assert any("bad-yaml.yaml" in p and "YAML" in p for p in problems)
    assert any("huge.yaml" in p and "larger" in p for p in problems)


def test_two_files_for_one_model_keep_the_first_and_say_so(tmp_path: Path) -> None:
    store = ProfileStore(tmp_path)
    (tmp_path / "a.yaml").write_text("provider: local\nmodel: qwen\nprompt_tier: compact\n")
    (tmp_path / "b.yaml").write_text("provider: local\nmodel: qwen\nprompt_tier: full\n")
    found, problems = store.scan()
    assert [p.prompt_tier for p in found] == ["compact"]
    assert problems == ["b.yaml: local/qwen is also in a.yaml"]


@pytest.mark.parametrize(
    ("model", "unsafe"),
    [("meta-llama/Llama-3.1-8B", "/"), ("qwen2.5-coder:0.5b", ":"), ("a/../../etc", "..")],
)
def test_file_names_stay_in_the_folder_and_never_collide(model: str, unsafe: str) -> None:
    name = file_name("openai", model)
    assert "/" not in name
    assert ".." not in name
    assert name != file_name("openai", model.replace(unsafe, "_"))


@pytest.mark.parametrize("model", ["a" * 200, "x/" * 99 + "y", "q:" * 60 + "z" * 80])
def test_the_longest_names_the_wire_allows_are_stored(tmp_path: Path, model: str) -> None:
    """A 40-character provider and a 200-character model, safe or not, still make a file
    name the file system takes (it once answered ENAMETOOLONG, a 500 on the route)."""
    store = ProfileStore(tmp_path)
    stored = profile(provider="p" * 40, model=model)
    path = store.put(stored)
    assert len(path.name.encode()) <= 255
    assert store.find("p" * 40, model) == stored


def test_a_model_name_cannot_be_a_path() -> None:
    with pytest.raises(ValueError, match="model"):
        profile(model="../x")


def test_defaults_follow_the_provider_and_the_seed_settings() -> None:
    settings = GatewaySettings(
        local_model="smol",
        local_context_window=4096,
        openai_model="gpt-x",
        text_protocol_models=frozenset({"tiny"}),
        prices={"gpt-x": ModelPrice(input_per_million=1, output_per_million=2)},
    )
    profiles = Profiles(settings, ProfileStore(None))
    local = profiles.get("local", None)
    assert (local.model, local.tool_calling, local.prompt_tier, local.grammar) == (
        "smol",
        "text",
        "compact",
        True,
    )
    assert local.context_window == 4096
    hosted = profiles.get("openai", None)
    assert (hosted.model, hosted.tool_calling, hosted.prompt_tier, hosted.grammar) == (
        "gpt-x",
        "native",
        "full",
        False,
    )
    assert hosted.price == ModelPrice(input_per_million=1, output_per_million=2)
    assert profiles.get("ollama", "tiny").tool_calling == "text"
    off = Profiles(settings.model_copy(update={"local_grammar": False}), ProfileStore(None))
    assert off.get("local", None).grammar is False


def test_a_stored_profile_without_a_price_takes_the_configured_one(tmp_path: Path) -> None:
    price = ModelPrice(input_per_million=3, output_per_million=4)
    settings = GatewaySettings(prices={"gpt-x": price})
    profiles = Profiles(settings, ProfileStore(tmp_path))
    profiles.store.put(ModelProfile(provider="openai", model="gpt-x"))
    assert profiles.get("openai", "gpt-x").price == price
