"""knowledge: knowledge bases, documents, chunks, embeddings, the ingestion queue and its
workers (the owner of their tables)."""
