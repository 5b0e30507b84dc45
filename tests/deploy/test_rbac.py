"""The chart's RBAC is least privilege, and enough: what it grants is an explicit list kept here, and the real
worker and controller, running as the chart's ServiceAccount against a real API server, provision, consolidate
and terminate nodes without being denied anything.

The RBAC objects are rendered by `helm template --show-only` from the chart and applied with kubectl, as `helm
install` would. The cluster tests share one control plane of this module, whose API server writes an audit log
of every request made by a ServiceAccount outside kube-system (kube-controller-manager's controllers are
ServiceAccounts there): that log is the record of what nodewright asked for and what it was refused. Each test
installs a release of its own (its own namespace, ServiceAccount and cluster-wide names) and removes it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import pytest
import yaml
from cryptography import x509
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from core.api.nodeclaim import NodeClaimConditionType
from core.bootstrap_tokens import NAMESPACE as TOKEN_NAMESPACE
from core.bootstrap_tokens import ROTATED_TOKEN_IDS, secret_name
from simulator.aks import AksSettings
from tests.cluster import fresh_aks
from tests.workflows.conftest import deployment, pinned
from workers.azure import emulator_environment
from workers.controlplane.build import KUBERNETES_VERSION, ensure_binaries
from workers.controlplane.run import BOOTSTRAP_NAMESPACE, ControlPlane, start_control_plane
from workers.settings import env_var
from workers.simulated_aks import SimulatedAks
from workflows.bootstrap_tokens import bootstrap_token_rotation_id
from workflows.disruption import disruption_id
from workflows.maintenance import catalog_refresh_id, garbage_collection_id, nodeclass_status_id
from workflows.provisioner import nodeclaim_id, provisioner_id

REPOSITORY = Path(__file__).parents[2]
CHART = REPOSITORY / "deploy" / "charts" / "nodewright"
TEMPLATES = (
    "clusterrole.yaml",
    "clusterrolebinding.yaml",
    "role.yaml",
    "rolebinding.yaml",
    "aggregate-clusterrole.yaml",
)
NODEWRIGHT = Path(sys.executable).parent / "nodewright"
LEASE = "nodewright-leader-election"
"""The chart's default `controller.leaderElection.name`."""
TOKEN_SECRET = f"{BOOTSTRAP_NAMESPACE}/bootstrap-token-abcdef"
SETTINGS = (
    "settings.clusterName=prod",
    "settings.clusterEndpoint=prod-dns-12345678.hcp.eastus.azmk8s.io",
    "settings.azure.subscriptionId=00000000-0000-0000-0000-000000000000",
    "settings.azure.nodeResourceGroup=MC_prod_prod_eastus",
    "settings.azure.location=eastus",
    "settings.azure.subnetId=/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/prod/providers/"
    "Microsoft.Network/virtualNetworks/prod/subnets/nodes",
    "settings.azure.kubernetesVersion=1.33.5",
    "settings.azure.nodeImageVersion=202512.18.0",
    "settings.azure.sshPublicKey=ssh-ed25519 AAAA nodewright",
)
"""What an operator sets for a release, so that every template of the chart renders."""

T = TypeVar("T")


# --- what the chart grants ---------------------------------------------------------------------------------


CLUSTER = "*"
"""The scope of a ClusterRole bound cluster-wide."""


class Permission(NamedTuple):
    """One verb on one resource (`pods/eviction` for a subresource), in a namespace or cluster-wide, on objects of
    one name or ("") any."""

    scope: str
    group: str
    resource: str
    verb: str
    name: str = ""

    def allows(self, request: Permission) -> bool:
        return (
            self.scope in (CLUSTER, request.scope)
            and (self.group, self.resource, self.verb) == (request.group, request.resource, request.verb)
            and self.name in ("", request.name)
        )


