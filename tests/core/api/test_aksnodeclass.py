from __future__ import annotations

from typing import Any

import pytest
import yaml

from core.api.aksnodeclass import (
    AKSNodeClass,
    AKSNodeClassConditionType,
    CPUManagerPolicy,
    GPUMode,
    ImageFamily,
    LocalDNSState,
    TopologyManagerPolicy,
)
from core.api.meta import InvalidObjectError

SUBNET = (
    "/subscriptions/12345678-1234-1234-1234-123456789012/resourceGroups/my-rg"
    "/providers/Microsoft.Network/virtualNetworks/my-vnet/subnets/nodes"
)

FULL_NODECLASS = f"""
apiVersion: karpenter.azure.com/v1beta1
kind: AKSNodeClass
metadata:
  name: default
spec:
  vnetSubnetID: {SUBNET}
  osDiskSizeGB: 256
  imageFamily: AzureLinux
  fipsMode: Disabled
  tags:
    team: platform
    cost-center: "1234"
  maxPods: 110
  security:
    encryptionAtHost: true
  gpu:
    mode: None
  artifactStreaming:
    enabled: true
  kubelet:
    cpuManagerPolicy: static
    cpuCFSQuota: false
    cpuCFSQuotaPeriod: 50ms
    imageGCHighThresholdPercent: 85
    imageGCLowThresholdPercent: 80
    topologyManagerPolicy: single-numa-node
    allowedUnsafeSysctls: ["net.core.somaxconn"]
    containerLogMaxSize: 100Mi
    containerLogMaxFiles: 3
    podPidsLimit: 4096
    failSwapOn: false
  linuxOSConfig:
    swapFileSize: 2Gi
    transparentHugePageEnabled: madvise
    transparentHugePageDefrag: defer+madvise
    sysctls:
      netCoreSomaxconn: 16384
      netCoreRmemDefault: 212992
      netCoreRmemMax: 16777216
      netIPv4IPLocalPortRange: "32768 60999"
      netIPv4TCPTwReuse: true
      vmMaxMapCount: 262144
  localDNS:
    mode: Required
    vnetDNSOverrides:
      - zone: "."
        queryLogging: Error
        protocol: PreferUDP
        forwardDestination: VnetDNS
        forwardPolicy: Sequential
        maxConcurrent: 1000
        cacheDuration: 1h
        serveStaleDuration: 1h
        serveStale: Verify
      - zone: cluster.local
        queryLogging: Log
        protocol: ForceTCP
        forwardDestination: ClusterCoreDNS
        forwardPolicy: RoundRobin
        maxConcurrent: 1000
        cacheDuration: 1h
        serveStaleDuration: 1h
        serveStale: Immediate
    kubeDNSOverrides:
      - zone: "."
        queryLogging: Error
        protocol: PreferUDP
        forwardDestination: ClusterCoreDNS
        forwardPolicy: Random
        maxConcurrent: 1000
        cacheDuration: 1h
        serveStaleDuration: 1h
        serveStale: Disable
      - zone: cluster.local
        queryLogging: Error
        protocol: ForceTCP
        forwardDestination: ClusterCoreDNS
        forwardPolicy: Sequential
        maxConcurrent: 1000
        cacheDuration: 1h
        serveStaleDuration: 1h
        serveStale: Immediate
status:
  kubernetesVersion: 1.31.2
  localDNSState: Enabled
  images:
    - id: /CommunityGalleries/AKSAzureLinux-f7c7cda5/images/V2gen2/versions/202410.09.0
      requirements:
        - key: kubernetes.io/arch
          operator: In
          values: [amd64]
        - key: karpenter.azure.com/sku-hyperv-generation
          operator: In
          values: ["2"]
  conditions:
    - type: Ready
      status: "True"
      reason: Ready
      message: ""
      lastTransitionTime: "2024-10-07T10:00:00Z"
"""


def manifest(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.azure.com/v1beta1",
        "kind": "AKSNodeClass",
        "metadata": {"name": "default"},
        "spec": spec,
    }


