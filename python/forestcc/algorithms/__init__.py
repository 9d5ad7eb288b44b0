"""Schedule generators that need the topology: ForestColl spanning-tree forests.

    from forestcc import topology
    from forestcc.algorithms import generate_forest
    forest = generate_forest(topology.preset("dgx-a100x2"), "all_gather")
    print(forest.report())     # achieved throughput from link loads == the cut bound
"""
from .forest import (
                     COLLECTIVES,
                     Evaluation,
                     Forest,
                     Tree,
                     evaluate_trees,
                     generate_forest,
                     throughput_bound,
)

__all__ = ["COLLECTIVES", "Evaluation", "Forest", "Tree", "evaluate_trees", "generate_forest",
           "throughput_bound"]
