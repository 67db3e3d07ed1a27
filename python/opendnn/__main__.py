# SPDX-License-Identifier: Apache-2.0
"""``python -m opendnn`` runs the ``opendnn`` command."""
import sys

from .cli import main

sys.exit(main())
