"""The emulated AKS for the demo, the benchmarks and the tests: the Azure Resource Manager its VMs live in
(`simulator.arm`, served over HTTPS to the real Azure SDK) and the node agents that boot those VMs and join them
to a real Kubernetes control plane by TLS bootstrap, as a kubelet would (`simulator.nodeagent`). Kubernetes
itself is not emulated: the control plane is real (`workers.controlplane`); `simulator.aks` starts the two
parts together."""