def problems(raw: dict[str, Any]) -> list[str]:
    with pytest.raises(InvalidObjectError) as caught:
        AKSNodeClass.parse(raw)
    message = str(caught.value)
    assert "pydantic" not in message
    return message.splitlines()


def zone(name: str, **overrides: Any) -> dict[str, Any]:
    entry = {
        "zone": name,
        "queryLogging": "Error",
        "protocol": "PreferUDP",
        "forwardDestination": "ClusterCoreDNS" if name.endswith("cluster.local") else "VnetDNS",
        "forwardPolicy": "Sequential",
        "maxConcurrent": 100,
        "cacheDuration": "1h",
        "serveStaleDuration": "1h",
        "serveStale": "Immediate",
    }
    return entry | overrides


def local_dns(
    vnet: list[dict[str, Any]] | None = None, kube: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    required = [zone("."), zone("cluster.local")]
    return {
        "mode": "Preferred",
        "vnetDNSOverrides": required if vnet is None else vnet,
        "kubeDNSOverrides": [zone(".", forwardDestination="ClusterCoreDNS"), zone("cluster.local")]
        if kube is None
        else kube,
    }


# --- whole object ----------------------------------------------------------------------------------------


def test_a_full_nodeclass_round_trips() -> None:
    raw = yaml.safe_load(FULL_NODECLASS)

    node_class = AKSNodeClass.parse(raw)
    dumped = node_class.model_dump(mode="json", by_alias=True, exclude_none=True)

    assert dumped["spec"] == raw["spec"]
    assert dumped["status"] == raw["status"]
    assert AKSNodeClass.parse(dumped) == node_class


def test_a_full_nodeclass_reads_as_its_fields() -> None:
    node_class = AKSNodeClass.parse(yaml.safe_load(FULL_NODECLASS))
    spec = node_class.spec

    assert spec.image_family is ImageFamily.AZURE_LINUX
    assert spec.os_disk_size_gb == 256
    assert spec.encryption_at_host
    assert spec.gpu_mode is GPUMode.NONE
    assert spec.artifact_streaming_enabled
    assert not spec.trusted_launch_enabled
    assert spec.kubelet is not None and spec.kubelet.cpu_manager_policy is CPUManagerPolicy.STATIC
    assert spec.linux_os_config is not None and spec.linux_os_config.sysctls is not None
    assert spec.linux_os_config.sysctls.net_core_somaxconn == 16384
    assert node_class.resolved_max_pods() == 110
    assert node_class.status.kubernetes_version == "1.31.2"
    assert node_class.status.local_dns_state is LocalDNSState.ENABLED
    assert node_class.status.images[0].requirements[1].values == ["2"]
    assert node_class.status.is_true(AKSNodeClassConditionType.READY)


def test_an_empty_nodeclass_gets_the_defaults() -> None:
    node_class = AKSNodeClass.parse({"apiVersion": "karpenter.azure.com/v1beta1", "kind": "AKSNodeClass"})
    spec = node_class.spec

    assert spec.image_family is ImageFamily.UBUNTU
    assert spec.os_disk_size_gb == 128
    assert spec.fips_mode is None
    assert spec.max_pods is None
    assert spec.tags == {}
    assert spec.gpu_mode is GPUMode.DRIVER
    assert not spec.encryption_at_host
    assert not spec.artifact_streaming_enabled


def test_kubelet_defaults_apply_when_kubelet_is_given() -> None:
    kubelet = AKSNodeClass.parse(manifest(kubelet={})).spec.kubelet

    assert kubelet is not None
    assert kubelet.cpu_manager_policy is CPUManagerPolicy.NONE
    assert kubelet.cpu_cfs_quota is True
    assert kubelet.cpu_cfs_quota_period == "100ms"
    assert kubelet.topology_manager_policy is TopologyManagerPolicy.NONE
    assert kubelet.container_log_max_size == "50Mi"
    assert kubelet.container_log_max_files == 5
    assert kubelet.image_gc_high_threshold_percent is None


def test_gpu_mode_defaults_to_driver_when_gpu_is_given() -> None:
    assert AKSNodeClass.parse(manifest(gpu={})).spec.gpu_mode is GPUMode.DRIVER


def test_the_deprecated_version_is_read_too() -> None:
    raw = manifest(imageFamily="Ubuntu2204")
    raw["apiVersion"] = "karpenter.azure.com/v1alpha2"

    assert AKSNodeClass.parse(raw).spec.image_family is ImageFamily.UBUNTU_2204


def test_other_versions_are_rejected() -> None:
    raw = manifest()
    raw["apiVersion"] = "karpenter.azure.com/v1"

    assert problems(raw) == [
        "AKSNodeClass default: apiVersion: Input should be 'karpenter.azure.com/v1beta1' or "
        "'karpenter.azure.com/v1alpha2'"
    ]


def test_unknown_fields_are_rejected() -> None:
    assert problems(manifest(imageVersion="202410.09.0")) == [
        "AKSNodeClass default: spec.imageVersion: Extra inputs are not permitted"
    ]


# --- scalar fields ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [30, 2048])
def test_os_disk_size_bounds_valid(size: int) -> None:
    assert AKSNodeClass.parse(manifest(osDiskSizeGB=size)).spec.os_disk_size_gb == size


@pytest.mark.parametrize(
    ("size", "rule"), [(29, "greater than or equal to 30"), (2049, "less than or equal to 2048")]
)
def test_os_disk_size_bounds_invalid(size: int, rule: str) -> None:
    assert problems(manifest(osDiskSizeGB=size)) == [
        f"AKSNodeClass default: spec.osDiskSizeGB: Input should be {rule}"
    ]


def test_image_family_is_one_of_six() -> None:
    assert problems(manifest(imageFamily="Ubuntu2004")) == [
        "AKSNodeClass default: spec.imageFamily: Input should be 'Ubuntu', 'Ubuntu2204', 'Ubuntu2404', "
        "'AzureLinux', 'Windows2022' or 'Windows2025'"
    ]


@pytest.mark.parametrize("subnet", [SUBNET, SUBNET.upper(), SUBNET.replace("my-rg", "MC_rg(1).x")])
def test_subnet_id_valid(subnet: str) -> None:
    assert AKSNodeClass.parse(manifest(vnetSubnetID=subnet)).spec.vnet_subnet_id == subnet


@pytest.mark.parametrize(
    "subnet",
    [
        SUBNET.replace("/subnets/nodes", ""),
        SUBNET.replace("Microsoft.Network", "Microsoft.Compute"),
        SUBNET.replace("my-rg", "my-rg."),  # a resource group may not end with a period
        "nodes",
    ],
)
def test_subnet_id_invalid(subnet: str) -> None:
    [problem] = problems(manifest(vnetSubnetID=subnet))

    assert problem.startswith("AKSNodeClass default: spec.vnetSubnetID: String should match pattern ")


@pytest.mark.parametrize("max_pods", [10, 250])
def test_max_pods_bounds_valid(max_pods: int) -> None:
    assert AKSNodeClass.parse(manifest(maxPods=max_pods)).resolved_max_pods("kubenet", "") == max_pods


@pytest.mark.parametrize(
    ("max_pods", "rule"), [(9, "greater than or equal to 10"), (251, "less than or equal to 250")]
)
def test_max_pods_bounds_invalid(max_pods: int, rule: str) -> None:
    assert problems(manifest(maxPods=max_pods)) == [
        f"AKSNodeClass default: spec.maxPods: Input should be {rule}"
    ]


@pytest.mark.parametrize(
    ("plugin", "mode", "expected"),
    [
        ("azure", "overlay", 250),
        ("azure", "", 30),
        ("none", "", 250),
        ("none", "overlay", 250),
        ("kubenet", "", 110),
    ],
)
def test_max_pods_default_follows_the_network_plugin(plugin: str, mode: str, expected: int) -> None:
    assert AKSNodeClass.parse(manifest()).resolved_max_pods(plugin, mode) == expected


def test_max_pods_default_assumes_azure_cni_overlay() -> None:
    assert AKSNodeClass.parse(manifest()).resolved_max_pods() == 250


# --- tags -------------------------------------------------------------------------------------------------


def test_tags_valid() -> None:
    tags = {"k" * 512: "v" * 256, "env": ""}

    assert AKSNodeClass.parse(manifest(tags=tags)).spec.tags == tags


@pytest.mark.parametrize(
    ("tags", "rule"),
    [
        ({"k" * 513: "v"}, f"tag key {'k' * 40!r}... is longer than 512 characters"),
        ({"a<b": "v"}, "tag key 'a<b' must not contain '<', '>', '%', '&', '?' or '\\'"),
        ({"50%": "v"}, "tag key '50%' must not contain '<', '>', '%', '&', '?' or '\\'"),
        ({"a\\b": "v"}, "tag key 'a\\\\b' must not contain '<', '>', '%', '&', '?' or '\\'"),
        ({"team": "v" * 257}, "the value of tag 'team' is longer than 256 characters"),
    ],
)
def test_tags_invalid(tags: dict[str, str], rule: str) -> None:
    assert problems(manifest(tags=tags)) == [f"AKSNodeClass default: spec.tags: {rule}"]


# --- kubelet ----------------------------------------------------------------------------------------------


def test_image_gc_high_threshold_must_exceed_the_low_one() -> None:
    assert AKSNodeClass.parse(
        manifest(kubelet={"imageGCHighThresholdPercent": 81, "imageGCLowThresholdPercent": 80})
    )
    assert problems(
        manifest(kubelet={"imageGCHighThresholdPercent": 80, "imageGCLowThresholdPercent": 80})
    ) == [
        "AKSNodeClass default: spec.kubelet: imageGCHighThresholdPercent (80) must be greater than the low "
        "threshold (80)"
    ]


def test_kubelet_field_rules() -> None:
    raw = manifest(
        kubelet={
            "imageGCHighThresholdPercent": 101,
            "containerLogMaxSize": "50MB",
            "containerLogMaxFiles": 1,
            "cpuManagerPolicy": "dynamic",
            "cpuCFSQuotaPeriod": "a while",
        }
    )

    assert problems(raw) == [
        "AKSNodeClass default: spec.kubelet.cpuManagerPolicy: Input should be 'none' or 'static'",
        'AKSNodeClass default: spec.kubelet.cpuCFSQuotaPeriod: "a while" is not a duration such as "100ms"',
        "AKSNodeClass default: spec.kubelet.imageGCHighThresholdPercent: Input should be less than or equal to 100",
        "AKSNodeClass default: spec.kubelet.containerLogMaxSize: String should match pattern "
        "'^\\d+(E|P|T|G|M|K|Ei|Pi|Ti|Gi|Mi|Ki)$'",
        "AKSNodeClass default: spec.kubelet.containerLogMaxFiles: Input should be greater than or equal to 2",
    ]


# --- FIPS and swap --------------------------------------------------------------------------------------


def trusted_launch(enabled: bool) -> dict[str, Any]:
    return {"trustedLaunch": {"vtpm": True, "secureBoot": True}} if enabled else {}


@pytest.mark.parametrize(
    ("family", "trusted"),
    [
        ("Ubuntu", False),
        ("Ubuntu", True),
        ("Ubuntu2204", True),
        ("AzureLinux", False),
    ],
)
def test_fips_allowed(family: str, trusted: bool) -> None:
    node_class = AKSNodeClass.parse(
        manifest(fipsMode="FIPS", imageFamily=family, security=trusted_launch(trusted))
    )

    assert node_class.spec.trusted_launch_enabled is trusted


@pytest.mark.parametrize(
    ("family", "trusted", "rule"),
    [
        ("Ubuntu2404", False, "FIPS is not supported with imageFamily Ubuntu2404"),
        ("Ubuntu2404", True, "FIPS is not supported with imageFamily Ubuntu2404"),
        (
            "Ubuntu2204",
            False,
            "FIPS with imageFamily Ubuntu2204 requires Trusted Launch (vtpm or secureBoot)",
        ),
        ("AzureLinux", True, "FIPS with Trusted Launch is not supported with imageFamily AzureLinux"),
    ],
)
def test_fips_rejected(family: str, trusted: bool, rule: str) -> None:
    assert problems(manifest(fipsMode="FIPS", imageFamily=family, security=trusted_launch(trusted))) == [
        f"AKSNodeClass default: spec.fipsMode: {rule}"
    ]


# --- Windows --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", ["Windows2022", "Windows2025"])
def test_windows_refuses_the_linux_only_settings_naming_each_field(family: str) -> None:
    raw = manifest(
        imageFamily=family,
        linuxOSConfig={"transparentHugePageEnabled": "never"},
        artifactStreaming={"enabled": True},
        localDNS=local_dns(),
    )
    found = problems(raw)

    for field, setting in (
        ("linuxOSConfig", "linuxOSConfig"),
        ("artifactStreaming.enabled", "artifact streaming"),
        ("localDNS.mode", "LocalDNS"),
    ):
        assert (
            f"AKSNodeClass default: spec.{field}: {setting} is not supported with imageFamily {family}"
            in found
        )


def test_windows_accepts_what_it_ignores_when_it_is_off() -> None:
    nodeclass = AKSNodeClass.parse(
        manifest(
            imageFamily="Windows2022",
            artifactStreaming={"enabled": False},
            localDNS=local_dns() | {"mode": "Disabled"},
        )
    )

    assert nodeclass.spec.image_family.is_windows


@pytest.mark.parametrize(
    ("family", "fips", "trusted", "enabled"),
    [
        ("Windows2022", None, False, False),
        ("Windows2022", "FIPS", False, True),
        ("Windows2022", "Disabled", False, False),
        ("Windows2025", None, False, True),
        ("Windows2025", "FIPS", True, True),
        ("Windows2025", None, True, True),
    ],
)
def test_windows_fips_follows_aks(family: str, fips: str | None, trusted: bool, enabled: bool) -> None:
    spec = {"imageFamily": family, "security": trusted_launch(trusted)}
    if fips is not None:
        spec["fipsMode"] = fips

    assert AKSNodeClass.parse(manifest(**spec)).spec.fips_enabled is enabled


@pytest.mark.parametrize(
    ("spec", "field", "rule"),
    [
        (
            {"imageFamily": "Windows2025", "fipsMode": "Disabled"},
            "fipsMode",
            "FIPS cannot be disabled with imageFamily Windows2025",
        ),
        (
            {"imageFamily": "Windows2022", "security": {"trustedLaunch": {"vtpm": True}}},
            "security.trustedLaunch",
            "Trusted Launch is not supported with imageFamily Windows2022",
        ),
    ],
)
def test_windows_fips_and_trusted_launch_rules(spec: dict[str, Any], field: str, rule: str) -> None:
    assert problems(manifest(**spec)) == [f"AKSNodeClass default: spec.{field}: {rule}"]


def test_fips_disabled_has_no_rules() -> None:
    assert AKSNodeClass.parse(manifest(fipsMode="Disabled", imageFamily="Ubuntu2404"))


def test_one_trusted_launch_setting_is_enough() -> None:
    security = {"trustedLaunch": {"secureBoot": True}}

    assert AKSNodeClass.parse(manifest(fipsMode="FIPS", imageFamily="Ubuntu2204", security=security))


def test_a_swap_file_needs_fail_swap_on_false() -> None:
    swap = {"swapFileSize": "1500Mi"}
    rule = [
        "AKSNodeClass default: spec.kubelet.failSwapOn: must be set to false when linuxOSConfig.swapFileSize is "
        "specified"
    ]

    assert AKSNodeClass.parse(manifest(linuxOSConfig=swap, kubelet={"failSwapOn": False}))
    assert problems(manifest(linuxOSConfig=swap)) == rule
    assert problems(manifest(linuxOSConfig=swap, kubelet={})) == rule
    assert problems(manifest(linuxOSConfig=swap, kubelet={"failSwapOn": True})) == rule


# --- Linux OS configuration ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "low", "high"),
    [
        ("fsAioMaxNr", 65536, 6553500),
        ("fsFileMax", 8192, 12000500),
        ("fsInotifyMaxUserWatches", 781250, 2097152),
        ("fsNrOpen", 8192, 20000500),
        ("kernelThreadsMax", 20, 513785),
        ("netCoreNetdevMaxBacklog", 1000, 3240000),
        ("netCoreOptmemMax", 20480, 4194304),
        ("netCoreRmemDefault", 212992, 134217728),
        ("netCoreRmemMax", 212992, 134217728),
        ("netCoreSomaxconn", 4096, 3240000),
        ("netCoreWmemDefault", 212992, 134217728),
        ("netCoreWmemMax", 212992, 134217728),
        ("netIPv4NeighDefaultGcThresh1", 128, 80000),
        ("netIPv4NeighDefaultGcThresh2", 512, 90000),
        ("netIPv4NeighDefaultGcThresh3", 1024, 100000),
        ("netIPv4TCPFinTimeout", 5, 120),
        ("netIPv4TCPKeepaliveProbes", 1, 15),
        ("netIPv4TCPKeepaliveTime", 30, 432000),
        ("netIPv4TCPMaxSynBacklog", 128, 3240000),
        ("netIPv4TCPMaxTwBuckets", 8000, 1440000),
        ("netIPv4TCPKeepaliveIntvl", 10, 90),
        ("netNetfilterNfConntrackBuckets", 65536, 524288),
        ("netNetfilterNfConntrackMax", 131072, 2097152),
        ("vmMaxMapCount", 65530, 262144),
        ("vmSwappiness", 0, 100),
        ("vmVfsCachePressure", 0, 100),
    ],
)
def test_sysctl_ranges(field: str, low: int, high: int) -> None:
    def sysctls(value: int) -> dict[str, Any]:
        return manifest(linuxOSConfig={"sysctls": {field: value}})

    assert AKSNodeClass.parse(sysctls(low))
    assert AKSNodeClass.parse(sysctls(high))
    assert problems(sysctls(low - 1)) == [
        f"AKSNodeClass default: spec.linuxOSConfig.sysctls.{field}: Input should be greater than or equal to {low}"
    ]
    assert problems(sysctls(high + 1)) == [
        f"AKSNodeClass default: spec.linuxOSConfig.sysctls.{field}: Input should be less than or equal to {high}"
    ]


