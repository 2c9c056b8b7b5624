"""What a session's checks become for people and machines: the records (JSON, junit
properties; ``records.py``), the terminal summary, PR annotations, the CI step summary,
the HTML page (``html.py`` with ``page/``) and the merge of shard reports. Nothing here
imports pytest."""
