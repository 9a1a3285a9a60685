"""The brain's clients of its sibling services over NATS: the gateway (one model turn)
and the approvals service (parking a call, the sealed action digest).

Never decides whether a call runs; the gates and the loop do.
"""