def test_sysctl_orderings() -> None:
    raw = manifest(
        linuxOSConfig={
            "sysctls": {
                "netCoreRmemDefault": 300000,
                "netCoreRmemMax": 212992,
                "netCoreWmemDefault": 300000,
                "netCoreWmemMax": 212992,
                "netIPv4NeighDefaultGcThresh1": 4096,
                "netIPv4NeighDefaultGcThresh2": 2048,
                "netIPv4NeighDefaultGcThresh3": 1024,
            }
        }
    )

    assert problems(raw) == [
        "AKSNodeClass default: spec.linuxOSConfig.sysctls.netCoreRmemDefault: 300000 must be <= netCoreRmemMax "
        "(212992)",
        "AKSNodeClass default: spec.linuxOSConfig.sysctls.netCoreWmemDefault: 300000 must be <= netCoreWmemMax "
        "(212992)",
        "AKSNodeClass default: spec.linuxOSConfig.sysctls.netIPv4NeighDefaultGcThresh1: 4096 must be <= "
        "netIPv4NeighDefaultGcThresh2 (2048)",
        "AKSNodeClass default: spec.linuxOSConfig.sysctls.netIPv4NeighDefaultGcThresh2: 2048 must be <= "
        "netIPv4NeighDefaultGcThresh3 (1024)",
    ]


