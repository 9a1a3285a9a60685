"""A run as it lives in memory: `RunState` with its counters and limits, the control
signals (stop, hand back) and the numbering of run events.

Owns no I/O but publishing already-committed events; never imports another brain folder.
"""
