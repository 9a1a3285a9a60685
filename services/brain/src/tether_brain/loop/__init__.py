"""The only think-act loop: dispatch of a run's steps, one turn of the model, acting on
its calls through the gates, parking for approval, sub-agents, recovery after a takeover,
finish-don't-loop and completion.

Never serves HTTP and never schedules runs (the manager in `runs/` does); each step
returns one outcome value. The step's collaborators hand back values and hold none of
each other (several share the `Actor`, which gates and sends calls); only `dispatch.py`
commits, ends or completes a run, and has it park or start its helpers.
"""
