"""``spark-ops thermal soak``: a representative sustained load for a G4 verdict (see :mod:`.run`)."""
