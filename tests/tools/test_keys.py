"""Idempotency keys: rendered by the runtime, deterministic, run- or object-scoped."""

from __future__ import annotations

import pytest

from shellwardd.errors import InvalidArgument
from shellwardd.tools.keys import (
    KeyScope,
    default_template,
    object_id,
    render_key,
    template_problem,
)

RUN_TEMPLATE = default_template(KeyScope.RUN, has_object=True)
OBJECT_TEMPLATE = default_template(KeyScope.OBJECT, has_object=True)


def key(template: str, run_id: str = "run-1", step_id: str = "step-1", obj: str = "42") -> str:
    return render_key(
        template,
        user="ana",
        run_id=run_id,
        step_id=step_id,
        server="biz",
        tool="create_order",
        object_id=obj,
    )


def test_default_templates() -> None:
    assert RUN_TEMPLATE == "agent:{user}:{run}:{tool}:{object}"
    assert default_template(KeyScope.RUN, has_object=False) == "agent:{user}:{run}:{tool}:{step}"
    assert OBJECT_TEMPLATE == "agent:{user}:{tool}:{object}"
    for scope, template in ((KeyScope.RUN, RUN_TEMPLATE), (KeyScope.OBJECT, OBJECT_TEMPLATE)):
        assert template_problem(template, scope, "cart_id") is None


def test_run_scope_changes_with_the_run_only() -> None:
    first = key(RUN_TEMPLATE)
    assert first == "agent:ana:run-1:create_order:42"
    assert key(RUN_TEMPLATE) == first
    assert key(RUN_TEMPLATE, step_id="step-2") == first
    assert key(RUN_TEMPLATE, run_id="run-2") != first
    assert key(RUN_TEMPLATE, obj="43") != first


def test_object_scope_survives_a_new_run() -> None:
    first = key(OBJECT_TEMPLATE)
    assert first == "agent:ana:create_order:42"
    assert key(OBJECT_TEMPLATE, run_id="run-2", step_id="step-9") == first
    assert key(OBJECT_TEMPLATE, obj="43") != first


def test_step_placeholder() -> None:
    template = default_template(KeyScope.RUN, has_object=False)
    assert key(template, step_id="call_7") == "agent:ana:run-1:create_order:call_7"


def test_values_cannot_run_into_each_other() -> None:
    joined = key("{run}:{object}", run_id="a:b", obj="c")
    assert joined == "a%3Ab:c"
    assert joined != key("{run}:{object}", run_id="a", obj="b:c")
    assert key("{object}", obj="100%") == "100%25"


def test_object_id_from_arguments() -> None:
    assert object_id("create_order", "cart_id", {"cart_id": "c-1"}) == "c-1"
    assert object_id("create_order", "cart_id", {"cart_id": 7}) == "7"


@pytest.mark.parametrize("arguments", [{}, {"cart_id": None}, {"cart_id": ""}])
def test_missing_object_argument_is_a_clear_error(arguments: dict[str, object]) -> None:
    with pytest.raises(InvalidArgument) as info:
        object_id("create_order", "cart_id", arguments)
    assert "create_order needs the argument `cart_id`" in info.value.message
    assert "nothing was sent" in info.value.message


@pytest.mark.parametrize("value", [True, 1.5, ["a"], {"id": 1}])
def test_object_argument_must_be_an_id(value: object) -> None:
    with pytest.raises(InvalidArgument, match="must be a string or an integer id"):
        object_id("create_order", "cart_id", {"cart_id": value})


@pytest.mark.parametrize(
    ("template", "scope", "problem"),
    [
        ("{run}:{oops", KeyScope.RUN, "not a valid template"),
        ("{run}:{object!r}", KeyScope.RUN, "takes no format spec or conversion"),
        ("{run}:{user:>10}", KeyScope.RUN, "takes no format spec or conversion"),
        ("{object}:{step}", KeyScope.OBJECT, "remove {run} and {step}"),
    ],
)
def test_template_problems(template: str, scope: KeyScope, problem: str) -> None:
    found = template_problem(template, scope, "cart_id")
    assert found is not None and problem in found
