"""A real Kubernetes control plane on loopback (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
and kwok standing in for kubelets), built from Kubernetes' own Go modules and cached outside the repository.

It is what the demo, the tests and the benchmarks run nodewright against, through a kubeconfig, exactly as
nodewright runs against AKS.
"""
