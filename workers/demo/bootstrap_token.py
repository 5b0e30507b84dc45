"""The demo's bootstrap token rotation step: the rotation's Temporal Schedule is triggered (as `temporal schedule
trigger` does), the new token's Secret appears in kube-system beside the configured one, with its event, and the
next node (the static NodePool scaled by one) joins with it: the API server saw its certificate signing request
come from `system:bootstrap:<the new token's id>`."""

from __future__ import annotations

from core import labels
from core.api.kube import Secret
from core.bootstrap_tokens import GENERATION_LABEL, NAMESPACE
from workers.demo.static import STATIC_POOL, static_ready
from workers.demo.walkthrough import Walkthrough
from workers.schedules import rotate_bootstrap_token_now
from workflows.bootstrap_tokens import bootstrap_token_rotation_id


async def rotated_tokens(walk: Walkthrough) -> dict[int, Secret]:
    """The rotated tokens' Secrets (public metadata only), by generation."""
    listed = await walk.sim.list_objects("Secret", NAMESPACE, label_selector=GENERATION_LABEL)
    return {
        int(item["metadata"]["labels"][GENERATION_LABEL]): Secret.model_validate(
            {"metadata": item["metadata"]}
        )
        for item in listed
    }


async def token_rotation_step(walk: Walkthrough, number: int) -> None:
    walk.say(f"{number}. Rotate the bootstrap token now: a new token Secret, and the next node joins with it")
    before = await rotated_tokens(walk)
    schedule = bootstrap_token_rotation_id(walk.options.cluster)
    print(f"$ temporal schedule trigger --schedule-id {schedule}", file=walk.out)
    await rotate_bootstrap_token_now(walk.client, walk.options.cluster)
    generation = max(before, default=0) + 1

    async def created() -> bool:
        return generation in await rotated_tokens(walk)

    await walk.until(f"bootstrap token generation {generation}", created)
    token = (await rotated_tokens(walk))[generation]
    token_id = token.metadata.name.removeprefix("bootstrap-token-")
    await walk.kubectl(
        "get",
        "secrets",
        "-n",
        NAMESPACE,
        "--field-selector=type=bootstrap.kubernetes.io/token",
        f"-L{GENERATION_LABEL}",
    )
    await walk.kubectl(
        "get",
        "events",
        "-n",
        NAMESPACE,
        f"--field-selector=involvedObject.name={token.metadata.name}",
        "-o=custom-columns=REASON:.reason,MESSAGE:.message",
    )

    async def settled() -> bool:
        """None of the static pool's NodeClaims is being deleted (the window's last may be): its node limit counts
        them, and a scale-up would wait for the pool's next periodic check."""
        return all(
            claim.metadata.deletion_timestamp is None
            for claim in await walk.sim.list_nodeclaims()
            if claim.labels.get(labels.NODEPOOL) == STATIC_POOL
        )

    await walk.until(f"NodePool {STATIC_POOL} settled", settled)
    claims = {claim.name for claim in await walk.sim.list_nodeclaims()}
    pool = await walk.sim.get_object("NodePool", STATIC_POOL) or {}
    replicas = int(pool.get("spec", {}).get("replicas") or 0) + 1
    await walk.kubectl("scale", "nodepool", STATIC_POOL, f"--replicas={replicas}")
    await walk.until(f"{replicas} static nodes", lambda: static_ready(walk, replicas))
    [joined] = [
        claim
        for claim in await walk.sim.list_nodeclaims()
        if claim.name not in claims and claim.labels.get(labels.NODEPOOL) == STATIC_POOL
    ]
    node = joined.status.node_name or ""
    agent = next(agent for agent in walk.aks.emulated.agents.agents.values() if agent.node_name == node)
    await walk.kubectl(
        "get",
        "csr",
        agent.csr_name or "",
        "-o=custom-columns=NAME:.metadata.name,REQUESTOR:.spec.username,CONDITION:.status.conditions[0].type",
    )
    print(
        f"Node {node} joined with bootstrap token {token_id} (generation {generation}); the token it replaced stays "
        "until no node can still be joining with it (launch timeout + registration TTL), then the rotation "
        "deletes it",
        file=walk.out,
    )
