"""The emulator's state: everything it holds, put together from the core (`store`), the long-running
operations (`operations`), the resource types (`nics`, `vms`) and Spot evictions (`evictions`)."""

from __future__ import annotations

from simulator.arm.evictions import Evictions
from simulator.arm.nics import NetworkInterfaces
from simulator.arm.vms import VirtualMachines


class ArmState(Evictions, VirtualMachines, NetworkInterfaces):
    """Everything the emulator holds: resources, operations, Scheduled Events, faults, restrictions and counters.

    Tests read it to assert outcomes and write faults into it; the HTTP layer (`simulator.arm.server`) is a thin
    shell around it.
    """
