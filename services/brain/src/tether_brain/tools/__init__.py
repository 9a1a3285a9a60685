"""The brain's view of the tools: the catalogue cached from the tools-runner, the
request/reply to run a call, and the tools the brain answers itself (`load_skill`).

Never decides whether a call may run (the gates do) and never executes a sandboxed tool.
"""