@pytest.mark.parametrize("ports", ["1024 32768", "60999 65535", "32768 60999"])
def test_local_port_range_valid(ports: str) -> None:
    assert AKSNodeClass.parse(manifest(linuxOSConfig={"sysctls": {"netIPv4IPLocalPortRange": ports}}))


@pytest.mark.parametrize(
    ("ports", "rules"),
    [
        ("1023 32768", ["the first port (1023) must be in [1024, 60999]"]),
        ("1024 65536", ["the last port (65536) must be in [32768, 65535]"]),
        ("50000 40000", ["the first port (50000) must be <= the last port (40000)"]),
        (
            "61000 32768",
            [
                "the first port (61000) must be in [1024, 60999]",
                "the first port (61000) must be <= the last port (32768)",
            ],
        ),
    ],
)
def test_local_port_range_invalid(ports: str, rules: list[str]) -> None:
    assert problems(manifest(linuxOSConfig={"sysctls": {"netIPv4IPLocalPortRange": ports}})) == [
        f"AKSNodeClass default: spec.linuxOSConfig.sysctls.netIPv4IPLocalPortRange: {rule}" for rule in rules
    ]


def test_local_port_range_is_two_numbers() -> None:
    assert problems(manifest(linuxOSConfig={"sysctls": {"netIPv4IPLocalPortRange": "1024-65535"}})) == [
        "AKSNodeClass default: spec.linuxOSConfig.sysctls.netIPv4IPLocalPortRange: String should match pattern "
        "'^\\d+ \\d+$'"
    ]


