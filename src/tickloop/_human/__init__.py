"""Human approval where people are: a terminal prompt, a local page, an inbox over a store.

The web stack (Starlette, Hypercorn) is the `web` extra and loads only when a page is
served; the console hook needs nothing beyond tickloop. The package imports none of its
modules itself (`tl.ConsoleApproval` does not load the browser's).
"""
