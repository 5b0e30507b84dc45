"""`nodewright schedule` from the outside: its JSON shape (a public interface), its table, and its errors."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from core.api.hashes import nodeclaim_hash_annotations, nodepool_stamp
from core.api.nodepool import NodePool
from core.instancetypes.catalog import load_shipped_catalog
from core.instancetypes.regions import region_prices
from tests.builders import configured_nodeclass_spec
from workers.cli import main

ROOT = Path(__file__).parents[2]
EXAMPLES = ROOT / "deploy" / "examples"
NODEPOOL = """
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.azure.com, kind: AKSNodeClass, name: default}
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
"""


def run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(args), out, err)
    return code, out.getvalue(), err.getvalue()


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def pod(name: str, cpu: str, memory: str, extra: str = "") -> str:
    return f"""
---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  containers:
    - name: c
      resources: {{requests: {{cpu: "{cpu}", memory: {memory}}}}}
{extra}"""


def schedule_json(*args: str) -> dict[str, Any]:
    code, out, err = run("schedule", "-o", "json", *args)
    assert code == 0, err
    document: dict[str, Any] = json.loads(out)
    return document


def test_json_has_the_public_shape(tmp_path: Path) -> None:
    manifests = write(tmp_path, "in.yaml", NODEPOOL + pod("a", "1", "1Gi") + pod("b", "1", "1Gi"))
    document = schedule_json("-f", manifests)
    assert set(document) >= {"nodeclaims", "existing", "unschedulable", "total_price_per_hour"}
    claim = document["nodeclaims"][0]
    assert set(claim) >= {
        "nodepool",
        "instance_type",
        "zone",
        "capacity_type",
        "price_per_hour",
        "instance_type_options",
        "pods",
        "labels",
        "taints",
    }
    assert claim["nodepool"] == "default"
    assert claim["capacity_type"] == "on-demand"
    assert claim["instance_type"] == claim["instance_type_options"][0]
    assert sorted(claim["pods"]) == ["default/a", "default/b"]
    assert claim["labels"]["node.kubernetes.io/instance-type"] == claim["instance_type"]
    assert claim["labels"]["karpenter.sh/nodepool"] == "default"
    assert document["total_price_per_hour"] == pytest.approx(
        sum(c["price_per_hour"] for c in document["nodeclaims"])
    )


def test_existing_nodes_are_used_first(tmp_path: Path) -> None:
    node = """
---
apiVersion: v1
kind: Node
metadata:
  name: aks-existing-1
  labels: {kubernetes.io/arch: amd64, kubernetes.io/os: linux, topology.kubernetes.io/zone: eastus-1}
status:
  allocatable: {cpu: "4", memory: 16Gi, pods: "110"}
  capacity: {cpu: "4", memory: 16Gi, pods: "110"}
  conditions: [{type: Ready, status: "True"}]
"""
    manifests = write(
        tmp_path, "in.yaml", NODEPOOL + node + pod("small", "1", "1Gi") + pod("big", "3500m", "8Gi")
    )
    document = schedule_json("-f", manifests)
    placed = {p for placement in document["existing"] for p in placement["pods"]}
    assert document["existing"][0]["node"] == "aks-existing-1"
    assert "default/big" in placed
    new = {p for claim in document["nodeclaims"] for p in claim["pods"]}
    assert placed | new == {"default/small", "default/big"}


def test_unschedulable_pods_come_with_a_reason_per_nodepool(tmp_path: Path) -> None:
    manifests = write(tmp_path, "in.yaml", NODEPOOL + pod("huge", "900", "16Gi"))
    document = schedule_json("-f", manifests)
    assert document["nodeclaims"] == []
    [entry] = document["unschedulable"]
    assert entry["pod"] == "default/huge"
    assert any('nodepool "default"' in reason and "cpu" in reason for reason in entry["reasons"])


def test_unavailable_offerings_move_the_launch(tmp_path: Path) -> None:
    manifests = write(tmp_path, "in.yaml", NODEPOOL + pod("a", "1", "1Gi"))
    first = schedule_json("-f", manifests)["nodeclaims"][0]
    blocked = f"{first['instance_type']}:{first['zone']}:{first['capacity_type']}"
    second = schedule_json("-f", manifests, "--unavailable", blocked)["nodeclaims"][0]
    assert (second["instance_type"], second["zone"]) != (first["instance_type"], first["zone"])


def test_a_custom_catalog_replaces_the_azure_one(tmp_path: Path) -> None:
    catalog = write(
        tmp_path,
        "catalog.yaml",
        """
