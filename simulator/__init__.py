"""A simulated AKS (Kubernetes state, kube-scheduler and kubelet models, Azure compute) for the demo and tests."""
