"""Threads: a conversation as a sequence of runs sharing history. Owns the `threads` and
`thread_turns` rows, what a turn carries from the last (`history`), and the thread
operations of the client API (`manager`), which start each turn as an ordinary run
through `runs`. Never runs a loop or a tool itself; never copies what a run's row says."""

from tether_brain.threads.manager import ThreadManager
from tether_brain.threads.store import ThreadStore

__all__ = ["ThreadManager", "ThreadStore"]
