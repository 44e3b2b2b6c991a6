"""The run: Simulation, workers, arrivals, the request table."""
