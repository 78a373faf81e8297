"""Fault injection shipped with the product: a TCP proxy that disturbs the network between our processes."""
