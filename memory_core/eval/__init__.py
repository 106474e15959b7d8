"""Retrieval evaluation on LoCoMo: evidence recall of packs and top-k fetches beside a BM25 baseline."""
