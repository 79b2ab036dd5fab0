"""The package version: the one place it is written (pyproject reads it from here)."""
__version__ = "0.1.0"

#: version of the JSON documents ipukern writes (profiles, networks, training, sweeps,
#: reports, diffs): each carries ``"schema": "ipukern.<kind>"`` and ``"schema_version"``;
#: bump it when a field is renamed or removed (adding one keeps it)
SCHEMA_VERSION = 1


def schema(kind: str) -> dict[str, object]:
    """The two fields that open every JSON document of ``kind`` ("profile", "network", ...)."""
    return {"schema": f"ipukern.{kind}", "schema_version": SCHEMA_VERSION}
