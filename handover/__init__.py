"""The failover and hand-over protocols (DESIGN.md section 4): their steps named and ordered as in the seed.

`Failover` (handover.failover): a lost executor's partitions are steered to their freshest live replica
holders, whose providers materialize them from the replicas.
"""

from handover.failover import Failover, Steer, SteerFunction

__all__ = ["Failover", "Steer", "SteerFunction"]