instanceTypes:
  - name: small
    capacity: {cpu: "2", memory: 4Gi, pods: "20"}
    offerings: [{zone: z1, capacityType: on-demand, price: 0.05}]
  - name: large
    capacity: {cpu: "8", memory: 32Gi, pods: "50"}
    offerings: [{zone: z1, capacityType: on-demand, price: 0.50}]
""",
    )
    manifests = write(tmp_path, "in.yaml", NODEPOOL + pod("a", "1", "1Gi") + pod("b", "6", "8Gi"))
    document = schedule_json("-f", manifests, "--catalog", catalog)
    types = sorted(claim["instance_type"] for claim in document["nodeclaims"])
    assert types == ["large"]
    assert document["total_price_per_hour"] == pytest.approx(0.50)


def test_the_shipped_examples_answer(tmp_path: Path) -> None:
    document = schedule_json("-f", str(EXAMPLES), "-f", str(ROOT / "deploy" / "what-if"))
    assert document["nodeclaims"], "the examples should need new nodes"
    scheduled = {p for claim in document["nodeclaims"] for p in claim["pods"]}
    assert any(p.startswith("default/arm-batch-") for p in scheduled)
    for claim in document["nodeclaims"]:
        if any(p.startswith("default/arm-batch-") for p in claim["pods"]):
            assert claim["labels"]["kubernetes.io/arch"] == "arm64"
            assert claim["capacity_type"] == "on-demand"
            assert claim["zone"] == "eastus-2"
    assert [entry["pod"] for entry in document["unschedulable"]] == ["default/too-big"]
    assert document["existing"] == []  # the what-if folder holds workloads only, no nodes


@pytest.mark.parametrize("region", ["westeurope", "uksouth"])
def test_every_region_of_the_price_table_plans_with_its_own_prices(tmp_path: Path, region: str) -> None:
    manifests = write(tmp_path, "in.yaml", NODEPOOL + pod("a", "1", "1Gi"))
    code, out, err = run("schedule", "-o", "json", "-f", manifests, "--region", region)
    assert code == 0, err
    assert "spot is priced as on-demand" in err
    [claim] = json.loads(out)["nodeclaims"]
    assert claim["zone"].startswith(f"{region}-") or claim["zone"] == "0"
    table = region_prices(region).on_demand
    assert round(claim["price_per_hour"] * 1_000_000) == table[claim["instance_type"]]
    eastus = schedule_json("-f", manifests)["nodeclaims"][0]
    assert (
        eastus["price_per_hour"] != claim["price_per_hour"]
        or eastus["instance_type"] != claim["instance_type"]
    )
    code, out, err = run(
        "plan-disruption",
        "-f",
        str(ROOT / "deploy" / "snapshots" / "cluster.yaml"),
        "--region",
        region,
        "-o",
        "json",
    )
    assert code == 0, err


def test_bad_input_names_object_and_field_and_keeps_the_rest(tmp_path: Path) -> None:
    bad = pod("broken", "1x", "1Gi")
    manifests = write(tmp_path, "in.yaml", NODEPOOL + bad + pod("fine", "1", "1Gi"))
    code, out, err = run("schedule", "-o", "json", "-f", manifests)
    assert code == 1
    assert "broken" in err and "cpu" in err
    document = json.loads(out)
    assert [p for claim in document["nodeclaims"] for p in claim["pods"]] == ["default/fine"]
    assert document["errors"]


def test_usage_errors_are_sentences_not_tracebacks(tmp_path: Path) -> None:
    manifests = write(tmp_path, "in.yaml", NODEPOOL)
    code, _, err = run("schedule", "-f", manifests, "--region", "mars")
    assert code == 2 and "eastus" in err
    code, _, err = run("schedule", "-f", manifests, "--unavailable", "nonsense")
    assert code == 2 and "<sku>:<zone>:<capacity-type>" in err
    code, _, err = run("schedule", "-f", str(tmp_path / "missing.yaml"))
    assert code == 2 and "no such file" in err


def test_table_output_lists_claims_and_total(tmp_path: Path) -> None:
    manifests = write(tmp_path, "in.yaml", NODEPOOL + pod("a", "1", "1Gi"))
    code, out, _ = run("schedule", "-f", manifests)
    assert code == 0
    assert "New NodeClaims (1):" in out and "INSTANCE-TYPE" in out and "Total for new NodeClaims: $" in out


def test_plan_disruption_deletes_the_empty_node_and_consolidates_the_rest() -> None:
    snapshot = str(ROOT / "deploy" / "snapshots" / "cluster.yaml")
    code, out, err = run("plan-disruption", "-f", snapshot, "--now", "2026-11-22T10:00:00Z", "-o", "json")
    assert code == 0, err
    plan = json.loads(out)
    assert set(plan) >= {"commands", "blocked", "budgets", "total_savings_per_hour"}
    first, second = plan["commands"]
    assert (first["method"], first["decision"]) == ("emptiness", "delete")
    assert [c["node"] for c in first["candidates"]] == ["general-aaaaa"]
    assert second["decision"] == "replace"
    assert sorted(c["node"] for c in second["candidates"]) == ["general-bbbbb", "general-ccccc"]
    assert plan["total_savings_per_hour"] > 0.4


def test_plan_disruption_in_a_table_reads_like_karpenter_logs() -> None:
    snapshot = str(ROOT / "deploy" / "snapshots" / "cluster.yaml")
    code, out, _ = run("plan-disruption", "-f", snapshot, "--now", "2026-11-22T10:00:00Z")
    assert code == 0
    assert "disrupting via emptiness delete, terminating 1 nodes" in out
    assert "disrupting via consolidation replace" in out


def test_plan_disruption_shows_node_repairs_when_the_node_repair_gate_is_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = (ROOT / "deploy" / "snapshots" / "cluster.yaml").read_text()
    unknown = '[{type: Ready, status: "Unknown", lastTransitionTime: "2026-11-22T09:45:00Z"}]'
    # general-bbbbb's Node has not reported for 15 minutes (tolerated 10).
    head, _, tail = text.partition(
        "providerID: azure:///subscriptions/0000/resourceGroups/mc_rg/providers/Microsoft.Compute/virtualMachines/general-bbbbb"
    )
    tail = tail.replace('conditions: [{type: Ready, status: "True"}]', f"conditions: {unknown}", 1)
    snapshot = write(
        tmp_path,
        "cluster.yaml",
        head
        + "providerID: azure:///subscriptions/0000/resourceGroups/mc_rg/providers/Microsoft.Compute/virtualMachines/general-bbbbb"
        + tail,
    )
    now = ("--now", "2026-11-22T10:00:00Z")
    monkeypatch.delenv("FEATURE_GATES", raising=False)
    code, out, err = run("plan-disruption", "-f", snapshot, *now, "-o", "json")
    assert code == 0, err
    assert json.loads(out)["repairs"] == []  # NodeRepair is off by default, as in Karpenter

    monkeypatch.setenv("FEATURE_GATES", "NodeRepair=true")
    code, out, err = run("plan-disruption", "-f", snapshot, *now, "-o", "json")
    assert code == 0, err
    [repair] = json.loads(out)["repairs"]
    assert (repair["node"], repair["condition"]) == ("general-bbbbb", "Ready=Unknown")
    assert "for 0:15:00 (tolerated 0:10:00)" in repair["message"]
    code, out, _ = run("plan-disruption", "-f", snapshot, *now)
    assert "Node repairs (1), at once and forcefully:\n  general-bbbbb" in out
    code, out, _ = run(
        "plan-disruption", "-f", snapshot, *now, "--repair-not-ready-seconds", "1200", "-o", "json"
    )
    assert json.loads(out)["repairs"] == []
    code, out, _ = run("plan-disruption", "-f", snapshot, *now, "--no-repair", "-o", "json")
    assert json.loads(out)["repairs"] == []


def test_spot_to_spot_follows_its_feature_gate_and_the_flag_overrides_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The sample cluster with every node spot: only spot-to-spot consolidation can replace two of them with one.
    spot = (ROOT / "deploy" / "snapshots" / "cluster.yaml").read_text().replace("on-demand", "spot")
    snapshot = write(tmp_path, "spot.yaml", spot)
    now = ("--now", "2026-11-22T10:00:00Z")

    def plan(*flags: str) -> dict[str, Any]:
        code, out, err = run("plan-disruption", "-f", snapshot, *now, *flags, "-o", "json")
        assert code == 0, err
        document: dict[str, Any] = json.loads(out)
        return document

    monkeypatch.setenv("FEATURE_GATES", "SpotToSpotConsolidation=true")
    gated, flagged = plan(), plan("--no-spot-to-spot")
    monkeypatch.delenv("FEATURE_GATES")
    default = plan()
    assert flagged == default
    assert [c["decision"] for c in default["commands"]] == ["delete", "delete"]
    assert [c["decision"] for c in gated["commands"]] == ["delete", "replace"]
    assert plan("--spot-to-spot") == gated


def test_a_bad_feature_gate_stops_a_what_if_command_with_its_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEATURE_GATES", "Consolidation=true")
    code, _, err = run("plan-disruption", "-f", str(ROOT / "deploy" / "snapshots" / "cluster.yaml"))
    assert code == 2
    assert "FEATURE_GATES='Consolidation=true'" in err


def test_schedule_warns_about_every_field_and_kind_it_reads_past(tmp_path: Path) -> None:
    manifests = write(
        tmp_path,
        "in.yaml",
        NODEPOOL
        + pod("gated", "1", "1Gi", "  schedulingGates: [{name: example.com/wait}]")
        + """
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec: {ports: [{port: 80}]}
""",
    )
    code, out, err = run("schedule", "-f", manifests, "-o", "json")
    assert code == 0, err
    document = json.loads(out)
    assert document["warnings"] == [
        f"{manifests}: Pod default/gated: spec.schedulingGates: not read by nodewright; ignored",
        f"{manifests}: Service default/web: v1 Service is not a kind nodewright reads; ignored",
    ]
    assert err.splitlines()[:2] == [f"warning: {line}" for line in document["warnings"]]
    code, out, err = run("schedule", "-f", str(EXAMPLES))
    assert "warning:" not in err, err


def test_schedule_follows_min_values_policy_and_the_flag_overrides_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool = NODEPOOL + (
        "        - {key: node.kubernetes.io/instance-type, operator: In, "
        "values: [Standard_D4s_v5, Standard_D8s_v5], minValues: 2}\n"
    )
    # Six CPUs fit only the D8: the two values minValues asks for cannot both be offered.
    manifests = write(tmp_path, "in.yaml", pool + pod("big", "6", "1Gi"))
    monkeypatch.delenv("MIN_VALUES_POLICY", raising=False)
    assert [u["pod"] for u in schedule_json("-f", manifests)["unschedulable"]] == ["default/big"]
    monkeypatch.setenv("MIN_VALUES_POLICY", "BestEffort")
    [claim] = schedule_json("-f", manifests)["nodeclaims"]
    assert claim["instance_type_options"] == ["Standard_D8s_v5"]
    assert schedule_json("-f", manifests, "--min-values-policy", "Strict")["nodeclaims"] == []


def nodeclass(spec: dict[str, Any]) -> str:
    document = {
        "apiVersion": "karpenter.azure.com/v1beta1",
        "kind": "AKSNodeClass",
        "metadata": {"name": "default"},
    }
    return "\n---\n" + json.dumps({**document, "spec": spec})


SMALL_POD = pod("small", "100m", "128Mi")


def test_localdns_required_leaves_out_sizes_under_4_vcpus(tmp_path: Path) -> None:
    """The cheapest size for a small pod has 2 vCPUs; with LocalDNS Required the choice has 4 or more."""
    plain = write(tmp_path, "plain.yaml", NODEPOOL + nodeclass({}) + SMALL_POD)
    spec = configured_nodeclass_spec()
    required = write(
        tmp_path, "required.yaml", NODEPOOL + nodeclass({"localDNS": spec["localDNS"]}) + SMALL_POD
    )
    preferred_spec = {"localDNS": {**spec["localDNS"], "mode": "Preferred"}}
    preferred = write(tmp_path, "preferred.yaml", NODEPOOL + nodeclass(preferred_spec) + SMALL_POD)

    def vcpus(manifests: str) -> set[str]:
        [claim] = schedule_json("-f", manifests)["nodeclaims"]
        return {option_cpus(option) for option in claim["instance_type_options"]}

    assert "2" in vcpus(plain)
    assert "2" not in vcpus(required) and all(int(cpus) >= 4 for cpus in vcpus(required))
    # Preferred resolves to Disabled until the provider's conditions hold (see `resolved_local_dns_state`).
    assert "2" in vcpus(preferred)


def option_cpus(name: str) -> str:
    return str(load_shipped_catalog("eastus").sku(name).vcpus)


def test_a_pod_selecting_fips_schedules_only_on_a_fips_nodeclass(tmp_path: Path) -> None:
    fips_pod = pod("fips", "100m", "128Mi", '  nodeSelector: {"kubernetes.azure.com/fips_enabled": "true"}')
    fips = write(tmp_path, "fips.yaml", NODEPOOL + nodeclass({"fipsMode": "FIPS"}) + fips_pod)
    plain = write(tmp_path, "plain.yaml", NODEPOOL + nodeclass({}) + fips_pod)

    [claim] = schedule_json("-f", fips)["nodeclaims"]
    assert claim["pods"] == ["default/fips"]
    assert claim["labels"]["kubernetes.azure.com/fips_enabled"] == "true"
    document = schedule_json("-f", plain)
    assert document["nodeclaims"] == [] and [entry["pod"] for entry in document["unschedulable"]] == [
        "default/fips"
    ]


CATALOG = """
instanceTypes:
  - name: two
    capacity: {cpu: 2, memory: 8Gi}
    offerings: [{zone: eastus-1, capacityType: on-demand, price: 0.096}]
  - name: four
    capacity: {cpu: 4, memory: 16Gi}
    offerings: [{zone: eastus-1, capacityType: on-demand, price: 0.192}]