def test_transparent_huge_pages_and_swap_size_values() -> None:
    raw = manifest(
        linuxOSConfig={
            "transparentHugePageEnabled": "sometimes",
            "transparentHugePageDefrag": "later",
            "swapFileSize": "2GB",
        },
        kubelet={"failSwapOn": False},
    )

    assert problems(raw) == [
        "AKSNodeClass default: spec.linuxOSConfig.swapFileSize: String should match pattern "
        "'^\\d+(E|P|T|G|M|K|Ei|Pi|Ti|Gi|Mi|Ki)$'",
        "AKSNodeClass default: spec.linuxOSConfig.transparentHugePageDefrag: Input should be 'always', 'defer', "
        "'defer+madvise', 'madvise' or 'never'",
        "AKSNodeClass default: spec.linuxOSConfig.transparentHugePageEnabled: Input should be 'always', 'madvise' "
        "or 'never'",
    ]


# --- LocalDNS ---------------------------------------------------------------------------------------------


def test_local_dns_valid() -> None:
    node_class = AKSNodeClass.parse(manifest(localDNS=local_dns()))

    assert node_class.spec.local_dns is not None
    assert [override.zone for override in node_class.spec.local_dns.vnet_dns_overrides] == [
        ".",
        "cluster.local",
    ]


