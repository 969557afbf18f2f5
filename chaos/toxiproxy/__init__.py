"""Toxiproxy (Shopify's TCP fault proxy): a pinned install, a server process, a thin adapter."""
