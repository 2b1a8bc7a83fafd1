"""EvidentialRAG: the method (masses, fusion, decision) and its runs in the workflow."""
