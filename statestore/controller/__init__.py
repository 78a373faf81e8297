"""The controller: replica groups over the cluster's membership (statestore.cluster), and the Control service
(DESIGN.md section 2).

Modules: `replica_groups` (who replicates what: the one function placement replaces), `status` (the Status answer
and its table), `service` (the Control servicer), `server` (run it in-process or as `statestore controller`), `cli`.
"""
