"""What the Temporal UI says about each workflow and each of its steps, and why a NodeClaim's lifecycle ended.

Every workflow starts with a one-line summary (and markdown details) that the UI shows above its history, and
every activity and timer carries a one-line summary that the UI shows in place of its bare type name. The
words are Karpenter's (NodePool, NodeClaim, drift replace, consolidation delete, expireAfter), short and
specific: which instance type in which zone, which node, how long a wait and what for. The same sentences
end a lifecycle's result and `nodewright explain`, so they are built here, once, from the workflows' messages.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from core.disruption.commands import Method, format_price
from core.instancetypes.azure import REGIONAL_ZONE
from core.messages import (
    DisruptionCommand,
    DisruptionEvent,
    DisruptionInput,
    DisruptionMode,
    DisruptionStatus,
    DisruptNodeClaim,
    Interruption,
    LaunchFailure,
    OfferingChoice,
    PlannedNodeClaim,
    SteeredDrain,
)

SHOWN = 3
"""Names a one-line summary lists before "and N more"."""
DETAILED = 10
"""Names (pods, launch options) the markdown details list before "and N more"."""


# ------------------------------------------------------------------------------------------------ wording


def duration(seconds: float) -> str:
    """A duration as Kubernetes manifests write it: 720h, 15m, 1m30s, 15s, 0.5s (whole seconds from a minute)."""
    if seconds >= 60:
        hours, rest = divmod(round(seconds), 3600)
        minutes, secs = divmod(rest, 60)
        return "".join(
            f"{value}{unit}" for value, unit in ((hours, "h"), (minutes, "m"), (secs, "s")) if value
        )
    return f"{seconds:g}s"


def names(items: Sequence[str], shown: int = SHOWN) -> str:
    """The first few names, comma-separated, then how many more."""
    text = ", ".join(items[:shown])
    if len(items) > shown:
        text += f" and {len(items) - shown} more"
    return text


def markdown_text(text: str) -> str:
    """Free text for markdown details: the UI renders $...$ as math, so dollar signs are escaped."""
    return text.replace("$", "\\$")


def count(number: int, noun: str) -> str:
    """ "1 pod", "3 pods"."""
    return f"{number} {noun}{'' if number == 1 else 's'}"


def vm_name(provider_id: str) -> str:
    """The VM's name, the last segment of its provider ID."""
    return provider_id.rstrip("/").rsplit("/", 1)[-1]


def method_name(method: str) -> str:
    """How Karpenter's log line names a method ("consolidation" for both consolidation methods)."""
    try:
        return Method(method).log_name
    except ValueError:
        return method


def zonal(zone: str) -> bool:
    """Whether an offering or a launch is in a zone (AKS writes "0" for VMs placed without one)."""
    return bool(zone) and zone != REGIONAL_ZONE


EVENT_ERROR_LENGTH = 300
"""Karpenter's NodeClaim lifecycle cuts the error in its events to this many characters."""


def truncated(text: str, length: int = EVENT_ERROR_LENGTH) -> str:
    """`text` cut to `length` characters and marked `...` unless it is shorter, as Karpenter cuts its events'
    errors (a text of exactly `length` gets the mark too)."""
    return text if len(text) < length else text[:length] + "..."


def offering_text(offering: OfferingChoice) -> str:
    """ "Standard_D4s_v5 spot eastus-1", "Standard_D2s_v5 on-demand, no zone"."""
    where = f" {offering.zone}" if zonal(offering.zone) else ", no zone"
    return f"{offering.instance_type} {offering.capacity_type}{where}"


# -------------------------------------------------------------------------------------------- workflows


def lifecycle_summary(claim: PlannedNodeClaim) -> str:
    """A NodeClaim lifecycle: the offering it launches first, for how many pods, in which NodePool.

    "Standard_D4s_v5 spot eastus-1 for 3 pods (NodePool default)"."""
    first = offering_text(claim.launch_candidates[0]) if claim.launch_candidates else "no offering"
    return f"{first} for {count(claim.pod_count, 'pod')} (NodePool {claim.nodepool})"