def expected_permissions(
    namespace: str, token_secret: str = TOKEN_SECRET, rotation: bool = True
) -> set[Permission]:
    """Everything nodewright's ServiceAccount may do, rule by rule; a new permission is a change here.

    Cluster-wide: read what the controller watches and the planners snapshot; write NodeClaims (their status
    through the subresource), NodePool and AKSNodeClass status (resources, nodes, conditions, `localDNSState`),
    NodePool and AKSNodeClass annotations (the drift hashes), Nodes (registration, taints, deletion), evictions
    and, past a NodeClaim's terminationGracePeriod, pod deletions; create events. Namespaced: the configured
    bootstrap token Secret; with rotation, the rotated tokens' Secrets in kube-system by name, and creating
    Secrets there (which RBAC cannot limit to a name); and the controller's own Lease in the release namespace."""
    token_namespace, token_name = token_secret.split("/")
    rotated = [
        (TOKEN_NAMESPACE, "", "secrets", "get delete", secret_name(token_id))
        for token_id in ROTATED_TOKEN_IDS
    ]
    rows = [
        (CLUSTER, "karpenter.sh", "nodepools", "get list watch patch", ""),
        (CLUSTER, "karpenter.sh", "nodeclaims", "get list watch create patch delete", ""),
        (CLUSTER, "karpenter.sh", "nodeclaims/status", "update", ""),
        (CLUSTER, "karpenter.sh", "nodepools/status", "patch", ""),
        (CLUSTER, "karpenter.azure.com", "aksnodeclasses", "get list watch patch", ""),
        (CLUSTER, "karpenter.azure.com", "aksnodeclasses/status", "patch", ""),
        (CLUSTER, "karpenter.sh", "nodeoverlays", "get list watch", ""),
        (CLUSTER, "karpenter.sh", "nodeoverlays/status", "patch", ""),
        (CLUSTER, "nodewright.io", "capacitywindows", "get list", ""),
        (CLUSTER, "nodewright.io", "capacitywindows/status", "patch", ""),
        (CLUSTER, "autoscaling.x-k8s.io", "capacitybuffers", "get patch", ""),
        (CLUSTER, "autoscaling.x-k8s.io", "capacitybuffers", "get list watch", ""),
        (CLUSTER, "autoscaling.x-k8s.io", "capacitybuffers/status", "patch", ""),
        (CLUSTER, "", "podtemplates", "get list watch", ""),
        (CLUSTER, "apps", "deployments", "get list watch", ""),
        (CLUSTER, "apps", "statefulsets", "get list watch", ""),
        (CLUSTER, "apps", "replicasets", "get list watch", ""),
        (CLUSTER, "", "nodes", "get list watch patch delete", ""),
        (CLUSTER, "", "pods", "list watch delete", ""),
        (CLUSTER, "", "pods/eviction", "create", ""),
        (CLUSTER, "apps", "daemonsets", "list watch", ""),
        (CLUSTER, "policy", "poddisruptionbudgets", "list watch", ""),
        (CLUSTER, "storage.k8s.io", "volumeattachments", "list", ""),
        (CLUSTER, "", "persistentvolumeclaims", "get", ""),
        (CLUSTER, "events.k8s.io", "events", "create patch", ""),
        (token_namespace, "", "secrets", "get", token_name),
        (namespace, "coordination.k8s.io", "leases", "get update", LEASE),
        (namespace, "coordination.k8s.io", "leases", "create", ""),
        *((*rotated, (TOKEN_NAMESPACE, "", "secrets", "create", "")) if rotation else ()),
    ]
    return {
        Permission(scope, group, resource, verb, name)
        for scope, group, resource, verbs, name in rows
        for verb in verbs.split()
    }


NOT_EXERCISED = {
    (
        "",
        "secrets",
        "delete",
    ): "only once a replaced bootstrap token's grace (launch timeout + registration TTL) has passed",
    ("", "pods", "delete"): "only once a NodeClaim's terminationGracePeriod has run out (a forced drain)",
    ("events.k8s.io", "events", "patch"): "an identical event repeated after its dedupe window",
    (
        "",
        "persistentvolumeclaims",
        "get",
    ): "only when a terminating node has VolumeAttachments and pods that stay",
    ("karpenter.sh", "nodeoverlays", "get"): "only with the NodeOverlay feature gate on",
    ("karpenter.sh", "nodeoverlays", "list"): "only with the NodeOverlay feature gate on",
    ("karpenter.sh", "nodeoverlays", "watch"): "only with the NodeOverlay feature gate on",
    ("karpenter.sh", "nodeoverlays/status", "patch"): "only with the NodeOverlay feature gate on",
    ("nodewright.io", "capacitywindows", "get"): "only when a CapacityWindow exists",
    ("nodewright.io", "capacitywindows/status", "patch"): "only when a CapacityWindow exists",
    ("autoscaling.x-k8s.io", "capacitybuffers", "get"): "only for a CapacityWindow on a CapacityBuffer",
    ("autoscaling.x-k8s.io", "capacitybuffers", "patch"): "only for a CapacityWindow on a CapacityBuffer",
    **{
        (group, resource, verb): "only with the CapacityBuffer feature gate on"
        for group, resource, verbs in (
            ("autoscaling.x-k8s.io", "capacitybuffers", "get watch"),
            ("autoscaling.x-k8s.io", "capacitybuffers/status", "patch"),
            ("", "podtemplates", "get list watch"),
            ("apps", "deployments", "get list watch"),
            ("apps", "statefulsets", "get list watch"),
            ("apps", "replicasets", "get list watch"),
        )
        for verb in verbs.split()
    },
}
"""Permissions the end-to-end scenario may leave unused, and when they are used; every other one it must use."""

