"""Pydantic models of the objects users write (NodePool, NodeClaim, AKSNodeClass) and the Kubernetes objects
the scheduler reads (Pod, Node, workload templates, DaemonSet, PodDisruptionBudget)."""
