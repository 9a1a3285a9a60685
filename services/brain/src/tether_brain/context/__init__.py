"""What the model sees each step: the prompt texts per tier, the system prompt and history,
which tools are offered and how (cards, keyword choice), fitting into the context window,
and the text rules on when an answer is not yet an answer.

Pure functions of the run state: never calls a service, never writes a row.
"""
