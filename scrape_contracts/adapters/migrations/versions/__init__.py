"""One module per revision (Alembic loads them from this folder); see the migrations package's docstring."""
