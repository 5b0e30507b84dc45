"""One pod on one of the process kubelet's Nodes, from its sandbox to its deletion, as a kubelet's pod worker runs
it: volumes first (the pod waits in ContainerCreating while one cannot be made), then the sandbox (a pause
process with the pod's network namespace, its address on the bridge, the host ports it may reach, the
kubelet-managed /etc/hosts), then each container as a process (`simulator.kubelet.sandbox run`) with the
image's entrypoint, the container's environment (service links, envFrom, env with valueFrom and $(VAR)), its
volume mounts and its security context. Probes (httpGet, tcpSocket) run from the cluster's network against the
pod's address: readiness sets the container's `ready`, liveness and startup failures restart it. A container
that exits is restarted per `restartPolicy`, at once the first time, then after a back-off that doubles from 10 s to 5 min
(CrashLoopBackOff). A pod being deleted gets SIGTERM in every container, SIGKILL after its grace period, then its
sandbox is removed and its object deleted. The status written after every change (phase, conditions, IPs,
container states, restart counts) is what `kubectl get pods` shows.

Not done here: init and ephemeral containers, exec and gRPC probes, lifecycle hooks, resource limits (no
cgroups), `kubectl logs` and `exec` (no kubelet API: a container's output is in its log file under the
kubelet's directory), image pulls (one local image, `simulator.kubelet.image`). A pod that needs one of them is
failed with a message that says so, rather than run differently.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ipaddress
import logging
import os
import re
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from simulator.kubeapi import STRATEGIC_MERGE_PATCH, KubeApiError
from simulator.kubelet import volumes
from simulator.kubelet.fields import FieldUnsupported, field_value
from simulator.kubelet.namespaces import netns_of
from simulator.kubelet.network import start_pause, stop_pause
from simulator.kubelet.nodes import now
from simulator.kubelet.proxy import connect, serve_host_ports
from simulator.kubelet.sandbox import Launch, Mount

if TYPE_CHECKING:
    from simulator.kubelet.kubelet import ProcessKubelet

logger = logging.getLogger("nodewright.kubelet")

Json = dict[str, Any]
BACKOFF_START_SECONDS = 10.0
BACKOFF_MAX_SECONDS = 300.0
BACKOFF_RESET_SECONDS = 600.0
RETRY_SECONDS = 1.0
"""How soon a volume or a container's configuration that could not be made is tried again."""
_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
_UNSUPPORTED = {
    "initContainers": "init containers",
    "ephemeralContainers": "ephemeral containers",
    "hostNetwork": "hostNetwork",
    "hostPID": "hostPID",
}


class ConfigNotReady(Exception):
    """A container's configuration refers to something missing (CreateContainerConfigError)."""


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion: a defined variable's value; `$$` is `$`; anything else stays as written."""
    return _REFERENCE.sub(lambda match: "$" if match[0] == "$$" else env.get(match[1], match[0]), text)


def service_variables(services: list[Json]) -> dict[str, str]:
    """The Docker-links variables a kubelet gives every container for each Service with a ClusterIP
    (`<NAME>_SERVICE_HOST`, `<NAME>_PORT_<port>_TCP`, ...)."""
    env: dict[str, str] = {}
    for service in services:
        spec = service.get("spec", {})
        ip, ports = spec.get("clusterIP"), spec.get("ports") or []
        if not ip or ip == "None" or not ports:
            continue
        name = service["metadata"]["name"].upper().replace("-", "_")
        env[f"{name}_SERVICE_HOST"] = ip
        env[f"{name}_SERVICE_PORT"] = str(ports[0]["port"])
        protocol = ports[0].get("protocol", "TCP")
        env[f"{name}_PORT"] = f"{protocol.lower()}://{ip}:{ports[0]['port']}"
        for port in ports:
            protocol = port.get("protocol", "TCP")
            if port.get("name"):
                env[f"{name}_SERVICE_PORT_{port['name'].upper().replace('-', '_')}"] = str(port["port"])
            prefix = f"{name}_PORT_{port['port']}_{protocol}"
            env[prefix] = f"{protocol.lower()}://{ip}:{port['port']}"
            env[f"{prefix}_PROTO"] = protocol.lower()
            env[f"{prefix}_PORT"] = str(port["port"])
            env[f"{prefix}_ADDR"] = ip
    return env


