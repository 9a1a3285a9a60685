"""Tether gateway: one thin adapter per model provider, each turning its provider's wire
format into the one normalized event stream (chunk, thinking, tool_call, usage, done,
error); retries, timeouts, usage and cost.

Never loops, decides or executes anything: that is the brain's and the runner's work.
"""
