"""Model clients, one module per provider, behind one small interface (`_base.py`)."""
