"""Rule tables shared by the chaos checkers, the trace checkers and the suites (floor 2):
`share` (KIP-932 record states, acknowledgements, delivery counts) and `fencing`
(KIP-98/KIP-890 producer epoch supersession). A rule lives here once."""