ADMIN_AGGREGATE = {
    ("karpenter.sh", "nodepools"): "get list watch create update patch delete",
    ("karpenter.azure.com", "aksnodeclasses"): "get list watch create update patch delete",
    ("karpenter.sh", "nodeclaims"): "get list watch delete",
    ("nodewright.io", "capacitywindows"): "get list watch create update patch delete",
}
"""What the built-in `admin` ClusterRole gains: manage NodePools and AKSNodeClasses, see and delete NodeClaims."""


def helm_template(
    release: str, namespace: str, *values: str, templates: Iterable[str] = TEMPLATES
) -> subprocess.CompletedProcess[str]:
    """`helm template --show-only` of the chart's RBAC templates for a release, with `--set` values."""
    command = [str(ensure_binaries().path("helm")), "template", release, str(CHART), "--namespace", namespace]
    command += ["--kube-version", KUBERNETES_VERSION]
    for value in (*SETTINGS, *values):
        command += ["--set", value]
    for template in templates:
        command += ["--show-only", f"templates/{template}"]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def render(release: str, namespace: str, *values: str) -> list[dict[str, Any]]:
    """The chart's RBAC objects for a release, as `helm template --show-only` prints them."""
    done = helm_template(release, namespace, *values)
    assert done.returncode == 0, done.stderr
    return [document for document in yaml.safe_load_all(done.stdout) if document]


def granted(documents: Iterable[dict[str, Any]], service_account: tuple[str, str]) -> set[Permission]:
    """What the bindings among `documents` give the ServiceAccount (namespace, name), expanded verb by verb."""
    documents = list(documents)
    roles = {
        (document["kind"], document["metadata"].get("namespace", ""), document["metadata"]["name"]): document
        for document in documents
        if document["kind"] in ("Role", "ClusterRole")
    }
    subject = {"kind": "ServiceAccount", "namespace": service_account[0], "name": service_account[1]}
    permissions: set[Permission] = set()
    for binding in documents:
        if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        assert binding["subjects"] == [subject], f"{binding['metadata']['name']} binds {binding['subjects']}"
        scope = binding["metadata"].get("namespace", CLUSTER)
        ref = binding["roleRef"]
        role_namespace = binding["metadata"]["namespace"] if ref["kind"] == "Role" else ""
        role = roles[ref["kind"], role_namespace, ref["name"]]
        permissions |= expand(role["rules"], scope)
    return permissions


def expand(rules: Iterable[dict[str, Any]], scope: str) -> set[Permission]:
    return {
        Permission(scope, group, resource, verb, name)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
        for name in rule.get("resourceNames") or [""]
    }


