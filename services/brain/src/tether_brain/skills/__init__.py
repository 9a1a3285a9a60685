"""Skills: folders holding a `SKILL.md` of principles the model follows on request.

Owns: finding skills in the configured folders and creating, reading, listing and
deleting them there (`store`); the `/name` injection, the one-line index for the system
prompt, and the `load_skill` tool (`invoke`). Parsing and checking a skill belong to
`tether_common.skills`, shared with `tether skills validate`.
Never does: put a skill's body in the system prompt, keep a loaded body beyond its turn,
or follow a path outside a skill folder (names are checked before any file is touched).
"""

from tether_brain.skills.invoke import (
    LOAD_SKILL,
    MAX_INVOKED,
    ONLY_SKILL_PROMPT,
    Invocation,
    forget_loaded_skills,
    invoke,
    load_skill,
    load_skill_descriptor,
    load_skill_spec,
    skill_index,
)
from tether_brain.skills.model import Skill
from tether_brain.skills.store import FolderSkillStore, SkillStore, default_skill_folders

__all__ = [
    "LOAD_SKILL",
    "MAX_INVOKED",
    "ONLY_SKILL_PROMPT",
    "FolderSkillStore",
    "Invocation",
    "Skill",
    "SkillStore",
    "default_skill_folders",
    "forget_loaded_skills",
    "invoke",
    "load_skill",
    "load_skill_descriptor",
    "load_skill_spec",
    "skill_index",
]