def lifecycle_details(claim: PlannedNodeClaim) -> str:
    """A NodeClaim lifecycle in markdown: why it was created, its requests, the offerings it tries in order and
    the pods it is for."""
    blocks = [f"**NodeClaim** `{claim.name}` in NodePool `{claim.nodepool}`"]
    if claim.reason:
        blocks.append(f"**Why:** {markdown_text(claim.reason)}")
    if claim.requests:
        blocks.append(
            "**Requests:** " + ", ".join(f"{name} {amount}" for name, amount in claim.requests.items())
        )
    if claim.launch_candidates:
        options = [
            f"{index}. {offering_text(offering)} `{format_price(offering.price_micros)}/h`"
            for index, offering in enumerate(claim.launch_candidates[:DETAILED], 1)
        ]
        if len(claim.launch_candidates) > DETAILED:
            options.append(f"and {len(claim.launch_candidates) - DETAILED} more")
        blocks.append("\n".join(["**Launch options, in order:**", *options]))
    if claim.pods:
        shown = ", ".join(f"`{pod}`" for pod in claim.pods[:DETAILED])
        more = claim.pod_count - min(len(claim.pods), DETAILED)
        blocks.append(f"**Pods ({claim.pod_count}):** {shown}" + (f" and {more} more" if more > 0 else ""))
    return "\n\n".join(blocks)


def provisioner_summary(cluster: str) -> str:
    return f"provisioner for cluster {cluster}"


def provisioner_details(batch_idle_seconds: float, batch_max_seconds: float) -> str:
    return (
        "Collects pods kube-scheduler could not place, in batches (closed after "
        f"{duration(batch_idle_seconds)} without a new one, {duration(batch_max_seconds)} at most), "
        "plans NodeClaims for them and starts their lifecycles."
    )


def disruption_summary(request: DisruptionInput) -> str:
    """The disruption loop, or a manual consolidation: "manual consolidation (dry run) of NodePools default"."""
    if request.mode is DisruptionMode.AUTOMATIC:
        scope = f" (NodePools {', '.join(request.nodepools)})" if request.nodepools else ""
        return f"disruption for cluster {request.cluster}{scope}"
    dry_run = " (dry run)" if request.dry_run else ""
    pools = f"NodePools {', '.join(request.nodepools)}" if request.nodepools else "all NodePools"
    return f"manual consolidation{dry_run} of {pools}"


def disruption_details(request: DisruptionInput) -> str:
    settings = request.settings
    if request.mode is DisruptionMode.AUTOMATIC:
        return (
            f"Every {duration(settings.poll_seconds)}: plans emptiness, drift, consolidation and expiration "
            f"within budgets and PDBs, and starts the first command; emptiness and consolidation must still hold "
            f"after {duration(settings.validation_seconds)}. Search `DisruptionReason` and `Decision` for the "
            "command running now."
        )
    if request.dry_run:
        return "One consolidation pass; the plan is the result, nothing is changed."
    return (
        "One consolidation pass; once confirmed, each command executes after a fresh plan validates it "
        f"(confirmation waits at most {duration(settings.confirmation_timeout_seconds)})."
    )


def consolidation_outcome(status: DisruptionStatus) -> str:
    """How a manual consolidation ended: "2 commands planned (saves $0.308/h), 3 nodes kept; 2 executed"."""
    plan = status.plan
    if plan is None:
        return "no plan"
    saves = (
        f" (saves {format_price(plan.savings_micros)}/h)" if plan.commands and plan.savings_micros > 0 else ""
    )
    text = f"{count(len(plan.commands), 'command')} planned{saves}, {count(len(plan.kept), 'node')} kept"
    outcomes = [result.outcome.value for result in status.results]
    if outcomes:
        text += "; " + ", ".join(f"{outcomes.count(o)} {o}" for o in dict.fromkeys(outcomes))
    return text


