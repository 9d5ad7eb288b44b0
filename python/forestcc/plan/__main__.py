"""`python -m forestcc.plan verify FILE...`"""
import sys

from .cli import main

sys.exit(main())
