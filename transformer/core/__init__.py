"""What every model and task builds on, and which imports nothing of
ours: attention masks, positional encodings, value ranges and losses."""
