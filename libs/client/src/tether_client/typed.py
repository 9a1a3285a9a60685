"""Typed answers on the client's side: a pydantic model as a run's output schema, and a
finished run's view as an instance of it, or the error its end names (`TetherClient.run`)."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from tether_common.errors import ConflictError, ErrorCode, MessageError, TetherError, code_in
from tether_common.messages.runs import RunView

__all__ = ["output_schema", "typed_output"]

M = TypeVar("M", bound=BaseModel)


def output_schema(output_type: type[BaseModel]) -> dict[str, Any]:
    """The JSON Schema a run's answer must fit to validate as `output_type`."""
    return output_type.model_json_schema()


def typed_output(view: RunView, output_type: type[M]) -> M:
    """The run's validated `output` as an `output_type`. A run that did not complete with
    one raises: failed, the error its stop reason names (`output_invalid`, a
    `MessageError`, when no answer fit, with the violation); stopped, `run_ended`. An
    output the model's own checks refuse (a validator the schema cannot say) is
    `output_invalid` too."""
    if view.status != "completed" or view.output is None:
        raise _ended_without(view)
    try:
        return output_type.model_validate(view.output)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or '$'}: {e['msg']}" for e in exc.errors()[:3]
        )
        raise MessageError(
            f"run {view.run_id}'s output is not a {output_type.__name__}: {problems}",
            code=ErrorCode.OUTPUT_INVALID,
        ) from None


def _ended_without(view: RunView) -> TetherError:
    reason = view.stop_reason or "no reason given"
    message = f"run {view.run_id} {view.status} without an output: {reason}"
    if view.status == "failed":
        code = code_in(reason) or ErrorCode.INTERNAL
        return code.spec.error(message, code=code)
    return ConflictError(message, code=ErrorCode.RUN_ENDED)
