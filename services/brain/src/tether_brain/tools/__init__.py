"""The brain's view of the tools: the catalogue cached from the tools-runner, the
request/reply to run a call, and the tools the brain answers itself (`load_skill`,
`search_documents` over the documents it keeps, `memory_save` and `memory_search` over
what runs remember).

Never decides whether a call may run (the gates do) and never executes a sandboxed tool.
"""