def by_kind(documents: Iterable[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [document for document in documents if document["kind"] == kind]


def test_the_service_account_gets_exactly_the_listed_permissions() -> None:
    documents = render("rbac", "nodewright", f"settings.bootstrapTokenSecret={TOKEN_SECRET}")
    actual = granted(documents, ("nodewright", "rbac-nodewright"))
    expected = expected_permissions("nodewright")
    assert actual == expected, (
        f"granted but not listed: {sorted(actual - expected)}; listed but not granted: {sorted(expected - actual)}"
    )
    [aggregate] = [
        role for role in by_kind(documents, "ClusterRole") if role["metadata"]["name"].endswith("-admin")
    ]
    assert aggregate["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-admin"] == "true"
    assert expand(aggregate["rules"], CLUSTER) == {
        Permission(CLUSTER, group, resource, verb)
        for (group, resource), verbs in ADMIN_AGGREGATE.items()
        for verb in verbs.split()
    }
    assert not any(
        binding["roleRef"]["name"] == aggregate["metadata"]["name"]
        for binding in by_kind(documents, "ClusterRoleBinding")
    ), "nodewright's ServiceAccount must not get what admins get"


def test_bindings_follow_the_release_and_the_service_account_name() -> None:
    documents = render(
        "prod",
        "autoscaling",
        "settings.bootstrapTokenSecret=tokens/bootstrap-token-0a1b2c",
        "serviceAccount.name=nodes",
        "controller.leaderElection.name=nodes-leader",
    )
    permissions = granted(documents, ("autoscaling", "nodes"))
    assert Permission("tokens", "", "secrets", "get", "bootstrap-token-0a1b2c") in permissions
    assert Permission("autoscaling", "coordination.k8s.io", "leases", "update", "nodes-leader") in permissions
    assert {document["metadata"]["name"] for document in by_kind(documents, "ClusterRole")} == {
        "prod-nodewright",
        "prod-nodewright-admin",
    }


def test_additional_cluster_role_rules_are_appended() -> None:
    documents = render(
        "rbac",
        "nodewright",
        f"settings.bootstrapTokenSecret={TOKEN_SECRET}",
        "additionalClusterRoleRules[0].apiGroups[0]=storage.k8s.io",
        "additionalClusterRoleRules[0].resources[0]=csinodes",
        "additionalClusterRoleRules[0].verbs[0]=get",
    )
    extra = granted(documents, ("nodewright", "rbac-nodewright")) - expected_permissions("nodewright")
    assert extra == {Permission(CLUSTER, "storage.k8s.io", "csinodes", "get")}


def test_without_leader_election_there_is_no_lease_role() -> None:
    documents = render(
        "rbac",
        "nodewright",
        f"settings.bootstrapTokenSecret={TOKEN_SECRET}",
        "controller.leaderElection.enabled=false",
        "controller.replicas=1",
    )
    permissions = granted(documents, ("nodewright", "rbac-nodewright"))
    assert permissions == {p for p in expected_permissions("nodewright") if p.resource != "leases"}


def test_without_token_rotation_there_is_no_access_to_kube_system_but_the_configured_token() -> None:
    documents = render(
        "rbac",
        "nodewright",
        f"settings.bootstrapTokenSecret={TOKEN_SECRET}",
        "settings.bootstrapTokenRotationSeconds=0",
    )
    permissions = granted(documents, ("nodewright", "rbac-nodewright"))
    assert permissions == expected_permissions("nodewright", rotation=False)


@pytest.mark.parametrize("template", TEMPLATES)
def test_rbac_create_false_renders_none_of_it(template: str) -> None:
    values = ("rbac.create=false", f"settings.bootstrapTokenSecret={TOKEN_SECRET}")
    done = helm_template("rbac", "nodewright", *values, templates=[template])
    # helm's way of saying that the template rendered to nothing.
    assert done.returncode == 1 and f"could not find template templates/{template}" in done.stderr, done


# --- a control plane that writes an audit log -------------------------------------------------------------


AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "None", "userGroups": ["system:serviceaccounts:kube-system"]},
        {"level": "Metadata", "userGroups": ["system:serviceaccounts"]},
        {"level": "None"},
    ],
}
"""Every request of a ServiceAccount outside kube-system (where kube-controller-manager's controllers are)."""


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    plane = start_control_plane(tmp_path_factory.mktemp("rbac-control-plane"), audit_policy=AUDIT_POLICY)
    yield plane
    plane.stop()


@dataclass(frozen=True)
class Release:
    """The chart's RBAC installed for a release of its own, and the ServiceAccount it binds."""

    name: str
    namespace: str
    documents: list[dict[str, Any]]

    @property
    def service_account(self) -> str:
        return f"{self.name}-nodewright"

    @property
    def user(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.service_account}"


@contextlib.contextmanager
def installed(plane: ControlPlane) -> Iterator[Release]:
    """A namespace and ServiceAccount (the chart's serviceaccount.yaml does not exist yet), and the chart's RBAC
    for them, applied with kubectl; all of it deleted afterwards."""
    suffix = uuid.uuid4().hex[:6]
    name, namespace = f"rbac-{suffix}", f"nodewright-{suffix}"
    documents = render(name, namespace, f"settings.bootstrapTokenSecret={plane.bootstrap_token_secret}")
    release = Release(name, namespace, documents)
    plane.kubectl("create", "namespace", namespace)
    try:
        plane.kubectl("create", "serviceaccount", release.service_account, "-n", namespace)
        plane.apply(documents)
        yield release
    finally:
        text = yaml.safe_dump_all(documents, sort_keys=False)
        plane.kubectl("delete", "--ignore-not-found", "--wait=false", "-f", "-", input=text, check=False)
        plane.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def can_i(plane: ControlPlane, user: str, check: str) -> bool:
    """`kubectl auth can-i <check> --as=<user>`: yes or no."""
    done = plane.kubectl("auth", "can-i", *check.split(), f"--as={user}", check=False)
    answer = done.stdout.strip()
    assert answer in ("yes", "no"), f"kubectl auth can-i {check}: {done.stderr.strip() or answer}"
    return answer == "yes"


