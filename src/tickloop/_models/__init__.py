"""Model clients, one module per provider, behind one small interface (`_base.py`).

The package imports nothing itself: a provider's client (and httpx with it) loads when
it is first used, so a run on `tl.ScriptedModel` never imports an HTTP stack.
"""
