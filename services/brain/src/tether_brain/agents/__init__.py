"""Agents and the organisation policy: each agent's configuration and grants in force on
this replica, stored as resources, and grant overrides made through the API.

Never runs a step or a tool; the gates read what this folder resolves.
"""