def test_the_service_account_may_do_what_it_needs_and_nothing_else(plane: ControlPlane) -> None:
    with installed(plane) as release:
        token_namespace, token = plane.bootstrap_token_secret.split("/")
        ns = release.namespace
        may = [
            "watch pods --all-namespaces",
            "list nodes",
            "patch nodes",
            "delete nodes",
            "create pods --subresource=eviction -n default",
            "delete pods -n default",
            "create nodeclaims.karpenter.sh",
            "update nodeclaims.karpenter.sh --subresource=status",
            "patch nodepools.karpenter.sh --subresource=status",
            "patch aksnodeclasses.karpenter.azure.com --subresource=status",
            "get aksnodeclasses.karpenter.azure.com",
            "patch nodepools.karpenter.sh",
            "patch aksnodeclasses.karpenter.azure.com",
            "list nodeoverlays.karpenter.sh",
            "patch nodeoverlays.karpenter.sh --subresource=status",
            "list capacitywindows.nodewright.io",
            "patch capacitywindows.nodewright.io --subresource=status",
            "watch capacitybuffers.autoscaling.x-k8s.io --all-namespaces",
            "patch capacitybuffers.autoscaling.x-k8s.io --subresource=status -n default",
            "get podtemplates -n default",
            "watch deployments.apps --all-namespaces",
            "list poddisruptionbudgets.policy --all-namespaces",
            "watch poddisruptionbudgets.policy --all-namespaces",
            "watch daemonsets.apps --all-namespaces",
            "create events.events.k8s.io -n default",
            "patch events.events.k8s.io -n default",
            f"get secrets/{token} -n {token_namespace}",
            "get secrets/bootstrap-token-nwrot0 -n kube-system",
            "delete secrets/bootstrap-token-nwrot2 -n kube-system",
            "create secrets -n kube-system",
            f"get leases.coordination.k8s.io/{LEASE} -n {ns}",
            f"update leases.coordination.k8s.io/{LEASE} -n {ns}",
            f"create leases.coordination.k8s.io -n {ns}",
        ]
        may_not = [
            "list secrets --all-namespaces",
            f"list secrets -n {token_namespace}",
            f"get secrets/bootstrap-token-zzzzzz -n {token_namespace}",
            f"watch secrets/{token} -n {token_namespace}",
            f"get secrets/{token} -n default",
            f"delete secrets/{token} -n {token_namespace}",
            "update secrets/bootstrap-token-nwrot1 -n kube-system",
            "watch secrets/bootstrap-token-nwrot1 -n kube-system",
            "get secrets/bootstrap-token-nwrot3 -n kube-system",
            "create secrets -n default",
            "get configmaps -n kube-system",
            "delete namespaces",
            "create pods -n default",
            "patch pods -n default",
            "create nodes",
            "update nodes",
            "create nodepools.karpenter.sh",
            "update nodepools.karpenter.sh --subresource=status",
            "update aksnodeclasses.karpenter.azure.com",
            "patch nodeoverlays.karpenter.sh",
            "patch capacitywindows.nodewright.io",
            "patch deployments.apps -n default",
            "patch nodeclaims.karpenter.sh --subresource=status",
            "delete daemonsets.apps -n default",
            "create events -n default",
            f"update leases.coordination.k8s.io/another-lease -n {ns}",
            f"patch leases.coordination.k8s.io/another-lease -n {ns}",
            f"patch leases.coordination.k8s.io/{LEASE} -n {ns}",
            f"delete leases.coordination.k8s.io/{LEASE} -n {ns}",
            f"get leases.coordination.k8s.io/{LEASE} -n kube-system",
            "create clusterrolebindings.rbac.authorization.k8s.io",
            "impersonate serviceaccounts -n kube-system",
        ]
        answers = {check: can_i(plane, release.user, check) for check in [*may, *may_not]}
        assert [check for check in may if not answers[check]] == [], "denied what nodewright needs"
        assert [check for check in may_not if answers[check]] == [], "allowed more than nodewright needs"


def test_cluster_admins_manage_nodepools_and_see_nodeclaims(plane: ControlPlane) -> None:
    """The aggregate ClusterRole reaches whoever is bound to the built-in `admin` (kube-controller-manager's
    aggregation controller copies its rules in)."""
    user = f"alice-{uuid.uuid4().hex[:6]}"
    binding: dict[str, object] = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": user},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }
    with installed(plane):
        plane.apply([binding])
        try:
            deadline = time.monotonic() + 30
            while not can_i(plane, user, "create nodepools.karpenter.sh"):
                assert time.monotonic() < deadline, "the admin ClusterRole never gained nodewright's rules"
                time.sleep(0.2)
            assert can_i(plane, user, "patch aksnodeclasses.karpenter.azure.com")
            assert can_i(plane, user, "delete nodeclaims.karpenter.sh")
            assert can_i(plane, user, "list nodeclaims.karpenter.sh")
            assert not can_i(plane, user, "create nodeclaims.karpenter.sh")
            assert not can_i(plane, user, "update nodeclaims.karpenter.sh --subresource=status")
        finally:
            plane.kubectl("delete", "clusterrolebinding", user, "--ignore-not-found", check=False)