"""


def test_a_catalog_of_ones_own_goes_through_the_aksnodeclass_rules(tmp_path: Path) -> None:
    """LocalDNS Required and FIPS shape a `--catalog` as they shape the shipped ones."""
    catalog = write(tmp_path, "catalog.yaml", CATALOG)
    local_dns = {"localDNS": configured_nodeclass_spec()["localDNS"]}
    fips_pod = pod("fips", "100m", "128Mi", '  nodeSelector: {"kubernetes.azure.com/fips_enabled": "true"}')

    def plan(name: str, text: str) -> dict[str, Any]:
        return schedule_json("-f", write(tmp_path, name, text), "--catalog", catalog)

    [claim] = plan("plain.yaml", NODEPOOL + nodeclass({}) + SMALL_POD)["nodeclaims"]
    assert claim["instance_type"] == "two" and claim["labels"]["kubernetes.azure.com/os-sku"] == "Ubuntu"
    [claim] = plan("dns.yaml", NODEPOOL + nodeclass(local_dns) + SMALL_POD)["nodeclaims"]
    assert claim["instance_type_options"] == ["four"]
    document = plan("fips-on-plain.yaml", NODEPOOL + nodeclass({}) + fips_pod)
    assert document["nodeclaims"] == [] and [u["pod"] for u in document["unschedulable"]] == ["default/fips"]
    [claim] = plan("fips.yaml", NODEPOOL + nodeclass({"fipsMode": "FIPS"}) + fips_pod)["nodeclaims"]
    assert claim["pods"] == ["default/fips"]
    assert claim["labels"]["kubernetes.azure.com/fips_enabled"] == "true"


def test_pod_level_requests_choose_a_size_that_holds_them(tmp_path: Path) -> None:
    pod_level = """
