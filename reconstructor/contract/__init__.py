"""The contract with users and readers: the row schema, the four tables and their columns, how a
table's schema evolves, and the writer identity and lease that keep one driver writing an output."""