# --- the worker and the controller as the ServiceAccount ---------------------------------------------------


STEP_TIMEOUT = 60.0
"""Seconds a step may take (each needs a few; the first also waits for both processes to start)."""
APP = "inflate"


def service_account_kubeconfig(plane: ControlPlane, release: Release, directory: Path) -> Path:
    """A kubeconfig with a token of the release's ServiceAccount (TokenRequest) and the cluster CA."""
    token = plane.kubectl(
        "create", "token", release.service_account, "-n", release.namespace, "--duration", "1h"
    ).stdout.strip()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "cluster",
                "cluster": {
                    "server": plane.server,
                    "certificate-authority-data": base64.b64encode(plane.ca_file.read_bytes()).decode(),
                },
            }
        ],
        "users": [{"name": release.service_account, "user": {"token": token}}],
        "contexts": [
            {"name": "nodewright", "context": {"cluster": "cluster", "user": release.service_account}}
        ],
        "current-context": "nodewright",
    }
    path = directory / "service-account.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


@dataclass
class Processes:
    """`nodewright worker` and `nodewright controller`, each logging to a file of its own."""

    running: dict[str, subprocess.Popen[bytes]]
    logs: Path
    explain: Callable[[], str]
    """More to say when a step fails (what the API server refused)."""

    def tail(self, lines: int = 30) -> str:
        parts = [self.explain()]
        for name in self.running:
            text = (self.logs / f"{name}.log").read_text(errors="replace")
            parts.append(f"--- {name} log (end):\n" + "\n".join(text.splitlines()[-lines:]))
        return "\n".join(parts)

    async def until(self, what: str, check: Callable[[], Awaitable[T | None]]) -> T:
        """The first truthy result of `check`; fails when a process exits or after STEP_TIMEOUT."""
        deadline = time.monotonic() + STEP_TIMEOUT
        while True:
            for name, process in self.running.items():
                if process.poll() is not None:
                    raise AssertionError(f"{name} exited with code {process.returncode}\n{self.tail()}")
            if result := await check():
                return result
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not within {STEP_TIMEOUT:g} s\n{self.tail()}")
            await asyncio.sleep(0.2)


@contextlib.asynccontextmanager
async def nodewright(env: dict[str, str], logs: Path, explain: Callable[[], str]) -> AsyncIterator[Processes]:
    assert NODEWRIGHT.exists(), f"{NODEWRIGHT} is missing: install the project (`make test` does)"
    running: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for name in ("worker", "controller"):
            with (logs / f"{name}.log").open("ab") as log:
                running[name] = subprocess.Popen(
                    [str(NODEWRIGHT), name],
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
        yield Processes(running, logs, explain)
    finally:
        for process in running.values():
            process.terminate()
        for process in running.values():
            try:
                await asyncio.to_thread(process.wait, 10)
            except subprocess.TimeoutExpired:
                process.kill()
                await asyncio.to_thread(process.wait)


def process_environment(
    aks: SimulatedAks, kubeconfig: Path, temporal: WorkflowEnvironment, task_queue: str, namespace: str
) -> dict[str, str]:
    """What a Deployment of the chart would set, pointed at the emulated Azure, with short periods; the only
    Kubernetes credentials are the ServiceAccount's, and the controller's Lease is in the release's namespace
    (as `POD_NAMESPACE` puts it in a pod)."""
    inherited = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("NODEWRIGHT_") and key != "KUBECONFIG"
    }
    return {
        **inherited,
        **emulator_environment(aks.emulated.info),
        env_var("kubeconfig"): str(kubeconfig),
        env_var("temporal_address"): temporal.client.service_client.config.target_host,
        env_var("task_queue"): task_queue,
        env_var("metrics_port"): "0",
        env_var("health_probe_port"): "0",
        "POD_NAMESPACE": namespace,
        env_var("batch_idle_seconds"): "0.5",
        env_var("batch_max_seconds"): "2",
        env_var("disruption_poll_seconds"): "1",
        env_var("disruption_validation_seconds"): "1",
        env_var("garbage_collection_seconds"): "5",
        # The first rotation a moment after the worker starts: the nodes launched later join with its token.
        env_var("bootstrap_token_rotation_seconds"): "2",
    }


