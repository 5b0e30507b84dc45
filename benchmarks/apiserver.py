"""What the API server was asked during a run: its request counters (/metrics) and, with `--audit`, its audit log
by requester.
"""

from __future__ import annotations

import json
import re
import ssl
import urllib.request
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

from workers.controlplane.run import ControlPlane


def apiserver_requests(plane: ControlPlane) -> dict[str, list[float]]:
    """The API server's requests so far from its /metrics: `VERB resource[/subresource]` to [count, seconds
    spent answering] (seconds are not kept for WATCH, which stays open)."""
    request = urllib.request.Request(
        plane.server + "/metrics", headers={"Authorization": f"Bearer {plane.admin_token}"}
    )
    context = ssl.create_default_context(cafile=str(plane.ca_file))
    with urllib.request.urlopen(request, context=context, timeout=30) as response:
        text = response.read().decode()
    totals: dict[str, list[float]] = {}
    for line in text.splitlines():
        metric, _, rest = line.partition("{")
        if metric not in ("apiserver_request_total", "apiserver_request_duration_seconds_sum"):
            continue
        labels_text, _, value = rest.rpartition("} ")
        labels = dict(re.findall(r'(\w+)="([^"]*)"', labels_text))
        resource = labels.get("resource", "")
        if labels.get("subresource"):
            resource += "/" + labels["subresource"]
        key = f"{labels.get('verb', '')} {resource}"
        counted = totals.setdefault(key, [0.0, 0.0])
        if metric == "apiserver_request_total":
            counted[0] += float(value)
        elif labels.get("verb") != "WATCH":
            counted[1] += float(value)
    return totals


AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived", "ResponseStarted"],
    "rules": [{"level": "Metadata"}],
}
"""`--audit`: every request once, without bodies (auditing costs the API server CPU of its own)."""


def requester(event: dict[str, Any]) -> str:
    """Who made an audited request: a controller's service account, a node, or the client's User-Agent."""
    user = event.get("user", {}).get("username", "")
    agent = event.get("userAgent", "").split(" ")[0].split("/v")[0]
    if user.startswith("system:serviceaccount:kube-system:"):
        return user.rpartition(":")[2]
    if user.startswith("system:node:") or user.startswith("system:bootstrap:"):
        return f"{user.split(':')[1]} ({agent})"
    return agent or user


def audit_profile(log: Path, since: float, until: float) -> list[dict[str, Any]]:
    """The audited requests made between two moments, by requester, verb and resource; the most frequent
    first."""
    counted: Counter[str] = Counter()
    with log.open() as lines:
        for line in lines:
            event = json.loads(line)
            moment = event.get("requestReceivedTimestamp", "")
            at = datetime.fromisoformat(moment.replace("Z", "+00:00")).timestamp() if moment else 0.0
            if not since <= at <= until:
                continue
            ref = event.get("objectRef", {})
            resource = ref.get("resource", event.get("requestURI", "").split("?")[0])
            if ref.get("subresource"):
                resource += "/" + ref["subresource"]
            counted[f"{requester(event)} {event.get('verb', '').upper()} {resource}"] += 1
    return [{"request": key, "count": count} for key, count in counted.most_common()]


def request_profile(before: dict[str, list[float]], after: dict[str, list[float]]) -> list[dict[str, Any]]:
    """The requests of a phase, the most frequent first."""
    rows = []
    for key, (count, seconds) in after.items():
        count -= before.get(key, [0.0, 0.0])[0]
        seconds -= before.get(key, [0.0, 0.0])[1]
        if count >= 1:
            rows.append({"request": key, "count": int(count), "seconds": round(seconds, 1)})
    return sorted(rows, key=lambda row: -row["count"])
