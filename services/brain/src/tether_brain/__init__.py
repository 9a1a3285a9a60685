"""Tether brain: owns runs and turns, the only think-act loop, context fitting, the gates
(validation, permissions, grants, budget, approval), durable run state, and the client
API (HTTP and NATS) with its event stream.

Never talks to a provider's HTTP API (the gateway does) and never executes a tool (the
tools-runner does).
"""
