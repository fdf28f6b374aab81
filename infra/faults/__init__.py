"""The fault matrix: the whole pipeline on the local stack, under load, with one fault injected
per row (a process killed, a component stopped, hostile records, a second instance, ...), then
every stage reconciled against what was produced. `python -m infra.faults --help`."""