@dataclass
class Container:
    spec: Json
    process: asyncio.subprocess.Process | None = None
    restarts: int = 0
    state: Json = field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    last_state: Json = field(default_factory=dict)
    ready: bool = False
    started: bool = False
    killed_by: str = ""
    """Why the kubelet ended the process (a failed probe), for its terminated state's message."""

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None


class PodRunner:
    def __init__(self, kubelet: ProcessKubelet, pod: Json) -> None:
        self.kubelet = kubelet
        self.pod = pod
        metadata = pod["metadata"]
        self.uid, self.namespace, self.name = metadata["uid"], metadata["namespace"], metadata["name"]
        self.node = pod["spec"]["nodeName"]
        self.directory = kubelet.directory / "pods" / f"{self.namespace}_{self.name}_{self.uid}"
        self.containers = [Container(spec) for spec in pod["spec"]["containers"]]
        self.deleting = asyncio.Event()
        self.gone = False
        self.finished = False
        self.message = ""
        self.reason = ""
        self.ip: ipaddress.IPv4Address | None = None
        self.started_at = now()
        self._sandbox: asyncio.subprocess.Process | None = None
        self._host_servers: list[asyncio.Server] = []
        self._conditions: dict[str, tuple[str, str]] = {}
        self._dirty = asyncio.Event()
        self._written: Json | None = None
        self._shutdown_grace: float | None = None

    # --- what the kubelet tells it -------------------------------------------------------------------------

    def update(self, pod: Json) -> None:
        self.pod = pod
        if pod["metadata"].get("deletionTimestamp"):
            self.deleting.set()

    def removed(self) -> None:
        self.gone = True
        self.deleting.set()

    def shutdown(self, grace: float) -> None:
        """The kubelet stops (not the pod): end the containers within `grace` and leave the object as it is."""
        self._shutdown_grace = grace
        self.deleting.set()

    @property
    def hostname(self) -> str:
        return str(self.pod["spec"].get("hostname") or self.name)[:63]

    # --- the pod's life ------------------------------------------------------------------------------------

    async def run(self) -> None:
        writer = asyncio.create_task(self._write_status())
        try:
            if await self._admit() and await self._prepare():
                await self._supervise()
            await self.deleting.wait()
        except Exception as error:
            logger.exception("pod %s/%s: %s", self.namespace, self.name, error)
            self.reason, self.message = "ProcessKubeletError", str(error)
            self._changed()
            await self.deleting.wait()
        finally:
            await self._stop()
            await self._teardown()
            writer.cancel()
        if not self.gone and self._shutdown_grace is None:
            await self._flush()
            await self._delete()

    async def _admit(self) -> bool:
        spec = self.pod["spec"]
        refused = [what for key, what in _UNSUPPORTED.items() if spec.get(key)]
        unknown = [c.spec["image"] for c in self.containers if not self.kubelet.image.runs(c.spec["image"])]
        if refused:
            self.reason = "UnsupportedByProcessKubelet"
            self.message = f"the process kubelet does not run pods with {', '.join(refused)}"
            self.finished = True
        for container in self.containers:
            if container.spec["image"] in unknown:
                container.state = {
                    "waiting": {
                        "reason": "ErrImagePull",
                        "message": f"the process kubelet runs only {self.kubelet.image.repository} "
                        "(the repository's Dockerfile, from this machine's virtualenv)",
                    }
                }
        self._changed()
        return not refused and not unknown

    async def _prepare(self) -> bool:
        """Volumes, then the sandbox and its network; False when the pod is deleted first."""
        while not self.deleting.is_set():
            try:
                self.volumes = await volumes.prepare(self.kubelet.api, self.pod, self.directory / "volumes")
                break
            except volumes.VolumeNotReady as error:
                self._waiting_all("ContainerCreating", f"MountVolume.SetUp failed: {error}")
            except volumes.VolumeUnsupported as error:
                self.reason, self.message, self.finished = "UnsupportedByProcessKubelet", str(error), True
                self._changed()
                return False
            await self._pause_or_deleted(RETRY_SECONDS)
        if self.deleting.is_set():
            return False
        self.directory.mkdir(parents=True, exist_ok=True)
        self._sandbox = await start_pause(self.hostname, self.directory / "sandbox.log")
        self.ip = await self.kubelet.network.attach(self.node, self._sandbox.pid)
        self._host_servers = await serve_host_ports(netns_of(self._sandbox.pid), self.kubelet.host_ports)
        self.write_hosts()
        (self.directory / "resolv.conf").write_text(
            f"# the process kubelet's: no cluster DNS, /etc/hosts names the Services\n"
            f"search {self.namespace}.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n"
        )
        for kind in ("passwd", "group"):
            (self.directory / kind).write_text(self.kubelet.image.accounts(kind))
        self._condition("PodReadyToStartContainers", "True")
        self._changed()
        return True

    def write_hosts(self) -> None:
        """The kubelet-managed /etc/hosts: loopback, the pod's own name, and the Services (what cluster DNS
        would answer). Rewritten in place, so the containers' bind mounts see each change."""
        if self.ip is None:
            return
        lines = [
            "# Kubernetes-managed hosts file (the process kubelet's).",
            "127.0.0.1\tlocalhost",
            "::1\tlocalhost ip6-localhost ip6-loopback",
            f"{self.ip}\t{self.hostname}",
        ]
        for (namespace, name), service in sorted(self.kubelet.proxy.services.items()):
            ip = service.get("spec", {}).get("clusterIP")
            if not ip or ip == "None":
                continue
            names = [
                f"{name}.{namespace}.svc.cluster.local",
                f"{name}.{namespace}.svc",
                f"{name}.{namespace}",
            ]
            if namespace == self.namespace:
                names.append(name)
            lines.append(f"{ip}\t{' '.join(names)}")
        path = self.directory / "hosts"
        with path.open("a+") as hosts:
            hosts.seek(0)
            hosts.truncate()
            hosts.write("\n".join(lines) + "\n")

    async def _supervise(self) -> None:
        self._condition("Initialized", "True")
        tasks = [asyncio.create_task(self._keep(container)) for container in self.containers]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
        if not self.deleting.is_set():
            self.finished = True
            self._changed()
            await self._teardown()

    async def _keep(self, container: Container) -> None:
        """Run the container, again after each exit that the restart policy restarts, until the pod is deleted: the
        first restart at once, then after a back-off that doubles from BACKOFF_START_SECONDS (CrashLoopBackOff)."""
        backoff = 0.0
        policy = self.pod["spec"].get("restartPolicy", "Always")
        while not self.deleting.is_set():
            try:
                launch = await self._launch(container)
            except ConfigNotReady as error:
                container.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(error)}}
                self._changed()
                await self._pause_or_deleted(RETRY_SECONDS)
                continue
            began = time.monotonic()
            log = self.directory / container.name / f"{container.restarts}.log"
            with log.open("ab") as output:
                container.process = await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "simulator.kubelet.sandbox",
                    "run",
                    str(launch),
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=output,
                    stderr=output,
                    start_new_session=True,
                )
            container.killed_by = ""
            container.state = {"running": {"startedAt": now()}}
            container.started = "startupProbe" not in container.spec
            container.ready = "readinessProbe" not in container.spec
            self._changed()
            probes = [
                asyncio.create_task(self._probe(container, kind))
                for kind in ("startupProbe", "readinessProbe", "livenessProbe")
                if kind in container.spec
            ]
            exited = asyncio.create_task(container.process.wait())
            deleted = asyncio.create_task(self.deleting.wait())
            await asyncio.wait((exited, deleted), return_when=asyncio.FIRST_COMPLETED)
            deleted.cancel()
            for probe in probes:
                probe.cancel()
            if not exited.done():
                exited.cancel()
                return  # `_stop` ends it and records how
            self._record_exit(container)
            if policy == "Never" or (policy == "OnFailure" and container.process.returncode == 0):
                return
            if time.monotonic() - began > BACKOFF_RESET_SECONDS:
                backoff = 0.0
            container.last_state = container.state
            if backoff:
                container.state = {
                    "waiting": {
                        "reason": "CrashLoopBackOff",
                        "message": f"back-off {backoff:g}s restarting failed container={container.name} "
                        f"pod={self.name}_{self.namespace}({self.uid})",
                    }
                }
                self._changed()
                await self._pause_or_deleted(backoff)
                if self.deleting.is_set():
                    return
            container.restarts += 1
            backoff = min(2 * backoff, BACKOFF_MAX_SECONDS) if backoff else BACKOFF_START_SECONDS

    def _record_exit(self, container: Container) -> None:
        process = container.process
        assert process is not None and process.returncode is not None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(
                process.pid, signal.SIGKILL
            )  # what the container's PID namespace would take down with it
        code = process.returncode if process.returncode >= 0 else 128 - process.returncode
        terminated: Json = {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": container.state.get("running", {}).get("startedAt", now()),
            "finishedAt": now(),
            "containerID": f"process://{process.pid}",
        }
        if container.killed_by:
            terminated["message"] = container.killed_by
        container.state = {"terminated": terminated}
        container.ready = False
        self._changed()

    async def _stop(self) -> None:
        """SIGTERM every running container, SIGKILL what is left after the grace period (0 once the pod is gone)."""
        running = [container for container in self.containers if container.running]
        if not running:
            return
        grace = 0 if self.gone else self._shutdown_grace
        if grace is None:
            grace = self.pod["metadata"].get("deletionGracePeriodSeconds")
        if grace is None:
            grace = self.pod["spec"].get("terminationGracePeriodSeconds", 30)
        for container in running:
            assert container.process is not None
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(container.process.pid, signal.SIGTERM if grace else signal.SIGKILL)
        waits = [container.process.wait() for container in running if container.process is not None]
        try:
            async with asyncio.timeout(max(grace, 0.1)):
                await asyncio.gather(*waits)
        except TimeoutError:
            for container in running:
                assert container.process is not None
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(container.process.pid, signal.SIGKILL)
            await asyncio.gather(*(c.process.wait() for c in running if c.process is not None))
        for container in running:
            self._record_exit(container)

    async def _teardown(self) -> None:
        for server in self._host_servers:
            server.close()
        self._host_servers = []
        if self._sandbox is not None:
            await stop_pause(self._sandbox)
            self._sandbox = None
        if self.ip is not None:
            self.kubelet.network.detach(self.ip)

    async def _delete(self) -> None:
        """The kubelet's last word on a pod being deleted: remove the object now that nothing of it runs."""
        body = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": self.uid},
        }
        with contextlib.suppress(KubeApiError):
            await self.kubelet.api.request("DELETE", self._path(), body)
        volumes.remove(self.directory / "volumes")

    async def _pause_or_deleted(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self.deleting.wait()

    def _waiting_all(self, reason: str, message: str) -> None:
        for container in self.containers:
            container.state = {"waiting": {"reason": reason, "message": message}}
        self._changed()

    # --- a container's process -----------------------------------------------------------------------------

    async def _launch(self, container: Container) -> Path:
        """The container's launch file (`simulator.kubelet.sandbox run`); ConfigNotReady if it refers to a
        missing Secret or ConfigMap key, or runs as root against runAsNonRoot."""
        spec, image = container.spec, self.kubelet.image
        env = await self._environment(container)
        command = [expand(item, env) for item in spec.get("command") or image.entrypoint]
        args = [expand(item, env) for item in spec.get("args") or ([] if spec.get("command") else image.cmd)]
        pod_context = self.pod["spec"].get("securityContext") or {}
        context = {**pod_context, **(spec.get("securityContext") or {})}
        uid = context.get("runAsUser", image.uid)
        gid = context.get("runAsGroup", image.gid if "runAsUser" not in context else 0)
        if context.get("runAsNonRoot") and uid == 0:
            raise ConfigNotReady("container has runAsNonRoot and image will run as root")
        groups = [
            *([pod_context["fsGroup"]] if "fsGroup" in pod_context else []),
            *pod_context.get("supplementalGroups", []),
        ]
        mounts = [
            Mount(str(self.directory / name), f"/etc/{name}", read_only=name in ("passwd", "group"))
            for name in ("hosts", "resolv.conf", "passwd", "group")
        ]
        for item in spec.get("volumeMounts") or []:
            source = self.volumes[item["name"]]
            if item.get("subPath"):
                source = source / item["subPath"]
            volume = next(v for v in self.pod["spec"].get("volumes") or [] if v["name"] == item["name"])
            read_only = bool(item.get("readOnly")) or any(
                kind in volume for kind in ("secret", "configMap", "projected", "downwardAPI")
            )
            mounts.append(Mount(str(source), item["mountPath"], read_only))
        directory = self.directory / container.name
        launch = Launch(
            sandbox_pid=self._sandbox.pid if self._sandbox else 0,
            kubelet_pid=os.getpid(),
            argv=[*command, *args],
            env=env,
            working_dir=spec.get("workingDir") or image.working_dir,
            scratch=str(directory / f"scratch-{container.restarts}"),
            uid=uid,
            gid=gid,
            groups=groups,
            mounts=mounts,
            read_only_root=bool(context.get("readOnlyRootFilesystem")),
            no_new_privileges=context.get("allowPrivilegeEscalation") is False,
            reveal=list(image.paths),
        )
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"launch-{container.restarts}.json"
        launch.dump(path)
        return path

    async def _environment(self, container: Container) -> dict[str, str]:
        """The image's variables, then the service links, envFrom and env (each overriding the ones before)."""
        env = dict(self.kubelet.image.environment)
        env["HOSTNAME"] = self.hostname
        services = self.kubelet.proxy.services
        linked = [services[key] for key in services if key[0] == self.namespace]
        if self.pod["spec"].get("enableServiceLinks") is False:
            linked = []
        kubernetes = services.get(("default", "kubernetes"))
        env |= service_variables([*linked, *([kubernetes] if kubernetes else [])])
        for source in container.spec.get("envFrom") or []:
            kind = "Secret" if "secretRef" in source else "ConfigMap"
            reference = source["secretRef" if kind == "Secret" else "configMapRef"]
            data = await self._data(kind, reference["name"], bool(reference.get("optional")))
            env |= {source.get("prefix", "") + key: value for key, value in data.items()}
        for item in container.spec.get("env") or []:
            if "valueFrom" not in item:
                env[item["name"]] = expand(item.get("value", ""), env)
                continue
            value = await self._value_from(item["name"], item["valueFrom"])
            if value is not None:
                env[item["name"]] = value
        return env

    async def _value_from(self, name: str, source: Json) -> str | None:
        if "fieldRef" in source:
            try:
                return field_value(self.pod | {"status": self._status()}, source["fieldRef"]["fieldPath"])
            except FieldUnsupported as error:
                raise ConfigNotReady(f"{name}: {error}") from None
        for kind, key in (("Secret", "secretKeyRef"), ("ConfigMap", "configMapKeyRef")):
            if key in source:
                reference = source[key]
                optional = bool(reference.get("optional"))
                data = await self._data(kind, reference["name"], optional)
                if reference["key"] not in data:
                    if optional:
                        return None
                    raise ConfigNotReady(
                        f"couldn't find key {reference['key']} in {kind} {self.namespace}/{reference['name']}"
                    )
                return data[reference["key"]]
        raise ConfigNotReady(f"{name}: valueFrom {sorted(source)} is not supported by the process kubelet")

    async def _data(self, kind: str, name: str, optional: bool) -> dict[str, str]:
        plural = "secrets" if kind == "Secret" else "configmaps"
        found = await self.kubelet.api.get(f"/api/v1/namespaces/{self.namespace}/{plural}/{name}")
        if found is None:
            if optional:
                return {}
            raise ConfigNotReady(f'{kind.lower()} "{name}" not found')
        data = found.get("data") or {}
        if kind == "Secret":
            return {key: base64.b64decode(value).decode(errors="replace") for key, value in data.items()}
        return dict(data)

    # --- probes --------------------------------------------------------------------------------------------

    async def _probe(self, container: Container, kind: str) -> None:
        probe = container.spec[kind]
        period = probe.get("periodSeconds", 10)
        threshold = {"success": probe.get("successThreshold", 1), "failure": probe.get("failureThreshold", 3)}
        await asyncio.sleep(probe.get("initialDelaySeconds", 0))
        successes = failures = 0
        while container.running:
            if kind != "startupProbe" and not container.started:
                await asyncio.sleep(1)
                continue
            failure = await self._check(container, probe)
            successes, failures = (successes + 1, 0) if failure is None else (0, failures + 1)
            if kind == "readinessProbe":
                ready = container.ready
                if successes >= threshold["success"]:
                    ready = True
                elif failures >= threshold["failure"]:
                    ready = False
                if ready != container.ready:
                    container.ready = ready
                    self._changed()
            elif kind == "startupProbe" and failure is None:
                container.started = True
                self._changed()
                return
            elif failures >= threshold["failure"]:
                what = "Liveness" if kind == "livenessProbe" else "Startup"
                container.killed_by = f"{what} probe failed: {failure}"
                logger.info(
                    "pod %s/%s: container %s: %s, restarting it",
                    self.namespace,
                    self.name,
                    container.name,
                    container.killed_by,
                )
                await self._kill(container, self.pod["spec"].get("terminationGracePeriodSeconds", 30))
                return
            await asyncio.sleep(period)

    async def _kill(self, container: Container, grace: float) -> None:
        assert container.process is not None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(container.process.pid, signal.SIGTERM)
        try:
            async with asyncio.timeout(grace):
                await container.process.wait()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(container.process.pid, signal.SIGKILL)

    async def _check(self, container: Container, probe: Json) -> str | None:
        """One probe from the cluster's network to the pod's address: None on success, else why it failed."""
        handler = probe.get("httpGet") or probe.get("tcpSocket")
        if handler is None:
            return f"the process kubelet runs only httpGet and tcpSocket probes, not {sorted(set(probe) & {'exec', 'grpc'})}"
        port = handler["port"]
        if isinstance(port, str) and not port.isdigit():
            named = [p["containerPort"] for p in container.spec.get("ports") or [] if p.get("name") == port]
            if not named:
                return f"no port named {port}"
            port = named[0]
        try:
            async with asyncio.timeout(probe.get("timeoutSeconds", 1)):
                reader, writer = await connect(self.kubelet.network.netns, str(self.ip), int(port))
                try:
                    if "tcpSocket" in probe:
                        return None
                    request = (
                        f"GET {handler.get('path', '/')} HTTP/1.1\r\nHost: {self.ip}:{port}\r\n"
                        "User-Agent: kube-probe/1.36\r\nConnection: close\r\n\r\n"
                    )
                    writer.write(request.encode())
                    await writer.drain()
                    status_line = (await reader.readline()).decode(errors="replace").split()
                finally:
                    writer.close()
        except (OSError, TimeoutError) as error:
            return f'Get "http://{self.ip}:{port}{handler.get("path", "/")}": {error or "timeout"}'
        code = int(status_line[1]) if len(status_line) > 1 and status_line[1].isdigit() else 0
        return None if 200 <= code < 400 else f"HTTP probe failed with statuscode: {code}"

    # --- status --------------------------------------------------------------------------------------------

    def _changed(self) -> None:
        self._dirty.set()

    def _condition(self, kind: str, status: str) -> None:
        if self._conditions.get(kind, ("", ""))[0] != status:
            self._conditions[kind] = (status, now())

    def _phase(self) -> str:
        states = [container.state for container in self.containers]
        if self.finished and (self.reason or all("terminated" in state for state in states)):
            failed = self.reason or any(state["terminated"]["exitCode"] != 0 for state in states)
            return "Failed" if failed else "Succeeded"
        if any("running" in state for state in states) or any(c.restarts for c in self.containers):
            return "Running"
        return "Pending"

    def _status(self) -> Json:
        ready = all(container.ready and container.running for container in self.containers)
        self._condition("ContainersReady", str(ready))
        self._condition("Ready", str(ready))
        if self.finished:
            self._condition("PodReadyToStartContainers", "False")
        node_ip = self.kubelet.nodes.addresses.get(self.node)
        status: Json = {
            "phase": self._phase(),
            "conditions": [
                {"type": kind, "status": value, "lastTransitionTime": since, "lastProbeTime": None}
                for kind, (value, since) in self._conditions.items()
            ],
            "startTime": self.started_at,
            "containerStatuses": [
                {
                    "name": container.name,
                    "image": container.spec["image"],
                    "imageID": f"process://{self.kubelet.image.repository}",
                    **(
                        {"containerID": f"process://{container.process.pid}"}
                        if container.process is not None
                        else {}
                    ),
                    "ready": container.ready and container.running,
                    "started": container.started and container.running,
                    "restartCount": container.restarts,
                    "state": container.state,
                    "lastState": container.last_state,
                }
                for container in self.containers
            ],
        }
        if node_ip:
            status |= {"hostIP": node_ip, "hostIPs": [{"ip": node_ip}]}
        if self.ip is not None:
            status |= {"podIP": str(self.ip), "podIPs": [{"ip": str(self.ip)}]}
        if self.reason:
            status |= {"reason": self.reason, "message": self.message}
        return status

    async def _write_status(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            await self._flush()
            await asyncio.sleep(0.05)

    async def _flush(self) -> None:
        status = self._status()
        if status == self._written or self.gone:
            return
        try:
            await self.kubelet.api.patch(self._path("status"), {"status": status}, STRATEGIC_MERGE_PATCH)
            self._written = status
        except KubeApiError as error:
            if error.status == 404:
                return
            logger.warning("pod %s/%s: status not written: %s", self.namespace, self.name, error)
            self._dirty.set()

    def _path(self, subresource: str = "") -> str:
        return f"/api/v1/namespaces/{self.namespace}/pods/{self.name}" + (
            f"/{subresource}" if subresource else ""
        )
