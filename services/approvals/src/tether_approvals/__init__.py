"""Tether approvals: approval requests and their lifecycle (pending → granted / denied /
expired / consumed), the operator API and console, session grants, waiver audit.

Never runs tools and never resumes runs itself: it tells the brain.
"""
