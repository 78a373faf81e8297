"""The controller: membership of state nodes, replica groups, and the Control service (DESIGN.md section 2).

Modules: `replica_groups` (who replicates what: the one function placement replaces), `membership`
(registered nodes, liveness, what each reports), `status` (the Status answer and its table),
`service` (the Control servicer), `server` (run it in-process or as `statestore controller`), `cli`.
"""
