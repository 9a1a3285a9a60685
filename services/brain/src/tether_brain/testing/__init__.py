"""The in-process test tier: the brain's loop without processes. Each seam the loop
depends on has an in-process implementation on the same `Protocol` as the real one:

- `ScriptedModel` (`clients.model.ModelPort`): the gateway's `scripted` provider, the same
  scripts played by the same code (`tether_common.scripted`);
- `LocalRunner` (`clients.runner.RunnerPort`): a catalogue and the calls run in process
  (the tools-runner's own executor over its built-in tools, or scripted results);
- `MemoryApprovals` (`clients.approval.ApprovalPort`): cards kept here, decided by the test;
- `MemoryStore` (`persistence.store.StorePort`): runs written and read back by the same
  row and journal code as PostgreSQL;
- `MemoryEvents` (`state.events.EventsPort`): what a follower would have read;
- `FakeClock` (`state.clock.Clock`): time that passes only when told;
- `MemoryHooks` (`hooks.HookSource`): a tenant's hooks, given by the test.

`Harness` builds a `Loop` of them and drives runs as the run manager does. The contract
suite (tests/brain/contract) runs the same cases against the in-process and the real
implementations, so a fake cannot drift from what it stands for.

Never used by the services themselves; imports any floor of the brain (it stands above
them all, like `app.py`).
"""

from tether_brain.testing.approvals import MemoryApprovals
from tether_brain.testing.clock import FakeClock
from tether_brain.testing.events import MemoryEvents
from tether_brain.testing.harness import Finished, Harness
from tether_brain.testing.hooks import MemoryHooks
from tether_brain.testing.model import ScriptedModel
from tether_brain.testing.runner import Execute, LocalRunner, answering
from tether_brain.testing.store import MemoryStore

__all__ = [
    "Execute",
    "FakeClock",
    "Finished",
    "Harness",
    "LocalRunner",
    "MemoryApprovals",
    "MemoryEvents",
    "MemoryHooks",
    "MemoryStore",
    "ScriptedModel",
    "answering",
]
