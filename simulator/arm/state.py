"""The emulator's state: everything it holds, put together from the core (`store`), the long-running
operations (`operations`) and the resource types (`nics`, `vms`)."""

from __future__ import annotations

from simulator.arm.nics import NetworkInterfaces
from simulator.arm.vms import VirtualMachines


class ArmState(VirtualMachines, NetworkInterfaces):
    """Everything the emulator holds: resources, operations, faults, restrictions and counters.

    Tests read it to assert outcomes and write faults into it; the HTTP layer (`simulator.arm.server`) is a thin
    shell around it.
    """
