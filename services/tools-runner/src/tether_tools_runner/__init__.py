"""Tether tools-runner: owns the tool catalogue and tool execution inside a sandbox, and
re-checks every hard constraint itself (defence in depth).

Never decides policy beyond hard constraints, never keeps run state.
"""