def catalog_refresh_summary(cluster: str) -> str:
    return f"catalog refresh (instance types and prices) for cluster {cluster}"


def garbage_collection_summary(cluster: str) -> str:
    return f"garbage collection for cluster {cluster}"


def bootstrap_token_rotation_summary(cluster: str) -> str:
    return f"bootstrap token rotation for cluster {cluster}"


def nodeclass_status_summary(cluster: str) -> str:
    return f"AKSNodeClass status for cluster {cluster}"


def reconcile_nodeclass_status_summary() -> str:
    return "check every AKSNodeClass's subnet and write its Ready, SubnetsReady and other conditions"


def refresh_catalog_summary() -> str:
    return "refresh VM sizes and prices from the Resource SKUs and Retail Prices APIs"


def collect_garbage_summary(grace_seconds: float) -> str:
    return (
        f"delete leaked VMs and NICs (older than {duration(grace_seconds)}) and NodeClaims whose VM is gone"
    )


# ---------------------------------------------------------------------------------- disruption commands


def savings(command: DisruptionCommand) -> str:
    """ " (saves $0.154/h)", or nothing when the command saves nothing (drift may cost more)."""
    return f" (saves {format_price(command.savings_micros)}/h)" if command.savings_micros > 0 else ""


def command_summary(command: DisruptionCommand) -> str:
    """A disruption command: "consolidation delete of aks-default-x, aks-default-y (saves $0.154/h)"."""
    return command_nodes(command) + savings(command)


