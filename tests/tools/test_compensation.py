"""Compensation templates: rendering from a call's input and answer, all or nothing, and the
tools file refusing a template it could never render (file:line)."""

from __future__ import annotations

import pytest

from shellwardd.errors import InvalidArgument
from shellwardd.tools.compensation import Compensation, render, template_problem
from shellwardd.tools.config import ToolConfigError, parse_tools_config

SERVER = '[[server]]\nname = "biz"\ncommand = ["srv"]\n'


def test_whole_placeholders_keep_their_type_and_text_is_interpolated() -> None:
    compensation = Compensation(
        "cancel_order",
        {
            "order_id": "{output.order_id}",
            "qty": "{input.quantity}",
            "first": "{output.items.0.sku}",
            "reason": "undo of {input.item} x{input.quantity} ({{agent}})",
            "nested": {"list": ["{output.items}"], "literal": 7},
        },
    )
    given = {"item": "tea", "quantity": 3}
    answer = {"order_id": "ord-1", "items": [{"sku": "T-1"}]}
    assert render(compensation, given, answer) == {
        "order_id": "ord-1",
        "qty": 3,
        "first": "T-1",
        "reason": "undo of tea x3 ({agent})",
        "nested": {"list": [[{"sku": "T-1"}]], "literal": 7},
    }
    assert compensation.needs_output
    assert not Compensation("x", {"k": "{input.idempotency_key}"}).needs_output


@pytest.mark.parametrize(
    ("arguments", "answer", "missing"),
    [
        ({"order_id": "{output.id}"}, {"order_id": "ord-1"}, "has no `id`"),
        ({"order_id": "{output.items.3}"}, {"items": [1]}, "has no `3`"),
        ({"a": "ok", "b": "{input.nope}"}, {}, "has no `nope`"),
        ({"order_id": "{output.order_id}"}, {"order_id": None}, "recorded null"),
        ({"note": "id {output.order}"}, {"order": {"id": 1}}, "inside a string"),
        # A capped answer is recorded as its size and digest: no fields to take.
        ({"order_id": "{output.order_id}"}, {"truncated": True, "sha256": "x"}, "has no"),
    ],
)
def test_a_gap_refuses_the_whole_compensation(
    arguments: dict[str, str], answer: object, missing: str
) -> None:
    with pytest.raises(InvalidArgument, match=missing) as caught:
        render(Compensation("cancel_order", arguments), {}, answer)
    assert "nothing was sent" in caught.value.message


@pytest.mark.parametrize(
    ("template", "problem"),
    [
        ("{order_id}", "must be {input.<path>}"),
        ("{output}", "must be {input.<path>}"),
        ("{output..id}", "must be {input.<path>}"),
        ("{env.HOME}", "must be {input.<path>}"),
        ("{output.id!r}", "no format spec"),
        ("{output.id:>5}", "no format spec"),
        ("{output.id", "not a valid template"),
    ],
)
def test_bad_templates_are_named(template: str, problem: str) -> None:
    assert problem in (template_problem({"a": [{"b": template}]}) or "")


def test_the_tools_file_reads_and_checks_compensate() -> None:
    text = (
        SERVER
        + '[[tool]]\nserver = "biz"\nname = "create_order"\n'
        + 'compensate = { tool = "cancel_order", arguments = { order_id = "{output.order_id}" } }\n'
    )
    (pin,) = parse_tools_config(text, "t.toml").pins
    assert pin.compensate == Compensation("cancel_order", {"order_id": "{output.order_id}"})


@pytest.mark.parametrize(
    ("compensate", "message"),
    [
        ('"cancel_order"', "must be a table like"),
        ('{ tool = "cancel_order", args = {} }', "must be a table like"),
        ("{ arguments = {} }", "must name a tool of the same server"),
        ('{ tool = "other.cancel" }', "must name a tool of the same server"),
        ('{ tool = "cancel_order", arguments = "x" }', "must be a table"),
        ('{ tool = "cancel_order", arguments = { id = "{result.id}" } }', "{input.<path>}"),
    ],
)
def test_a_bad_compensate_is_refused_with_file_and_line(compensate: str, message: str) -> None:
    text = SERVER + f'[[tool]]\nserver = "biz"\nname = "create_order"\ncompensate = {compensate}\n'
    with pytest.raises(ToolConfigError, match=r"^t\.toml:7: ") as caught:
        parse_tools_config(text, "t.toml")
    assert message in caught.value.problem
