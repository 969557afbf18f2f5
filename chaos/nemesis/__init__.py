"""The fault layer (Jepsen's nemesis): fault specs, seeded schedules, injectors.

``base`` holds the contract every injector and every workload runner shares; the
injectors (process, role, Toxiproxy network, per-request) live in sibling modules.
"""
