"""The model seam: the only code that talks to the model provider (through its SDK's public
API), what each model takes and costs, and reading its replies tolerantly.
"""

from __future__ import annotations
