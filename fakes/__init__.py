"""Wire-level fakes of the model provider and web search, for tests, `make fake-claude`,
`make fake-exa` and the benchmarks: the real SDKs talk to them over HTTP.
"""

from __future__ import annotations
