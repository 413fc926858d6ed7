"""The experiments: one python config file each, whose `get_config(arg)`
gives the run's settings and whose docstring gives its command and
expected result. Named on the command line by file
(`--config=experiments/mt_offline.py:runlocal`, from a checkout) or by
name (`--config=mt_offline:runlocal`, from anywhere, installed or not);
`paper/` holds the paper tables' specifications (`reproduce`)."""
