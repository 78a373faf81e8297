"""`statestore faults`: the fault-injection suite against a real Spark query on our provider. `scenarios.py` the
matrix, `suite.py` the runner, `suite_query.py` the query and its exact recomputation, `rig.py` the session and the
processes it signals, `report.py` the summary. The fault mechanisms it arms live below, in statestore/faults/."""
