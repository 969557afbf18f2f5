"""The client seam: how a client call's result becomes a history completion."""