def test_local_dns_needs_the_root_and_cluster_zones() -> None:
    raw = manifest(localDNS=local_dns(vnet=[zone(".")], kube=[zone("cluster.local")]))

    assert problems(raw) == [
        "AKSNodeClass default: spec.localDNS.vnetDNSOverrides: must contain the zones '.' and 'cluster.local' "
        "(missing ['cluster.local'])",
        "AKSNodeClass default: spec.localDNS.kubeDNSOverrides: must contain the zones '.' and 'cluster.local' "
        "(missing ['.'])",
    ]


def test_local_dns_zones_are_unique() -> None:
    raw = manifest(localDNS=local_dns(vnet=[zone("."), zone("cluster.local"), zone(".")]))

    assert problems(raw) == [
        "AKSNodeClass default: spec.localDNS.vnetDNSOverrides[2].zone: zone '.' appears more than once"
    ]


def test_vnet_dns_may_not_forward_outside_the_cluster_to_core_dns() -> None:
    vnet = [
        zone(".", forwardDestination="ClusterCoreDNS"),
        zone("cluster.local"),
        zone("example.com", forwardDestination="ClusterCoreDNS"),
        zone("svc.cluster.local", forwardDestination="ClusterCoreDNS"),
    ]

    assert problems(manifest(localDNS=local_dns(vnet=vnet))) == [
        "AKSNodeClass default: spec.localDNS.vnetDNSOverrides[0].forwardDestination: root zone '.' cannot be "
        "forwarded to ClusterCoreDNS from vnetDNSOverrides",
        "AKSNodeClass default: spec.localDNS.vnetDNSOverrides[2].forwardDestination: external domains cannot be "
        "forwarded to ClusterCoreDNS from vnetDNSOverrides",
    ]


