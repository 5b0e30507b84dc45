"""`nodewright explain` names the NodeOverlay that set the price of a launch option and of a launch."""

from __future__ import annotations

import io
from datetime import UTC, datetime

from workers.explain import Creation, LaunchAttempt, Option, Story, render_text

AT = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


def test_explain_says_which_overlay_adjusted_a_price() -> None:
    option = {"instance_type": "Standard_E2s_v5", "zone": "eastus-1", "capacity_type": "on-demand"}
    story = Story(
        nodeclaim="default-abcde",
        node=None,
        workflow_id="nodeclaim/default-abcde",
        run_id="r",
        status="Running",
        phase="launched",
        closed_at=None,
        created=Creation(
            at=AT,
            cluster="c",
            nodepool="default",
            reason="",
            pods=[],
            pod_count=0,
            requests={},
            instance_types="Standard_E2s_v5",
            options=[
                Option(**option, price_per_hour=0.0126, price_overlay="cheap-e"),
                Option(**{**option, "zone": "eastus-2"}, price_per_hour=0.126),
            ],
            batch=1,
            planned_by=None,
        ),
        launches=[
            LaunchAttempt(at=AT, **option, price_per_hour=0.0126, launched=True, price_overlay="cheap-e")
        ],
    )
    out = io.StringIO()
    render_text(story, out)
    text = out.getvalue()
    assert "Standard_E2s_v5/eastus-1/on-demand $0.0126/h, price adjusted by overlay cheap-e, " in text
    assert "Standard_E2s_v5/eastus-2/on-demand $0.1260/h" in text
    assert "eastus-2/on-demand $0.1260/h, price adjusted" not in text
    assert (
        "launched Standard_E2s_v5 on-demand in eastus-1 ($0.0126/h, price adjusted by overlay cheap-e)"
        in text
    )
