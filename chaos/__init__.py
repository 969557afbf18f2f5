"""Fault injection and checking: histories of client operations, Jepsen-style anomaly
checkers over them, and (later) Toxiproxy-driven faults and broker kill/pause/restart."""
