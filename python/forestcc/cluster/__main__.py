"""python -m forestcc.cluster: the forestcc-cluster command."""
from .cli import main

main()
