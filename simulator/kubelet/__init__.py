"""The process kubelet: real pods of this repository's image on the local control plane, as processes.

The local control plane has no kubelet that runs containers (kwok only pretends to) and this machine has no
container engine, so a pod of the Helm chart could be created but never run. The process kubelet registers a
system node pool (Nodes in several zones, with no `karpenter.sh/nodepool` label: neither kwok nor nodewright
manages them) and runs the pods kube-scheduler binds to them as processes: each pod in network, UTS and IPC
namespaces of its own (`sandbox`) on a bridge in a namespace of the cluster's (`network`), each container in a
mount namespace of its own with its volumes (`volumes`), as its user, from the image the repository's Dockerfile
builds (`image`: this machine's virtualenv); probes, restarts, graceful deletion and the pod status as a kubelet
writes it (`pods`); a userspace proxy for Service ClusterIPs and for the host ports pods may reach (`proxy`); a
default StorageClass whose claims are directories (`storage`); the Nodes' Leases (`nodes`).

It needs root, `ip` and `nsenter` (`namespaces.check_host` says what is missing). docs/operations.md, "The
chart on the local control plane", says what it does like a kubelet and what it does not.
"""
