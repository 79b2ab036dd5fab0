"""Shared test helpers and scenarios: NumPy references, small networks, conv programs, worker
scripts. Test modules import from here (``from tests._support.<module> import ...``), never
from one another; tests/test_house.py keeps it so."""
