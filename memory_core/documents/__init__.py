"""Document conversion: files and bytes into ``BrainDocument`` values."""
