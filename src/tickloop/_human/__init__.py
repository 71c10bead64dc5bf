"""Human approval where people are: a terminal prompt, a local page, an inbox over a store.

The web stack (Starlette, Hypercorn) is the `web` extra and loads only when a page is
served; the console hook needs nothing beyond tickloop.
"""

from ._browser import BrowserApproval
from ._console import ConsoleApproval

__all__ = ["BrowserApproval", "ConsoleApproval"]
