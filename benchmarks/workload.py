"""The pods the lifecycle benchmarks provision nodes for: a deployment whose replicas each need a node of their own
(`benchmarks/lifecycle.py`, and the chaos, upgrade and soak benchmarks on the same shape).
"""

from __future__ import annotations

from typing import Any

SHAPES = ("pinned", "any")
PINNED_INSTANCE_TYPE = "Standard_D2s_v5"
APP = "bench"


def bench_deployment(
    replicas: int, shape: str, name: str = APP, instance_type: str = PINNED_INSTANCE_TYPE
) -> dict[str, Any]:
    """Pods that each need a node of their own (required anti-affinity on the hostname), `pinned` to one instance
    type or not."""
    selector = {"matchLabels": {"app": name}}
    node_selector = {"node.kubernetes.io/instance-type": instance_type} if shape == "pinned" else {}
    anti_affinity = {"labelSelector": selector, "topologyKey": "kubernetes.io/hostname"}
    container = {
        "name": "app",
        "image": "mcr.microsoft.com/oss/kubernetes/pause:3.6",
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": selector,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": node_selector,
                    "affinity": {
                        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [anti_affinity]}
                    },
                    "containers": [container],
                },
            },
        },
    }