def command_details(command: DisruptionCommand) -> str:
    """A disruption command in markdown: Karpenter's log line, its candidates and replacements."""
    lines = [f"**{command.reason}** via {command.method}: `{command.message}`"]
    lines.extend(
        f"- `{c.node}` (NodeClaim `{c.nodeclaim}`, {c.instance_type} {c.capacity_type} {c.zone}, "
        f"{count(c.pods, 'pod')})"
        for c in command.candidates
    )
    for replacement in command.replacements:
        lines.append(
            f"- replacement in NodePool `{replacement.nodepool}`: "
            + names(replacement.instance_type_options, 5)
            + f" for {count(len(replacement.pods), 'pod')}"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------- disruption steps


def plan_pass_summary(request: DisruptionInput, passes: int) -> str:
    """ "plan disruption pass 12", "plan consolidation of all NodePools"."""
    if request.mode is DisruptionMode.AUTOMATIC:
        return f"plan disruption pass {passes}"
    pools = f"NodePools {', '.join(request.nodepools)}" if request.nodepools else "all NodePools"
    return f"plan consolidation of {pools}"


def command_nodes(command: DisruptionCommand) -> str:
    """ "consolidation delete of aks-default-x, aks-default-y": the command without its savings."""
    nodes = names([candidate.node for candidate in command.candidates])
    return f"{method_name(command.method)} {command.decision} of {nodes}"


def validation_wait_summary(seconds: float, command: DisruptionCommand) -> str:
    """ "wait 15s validation: consolidation delete of aks-default-x" (the savings follow on the taint, which
    starts the command: the UI's compact history cuts long summaries short)."""
    return wait_summary(seconds, f"validation: {command_nodes(command)}")


def validate_summary(command: DisruptionCommand) -> str:
    """The fresh plan after the validation wait: "validate consolidation delete of aks-default-x"."""
    return f"validate {command_nodes(command)}"


def taint_candidates_summary(command: DisruptionCommand) -> str:
    """ "taint aks-default-x for consolidation delete (saves $0.154/h)" (karpenter.sh/disrupted:NoSchedule): the
    command starts."""
    nodes = names([candidate.node for candidate in command.candidates])
    return f"taint {nodes} for {method_name(command.method)} {command.decision}{savings(command)}"


def launch_replacements_summary(command: DisruptionCommand) -> str:
    nodes = names([candidate.node for candidate in command.candidates])
    return f"launch {count(len(command.replacements), 'replacement')} for {nodes}"


def replacement_progress_summary(nodeclaims: Sequence[str]) -> str:
    return f"check replacements {names(nodeclaims)} are initialized"


def steer_summary(awaited: str | None) -> str:
    return (
        f"steered drain: wait for {awaited}'s replacement, evict the next pod"
        if awaited
        else ("steered drain: evict the next pod")
    )


def steered_drain(drain: SteeredDrain) -> str:
    """A repack's steered drain in a sentence: "steered drain: 12 pods evicted one at a time, 11 landed where
    planned, 1 elsewhere (default/a: node-1 -> node-2)"."""
    text = (
        f"steered drain: {count(drain.evicted, 'pod')} evicted one at a time, {drain.as_planned} landed where "
        f"planned"
    )
    if drain.elsewhere:
        text += f", {len(drain.elsewhere)} elsewhere ({'; '.join(drain.elsewhere[:3])}"
        text += f" and {len(drain.elsewhere) - 3} more)" if len(drain.elsewhere) > 3 else ")"
    if drain.gave_up:
        text += f"; then drained as Karpenter drains: {drain.gave_up}"
    return text


def release_summary(nodeclaims: Sequence[str]) -> str:
    return f"steered drain: uncordon {names(nodeclaims)}"


def untaint_summary(nodes: Sequence[str]) -> str:
    return f"untaint {names(nodes)}: command rolled back"


def events_summary(events: Sequence[DisruptionEvent]) -> str:
    """ "record 4 events (DisruptionTerminating)"."""
    reasons = sorted({event.reason for event in events})
    return f"record {count(len(events), 'event')} ({', '.join(reasons)})"


# ----------------------------------------------------------------------------------------- lifecycle steps


def launch_summary(offering: OfferingChoice) -> str:
    """ "launch Standard_D4s_v5 in eastus-1 (spot)", "launch Standard_D2s_v5 without a zone (on-demand)"."""
    where = f"in {offering.zone}" if zonal(offering.zone) else "without a zone"
    return f"launch {offering.instance_type} {where} ({offering.capacity_type})"


def register_summary(provider_id: str) -> str:
    return f"find the Node of VM {vm_name(provider_id)}"


def initialize_summary(node: str) -> str:
    return f"check Node {node} is Ready and initialized"


def condition_summary(nodeclaim: str, condition: str, status: str, reason: str) -> str:
    """ "set Registered=False (RegistrationTimeout) on default-abcde"."""
    return f"set {condition}={status} ({reason}) on {nodeclaim}"


def taint_summary(node: str) -> str:
    return f"taint {node} karpenter.sh/disrupted:NoSchedule"


def begin_termination_summary(nodeclaim: str, node: str) -> str:
    return f"mark NodeClaim {nodeclaim} deleting, taint {node} karpenter.sh/disrupted:NoSchedule"


def drain_summary(node: str, force: bool, why: str = "terminationGracePeriod elapsed") -> str:
    return f"drain {node}" + (f" (forced: {why})" if force else "")


def volume_detachment_summary(node: str, grace_elapsed: bool) -> str:
    if grace_elapsed:
        return f"check volumes of {node} (terminationGracePeriod elapsed: no waiting)"
    return f"wait for volumes to detach from {node}"


def delete_instance_summary(nodeclaim: str, provider_id: str | None) -> str:
    if provider_id:
        return f"delete VM {vm_name(provider_id)} with its NIC and disk"
    return f"delete any VM of NodeClaim {nodeclaim}"


def delete_node_summary(node: str) -> str:
    return f"delete Node {node}"


def delete_nodeclaim_summary(nodeclaim: str) -> str:
    return f"delete NodeClaim {nodeclaim} (remove its finalizer)"


def wait_summary(seconds: float, what: str) -> str:
    """A timer: "wait 15s validation of ...", "wait 5s for the Node of VM aks-default-abcde"."""
    return f"wait {duration(seconds)} {what}"


def expiry_summary(remaining_seconds: float, expire_after_seconds: float) -> str:
    """The running NodeClaim's timer: "wait 720h, then expire (expireAfter 720h)"."""
    return f"wait {duration(remaining_seconds)}, then expire (expireAfter {duration(expire_after_seconds)})"


# ----------------------------------------------------------------------------------- why a lifecycle ended


def node_deleted(node: str) -> str:
    return f"Node {node} was deleted"


def nodeclaim_deleted(nodeclaim: str, by: str) -> str:
    """A deletion someone asked for; `by` says who when it was not the NodeClaim's own deletion."""
    detail = f" ({by})" if by and by != "nodeclaim deleted" else ""
    return f"NodeClaim {nodeclaim} was deleted{detail}"


def garbage_collected(nodeclaim: str) -> str:
    return f"NodeClaim {nodeclaim} was garbage collected: its VM is gone and its Node is not Ready"


def disrupted(request: DisruptNodeClaim) -> str:
    """ "disrupted via drift replace (Drifted) by disruption/nodewright-demo"; signals from before the method
    was sent read "disrupted (Drifted) by ..."."""
    by = request.command or "a disruption command"
    if request.method:
        how = " ".join(part for part in (method_name(request.method), request.decision) if part)
        text = f"disrupted via {how} ({request.reason}) by {by}"
    else:
        text = f"disrupted ({request.reason}) by {by}"
    return f"{text}: {request.detail}" if request.detail else text


def timestamp(moment: datetime) -> str:
    """A UTC time as the UI and explain print it: 2026-11-24T14:00:30Z."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def interrupted(notice: Interruption) -> str:
    """ "interrupted: Spot eviction (Preempt event 40B7..., deadline 2026-11-24T14:00:30Z)"."""
    deadline = f"deadline {timestamp(notice.not_before)}" if notice.not_before else "under way"
    return f"interrupted: Spot eviction (Preempt event {notice.event_id}, {deadline})"


def repaired(condition: str, message: str) -> str:
    """ "repaired: Node aks-default-abcde is unhealthy: Ready=Unknown for 0:10:02 (tolerated 0:10:00)"."""
    return f"repaired ({condition}): {message}"


def expired(expire_after_seconds: float) -> str:
    return f"expired (expireAfter {duration(expire_after_seconds)})"


def registration_timed_out(provider_id: str, ttl_seconds: float) -> str:
    return f"registration TTL ({duration(ttl_seconds)}) expired: no Node registered with providerID {provider_id}"


def launch_timed_out(timeout_seconds: float) -> str:
    return f"launch timeout ({duration(timeout_seconds)}) expired: no instance was launched"


def launch_error(failure: LaunchFailure) -> str:
    """A launch that failed for a reason of its own (not capacity or quota), with the offering and the error."""
    where = f" {failure.zone}" if zonal(failure.zone) else ", no zone"
    return f"launch failed: {failure.instance_type} {failure.capacity_type}{where}: {failure.message}"


def delete_unregistered_node_summary(provider_id: str) -> str:
    return f"delete any Node of VM {vm_name(provider_id)} that registered after all"


def launch_failed(failures: Sequence[LaunchFailure]) -> str:
    """Every offering tried with its kind of error, and the last error's message."""
    if not failures:
        return "launch failed: no offering to launch"
    tried = "; ".join(
        f"{f.instance_type} {f.capacity_type}{f' {f.zone}' if zonal(f.zone) else ', no zone'}: {f.kind}"
        for f in failures
    )
    last = f": {failures[-1].message}" if failures[-1].message else ""
    return f"launch failed: no offering could be launched ({tried}){last}"