def nodepool(consolidate_after: str) -> list[dict[str, Any]]:
    """The example NodePool, consolidating after `consolidate_after` ("Never": not at all), and its AKSNodeClass."""
    documents = list(yaml.safe_load_all((REPOSITORY / "deploy/examples/nodepool.yaml").read_text()))
    for document in documents:
        if document["kind"] == "NodePool":
            document["spec"]["disruption"]["consolidateAfter"] = consolidate_after
    return documents


class Request(NamedTuple):
    """One API request as the audit log records it."""

    verb: str
    group: str
    resource: str
    namespace: str
    name: str
    code: int
    decision: str
    """The authorizer's: allow or forbid (empty when the request was not authenticated)."""

    @property
    def denied(self) -> bool:
        return self.decision == "forbid" or self.code in (401, 403)

    @property
    def permission(self) -> Permission:
        return Permission(self.namespace or CLUSTER, self.group, self.resource, self.verb, self.name)


def audited_requests(plane: ControlPlane, user: str) -> tuple[list[Request], list[Request]]:
    """The user's resource requests, and its requests of non-resource URLs (such as /version, in `resource`)."""
    final: dict[str, dict[str, Any]] = {}
    for line in plane.audit_log.read_text().splitlines():
        event = json.loads(line)
        if event["user"]["username"] == user:
            final[event["auditID"]] = event  # a watch is logged when it starts and when it ends: keep the end
    requests: list[Request] = []
    other: list[Request] = []
    for event in final.values():
        code = int((event.get("responseStatus") or {}).get("code") or 0)
        decision = str((event.get("annotations") or {}).get("authorization.k8s.io/decision") or "")
        ref = event.get("objectRef")
        if ref is None:
            other.append(Request(event["verb"], "", event["requestURI"], "", "", code, decision))
            continue
        resource = ref.get("resource", "") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        requests.append(
            Request(
                event["verb"],
                ref.get("apiGroup", ""),
                resource,
                ref.get("namespace", ""),
                ref.get("name", ""),
                code,
                decision,
            )
        )
    return requests, other


def summary(requests: Iterable[Request]) -> str:
    """Requests counted by verb, resource, namespace and name (names of the nodewright-made objects elided)."""
    counts: dict[tuple[str, ...], int] = {}
    for request in requests:
        name = request.name if request.resource == "secrets" else ("<name>" if request.name else "")
        key = (
            request.verb,
            f"{request.resource}.{request.group}".rstrip("."),
            request.namespace,
            name,
            str(request.code),
        )
        counts[key] = counts.get(key, 0) + 1
    return "\n".join(
        f"{count:5d}  {' '.join(part for part in key if part)}" for key, count in sorted(counts.items())
    )


async def forget(client: Client, cluster: str, nodeclaims: Iterable[str]) -> None:
    """Stop what the processes left on the shared dev server: schedules and workflows nobody will serve."""
    for schedule in (
        catalog_refresh_id(cluster),
        garbage_collection_id(cluster),
        nodeclass_status_id(cluster),
        bootstrap_token_rotation_id(cluster),
    ):
        with contextlib.suppress(Exception):
            handle = client.get_schedule_handle(schedule)
            for running in (await handle.describe()).info.running_actions:
                await client.get_workflow_handle(running.workflow_id).terminate("the test is over")
            await handle.delete()
    for workflow in (
        disruption_id(cluster),
        provisioner_id(cluster),
        *(nodeclaim_id(name) for name in nodeclaims),
    ):
        with contextlib.suppress(Exception):
            await client.get_workflow_handle(workflow).terminate("the test is over")


