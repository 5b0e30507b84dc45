"""The words the Temporal UI shows for each workflow and step, and why a lifecycle ended: exact strings."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from core import summaries
from core.messages import (
    CommandOutcome,
    CommandResult,
    DisruptedCandidate,
    DisruptionCommand,
    DisruptionEvent,
    DisruptionInput,
    DisruptionMode,
    DisruptionPassRecord,
    DisruptionSettings,
    DisruptionStatus,
    DisruptNodeClaim,
    KeptNode,
    LaunchFailure,
    OfferingChoice,
    PlannedNodeClaim,
    PlannedReplacement,
)

SPOT = OfferingChoice(
    instance_type="Standard_D4s_v5", zone="eastus-1", capacity_type="spot", price_micros=40_000
)
ON_DEMAND = OfferingChoice(
    instance_type="Standard_D4s_v5", zone="eastus-2", capacity_type="on-demand", price_micros=192_000
)
PROVIDER_ID = "azure:///subscriptions/0000/resourceGroups/mc_rg/providers/Microsoft.Compute/virtualMachines/aks-default-abcde"


def claim(**fields: object) -> PlannedNodeClaim:
    values: dict[str, object] = {
        "name": "default-abcde",
        "nodepool": "default",
        "launch_candidates": [SPOT, ON_DEMAND],
        "labels": {},
        "requests": {"cpu": "3100m", "memory": "3200Mi", "pods": "4"},
        "pod_count": 3,
        "pods": ["default/inflate-1", "default/inflate-2", "default/inflate-3"],
        "reason": "cheapest of 2 instance types that fit 3 pods",
    }
    values.update(fields)
    return PlannedNodeClaim.model_validate(values)


def candidate(node: str, pods: int = 1) -> DisruptedCandidate:
    return DisruptedCandidate(
        node=node,
        nodeclaim=node.removeprefix("aks-"),
        nodepool="default",
        instance_type="Standard_D4s_v5",
        zone="eastus-1",
        capacity_type="on-demand",
        pods=pods,
    )


def command(
    method: str, decision: str, nodes: list[str], savings: int = 0, **fields: object
) -> DisruptionCommand:
    return DisruptionCommand(
        method=method,
        reason=str(fields.pop("reason", "Underutilized")),
        decision=decision,
        candidates=[candidate(node) for node in nodes],
        savings_micros=savings,
        message="disrupting via ...",
        **fields,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.5, "0.5s"),
        (1, "1s"),
        (15, "15s"),
        (90.4, "1m30s"),
        (900, "15m"),
        (3600, "1h"),
        (2_591_999.6, "720h"),
    ],
)
def test_durations_read_as_manifests_write_them(seconds: float, text: str) -> None:
    assert summaries.duration(seconds) == text


# --- workflows ----------------------------------------------------------------------------------------------


def test_a_lifecycle_is_summarized_by_its_first_offering_pods_and_nodepool() -> None:
    assert (
        summaries.lifecycle_summary(claim()) == "Standard_D4s_v5 spot eastus-1 for 3 pods (NodePool default)"
    )
    assert summaries.lifecycle_summary(claim(pod_count=1, launch_candidates=[ON_DEMAND])) == (
        "Standard_D4s_v5 on-demand eastus-2 for 1 pod (NodePool default)"
    )
    assert (
        summaries.lifecycle_summary(claim(launch_candidates=[]))
        == "no offering for 3 pods (NodePool default)"
    )


def test_a_lifecycles_details_say_why_and_list_options_and_pods() -> None:
    assert summaries.lifecycle_details(claim()) == "\n\n".join(
        [
            "**NodeClaim** `default-abcde` in NodePool `default`",
            "**Why:** cheapest of 2 instance types that fit 3 pods",
            "**Requests:** cpu 3100m, memory 3200Mi, pods 4",
            "**Launch options, in order:**\n"
            "1. Standard_D4s_v5 spot eastus-1 `$0.040/h`\n"
            "2. Standard_D4s_v5 on-demand eastus-2 `$0.192/h`",
            "**Pods (3):** `default/inflate-1`, `default/inflate-2`, `default/inflate-3`",
        ]
    )


def test_long_lists_in_details_stop_after_ten() -> None:
    many = claim(
        launch_candidates=[SPOT] * 12, pods=[f"default/p-{i}" for i in range(12)], pod_count=40, reason=""
    )
    details = summaries.lifecycle_details(many)
    assert "10. Standard_D4s_v5 spot eastus-1 `$0.040/h`\nand 2 more" in details
    assert details.endswith("`default/p-9` and 30 more")
    assert "**Why:**" not in details
    priced = summaries.lifecycle_details(claim(reason="Standard_D4s_v5 spot at $0.0400/h"))
    assert "**Why:** Standard_D4s_v5 spot at \\$0.0400/h" in priced  # not the start of a formula


def test_the_provisioner_and_the_maintenance_workflows() -> None:
    assert summaries.provisioner_summary("nodewright-demo") == "provisioner for cluster nodewright-demo"
    assert summaries.provisioner_details(1, 10) == (
        "Collects pods kube-scheduler could not place, in batches (closed after 1s without a new one, 10s at "
        "most), plans NodeClaims for them and starts their lifecycles."
    )
    assert summaries.garbage_collection_summary("c") == "garbage collection for cluster c"
    assert (
        summaries.catalog_refresh_summary("c") == "catalog refresh (instance types and prices) for cluster c"
    )
    assert summaries.collect_garbage_summary(300) == (
        "delete leaked VMs and NICs (older than 5m) and NodeClaims whose VM is gone"
    )


def test_the_disruption_loop_and_manual_consolidations() -> None:
    automatic = DisruptionInput(cluster="nodewright-demo")
    assert summaries.disruption_summary(automatic) == "disruption for cluster nodewright-demo"
    assert summaries.disruption_details(automatic).startswith(
        "Every 10s: plans emptiness, drift, consolidation and expiration within budgets and PDBs"
    )
    manual = DisruptionInput(cluster="c", mode=DisruptionMode.MANUAL, nodepools=["default"], dry_run=True)
    assert summaries.disruption_summary(manual) == "manual consolidation (dry run) of NodePools default"
    everything = DisruptionInput(
        cluster="c", mode=DisruptionMode.MANUAL, settings=DisruptionSettings(confirmation_timeout_seconds=600)
    )
    assert summaries.disruption_summary(everything) == "manual consolidation of all NodePools"
    assert summaries.disruption_details(everything).endswith("(confirmation waits at most 10m).")
    assert summaries.plan_pass_summary(automatic, 12) == "plan disruption pass 12"
    assert summaries.plan_pass_summary(manual, 1) == "plan consolidation of NodePools default"


# --- disruption commands ------------------------------------------------------------------------------------


def test_a_command_is_its_method_decision_candidates_and_savings() -> None:
    drift = command("drift", "replace", ["aks-default-abcde"], savings=-10_000, reason="Drifted")
    assert summaries.command_summary(drift) == "drift replace of aks-default-abcde"
    consolidation = command("multi-node-consolidation", "delete", ["aks-default-x", "aks-default-y"], 154_000)
    assert summaries.command_summary(consolidation) == (
        "consolidation delete of aks-default-x, aks-default-y (saves $0.154/h)"
    )
    four = command("emptiness", "delete", ["aks-a", "aks-b", "aks-c", "aks-d"], 616_000, reason="Empty")
    assert (
        summaries.command_summary(four)
        == "emptiness delete of aks-a, aks-b, aks-c and 1 more (saves $0.616/h)"
    )


def test_a_commands_steps() -> None:
    drift = command(
        "drift",
        "replace",
        ["aks-default-abcde"],
        reason="Drifted",
        replacements=[PlannedReplacement(nodepool="default", instance_type_options=["Standard_D4s_v5"])],
    )
    assert summaries.taint_candidates_summary(drift) == "taint aks-default-abcde for drift replace"
    assert summaries.launch_replacements_summary(drift) == "launch 1 replacement for aks-default-abcde"
    assert summaries.validate_summary(drift) == "validate drift replace of aks-default-abcde"
    saving = command("single-node-consolidation", "delete", ["aks-x"], 154_000)
    assert summaries.validate_summary(saving) == "validate consolidation delete of aks-x"
    assert (
        summaries.validation_wait_summary(15, saving) == "wait 15s validation: consolidation delete of aks-x"
    )
    assert (
        summaries.taint_candidates_summary(saving) == "taint aks-x for consolidation delete (saves $0.154/h)"
    )
    assert summaries.replacement_progress_summary(["default-r8v7m"]) == (
        "check replacements default-r8v7m are initialized"
    )
    assert summaries.untaint_summary(["aks-a", "aks-b"]) == "untaint aks-a, aks-b: command rolled back"
    events = [
        DisruptionEvent(kind="Node", name="aks-a", reason="DisruptionTerminating", message="m"),
        DisruptionEvent(kind="NodeClaim", name="a", reason="DisruptionTerminating", message="m"),
        DisruptionEvent(kind="Node", name="aks-b", reason="Unconsolidatable", message="m"),
    ]
    assert summaries.events_summary(events) == "record 3 events (DisruptionTerminating, Unconsolidatable)"
    assert summaries.command_details(drift) == (
        "**Drifted** via drift: `disrupting via ...`\n"
        "- `aks-default-abcde` (NodeClaim `default-abcde`, Standard_D4s_v5 on-demand eastus-1, 1 pod)\n"
        "- replacement in NodePool `default`: Standard_D4s_v5 for 0 pods"
    )
    assert summaries.wait_summary(5, "for replacements default-r8v7m to initialize") == (
        "wait 5s for replacements default-r8v7m to initialize"
    )


# --- lifecycle steps ----------------------------------------------------------------------------------------


def test_lifecycle_steps() -> None:
    assert summaries.launch_summary(SPOT) == "launch Standard_D4s_v5 in eastus-1 (spot)"
    regional = ON_DEMAND.model_copy(update={"zone": "0"})
    assert summaries.launch_summary(regional) == "launch Standard_D4s_v5 without a zone (on-demand)"
    assert summaries.offering_text(regional) == "Standard_D4s_v5 on-demand, no zone"
    assert summaries.register_summary(PROVIDER_ID) == "find the Node of VM aks-default-abcde"
    assert summaries.initialize_summary("aks-default-abcde") == (
        "check Node aks-default-abcde is Ready and initialized"
    )
    assert summaries.condition_summary("default-abcde", "Registered", "False", "RegistrationTimeout") == (
        "set Registered=False (RegistrationTimeout) on default-abcde"
    )
    assert summaries.taint_summary("aks-x") == "taint aks-x karpenter.sh/disrupted:NoSchedule"
    assert summaries.drain_summary("aks-x", force=False) == "drain aks-x"
    assert (
        summaries.drain_summary("aks-x", force=True) == "drain aks-x (forced: terminationGracePeriod elapsed)"
    )
    assert summaries.delete_instance_summary("default-abcde", PROVIDER_ID) == (
        "delete VM aks-default-abcde with its NIC and disk"
    )
    assert (
        summaries.delete_instance_summary("default-abcde", None) == "delete any VM of NodeClaim default-abcde"
    )
    assert summaries.delete_node_summary("aks-x") == "delete Node aks-x"
    assert (
        summaries.expiry_summary(2_591_990.2, 2_592_000) == "wait 719h59m50s, then expire (expireAfter 720h)"
    )
    assert summaries.delete_nodeclaim_summary("x") == "delete NodeClaim x (remove its finalizer)"


# --- why a lifecycle ended ----------------------------------------------------------------------------------


def test_why_a_lifecycle_ended() -> None:
    assert summaries.node_deleted("aks-default-abcde") == "Node aks-default-abcde was deleted"
    assert (
        summaries.nodeclaim_deleted("default-abcde", "nodeclaim deleted")
        == "NodeClaim default-abcde was deleted"
    )
    assert summaries.nodeclaim_deleted("default-r8v7m", "disruption rolled back: replacement failed") == (
        "NodeClaim default-r8v7m was deleted (disruption rolled back: replacement failed)"
    )
    assert summaries.garbage_collected("default-abcde") == (
        "NodeClaim default-abcde was garbage collected: its VM is gone and its Node is not Ready"
    )
    drift = DisruptNodeClaim(reason="Drifted", command="disruption/c", method="drift", decision="replace")
    assert summaries.disrupted(drift) == "disrupted via drift replace (Drifted) by disruption/c"
    single = DisruptNodeClaim(
        reason="Underutilized",
        command="consolidation/c/1",
        method="single-node-consolidation",
        decision="delete",
    )
    assert (
        summaries.disrupted(single)
        == "disrupted via consolidation delete (Underutilized) by consolidation/c/1"
    )
    older = DisruptNodeClaim(reason="Empty")
    assert summaries.disrupted(older) == "disrupted (Empty) by a disruption command"
    assert summaries.expired(2_592_000) == "expired (expireAfter 720h)"
    assert summaries.registration_timed_out(PROVIDER_ID, 900) == (
        f"registration TTL (15m) expired: no Node registered with providerID {PROVIDER_ID}"
    )
    failures = [
        LaunchFailure(
            instance_type="Standard_D2s_v5",
            zone="eastus-1",
            capacity_type="on-demand",
            kind="SkuNotAvailable",
            message="not available in eastus-1",
        ),
        LaunchFailure(
            instance_type="Standard_D2s_v5", zone="0", capacity_type="spot", kind="QuotaExceeded", message=""
        ),
    ]
    assert summaries.launch_failed(failures[:1]) == (
        "launch failed: no offering could be launched (Standard_D2s_v5 on-demand eastus-1: SkuNotAvailable): "
        "not available in eastus-1"
    )
    assert summaries.launch_failed(failures) == (
        "launch failed: no offering could be launched (Standard_D2s_v5 on-demand eastus-1: SkuNotAvailable; "
        "Standard_D2s_v5 spot, no zone: QuotaExceeded)"
    )
    assert summaries.launch_failed([]) == "launch failed: no offering to launch"


def test_how_a_manual_consolidation_ended() -> None:
    status = DisruptionStatus(cluster="c", mode=DisruptionMode.MANUAL)
    assert summaries.consolidation_outcome(status) == "no plan"
    kept = [KeptNode(node="aks-a"), KeptNode(node="aks-b")]
    status.plan = DisruptionPassRecord(at=datetime(2026, 1, 1, tzinfo=UTC), kept=kept)
    assert summaries.consolidation_outcome(status) == "0 commands planned, 2 nodes kept"
    planned = command("single-node-consolidation", "delete", ["aks-x"], 154_000)
    status.plan = DisruptionPassRecord(
        at=datetime(2026, 1, 1, tzinfo=UTC), commands=[planned], kept=kept[:1], savings_micros=154_000
    )
    status.results = [CommandResult(command=planned, outcome=CommandOutcome.DRY_RUN)]
    assert (
        summaries.consolidation_outcome(status)
        == "1 command planned (saves $0.154/h), 1 node kept; 1 dry-run"
    )


def test_an_event_error_is_cut_at_karpenters_300_characters() -> None:
    assert summaries.truncated("x" * 299) == "x" * 299
    assert summaries.truncated("x" * 300) == "x" * 300 + "..."
    assert summaries.truncated("abcdef", 3) == "abc..."
