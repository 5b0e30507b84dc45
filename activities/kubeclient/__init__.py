"""The Kubernetes API through the official `kubernetes` client: `cluster.KubernetesCluster` is the
`core.cluster.ClusterAPI` of a real cluster, `cluster.load_cluster` makes one from a kubeconfig. Each module holds
one part of it: `connection` (requests, threads, rate limit), `listwatch` and `watches` (watches), `snapshots`,
`reads`, `writes` (with `patches`), `events`, `secrets`, `leases`, `objects` (any kind, through discovery);
`resources` names the kinds and `errors` maps the API server's failures to `core.errors`.
"""
