"""Tether output-store: large tool results — offload, digest, paging, ownership, retention.

Never interprets content beyond digesting it.
"""
