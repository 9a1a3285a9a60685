"""The brain's clients of its sibling services over NATS: the gateway (one model turn),
the tools-runner (its catalogue, running and staging a call) and the approvals service
(parking a call, the sealed action digest). Each is behind a `Protocol` (`ModelPort`,
`RunnerPort`, `ApprovalPort`) the loop depends on, so it also runs against the in-process
ones of `tether_brain.testing`.

Never decides whether a call runs; the gates and the loop do.
"""
