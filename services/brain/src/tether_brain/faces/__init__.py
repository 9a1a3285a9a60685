"""The faces other tools already speak: an OpenAI-compatible chat API (`openai.py`) and an
MCP server (`mcp.py`), each exposing the agents a caller may run. Both start runs through
`RunManager.start` with the caller's principal, so the runs API's access rules, the gates,
approvals, budgets and audit apply unchanged, and follow them through the run's events.

Only translation: never decides who may do what (`runs/access.py` does), never steps a
run, never touches the database or the bus directly.
"""
