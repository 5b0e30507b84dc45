"""The chart, running: `helm install` with the default values (and the emulated Azure's settings) on the local
control plane brings a Node for a pending pod through the release's own worker, controller and embedded
Temporal, with nothing installed beforehand; `helm test` checks it; and deleting the Temporal pod while several
NodeClaims launch loses none of them.

The worker signs in as the chart's default says, by workload identity, as on AKS: the emulated AKS runs the
workload identity webhook and trusts the API server's service-account issuer (`simulator.workload_identity`), the
test federates an identity with the chart's ServiceAccount and gives the chart its client id, and the emulated
Entra ID issues every token the worker calls ARM with for the ServiceAccount's projected token.

The release's pods run for real, as processes of the chart's image (the repository's Dockerfile, from this
virtualenv), on the process kubelet's system nodes (`simulator.kubelet`); the nodes nodewright launches are the
emulated Azure's VMs, joined by its node agents and run by kwok, as in every other test. The control plane is
this module's own: other tests wipe every Node of the shared one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from temporalio.client import Client
from temporalio.service import RPCError

from activities.azure.names import nodeclaim_of
from activities.kubeclient.cluster import KubernetesCluster
from core.api.nodeclaim import NodeClaimConditionType
from simulator.aks import AksSettings, ClusterInfo
from simulator.kubelet.namespaces import unsupported_reason
from simulator.workload_identity import TOKEN_FILE, TOKEN_VOLUME
from tests.cluster import EXAMPLES, eventually, process_kubelet
from tests.deploy.helm import CHART, Helm
from workers.azure import EMULATOR_SSH_KEY
from workers.controlplane.run import ControlPlane, free_port, start_control_plane
from workers.simulated_aks import SimulatedAks, simulated_aks
from workflows.ids import nodeclaim_id

pytestmark = pytest.mark.skipif(
    unsupported_reason() is not None, reason=f"cannot run the chart's pods here: {unsupported_reason()}"
)

RELEASE = NAMESPACE = "nodewright"
TEMPORAL_POD = f"{RELEASE}-temporal-0"
ARM_CA = "/etc/nodewright/arm/ca.crt"
LAUNCHES = 3
VM_CREATE_SECONDS = 8.0
"""How long each VM of the second part takes to create: long enough to delete Temporal while they launch."""


def emulator_values(info: ClusterInfo, client_id: str) -> dict[str, Any]:
    """What a user of the emulated AKS sets besides the defaults: the cluster's settings, the client id of the
    identity federated with the chart's ServiceAccount, and the worker pointed at the ARM emulator (its CA
    certificate from the ConfigMap `arm-emulator-ca`)."""
    assert info.arm_endpoint is not None
    return {
        "azure": {"workloadIdentity": {"clientId": client_id}},
        "settings": {
            "clusterName": info.cluster_name,
            "clusterEndpoint": info.api_server,
            "bootstrapTokenSecret": info.bootstrap_token_secret,
            "azure": {
                "subscriptionId": info.subscription_id,
                "nodeResourceGroup": info.resource_group,
                "location": info.location,
                "subnetId": info.subnet_id,
                "kubernetesVersion": info.kubernetes_version,
                "nodeImageVersion": info.node_image_version,
                "sshPublicKey": EMULATOR_SSH_KEY,
            },
        },
        "worker": {
            "env": [
                {"name": "NODEWRIGHT_ARM_ENDPOINT", "value": info.arm_endpoint},
                {"name": "NODEWRIGHT_ARM_CA_FILE", "value": ARM_CA},
                {"name": "NODEWRIGHT_AZURE_POLL_SECONDS", "value": "0.2"},
            ]
        },
        "extraVolumes": [{"name": "arm-ca", "configMap": {"name": "arm-emulator-ca"}}],
        "extraVolumeMounts": [{"name": "arm-ca", "mountPath": str(Path(ARM_CA).parent), "readOnly": True}],
        "helmTest": {"nodePool": "default"},
    }


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    started = start_control_plane(tmp_path_factory.mktemp("chart-control-plane"))
    yield started
    started.stop()


def helm_in(plane: ControlPlane) -> list[str]:
    return ["--kubeconfig", str(plane.kubeconfig), "--namespace", NAMESPACE]


async def claims(kube: KubernetesCluster) -> dict[str, Any]:
    return {claim.name: claim for claim in await kube.list_nodeclaims()}


def initialized(claim: Any) -> bool:
    return any(
        c.type == NodeClaimConditionType.INITIALIZED and c.status == "True" for c in claim.status.conditions
    )


def pod_logs(directory: Path) -> str:
    """The tail of every container log of the kubelet's pods, for a failure's message."""
    tails = []
    for path in sorted((directory / "pods").glob("*/*/*.log")):
        lines = path.read_text(errors="replace").splitlines()[-15:]
        tails.append(f"--- {path.relative_to(directory)}\n" + "\n".join(lines))
    return "\n".join(tails)


async def test_helm_install_with_default_values_brings_a_node_and_survives_losing_its_temporal(
    helm: Helm, plane: ControlPlane, tmp_path: Path
) -> None:
    settings = AksSettings.instant(seed=37)
    settings.cluster_name = "chart"
    settings.workload_identity = True
    async with simulated_aks(plane, settings) as aks:
        info = aks.emulated.info
        assert info.arm_endpoint is not None and info.arm_ca_file is not None
        temporal_port = free_port()
        # Three system nodes tainted as AKS's dedicated system pool; every pod reaches the ARM emulator's port on
        # its loopback, and this test the Temporal Service on the host's.
        async with process_kubelet(
            plane,
            tmp_path / "kubelet",
            "--taint",
            "CriticalAddonsOnly=true:NoSchedule",
            "--host-port",
            str(urlsplit(info.arm_endpoint).port),
            "--forward",
            f"{temporal_port}={NAMESPACE}/{RELEASE}-temporal:7233",
        ) as kubelet:
            try:
                await _install_and_test(helm, plane, aks, tmp_path, info)
                await _lose_temporal_while_launching(plane, aks, temporal_port)
            except Exception as error:
                raise AssertionError(f"{error}\n{pod_logs(kubelet)}") from error


async def _install_and_test(
    helm: Helm, plane: ControlPlane, aks: SimulatedAks, tmp_path: Path, info: ClusterInfo
) -> None:
    plane.kubectl("create", "namespace", NAMESPACE)
    assert info.arm_ca_file is not None
    plane.kubectl(
        "create", "configmap", "arm-emulator-ca", "-n", NAMESPACE, f"--from-file=ca.crt={info.arm_ca_file}"
    )
    # As `az identity create` and `az identity federated-credential create` for the chart's ServiceAccount.
    identity = await aks.emulator.federate(NAMESPACE, RELEASE)
    values = tmp_path / "emulator-values.yaml"
    values.write_text(yaml.safe_dump(emulator_values(info, identity.client_id)))
    await asyncio.to_thread(
        helm.run,
        "install",
        RELEASE,
        str(CHART),
        *helm_in(plane),
        "-f",
        str(values),
        "--wait",
        "--timeout",
        "150s",
    )
    pods = plane.kubectl("get", "pods", "-n", NAMESPACE, "-o", "json")
    running = {item["metadata"]["name"]: item for item in yaml.safe_load(pods.stdout)["items"]}
    assert TEMPORAL_POD in running, sorted(running)
    assert all(item["status"]["phase"] == "Running" for item in running.values())
    # kube-scheduler placed them with the chart's affinity and spread: the controllers on two nodes of two zones.
    controllers = [item for item in running.values() if "controller" in item["metadata"]["name"]]
    assert len({item["spec"]["nodeName"] for item in controllers}) == len(controllers) == 2
    # Temporal's database is on its claim's volume, written by the image's non-root user.
    claim = yaml.safe_load(
        plane.kubectl("get", "pvc", f"data-{TEMPORAL_POD}", "-n", NAMESPACE, "-o", "json").stdout
    )
    volume = yaml.safe_load(plane.kubectl("get", "pv", claim["spec"]["volumeName"], "-o", "json").stdout)
    database = Path(volume["spec"]["hostPath"]["path"]) / "temporal.db"
    assert database.stat().st_uid == 65532
    # The walkthrough's NodePool, without consolidation: no node goes away while this test counts them.
    pool, nodeclass = yaml.safe_load_all((EXAMPLES / "nodepool.yaml").read_text())
    pool["spec"]["disruption"]["consolidateAfter"] = "Never"
    await asyncio.to_thread(plane.apply, [pool, nodeclass])
    # No NodeClaim yet: the test pod's pending pod is the first that needs a node.
    assert await claims(aks.kube) == {}
    done = await asyncio.to_thread(helm.run, "test", RELEASE, *helm_in(plane), "--timeout", "150s")
    assert "Phase:          Succeeded" in done.stdout, done.stdout
    nodes = await aks.kube.list_nodes()
    launched = [node for node in nodes if node.metadata.labels.get("karpenter.sh/nodepool") == "default"]
    assert len(launched) == 1, [node.metadata.name for node in nodes]
    (claim,) = (await claims(aks.kube)).values()
    assert initialized(claim) and claim.status.node_name == launched[0].metadata.name
    # The worker signed in by workload identity: the webhook gave its pods the identity and the projected token,
    # and every token it called ARM with was issued by the emulated Entra ID to the federated identity.
    workers = [item for item in running.values() if "worker" in item["metadata"]["name"]]
    for worker in workers:
        env = {variable["name"]: variable.get("value") for variable in worker["spec"]["containers"][0]["env"]}
        assert env["AZURE_CLIENT_ID"] == identity.client_id and env["AZURE_TENANT_ID"] == info.tenant_id
        assert env["AZURE_FEDERATED_TOKEN_FILE"] == TOKEN_FILE
        assert any(volume["name"] == TOKEN_VOLUME for volume in worker["spec"]["volumes"])
    state = aks.emulated.arm.state
    emulator = urlsplit(info.arm_endpoint or "").netloc
    assert state.directory.requests and {
        (request.host, request.client_id, request.grant, request.status)
        for request in state.directory.requests
    } == {(emulator, identity.client_id, "federated_token", 200)}
    assert state.requests and all(record.status != 401 for record in state.requests)
    assert {issued.client_id for issued in state.directory.issued.values()} == {identity.client_id}


async def _lose_temporal_while_launching(plane: ControlPlane, aks: SimulatedAks, temporal_port: int) -> None:
    await aks.emulator.update_settings({"arm": {"vm_create_seconds": VM_CREATE_SECONDS}})
    before = set(await claims(aks.kube))
    # Three pods that each need a node of their own, bigger than the test's node.
    plane.apply(
        [
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "spread", "namespace": "default"},
                "spec": {
                    "replicas": LAUNCHES,
                    "selector": {"matchLabels": {"app": "spread"}},
                    "template": {
                        "metadata": {"labels": {"app": "spread"}},
                        "spec": {
                            "nodeSelector": {"karpenter.sh/nodepool": "default"},
                            "affinity": {
                                "podAntiAffinity": {
                                    "requiredDuringSchedulingIgnoredDuringExecution": [
                                        {
                                            "topologyKey": "kubernetes.io/hostname",
                                            "labelSelector": {"matchLabels": {"app": "spread"}},
                                        }
                                    ]
                                }
                            },
                            "containers": [
                                {
                                    "name": "app",
                                    "image": "mcr.microsoft.com/oss/kubernetes/pause:3.6",
                                    "resources": {"requests": {"cpu": "3"}},
                                }
                            ],
                        },
                    },
                },
            }
        ]
    )

    async def launching() -> list[str]:
        new = {name: claim for name, claim in (await claims(aks.kube)).items() if name not in before}
        unlaunched = [
            name
            for name, claim in new.items()
            if not any(
                c.type == NodeClaimConditionType.LAUNCHED and c.status == "True"
                for c in claim.status.conditions
            )
        ]
        return sorted(new) if len(new) == LAUNCHES and unlaunched else []

    new = await eventually(launching, timeout=60, what=f"{LAUNCHES} NodeClaims launching")
    # Each NodeClaim's lifecycle is started just after the NodeClaim is created: wait for all of them, and note
    # each run, which the restarted server must still hold.
    before_loss = await Client.connect(f"127.0.0.1:{temporal_port}")

    async def runs() -> dict[str, str]:
        found = {}
        for name in new:
            try:
                found[name] = (await before_loss.get_workflow_handle(nodeclaim_id(name)).describe()).run_id
            except RPCError:
                return {}
        return found

    started = await eventually(runs, timeout=60, what="every new NodeClaim's lifecycle started")
    old_uid = yaml.safe_load(plane.kubectl("get", "pod", TEMPORAL_POD, "-n", NAMESPACE, "-o", "json").stdout)[
        "metadata"
    ]["uid"]
    deleted_at = datetime.now(UTC)
    plane.kubectl("delete", "pod", TEMPORAL_POD, "-n", NAMESPACE, "--wait=false")

    async def replaced() -> bool:
        done = plane.kubectl("get", "pod", TEMPORAL_POD, "-n", NAMESPACE, "-o", "json", check=False)
        if done.returncode != 0:
            return False
        pod = yaml.safe_load(done.stdout)
        ready = any(
            c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or []
        )
        return pod["metadata"]["uid"] != old_uid and ready

    await eventually(replaced, timeout=90, what="a new Temporal pod, ready")

    async def settled() -> list[str]:
        now = await claims(aks.kube)
        pods = await aks.kube.list_pods("default", label_selector="app=spread")
        running = [pod for pod in pods if pod.status.phase == "Running"]
        if len(running) != LAUNCHES or not all(initialized(claim) for claim in now.values()):
            return []
        return sorted(now)

    final = await eventually(settled, timeout=120, what="every NodeClaim Initialized and every pod Running")
    # None lost, none replaced: the NodeClaims launching when Temporal went are the ones that initialized, and
    # Azure holds a VM and a NIC for each NodeClaim and for nothing else.
    assert set(final) == before | set(new), (before, new, final)
    resources = await aks.emulator.resources()
    vms = sorted(
        nodeclaim_of(str(item["name"]))
        for item in resources
        if item.get("type") == "Microsoft.Compute/virtualMachines"
    )
    nics = sorted(
        nodeclaim_of(str(item["name"]))
        for item in resources
        if item.get("type") == "Microsoft.Network/networkInterfaces"
    )
    assert vms == nics == sorted(final)
    # The restarted server kept its history: the lifecycles started before its pod was deleted are there, the
    # same runs.
    client = await Client.connect(f"127.0.0.1:{temporal_port}")
    for name in new:
        description = await client.get_workflow_handle(nodeclaim_id(name)).describe()
        assert description.run_id == started[name], (name, description.run_id, started[name])
        assert description.start_time < deleted_at, (name, description.start_time, deleted_at)
