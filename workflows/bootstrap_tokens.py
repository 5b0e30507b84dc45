"""The bootstrap token rotation: one run per rotation, started by the cluster's Temporal Schedule
(`bootstrap-token-rotation/<cluster>`, every `period_seconds`; triggering the Schedule rotates now).

A run creates the next token (`core.bootstrap_tokens`), from which moment launches join with it; sleeps the grace,
during which nodes launched with the token it replaced finish joining with that one; then deletes the tokens no
joining node can use any more. Its run id is recorded on the token it creates, so an activity retried after its
worker died finds that token rather than making a second. When the id the next token takes still serves joining
nodes (rotations triggered by hand in quick succession), the run waits on a timer until it is free.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

from workflows.conventions import RETRY, log

with workflow.unsafe.imports_passed_through():
    from core.bootstrap_token_messages import (
        DELETE_STALE_BOOTSTRAP_TOKENS,
        ROTATE_BOOTSTRAP_TOKEN,
        BootstrapTokenRotationInput,
        BootstrapTokenRotationResult,
        DeleteStaleInput,
        DeleteStaleResult,
        RotateInput,
        RotateResult,
        TokenRecord,
    )
    from core.bootstrap_tokens import token_lifetime


def bootstrap_token_rotation_id(cluster: str) -> str:
    """The id of the cluster's rotation Schedule, and the prefix of its runs' workflow ids."""
    return f"bootstrap-token-rotation/{cluster}"


@workflow.defn(name="BootstrapTokenRotation")
class BootstrapTokenRotationWorkflow:
    @workflow.run
    async def run(self, request: BootstrapTokenRotationInput) -> BootstrapTokenRotationResult:
        token, deleted = await self._create(request)
        await self._keep_replaced(request, token)
        stale = await self._delete_stale(request)
        return BootstrapTokenRotationResult(token=token, deleted=[*deleted, *stale.deleted])

    async def _create(self, request: BootstrapTokenRotationInput) -> tuple[TokenRecord, list[str]]:
        """The token this rotation created (or an earlier attempt did), and the stale ones deleted on the way."""
        lifetime = token_lifetime(
            timedelta(seconds=request.period_seconds), timedelta(seconds=request.grace_seconds)
        )
        rotation = RotateInput(
            cluster=request.cluster,
            rotation=workflow.info().run_id,
            lifetime_seconds=lifetime.total_seconds(),
            grace_seconds=request.grace_seconds,
        )
        deleted: list[str] = []
        while True:
            workflow.set_current_details("creating the next bootstrap token")
            result: RotateResult = await workflow.execute_activity(
                ROTATE_BOOTSTRAP_TOKEN,
                rotation,
                result_type=RotateResult,
                start_to_close_timeout=timedelta(seconds=request.activity_timeout_seconds),
                retry_policy=RETRY,
                summary="delete stale bootstrap tokens, create the next",
            )
            deleted += result.deleted
            if result.token is not None:
                token = result.token
                log("rotated bootstrap token", token=token.token_id, generation=token.generation)
                return token, deleted
            assert result.wait_seconds is not None
            workflow.set_current_details(result.reason)
            await workflow.sleep(max(result.wait_seconds, 1.0), summary=result.reason)

    async def _keep_replaced(self, request: BootstrapTokenRotationInput, token: TokenRecord) -> None:
        workflow.set_current_details(
            f"new nodes join with {token.secret} (generation {token.generation}); the tokens it replaced stay "
            f"{request.grace_seconds:g} s for nodes still joining with them"
        )
        await workflow.sleep(
            timedelta(seconds=request.grace_seconds),
            summary="the grace for nodes joining with a replaced token",
        )

    async def _delete_stale(self, request: BootstrapTokenRotationInput) -> DeleteStaleResult:
        result: DeleteStaleResult = await workflow.execute_activity(
            DELETE_STALE_BOOTSTRAP_TOKENS,
            DeleteStaleInput(cluster=request.cluster, grace_seconds=request.grace_seconds),
            result_type=DeleteStaleResult,
            start_to_close_timeout=timedelta(seconds=request.activity_timeout_seconds),
            retry_policy=RETRY,
            summary="delete the bootstrap tokens no joining node can use",
        )
        newest = result.newest.secret if result.newest else "none"
        workflow.set_current_details(f"deleted {', '.join(result.deleted) or 'nothing'}; newest: {newest}")
        return result
