"""Phalanx's scheduler process: cluster port, informers, gang sources, queue, cycles, binding, reporting."""
