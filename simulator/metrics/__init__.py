"""ITL histogram, iteration log, the one TPOT and SLO computation."""
