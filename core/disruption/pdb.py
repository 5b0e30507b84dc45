"""PodDisruptionBudgets as a disruption plan sees them: how many more evictions each allows.

Kubernetes keeps `disruptionsAllowed` in each PDB's status; from a snapshot we compute it the same way:
healthy selected pods minus the pods that must stay (minAvailable), or the unavailable pods a budget
tolerates minus those already unavailable (maxUnavailable), percentages of the selected pods rounded up.
Karpenter refuses a node when an evictable pod on it is covered by a PDB that allows no eviction, or by
more than one PDB (the eviction API refuses those pods). As a plan moves pods, their PDBs allow fewer.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from core.api.kube import (
    Pod,
    PodDisruptionBudget,
    UnhealthyPodEvictionPolicy,
    owner_kind,
    pod_key,
    selects,
)


def is_active(pod: Pod) -> bool:
    """Whether the pod runs or will run: not finished and not being deleted."""
    return pod.status.phase not in ("Succeeded", "Failed") and pod.metadata.deletion_timestamp is None


def is_evictable(pod: Pod) -> bool:
    """Whether draining the node evicts the pod: active and not a static (mirror) pod."""
    return is_active(pod) and owner_kind(pod) != "Node"


def is_healthy(pod: Pod) -> bool:
    """Whether the pod counts as healthy for its PDB: Ready, or, without conditions, bound and running."""
    for condition in pod.status.conditions:
        if condition.type == "Ready":
            return condition.status == "True"
    return bool(pod.spec.node_name) and pod.status.phase in (None, "Running")


def _scaled(value: int | str, total: int) -> int:
    if isinstance(value, str):
        return -(-int(value[:-1]) * total // 100)
    return value


@dataclass(slots=True)
class _Budget:
    key: str
    allowed: int
    always_allow_unhealthy: bool
    fully_blocking: bool
    """maxUnavailable 0 (or 0%) or minAvailable 100%: no eviction is ever allowed, whatever the pods do."""


def _fully_blocking(pdb: PodDisruptionBudget) -> bool:
    spec = pdb.spec
    return spec.max_unavailable in (0, "0%") or spec.min_available == "100%"


class PdbLimits:
    """The evictions every PodDisruptionBudget still allows, given the pods of the cluster."""

    def __init__(self, pdbs: Sequence[PodDisruptionBudget], pods: Iterable[Pod]) -> None:
        self._by_namespace: dict[str, list[tuple[PodDisruptionBudget, _Budget]]] = {}
        self._by_key: dict[str, _Budget] = {}
        for pdb in pdbs:
            namespace = pdb.metadata.namespace or "default"
            budget = _Budget(
                key=f"{namespace}/{pdb.metadata.name}",
                allowed=0,
                always_allow_unhealthy=(
                    pdb.spec.unhealthy_pod_eviction_policy is UnhealthyPodEvictionPolicy.ALWAYS_ALLOW
                ),
                fully_blocking=_fully_blocking(pdb),
            )
            self._by_namespace.setdefault(namespace, []).append((pdb, budget))
            self._by_key[budget.key] = budget
        self._matches: dict[tuple[str, frozenset[tuple[str, str]]], list[_Budget]] = {}
        selected: dict[str, int] = {}
        healthy: dict[str, int] = {}
        for pod in pods:
            if not is_active(pod):
                continue
            for budget in self._budgets_of(pod):
                selected[budget.key] = selected.get(budget.key, 0) + 1
                if is_healthy(pod):
                    healthy[budget.key] = healthy.get(budget.key, 0) + 1
        for entries in self._by_namespace.values():
            for pdb, budget in entries:
                budget.allowed = _allowed(pdb, selected.get(budget.key, 0), healthy.get(budget.key, 0))

    def _budgets_of(self, pod: Pod) -> list[_Budget]:
        """The PDBs selecting the pod (pods with equal namespace and labels share the answer)."""
        namespace = pod.metadata.namespace or "default"
        signature = (namespace, frozenset(pod.metadata.labels.items()))
        found = self._matches.get(signature)
        if found is None:
            found = [
                budget
                for pdb, budget in self._by_namespace.get(namespace, ())
                if selects(pdb.spec.selector, pod.metadata.labels)
            ]
            self._matches[signature] = found
        return found

    def allowed(self, key: str) -> int | None:
        """The evictions the PDB `namespace/name` still allows (None for an unknown PDB)."""
        budget = self._by_key.get(key)
        return None if budget is None else budget.allowed

    def limits(self, pod: Pod) -> list[tuple[str, int]]:
        """The PDBs that would count the pod's eviction, each with the evictions it still allows."""
        if not is_evictable(pod):
            return []
        return [(budget.key, budget.allowed) for budget in self._budgets_of(pod)]

    def blocker(self, pods: Iterable[Pod]) -> str | None:
        """Why evicting these pods is refused now, or None when every PDB allows it."""
        for pod in pods:
            refused = self._refusal(pod, forever=False)
            if refused is not None:
                return refused
        return None

    def fully_blocks(self, pod: Pod) -> str | None:
        """Why no eviction of the pod will ever be allowed (a PDB with maxUnavailable 0 or minAvailable
        100%, or more than one PDB), or None. Karpenter makes no room elsewhere for such a pod."""
        return self._refusal(pod, forever=True)

    def _refusal(self, pod: Pod, forever: bool) -> str | None:
        """Why the pod's PDBs refuse its eviction now (or, with `forever`, whatever happens), or None."""
        if not is_evictable(pod):
            return None
        budgets = self._budgets_of(pod)
        if not budgets:
            return None
        if len(budgets) > 1:
            names = ", ".join(budget.key for budget in budgets)
            return f"pod {pod_key(pod)} is selected by more than one pdb ({names})"
        budget = budgets[0]
        if budget.always_allow_unhealthy and not is_healthy(pod):
            return None
        if forever:
            return f"pdb {budget.key} never allows an eviction" if budget.fully_blocking else None
        return f"pdb {budget.key} allows 0 evictions" if budget.allowed <= 0 else None

    def evict(self, pods: Iterable[Pod]) -> None:
        """Count the evictions of these pods against their PDBs."""
        for pod in pods:
            if is_evictable(pod):
                for budget in self._budgets_of(pod):
                    budget.allowed = max(0, budget.allowed - 1)


def _allowed(pdb: PodDisruptionBudget, selected: int, healthy: int) -> int:
    spec = pdb.spec
    if spec.max_unavailable is not None:
        tolerated = _scaled(spec.max_unavailable, selected)
        return max(0, tolerated - (selected - healthy))
    if spec.min_available is not None:
        return max(0, healthy - _scaled(spec.min_available, selected))
    return healthy
