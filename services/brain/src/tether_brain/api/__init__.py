"""The brain's HTTP face: runs, agents, policy, skills and model-profile routes. Each route
takes the caller's principal, decodes, calls one domain function and encodes.

Only HTTP: never touches the database or the bus directly.
"""
