"""One module per public trace format; each turns a file into the trace schema."""
