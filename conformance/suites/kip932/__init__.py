"""KIP-932 (share groups) suite: sessions, membership, share-partition state and durability, on the wire."""
