"""`KubernetesCluster`, the `core.cluster.ClusterAPI` of a real cluster (AKS, or the local control plane of
`nodewright demo`) through the official `kubernetes` client, configured by `load_cluster` from a kubeconfig or,
inside a pod, from its service account.

The class is made of the parts of this package, each one responsibility on the shared `Connection`: snapshots,
reads, writes, the watch, events, secrets, leases and objects of any kind.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.config.config_exception import ConfigException

from activities.kubeclient.connection import (
    DEFAULT_BURST,
    DEFAULT_QPS,
    DEFAULT_THREADS,
    DEFAULT_WATCH_TIMEOUT_SECONDS,
    USER_AGENT,
)
from activities.kubeclient.errors import ClusterConfigError, one_line
from activities.kubeclient.events import EventRecorder
from activities.kubeclient.leases import Leases
from activities.kubeclient.secrets import Secrets
from activities.kubeclient.snapshots import Snapshots
from activities.kubeclient.watches import Watches
from activities.kubeclient.writes import Writes


class KubernetesCluster(Snapshots, Writes, Watches, EventRecorder, Secrets, Leases):
    """A Kubernetes cluster through the official client. Use it as an async context manager, or call `close()`.

    Takes the options of `Connection` and `reporting_instance` (the Events' reportingInstance, by default the
    host name)."""


def load_cluster(
    kubeconfig: str | None = None,
    context: str | None = None,
    *,
    qps: float = DEFAULT_QPS,
    burst: int = DEFAULT_BURST,
    threads: int = DEFAULT_THREADS,
    watch_timeout_seconds: int = DEFAULT_WATCH_TIMEOUT_SECONDS,
    request_timeout_seconds: float = 30.0,
    user_agent: str = USER_AGENT,
) -> KubernetesCluster:
    """The cluster of a kubeconfig: `kubeconfig`, else `$NODEWRIGHT_KUBECONFIG`, else `$KUBECONFIG` (paths joined
    by `:` are merged), else `~/.kube/config`; in a pod (`$KUBERNETES_SERVICE_HOST`) with none of them set, the
    pod's service account. `ClusterConfigError` when the file is missing or unreadable or the context unknown;
    call `check_connection()` to find out whether the server answers and accepts the credentials."""
    configuration = k8s.Configuration()
    path = kubeconfig or os.environ.get("NODEWRIGHT_KUBECONFIG") or os.environ.get("KUBECONFIG")
    if path is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        try:
            k8s_config.load_incluster_config(client_configuration=configuration)
        except ConfigException as error:
            raise ClusterConfigError(f"in-cluster service account: {one_line(error)}") from None
        source = "the in-cluster service account"
    else:
        source = _load_kubeconfig(path or "~/.kube/config", context, configuration)
    return KubernetesCluster(
        configuration,
        qps=qps,
        burst=burst,
        threads=threads,
        watch_timeout_seconds=watch_timeout_seconds,
        request_timeout_seconds=request_timeout_seconds,
        source=source,
        user_agent=user_agent,
    )


def _load_kubeconfig(path: str, context: str | None, configuration: k8s.Configuration) -> str:
    """Fill `configuration` from the kubeconfig; where it came from, for messages."""
    files = [Path(item).expanduser() for item in path.split(os.pathsep) if item]
    existing = [item for item in files if item.is_file()]
    if not existing:
        raise ClusterConfigError(f"kubeconfig {path}: no such file")
    for item in existing:
        if not os.access(item, os.R_OK):
            raise ClusterConfigError(f"kubeconfig {item}: permission denied")
    config_file = os.pathsep.join(str(item) for item in existing)
    try:
        contexts, current = k8s_config.list_kube_config_contexts(config_file)
    except (ConfigException, yaml.YAMLError, OSError, TypeError, AttributeError) as error:
        raise ClusterConfigError(f"kubeconfig {config_file}: {one_line(error)}") from None
    names = [str(item.get("name")) for item in contexts or () if isinstance(item, dict)]
    chosen = context or (current or {}).get("name")
    if not chosen:
        raise ClusterConfigError(f"kubeconfig {config_file} sets no current-context; name one with --context")
    if chosen not in names:
        known = ", ".join(names) or "none"
        raise ClusterConfigError(f"kubeconfig {config_file} has no context {chosen!r} (it has: {known})")
    try:
        k8s_config.load_kube_config(
            config_file, chosen, client_configuration=configuration, persist_config=False
        )
    except (ConfigException, yaml.YAMLError, OSError, TypeError, ValueError) as error:
        raise ClusterConfigError(f"kubeconfig {config_file}, context {chosen}: {one_line(error)}") from None
    return f"kubeconfig {config_file}, context {chosen}"
