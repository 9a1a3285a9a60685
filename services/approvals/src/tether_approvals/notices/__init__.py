"""Telling people: the card a notice carries, the outbox written in the transaction of
each change, the sender that delivers it to webhook endpoints (signed, to checked
addresses only, retried, dead-lettered) and to the NATS notices subject, and the webhook
endpoints themselves.

Never decides a request and never serves a route: `decisions` writes what is to be told,
`api` exposes the endpoints and their deliveries.
"""