def test_kube_dns_may_forward_external_domains_to_core_dns() -> None:
    kube = [
        zone(".", forwardDestination="ClusterCoreDNS"),
        zone("cluster.local"),
        zone("example.com", forwardDestination="ClusterCoreDNS"),
    ]

    assert AKSNodeClass.parse(manifest(localDNS=local_dns(kube=kube)))


def test_cluster_zones_may_not_forward_to_vnet_dns() -> None:
    kube = [zone("."), zone("cluster.local", forwardDestination="VnetDNS")]

    assert problems(manifest(localDNS=local_dns(kube=kube))) == [
        "AKSNodeClass default: spec.localDNS.kubeDNSOverrides[1].forwardDestination: 'cluster.local' cannot be "
        "forwarded to VnetDNS"
    ]


def test_serve_stale_verify_needs_udp() -> None:
    vnet = [zone(".", serveStale="Verify", protocol="ForceTCP"), zone("cluster.local")]

    assert problems(manifest(localDNS=local_dns(vnet=vnet))) == [
        "AKSNodeClass default: spec.localDNS.vnetDNSOverrides[0].serveStale: serveStale Verify cannot be used with "
        "protocol ForceTCP"
    ]


def test_zone_override_fields() -> None:
    vnet = [zone(".", cacheDuration="1d", maxConcurrent=-1, zone="bad zone!"), zone("cluster.local")]
    del vnet[1]["serveStale"]

    assert problems(manifest(localDNS=local_dns(vnet=vnet))) == [
        "AKSNodeClass default: spec.localDNS.vnetDNSOverrides[0].zone: String should match pattern "
        "'^(\\.|[A-Za-z0-9]([A-Za-z0-9_-]{0,61}[A-Za-z0-9])?(\\.[A-Za-z0-9]([A-Za-z0-9_-]{0,61}[A-Za-z0-9])?)*\\.?)$'",
        "AKSNodeClass default: spec.localDNS.vnetDNSOverrides[0].maxConcurrent: Input should be greater than or "
        "equal to 0",
        'AKSNodeClass default: spec.localDNS.vnetDNSOverrides[0].cacheDuration: "1d" is not a duration of hours, '
        'minutes and seconds such as "720h" or "1h30m"',
        "AKSNodeClass default: spec.localDNS.vnetDNSOverrides[1].serveStale: Field required",
    ]