---
apiVersion: v1
kind: Pod
metadata: {name: whole, namespace: default}
spec:
  resources: {requests: {cpu: "7", memory: 4Gi}}
  containers:
    - {name: a, resources: {requests: {cpu: 100m, memory: 64Mi}}}
    - {name: b, resources: {requests: {cpu: 100m, memory: 64Mi}}}
"""
    manifests = write(tmp_path, "in.yaml", NODEPOOL + pod_level)
    [claim] = schedule_json("-f", manifests)["nodeclaims"]
    assert claim["requests"]["cpu"] == "7"
    assert int(claim["labels"]["karpenter.azure.com/sku-cpu"]) >= 8


def test_a_pod_allowing_both_architectures_gets_amd64_when_the_status_has_amd64_images_only(
    tmp_path: Path,
) -> None:
    documents = list(yaml.safe_load_all((EXAMPLES / "nodepool.yaml").read_text()))
    for document in documents:
        if document["kind"] == "AKSNodeClass":
            document["status"]["images"] = [
                image for image in document["status"]["images"] if "arm64" not in str(image["requirements"])
            ]
    snapshot = yaml.safe_dump_all(documents) + pod("web", "1", "1Gi")
    manifests = write(tmp_path, "in.yaml", snapshot)

    document = schedule_json("-f", manifests)
    [claim] = document["nodeclaims"]
    assert claim["labels"]["kubernetes.io/arch"] == "amd64"
    left_out = document["instance_types_left_out"]["default"]
    assert not set(claim["instance_type_options"]) & set(left_out)
    assert left_out["Standard_D2pls_v5"] == (
        "AKSNodeClass default: no image in status.images boots on Standard_D2pls_v5 (arm64, Hyper-V generations V2)"
    )
    code, table, _ = run("schedule", "-f", manifests)
    assert code == 0 and f"Instance types left out of NodePool default ({len(left_out)}):" in table


def test_plan_disruption_names_the_nodepool_template_field_that_drifted(tmp_path: Path) -> None:
    documents = list(yaml.safe_load_all((ROOT / "deploy" / "snapshots" / "cluster.yaml").read_text()))
    [pool] = [d for d in documents if d and d["kind"] == "NodePool"]
    launched = nodeclaim_hash_annotations(NodePool.parse(pool), None)
    for claim in (d for d in documents if d and d["kind"] == "NodeClaim"):
        claim["metadata"].setdefault("annotations", {}).update(launched)
    pool["spec"]["template"].setdefault("metadata", {})["labels"] = {"tier": "gold"}
    pool["metadata"]["annotations"] = nodepool_stamp(NodePool.parse(pool)).owner_annotations()
    snapshot = write(tmp_path, "cluster.yaml", yaml.safe_dump_all(documents))
    code, out, err = run("plan-disruption", "-f", snapshot, "--now", "2026-11-22T10:00:00Z")
    assert code == 0, err
    assert "disrupting via drift delete, terminating 1 nodes (1 pods) general-bbbbb" in out
    assert (
        "\n    general-bbbbb: NodePoolDrifted: NodePool general template changed: spec.template.metadata.labels ("
        in out
    )


def test_a_catalog_of_ones_own_takes_the_aksnodeclass_s_max_pods_and_os_disk(tmp_path: Path) -> None:
    """maxPods and osDiskSizeGB size a `--catalog`'s nodes as they size the shipped ones: twelve tiny pods need
    two nodes of an AKSNodeClass with maxPods 10, and an entry's own pod count is replaced, with a warning."""
    own_pods = CATALOG.replace(
        "capacity: {cpu: 2, memory: 8Gi}", "capacity: {cpu: 2, memory: 8Gi, pods: 110}"
    )
    catalog = write(tmp_path, "catalog.yaml", own_pods)
    tiny = "".join(pod(f"p{index}", "10m", "16Mi") for index in range(12))
    manifests = write(tmp_path, "in.yaml", NODEPOOL + nodeclass({"maxPods": 10, "osDiskSizeGB": 40}) + tiny)

    code, out, err = run("schedule", "-o", "json", "-f", manifests, "--catalog", catalog)
    assert code == 0, err
    claims = json.loads(out)["nodeclaims"]
    assert sorted(len(claim["pods"]) for claim in claims) == [2, 10]
    assert "instanceTypes[0] (two): capacity.pods is replaced by each NodePool's AKSNodeClass" in err
    shipped = schedule_json("-f", manifests)["nodeclaims"]
    assert sorted(len(claim["pods"]) for claim in shipped) == [2, 10]