async def test_worker_and_controller_provision_consolidate_and_terminate_as_the_service_account(
    plane: ControlPlane, temporal_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    seen_claims: set[str] = set()
    with installed(plane) as release:
        kubeconfig = service_account_kubeconfig(plane, release, tmp_path)
        async with fresh_aks(plane, AksSettings.instant(seed=5)) as aks:
            cluster = aks.azure.settings.cluster_name
            env = process_environment(aks, kubeconfig, temporal_env, task_queue, release.namespace)
            try:
                async with nodewright(env, tmp_path, lambda: denied(plane, release.user)) as processes:
                    await run_scenario(plane, aks, processes, release.user, seen_claims)
            finally:
                await forget(temporal_env.client, cluster, seen_claims)
        requests, other = audited_requests(plane, release.user)

    record = f"requests of {release.user}:\n{summary([*requests, *other])}"
    print(f"\n{record}")
    assert [r for r in [*requests, *other] if r.denied] == [], f"the API server refused nodewright\n{record}"
    allowed = expected_permissions(release.namespace, plane.bootstrap_token_secret)
    unlisted = [r for r in requests if not any(p.allows(r.permission) for p in allowed)]
    assert unlisted == [], f"allowed by the server, yet by no listed permission: {unlisted}\n{record}"
    used = {(p.group, p.resource, p.verb) for p in allowed if any(p.allows(r.permission) for r in requests)}
    unused = {(p.group, p.resource, p.verb) for p in allowed} - used - NOT_EXERCISED.keys()
    assert unused == set(), f"granted, and used by none of the three scenarios: {unused}\n{record}"


def denied(plane: ControlPlane, user: str) -> str:
    """The user's requests the API server refused so far, for a failure message."""
    requests, other = audited_requests(plane, user)
    refused = summary(request for request in [*requests, *other] if request.denied)
    return f"requests the API server refused:\n{refused or 'none'}"


async def run_scenario(
    plane: ControlPlane, aks: SimulatedAks, processes: Processes, user: str, seen_claims: set[str]
) -> None:
    """Provision a node for three pods and a second one for a fourth (500m pods pinned to Standard_D2s_v5
    on-demand: three fit on one), scale to two (the ReplicaSet removes two of the three that share a node, so
    each node keeps one pod and consolidation drains one of them by eviction and deletes it), then delete the
    remaining Node as an admin (its NodeClaim drains and terminates it, and a new node takes the pods).
    Consolidation is on only while it is the step under test: a node initialized a moment before
    kube-scheduler binds its pods would be found empty."""
    kube = aks.kube

    async def running(count: int) -> list[str]:
        """The nodes the app's pods run on, once exactly `count` pods exist and all run."""
        pods = await kube.list_pods("default", label_selector=f"app={APP}")
        up = [pod for pod in pods if pod.spec.node_name and pod.status.phase == "Running"]
        return sorted({str(pod.spec.node_name) for pod in up}) if len(pods) == len(up) == count else []

    async def claims(count: int) -> dict[str, str]:
        """NodeClaim name -> Node, once exactly `count` exist, all Initialized, and as many Nodes."""
        found = await kube.list_nodeclaims()
        seen_claims.update(claim.name for claim in found)
        ready = {
            claim.name: str(claim.status.node_name)
            for claim in found
            if claim.is_true(NodeClaimConditionType.INITIALIZED)
        }
        nodes = await kube.list_nodes()
        return ready if len(found) == len(ready) == len(nodes) == count else {}

    def evictions() -> int:
        requests, _ = audited_requests(plane, user)
        return sum(1 for request in requests if request.resource == "pods/eviction" and request.code == 201)

    await kube.apply([*nodepool("Never"), deployment(APP, 3, "500m", pinned())])
    first = await processes.until("a NodeClaim Initialized for three pods", lambda: claims(1))
    await processes.until("three pods running on it", lambda: running(3))
    await kube.scale("Deployment", "default", APP, 4)
    provisioned = await processes.until("a second NodeClaim for the fourth pod", lambda: claims(2))
    assert first.items() <= provisioned.items()
    await processes.until("four pods running", lambda: running(4))

    await kube.apply(nodepool("0s"))
    await kube.scale("Deployment", "default", APP, 2)
    [(kept, node)] = (await processes.until("consolidation down to one NodeClaim", lambda: claims(1))).items()
    assert kept in provisioned
    assert await processes.until("two pods running on the node kept", lambda: running(2)) == [node]
    assert evictions() == 1, "consolidation moved one pod, by eviction"

    await kube.apply(nodepool("Never"))
    plane.kubectl("delete", "node", node, "--wait=false")

    async def replaced() -> dict[str, str]:
        now = await claims(1)
        return now if kept not in now else {}

    [new_node] = (await processes.until("the deleted node's NodeClaim replaced", replaced)).values()
    assert new_node != node
    assert await processes.until("two pods running on the new node", lambda: running(2)) == [new_node]
    assert evictions() == 3, "the deleted node's two pods were evicted"
    assert joined_as(plane, new_node) == f"system:bootstrap:{ROTATED_TOKEN_IDS[1]}", (
        "the last node joined with the rotated token"
    )


def joined_as(plane: ControlPlane, node: str) -> str:
    """Who asked for the node's client certificate: the user of its TLS bootstrap's CSR."""
    listed = json.loads(plane.kubectl("get", "certificatesigningrequests", "-o", "json").stdout)
    for csr in listed["items"]:
        request = x509.load_pem_x509_csr(base64.b64decode(csr["spec"]["request"]))
        [common_name] = request.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)
        if common_name.value == f"system:node:{node}":
            return str(csr["spec"]["username"])
    raise AssertionError(f"no CSR of node {node}")