def test_local_dns_mode_and_lists_are_required() -> None:
    assert problems(manifest(localDNS={})) == [
        "AKSNodeClass default: spec.localDNS.mode: Field required",
        "AKSNodeClass default: spec.localDNS.vnetDNSOverrides: Field required",
        "AKSNodeClass default: spec.localDNS.kubeDNSOverrides: Field required",
    ]


# --- LocalDNS state ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "status", "expected"),
    [
        (None, None, LocalDNSState.DISABLED),
        ("Disabled", None, LocalDNSState.DISABLED),
        ("Required", None, LocalDNSState.ENABLED),
        ("Required", "Disabled", LocalDNSState.ENABLED),
        ("Preferred", None, LocalDNSState.DISABLED),
        ("Preferred", "Enabled", LocalDNSState.ENABLED),
        ("Disabled", "Enabled", LocalDNSState.DISABLED),
    ],
)
def test_the_localdns_mode_resolves_as_the_provider_resolves_it(
    mode: str | None, status: str | None, expected: LocalDNSState
) -> None:
    raw = manifest(**({"localDNS": {**local_dns(), "mode": mode}} if mode else {}))
    if status is not None:
        raw["status"] = {"localDNSState": status}
    assert AKSNodeClass.parse(raw).resolved_local_dns_state() is expected
