"""Topologies: the model (compute and switch nodes, directed links), files, presets, summaries.

    from forestcc import topology
    topo = topology.load("schedules/topologies/dgx-a100x2.json")   # or topology.preset("dgx-a100x2")
    print(topology.summary(topo))
"""
from .files import dumps, from_dict, load, loads, save, to_dict
from .model import COMPUTE, SWITCH, Link, Node, Topology, TopologyError, bidirectional
from .presets import PRESETS, preset
from .show import summary

__all__ = [
           "COMPUTE",
           "PRESETS",
           "SWITCH",
           "Link",
           "Node",
           "Topology",
           "TopologyError",
           "bidirectional",
           "dumps",
           "from_dict",
           "load",
           "loads",
           "preset",
           "save",
           "summary",
           "to_dict",
]
