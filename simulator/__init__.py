"""A simulated AKS (Kubernetes state, kube-scheduler and kubelet models, and the Azure Resource Manager its VMs
live in, served over HTTPS to the real Azure SDK) for the demo and tests."""
